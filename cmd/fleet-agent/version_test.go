package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A plain `go build` (no -ldflags) still says the commit it was built
// from: the toolchain records it, and version reads it.
func TestVersionOfAPlainBuildNamesTheCommit(t *testing.T) {
	head, err := exec.CommandContext(t.Context(), "git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("this test runs in the repository's git checkout: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "fleet-agent")
	build := exec.CommandContext(t.Context(), "go", "build", "-buildvcs=true", "-o", bin, ".")
	build.Env = append(os.Environ(), "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.CommandContext(t.Context(), bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "commit "+strings.TrimSpace(string(head))) {
		t.Fatalf("version of a plain build: %s (HEAD is %s)", out, head)
	}
}
