package agent

import (
	"context"
	"fmt"
	"sort"
	"strconv"

	"github.com/fleet-agent/fleet-agent/internal/annotation"
	"github.com/fleet-agent/fleet-agent/internal/gitsync"
	"github.com/fleet-agent/fleet-agent/internal/localapi"
	"github.com/fleet-agent/fleet-agent/internal/outbox"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/refs"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/textline"
)

// proposal is one head to plan.
type proposal struct {
	ref  string
	head string
	pr   int
	// queue: a merge queue entry (ref is gh-readonly-queue/...; pr the pull
	// request it names). Its plan is posted as a status and check run on
	// its commit only: the pull request's plan comment stays its head's.
	queue bool
}

// plainRef says whether a branch's name may be planned: one with control
// or direction characters (textline.Plain's) is not, since its name is
// shown by status, doctor and the page, where a U+202E turns the rest of a
// line around and a line separator forges a line; no honest branch needs
// them. It is logged once per branch, the name escaped.
func (a *Agent) plainRef(ref string) bool {
	if textline.IsPlain(ref) {
		return true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.hostileRefs == nil {
		a.hostileRefs = map[string]bool{}
	}
	if !a.hostileRefs[ref] {
		a.hostileRefs[ref] = true
		a.log.Warn().Str("ref", strconv.Quote(ref)).Msg("a branch whose name holds control or direction characters is not planned: rename it")
	}
	return false
}

// planProposals plans every proposal whose head moved, and all of them
// when the branch's tip moved or the fleet changed (an apply, an edit, a
// heal) since their last plan.
func (a *Agent) planProposals(ctx context.Context, snap gitsync.Snapshot, prs []PullRequest) {
	var todo []proposal
	if a.forge != nil {
		for _, pr := range prs {
			ref := refs.PullHead(pr.Number)
			head, ok := snap.Heads[ref]
			if !ok {
				continue // not fetched yet: next poll
			}
			todo = append(todo, proposal{ref: ref, head: head, pr: pr.Number})
		}
		for ref, head := range snap.Heads {
			if n, ok := refs.QueuePull(ref, a.cfg.Branch); ok {
				todo = append(todo, proposal{ref: ref, head: head, pr: n, queue: true})
			}
		}
	} else {
		for ref, head := range snap.Heads {
			if ref == "refs/heads/"+a.cfg.Branch || a.merged(snap.Tip, head) || !a.plainRef(ref) {
				continue
			}
			todo = append(todo, proposal{ref: ref, head: head})
		}
	}
	sort.Slice(todo, func(i, j int) bool { return todo[i].ref < todo[j].ref })
	ap, err := a.applied()
	if err != nil {
		a.log.Error().Err(err).Msg("cannot read the applied record")
		return
	}
	appliedCommit := ""
	if ap != nil {
		appliedCommit = ap.Commit + "/" + ap.PlanHash + "/" + strconv.FormatInt(ap.AppliedAt, 10)
	}
	// Any change of the applied fleet (an apply, a break-glass edit, a drift
	// heal) makes every open proposal's plan stale: the audit row of the
	// last one is part of what a proposal was planned against, so that its
	// plan, comment and status follow the fleet.
	var last *state.AuditRow
	if err := a.store.View(func(tx *state.Tx) (err error) {
		last, err = tx.LastAudit(func(r state.AuditRow) bool { return r.Action == "apply" || r.Action == "edit" || r.Action == "heal" })
		return err
	}); err != nil {
		a.log.Error().Err(err).Msg("cannot read the audit")
		return
	}
	if last != nil {
		appliedCommit += "/" + strconv.FormatUint(last.Seq, 10)
	}
	open := map[string]bool{}
	for _, p := range todo {
		open[p.ref] = true
		var prev storedProposal
		var found bool
		_ = a.store.View(func(tx *state.Tx) (err error) { found, err = tx.Get(spaceProposals, p.ref, &prev); return })
		if found && prev.Commit == p.head && prev.Tip == snap.Tip && prev.Applied == appliedCommit && !prev.Awaiting && !prev.ReviewBound && !prev.PolicyPending {
			continue // nothing moved for this proposal
		}
		a.planOne(ctx, p, snap.Tip, appliedCommit)
	}
	// Forget proposals that are gone (closed pull requests, deleted branches).
	_ = a.store.Update(func(tx *state.Tx) error {
		var gone []string
		_ = tx.ForEach(spaceProposals, func(k string, _ []byte) error {
			if !open[k] {
				gone = append(gone, k)
			}
			return nil
		})
		for _, k := range gone {
			if err := tx.Delete(spaceProposals, k); err != nil {
				return err
			}
		}
		return nil
	})
}

// planOne plans one head, records the plan (that record is what
// "reviewed" means) and posts it.
func (a *Agent) planOne(ctx context.Context, p proposal, tip, appliedCommit string) {
	rec := storedProposal{Proposal: localapi.Proposal{Ref: p.ref, Commit: p.head, Errors: []string{}}, Tip: tip, Applied: appliedCommit, PR: p.pr}
	var posts []outbox.Post
	status := func(state, desc string) outbox.Post { return outbox.Status(p.head, "plan", state, desc, "") }
	comment := func(body string) outbox.Post { return outbox.Sticky(p.pr, a.Marker(commentPlan, ""), body) }
	doc, errs, err := a.readDocument(p.head)
	var pl *plan.Plan
	var made planned
	switch {
	case err != nil && refusal.CodeOf(err) == refusal.InvalidInput:
		// A missing or oversized document is the proposal's fault.
		rec.Errors = []string{refusal.Text(err)}
		posts = append(posts, status("failure", "no valid document: "+refusal.Text(err)), comment(a.notMadeBody(p.head, []string{refusal.Text(err)})))
	case err != nil:
		a.log.Warn().Err(err).Str("ref", p.ref).Msg("cannot read the proposal's document")
		return
	case errs != nil:
		for _, e := range errs {
			rec.Errors = append(rec.Errors, e.String())
		}
		st, cm := status("failure", fmt.Sprintf("invalid document: %d error(s); first %s %s", len(errs), errs[0].Path, errs[0].Message)),
			comment(a.invalidBody(p.head, errs))
		posts = append(posts, st, cm)
		if a.cfg.Checks {
			posts = append(posts, planCheck(st, cm, a.errorAnnotations(errs)))
		}
	default:
		made, err = a.makePlan(ctx, doc, planHow{})
		pl = made.Plan
		if err != nil {
			rec.Errors = []string{refusal.Text(err)}
			posts = append(posts, status("error", "the plan could not be made: "+refusal.Text(err)), comment(a.notMadeBody(p.head, []string{refusal.Text(err)})))
			break
		}
		// The text again, for the lines of the objects (annotations and
		// the policy): a plan only holds the document's values.
		data, _ := a.repo.ReadFile(p.head, a.cfg.Path)
		pl.Policy = a.judgeProposal(ctx, p.head, p.pr, doc, data, made)
		rec.Awaiting = len(pl.Policy.Awaiting()) > 0
		rec.ReviewBound = reviewBound(pl.Policy)
		rec.Denied = deniedLines(pl.Policy)
		rec.PolicyPending = a.proposedPending(p.head)
		rec.PlanHash, rec.Summary, rec.Blocked = pl.PlanHash, pl.Summary, pl.Blocked()
		rec.Lines = pl.TextLines(false)
		state := "success"
		desc := pl.Summary.Counts()
		if pl.Blocked() {
			state = "failure"
			desc = fmt.Sprintf("blocked: %d change(s) cannot be applied; %s", pl.Summary.Blocked, pl.Summary.Counts())
		}
		st, cm := status(state, desc), comment(a.planBody(p.head, pl))
		posts = append(posts, st, cm)
		if a.cfg.Checks {
			var anns []annotation.Annotation
			if pl.Blocked() && data != nil {
				anns = a.blockedAnnotations(data, doc, pl)
			}
			posts = append(posts, planCheck(st, cm, anns))
		}
		posts = append(posts, a.policyPosts(p.head, pl.Policy)...)
	}
	a.log.Info().Str("ref", p.ref).Str("commit", p.head).Str("planHash", rec.PlanHash).Bool("blocked", rec.Blocked).Int("errors", len(rec.Errors)).Msg("planned proposal")
	err = a.store.Update(func(tx *state.Tx) error {
		if err := tx.Put(spaceProposals, p.ref, rec); err != nil {
			return err
		}
		if pl != nil {
			rv := Reviewed{Head: p.head, PlanHash: pl.PlanHash, PR: p.pr, Ref: p.ref, At: a.clock.Now().UnixMilli(), Valid: !pl.Blocked()}
			if err := tx.Put(spaceReviewed, p.head, rv); err != nil {
				return err
			}
		}
		if p.queue {
			return a.enqueue(tx, withoutComments(posts)...)
		}
		if p.pr > 0 {
			return a.enqueue(tx, posts...)
		}
		return nil
	})
	if err != nil {
		a.log.Error().Err(err).Str("ref", p.ref).Msg("cannot record the proposal's plan")
	}
}

// reviewBound reports whether a verdict depends on reviews: an approve rule
// broken, waiting or met. A review dismissed or changed, or an approver who
// left the team, turns it back, so such a proposal is judged at every poll
// (a pull_request_review delivery wakes the agent for one at once).
func reviewBound(r *plan.PolicyReport) bool {
	if r == nil {
		return false
	}
	for _, v := range r.Rules {
		if v.Verdict == plan.VerdictApprove {
			return true
		}
	}
	return false
}

// deniedLines are the verdict lines of the rules that deny a plan.
func deniedLines(rep *plan.PolicyReport) []string {
	if rep == nil {
		return nil
	}
	var out []string
	for _, v := range rep.Rules {
		if v.Verdict == plan.VerdictDeny {
			out = append(out, v.Line())
		}
	}
	return out
}

// merged reports whether a branch's head is already in the branch (the tip
// or an ancestor of it): without GitHub, a merged branch that nobody
// deleted is not an open proposal.
func (a *Agent) merged(tip, head string) bool {
	if tip == "" {
		return false
	}
	if tip == head {
		return true
	}
	// A walk of the history per branch and poll adds up: the answer holds
	// until the tip moves.
	a.mu.Lock()
	if a.mergedTip != tip {
		a.mergedTip, a.mergedHeads = tip, map[string]bool{}
	}
	known, ok := a.mergedHeads[head]
	a.mu.Unlock()
	if ok {
		return known
	}
	yes, err := a.repo.Descends(tip, head)
	if err != nil {
		return false // unknown: plan it rather than hide it
	}
	a.mu.Lock()
	if a.mergedTip == tip {
		a.mergedHeads[head] = yes
	}
	a.mu.Unlock()
	return yes
}

// ProposalPages lists the recorded proposals with their plan lines, by ref.
func (a *Agent) ProposalPages() ([]localapi.ProposalPage, error) {
	var out []localapi.ProposalPage
	err := a.store.View(func(tx *state.Tx) error {
		return eachRecord(tx, spaceProposals, func(p storedProposal) {
			out = append(out, localapi.ProposalPage{Proposal: p.Proposal, PR: p.PR, Lines: p.Lines})
		})
	})
	return out, err
}

// Proposals lists the recorded proposals for status.
func (a *Agent) Proposals() ([]localapi.Proposal, error) {
	v, err := Status(a.store, a.cfg.Tenant)
	return v.Proposals, err
}
