package main

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/forge/githubemu"
	"github.com/fleet-agent/fleet-agent/internal/testutil/golden"
)

// newChecksWorld is a ghWorld whose agent is a GitHub App: check runs on.
func newChecksWorld(t *testing.T) *ghWorld {
	t.Helper()
	w := newGHWorld(t)
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	w.emu.AddApp("4242", 77, &key.PublicKey)
	w.checks = true
	w.appKey = string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}))
	w.start()
	return w
}

// Documents written as people write them, one value a line, so that a line
// names one thing.
const (
	badPriorityDoc = `{
  "version": 1,
  "sites": [{ "name": "fra", "kind": "shared", "region": "eu" }],
  "pools": [
    {
      "name": "vps",
      "site": "fra",
      "class": "vps-host",
      "offers": [
        { "tenant": "acme", "priority": 5000 }
      ]
    }
  ]
}
`
	blockedPoolDoc = `{
  "version": 1,
  "pools": [
    { "name": "ok", "site": "fra", "class": "vps-host" },
    { "name": "lost", "site": "nowhere", "class": "vps-host" }
  ],
  "sites": [{ "name": "fra", "kind": "shared", "region": "eu" }]
}
`
)

// lineOf is the 1-based line of the first line of doc holding s, and the
// 1-based column where s starts.
func lineOf(t *testing.T, doc, s string) (int, int) {
	t.Helper()
	for i, l := range strings.Split(doc, "\n") {
		if c := strings.Index(l, s); c >= 0 {
			return i + 1, c + 1
		}
	}
	t.Fatalf("%q not in the document", s)
	return 0, 0
}

func lastCheck(t *testing.T, w *ghWorld, sha, ctx string) githubemu.CheckRun {
	t.Helper()
	var last githubemu.CheckRun
	found := false
	for _, c := range w.gh.CheckRuns(sha) {
		if c.Name == "fleet-agent/"+ctx {
			last, found = c, true
		}
	}
	if !found {
		t.Fatalf("no check run fleet-agent/%s on %s", ctx, sha)
	}
	return last
}

// checkBody is a check run as the golden file shows it.
func checkBody(c githubemu.CheckRun, shas map[string]string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "=== %s: %s %s\ntitle: %s\n--- summary\n%s\n--- annotations (%d)\n", c.Name, c.Status, c.Conclusion, c.Title, c.Summary, len(c.Annotations))
	for _, a := range c.Annotations {
		fmt.Fprintf(&b, "%s:%d:%d-%d [%s] %s: %s\n", a.Path, a.StartLine, a.StartColumn, a.EndColumn, a.Level, a.Title, a.Message)
	}
	out := b.String()
	for sha, name := range shas {
		out = strings.ReplaceAll(out, sha, name)
	}
	return out
}

func TestCheckRunsOnGitHub(t *testing.T) {
	w := newChecksWorld(t)
	w.work.Git(t, "checkout", "-q", "-B", "main")
	boot := w.push("main", emptyDoc, "an empty fleet")
	w.step()

	bad := w.openPR(1, boot, badPriorityDoc)
	blocked := w.openPR(2, boot, blockedPoolDoc)
	good := w.openPR(3, boot, poolDoc)
	w.step()

	// The bad priority: a failed check whose annotation sits on the
	// priority's line, at its value.
	c := lastCheck(t, w, bad, "plan")
	if c.Conclusion != "failure" || len(c.Annotations) != 1 {
		t.Fatalf("bad priority: %+v", c)
	}
	line, col := lineOf(t, badPriorityDoc, "5000")
	if a := c.Annotations[0]; a.Path != "fleet.json" || a.StartLine != line || a.StartColumn != col || a.Title != "/pools/0/offers/0/priority" {
		t.Errorf("annotation %+v, want line %d column %d", a, line, col)
	}
	// The status is still there, with the same verdict.
	if s := w.lastStatus(bad, "plan"); s.State != "failure" {
		t.Errorf("plan status %+v", s)
	}

	// The blocked plan annotates the pool's line.
	c = lastCheck(t, w, blocked, "plan")
	line, col = lineOf(t, blockedPoolDoc, `{ "name": "lost"`)
	if c.Conclusion != "failure" || len(c.Annotations) != 1 || c.Annotations[0].StartLine != line || c.Annotations[0].StartColumn != col {
		t.Fatalf("blocked: %+v, want line %d column %d", c, line, col)
	}

	// A good plan passes, with the comment as its summary.
	c = lastCheck(t, w, good, "plan")
	if c.Conclusion != "success" || !strings.Contains(c.Summary, "+ pool vps") || len(c.Annotations) != 0 {
		t.Fatalf("good: %+v", c)
	}

	// Merged and applied: the apply and drift check runs.
	w.merge(3, good)
	w.step()
	if ap := w.applied(); ap == nil || ap.Commit != good {
		t.Fatalf("not applied: %+v", ap)
	}
	apply := lastCheck(t, w, good, "apply")
	if apply.Conclusion != "success" {
		t.Errorf("apply check %+v", apply)
	}
	// Nothing is posted twice: one run per context and content.
	if n := len(w.gh.CheckRuns(bad)); n != 1 {
		t.Errorf("%d check runs on the bad head", n)
	}

	shas := map[string]string{bad: "<bad-head>", blocked: "<blocked-head>", good: "<good-head>", boot: "<boot>"}
	var all strings.Builder
	for _, sha := range []string{bad, blocked, good} {
		for _, c := range w.gh.CheckRuns(sha) {
			all.WriteString(checkBody(c, shas))
			all.WriteString("\n")
		}
	}
	golden.Check(t, "testdata/check-runs.golden", []byte(all.String()))
}
