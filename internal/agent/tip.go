package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/apply"
	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

// Refused is why a commit of the branch was not applied.
type Refused struct {
	Commit string `json:"commit"`
	Code   string `json:"code"`
	Reason string `json:"reason"`
	PR     int    `json:"pr,omitempty"`
	At     int64  `json:"at"`
}

// errWait says the apply waits for the next poll (GitHub or a provider
// unreachable); nothing is refused or reported as failed.
type errWait struct{ err error }

func (e errWait) Error() string { return "waiting for the next poll: " + errText(e.err) }
func (e errWait) Unwrap() error { return e.err }

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
	var refused Refused
	var seen bool
	if err := a.store.View(func(tx *state.Tx) (err error) { seen, err = tx.Get(spaceRefused, tip, &refused); return }); err != nil {
		return err
	}
	if seen {
		return nil // reported once already; a new push brings a new tip
	}
	err = a.tryApply(ctx, tip, ap)
	if err == nil {
		return nil
	}
	var w errWait
	if errors.As(err, &w) {
		a.log.Info().Str("commit", tip).Msg(w.Error())
		return nil
	}
	var r errRefused
	if errors.As(err, &r) {
		return nil // refuse logged and reported it
	}
	return err
}

// errRefused is a refusal refuse has recorded and reported already.
type errRefused struct{ err error }

func (e errRefused) Error() string { return e.err.Error() }
func (e errRefused) Unwrap() error { return e.err }

// tryApply runs the trust rules, then the apply. A refusal is recorded and
// reported; errWait leaves the tip for the next poll.
func (a *Agent) tryApply(ctx context.Context, tip string, ap *state.Applied) error {
	// Only commits that descend from the last applied one.
	if ap != nil && ap.Commit != "" {
		if err := a.repo.CheckForward(ap.Commit, tip); err != nil {
			return a.refuse(ctx, tip, 0, refusal.InvalidState,
				fmt.Sprintf("%s does not descend from the applied commit %s (a force-push or rewind of %s); it is never applied: push a commit on top of the applied one", shortSHA(tip), shortSHA(ap.Commit), a.cfg.Branch))
		}
	}
	if a.cfg.Verify {
		if _, err := a.repo.Verify(tip); err != nil {
			return a.refuse(ctx, tip, 0, refusal.InvalidState, "signature: "+errText(err))
		}
	}
	doc, errs, err := a.readDocument(tip)
	if err != nil {
		return a.refuse(ctx, tip, 0, refusal.CodeOf(err), errText(err))
	}
	if errs != nil {
		return a.refuse(ctx, tip, 0, refusal.InvalidInput, fmt.Sprintf("the document is invalid (%d error(s)); first: %s", len(errs), errs[0].String()))
	}
	p, err := a.makePlan(ctx, doc)
	if err != nil {
		if refusal.CodeOf(err) == refusal.Unavailable {
			return errWait{err}
		}
		return err
	}
	if p.Blocked() {
		return a.refuse(ctx, tip, 0, refusal.PlanBlocked, apply.Blocked(p.Plan).(*refusal.Error).Message)
	}
	by := "agent"
	pr := 0
	if !p.Empty() && a.cfg.RequireReviewedPlan {
		n, login, err := a.checkReviewed(ctx, tip, p.PlanHash)
		if err != nil {
			var w errWait
			if errors.As(err, &w) {
				return err
			}
			var r *refusal.Error
			if errors.As(err, &r) {
				return a.refuse(ctx, tip, n, r.Code, r.Message)
			}
			return err
		}
		pr = n
		if n > 0 {
			by = fmt.Sprintf("agent (#%d by %s)", n, login)
		}
	} else if a.forge != nil {
		// Not needed for trust, but the result belongs on the pull request.
		if m, ok, err := a.mergedPR(ctx, tip); err == nil && ok {
			pr = m.Number
			by = fmt.Sprintf("agent (#%d by %s)", m.Number, m.Author)
		}
	}
	// A tip whose plan makes no calls needs no review: it is recorded as
	// applied, so a fleet bootstrapped by hand is followed from its tip.
	if err := a.runApply(ctx, tip, doc, p, by, pr, "result"); err != nil {
		var w errWait
		if errors.As(err, &w) {
			return err
		}
		return a.refuse(ctx, tip, pr, refusal.CodeOf(err), errText(err))
	}
	return nil
}

// checkReviewed finds the reviewed plan of the tip: through GitHub, the
// pull request that merged it and the plan recorded for its head; without
// GitHub, a proposal head that is the tip or a parent of it.
func (a *Agent) checkReviewed(ctx context.Context, tip, hash string) (int, string, error) {
	if a.forge != nil {
		pr, ok, err := a.mergedPR(ctx, tip)
		if err != nil {
			return 0, "", errWait{err} // GitHub unreachable: wait, never refuse
		}
		if !ok {
			// GitHub links a merge commit to its pull request a moment after
			// the push; wait a little before calling it a direct push.
			if a.firstSeen(tip).Add(MergeLinkGrace).After(a.clock.Now()) {
				return 0, "", errWait{fmt.Errorf("GitHub does not list a merged pull request for %s yet", shortSHA(tip))}
			}
			return 0, "", refusal.New(refusal.InvalidState, "%s", fmt.Sprintf("%s was pushed to %s directly: no merged pull request has it, so no plan was reviewed; apply it by hand with fleet-agent apply --commit", shortSHA(tip), a.cfg.Branch))
		}
		var rv Reviewed
		var found bool
		if err := a.store.View(func(tx *state.Tx) (err error) { found, err = tx.Get(spaceReviewed, pr.HeadSHA, &rv); return }); err != nil {
			return pr.Number, "", err
		}
		if !found || !rv.Valid {
			return pr.Number, "", refusal.New(refusal.InvalidState, "%s", fmt.Sprintf("pull request #%d was merged at head %s before its plan was made; apply it by hand after reviewing fleet-agent plan --commit %s", pr.Number, shortSHA(pr.HeadSHA), shortSHA(tip)))
		}
		if rv.PlanHash != hash {
			return pr.Number, "", refusal.New(refusal.InvalidState, "%s", fmt.Sprintf("the plan changed since review: #%d was reviewed with plan %s, the merged commit plans %s (main moved, or the fleet changed); re-run the plan on a new pull request", pr.Number, shortSHA(rv.PlanHash), shortSHA(hash)))
		}
		return pr.Number, pr.Author, nil
	}
	info, err := a.repo.Commit(tip)
	if err != nil {
		return 0, "", err
	}
	for _, c := range append([]string{tip}, info.Parents...) {
		var rv Reviewed
		var found bool
		if err := a.store.View(func(tx *state.Tx) (err error) { found, err = tx.Get(spaceReviewed, c, &rv); return }); err != nil {
			return 0, "", err
		}
		if found && rv.Valid && rv.PlanHash == hash {
			return 0, "", nil
		}
	}
	return 0, "", refusal.New(refusal.InvalidState, "%s", fmt.Sprintf("no proposal with this plan (%s) was recorded for %s or its parents: push the change to a branch first so it is planned, then merge it", shortSHA(hash), shortSHA(tip)))
}

// pendingApply is a commit whose apply status was set to pending and not
// yet resolved (success, failure).
type pendingApply struct {
	Commit string `json:"commit"`
	At     int64  `json:"at"`
}

// resolveSuperseded sets apply failure on the commits left pending (an
// apply that waited, or a crash) that are no longer the tip: nothing will
// apply them now, and a pending status must not stay forever.
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
			if err := tx.Delete(spacePending, c); err != nil {
				return err
			}
			a.log.Warn().Str("commit", c).Str("tip", tip).Msg("not applied: the branch moved on before this commit could be applied")
			if err := a.enqueue(tx, Post{Kind: PostStatus, SHA: c, Context: "apply", State: "failure",
				Description: fmt.Sprintf("not applied: %s moved to %s before it could be applied", a.cfg.Branch, shortSHA(tip))}); err != nil {
				return err
			}
		}
		return nil
	})
}

// runApply applies and records the result posts in the same transaction.
// runApply applies p and posts its result; result is the comment marker's
// kind ("result", or "by-hand" for an apply by hand, whose commit may
// already carry a refusal comment under "result").
func (a *Agent) runApply(ctx context.Context, tip string, d *fleet.Document, p planned, by string, pr int, result string) error {
	if a.outbox != nil {
		_ = a.store.Update(func(tx *state.Tx) error {
			if err := tx.Put(spacePending, tip, pendingApply{Commit: tip, At: a.clock.Now().UnixMilli()}); err != nil {
				return err
			}
			return a.enqueue(tx, Post{Kind: PostStatus, SHA: tip, Context: "apply", State: "pending", Description: fmt.Sprintf("applying %d call(s)", len(p.Calls))})
		})
	}
	start := a.clock.Now()
	res, err := apply.Apply(ctx, a.store, d, apply.Options{
		Tenant: a.cfg.Tenant, Prune: a.cfg.Prune, PlanHash: p.PlanHash, AppliedBy: by, Commit: tip,
		Live: p.live, Checker: p.checker, Now: a.clock.Now,
		InTx: func(tx *state.Tx, applied *plan.Plan) error {
			// An earlier refusal of this commit (applied by hand since) is
			// history: a later rewind to it must be reported again.
			if err := tx.Delete(spaceRefused, tip); err != nil {
				return err
			}
			if err := tx.Delete(spacePending, tip); err != nil {
				return err
			}
			if err := tx.Put(spaceAgent, keyAppliedPR, appliedPR{Commit: tip, PR: pr}); err != nil {
				return err
			}
			desc := fmt.Sprintf("applied %d call(s)", len(applied.Calls))
			posts := []Post{
				{Kind: PostStatus, SHA: tip, Context: "apply", State: "success", Description: desc},
				{Kind: PostStatus, SHA: tip, Context: "drift", State: "success", Description: "no drift: just applied"},
			}
			if pr > 0 {
				marker := a.Marker(result, tip)
				posts = append(posts, Post{Kind: PostOnce, PR: pr, Marker: marker, Body: a.resultBody(marker, tip, by, applied)})
			}
			return a.enqueue(tx, posts...)
		},
	})
	a.metrics.Apply(err, a.clock.Now().Sub(start))
	if err != nil {
		switch refusal.CodeOf(err) {
		case refusal.Unavailable, refusal.ConfigDrift:
			// A provider down, or the fleet moved under us (a break-glass
			// edit): try again at the next poll.
			return errWait{err}
		}
		return err
	}
	a.log.Info().Str("commit", tip).Int("calls", res.Applied).Str("planHash", res.Plan.PlanHash).Str("by", by).Msg("applied")
	return nil
}

// refuse records that a commit is not applied and reports it once: a log
// line, apply failure on the commit, and a comment where a pull request
// exists.
func (a *Agent) refuse(ctx context.Context, commit string, pr int, code refusal.Code, reason string) error {
	if pr == 0 && a.forge != nil {
		m, ok, err := a.mergedPR(ctx, commit)
		if err != nil {
			// The refusal is reported once: wait until GitHub can say
			// which pull request gets its comment.
			return errWait{err}
		}
		if ok {
			pr = m.Number
		}
	}
	a.log.Error().Str("commit", commit).Str("code", string(code)).Int("pr", pr).Msg("not applied: " + reason)
	r := Refused{Commit: commit, Code: string(code), Reason: reason, PR: pr, At: a.clock.Now().UnixMilli()}
	err := a.store.Update(func(tx *state.Tx) error {
		if err := tx.Put(spaceRefused, commit, r); err != nil {
			return err
		}
		if err := tx.Delete(spacePending, commit); err != nil {
			return err
		}
		posts := []Post{{Kind: PostStatus, SHA: commit, Context: "apply", State: "failure", Description: "not applied: " + reason}}
		if pr > 0 {
			posts = append(posts, Post{Kind: PostOnce, PR: pr, Marker: a.Marker("result", commit), Body: a.refusedBody(commit, code, reason)})
		}
		return a.enqueue(tx, posts...)
	})
	if err != nil {
		return err
	}
	return errRefused{refusal.New(code, "%s", reason)}
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

func (a *Agent) resultBody(marker, commit, by string, p *plan.Plan) string {
	var b strings.Builder
	b.WriteString(marker + "\n")
	fmt.Fprintf(&b, "### fleet-agent applied `%s`\n\n", commit)
	if !strings.HasPrefix(by, "agent") {
		fmt.Fprintf(&b, "Applied by hand by %s after review.\n\n", by)
	}
	fmt.Fprintf(&b, "Applied %d call(s); planHash `%s`.\n\n", len(p.Calls), p.PlanHash)
	b.WriteString("**" + p.Summary.Counts() + "**\n")
	return b.String()
}

func (a *Agent) refusedBody(commit string, code refusal.Code, reason string) string {
	var b strings.Builder
	b.WriteString(a.Marker("result", commit) + "\n")
	fmt.Fprintf(&b, "### fleet-agent did not apply `%s`\n\n", commit)
	fmt.Fprintf(&b, "`%s`: %s\n\n", code, reason)
	fmt.Fprintf(&b, "Nothing was changed. To apply this commit by hand after review, on the ops box:\n\n```sh\nfleet-agent plan --commit %s\nfleet-agent apply --commit %s --plan-hash <the planHash printed by plan>\n```\n", commit, commit)
	return b.String()
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
