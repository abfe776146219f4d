package boundary

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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

// The rooms that may reach each outside library (docs/design.md): a cloud SDK
// only its adapter, go-github only the forge, client-go only the substrate
// and the adapters (and test support that starts a cluster).
var (
	cloudSDKs = map[string]string{
		"aws":          "github.com/aws/",
		"gcp":          "google.golang.org/api",
		"digitalocean": "github.com/digitalocean/godo",
	}
	anyCloudSDK = []string{"github.com/aws/", "google.golang.org/api", "cloud.google.com/go", "github.com/digitalocean/godo"}
	goGitHub    = "github.com/google/go-github"
	clientGo    = []string{"k8s.io/client-go", "k8s.io/api/", "k8s.io/apimachinery"}
	// releaseLibs build images and packages: only internal/release (and
	// through it cmd/fleet-release) may reach them, so the agent's binary
	// carries none of them.
	releaseLibs = []string{"github.com/google/go-containerregistry", "github.com/goreleaser/nfpm"}
	// registryClient is the part of go-containerregistry that asks a
	// registry for a tag's digest: the reference grammar, the Docker
	// credential chain, and the token handshake. internal/imageref may
	// reach it, and through it the agent's binary, so that the node
	// daemon's DaemonSet is pinned by digest; pkg/v1/remote is not in it
	// (it brings mutate, tarball, stream and zstd), nor layout, nor nfpm.
	registryClient = []string{
		"github.com/google/go-containerregistry/pkg/name",
		"github.com/google/go-containerregistry/pkg/authn",
		"github.com/google/go-containerregistry/pkg/logs",
		"github.com/google/go-containerregistry/pkg/v1/remote/transport",
		"github.com/google/go-containerregistry/pkg/v1/remote/internal/authchallenge",
		"github.com/google/go-containerregistry/internal/ipaddr",
		"github.com/google/go-containerregistry/internal/limit",
		"github.com/google/go-containerregistry/internal/redact",
		"github.com/google/go-containerregistry/internal/retry",
		"github.com/google/go-containerregistry/internal/retry/wait",
	}
)

// inRegistryClient reports whether d is one of registryClient's packages
// (exactly: pkg/v1/remote/transport does not let pkg/v1/remote in).
func inRegistryClient(d string) bool { return slices.Contains(registryClient, d) }

// allInternal lists every package under internal/ with what it reaches.
func allInternal(t *testing.T, root string) map[string]listed {
	t.Helper()
	all := goList(t, root, "./internal/...")
	if len(all) < 20 {
		t.Fatalf("only %d packages under internal/: the test is looking in the wrong place", len(all))
	}
	return all
}

// rel is a package's path below internal/.
func rel(path string) string { return strings.TrimPrefix(path, module+"/internal/") }

func under(path, room string) bool { return path == room || strings.HasPrefix(path, room+"/") }

// adapterOf says which provider adapter a package below internal/ belongs
// to ("" for none).
func adapterOf(r string) string {
	for _, a := range adapters {
		if under(r, "providers/"+a) {
			return a
		}
	}
	return ""
}

func hasPrefixAny(d string, prefixes ...string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(d, p) {
			return true
		}
	}
	return false
}

// testSupport reports whether a package below internal/ is test support
// (internal/testutil/..., or a package named *test such as statetest and
// crashtest): only tests import it, and it may wire the fake.
func testSupport(r string) bool {
	last := r[strings.LastIndex(r, "/")+1:]
	return under(r, "testutil") || strings.HasSuffix(last, "test")
}

// loopReaders are the packages that read the running agent (the page, the
// doctor, the local API with its client): each declares the little it
// needs of the loop, so none links the loop itself.
var loopReaders = []string{"ui", "doctor", "localapi"}

func readsTheLoop(r string) bool {
	for _, p := range loopReaders {
		if under(r, p) {
			return true
		}
	}
	return false
}

// violations lists what a package (its path below internal/) breaks of the
// rules of the house by reaching deps.
func violations(r string, deps []string) []string {
	var out []string
	own := adapterOf(r)
	for _, d := range deps {
		if dr := rel(d); strings.HasPrefix(d, module+"/internal/") && testSupport(dr) && !testSupport(r) {
			out = append(out, fmt.Sprintf("%s imports the test support %s: only tests may", r, dr))
		}
		switch {
		case hasPrefixAny(d, anyCloudSDK...):
			if own == "" || !strings.HasPrefix(d, cloudSDKs[own]) && !(own == "gcp" && strings.HasPrefix(d, "cloud.google.com/go")) {
				out = append(out, fmt.Sprintf("%s reaches the cloud SDK %s: only its own adapter under internal/providers/<id> may", r, d))
			}
		case strings.HasPrefix(d, goGitHub):
			if !under(r, "forge") {
				out = append(out, fmt.Sprintf("%s reaches go-github (%s): only internal/forge may; declare what you need as an interface", r, d))
			}
		case hasPrefixAny(d, releaseLibs...):
			if under(r, "imageref") && inRegistryClient(d) {
				break
			}
			if !under(r, "release") {
				out = append(out, fmt.Sprintf("%s reaches the release tooling %s: only internal/release may, outside the agent's binary", r, d))
			}
		case hasPrefixAny(d, clientGo...):
			if own == "" && !under(r, "substrate") && !under(r, "testutil") {
				out = append(out, fmt.Sprintf("%s reaches client-go (%s): only internal/substrate, the adapters and test support may", r, d))
			}
		}
		if d == module+"/internal/agent" && readsTheLoop(r) {
			out = append(out, fmt.Sprintf("%s imports internal/agent, the loop: take the wire types and the client from internal/localapi, and what it needs of the loop as an interface it declares", r))
		}
		if a := adapterOf(rel(d)); strings.HasPrefix(d, module+"/internal/") && a != "" && a != own {
			if own != "" {
				out = append(out, fmt.Sprintf("adapter %s imports adapter %s", r, rel(d)))
			} else if !(testSupport(r) && a == "fake") {
				out = append(out, fmt.Sprintf("%s imports the adapter %s: only cmd/fleet-agent wires adapters in", r, rel(d)))
			}
		}
	}
	return out
}

// TestBoundaryEveryPackage checks every package under internal/ against
// the rules of the house.
func TestBoundaryEveryPackage(t *testing.T) {
	root := repoRoot(t)
	for path, l := range allInternal(t, root) {
		for _, v := range violations(rel(path), l.Deps) {
			t.Error(v)
		}
	}
}

// TestBoundaryRulesCatch: each rule fails on the dependency it forbids and
// lets the allowed ones through.
func TestBoundaryRulesCatch(t *testing.T) {
	m := module + "/internal/"
	for _, tc := range []struct {
		pkg  string
		dep  string
		fail bool
	}{
		{"agent", "github.com/aws/aws-sdk-go-v2/service/eks", true},
		{"substrate", "google.golang.org/api/container/v1", true},
		{"providers/aws", "github.com/aws/aws-sdk-go-v2/service/eks", false},
		{"providers/aws/eksemu", "github.com/aws/aws-sdk-go-v2/service/eks/types", false},
		{"providers/aws", "github.com/digitalocean/godo", true},
		{"providers/gcp", "cloud.google.com/go/compute/metadata", false},
		{"providers/digitalocean", "google.golang.org/api/option", true},
		{"outbox", "github.com/google/go-github/v62/github", true},
		{"forge/githubemu", "github.com/google/go-github/v62/github", false},
		{"agent", "k8s.io/client-go/kubernetes", true},
		{"substrate", "k8s.io/client-go/kubernetes", false},
		{"providers/fake", "k8s.io/api/core/v1", false},
		{"testutil/kubeplane", "k8s.io/client-go/rest", false},
		{"plan", "k8s.io/apimachinery/pkg/types", true},
		{"livecheck", m + "providers/fake", true},
		{"providers/aws", m + "providers/fake", true},
		{"providers/aws/eksemu", m + "providers/aws", false},
		{"providers/conformance", m + "providers", false},
		{"substrate/crashtest", m + "providers/fake", false},
		{"substrate/crashtest", m + "providers/aws", true},
		{"substrate", m + "substrate/crashtest", true},
		{"agent", m + "testutil/gitserver", true},
		{"release", "github.com/google/go-containerregistry/pkg/v1/remote", false},
		{"substrate", "github.com/google/go-containerregistry/pkg/v1/remote", true},
		{"agent", "github.com/goreleaser/nfpm/v2/deb", true},
		{"ui", m + "agent", true},
		{"doctor", m + "agent", true},
		{"localapi", m + "agent", true},
		{"ui", m + "localapi", false},
		{"agent", m + "localapi", false},
		{"imageref", "github.com/google/go-containerregistry/pkg/v1/remote/transport", false},
		{"imageref", "github.com/google/go-containerregistry/pkg/authn", false},
		{"imageref", "github.com/google/go-containerregistry/pkg/v1/remote", true},
		{"imageref", "github.com/google/go-containerregistry/pkg/v1/mutate", true},
		{"imageref", "github.com/google/go-containerregistry/pkg/v1/layout", true},
		{"imageref", "github.com/goreleaser/nfpm/v2", true},
		{"substrate", "github.com/google/go-containerregistry/pkg/name", true},
		{"agent", "github.com/google/go-containerregistry/pkg/v1/remote/transport", true},
	} {
		got := violations(tc.pkg, []string{"fmt", tc.dep})
		if (len(got) > 0) != tc.fail {
			t.Errorf("%s reaching %s: violations %q, want failure %v", tc.pkg, tc.dep, got, tc.fail)
		}
	}
}

// TestBoundaryDetectorWorks proves the checks can fail: the GitHub adapter
// is seen reaching go-github, and each cloud adapter that exists its SDK.
func TestBoundaryDetectorWorks(t *testing.T) {
	root := repoRoot(t)
	all := allInternal(t, root)
	seen := func(pkg, prefix string) {
		t.Helper()
		l, ok := all[module+"/internal/"+pkg]
		if !ok {
			t.Fatalf("internal/%s not listed", pkg)
		}
		for _, d := range l.Deps {
			if strings.HasPrefix(d, prefix) {
				return
			}
		}
		t.Errorf("internal/%s should reach %s; the detector is blind", pkg, prefix)
	}
	seen("forge", goGitHub)
	for id, sdk := range cloudSDKs {
		if len(existing(root, "providers/"+id)) > 0 {
			seen("providers/"+id, sdk)
		}
	}
	if !hasPrefixAny("k8s.io/client-go/rest", clientGo...) || adapterOf("providers/fake/x") != "fake" || adapterOf("providers") != "" {
		t.Fatal("the rules' helpers are wrong")
	}
}

// TestBoundaryBinaryLeavesOutTheReleaseTools: the image and package
// builders live in cmd/fleet-release; the agent's binary reaches none of
// them (only the registry client internal/imageref asks digests with), and
// the release command (the detector's proof) does.
func TestBoundaryBinaryLeavesOutTheReleaseTools(t *testing.T) {
	root := repoRoot(t)
	got := goList(t, root, "./cmd/fleet-agent", "./cmd/fleet-release")
	for _, d := range got[module+"/cmd/fleet-agent"].Deps {
		if hasPrefixAny(d, releaseLibs...) && !inRegistryClient(d) || d == module+"/internal/release" {
			t.Errorf("cmd/fleet-agent reaches %s: the release tooling must stay in cmd/fleet-release", d)
		}
	}
	rel := got[module+"/cmd/fleet-release"]
	for _, lib := range releaseLibs {
		found := false
		for _, d := range rel.Deps {
			found = found || strings.HasPrefix(d, lib)
		}
		if !found {
			t.Errorf("cmd/fleet-release should reach %s; the detector is blind", lib)
		}
	}
}

// TestBoundaryBinaryWiresTheAdapters: cmd/fleet-agent is where adapters
// enter, so it must reach each adapter that exists.
func TestBoundaryBinaryWiresTheAdapters(t *testing.T) {
	root := repoRoot(t)
	bin := goList(t, root, "./cmd/fleet-agent")[module+"/cmd/fleet-agent"]
	for _, a := range adapters {
		if len(existing(root, "providers/"+a)) == 0 {
			continue
		}
		if !contains(bin.Deps, module+"/internal/providers/"+a) {
			t.Errorf("cmd/fleet-agent does not wire the adapter providers/%s: register it in cmd/fleet-agent/adapters.go", a)
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

// TestBoundaryTheLoopStaysBehindTheLocalAPI: the page, the doctor and the
// local API (its client included) exist and do not link internal/agent,
// while the binary, which runs the loop, does (so the check can see it).
func TestBoundaryTheLoopStaysBehindTheLocalAPI(t *testing.T) {
	root := repoRoot(t)
	var pkgs []string
	for _, r := range loopReaders {
		pkgs = append(pkgs, module+"/internal/"+r)
	}
	binary := module + "/cmd/fleet-agent"
	listedPkgs := goList(t, root, append(pkgs, binary)...)
	loop := module + "/internal/agent"
	for _, p := range pkgs {
		l, ok := listedPkgs[p]
		if !ok {
			t.Fatalf("%s is not listed: the test is looking in the wrong place", p)
		}
		if contains(l.Deps, loop) {
			t.Errorf("%s links %s; read the loop through an interface declared in %s", p, loop, rel(p))
		}
	}
	if !contains(listedPkgs[binary].Deps, loop) {
		t.Errorf("%s does not link %s: the check is blind", binary, loop)
	}
}
