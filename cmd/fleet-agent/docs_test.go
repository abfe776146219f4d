package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/docgen"
)

const repo = "../.."

// TestWorkedFirstDocument runs the first document of docs/document.md, as
// the page shows it, through the commands the page shows, in-process with
// the CLI's own code: it validates, plans and applies offline, and the
// status then has it applied.
func TestWorkedFirstDocument(t *testing.T) {
	page, err := os.ReadFile(filepath.Join(repo, "docs/document.md"))
	if err != nil {
		t.Fatal(err)
	}
	part, err := docgen.Between(page, "worked-document")
	if err != nil {
		t.Fatalf("docs/document.md: %v", err)
	}
	docs, shells := docgen.Fenced(part, "json"), docgen.Fenced(part, "sh")
	if len(docs) != 1 || len(shells) != 1 {
		t.Fatalf("the worked document needs one json block and one sh block, has %d and %d", len(docs), len(shells))
	}
	dir := t.TempDir()
	t.Chdir(dir)
	writeFile(t, dir, "fleet.json", docs[0])
	want := []struct{ cmd, out string }{
		{"validate", ""},
		{"plan", "to create"},
		{"apply", "Applied"},
		{"status", "applied"},
	}
	lines := commandLines(shells[0])
	if len(lines) != len(want) {
		t.Fatalf("the worked document's commands are %q: this test expects %d (validate, plan, apply, status); change both together", lines, len(want))
	}
	for i, line := range lines {
		args := strings.Fields(line)
		if args[0] != "fleet-agent" || args[1] != want[i].cmd {
			t.Fatalf("command %d is %q, want fleet-agent %s", i+1, line, want[i].cmd)
		}
		out, errs, code := cli(t, nil, args[1:]...)
		if code != 0 || !strings.Contains(out, want[i].out) {
			t.Fatalf("%s: exit %d\nstdout:\n%s\nstderr:\n%s", line, code, out, errs)
		}
		t.Logf("%s\n%s%s", line, out, errs)
		if strings.Contains(out+errs, "warning") {
			t.Errorf("%s warns:\n%s%s", line, out, errs)
		}
	}
}

// commandLines are a shell block's commands, without comments and blank
// lines.
func commandLines(block string) []string {
	var out []string
	for _, l := range strings.Split(block, "\n") {
		if i := strings.Index(l, " #"); i >= 0 {
			l = l[:i]
		}
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out
}
