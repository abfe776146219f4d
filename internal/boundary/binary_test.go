package boundary

import (
	"strings"
	"testing"
)

// testEquipment reports why a package below internal/ is test equipment that
// the shipped binary must not link ("" when it is not): an emulator, test
// support, the providers' conformance cases, or a wire checker. They are
// built for tests: they answer anyone, hold credentials in the clear and
// carry fixed keys, so linking one into the binary ships an attack surface.
func testEquipment(r string) string {
	last := r[strings.LastIndex(r, "/")+1:]
	switch {
	case strings.HasSuffix(last, "emu"):
		return "an emulator"
	case testSupport(r):
		return "test support"
	case last == "conformance":
		return "the providers' conformance cases"
	case last == "wirecheck":
		return "a wire checker"
	}
	return ""
}

// equipmentLinked lists the test equipment among a binary's dependencies.
func equipmentLinked(deps []string) []string {
	var out []string
	for _, d := range deps {
		if !strings.HasPrefix(d, module+"/internal/") {
			continue
		}
		if why := testEquipment(rel(d)); why != "" {
			out = append(out, rel(d)+" ("+why+")")
		}
	}
	return out
}

// TestBinaryShipsNoTestEquipment: the fleet-agent binary links no emulator,
// test support, conformance case or wire checker.
func TestBinaryShipsNoTestEquipment(t *testing.T) {
	root := repoRoot(t)
	const main = module + "/cmd/fleet-agent"
	bin, ok := goList(t, root, "./cmd/fleet-agent")[main]
	if !ok || len(bin.Deps) == 0 {
		t.Fatal("cmd/fleet-agent not listed: the test is looking in the wrong place")
	}
	if bad := equipmentLinked(bin.Deps); len(bad) > 0 {
		t.Errorf("the fleet-agent binary links test equipment: %s; import it from a _test.go file instead", strings.Join(bad, ", "))
	}
}

// TestBinaryCheckCatchesAnEmulator: a throwaway main that links the EKS
// emulator (testdata/linksemu) fails the same check, so the check can fail.
func TestBinaryCheckCatchesAnEmulator(t *testing.T) {
	root := repoRoot(t)
	const pkg = module + "/internal/boundary/testdata/linksemu"
	l, ok := goList(t, root, "./internal/boundary/testdata/linksemu")[pkg]
	if !ok {
		t.Fatal("the throwaway main was not listed")
	}
	bad := equipmentLinked(l.Deps)
	if len(bad) == 0 || !strings.Contains(strings.Join(bad, " "), "providers/aws/eksemu (an emulator)") {
		t.Fatalf("a main linking eksemu passed the check: %q", bad)
	}
	for _, tc := range []struct {
		pkg, want string
	}{
		{"providers/gcp/gkeemu", "an emulator"},
		{"forge/githubemu", "an emulator"},
		{"secrets/vaultemu", "an emulator"},
		{"testutil/kubeplane/demoplane", "test support"},
		{"state/statetest", "test support"},
		{"substrate/crashtest", "test support"},
		{"substrate/killtest", "test support"},
		{"providers/conformance", "the providers' conformance cases"},
		{"providers/digitalocean/doemu/wirecheck", "a wire checker"},
		{"providers/aws", ""},
		{"substrate/incluster", ""},
		{"agent", ""},
	} {
		if got := testEquipment(tc.pkg); got != tc.want {
			t.Errorf("testEquipment(%s) = %q, want %q", tc.pkg, got, tc.want)
		}
	}
}
