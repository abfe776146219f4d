package doctor

import (
	"strings"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/agent"
	"github.com/fleet-agent/fleet-agent/internal/substrate"
	"github.com/fleet-agent/fleet-agent/internal/webhooks"
)

// A refused tip's advice follows its cause: only a commit whose plan can
// be right as it is is sent to plan --commit and apply --commit; a policy
// denial and a blocked change are sent to a new proposal, and say so.
func TestRefusedAdvicePerCause(t *testing.T) {
	const c = "0123456789abcdef0123456789abcdef01234567"
	cases := []struct {
		name      string
		refused   agent.Refused
		want      []string
		adoptable bool
	}{
		{"never proposed", agent.Refused{Commit: c, Code: "INVALID_STATE", Reason: "never proposed",
			Adopt: []string{"fleet-agent plan --commit " + c, "fleet-agent apply --commit " + c + " --plan-hash H"}},
			[]string{"adopt it with fleet-agent apply --commit " + c + " --plan-hash H"}, true},
		{"policy denies", agent.Refused{Commit: c, Code: "PLAN_BLOCKED", Reason: `policy rule "no-h100" (policy.yaml@abc) denies the plan: no H100`},
			[]string{"policy rule denies", "new commit", "propose it", "plan --proposal"}, false},
		{"blocked change", agent.Refused{Commit: c, Code: "PLAN_BLOCKED", Reason: "1 change is blocked: pool gpu: quota"},
			[]string{"blocked change", "new commit", "propose it"}, false},
		{"invalid document", agent.Refused{Commit: c, Code: "INVALID_INPUT", Reason: "the document is invalid"},
			[]string{"invalid", "new commit", "validate"}, false},
		{"provider down", agent.Refused{Commit: c, Code: "UNAVAILABLE", Reason: "the provider did not answer"},
			[]string{"fleet-agent plan --commit " + c, "--plan-hash"}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var r Report
			CheckFleet(&r, Fleet{Refused: []agent.Refused{tc.refused}, NodeDaemon: true}, time.Unix(0, 0))
			if len(r.Findings) != 1 || r.Findings[0].Code != "tip-refused" {
				t.Fatalf("findings %v", r.Codes())
			}
			do := r.Findings[0].Do
			for _, w := range tc.want {
				if !strings.Contains(do, w) {
					t.Errorf("advice %q lacks %q", do, w)
				}
			}
			if got := strings.Contains(do, "apply --commit") || strings.Contains(do, "apply it with"); got != tc.adoptable {
				t.Errorf("advice %q: sends to an apply by hand %v, want %v", do, got, tc.adoptable)
			}
		})
	}
}

// A proposal the policy denies needs a person before it is merged, not
// after: doctor says so, with the rule and the command that shows it.
func TestProposalDeniedByPolicy(t *testing.T) {
	var r Report
	CheckFleet(&r, Fleet{NodeDaemon: true, Proposals: []agent.Proposal{
		{Ref: "refs/heads/more-gpus", Commit: "0123456789abcdef", Errors: []string{}, Denied: []string{"deny no-h100: H100 pools need a budget"}},
		{Ref: "refs/heads/fine", Commit: "fedcba9876543210", Errors: []string{}},
	}}, time.Unix(0, 0))
	if len(r.Findings) != 1 || r.Findings[0].Code != "proposal-denied" || r.Findings[0].Severity != Fail {
		t.Fatalf("findings %+v", r.Findings)
	}
	f := r.Findings[0]
	if !strings.Contains(f.Found, "deny no-h100") || !strings.Contains(f.Found, "refs/heads/more-gpus") || !strings.Contains(f.Do, "fleet-agent plan --proposal more-gpus") {
		t.Fatalf("finding %+v", f)
	}
}

// substrate.nodeDaemon takes a restart, not a reload: the advice says so.
func TestSubstrateAgentMissingSaysRestart(t *testing.T) {
	var r Report
	CheckFleet(&r, Fleet{Substrates: []substrate.Status{{Pool: "k8s", State: "waiting"}}}, time.Unix(0, 0))
	if len(r.Findings) != 1 || r.Findings[0].Code != "substrate-agent-missing" {
		t.Fatalf("findings %v", r.Codes())
	}
	if do := r.Findings[0].Do; !strings.Contains(do, "restart") || strings.Contains(do, "then reload") {
		t.Fatalf("advice %q: the keys need a restart", do)
	}
}

func TestDriftProposalAndWebhooks(t *testing.T) {
	now := time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)
	held := now.Add(time.Minute)
	var r Report
	CheckFleet(&r, Fleet{
		DriftProposal: &agent.DriftProposal{State: "open", Branch: "fleet-agent/drift-1a2b", PR: 12, Fields: 1, OpenedAt: now.Add(-90 * time.Minute).UnixMilli()},
		Webhooks: []webhooks.Status{
			{ID: "wh-1", Receiver: "https://a.example.com", Queued: 2, HeldUntil: &held, LastError: "HTTP 500"},
			{ID: "wh-2", Receiver: "env://SLACK_URL", Dropped: 1},
			{ID: "wh-3", Receiver: "https://ok.example.com", Delivered: 9},
		},
	}, now)
	codes := strings.Join(r.Codes(), " ")
	if codes != "fleet-ok drift-proposal-open webhook-failing webhook-dropped" {
		t.Fatalf("codes = %q", codes)
	}
	if f := r.Findings[1]; !strings.Contains(f.Found, "pull request #12 (branch fleet-agent/drift-1a2b), open for 1h30m0s") || f.Severity != Note {
		t.Fatalf("drift proposal finding = %+v", f)
	}
	if r.NeedsPerson() {
		t.Fatal("notes made the report fail")
	}
	// A proposal that ended is no finding.
	var r2 Report
	CheckFleet(&r2, Fleet{DriftProposal: &agent.DriftProposal{State: "merged", Branch: "fleet-agent/drift-1a2b"}}, now)
	if c := strings.Join(r2.Codes(), " "); c != "fleet-ok" {
		t.Fatalf("codes after merge = %q", c)
	}
}

// A substrate in error names its failing conditions, by type and reason,
// so that a person sees which step needs them; True and Unknown ones are
// not named.
func TestSubstrateErrorNamesFailingConditions(t *testing.T) {
	var r Report
	st := substrate.Status{Pool: "k8s", State: "error", Message: "flavor h100: quota exceeded", Conditions: []substrate.StatusCondition{
		{Type: "Cluster", Status: "True", Reason: "ClusterRunning"},
		{Type: "NodePools", Status: "False", Reason: "NodePoolInError", Message: "flavor h100: quota exceeded"},
		{Type: "InCluster", Status: "Unknown", Reason: "NodeDaemonNotConfigured"}}}
	CheckFleet(&r, Fleet{Substrates: []substrate.Status{st}, NodeDaemon: true}, time.Unix(0, 0))
	if len(r.Findings) != 1 || r.Findings[0].Code != "substrate-error" {
		t.Fatalf("findings %v", r.Codes())
	}
	if want := "pool k8s: flavor h100: quota exceeded [NodePools NodePoolInError]"; r.Findings[0].Found != want {
		t.Fatalf("finding %q, want %q", r.Findings[0].Found, want)
	}
}
