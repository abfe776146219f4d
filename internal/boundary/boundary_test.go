package boundary

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/fleet-agent/fleet-agent"

// orchestration are the packages that must stay free of cloud SDKs and
// go-github. Packages that do not exist yet are skipped, so the test grows
// with the tree.
var orchestration = []string{"fleet", "state", "plan", "apply", "gitsync", "agent", "substrate",
	// Not named by the design's rule, but on the agent's side of it: the
	// agent imports them, so they must stay as clean as it is.
	"outbox", "inventory", "canon", "livecheck", "secrets", "config", "metrics"}

// forbidden are import path prefixes that only adapters may reach.
var forbidden = []string{
	"github.com/aws/",
	"google.golang.org/api",
	"cloud.google.com/go",
	"github.com/digitalocean/godo",
	"github.com/google/go-github",
}

// adapters are the provider adapters; none may import another.
var adapters = []string{"aws", "gcp", "digitalocean", "fake"}

func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		t.Fatalf("no go.mod at %s: %v", dir, err)
	}
	return dir
}

type listed struct {
	ImportPath string
	Deps       []string
	Imports    []string
}

// goList runs `go list -deps -json` style queries; it returns, for each
// named package, the transitive dependency list.
func goList(t *testing.T, root string, pkgs ...string) map[string]listed {
	t.Helper()
	args := append([]string{"list", "-json=ImportPath,Deps,Imports"}, pkgs...)
	cmd := exec.CommandContext(t.Context(), "go", args...)
	cmd.Dir = root
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	res := map[string]listed{}
	for {
		var l listed
		if err := dec.Decode(&l); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		res[l.ImportPath] = l
	}
	return res
}

func existing(root string, rel ...string) []string {
	var pkgs []string
	for _, r := range rel {
		matches, _ := filepath.Glob(filepath.Join(root, "internal", r, "*.go"))
		for _, m := range matches {
			if !strings.HasSuffix(m, "_test.go") {
				pkgs = append(pkgs, module+"/internal/"+r)
				break
			}
		}
	}
	return pkgs
}

func reachesForbidden(deps []string) []string {
	var bad []string
	for _, d := range deps {
		for _, f := range forbidden {
			if strings.HasPrefix(d, f) {
				bad = append(bad, d)
				break
			}
		}
	}
	return bad
}

func TestBoundaryOrchestrationReachesNoSDK(t *testing.T) {
	root := repoRoot(t)
	pkgs := existing(root, orchestration...)
	if len(pkgs) == 0 {
		t.Fatal("no orchestration package found: the test is looking in the wrong place")
	}
	for path, l := range goList(t, root, pkgs...) {
		if bad := reachesForbidden(l.Deps); len(bad) > 0 {
			t.Errorf("%s reaches %s; declare an interface in the consumer and wire the adapter in cmd/fleet-agent", path, strings.Join(bad, ", "))
		}
	}
}

// TestBoundaryDetectorWorks proves the check can fail: the GitHub adapter,
// when it exists, must be seen reaching go-github.
func TestBoundaryDetectorWorks(t *testing.T) {
	root := repoRoot(t)
	pkgs := existing(root, "forge")
	if len(pkgs) == 0 {
		// Before the forge exists, check the detector on a synthetic list.
		if len(reachesForbidden([]string{"fmt", "github.com/google/go-github/v62/github"})) != 1 {
			t.Fatal("detector missed go-github")
		}
		return
	}
	for path, l := range goList(t, root, pkgs...) {
		if len(reachesForbidden(l.Deps)) == 0 {
			t.Errorf("%s should reach go-github; the detector is blind", path)
		}
	}
}

func TestBoundaryAdaptersStayApart(t *testing.T) {
	root := repoRoot(t)
	var rel []string
	for _, a := range adapters {
		rel = append(rel, "providers/"+a)
	}
	pkgs := existing(root, rel...)
	for path, l := range goList(t, root, pkgs...) {
		for _, d := range l.Deps {
			for _, a := range adapters {
				other := module + "/internal/providers/" + a
				if d != path && (d == other || strings.HasPrefix(d, other+"/")) {
					t.Errorf("adapter %s imports adapter %s", path, d)
				}
			}
		}
	}
}

// TestBoundaryLiveChecksUseOnlyTheInterfaces: the live checks speak to
// providers through internal/providers only; the binary passes the adapters
// in, so livecheck reaches no adapter and no SDK.
func TestBoundaryLiveChecksUseOnlyTheInterfaces(t *testing.T) {
	root := repoRoot(t)
	pkgs := existing(root, "livecheck")
	if len(pkgs) == 0 {
		t.Fatal("internal/livecheck not found: the test is looking in the wrong place")
	}
	for path, l := range goList(t, root, pkgs...) {
		if bad := reachesAdapter(l.Deps); len(bad) > 0 {
			t.Errorf("%s imports adapter %s; take the adapter as an interface from cmd/fleet-agent instead", path, strings.Join(bad, ", "))
		}
		if bad := reachesForbidden(l.Deps); len(bad) > 0 {
			t.Errorf("%s reaches %s", path, strings.Join(bad, ", "))
		}
		if !contains(l.Deps, module+"/internal/providers") {
			t.Errorf("%s does not reach internal/providers: the test is looking at the wrong package", path)
		}
	}
	// The detector sees an adapter when there is one.
	if len(reachesAdapter([]string{"fmt", module + "/internal/providers", module + "/internal/providers/fake"})) != 1 {
		t.Fatal("detector missed the fake adapter")
	}
}

// reachesAdapter lists the provider adapter packages among deps.
func reachesAdapter(deps []string) []string {
	var bad []string
	for _, d := range deps {
		for _, a := range adapters {
			p := module + "/internal/providers/" + a
			if d == p || strings.HasPrefix(d, p+"/") {
				bad = append(bad, d)
			}
		}
	}
	return bad
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestBoundarySubstrateUsesOnlyTheInterfaces: the substrate reaches
// providers through internal/providers only (the binary passes the adapters
// in), and never the plan, the apply or the agent: it reads what apply
// recorded in the state file.
func TestBoundarySubstrateUsesOnlyTheInterfaces(t *testing.T) {
	root := repoRoot(t)
	pkgs := existing(root, "substrate")
	if len(pkgs) == 0 {
		t.Fatal("internal/substrate not found: the test is looking in the wrong place")
	}
	for path, l := range goList(t, root, pkgs...) {
		if bad := reachesAdapter(l.Deps); len(bad) > 0 {
			t.Errorf("%s imports adapter %s; take the adapter as an interface from cmd/fleet-agent instead", path, strings.Join(bad, ", "))
		}
		for _, room := range []string{"plan", "apply", "agent", "livecheck"} {
			if contains(l.Deps, module+"/internal/"+room) {
				t.Errorf("%s reaches internal/%s; the substrate reads the records apply wrote", path, room)
			}
		}
		if !contains(l.Deps, module+"/internal/providers") {
			t.Errorf("%s does not reach internal/providers: the test is looking at the wrong package", path)
		}
	}
}
