package agent_test

import (
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/agent"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
)

// A commit someone adds on the drift branch that changes the document
// itself (here: writes the value the policy denies, which the agent left
// out) plans no call, since the fleet already holds it; merged, it is
// refused as a head the agent did not write, not applied as a keep (found
// from outside: only a change of the policy file was caught, because a plan
// without calls needed no review at all).
func TestForeignDocumentCommitOnTheDriftBranchIsRefused(t *testing.T) {
	w := policyDriftWorld(t)
	w.edit(t, inventory.Flavor, "gpu-fra/h100x1", map[string]any{"vcpu": 24, "memoryGiB": 256})
	rec := w.driftCheck(t)
	if rec == nil || rec.State != "open" {
		t.Fatalf("no drift proposal: %+v\n%s", rec, w.log)
	}
	w.work.Git(t, "fetch", "-q", "origin", rec.Branch)
	w.work.Git(t, "checkout", "-q", "-B", "sneak", "FETCH_HEAD")
	doc := w.work.Git(t, "show", "HEAD:fleet.json") + "\n"
	w.work.Write(t, "fleet.json", strings.Replace(doc, `"vcpu": 16`, `"vcpu": 24`, 1))
	foreign := w.work.CommitAll(t, "complete the keep")
	w.work.Push(t, "--force", "HEAD:refs/heads/"+rec.Branch)
	w.tick(t) // the branch is planned at the foreign head: no calls
	w.remo.UpdateRef(t, "refs/heads/main", foreign)
	w.tick(t)
	if ap := w.applied(t); ap != nil && ap.Commit == foreign {
		t.Fatalf("a foreign commit on the drift branch was applied as a keep\n%s", w.log)
	}
	st, err := agent.Status(w.store, "root")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Refused) == 0 || st.Refused[0].Commit != foreign {
		t.Fatalf("refused %+v, want the merge refused", st.Refused)
	}
}

// A keep written by hand on a branch of one's own, of a value the policy
// denies (a hand edit put it in the fleet, where edit is not judged), plans
// no call; judged as a change of the applied document, it is denied, so the
// policy cannot be stepped round by writing the fleet first and the document
// after (found from outside).
func TestAKeepOfADeniedValueIsDenied(t *testing.T) {
	w := policyDriftWorld(t)
	w.edit(t, inventory.Flavor, "gpu-fra/h100x1", map[string]any{"vcpu": 26})
	w.work.Git(t, "fetch", "-q", "origin", "main")
	w.work.Git(t, "checkout", "-q", "-B", "keep26", "FETCH_HEAD")
	doc := w.work.Git(t, "show", "HEAD:fleet.json") + "\n"
	w.work.Write(t, "fleet.json", strings.Replace(doc, `"vcpu": 16`, `"vcpu": 26`, 1))
	keep := w.work.CommitAll(t, "keep the hand edit")
	w.work.Push(t, "HEAD:refs/heads/keep26")
	w.tick(t) // proposed: planned, no calls
	w.remo.UpdateRef(t, "refs/heads/main", keep)
	w.tick(t)
	if ap := w.applied(t); ap != nil && ap.Commit == keep {
		t.Fatalf("a keep of a denied value was applied\n%s", w.log)
	}
	st, err := agent.Status(w.store, "root")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Refused) == 0 || st.Refused[0].Commit != keep || !strings.Contains(st.Refused[0].Reason, "at most 20 vCPUs") {
		t.Fatalf("refused %+v, want the keep denied by the policy", st.Refused)
	}
}
