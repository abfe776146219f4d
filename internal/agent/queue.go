package agent

import (
	"github.com/fleet-agent/fleet-agent/internal/outbox"
	"github.com/fleet-agent/fleet-agent/internal/refs"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

// Merge queues. When the branch merges through GitHub's merge queue, GitHub
// builds a temporary branch per entry, gh-readonly-queue/<branch>/pr-N-...,
// whose commit is the branch with the pull request (and those ahead of it)
// merged, and moves the branch to that very commit once the required checks
// pass on it. The agent follows those refs like pull request heads: it plans
// each entry's commit, posts fleet-agent/plan on it (the check the queue
// waits for), and records the plan for that commit, naming the pull request.
// When the commit becomes the tip, requireReviewedPlan is met by that record
// (stepReviewed): it is the plan of exactly the commit being applied, made
// while the queue held it, which is what the queue's required check passed.

// withoutComments drops the comments of posts: a queue entry's plan is
// posted on its commit, not on the pull request, whose comment shows the
// plan of its own head.
func withoutComments(posts []outbox.Post) []outbox.Post {
	var out []outbox.Post
	for _, p := range posts {
		if p.Kind == outbox.KindStatus || p.Kind == outbox.KindCheck {
			out = append(out, p)
		}
	}
	return out
}

// queueVerdict is what the merge queue's record for the tip says: found is
// false when the tip was never a queue entry (the pull request's head record
// decides then).
func (a *Agent) queueVerdict(c *candidate) (v verdict, found bool) {
	rv, ok, err := a.reviewed(c.commit)
	switch {
	case err != nil:
		return verdictOf(err), true
	case !ok:
		return verdict{}, false
	}
	if _, queued := refs.QueuePull(rv.Ref, a.cfg.Branch); !queued {
		return verdict{}, false
	}
	switch {
	case !rv.Valid:
		return refused(refusal.InvalidState, "the merge queue's plan for %s (#%d) was blocked; GitHub should not have merged it (is fleet-agent/plan a required check?); apply it by hand after review",
			refs.Short(c.commit), rv.PR), true
	case rv.PlanHash != c.plan.PlanHash:
		return refused(refusal.InvalidState, "the plan changed since the merge queue planned %s (#%d): queued with plan %s, it plans %s now; re-queue the pull request",
			refs.Short(c.commit), rv.PR, refs.Short(rv.PlanHash), refs.Short(c.plan.PlanHash)), true
	}
	return proceed(), true
}
