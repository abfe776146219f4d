package agent_test

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/fleet-agent/fleet-agent/internal/agent"
	"github.com/fleet-agent/fleet-agent/internal/events"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/webhooks"
)

// queuedEvents lists the events queued for hook, oldest first, as
// "type subject".
func queuedEvents(t *testing.T, s *state.Store, hook webhooks.Hook) []string {
	t.Helper()
	var out []string
	err := s.View(func(tx *state.Tx) error {
		return tx.EventQueue(hook.ID()).Entries(func(e state.OutboxEntry) error {
			var r struct {
				Event events.Event `json:"event"`
			}
			if err := json.Unmarshal(e.Data, &r); err != nil {
				return err
			}
			if r.Event.ID == "" || r.Event.Source != "urn:fleet-agent:root" {
				t.Errorf("event without an id or with source %q: %+v", r.Event.Source, r.Event)
			}
			out = append(out, r.Event.Type+" "+r.Event.Subject)
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestAgentQueuesEvents(t *testing.T) {
	cfg := agent.Config{DriftPullRequests: true, RequireReviewedPlan: true, Branch: "main"}
	w := newWorld(t, cfg)
	all := webhooks.Hook{URL: "http://127.0.0.1:1/all"}
	drift := webhooks.Hook{URL: "http://127.0.0.1:1/drift", Events: []string{events.Drifted, events.Converged}}
	q := &webhooks.Queue{Hooks: []webhooks.Hook{all, drift}, Now: w.clk.Now}
	w.agent = agent.New(cfg, agent.Options{Store: w.store, Repo: w.repo, Clock: w.clk, Log: zerolog.New(w.log), Events: q})

	file, err := os.ReadFile("testdata/drift/fleet.json")
	if err != nil {
		t.Fatal(err)
	}
	empty := w.commit(t, "main", `{"version":1}`, "empty")
	w.tick(t)
	tip := w.commit(t, "boot", string(file), "bootstrap")
	w.tick(t)
	w.remo.UpdateRef(t, "refs/heads/main", tip)
	w.tick(t)
	w.edit(t, inventory.Flavor, "gpu-fra/h100x1", map[string]any{"vcpu": 24})
	if rec := w.driftCheck(t); rec == nil || rec.State != "open" {
		t.Fatalf("no drift proposal: %+v\n%s", rec, w.log)
	}
	w.edit(t, inventory.Flavor, "gpu-fra/h100x1", map[string]any{"vcpu": 16})
	if rec := w.driftCheck(t); rec.State != "cleared" {
		t.Fatalf("drift proposal after the drift cleared: %+v\n%s", rec, w.log)
	}
	// A commit pushed straight to main without a reviewed plan is refused.
	refused := w.commit(t, "main", strings.Replace(string(file), `"eu"`, `"us"`, 1), "unreviewed")
	w.tick(t)

	branch := "branch/fleet-agent/drift-"
	got := queuedEvents(t, w.store, all)
	want := []string{"applied commit/" + empty, "applied commit/" + tip, "drifted fleet/root", "drift.pr.opened " + branch,
		"converged fleet/root", "drift.pr.closed " + branch, "refused commit/" + refused}
	if len(got) != len(want) {
		t.Fatalf("queued %q, want %q\n%s", got, want, w.log)
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Fatalf("event %d is %q, want %q (all: %q)", i, got[i], want[i], got)
		}
	}
	if d := queuedEvents(t, w.store, drift); !slices.Equal(d, []string{"drifted fleet/root", "converged fleet/root"}) {
		t.Fatalf("the drift-only webhook queued %q", d)
	}
}
