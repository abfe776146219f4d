package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/fleet-agent/fleet-agent/internal/apply"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

func waitFor(t *testing.T, what string, limit time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRunningAgent drives `run` in-process on the wall clock: the command
// line through its socket, the ops endpoints, metrics, and reloads.
func TestRunningAgent(t *testing.T) {
	r := startRunning(t, "1s")
	env := map[string]string{}
	// The command line goes through the socket while the agent holds the file.
	var out, errs string
	var code int
	waitFor(t, "the first tip to be followed", 10*time.Second, func() bool {
		out, errs, code = cli(t, env, "status", "-o", "json", "--config", r.path)
		return strings.Contains(out, `"appliedBy"`)
	})
	if code != 0 || !strings.Contains(out, `"tenantId": "root"`) || !strings.Contains(out, `"appliedBy": "agent"`) {
		t.Fatalf("status through the socket: %d\n%s\n%s", code, out, errs)
	}
	doc := writeFile(t, t.TempDir(), "fleet.json", poolDoc)
	out, errs, code = cli(t, env, "plan", doc, "--config", r.path)
	if code != 0 || !strings.Contains(out, "+ pool vps") {
		t.Fatalf("plan through the socket: %d\n%s\n%s", code, out, errs)
	}
	if _, errs, code := cli(t, env, "apply", doc, "--yes", "--config", r.path); code != 1 || !strings.Contains(errs, "INVALID_STATE") || !strings.Contains(errs, "apply --commit") {
		t.Fatalf("apply FILE beside an agent that follows a repository: %d %s", code, errs)
	}
	bak := filepath.Join(t.TempDir(), "fleet.db.bak")
	if _, errs, code := cli(t, env, "backup", "--out", bak, "--config", r.path); code != 0 {
		t.Fatalf("backup: %s", errs)
	}
	restored, err := state.Open(bak, state.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("the backup does not open: %v", err)
	}
	var ap *state.Applied
	_ = restored.View(func(tx *state.Tx) (err error) { ap, err = tx.Applied(); return })
	restored.Close()
	if ap == nil || ap.AppliedBy != "agent" {
		t.Fatalf("the backup lacks the applied record: %+v", ap)
	}
	if out, errs, code := cli(t, env, "audit", "-o", "json", "--config", r.path); code != 0 || !strings.Contains(out, `"action": "apply"`) {
		t.Fatalf("audit: %d %s %s", code, out, errs)
	}

	// Ops endpoints.
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/status": 200, "/debug/pprof/": 404, "/ui/": 200, "/ui/substrates": 200} {
		resp, err := http.Get("http://" + r.ops + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s answered %d, want %d", path, resp.StatusCode, want)
		}
	}
	// The webhook refuses a bad signature.
	resp, err := http.Post("http://"+r.ops+"/hooks/github", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("unsigned webhook answered %d", resp.StatusCode)
	}
	// Metrics are Prometheus text with our families.
	resp, err = http.Get("http://" + r.ops + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("metrics do not parse: %v", err)
	}
	for _, name := range []string{"fleet_agent_polls_total", "fleet_agent_plans_total", "fleet_agent_applies_total", "fleet_agent_outbox_depth",
		"fleet_agent_drift", "fleet_agent_last_success_timestamp_seconds", "fleet_agent_duration_seconds", "fleet_agent_posts_total"} {
		if _, ok := families[name]; !ok {
			t.Errorf("metric %s missing", name)
		}
	}
	if f := families["fleet_agent_polls_total"]; f != nil && f.Metric[0].GetCounter().GetValue() < 1 {
		t.Error("no poll counted")
	}

	// A bad config is refused and the running one kept; a good change is
	// reloaded.
	good, _ := os.ReadFile(r.path)
	if err := os.WriteFile(r.path, append(good, []byte("colour: blue\n")...), 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the bad config to be refused", 10*time.Second, func() bool {
		return strings.Contains(r.log.String(), "the new config is refused; the running one is kept")
	})
	if !strings.Contains(r.log.String(), "unknown key") {
		t.Errorf("the refusal does not say why:\n%s", r.log.String())
	}
	if err := os.WriteFile(r.path, append(good, []byte("drift:\n  every: 5m\n")...), 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the good config to be reloaded", 10*time.Second, func() bool {
		return strings.Contains(r.log.String(), "drift.every")
	})
	// Still serving after both.
	if _, errs, code := cli(t, env, "status", "--config", r.path); code != 0 {
		t.Fatalf("status after reloads: %s", errs)
	}
	// SIGTERM-equivalent stop: the run returns cleanly.
	r.stop()
	select {
	case err := <-r.done:
		if err != nil {
			t.Fatalf("run returned %v", err)
		}
		r.done <- nil // for the cleanup
	case <-time.After(10 * time.Second):
		t.Fatal("the agent did not stop within 10 s")
	}
}

// TestDriftOnGitHub: each distinct drift is reported once (a status and a
// comment on the pull request that was applied), its clearing once.
func TestDriftOnGitHub(t *testing.T) {
	w := newGHWorld(t)
	w.work.Git(t, "checkout", "-q", "-B", "main")
	boot := w.push("main", emptyDoc, "an empty fleet")
	w.step()
	head := w.openPR(1, boot, poolDoc)
	w.step()
	w.merge(1, head)
	w.step()
	if ap := w.applied(); ap == nil || ap.Commit != head {
		t.Fatalf("not applied: %+v", ap)
	}
	driftComments := func() (drift, converged int) {
		for _, c := range w.gh.Comments(1) {
			if strings.Contains(c.Body, "<!-- fleet-agent:drift:") {
				drift++
			}
			if strings.Contains(c.Body, "<!-- fleet-agent:converged:") {
				converged++
			}
		}
		return
	}
	check := func() {
		t.Helper()
		if err := w.ag.DriftCheck(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := w.box.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	edit := func(kind inventory.Kind, name, field string, v any) {
		t.Helper()
		if err := apply.ApplyEdit(w.store, apply.Edit{Kind: kind, Name: name, Set: map[string]any{field: v}, Who: "ops@box"}); err != nil {
			t.Fatal(err)
		}
	}
	check()
	if d, c := driftComments(); d != 0 || c != 0 {
		t.Fatalf("no drift yet, but %d drift and %d converged comments", d, c)
	}
	edit(inventory.OwnerQuota, "vps:gpu", "max", 99)
	check()
	check()
	if d, _ := driftComments(); d != 1 {
		t.Fatalf("one drift, %d comments", d)
	}
	if s := w.lastStatus(head, "drift"); s.State != "failure" {
		t.Fatalf("drift status %+v", s)
	}
	edit(inventory.Pool, "vps", "gpuModel", "L4")
	check()
	if d, _ := driftComments(); d != 2 {
		t.Fatalf("a second, distinct drift: %d comments", d)
	}
	edit(inventory.OwnerQuota, "vps:gpu", "max", 4)
	edit(inventory.Pool, "vps", "gpuModel", nil)
	check()
	check()
	if d, c := driftComments(); d != 2 || c != 1 {
		t.Fatalf("after converging: %d drift, %d converged comments", d, c)
	}
	if s := w.lastStatus(head, "drift"); s.State != "success" {
		t.Fatalf("converged status %+v", s)
	}
	n := 0
	for _, s := range w.gh.Statuses(head) {
		if s.Context == "fleet-agent/drift" && s.State == "failure" {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("%d drift failure statuses, want one per distinct drift (2)", n)
	}
}
