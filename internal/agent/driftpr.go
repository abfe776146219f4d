package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/driftpr"
	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/gitsync"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/localapi"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/policy"
	"github.com/fleet-agent/fleet-agent/internal/refs"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

// DriftForge is what a drift proposal asks of GitHub: a pull request of the
// agent's own branch, its text kept current, and closed when the drift is
// gone. Without it the branch alone is the proposal.
type DriftForge interface {
	OpenPullRequest(ctx context.Context, head, base, title, body string) (int, error)
	EditPullRequest(ctx context.Context, number int, title, body string) error
	// ClosePullRequest comments, then closes.
	ClosePullRequest(ctx context.Context, number int, comment string) error
	// PullRequestState is "open", "closed" or "merged".
	PullRequestState(ctx context.Context, number int) (string, error)
}

// The states of a drift proposal.
const (
	proposalOpen     = "open"
	proposalMerged   = "merged"   // kept: the merge applies as a plan without calls
	proposalClosed   = "closed"   // closed by a person; the drift stays reported
	proposalReverted = "reverted" // closed by a person; the document applied again
	proposalCleared  = "cleared"  // the drift went away (or the document was applied)
	// proposalNone: there is drift but no proposal stands for it; Waiting
	// says why (nothing in it can be written, or git.branch's tip carries a
	// change that is not applied). An open proposal that comes to this is
	// closed with a comment that says so.
	proposalNone = "none"
)

const keyDriftProposal = "drift-proposal"

// shortValue keeps a value readable in status (userData may be 32 KiB).
func shortValue(v string) string {
	const most = 120
	if r := []rune(v); len(r) > most {
		return string(r[:most]) + "…"
	}
	return v
}

// summarize is the description of a rewrite as the record keeps it.
func summarize(rw *driftpr.Rewrite) ([]localapi.DriftValue, []localapi.DriftNotWritten) {
	var vals []localapi.DriftValue
	for _, f := range rw.Fields {
		vals = append(vals, localapi.DriftValue{Object: string(f.Kind) + " " + f.Name, Field: f.Field,
			Document: shortValue(f.Before), Fleet: shortValue(f.After), Source: f.Source})
	}
	var not []localapi.DriftNotWritten
	for _, u := range rw.Unwritten {
		not = append(not, localapi.DriftNotWritten{Object: string(u.Kind) + " " + u.Name, Field: u.Field, Reason: u.Reason, Blocked: u.Blocked, Source: u.Source})
	}
	return vals, not
}

// DriftProposalNow reads the record (nil when none was ever opened).
func (a *Agent) DriftProposalNow() (*localapi.DriftProposal, error) {
	var rec localapi.DriftProposal
	var ok bool
	err := a.store.View(func(tx *state.Tx) (err error) { ok, err = tx.Get(spaceAgent, keyDriftProposal, &rec); return })
	if err != nil || !ok {
		return nil, err
	}
	return &rec, nil
}

func (a *Agent) saveProposal(rec *localapi.DriftProposal) error {
	rec.UpdatedAt = a.clock.Now().UnixMilli()
	return a.store.Update(func(tx *state.Tx) error {
		var prev localapi.DriftProposal
		if _, err := tx.Get(spaceAgent, keyDriftProposal, &prev); err != nil {
			return err
		}
		if err := a.proposalEvent(tx, prev.State, rec); err != nil {
			return err
		}
		return tx.Put(spaceAgent, keyDriftProposal, rec)
	})
}

// proposeDrift keeps the drift proposal in step with the drift check that
// just ran, one step a check:
//
//	record     drift     the proposal            step
//	open       any       merged by a person      merged: drop the branch
//	open       any       closed by a person      reverted (revertOnClose) or closed
//	open       none      open                    cleared: close with a comment, drop the branch
//	open       some      open, tip or drift new  rewrite: push, edit the text
//	not open   some      (dismissed drift: none) open: push, open
func (a *Agent) proposeDrift(ctx context.Context, ap *state.Applied, doc *fleet.Document, made planned, drifted bool) error {
	if !a.cfg.DriftPullRequests || a.repo == nil {
		return nil
	}
	rec, err := a.DriftProposalNow()
	if err != nil {
		return err
	}
	if rec != nil && rec.State == proposalOpen {
		switch st, err := a.proposalState(ctx, rec); {
		case err != nil:
			return err
		case st == proposalMerged:
			// Merged is kept only once the merge is applied: a refused
			// merge leaves the fleet as it was, so the proposal stands,
			// its branch kept and rewritten to be merged again.
			applied, why, err := a.mergeOutcome(ap, rec)
			switch {
			case err != nil:
				return err
			case applied:
				return a.endProposal(ctx, rec, proposalMerged, "")
			case why == "":
				return a.setWaiting(rec, "merged into "+a.cfg.Branch+"; the merge is not applied yet")
			}
			rec.MergeRefused = why
			if a.driftForge != nil {
				rec.PR = 0 // a merged pull request cannot be reopened: a new one follows
			}
			if !drifted {
				return a.endProposal(ctx, rec, proposalCleared, "")
			}
		case st == proposalClosed:
			if a.cfg.RevertOnClose && drifted && !made.Blocked() {
				if err := a.heal(ctx, ap, doc, made); err != nil {
					return err
				}
				return a.endProposal(ctx, rec, proposalReverted, "")
			}
			rec.Dismissed = rec.DriftHash
			return a.endProposal(ctx, rec, proposalClosed, "")
		case !drifted:
			return a.endProposal(ctx, rec, proposalCleared, "The fleet matches the applied document again (the drift cleared, or the document was applied again): nothing left to keep. Closed by fleet-agent.")
		}
		return a.writeProposal(ctx, ap, rec, made)
	}
	if !drifted && rec != nil && rec.State == proposalNone {
		// The drift no proposal could stand for is gone.
		rec.State, rec.Waiting = proposalCleared, ""
		return a.saveProposal(rec)
	}
	if !drifted || (rec != nil && rec.Dismissed == made.DriftHash()) {
		return nil
	}
	first := a.clock.Now().UnixMilli()
	if rec != nil && rec.State == proposalNone && rec.Branch == driftpr.Branch(made.DriftHash()) {
		// Still the drift no proposal could stand for: one may now (the
		// tip was applied, the policy changed); a closed pull request is
		// not reused.
		rec.PR = 0
		return a.writeProposal(ctx, ap, rec, made)
	}
	return a.writeProposal(ctx, ap, &localapi.DriftProposal{Branch: driftpr.Branch(made.DriftHash()), FirstSeen: first}, made)
}

// mergeOutcome says whether the proposal's merge is applied (the applied
// commit holds its head), or else why it was refused ("" while the tip
// that merged it waits for its apply).
func (a *Agent) mergeOutcome(ap *state.Applied, rec *localapi.DriftProposal) (bool, string, error) {
	if ap.Commit != "" && rec.Head != "" {
		if in, err := a.repo.Descends(ap.Commit, rec.Head); err == nil && in {
			return true, "", nil
		}
	}
	tip := a.repo.Last().Tip
	if tip == "" {
		return false, "", nil
	}
	var r localapi.Refused
	var ok bool
	if err := a.store.View(func(tx *state.Tx) (err error) { ok, err = tx.Get(spaceRefused, tip, &r); return }); err != nil || !ok {
		return false, "", err
	}
	return false, fmt.Sprintf("merged into %s at %s, but the merge was refused (%s): %s", a.cfg.Branch, refs.Short(tip), r.Code, r.Reason), nil
}

// setWaiting records why the proposal does not follow the drift now.
func (a *Agent) setWaiting(rec *localapi.DriftProposal, why string) error {
	if rec.Waiting == why {
		return nil
	}
	rec.Waiting = why
	a.log.Info().Str("branch", rec.Branch).Msg("drift proposal waits: " + why)
	return a.saveProposal(rec)
}

// proposalBase chooses the commit a proposal goes on and the file it
// rewrites: the applied commit's own fleet.json, so a proposal never
// carries a change nobody applied. On the tip of git.branch when the tip is
// applied; on a refused tip only when it differs from the applied commit in
// fleet.json alone (the proposal's diff then undoes that change, and says
// so); else why not. A tip not yet applied nor refused is waited for.
func (a *Agent) proposalBase(ap *state.Applied, tip string) (file []byte, undoes, why string, err error) {
	if ap.Commit == "" {
		return nil, "", "the applied document came from the command line, not from a commit of " + a.cfg.Branch + ": a drift proposal is written only on an applied commit; apply a commit of " + a.cfg.Branch + " first", nil
	}
	if file, err = a.repo.ReadFile(ap.Commit, a.cfg.Path); err != nil {
		return nil, "", "", err
	}
	if tip == ap.Commit {
		return file, "", "", nil
	}
	var refused bool
	if err := a.store.View(func(tx *state.Tx) (err error) { refused, err = tx.Get(spaceRefused, tip, &localapi.Refused{}); return }); err != nil {
		return nil, "", "", err
	}
	if !refused {
		return nil, "", fmt.Sprintf("the tip %s of %s is not applied yet: the proposal follows it once it is applied or refused", refs.Short(tip), a.cfg.Branch), nil
	}
	// The tip with the applied fleet.json holds the applied commit's files
	// exactly when fleet.json is all the tip changed.
	otherFiles := fmt.Sprintf("the tip %s of %s was refused and changes files other than %s: a drift proposal on it would carry that change unreviewed; revert %s on %s (or merge a reviewed change) and the proposal follows", refs.Short(tip), a.cfg.Branch, a.cfg.Path, refs.Short(tip), a.cfg.Branch)
	probe, err := a.repo.CommitFile(tip, a.cfg.Path, file, "probe", gitsync.Person{Name: "fleet-agent", Email: "fleet-agent@localhost"}, time.Unix(0, 0))
	if err != nil {
		return nil, "", otherFiles, nil // the tip has no such file to rewrite
	}
	pi, err1 := a.repo.Commit(probe)
	ai, err2 := a.repo.Commit(ap.Commit)
	if err := errors.Join(err1, err2); err != nil {
		return nil, "", "", err
	}
	if pi.Tree != ai.Tree {
		return nil, "", otherFiles, nil
	}
	tipFile, err := a.repo.ReadFile(tip, a.cfg.Path)
	if err != nil {
		return nil, "", "", err
	}
	if !bytes.Equal(tipFile, file) {
		undoes = refs.Short(tip)
	}
	return file, undoes, "", nil
}

// proposalState asks GitHub, or without it reads the branch from the last
// poll: gone after it was seen, or from a poll that listed the refs after
// the push, is closed, unless git.branch now holds it. A poll that listed
// them before the push (polls and pushes take turns under the tick) says
// nothing.
func (a *Agent) proposalState(ctx context.Context, rec *localapi.DriftProposal) (string, error) {
	if a.driftForge != nil && rec.PR > 0 {
		fctx, cancel := context.WithTimeout(ctx, ForgeTimeout)
		defer cancel()
		return a.driftForge.PullRequestState(fctx, rec.PR)
	}
	snap := a.repo.Last()
	if snap.Tip != "" && rec.Head != "" {
		if in, err := a.repo.Descends(snap.Tip, rec.Head); err == nil && in {
			return proposalMerged, nil
		}
	}
	if _, ok := snap.Heads["refs/heads/"+rec.Branch]; ok {
		if !rec.Seen {
			rec.Seen = true
			return proposalOpen, a.saveProposal(rec)
		}
		return proposalOpen, nil
	}
	if rec.Seen || (rec.PushedAt > 0 && snap.PolledAt.UnixMilli() > rec.PushedAt) {
		return proposalClosed, nil
	}
	return proposalOpen, nil
}

// writeProposal writes the drift onto the tip of git.branch and pushes it,
// then opens the pull request or edits its text. Nothing is pushed when
// the branch already says it.
func (a *Agent) writeProposal(ctx context.Context, ap *state.Applied, rec *localapi.DriftProposal, made planned) error {
	tip := a.repo.Last().Tip
	if tip == "" {
		return nil
	}
	hash := made.DriftHash()
	start := time.Now()
	file, undoes, why, err := a.proposalBase(ap, tip)
	if err != nil {
		return err
	}
	if why != "" {
		if rec.State == "" {
			rec.State = proposalNone
		}
		return a.setWaiting(rec, why)
	}
	liveDoc, err := plan.Export(made.snap)
	if err != nil {
		return err
	}
	liveBytes, err := plan.Pretty(liveDoc)
	if err != nil {
		return err
	}
	var audit []state.AuditRow
	if err := a.store.View(func(tx *state.Tx) (err error) { audit, err = tx.Audit(); return }); err != nil {
		return err
	}
	rw, err := a.rewriteAllowed(ctx, file, made, liveBytes, audit)
	if err != nil {
		return err
	}
	// The branch already says it when it holds this file on this tip.
	sum := sha256.Sum256(rw.File)
	written := hex.EncodeToString(sum[:])
	opened := a.driftForge == nil || rec.PR > 0 // a pull request that failed to open is tried again
	title := fmt.Sprintf("fleet-agent: keep %d drifted value(s) (%s)", len(rw.Fields), rec.Branch)
	body := driftpr.Body(rw, driftpr.Choices{Branch: a.cfg.Branch, RevertOnClose: a.cfg.RevertOnClose,
		FirstSeen: time.UnixMilli(rec.FirstSeen), DriftHash: hash, Marker: "<!-- " + a.cfg.Prefix + ":drift-proposal " + rec.Branch + " -->", Undoes: undoes})
	if bytes.Equal(rw.File, file) {
		rw.Fields = nil // nothing written: a commit would only undo the tip
	}
	if len(rw.Fields) == 0 {
		return a.unwritable(ctx, rec, rw, hash)
	}
	if rec.State == proposalOpen && rec.Base == tip && rec.Written == written && opened {
		if rec.DriftHash == hash && rec.Waiting == "" {
			return nil
		}
		// The file is the same but the drift is not (a blocked change came
		// or went): only the description moves.
		a.editProposalText(ctx, rec, title, body)
		rec.DriftHash, rec.Fields, rec.Unwritten, rec.Waiting = hash, len(rw.Fields), len(rw.Unwritten), ""
		rec.Values, rec.NotWritten = summarize(rw)
		return a.saveProposal(rec)
	}
	if tipFile, err := a.repo.ReadFile(tip, a.cfg.Path); err != nil {
		return err
	} else if bytes.Equal(tipFile, rw.File) {
		// The tip already holds this file: a commit would be empty, and
		// pushed at each check it would loop.
		return a.setWaiting(rec, fmt.Sprintf("the tip %s of %s already holds the file this proposal would write, and is not applied: see why it was refused", refs.Short(tip), a.cfg.Branch))
	}
	msg := fmt.Sprintf("Keep the fleet's drift in %s\n\nWritten by fleet-agent: %d value(s) changed outside the document.\nDrift hash: %s\n", a.cfg.Path, len(rw.Fields), hash)
	now := a.clock.Now()
	head, err := a.repo.CommitFile(tip, a.cfg.Path, rw.File, msg, gitsync.Person{Name: "fleet-agent", Email: "fleet-agent@localhost"}, now)
	if err != nil {
		return err
	}
	if err := a.repo.PushBranch(ctx, rec.Branch, head); err != nil {
		return err
	}
	opening := rec.State != proposalOpen
	a.editProposalText(ctx, rec, title, body)
	if opening {
		rec.OpenedAt = now.UnixMilli()
	}
	rec.State, rec.Base, rec.Head, rec.DriftHash, rec.Written, rec.Waiting = proposalOpen, tip, head, hash, written, ""
	rec.PushedAt = now.UnixMilli()
	rec.Fields, rec.Unwritten = len(rw.Fields), len(rw.Unwritten)
	rec.Values, rec.NotWritten = summarize(rw)
	if err := a.saveProposal(rec); err != nil {
		return err
	}
	ev := a.log.Info()
	if opening {
		ev = a.log.Warn()
	}
	ev.Str("branch", rec.Branch).Int("pr", rec.PR).Str("head", head).Str("base", tip).Int("fields", len(rw.Fields)).
		Int("bytesChanged", rw.Changed).Int("bytesDrifted", rw.Drifted).Dur("took", time.Since(start)).
		Msg(map[bool]string{true: "drift proposal opened", false: "drift proposal rewritten"}[opening])
	return nil
}

// unwritable is the drift no proposal can stand for: nothing in it can be
// written. An open proposal is closed with a comment that says why (and its
// branch deleted); the record keeps the reasons, for status.
func (a *Agent) unwritable(ctx context.Context, rec *localapi.DriftProposal, rw *driftpr.Rewrite, hash string) error {
	var reasons []string
	for _, u := range rw.Unwritten {
		what := string(u.Kind) + " " + u.Name
		if u.Field != "" {
			what += " " + u.Field
		}
		reasons = append(reasons, what+": "+u.Reason)
	}
	why := "nothing in the drift can be written into the document: " + strings.Join(reasons, "; ") + "; it stays reported"
	a.log.Warn().Str("driftHash", hash).Int("unwritten", len(rw.Unwritten)).Str("branch", rec.Branch).Msg("no drift proposal: " + why)
	rec.Values, rec.NotWritten = summarize(rw)
	rec.DriftHash, rec.Fields, rec.Unwritten, rec.Waiting = hash, 0, len(rw.Unwritten), why
	if rec.State == proposalOpen {
		return a.endProposal(ctx, rec, proposalNone, "The drift changed: "+why+". The values this pull request wrote no longer stand for it, so it is closed by fleet-agent.")
	}
	rec.State = proposalNone
	return a.saveProposal(rec)
}

// rewriteAllowed writes the drift, leaving out what the policy would deny
// were it proposed, field by field: a field a deny rule breaks alone is
// listed as blocked with the rule's message and the object's other fields
// are written. An object still denied with its allowed fields together
// (a rule over two fields) is left out whole.
func (a *Agent) rewriteAllowed(ctx context.Context, file []byte, made planned, liveBytes []byte, audit []state.AuditRow) (*driftpr.Rewrite, error) {
	write := func(p *plan.Plan, skip map[string]string) (*driftpr.Rewrite, error) {
		return driftpr.WriteExcept(file, p, made.snap, liveBytes, audit, a.cfg.Tenant, skip)
	}
	rw, err := write(made.Plan, nil)
	if err != nil {
		return nil, err
	}
	denied := a.deniedDrift(ctx, rw.File, made)
	if len(denied) == 0 {
		return rw, nil
	}
	// Each field of a denied object judged alone: the object's other
	// fields left as the document has them, other denied objects left out.
	skip := map[string]string{}
	for _, c := range made.Plan.Doing() {
		if denied[string(c.Kind)+"\x00"+c.Name] == "" || c.Blocked != "" {
			continue
		}
		for _, f := range c.Fields {
			alone := map[string]string{}
			for _, o := range made.Plan.Doing() {
				if denied[string(o.Kind)+"\x00"+o.Name] == "" {
					continue
				}
				for _, g := range o.Fields {
					if o.Kind != c.Kind || o.Name != c.Name || g != f {
						alone[driftpr.FieldKey(o.Kind, o.Name, g)] = ""
					}
				}
			}
			try, err := write(made.Plan, alone)
			if err != nil {
				return nil, err
			}
			if why := a.deniedDrift(ctx, try.File, made)[string(c.Kind)+"\x00"+c.Name]; why != "" {
				skip[driftpr.FieldKey(c.Kind, c.Name, f)] = why
			}
		}
	}
	if rw, err = write(made.Plan, skip); err != nil {
		return nil, err
	}
	if still := a.deniedDrift(ctx, rw.File, made); len(still) > 0 {
		return write(withBlocked(made.Plan, still), skip)
	}
	return rw, nil
}

// deniedDrift judges the drift as if a person had proposed it: the kept
// file planned against the fleet as the applied document has it. Merged, a
// keep plans no call, so the policy would never see what it keeps; what a
// deny rule breaks is not written. By kind and name, the rule's message.
func (a *Agent) deniedDrift(ctx context.Context, kept []byte, made planned) map[string]string {
	if a.cfg.PolicyPath == "" {
		return nil
	}
	pol, _ := a.currentPolicy()
	if pol == nil {
		return nil
	}
	doc, errs := fleet.Validate(a.cfg.Path, kept)
	if errs != nil {
		return nil
	}
	base := applyInMemory(made.snap, made.Calls)
	p := plan.Make(doc, base, plan.Options{Tenant: a.cfg.Tenant})
	jctx, cancel := context.WithTimeout(ctx, PolicyDeadline)
	defer cancel()
	rep, _, _ := pol.Judge(jctx, a.policyInput(doc, kept, planned{Plan: p, snap: base}), policy.PlanCostBudget)
	denied := map[string]string{}
	for _, r := range rep.Rules {
		if r.Verdict != plan.VerdictDeny {
			continue
		}
		for _, h := range r.Matched {
			key := string(h.Kind) + "\x00" + h.Name
			if denied[key] == "" {
				denied[key] = fmt.Sprintf("denied by the policy (rule %s: %s), were it proposed", r.Name, h.Message)
			}
		}
	}
	return denied
}

// withBlocked is p with the changes of denied blocked for their reasons.
func withBlocked(p *plan.Plan, denied map[string]string) *plan.Plan {
	cp := *p
	cp.Changes = slices.Clone(p.Changes)
	for i := range cp.Changes {
		c := &cp.Changes[i]
		if why := denied[string(c.Kind)+"\x00"+c.Name]; why != "" {
			c.Blocked = strings.Join(slices.DeleteFunc([]string{c.Blocked, why}, func(s string) bool { return s == "" }), "; ")
		}
	}
	return &cp
}

// applyInMemory is snap after calls, as an apply would store them: the
// fleet as the applied document has it.
func applyInMemory(snap *inventory.Snapshot, calls []plan.Call) *inventory.Snapshot {
	objs := map[string]inventory.Object{}
	var order []string
	for _, o := range snap.All() {
		objs[o.ID] = o.Clone()
		order = append(order, o.ID)
	}
	for _, c := range calls {
		_, op, _ := strings.Cut(c.Method, ".")
		spec := map[string]any{}
		for k, v := range c.Params {
			if k != "id" {
				spec[k] = inventory.CloneValue(v)
			}
		}
		o, exists := objs[c.ID()]
		switch {
		case op == "delete" || op == "unoffer":
			delete(objs, c.ID())
		case op == "archive" && exists:
			o.Archived = true
			objs[c.ID()] = o
		case op == "create" || !exists:
			objs[c.ID()] = inventory.Object{Kind: c.Kind(), ID: c.ID(), Name: c.Name(), Spec: spec}
			order = append(order, c.ID())
		default: // update, set, offer
			for k, v := range spec {
				if v == nil {
					delete(o.Spec, k)
				} else {
					o.Spec[k] = v
				}
			}
			objs[c.ID()] = o
		}
	}
	out := make([]inventory.Object, 0, len(objs))
	for _, id := range order {
		if o, ok := objs[id]; ok {
			out = append(out, o)
			delete(objs, id)
		}
	}
	// The clusters run what they ran: an apply changes no running version.
	return inventory.NewSnapshot(out).WithClusterVersions(snap.ClusterVersions())
}

// editProposalText opens the pull request, or edits its text; without
// GitHub the branch is the proposal and there is nothing to do.
func (a *Agent) editProposalText(ctx context.Context, rec *localapi.DriftProposal, title, body string) {
	if a.driftForge == nil {
		return
	}
	fctx, cancel := context.WithTimeout(ctx, ForgeTimeout)
	defer cancel()
	var err error
	if rec.PR == 0 {
		rec.PR, err = a.driftForge.OpenPullRequest(fctx, rec.Branch, a.cfg.Branch, title, body)
	} else {
		err = a.driftForge.EditPullRequest(fctx, rec.PR, title, body)
	}
	if err != nil {
		// The branch is pushed; the next check opens or edits again.
		a.log.Warn().Err(err).Str("branch", rec.Branch).Msg("cannot open or edit the drift pull request; retried at the next drift check")
	}
}

// endProposal closes the pull request (with a comment when the agent
// closes it) and deletes the agent's branch.
func (a *Agent) endProposal(ctx context.Context, rec *localapi.DriftProposal, how, comment string) error {
	if a.driftForge != nil && rec.PR > 0 && comment != "" {
		fctx, cancel := context.WithTimeout(ctx, ForgeTimeout)
		err := a.driftForge.ClosePullRequest(fctx, rec.PR, comment)
		cancel()
		if err != nil {
			return err
		}
	}
	if err := a.repo.PushBranch(ctx, rec.Branch, ""); err != nil {
		return err
	}
	rec.State = how
	a.log.Info().Str("branch", rec.Branch).Int("pr", rec.PR).Str("state", how).Msg("drift proposal ended")
	return a.saveProposal(rec)
}
