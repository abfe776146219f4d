package agent_test

import (
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/agent"
)

// A change of the policy is applied only as a reviewed head carried it.
// Found from outside: without GitHub, a tip is reviewed when it or a parent
// is a proposal head with the tip's plan hash, and plans hash the calls,
// never the policy: a proposal with an empty commit, planned, then a direct
// push of that commit plus a rule deleted from the policy, was applied, and
// the next pull request went through without the rule.
func TestPolicyChangeOnTopOfAProposalIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy string // the policy file on the pushed tip ("" deletes it)
	}{
		{"a rule deleted", "rules: []\n"},
		{"the file deleted", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, agent.Config{RequireReviewedPlan: true, PolicyPath: "policy.yaml"})
			w.work.Git(t, "checkout", "-B", "main")
			w.work.Write(t, "policy.yaml", "rules:\n  - {name: no-quota, expression: \"false\", action: deny, message: \"'no'\"}\n")
			boot := w.commit(t, "main", docV1, "bootstrap")
			w.tick(t) // fetched; refused as never proposed, then adopted by hand
			if _, _, err := w.agent.ApplyCommit(t.Context(), boot, planHashOf(t, w, boot), "ops@box"); err != nil {
				t.Fatal(err)
			}
			// A proposal whose plan is empty, planned and so "reviewed".
			w.work.Git(t, "checkout", "-q", "-B", "harmless", boot)
			w.work.Git(t, "commit", "-q", "--allow-empty", "-m", "nothing")
			w.work.Push(t, "--force", "HEAD:refs/heads/harmless")
			head := strings.TrimSpace(w.work.Git(t, "rev-parse", "HEAD"))
			w.tick(t)
			// main: the proposal's head plus the policy change, never proposed.
			w.work.Git(t, "checkout", "-q", "-B", "main", head)
			if tc.policy == "" {
				w.work.Git(t, "rm", "-q", "policy.yaml")
			} else {
				w.work.Write(t, "policy.yaml", tc.policy)
			}
			tip := w.work.CommitAll(t, "loosen the policy")
			w.work.Push(t, "--force", "HEAD:refs/heads/main")
			w.tick(t)
			if ap := w.applied(t); ap.Commit != boot {
				t.Fatalf("a policy change on top of proposal %s was applied: %s\n%s", head[:12], ap.Commit, w.log)
			}
			st, err := agent.Status(w.store, "root")
			if err != nil {
				t.Fatal(err)
			}
			if len(st.Refused) != 1 || st.Refused[0].Commit != tip || !strings.Contains(st.Refused[0].Reason, "policy.yaml") || len(st.Refused[0].Adopt) != 2 {
				t.Fatalf("refused %+v, want %s refused for its policy change, with the adopt commands", st.Refused, tip[:12])
			}
		})
	}
}

// planHashOf is the hash of the plan of commit, as plan --commit makes it.
func planHashOf(t *testing.T, w *world, commit string) string {
	t.Helper()
	p, _, err := w.agent.PlanCommit(t.Context(), commit)
	if err != nil {
		t.Fatal(err)
	}
	return p.PlanHash
}

// A commit pushed directly whose plan the policy denies is refused for the
// denial, with no adopt commands: an apply by hand is held to the deny
// rules, so pasting them would fail (found from outside: status, doctor and
// the page all advised adopting it).
func TestDeniedDirectPushIsNotAdoptable(t *testing.T) {
	w := newWorld(t, agent.Config{RequireReviewedPlan: true, PolicyPath: "policy.yaml"})
	w.work.Git(t, "checkout", "-B", "main")
	w.work.Write(t, "policy.yaml", "rules:\n  - {name: no-pools, match: {kinds: [pool]}, expression: \"true\", action: deny, message: \"'no pools here'\"}\n")
	boot := w.commit(t, "main", docV1, "bootstrap")
	w.tick(t)
	if _, _, err := w.agent.ApplyCommit(t.Context(), boot, planHashOf(t, w, boot), "ops@box"); err != nil {
		t.Fatal(err)
	}
	tip := w.commit(t, "main", docV2, "a pool, pushed directly")
	w.tick(t)
	st, err := agent.Status(w.store, "root")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Refused) != 1 || st.Refused[0].Commit != tip {
		t.Fatalf("refused %+v, want %s", st.Refused, tip[:12])
	}
	r := st.Refused[0]
	if r.Code != "PLAN_BLOCKED" || len(r.Adopt) != 0 || !strings.Contains(r.Reason, "no pools here") || !strings.Contains(r.Reason, "make a new commit that the policy allows") {
		t.Fatalf("refusal %+v: want PLAN_BLOCKED for the denial, no adopt commands", r)
	}
}
