package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/refs"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

// StopGrace is how long a stop waits for the current step before it
// cancels the step's network calls.
const StopGrace = 5 * time.Second

// waker is the part of gitsync's Waiter the agent keeps.
type waker interface{ Wake() }

// Run polls every interval (and at once when woken) until ctx ends. It
// finishes the current step before it returns.
func (a *Agent) Run(ctx context.Context) error {
	w, err := a.repo.NewWaiter(a.cfg.Interval)
	if err != nil {
		return err
	}
	defer w.Close()
	a.mu.Lock()
	a.waker = w
	a.mu.Unlock()
	// The proposed policies' worker stops with the agent, at once: its
	// judgements decide nothing.
	a.proposed.mu.Lock()
	a.proposed.base = ctx
	a.proposed.mu.Unlock()
	defer a.stopProposed()
	// A step runs on its own context: a stop lets it finish (a plan, an
	// apply, a record) and abandons it only after a grace period, when a
	// network call hangs. Every write is one transaction, so an abandoned
	// step leaves nothing half done.
	step, abandon := context.WithCancel(context.WithoutCancel(ctx))
	defer abandon()
	go func() {
		<-ctx.Done()
		select {
		case <-time.After(StopGrace):
			abandon()
		case <-step.Done():
		}
	}()
	for {
		_ = a.Tick(step)
		if err := w.Wait(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
}

// Wake makes the loop poll now (webhooks).
func (a *Agent) Wake() {
	a.mu.Lock()
	w := a.waker
	a.mu.Unlock()
	if w != nil {
		w.Wake()
	}
}

// onBranch resolves a commit of the branch: a full hash or a prefix, which
// must be the tip or an ancestor of it.
func (a *Agent) onBranch(commit string) (string, error) {
	full, err := a.repo.Resolve(commit)
	if err != nil {
		return "", err
	}
	tip := a.repo.Last().Tip
	if tip == "" {
		return "", refusal.New(refusal.Unavailable, "the agent has not read %s yet; try again after its first poll", a.cfg.Branch)
	}
	if full != tip {
		ok, err := a.repo.Descends(tip, full)
		if err != nil {
			return "", err
		}
		if !ok {
			return "", refusal.New(refusal.InvalidState, "%s is not on %s: only commits of the branch are planned and applied by hand", refs.Short(full), a.cfg.Branch)
		}
	}
	return full, nil
}

// PlanCommit plans the document at a commit of the branch (the by-hand
// path: fleet-agent plan --commit SHA).
func (a *Agent) PlanCommit(ctx context.Context, commit string) (*plan.Plan, string, error) {
	full, err := a.onBranch(commit)
	if err != nil {
		return nil, "", err
	}
	doc, errs, err := a.readDocument(full)
	if err != nil {
		return nil, full, err
	}
	if errs != nil {
		return nil, full, errs.Refusal()
	}
	p, err := a.makePlan(ctx, doc, planHow{})
	if err == nil {
		p.Plan.Policy = a.judgeByHand(full, doc, p)
		if note := a.policyChangeNote(full); note != "" {
			if p.Plan.Policy == nil {
				p.Plan.Policy = &plan.PolicyReport{}
			}
			p.Plan.Policy.Notes = append(p.Plan.Policy.Notes, note)
		}
	}
	return p.Plan, full, err
}

// policyChangeNote says, for a plan by hand of a commit, that the commit
// changes the policy file against the applied commit: the plan's calls do
// not show it, and it decides how every later plan is judged.
func (a *Agent) policyChangeNote(commit string) string {
	ap, err := a.applied()
	if err != nil {
		return ""
	}
	c := &candidate{commit: commit, applied: ap}
	ch := a.changesPolicy(c)
	if ch == "" {
		return ""
	}
	return fmt.Sprintf("this commit %s the policy file %s (against the applied commit): the plan's calls do not show it; the agent applies a change of the policy only through a reviewed pull request, and an apply by hand of this commit puts it in force", ch, a.cfg.PolicyPath)
}

// ApplyCommit applies the document at a commit of the branch by hand, held
// to the reviewed plan hash; the trust rules other than review still hold
// (byHandSteps). It returns the plan (which explains a refusal too) and the
// number of calls applied.
func (a *Agent) ApplyCommit(ctx context.Context, commit, planHash, by string) (*plan.Plan, int, error) {
	if planHash == "" {
		return nil, 0, refusal.New(refusal.InvalidInput, "--plan-hash is required with --commit: plan the commit first and pass the hash you reviewed")
	}
	if err := plan.CheckHashForm(planHash); err != nil {
		return nil, 0, err
	}
	a.applyMu.Lock()
	defer a.applyMu.Unlock()
	ap, err := a.applied()
	if err != nil {
		return nil, 0, err
	}
	c := &candidate{commit: commit, applied: ap, hashWanted: planHash, operator: by}
	v, _ := check(ctx, a.byHandSteps(), c)
	if v.kind == goOn {
		// The result belongs on the pull request that merged the commit, if
		// GitHub can say which (best effort: an apply by hand never waits).
		if a.forge != nil {
			if m, ok, err := a.mergedPR(ctx, c.commit); err == nil && ok {
				c.pr = m.Number
			}
		}
		v = a.runApply(ctx, c, commentByHand, triggerHand)
	}
	if v.kind == goOn {
		a.log.Info().Str("commit", c.commit).Str("by", by).Msg(fmt.Sprintf("applied by hand (%d calls)", len(c.plan.Calls)))
		return c.plan.Plan, len(c.plan.Calls), nil
	}
	// Nobody retries an apply by hand: its refusal goes back to the
	// operator, and an apply status it set pending is resolved.
	a.log.Error().Str("commit", c.commit).Str("by", by).Str("code", string(v.code)).Msg("not applied by hand: " + v.reason)
	if v.kind == refuse {
		a.metrics.Apply(triggerHand, resultRefused, 0)
	}
	if a.outbox != nil && c.plan.Plan != nil {
		_ = a.store.Update(func(tx *state.Tx) error {
			var p pendingApply
			if found, err := tx.Get(spacePending, c.commit, &p); err != nil || !found {
				return err
			}
			return a.setApplyStatus(tx, c.commit, "failure", "not applied by hand: "+v.reason)
		})
	}
	return c.plan.Plan, 0, v.err()
}
