package release

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Actionlint is the workflow checker, pinned; go run fetches it through
// the Go module proxy (or the module cache) once.
const Actionlint = "github.com/rhysd/actionlint/cmd/actionlint@v1.7.12"

// The release workflow cannot run here; actionlint checks it (syntax,
// expressions, shell scripts when shellcheck is installed) and it must run
// make release, the same target a person runs.
func TestReleaseWorkflowPassesActionlint(t *testing.T) {
	wf := filepath.Join(repoRoot(t), ".github", "workflows", "release.yml")
	b, err := os.ReadFile(wf)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"make release", "tags:", "sha256sum -c SHA256SUMS"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the release workflow does not say %q", want)
		}
	}
	cmd := exec.CommandContext(t.Context(), "go", "run", Actionlint, "-no-color", wf)
	cmd.Dir = repoRoot(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("actionlint: %v\n%s", err, out)
	}
	// The checker itself must be able to fail: a broken workflow is refused.
	bad := filepath.Join(t.TempDir(), "bad.yml")
	if err := os.WriteFile(bad, []byte("on: push\njobs:\n  x:\n    runs-on: ubuntu-24.04\n    steps:\n      - run: echo ${{ github.nosuch }}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd = exec.CommandContext(t.Context(), "go", "run", Actionlint, "-no-color", bad)
	cmd.Dir = repoRoot(t)
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Fatalf("actionlint accepted a broken workflow:\n%s", out)
	}
}
