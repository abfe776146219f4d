package providers

import (
	"regexp"
	"testing"
)

func TestOwnerSuffixDependsOnInstallationAndPool(t *testing.T) {
	pool := "pool_0123456789abcdef"
	a := Owner{Installation: "0123456789abcdef0123456789abcdef", PoolID: pool}
	b := Owner{Installation: "fedcba9876543210fedcba9876543210", PoolID: pool}
	legacy := Owner{Installation: a.Installation, PoolID: pool, Legacy: true}
	re := regexp.MustCompile(`^[a-z2-7]{6}$`)
	for _, o := range []Owner{a, b} {
		if !re.MatchString(o.Suffix()) {
			t.Errorf("suffix %q is not 6 lower-case base 32 characters", o.Suffix())
		}
	}
	if a.Suffix() == b.Suffix() {
		t.Errorf("two installations share the suffix %q", a.Suffix())
	}
	if got := legacy.Suffix(); got != "abcdef" {
		t.Errorf("legacy suffix %q, want the pool id's last 6 (abcdef)", got)
	}
	// Fixed: a name must not change between builds (it is how a retry
	// finds the first attempt's cluster).
	if got := a.Suffix(); got != a.Suffix() || a.NodePoolName("gpu") != "fa-"+got+"-gpu" {
		t.Errorf("node pool name %q", a.NodePoolName("gpu"))
	}
}

func TestOwnerOwns(t *testing.T) {
	const inst, other, pool = "aaaa", "bbbb", "pool_1"
	o := Owner{Installation: inst, PoolID: pool}
	legacy := Owner{Installation: inst, PoolID: pool, Legacy: true}
	cases := []struct {
		name          string
		labels        map[string]string
		owns, legOwns bool
		foreign       string
	}{
		{"both ours", map[string]string{LabelSubstratePool: pool, LabelInstallation: inst}, true, true, ""},
		{"another installation", map[string]string{LabelSubstratePool: pool, LabelInstallation: other}, false, false, other},
		{"no installation label", map[string]string{LabelSubstratePool: pool}, false, true, ""},
		{"another pool", map[string]string{LabelSubstratePool: "pool_2", LabelInstallation: inst}, false, false, ""},
		{"no labels", nil, false, false, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := o.Owns(c.labels); got != c.owns {
				t.Errorf("Owns = %v, want %v", got, c.owns)
			}
			if got := legacy.Owns(c.labels); got != c.legOwns {
				t.Errorf("legacy Owns = %v, want %v", got, c.legOwns)
			}
			if got := o.Foreign(c.labels); got != c.foreign {
				t.Errorf("Foreign = %q, want %q", got, c.foreign)
			}
		})
	}
}

func TestMayConverge(t *testing.T) {
	o := Owner{Installation: "aaaa", PoolID: "pool_1"}
	spec := ClusterSpec{Name: "fa-gpu-x", Location: "l", Labels: o.Labels()}
	cases := []struct {
		name   string
		labels map[string]string
		ok     bool
	}{
		{"ours", o.Labels(), true},
		{"made before installations", map[string]string{LabelSubstratePool: "pool_1"}, true},
		{"another installation", map[string]string{LabelSubstratePool: "pool_1", LabelInstallation: "bbbb"}, false},
		{"another pool", map[string]string{LabelSubstratePool: "pool_2", LabelInstallation: "aaaa"}, false},
		{"no labels", nil, false},
	}
	for _, c := range cases {
		err := MayConverge("EnsureCluster", spec, Cluster{Ref: ClusterRef{Location: "l", Name: "fa-gpu-x"}, Labels: c.labels})
		if (err == nil) != c.ok || (err != nil && (ClassOf(err) != Terminal || ReasonOf(err) != "nameTaken")) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}
