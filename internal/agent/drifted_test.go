package agent_test

import (
	"encoding/json"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/agent"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

// A row the drift check keeps only for its note (a pool's substrate kept
// because removing it needs prune) is not drift: nothing would be applied.
// A row that changes something, or is blocked, is.
func TestDriftedCountsChangesNotNotes(t *testing.T) {
	for _, c := range []struct {
		name    string
		changes []plan.Change
		want    bool
	}{
		{"a kept substrate", []plan.Change{{Kind: "pool", Name: "gpu", Action: plan.Unchanged, Note: "substrate kept: removing it needs prune"}}, false},
		{"an update", []plan.Change{{Kind: "pool", Name: "gpu", Action: plan.Update}}, true},
		{"a blocked row", []plan.Change{{Kind: "pool", Name: "gpu", Action: plan.Unchanged, Blocked: "no"}}, true},
		{"a note and an update", []plan.Change{{Kind: "pool", Name: "a", Action: plan.Unchanged, Note: "n"}, {Kind: "pool", Name: "b", Action: plan.Delete}}, true},
	} {
		raw, err := json.Marshal(c.changes)
		if err != nil {
			t.Fatal(err)
		}
		if got := agent.Drifted(&state.Drift{Changes: raw}); got != c.want {
			t.Errorf("%s: Drifted %v, want %v", c.name, got, c.want)
		}
		if got := agent.DriftCount(raw); (got > 0) != c.want {
			t.Errorf("%s: DriftCount %d", c.name, got)
		}
	}
}
