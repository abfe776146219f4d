package fleet

import (
	"strings"
	"testing"
)

func versionDoc(version string) string {
	v := ""
	if version != "" {
		v = `,"version":` + version
	}
	return `{"version":1,"pools":[{"name":"p","site":"s","class":"vps-host","policy":{"substrate":{"kind":"kubernetes","account":"a","cluster":{"create":{"location":"l"` + v + `}},"flavors":[{"name":"x","machineType":"m"}]}}}]}`
}

// TestClusterVersionIsAMinor: the version is a Kubernetes minor; a patch,
// a "v" or a word is refused at its pointer with a message that says a
// minor is wanted and what was given.
func TestClusterVersionIsAMinor(t *testing.T) {
	for _, ok := range []string{"1.34", "1.0", "1.100"} {
		d, errs := Validate("f", []byte(versionDoc(`"`+ok+`"`)))
		if errs != nil {
			t.Fatalf("%s refused: %s", ok, errs.Text())
		}
		if got := d.Pools[0].Substrate().Cluster.Create.Version; got != ok {
			t.Errorf("%s read as %q", ok, got)
		}
		if !strings.Contains(string(d.Canonical()), `"version":"`+ok+`"`) {
			t.Errorf("%s missing from the normal form: %s", ok, d.Canonical())
		}
	}
	const ptr = "/pools/0/policy/substrate/cluster/create/version"
	for _, bad := range []string{`"1.34.2"`, `"v1.34"`, `"latest"`, `"1.034"`, `"2.1"`, `"1."`, `""`, `"1.34-gke.100"`, `134`} {
		_, errs := Validate("f", []byte(versionDoc(bad)))
		if len(errs) != 1 {
			t.Fatalf("%s: want one error, got %d: %s", bad, len(errs), errs.Text())
		}
		e := errs[0]
		if e.Path != ptr || e.Code != "INVALID_INPUT" {
			t.Errorf("%s: error at %q code %s, want %s INVALID_INPUT", bad, e.Path, e.Code, ptr)
		}
		if !strings.Contains(e.Message, `a Kubernetes minor such as "1.34"`) || !strings.Contains(e.Message, "got ") {
			t.Errorf("%s: message does not say a minor is wanted: %s", bad, e.Message)
		}
	}
	d, errs := Validate("f", []byte(versionDoc("")))
	if errs != nil {
		t.Fatal(errs.Text())
	}
	if got := d.Pools[0].Substrate().Cluster.Create.Version; got != "" {
		t.Errorf("left out, read as %q", got)
	}
	if strings.Contains(string(d.Canonical()), `"version":"`) {
		t.Errorf("a left-out version appears in the normal form: %s", d.Canonical())
	}
}

func TestMinorOf(t *testing.T) {
	cases := map[string]string{"1.33.5-gke.1200": "1.33", "v1.31.2": "1.31", "1.30": "1.30", "1.32.2-do.0": "1.32", "1.29-eks": "1.29"}
	for in, want := range cases {
		m, ok := MinorOf(in)
		if !ok || m.String() != want {
			t.Errorf("MinorOf(%q) = %v, %v; want %s", in, m, ok, want)
		}
	}
	for _, in := range []string{"", "latest", "1", "v", "x.y"} {
		if m, ok := MinorOf(in); ok {
			t.Errorf("MinorOf(%q) = %v, want none", in, m)
		}
	}
	a, _ := ParseMinor("1.9")
	b, _ := ParseMinor("1.10")
	if a.Compare(b) != -1 || b.Compare(a) != 1 || a.Compare(a) != 0 || a.Next() != b {
		t.Error("minors compare as strings, not numbers")
	}
	if _, err := ParseMinor("1.34.1"); err == nil {
		t.Error("ParseMinor took a patch")
	}
}
