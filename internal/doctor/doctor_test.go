package doctor

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/imagepin"
	"github.com/fleet-agent/fleet-agent/internal/localapi"
	"github.com/fleet-agent/fleet-agent/internal/substrate"
	"github.com/fleet-agent/fleet-agent/internal/textline"
	"github.com/fleet-agent/fleet-agent/internal/webhooks"
)

// A refused tip's advice follows its cause: only a commit whose plan can
// be right as it is is sent to plan --commit and apply --commit; a policy
// denial and a blocked change are sent to a new proposal, and say so.
func TestRefusedAdvicePerCause(t *testing.T) {
	const c = "0123456789abcdef0123456789abcdef01234567"
	cases := []struct {
		name      string
		refused   localapi.Refused
		want      []string
		adoptable bool
	}{
		{"never proposed", localapi.Refused{Commit: c, Code: "INVALID_STATE", Reason: "never proposed",
			Adopt: []string{"fleet-agent plan --commit " + c, "fleet-agent apply --commit " + c + " --plan-hash H"}},
			[]string{"adopt it with fleet-agent apply --commit " + c + " --plan-hash H"}, true},
		{"policy denies", localapi.Refused{Commit: c, Code: "PLAN_BLOCKED", Reason: `policy rule "no-h100" (policy.yaml@abc) denies the plan: no H100`},
			[]string{"policy rule denies", "new commit", "propose it", "plan --proposal"}, false},
		{"blocked change", localapi.Refused{Commit: c, Code: "PLAN_BLOCKED", Reason: "1 change is blocked: pool gpu: quota"},
			[]string{"blocked change", "new commit", "propose it"}, false},
		{"invalid document", localapi.Refused{Commit: c, Code: "INVALID_INPUT", Reason: "the document is invalid"},
			[]string{"invalid", "new commit", "validate"}, false},
		{"provider down", localapi.Refused{Commit: c, Code: "UNAVAILABLE", Reason: "the provider did not answer"},
			[]string{"fleet-agent plan --commit " + c, "--plan-hash"}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var r Report
			CheckFleet(&r, Fleet{Refused: []localapi.Refused{tc.refused}, NodeDaemon: true}, time.Unix(0, 0))
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
	CheckFleet(&r, Fleet{NodeDaemon: true, Proposals: []localapi.Proposal{
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
		DriftProposal: &localapi.DriftProposal{State: "open", Branch: "fleet-agent/drift-1a2b", PR: 12, Fields: 1, OpenedAt: now.Add(-90 * time.Minute).UnixMilli()},
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
	// A drift no proposal can stand for is a note that says why.
	var r3 Report
	CheckFleet(&r3, Fleet{DriftProposal: &localapi.DriftProposal{State: "none", Branch: "fleet-agent/drift-1a2b", Waiting: "nothing in the drift can be written into the document: flavor gpu/x vcpu: denied"}}, now)
	if c := strings.Join(r3.Codes(), " "); c != "fleet-ok drift-proposal-none" || !strings.Contains(r3.Findings[1].Found, "vcpu: denied") {
		t.Fatalf("codes = %q, findings %+v", c, r3.Findings)
	}
	// A proposal that ended is no finding.
	var r2 Report
	CheckFleet(&r2, Fleet{DriftProposal: &localapi.DriftProposal{State: "merged", Branch: "fleet-agent/drift-1a2b"}}, now)
	if c := strings.Join(r2.Codes(), " "); c != "fleet-ok" {
		t.Fatalf("codes after merge = %q", c)
	}
}

// The node daemon's image: pinned is ok; the recorded digest kept while
// the registry cannot be asked is a note; the tag by choice a note; the
// tag because the registry failed needs a person and names the reason; a
// record of another image than the configured one says nothing.
func TestNodeDaemonImagePinned(t *testing.T) {
	const tag = "registry.example/team/fleet-agent:v1"
	digest := tag + "@sha256:" + strings.Repeat("ab", 32)
	for _, tc := range []struct {
		name string
		pin  *imagepin.Pin
		code string
		sev  Severity
		says string
	}{
		{"pinned", &imagepin.Pin{Ref: tag, Image: digest, Pinned: true, Source: "registry"}, "node-daemon-pinned", OK, digest},
		{"record", &imagepin.Pin{Ref: tag, Image: digest, Pinned: true, Source: "record", Reason: imagepin.ReasonUnreachable, Detail: "cannot be reached"}, "node-daemon-pinned-from-record", Note, imagepin.ReasonUnreachable},
		{"off", &imagepin.Pin{Ref: tag, Image: tag, Reason: imagepin.ReasonOff}, "node-daemon-not-pinned", Note, "resolveDigest is false"},
		{"refused", &imagepin.Pin{Ref: tag, Image: tag, Reason: imagepin.ReasonRefused, Detail: "docker login registry.example"}, "node-daemon-not-pinned", Fail, "registryRefused): docker login"},
		{"another image", &imagepin.Pin{Ref: "registry.example/team/old:v0", Image: "registry.example/team/old:v0", Reason: imagepin.ReasonRefused}, "", "", ""},
		{"none", nil, "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r Report
			CheckFleet(&r, Fleet{NodeDaemon: true, NodeDaemonImage: tag, NodeDaemonPin: tc.pin}, time.Unix(0, 0))
			var got *Finding
			for i, f := range r.Findings {
				if strings.HasPrefix(f.Code, "node-daemon-") {
					got = &r.Findings[i]
				}
			}
			switch {
			case tc.code == "" && got != nil:
				t.Fatalf("a finding where none is due: %+v", *got)
			case tc.code == "":
			case got == nil || got.Code != tc.code || got.Severity != tc.sev || !strings.Contains(got.Found, tc.says):
				t.Fatalf("findings %+v, want %s %s saying %q", r.Findings, tc.code, tc.sev, tc.says)
			}
		})
	}
}

// A substrate in error names its failing conditions, by type and reason,
// so that a person sees which step needs them; True and Unknown ones are
// not named.
func TestSubstrateErrorNamesFailingConditions(t *testing.T) {
	var r Report
	st := substrate.Status{Pool: "k8s", State: "error", Message: "flavor h100: quota exceeded", Conditions: []substrate.StatusCondition{
		{Type: "Cluster", Status: "True", Reason: "ClusterRunning"},
		{Type: "NodePools", Status: "False", Reason: "NodePoolError", Message: "flavor h100: quota exceeded"},
		{Type: "InCluster", Status: "Unknown", Reason: "NodeDaemonNotConfigured"}}}
	CheckFleet(&r, Fleet{Substrates: []substrate.Status{st}, NodeDaemon: true}, time.Unix(0, 0))
	if len(r.Findings) != 1 || r.Findings[0].Code != "substrate-error" {
		t.Fatalf("findings %v", r.Codes())
	}
	if want := "pool k8s: flavor h100: quota exceeded [NodePools NodePoolError]"; r.Findings[0].Found != want {
		t.Fatalf("finding %q, want %q", r.Findings[0].Found, want)
	}
}

// A drain blocked past its timeout (then: wait) is its own finding, with
// what to do about the pods it names; one still within its timeout (Unknown)
// is work in progress and no finding.
func TestDrainBlockedPastItsTimeout(t *testing.T) {
	msg := "flavor removed: node pool np-a: drain blocked by pod ml/train on n1 (GPU job, since 2026-12-06T03:00:00Z)"
	for _, tc := range []struct {
		status, code string
	}{{"False", "substrate-drain-blocked"}, {"Unknown", ""}} {
		var r Report
		st := substrate.Status{Pool: "k8s", State: "ready", Message: msg, Conditions: []substrate.StatusCondition{
			{Type: "NodePools", Status: tc.status, Reason: substrate.ReasonDrainBlocked, Message: msg}}}
		if tc.status == "False" {
			st.State = "error"
		}
		CheckFleet(&r, Fleet{Substrates: []substrate.Status{st}, NodeDaemon: true}, time.Unix(0, 0))
		got := r.Codes()
		switch {
		case tc.code == "" && slices.Contains(got, "substrate-drain-blocked"):
			t.Fatalf("%s: findings %v: a drain within its timeout needs no person", tc.status, got)
		case tc.code != "" && (len(r.Findings) != 1 || r.Findings[0].Code != tc.code || !strings.Contains(r.Findings[0].Found, "ml/train") ||
			!strings.Contains(r.Findings[0].Do, "force")):
			t.Fatalf("%s: findings %+v, want one %s naming ml/train and saying how to force", tc.status, r.Findings, tc.code)
		}
	}
}

// A substrate in error says what to do by the reason it failed for, not a
// sentence for every reason: an account whose adapter the agent's config
// does not open needs a config block and a restart, and nothing was
// refused.
func TestSubstrateErrorAdviceFollowsTheReason(t *testing.T) {
	for _, tc := range []struct {
		reason, says, not string
	}{
		{substrate.ReasonAccountUnavailable, "restart", "refused"},
		{substrate.ReasonNodePoolError, "provider", "restart"},
	} {
		var r Report
		st := substrate.Status{Pool: "k8s", State: "error", Message: "m", Conditions: []substrate.StatusCondition{
			{Type: "Account", Status: "False", Reason: tc.reason, Message: "m"}}}
		CheckFleet(&r, Fleet{Substrates: []substrate.Status{st}, NodeDaemon: true}, time.Unix(0, 0))
		if len(r.Findings) != 1 || r.Findings[0].Code != "substrate-error" {
			t.Fatalf("findings %v", r.Codes())
		}
		if do := r.Findings[0].Do; do != substrate.Advice(tc.reason) || !strings.Contains(do, tc.says) || strings.Contains(do, tc.not) {
			t.Errorf("%s: do %q, want the table's advice saying %q and not %q", tc.reason, do, tc.says, tc.not)
		}
	}
}

// TestUpgradeStuck: an upgrade hop running past UpgradeStuckAfter is a
// failure naming the hop and since when; one running less is nothing.
func TestUpgradeStuck(t *testing.T) {
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	hop := func(age time.Duration) Fleet {
		return Fleet{NodeDaemon: true, Substrates: []substrate.Status{{Pool: "k8s", State: "ready",
			Upgrade: &substrate.StatusUpgrade{Hop: "1.33 -> 1.34 (node pool fa-x-h100)", Since: now.Add(-age).UnixMilli()}}}}
	}
	var r Report
	CheckFleet(&r, hop(UpgradeStuckAfter-time.Minute), now)
	if c := strings.Join(r.Codes(), " "); strings.Contains(c, "substrate-upgrade-stuck") {
		t.Fatalf("a hop within its bound: %s", c)
	}
	var r2 Report
	CheckFleet(&r2, hop(UpgradeStuckAfter+time.Hour), now)
	if len(r2.Findings) != 1 || r2.Findings[0].Code != "substrate-upgrade-stuck" || r2.Findings[0].Severity != Fail {
		t.Fatalf("a hop past its bound: %+v", r2.Findings)
	}
	if f := r2.Findings[0]; !strings.Contains(f.Found, "1.33 -> 1.34 (node pool fa-x-h100) has run for 7h0m0s (since 2026-06-01T05:00:00Z)") || !strings.Contains(f.Do, "PodDisruptionBudget") {
		t.Fatalf("finding %+v", f)
	}
}

// A finding quotes what it found (a path from the config, a provider's or
// the repository's error): the text report keeps one line per finding and
// one per advice, plain.
func TestTextReportIsPlain(t *testing.T) {
	var r Report
	r.Add("state", "state-missing", Fail, "no state file at /tmp/n\n\x1b[31mok: nothing needs a person\u2028\u202e", "create it\r\nthen\u0085run")
	var b strings.Builder
	WriteText(&b, r)
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 3 {
		t.Errorf("%d lines, want the finding, its advice and the count: %q", len(lines), b.String())
	}
	for _, l := range lines {
		if !textline.IsPlain(l) {
			t.Errorf("%q is not one line of plain text", l)
		}
	}
}
