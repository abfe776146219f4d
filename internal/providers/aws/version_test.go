package aws_test

import (
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/livecheck"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/providers/aws/eksemu"
)

// TestLiveCheckOfVersions: a created cluster's version is checked against
// EKS's DescribeClusterVersions through the real SDK client: an offered
// minor passes, one EKS does not offer is blocked with the offered ones, a
// cluster without one is told EKS's default; an adopted cluster's version
// is read and handed to the plan.
func TestLiveCheckOfVersions(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	if _, err := h.emu.Seed(eksemu.SeedCluster{Name: "theirs", Version: "1.33", AccessEntries: []eksemu.SeedAccessEntry{{PrincipalArn: userArn, Policies: []string{eksemu.ClusterAdminPolicy}}}}); err != nil {
		t.Fatal(err)
	}
	acc := plan.Account{Name: h.acct.Name, Provider: h.acct.Provider, Config: h.acct.Config}
	two := int64(2)
	check := func(t *testing.T, cluster fleet.Cluster) plan.Verdict {
		t.Helper()
		sub := &fleet.Substrate{Kind: "kubernetes", Account: acc.Name, Cluster: cluster,
			Flavors: []fleet.SubstrateFlavor{{Name: "h100", MachineType: "p5.48xlarge", Nodes: &two, GPUs: &fleet.GPUs{Type: "nvidia-h100", Count: 8}}}}
		v, err := livecheck.New(livecheck.Options{Adapters: map[string]livecheck.Adapter{"aws": h.adapter}}).CheckSubstrate(t.Context(), "gpu-fleet", sub, acc)
		if err != nil {
			t.Fatalf("CheckSubstrate: %v", err)
		}
		if v.Offline {
			t.Fatal("checked offline")
		}
		return v
	}
	for _, version := range []string{"1.33", "1.34", "1.35"} {
		if v := check(t, fleet.Cluster{Create: &fleet.ClusterCreate{Location: "us-east-1", Version: version}}); len(v.Blocked) > 0 {
			t.Errorf("%s blocked: %s", version, v.Blocked)
		}
	}
	v := check(t, fleet.Cluster{Create: &fleet.ClusterCreate{Location: "us-east-1", Version: "1.29"}})
	if want := "version 1.29 is not offered for clusters in us-east-1 at account " + acc.Name + "; it offers: 1.33, 1.34, 1.35"; !strings.Contains(strings.Join(v.Blocked, "\n"), want) {
		t.Errorf("blocked %q, want %q", v.Blocked, want)
	}
	if v := check(t, fleet.Cluster{Create: &fleet.ClusterCreate{Location: "us-east-1"}}); v.DefaultVersion != "1.34" || len(v.Blocked) > 0 {
		t.Errorf("without a version: default %q, blocked %q; want 1.34 and none", v.DefaultVersion, v.Blocked)
	}
	if v := check(t, fleet.Cluster{Adopt: "us-east-1/theirs"}); v.ClusterVersion != "1.33" {
		t.Errorf("the adopted cluster runs %q, want 1.33 (blocked %q)", v.ClusterVersion, v.Blocked)
	}
	// One read per check of a created cluster (five), none for the adopted.
	if n := h.emu.Count("DescribeClusterVersions"); n != 5 {
		t.Errorf("DescribeClusterVersions called %d times, want 5", n)
	}
}
