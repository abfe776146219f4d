package ui

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/localapi"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/substrate"
)

// The page's advice for a substrate in error follows the reason of its
// failing condition, from the same table the doctor reads: an account with
// no adapter needs a restart, which "the reconciler retries on its own"
// would deny.
func TestSubstrateAttentionFollowsTheReason(t *testing.T) {
	for _, reason := range []string{substrate.ReasonAccountUnavailable, substrate.ReasonClaimRefused} {
		s := Substrate{Pool: "k8s", State: string(state.SubstrateError), Message: "m",
			Conditions: []Condition{{Type: "Cluster", Status: "True", Reason: substrate.ReasonClusterRunning}, {Type: "X", Status: "False", Reason: reason}}}
		f := Fleet{Substrates: []Substrate{s}}
		var do string
		for _, a := range f.Attention() {
			if strings.Contains(a.What, "pool k8s is in error") {
				do = a.Do
			}
		}
		if do == "" || do != substrate.Advice(reason) {
			t.Errorf("%s: the page says %q, the table %q", reason, do, substrate.Advice(reason))
		}
	}
	if a := substrate.Advice(substrate.ReasonAccountUnavailable); !strings.Contains(a, "restart") || strings.Contains(a, "retries on its own") {
		t.Errorf("AccountUnavailable advice %q: want a restart, not a retry on its own", a)
	}
}

// A drift row kept only for its note (a substrate kept without prune) is
// not drift: the page says the fleet matches, and shows the note apart.
func TestDriftNoteIsNotDrift(t *testing.T) {
	f := Fleet{Drift: &localapi.DriftView{Changes: json.RawMessage(`[{"kind":"pool","name":"gpu","action":"unchanged","note":"substrate kept: removing it needs prune"}]`)}}
	if f.Drifted() || len(f.DriftChanges()) != 0 || len(f.DriftByKind()) != 0 {
		t.Errorf("a note counted as drift: drifted %v, changes %v", f.Drifted(), f.DriftChanges())
	}
	if n := f.DriftNotes(); len(n) != 1 || n[0].Name != "gpu" {
		t.Errorf("notes %v, want the kept substrate's", n)
	}
	f.Drift.Changes = json.RawMessage(`[{"kind":"pool","name":"gpu","action":"unchanged","note":"n"},{"kind":"pool","name":"b","action":"update","fields":["policy"]}]`)
	if !f.Drifted() || len(f.DriftChanges()) != 1 || len(f.DriftNotes()) != 1 {
		t.Errorf("drifted %v, changes %v, notes %v: want one change and one note", f.Drifted(), f.DriftChanges(), f.DriftNotes())
	}
}
