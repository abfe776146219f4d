package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/apply"
	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/plan"
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
			return "", refusal.New(refusal.InvalidState, "%s is not on %s: only commits of the branch are planned and applied by hand", shortSHA(full), a.cfg.Branch)
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
	p, err := a.makePlan(ctx, doc)
	return p.Plan, full, err
}

// ApplyCommit applies the document at a commit of the branch by hand, held
// to the reviewed plan hash; the trust rules other than review still hold.
func (a *Agent) ApplyCommit(ctx context.Context, commit, planHash, by string) (*plan.Plan, int, error) {
	if planHash == "" {
		return nil, 0, refusal.New(refusal.InvalidInput, "--plan-hash is required with --commit: plan the commit first and pass the hash you reviewed")
	}
	a.applyMu.Lock()
	defer a.applyMu.Unlock()
	full, err := a.onBranch(commit)
	if err != nil {
		return nil, 0, err
	}
	ap, err := a.applied()
	if err != nil {
		return nil, 0, err
	}
	if ap != nil && ap.Commit != "" && ap.Commit != full {
		if err := a.repo.CheckForward(ap.Commit, full); err != nil {
			return nil, 0, refusal.Wrap(refusal.InvalidState, err, "%s does not descend from the applied commit %s", shortSHA(full), shortSHA(ap.Commit))
		}
	}
	if a.cfg.Verify {
		if _, err := a.repo.Verify(full); err != nil {
			return nil, 0, err
		}
	}
	doc, errs, err := a.readDocument(full)
	if err != nil {
		return nil, 0, err
	}
	if errs != nil {
		return nil, 0, errs.Refusal()
	}
	return a.applyByHand(ctx, full, doc, planHash, by)
}

func (a *Agent) applyByHand(ctx context.Context, commit string, doc *fleet.Document, planHash, by string) (*plan.Plan, int, error) {
	pl, err := a.makePlan(ctx, doc)
	if err != nil {
		return nil, 0, err
	}
	p := pl.Plan
	if p.Blocked() {
		return p, 0, apply.Blocked(p)
	}
	if p.PlanHash != planHash {
		return p, 0, refusal.New(refusal.ConfigDrift, "the plan of %s is now %s, not the reviewed %s: the fleet moved; plan it again", shortSHA(commit), shortSHA(p.PlanHash), shortSHA(planHash))
	}
	// The result belongs on the pull request that merged the commit, if
	// GitHub can say which (best effort: an apply by hand never waits).
	pr := 0
	if a.forge != nil {
		if m, ok, err := a.mergedPR(ctx, commit); err == nil && ok {
			pr = m.Number
		}
	}
	if err := a.runApply(ctx, commit, doc, pl, by, pr, "by-hand"); err != nil {
		var w errWait
		if errors.As(err, &w) {
			err = w.err
		}
		// Nobody retries an apply by hand: resolve its pending status.
		a.log.Error().Str("commit", commit).Str("by", by).Str("code", string(refusal.CodeOf(err))).Msg("not applied by hand: " + errText(err))
		if a.outbox != nil {
			_ = a.store.Update(func(tx *state.Tx) error {
				if err := tx.Delete(spacePending, commit); err != nil {
					return err
				}
				return a.enqueue(tx, Post{Kind: PostStatus, SHA: commit, Context: "apply", State: "failure", Description: "not applied by hand: " + errText(err)})
			})
		}
		return p, 0, err
	}
	a.log.Info().Str("commit", commit).Str("by", by).Msg(fmt.Sprintf("applied by hand (%d calls)", len(p.Calls)))
	return p, len(p.Calls), nil
}
