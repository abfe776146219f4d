package release

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"
)

// The facts the test binaries are built with: the image and the package
// must carry them through to `fleet-agent version`.
const (
	testVersion  = "v0.42.0"
	testRevision = "4242424242424242424242424242424242424242"
)

var testCreated = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

var (
	binsOnce sync.Once
	bins     map[string]string
	binsErr  error
	binsOut  []byte
)

// repoRoot is the module's root (this package is internal/release).
func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// testBinaries builds fleet-agent for linux/amd64 and linux/arm64 once per
// test run, as make release does (static, trimmed, the version and commit
// set), into a directory that outlives the first test.
func testBinaries(t *testing.T) map[string]string {
	t.Helper()
	binsOnce.Do(func() {
		dir, err := os.MkdirTemp("", "fleet-release-bins-")
		if err != nil {
			binsErr = err
			return
		}
		bins = map[string]string{}
		for _, arch := range Architectures {
			out := filepath.Join(dir, "fleet-agent_linux_"+arch)
			binsOut, binsErr = goBuild(repoRoot(t), arch, out, testVersion, testRevision)
			if binsErr != nil {
				return
			}
			bins[arch] = out
		}
	})
	if binsErr != nil {
		t.Fatalf("building the binaries: %v\n%s", binsErr, binsOut)
	}
	return bins
}

func goBuild(root, arch, out, version, revision string) ([]byte, error) {
	cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false",
		"-ldflags", "-s -w -X main.version="+version+" -X main.commit="+revision+" -X main.date=2026-12-01T12:00:00Z",
		"-o", out, "./cmd/fleet-agent")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	return cmd.CombinedOutput()
}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, p := range bins {
		os.RemoveAll(filepath.Dir(p))
		break
	}
	os.Exit(code)
}
