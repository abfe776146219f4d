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
	binsMu  sync.Mutex
	binsDir string
	bins    = map[string]string{}
)

// testBinary builds fleet-agent for linux/arch once per test run, as make
// release does (static, trimmed, the version and commit set), into a
// directory that outlives the first test.
func testBinary(t *testing.T, arch string) string {
	t.Helper()
	binsMu.Lock()
	defer binsMu.Unlock()
	if p, ok := bins[arch]; ok {
		return p
	}
	if binsDir == "" {
		d, err := os.MkdirTemp("", "fleet-release-bins-")
		if err != nil {
			t.Fatal(err)
		}
		binsDir = d
	}
	out := filepath.Join(binsDir, "fleet-agent_linux_"+arch)
	if b, err := goBuild(repoRoot(t), arch, out, testVersion, testRevision); err != nil {
		t.Fatalf("building the %s binary: %v\n%s", arch, err, b)
	}
	bins[arch] = out
	return out
}

// testBinaries is both architectures' binaries.
func testBinaries(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, arch := range Architectures {
		out[arch] = testBinary(t, arch)
	}
	return out
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
	if binsDir != "" {
		os.RemoveAll(binsDir)
	}
	os.Exit(code)
}

// repoRoot is the module's root (this package is internal/release).
func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}
