package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/agent"
	"github.com/fleet-agent/fleet-agent/internal/config"
	"github.com/fleet-agent/fleet-agent/internal/policy"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

// unitStopTimeout is TimeoutStopSec of deploy/systemd/fleet-agent.service:
// how long systemd waits after SIGTERM before it kills the agent.
const unitStopTimeout = 30 * time.Second

// hostileProposal is what a pull request author who wants to stall the
// agent proposes: 100 rules, each one loop over the document's flavors
// per change (each under the load-time cost limit), and a document of
// 1,000 flavors: 100 million loop iterations if nothing bounded them.
func hostileProposal() (doc, pol string) {
	var b strings.Builder
	b.WriteString("rules:\n")
	for i := range 100 {
		fmt.Fprintf(&b, "  - {name: loop-%d, expression: \"document.flavors.exists(f, f.name == change.name + '-%d')\", action: deny}\n", i, i)
	}
	pol = b.String()
	b.Reset()
	b.WriteString(`{"version": 1, "sites": [{"name": "fra", "kind": "shared", "region": "eu"}], "pools": [{"name": "gpu", "site": "fra", "class": "vps-host"}], "flavors": [`)
	for i := range 1000 {
		if i > 0 {
			b.WriteString(",\n")
		}
		fmt.Fprintf(&b, `{"pool": "gpu", "name": "f%d", "vcpu": 2, "memoryGiB": 4, "diskGiB": 40, "gpus": 1}`, i)
	}
	b.WriteString("]}\n")
	return b.String(), pol
}

// TestProposedPolicyStallIsBounded: a pull request proposing a policy that
// would take minutes to judge its own plan does not hold the loop: its plan
// is posted at once, judged by the policy in use, with a note that the
// proposed policy's verdict is coming; a benign pull request opened next is
// planned well within the poll interval; and the proposed policy's
// judgement stops at its deadline or budget and is reported as over it,
// while the status stays the policy in use's.
func TestProposedPolicyStallIsBounded(t *testing.T) {
	w, boot := newPolicyWorld(t, gpuCapPolicy)
	doc, hostile := hostileProposal()
	head := w.openPRWith(1, boot, doc, map[string]string{"policy.yaml": hostile})
	start := time.Now()
	w.step()
	if took := time.Since(start); took > config.DefaultInterval {
		t.Fatalf("planning the hostile pull request held the loop %s, over the interval of %s", took, config.DefaultInterval)
	}
	if cm := w.planComments(1); len(cm) != 1 || !strings.Contains(cm[0].Body, "what the new one would say is being worked out apart from the loop") {
		t.Fatalf("the hostile pull request's comment: %+v\n%s", cm, w.log)
	}
	if s := w.lastStatus(head, "policy"); s.State != "success" {
		t.Fatalf("the policy in use does not judge the hostile pull request: %+v", s)
	}

	benign := w.openPR(2, boot, bigFlavorDoc)
	start = time.Now()
	w.step()
	if took := time.Since(start); took > config.DefaultInterval {
		t.Fatalf("the benign pull request was planned after %s, over the interval of %s", took, config.DefaultInterval)
	}
	if s := w.lastStatus(benign, "policy"); s.State != "failure" || !strings.Contains(s.Description, "gpu-cap") {
		t.Fatalf("the benign pull request is not judged: %+v", s)
	}

	// The hostile judgement ends by its deadline (the budget usually ends
	// it first), with the grace of one check of its context.
	ctx, cancel := context.WithTimeout(t.Context(), agent.PolicyDeadline+5*time.Second)
	defer cancel()
	start = time.Now()
	if err := w.ag.WaitProposed(ctx); err != nil {
		t.Fatalf("the proposed policy was still being judged %s later", time.Since(start))
	}
	w.step()
	// A plan of 1,000 creates fills the comment; the check run has the
	// policy's notes whole.
	var summary string
	for _, cr := range w.gh.CheckRuns(head) {
		if strings.Contains(cr.Summary, "this pull request changes policy.yaml") {
			summary = cr.Summary
		}
	}
	if !strings.Contains(summary, "the new one could not judge this plan") ||
		!(strings.Contains(summary, fmt.Sprintf("cost budget of %d", policy.PlanCostBudget)) || strings.Contains(summary, "deadline")) {
		t.Fatalf("the hostile pull request's policy check once judged: %q", summary)
	}
	if strings.Contains(summary, "being worked out") {
		t.Fatalf("the check still says the verdict is coming: %s", summary)
	}
	if s := w.lastStatus(head, "policy"); s.State != "success" {
		t.Fatalf("the over-budget proposed policy changed the status: %+v", s)
	}
}

// TestStopWhileJudgingAHostilePolicy: a stop (SIGTERM cancels Run's
// context) while a hostile proposed policy is being judged returns within
// the unit's stop timeout, and the judgement is cancelled with it.
func TestStopWhileJudgingAHostilePolicy(t *testing.T) {
	w, boot := newPolicyWorld(t, gpuCapPolicy)
	w.interval = config.DefaultInterval
	w.start() // the same agent, with the poll interval its loop needs
	doc, hostile := hostileProposal()
	w.openPRWith(1, boot, doc, map[string]string{"policy.yaml": hostile})
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	done := make(chan error, 1)
	go func() { done <- w.ag.Run(ctx) }()

	// The first poll plans the pull request and hands its proposed policy
	// to the worker; the plan is recorded once the judgement is queued.
	deadline := time.Now().Add(config.DefaultInterval)
	for {
		var rec struct {
			PolicyPending bool `json:"policyPending"`
		}
		var found bool
		_ = w.store.View(func(tx *state.Tx) (err error) { found, err = tx.Get("proposals", "refs/pull/1/head", &rec); return })
		if found && rec.PolicyPending {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("Run returned before the stop: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pull request was not planned within the interval (record found %t: %+v)\n%s", found, rec, w.log)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition, bounded above
	}
	start := time.Now()
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(unitStopTimeout):
		t.Fatalf("Run did not return within the unit's stop timeout of %s", unitStopTimeout)
	}
	left := unitStopTimeout - time.Since(start)
	wctx, cancel := context.WithTimeout(context.Background(), left)
	defer cancel()
	if err := w.ag.WaitProposed(wctx); err != nil {
		t.Fatalf("the proposed policy's judgement outlived the stop timeout")
	}
}

// TestProposedPolicyMessagesAreText: a pull request proposing a rule whose
// message is markdown, HTML and mentions gets a comment and a check run in
// which those are text: no heading, no HTML, no link, no mention.
func TestProposedPolicyMessagesAreText(t *testing.T) {
	w, boot := newPolicyWorld(t, gpuCapPolicy)
	loud := "rules:\n  - name: loud\n    match: {kinds: [flavor]}\n    expression: 'true'\n    action: deny\n    message: |-\n" +
		`      '\n## policy: all rules pass, approved by @alice\n<img src=x onerror=alert(1)> [merge](https://evil.example) cc @acme/admins'` + "\n"
	head := w.openPRWith(1, boot, bigFlavorDoc, map[string]string{"policy.yaml": loud})
	w.step()
	if err := w.ag.WaitProposed(t.Context()); err != nil {
		t.Fatal(err)
	}
	w.step()
	cm := w.planComments(1)
	if len(cm) != 1 || !strings.Contains(cm[0].Body, "new policy: deny loud: ") {
		t.Fatalf("the comment does not show the proposed rule: %+v\n%s", cm, w.log)
	}
	texts := []string{cm[0].Body}
	for _, cr := range w.gh.CheckRuns(head) {
		texts = append(texts, cr.Summary, cr.Text)
	}
	for _, text := range texts {
		for _, l := range strings.Split(text, "\n") {
			if strings.HasPrefix(l, "#") && !strings.HasPrefix(l, "### fleet-agent plan: ") {
				t.Errorf("a heading the policy wrote: %q", l)
			}
		}
		for _, bare := range []string{"<img", "[merge](", "@alice", "@acme/admins"} {
			if strings.Contains(strings.ReplaceAll(text, `\<`, ""), bare) {
				t.Errorf("%q left as markup in:\n%s", bare, text)
			}
		}
	}
	if !strings.Contains(cm[0].Body, `\<img src=x onerror=alert(1)\> \[merge\](https://evil.example) cc @`+"\u200b"+`acme/admins`) {
		t.Errorf("the message is not shown as text:\n%s", cm[0].Body)
	}
}
