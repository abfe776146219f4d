package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/apply"
	"github.com/fleet-agent/fleet-agent/internal/localapi"
	"github.com/fleet-agent/fleet-agent/internal/outbox"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/refs"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

// adoptStatus is the apply status of a refused commit that can be adopted:
// what happened in a few words, then the apply command with the real hash. A status description holds 140
// code points, so the commit is its 12-character prefix (which --commit
// takes) and the plan command is left to the reason, the comment, the
// check run, status and the page.
func adoptStatus(what, commit, planHash string) string {
	return what + "; adopt: fleet-agent apply --commit " + refs.Short(commit) + " --plan-hash " + planHash
}

// pendingApply is a commit whose apply status is pending: it waits (for
// GitHub, a provider, the merge link) or is being applied. Description is
// what the status says, so a wait is posted once per distinct reason.
type pendingApply struct {
	Commit      string `json:"commit"`
	At          int64  `json:"at"`
	Description string `json:"description,omitempty"`
}

// The apply triggers and results the metrics count.
const (
	triggerTip  = "tip"
	triggerHand = "hand"
	triggerHeal = "heal"

	resultApplied = "applied"
	resultRefused = "refused"
	resultFailed  = "failed"
)

// applyTip applies the branch's tip if it is new and trusted.
func (a *Agent) applyTip(ctx context.Context, tip string) error {
	a.applyMu.Lock()
	defer a.applyMu.Unlock()
	ap, err := a.applied()
	if err != nil {
		return err
	}
	if err := a.resolveSuperseded(tip); err != nil {
		return err
	}
	if ap != nil && ap.Commit == tip {
		return nil
	}
	var seen bool
	if err := a.store.View(func(tx *state.Tx) (err error) { seen, err = tx.Get(spaceRefused, tip, &localapi.Refused{}); return }); err != nil {
		return err
	}
	if seen {
		return nil // reported once already; a new push brings a new tip
	}
	c := &candidate{commit: tip, applied: ap}
	v, _ := check(ctx, a.tipSteps(), c)
	if v.kind == goOn {
		v = a.runApply(ctx, c, commentResult, triggerTip)
	}
	return a.settle(ctx, c, v)
}

// settle is the one place the loop's verdict on a commit is recorded,
// reported (the apply status, a comment where a pull request exists) and
// logged. An apply that went through has recorded and reported itself in
// its own transaction (runApply).
func (a *Agent) settle(ctx context.Context, c *candidate, v verdict) error {
	switch v.kind {
	case goOn:
		return nil
	case wait:
		return a.waiting(c.commit, v.reason)
	}
	pr := c.pr
	if pr == 0 && a.forge != nil {
		m, ok, err := a.mergedPR(ctx, c.commit)
		if err != nil {
			// The refusal is reported once: wait until GitHub can say which
			// pull request gets its comment.
			return a.waiting(c.commit, "refusing, once GitHub says which pull request merged it: "+v.reason)
		}
		if ok {
			pr = m.Number
		}
	}
	v = a.adoptableByHand(ctx, c, v)
	r := localapi.Refused{Commit: c.commit, Code: string(v.code), Reason: v.reason, PR: pr, At: a.clock.Now().UnixMilli()}
	desc := "not applied: " + v.reason
	if v.adoptable && c.plan.Plan != nil {
		r.PlanHash, r.Adopt = c.plan.PlanHash, adoptCommands(c.commit, c.plan.PlanHash)
		desc = adoptStatus(v.what, c.commit, c.plan.PlanHash)
	}
	ev := a.log.Error().Str("commit", c.commit).Str("code", string(v.code)).Int("pr", pr)
	if r.Adopt != nil {
		ev = ev.Str("planHash", r.PlanHash).Strs("adopt", r.Adopt)
	}
	ev.Msg("not applied: " + v.reason)
	a.metrics.Apply(triggerTip, resultRefused, 0)
	body := a.refusedBody(c.commit, v.code, v.reason, r.PlanHash)
	return a.store.Update(func(tx *state.Tx) error {
		if err := tx.Put(spaceRefused, c.commit, r); err != nil {
			return err
		}
		// Without a pull request no comment explains the status: its check
		// run (with GitHub App credentials) carries the reason and both
		// commands.
		summary := ""
		if pr == 0 {
			summary = body
		}
		if err := a.setApplyStatusWith(tx, c.commit, "failure", desc, summary); err != nil {
			return err
		}
		if pr > 0 {
			return a.enqueue(tx, outbox.Once(pr, a.Marker(commentResult, c.commit), body))
		}
		return nil
	})
}

// adoptableByHand keeps a refusal adoptable only when an apply by hand
// would take the commit: an apply by hand is held to the deny rules, so the
// adopt commands of a commit the policy denies would fail when pasted. Such
// a commit is refused for the denial (its code and advice are the policy's:
// a new commit that the policy allows, proposed), naming the review it
// lacks too.
func (a *Agent) adoptableByHand(ctx context.Context, c *candidate, v verdict) verdict {
	if !v.adoptable || c.plan.Plan == nil || c.doc == nil {
		return v
	}
	byHand := *c
	byHand.operator = "adopt"
	pv := a.stepPolicy(ctx, &byHand)
	if pv.kind != refuse {
		return v
	}
	out := refused(pv.code, "%s; no apply by hand takes a plan the policy denies, so it cannot be adopted either (it was not reviewed: %s): make a new commit that the policy allows and propose it", pv.reason, v.what)
	out.what = pv.what
	return out
}

// waiting leaves a commit for the next poll, with its apply status pending
// and saying what it waits for: posted and logged once per distinct reason.
func (a *Agent) waiting(commit, reason string) error {
	return a.store.Update(func(tx *state.Tx) error {
		var p pendingApply
		found, err := tx.Get(spacePending, commit, &p)
		if err != nil || (found && p.Description == reason) {
			return err
		}
		a.log.Info().Str("commit", commit).Msg("not applied yet: " + reason)
		return a.setApplyStatus(tx, commit, "pending", reason)
	})
}

// setApplyStatus is the one writer of a commit's fleet-agent/apply status.
// A pending status is remembered until it is resolved, so a commit left
// pending (a wait, a crash) is never pending forever (resolveSuperseded).
func (a *Agent) setApplyStatus(tx *state.Tx, commit, st, desc string) error {
	return a.setApplyStatusWith(tx, commit, st, desc, "")
}

// setApplyStatusWith is setApplyStatus with the summary of its check run
// (when check runs are on), for a status that no comment explains.
func (a *Agent) setApplyStatusWith(tx *state.Tx, commit, st, desc, summary string) error {
	if st == "pending" {
		if err := tx.Put(spacePending, commit, pendingApply{Commit: commit, At: a.clock.Now().UnixMilli(), Description: desc}); err != nil {
			return err
		}
	} else if err := tx.Delete(spacePending, commit); err != nil {
		return err
	}
	posts := []outbox.Post{outbox.Status(commit, "apply", st, desc, "")}
	if summary != "" && a.cfg.Checks {
		posts = append(posts, outbox.Check(commit, "apply", st, desc, summary, nil))
	}
	if err := a.applyEvent(tx, commit, st, desc); err != nil {
		return err
	}
	return a.enqueue(tx, posts...)
}

// resolveSuperseded sets apply failure on the commits left pending that are
// no longer the tip: nothing will apply them now, and a pending status must
// not stay forever.
func (a *Agent) resolveSuperseded(tip string) error {
	var stale []string
	err := a.store.View(func(tx *state.Tx) error {
		return tx.ForEach(spacePending, func(k string, _ []byte) error {
			if k != tip {
				stale = append(stale, k)
			}
			return nil
		})
	})
	if err != nil || len(stale) == 0 {
		return err
	}
	return a.store.Update(func(tx *state.Tx) error {
		for _, c := range stale {
			a.log.Warn().Str("commit", c).Str("tip", tip).Msg("not applied: the branch moved on before this commit could be applied")
			if err := a.setApplyStatus(tx, c, "failure", fmt.Sprintf("not applied: %s moved to %s before it could be applied", a.cfg.Branch, refs.Short(tip))); err != nil {
				return err
			}
		}
		return nil
	})
}

// runApply applies a candidate that passed the steps and posts its result
// in the apply's own transaction; result is the comment marker's kind
// (result, or by-hand for an apply by hand, whose commit may already carry
// a refusal comment under result). A provider that cannot answer, or a
// fleet that moved under the apply (a break-glass edit), makes the commit
// wait for the next poll.
func (a *Agent) runApply(ctx context.Context, c *candidate, result, trigger string) verdict {
	if a.outbox != nil {
		_ = a.store.Update(func(tx *state.Tx) error {
			return a.setApplyStatus(tx, c.commit, "pending", fmt.Sprintf("applying %d call(s)", len(c.plan.Calls)))
		})
	}
	by := c.by()
	keep := a.policyOfCommit(c.commit)
	start := a.clock.Now()
	var rev int64
	res, err := apply.Apply(ctx, a.store, c.doc, apply.Options{
		Tenant: a.cfg.Tenant, Prune: a.prune(), MaxTeardowns: a.maxTeardowns(), PlanHash: c.plan.PlanHash, AppliedBy: by, Commit: c.commit,
		Live: c.plan.checks, Now: a.clock.Now,
		InTx: func(tx *state.Tx, applied *plan.Plan) error {
			tx.OnCommitAt(func(r int64) { rev = r })
			// An earlier refusal of this commit (applied by hand since) is
			// history: a later rewind to it must be reported again.
			if err := tx.Delete(spaceRefused, c.commit); err != nil {
				return err
			}
			if err := tx.Put(spaceAgent, keyAppliedPR, appliedPR{Commit: c.commit, PR: c.pr}); err != nil {
				return err
			}
			if err := keep(tx); err != nil {
				return err
			}
			if err := a.setApplyStatus(tx, c.commit, "success", fmt.Sprintf("applied %d call(s)", len(applied.Calls))); err != nil {
				return err
			}
			posts := []outbox.Post{outbox.Status(c.commit, "drift", "success", "no drift: just applied", "")}
			if c.pr > 0 {
				marker := a.Marker(result, c.commit)
				posts = append(posts, outbox.Once(c.pr, marker, a.resultBody(marker, c.commit, by, applied)))
			}
			return a.enqueue(tx, posts...)
		},
	})
	took := a.clock.Now().Sub(start)
	if err != nil {
		switch refusal.CodeOf(err) {
		case refusal.Unavailable, refusal.ConfigDrift:
			v := waitFor("waiting to apply again: %s", refusal.Text(err))
			v.code = refusal.CodeOf(err)
			return v
		}
		a.metrics.Apply(trigger, resultFailed, took)
		return verdictOf(err)
	}
	a.metrics.Apply(trigger, resultApplied, took)
	a.log.Info().Str("commit", c.commit).Int("calls", res.Applied).Str("planHash", res.Plan.PlanHash).Str("by", by).Int64("rev", rev).Msg("applied")
	a.wakeSubstrates()
	a.currentPolicy() // status says at once which policy judges now
	return proceed()
}

func (a *Agent) prune() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cfg.Prune
}

func (a *Agent) maxTeardowns() *int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cfg.MaxTeardowns
}

// mergedPR finds the pull request that merged sha, within ForgeTimeout.
func (a *Agent) mergedPR(ctx context.Context, sha string) (PullRequest, bool, error) {
	fctx, cancel := context.WithTimeout(ctx, ForgeTimeout)
	defer cancel()
	pr, ok, err := a.forge.MergedPullRequest(fctx, sha)
	if err != nil {
		a.metrics.ForgeError()
	}
	return pr, ok, err
}

// MergeLinkGrace is how long a new tip waits for GitHub to list the pull
// request that merged it before it is refused as a direct push.
const MergeLinkGrace = 2 * time.Minute

// firstSeen is when this process first saw a tip (a restart waits again).
func (a *Agent) firstSeen(tip string) time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.seen == nil {
		a.seen = map[string]time.Time{}
	}
	t, ok := a.seen[tip]
	if !ok {
		t = a.clock.Now()
		if len(a.seen) > 1000 {
			clear(a.seen)
		}
		a.seen[tip] = t
	}
	return t
}
