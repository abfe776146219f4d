package main

import (
	"encoding/json"
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

// version -o json lists the modules the binary was built from, as the
// toolchain recorded them: a built binary, so the list is the binary's own.
func TestVersionJSONListsTheBuildsModules(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "fleet-agent")
	build := exec.CommandContext(t.Context(), "go", "build", "-ldflags", "-X main.commit=0123abc -X main.version=v9.9.9", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.CommandContext(t.Context(), bin, "version", "-o", "json").Output()
	if err != nil {
		t.Fatal(err)
	}
	var got versionJSON
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("version -o json is not JSON: %v\n%s", err, out)
	}
	if got.Version != "v9.9.9" || got.Commit != "0123abc" {
		t.Fatalf("version/commit: %q %q", got.Version, got.Commit)
	}
	if got.Main.Path != "github.com/fleet-agent/fleet-agent" || got.GoVersion == "" {
		t.Fatalf("main module %q, go %q", got.Main.Path, got.GoVersion)
	}
	// Every module go.mod requires directly and the binary links must be
	// listed with the version go.mod pins; cobra and bbolt are two.
	want := map[string]string{}
	for _, m := range []string{"github.com/spf13/cobra", "go.etcd.io/bbolt"} {
		v, err := exec.CommandContext(t.Context(), "go", "list", "-m", "-f", "{{.Version}}", m).Output()
		if err != nil {
			t.Fatal(err)
		}
		want[m] = strings.TrimSpace(string(v))
	}
	for _, m := range got.Modules {
		if v, ok := want[m.Path]; ok {
			if m.Version != v || !strings.HasPrefix(m.Sum, "h1:") {
				t.Errorf("%s: version %q sum %q, go.mod pins %s", m.Path, m.Version, m.Sum, v)
			}
			delete(want, m.Path)
		}
	}
	if len(want) != 0 {
		t.Fatalf("modules missing from version -o json: %v", want)
	}
	if _, err := exec.CommandContext(t.Context(), bin, "version", "-o", "yaml").Output(); err == nil {
		t.Fatal("version -o yaml was accepted")
	}
}
