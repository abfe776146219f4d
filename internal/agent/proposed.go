package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"sync"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/policy"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

// The policy a pull request proposes is written by whoever opened it, so
// what it costs to say what it would say is bounded and kept off the loop:
// one worker judges one proposed policy at a time, under
// ProposedPolicyDeadline and policy.PlanCostBudget, while the loop goes on
// planning and applying. The proposal's comment says the verdict is coming;
// when it is in, the loop is woken and the proposal planned again with it.
// A proposed policy over its deadline or budget is reported as such; it
// never judges anything, the policy in use does.

// PolicyDeadline bounds one judgement of a plan by a policy: the proposed
// one in the worker, and the one in use in the loop (there with
// policy.PlanCostBudget too, and the step's context, which a stop cancels).
const PolicyDeadline = 10 * time.Second

// proposedKey names one judgement: a head, the proposed policy's bytes and
// the plan's hash.
type proposedKey struct{ head, policy, planHash string }

// proposedJob is a judgement waiting for the worker.
type proposedJob struct {
	key  proposedKey
	pol  *policy.Policy
	in   policy.Input
	base context.Context
}

// proposedJudge is the worker's state; results are the notes of finished
// judgements by head (the key says of what).
type proposedJudge struct {
	mu      sync.Mutex
	queue   []proposedJob
	running *proposedKey
	working bool // a worker goroutine runs
	cancel  context.CancelFunc
	results map[string]proposedResult
	pending map[string]bool // heads whose last notes said the verdict is coming
	idle    chan struct{}   // closed when nothing is queued or running
	base    context.Context
}

type proposedResult struct {
	key   proposedKey
	notes []string
}

// maxProposedResults bounds the results kept: one per open head is all
// that is read.
const maxProposedResults = 256

// proposedNotes says what the proposed policy (its bytes, compiled) would
// say of the plan in: its notes when judged, or that the judgement is
// under way (pending) and queued for the worker.
func (a *Agent) proposedNotes(ctx context.Context, head string, data []byte, pol *policy.Policy, in policy.Input) (notes []string, pending bool) {
	sum := sha256.Sum256(data)
	key := proposedKey{head: head, policy: hex.EncodeToString(sum[:]), planHash: in.Plan.PlanHash}
	j := &a.proposed
	j.mu.Lock()
	defer j.mu.Unlock()
	if r, ok := j.results[head]; ok && r.key == key {
		delete(j.pending, head)
		return r.notes, false
	}
	if j.pending == nil || len(j.pending) >= maxProposedResults {
		j.pending = map[string]bool{}
	}
	j.pending[head] = true
	lead := "this pull request changes " + a.cfg.PolicyPath + ": it is judged by the current policy; what the new one would say is being worked out apart from the loop (at most " +
		PolicyDeadline.String() + "), and shown at the next plan"
	if j.running != nil && *j.running == key {
		return []string{lead}, true
	}
	for i, q := range j.queue {
		if q.key == key {
			return []string{lead}, true
		}
		if q.key.head == head { // an older judgement of this head: replaced
			j.queue = append(j.queue[:i], j.queue[i+1:]...)
			break
		}
	}
	if j.running != nil && j.running.head == head && j.cancel != nil {
		j.cancel() // the head moved on: its older judgement is of no use
	}
	base := j.base
	if base == nil {
		base = ctx
	}
	j.queue = append(j.queue, proposedJob{key: key, pol: pol, in: in, base: base})
	if !j.working {
		j.working, j.idle = true, make(chan struct{})
		go a.proposedWorker()
	}
	return []string{lead}, true
}

// proposedWorker judges the queued proposed policies one at a time, then
// wakes the loop so their proposals are planned again with the verdicts.
func (a *Agent) proposedWorker() {
	j := &a.proposed
	for {
		j.mu.Lock()
		if len(j.queue) == 0 {
			j.running, j.cancel, j.working = nil, nil, false
			close(j.idle)
			j.mu.Unlock()
			a.Wake()
			return
		}
		job := j.queue[0]
		j.queue = j.queue[1:]
		ctx, cancel := context.WithTimeout(job.base, PolicyDeadline)
		j.running, j.cancel = &job.key, cancel
		j.mu.Unlock()

		start := a.clock.Now()
		rep, spent, err := job.pol.Judge(ctx, job.in, policy.PlanCostBudget)
		cancel()
		notes := a.proposedVerdict(rep, err)
		a.log.Info().Str("commit", job.key.head).Uint64("cost", spent).Dur("took", a.clock.Now().Sub(start)).Bool("complete", err == nil).Msg("judged a proposed policy")

		j.mu.Lock()
		if refusal.CodeOf(err) != refusal.Unavailable { // a cancelled judgement is done again when asked
			if j.results == nil || len(j.results) >= maxProposedResults {
				j.results = map[string]proposedResult{}
			}
			j.results[job.key.head] = proposedResult{key: job.key, notes: notes}
		}
		j.mu.Unlock()
	}
}

// proposedVerdict is what the comment says of a proposed policy's
// judgement: its summary and each rule that did not pass, or that it ran
// over its deadline or budget (then it says nothing of the rules).
func (a *Agent) proposedVerdict(rep *plan.PolicyReport, err error) []string {
	if err != nil {
		return []string{"this pull request changes " + a.cfg.PolicyPath + ": it is judged by the current policy; the new one could not judge this plan: " + refusal.Text(err) +
			" (merged, it would refuse plans like this one)"}
	}
	notes := []string{"this pull request changes " + a.cfg.PolicyPath + ": it is judged by the current policy; once applied, the new one would say " + strings.TrimPrefix(rep.Summary(), "policy: ")}
	for _, v := range rep.Rules {
		if v.Verdict != plan.VerdictPass {
			notes = append(notes, "new policy: "+v.Line())
		}
	}
	return notes
}

// proposedIdle is closed when the worker has nothing queued or running.
func (a *Agent) proposedIdle() <-chan struct{} {
	a.proposed.mu.Lock()
	defer a.proposed.mu.Unlock()
	if a.proposed.idle == nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	return a.proposed.idle
}

// WaitProposed waits until every proposed policy queued is judged (or ctx
// ends): a caller that planned proposals and wants their comments whole.
func (a *Agent) WaitProposed(ctx context.Context) error {
	select {
	case <-a.proposedIdle():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stopProposed cancels the worker's judgements: the agent is stopping.
func (a *Agent) stopProposed() {
	j := &a.proposed
	j.mu.Lock()
	defer j.mu.Unlock()
	j.queue = nil
	if j.cancel != nil {
		j.cancel()
	}
}

// proposedPending reports whether the last notes made for head said the
// proposed policy's verdict was still coming: then the proposal is
// planned again until it is in.
func (a *Agent) proposedPending(head string) bool {
	j := &a.proposed
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.pending[head]
}
