package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/apply"
	"github.com/fleet-agent/fleet-agent/internal/driftpr"
	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/gitsync"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/refs"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

// The trust rules (docs/configuration.md, step 3) are ordered steps. Each
// looks at one thing about a commit and answers go on, wait or refuse:
//
//   - go on: the next step runs; after the last, the commit is applied;
//   - wait: the commit stays for the next poll (GitHub or a provider cannot
//     answer, or GitHub has not linked the merge yet); its apply status is
//     pending with what it waits for;
//   - refuse: the commit is never applied by the loop; a code and a reason
//     a person can act on.
//
// The loop's verdicts are recorded, reported and logged in one place
// (settle); an apply by hand runs the steps it shares with the loop and
// returns the verdict to its caller instead.

type verdictKind int

const (
	goOn verdictKind = iota
	wait
	refuse
)

// verdict is one step's answer.
type verdict struct {
	kind   verdictKind
	code   refusal.Code
	reason string
	// adoptable marks a refusal whose only fault is the review: the
	// document is valid, its plan is not blocked, and an operator may adopt
	// the commit by hand after reading its plan (adoptCommands).
	adoptable bool
	// what is the refusal in 15 characters at most, for the apply status,
	// whose 140 code points hold it beside the adopt command.
	what string
}

func proceed() verdict { return verdict{kind: goOn} }

func waitFor(format string, args ...any) verdict {
	return verdict{kind: wait, code: refusal.Unavailable, reason: fmt.Sprintf(format, args...)}
}

func refused(code refusal.Code, format string, args ...any) verdict {
	return verdict{kind: refuse, code: code, reason: fmt.Sprintf(format, args...)}
}

// unreviewed is the refusal of a commit no one reviewed the plan of: the
// loop never applies it, a person may adopt it by hand.
func unreviewed(what, format string, args ...any) verdict {
	v := refused(refusal.InvalidState, format, args...)
	v.adoptable, v.what = true, what
	return v
}

// adoptCommands are the commands that adopt a refused commit by hand: read
// its plan, then apply exactly that plan. Both name the full commit and
// plan hash, so they can be pasted as they are.
func adoptCommands(commit, planHash string) []string {
	return []string{
		"fleet-agent plan --commit " + commit,
		"fleet-agent apply --commit " + commit + " --plan-hash " + planHash,
	}
}

// err is the verdict as a refusal, for an apply by hand.
func (v verdict) err() error { return refusal.New(v.code, "%s", v.reason) }

// candidate is a commit on its way through the steps, with what they learn.
type candidate struct {
	commit  string
	applied *state.Applied
	doc     *fleet.Document
	plan    planned
	// pr and author are the pull request that merged the commit, when
	// GitHub says; prHead is its head, whose plan was reviewed.
	pr     int
	author string
	prHead string
	// hashWanted and operator, for an apply by hand, are the plan hash
	// the operator reviewed and who they are (USER@HOST).
	hashWanted string
	operator   string
	// policyChange, once policyChecked, says how the commit changes the
	// policy file against the applied commit ("" when it does not).
	policyChange  string
	policyChecked bool
}

// by is the appliedBy of the apply: the operator of an apply by hand, else
// the agent and the pull request that merged the commit.
func (c *candidate) by() string {
	if c.operator != "" {
		return c.operator
	}
	if c.pr > 0 {
		return fmt.Sprintf("agent (#%d by %s)", c.pr, c.author)
	}
	return "agent"
}

// step is one trust rule.
type step struct {
	name string
	run  func(ctx context.Context, c *candidate) verdict
}

// tipSteps are the rules for a new tip of the branch, in order. The tip is
// on the branch by definition; a commit applied by hand is checked for it
// first (byHandSteps).
func (a *Agent) tipSteps() []step {
	return []step{
		{"descends", a.stepDescends},
		{"signed", a.stepSigned},
		{"document", a.stepDocument},
		{"plan", a.stepPlan},
		{"merge", a.stepMergeLinked},
		{"reviewed", a.stepReviewed},
		{"policy", a.stepPolicy},
	}
}

// byHandSteps are the rules for a commit an operator applies by hand after
// review: the review is theirs (the plan hash they pass), the rest holds.
func (a *Agent) byHandSteps() []step {
	return []step{
		{"branch", a.stepOnBranch},
		{"descends", a.stepDescends},
		{"signed", a.stepSigned},
		{"document", a.stepDocument},
		{"plan", a.stepPlan},
		{"hash", a.stepHash},
		{"policy", a.stepPolicy},
	}
}

// check runs steps until one does not go on.
func check(ctx context.Context, steps []step, c *candidate) (verdict, string) {
	for _, s := range steps {
		if v := s.run(ctx, c); v.kind != goOn {
			return v, s.name
		}
	}
	return proceed(), ""
}

// stepOnBranch resolves a commit named by hand (a prefix is fine) and
// refuses one that is not the tip of the branch or an ancestor of it.
func (a *Agent) stepOnBranch(_ context.Context, c *candidate) verdict {
	full, err := a.onBranch(c.commit)
	if err != nil {
		return verdictOf(err)
	}
	c.commit = full
	return proceed()
}

// stepDescends refuses a commit that does not descend from the applied
// one: a force-push or rewind is never applied.
func (a *Agent) stepDescends(_ context.Context, c *candidate) verdict {
	if c.applied == nil || c.applied.Commit == "" || c.applied.Commit == c.commit {
		return proceed()
	}
	if err := a.repo.CheckForward(c.applied.Commit, c.commit); err != nil {
		return refused(refusal.InvalidState, "%s does not descend from the applied commit %s (a force-push or rewind of %s); it is never applied: push a commit on top of the applied one",
			refs.Short(c.commit), refs.Short(c.applied.Commit), a.cfg.Branch)
	}
	return proceed()
}

// stepSigned refuses, with git.verify, a commit without a trusted signature.
func (a *Agent) stepSigned(_ context.Context, c *candidate) verdict {
	if !a.cfg.Verify {
		return proceed()
	}
	if _, err := a.repo.Verify(c.commit); err != nil {
		return refused(refusal.InvalidState, "signature: %s", refusal.Text(err))
	}
	return proceed()
}

// stepDocument reads and validates the document at the commit.
func (a *Agent) stepDocument(_ context.Context, c *candidate) verdict {
	doc, errs, err := a.readDocument(c.commit)
	switch {
	case err != nil:
		return verdictOf(err)
	case errs != nil:
		return refused(refusal.InvalidInput, "the document is invalid (%d error(s)); first: %s", len(errs), errs[0].String())
	}
	c.doc = doc
	return proceed()
}

// stepPlan plans the document; a provider that cannot answer makes the
// commit wait, a blocked plan refuses it.
func (a *Agent) stepPlan(ctx context.Context, c *candidate) verdict {
	p, err := a.makePlan(ctx, c.doc, planHow{})
	if err != nil {
		return verdictOf(err)
	}
	c.plan = p
	if p.Blocked() {
		return refused(refusal.PlanBlocked, "%s", refusal.Message(apply.Blocked(p.Plan)))
	}
	return proceed()
}

// stepHash holds an apply by hand to the plan the operator reviewed.
func (a *Agent) stepHash(_ context.Context, c *candidate) verdict {
	if err := plan.CheckReviewedHash(c.hashWanted, c.plan.PlanHash); err != nil {
		return verdictOf(err)
	}
	if c.plan.PlanHash != c.hashWanted {
		// When the operator reviewed is unknown: the last change is the
		// likely cause, and says who to ask.
		moved := "the fleet moved"
		change, err := a.fleetChange(0)
		if err != nil {
			return verdictOf(err)
		}
		if change != "" {
			moved += " (its last change: " + change + ")"
		}
		return refused(refusal.ConfigDrift, "the plan of %s is now %s, not the reviewed %s: %s; plan it again",
			refs.Short(c.commit), refs.Short(c.plan.PlanHash), refs.Short(c.hashWanted), moved)
	}
	return proceed()
}

// reviewNeeded says whether the commit's plan must be the reviewed one: a
// plan that changes the fleet, or a commit that changes the policy (the
// rules every later plan is judged by are a change of the fleet's
// safeguards, whatever the commit's own plan).
func (a *Agent) reviewNeeded(c *candidate) bool {
	return a.cfg.RequireReviewedPlan && (!c.plan.Empty() || a.changesPolicy(c) != "" || a.changesDocument(c))
}

// changesDocument reports whether the commit's document says something
// else than the applied one while its plan makes no call: it writes into
// the document what the fleet already holds (a keep of a hand change, or a
// removal that prune leaves standing). The document is the baseline every
// later plan and drift check starts from, so changing it is a change that
// needs review, calls or not (found from outside: a commit added on the
// drift branch rode in unreviewed because its plan was empty).
func (a *Agent) changesDocument(c *candidate) bool {
	if c.applied == nil || c.applied.Commit == "" || c.applied.Commit == c.commit || c.doc == nil || len(c.applied.Document) == 0 {
		return false
	}
	return !bytes.Equal(c.doc.Canonical(), c.applied.Document)
}

// changesPolicy says how the commit changes the policy file against the
// applied commit: "changes", "adds" or "deletes" it, "" when it does not.
// Before any commit is applied no policy is in force, and the first one
// cannot loosen anything: it is not a change. A file that cannot be read
// is taken as changed: a policy fails closed.
func (a *Agent) changesPolicy(c *candidate) string {
	if c.policyChecked {
		return c.policyChange
	}
	c.policyChecked = true
	if a.cfg.PolicyPath == "" || c.applied == nil || c.applied.Commit == "" || c.applied.Commit == c.commit {
		return ""
	}
	read := func(commit string) ([]byte, bool, error) {
		data, err := a.repo.ReadFile(commit, a.cfg.PolicyPath)
		var ge *gitsync.Error
		if errors.As(err, &ge) && ge.Kind == gitsync.KindFileMissing {
			return nil, false, nil
		}
		return data, err == nil, err
	}
	before, had, err1 := read(c.applied.Commit)
	after, has, err2 := read(c.commit)
	switch {
	case err1 != nil || err2 != nil:
		c.policyChange = "may change"
	case had && !has:
		c.policyChange = "deletes"
	case !had && has:
		c.policyChange = "adds"
	case had && !bytes.Equal(before, after):
		c.policyChange = "changes"
	}
	return c.policyChange
}

// policyNote is what an unreviewed refusal adds when the commit changes
// the policy.
func (a *Agent) policyNote(c *candidate) string {
	if ch := a.changesPolicy(c); ch != "" {
		return fmt.Sprintf("; it %s %s, and a change of the policy is applied only through a reviewed pull request, whatever its plan", ch, a.cfg.PolicyPath)
	}
	return ""
}

// policyAsReviewed reports whether the reviewed head holds the policy file
// byte for byte as the commit does. Plans hash the calls, never the policy,
// so a plan that matches says nothing of it: a change of the policy counts
// as reviewed only when the reviewed head carried it. A file that cannot be
// read is not as reviewed: a policy fails closed.
func (a *Agent) policyAsReviewed(c *candidate, head string) bool {
	if a.changesPolicy(c) == "" || head == c.commit {
		return true
	}
	read := func(commit string) ([]byte, bool) {
		data, err := a.repo.ReadFile(commit, a.cfg.PolicyPath)
		var ge *gitsync.Error
		if errors.As(err, &ge) && ge.Kind == gitsync.KindFileMissing {
			return nil, true
		}
		return data, err == nil
	}
	want, ok1 := read(c.commit)
	got, ok2 := read(head)
	return ok1 && ok2 && (want == nil) == (got == nil) && bytes.Equal(want, got)
}

// policyNotReviewed is the refusal of a commit whose plan was reviewed at
// head but whose policy file was not.
func (a *Agent) policyNotReviewed(c *candidate, what string) verdict {
	return unreviewed("policy unreviewed", "%s %s %s beyond what %s carried: its plan was reviewed, but a change of the policy is applied only as a reviewed head holds it, whatever the plan; propose the change of the policy, or read the plan and adopt it by hand (fleet-agent plan --commit, then fleet-agent apply --commit with its planHash)",
		refs.Short(c.commit), a.changesPolicy(c), a.cfg.PolicyPath, what)
}

// driftKeep reports whether a reviewed head is the agent's own drift
// proposal: its branch (without GitHub) or its pull request.
func (a *Agent) driftKeep(rv Reviewed) bool {
	if strings.HasPrefix(rv.Ref, "refs/heads/"+driftpr.BranchPrefix) {
		return true
	}
	if rv.PR == 0 {
		return false
	}
	rec, err := a.DriftProposalNow()
	return err == nil && rec != nil && rec.PR == rv.PR
}

// driftForeign reports whether a reviewed head is the drift proposal's
// branch or pull request at a head the agent did not push: someone added
// commits to it. The branch is the agent's description of the fleet; a
// commit on top of it is another change (a policy's, a document's) that
// would ride in as a keep.
func (a *Agent) driftForeign(rv Reviewed) bool {
	if !a.driftKeep(rv) {
		return false
	}
	rec, err := a.DriftProposalNow()
	return err != nil || rec == nil || rec.Head != rv.Head
}

// driftForeignRefused refuses a merge of the drift proposal at a head the
// agent did not write.
func (a *Agent) driftForeignRefused(c *candidate, what string, rv Reviewed) verdict {
	return unreviewed("drift branch changed", "%s merges %s, a drift proposal, at head %s, which the agent did not write (it pushed its own description of the fleet; commits added on its branch are another change): propose them on a branch of your own, or read the plan and adopt it by hand",
		refs.Short(c.commit), what, refs.Short(rv.Head))
}

// driftKeepMoved refuses a merge of a drift proposal whose plan makes
// calls. The proposal is there to keep the fleet as it is, so merged its
// plan makes none; one that makes calls was written before the fleet (or
// the branch) moved again, and applying it would undo a later hand change or
// carry a change nobody proposed. The agent rewrites the proposal at its
// next drift check.
func (a *Agent) driftKeepMoved(c *candidate, what string) verdict {
	if rec, err := a.DriftProposalNow(); err == nil && rec != nil && rec.Unwritten > 0 && a.holds(c.commit, rec.Head) {
		// Not moved: the proposal never stood for the whole drift. What it
		// could not write (blocked, denied, not in the document) is still
		// as the document has it, and the plan puts the fleet back there.
		return unreviewed("drift partly written", "%s merges %s, a drift proposal that leaves out %d drift(s) it cannot write (listed in its description): its plan makes %d call(s) that put those back as the document has them, so it is not a keep and is not applied; write the rest by hand on a branch of your own, or read the plan and adopt it by hand",
			refs.Short(c.commit), what, rec.Unwritten, len(c.plan.Calls))
	}
	return unreviewed("drift moved", "%s merges %s, a drift proposal, which keeps the fleet as it is, but its plan now makes %d call(s): the fleet or %s moved since it was written; merge it again once the agent has rewritten it (at the next drift check), or read the plan and adopt it by hand",
		refs.Short(c.commit), what, len(c.plan.Calls), a.cfg.Branch)
}

// holds reports whether commit holds head (descends from it).
func (a *Agent) holds(commit, head string) bool {
	in, err := a.repo.Descends(commit, head)
	return head != "" && err == nil && in
}

// stepMergeLinked finds the pull request that merged the commit. Where
// review is needed it waits while GitHub cannot answer or has not linked
// the merge yet (MergeLinkGrace), then refuses a direct push; elsewhere the
// pull request only tells where the result comment goes, so it never waits.
func (a *Agent) stepMergeLinked(ctx context.Context, c *candidate) verdict {
	if a.forge == nil {
		return proceed()
	}
	pr, ok, err := a.mergedPR(ctx, c.commit)
	need := a.reviewNeeded(c)
	switch {
	case err != nil && need:
		return waitFor("waiting for GitHub to say which pull request merged %s: %s", refs.Short(c.commit), refusal.Text(err))
	case err != nil || (!ok && !need):
		return proceed()
	case !ok:
		if a.firstSeen(c.commit).Add(MergeLinkGrace).After(a.clock.Now()) {
			return waitFor("waiting for GitHub to link %s to the pull request that merged it (up to %s)", refs.Short(c.commit), MergeLinkGrace)
		}
		return unreviewed("pushed directly", "%s was pushed to %s directly: no merged pull request has it, so no plan was reviewed%s; read its plan and adopt it by hand (fleet-agent plan --commit, then fleet-agent apply --commit with its planHash)",
			refs.Short(c.commit), a.cfg.Branch, a.policyNote(c))
	}
	c.pr, c.author, c.prHead = pr.Number, pr.Author, pr.HeadSHA
	return proceed()
}

// stepReviewed refuses, with requireReviewedPlan, a commit whose plan is
// not the one recorded for the reviewed head: through GitHub the commit
// itself when the merge queue held it (queue.go), else the head of the pull
// request that merged it; without GitHub a proposal head that is the commit
// or a parent of it.
func (a *Agent) stepReviewed(_ context.Context, c *candidate) verdict {
	if !a.reviewNeeded(c) {
		return proceed()
	}
	hash := c.plan.PlanHash
	if a.forge != nil {
		// A tip that was a merge queue entry was planned as it is (queue.go).
		if v, found := a.queueVerdict(c); found {
			return v
		}
		rv, found, err := a.reviewed(c.prHead)
		switch {
		case err != nil:
			return verdictOf(err)
		case !found || !rv.Valid:
			return unreviewed("unplanned merge", "pull request #%d was merged at head %s before its plan was made; apply it by hand after reviewing fleet-agent plan --commit %s",
				c.pr, refs.Short(c.prHead), refs.Short(c.commit))
		case rv.PlanHash != hash:
			return a.planMoved(fmt.Sprintf("#%d", c.pr), rv, hash)
		case !a.policyAsReviewed(c, c.prHead):
			return a.policyNotReviewed(c, fmt.Sprintf("the head %s of pull request #%d", refs.Short(c.prHead), c.pr))
		case a.driftKeep(rv) && !c.plan.Empty():
			return a.driftKeepMoved(c, fmt.Sprintf("pull request #%d", c.pr))
		case a.driftForeign(rv):
			return a.driftForeignRefused(c, fmt.Sprintf("pull request #%d", c.pr), rv)
		}
		return proceed()
	}
	info, err := a.repo.Commit(c.commit)
	if err != nil {
		return verdictOf(err)
	}
	// The newest plan recorded for the commit or a parent that is not this
	// one: proposed, but the plan moved since.
	var moved *Reviewed
	policyOff := ""
	for _, h := range append([]string{c.commit}, info.Parents...) {
		rv, found, err := a.reviewed(h)
		if err != nil {
			return verdictOf(err)
		}
		if found && rv.Valid && rv.PlanHash == hash {
			if a.driftKeep(rv) && !c.plan.Empty() {
				return a.driftKeepMoved(c, "the proposal "+strings.TrimPrefix(rv.Ref, "refs/heads/"))
			}
			if a.driftForeign(rv) {
				return a.driftForeignRefused(c, "the proposal "+strings.TrimPrefix(rv.Ref, "refs/heads/"), rv)
			}
			if a.policyAsReviewed(c, h) {
				return proceed()
			}
			policyOff = h
			continue
		}
		// A parent that is the applied commit was a proposal that landed:
		// a commit on top of it is new, never proposed.
		landed := c.applied != nil && c.applied.Commit == h
		if found && rv.Valid && !landed && (moved == nil || rv.At > moved.At) {
			moved = &rv
		}
	}
	if policyOff != "" {
		return a.policyNotReviewed(c, "the proposal "+refs.Short(policyOff))
	}
	if moved != nil {
		return a.planMoved("the proposal "+refs.Short(moved.Head), *moved, hash)
	}
	return unreviewed("never proposed", "%s was never proposed: no proposal with its plan (%s) was recorded for it or its parents, so no one reviewed it%s; read its plan and adopt it by hand (fleet-agent plan --commit, then fleet-agent apply --commit with its planHash)",
		refs.Short(c.commit), refs.Short(hash), a.policyNote(c))
}

// planMoved is the refusal of a merged commit whose plan is not the one
// reviewed, saying what happened: what changed the applied fleet since the
// review (an apply, an edit, a heal, by whom, when), or that nothing did and
// so the merge itself brought more than the reviewed head.
func (a *Agent) planMoved(what string, rv Reviewed, hash string) verdict {
	change, err := a.fleetChange(rv.At)
	if err != nil {
		return verdictOf(err)
	}
	if change != "" {
		return unreviewed("plan changed", "the plan changed since review: %s was reviewed as %s, now %s because the fleet changed at %s; re-run the plan on a new pull request, or read the plan and adopt it by hand",
			what, refs.Short(rv.PlanHash), refs.Short(hash), change)
	}
	return unreviewed("plan changed", "the plan changed since review: %s was reviewed as %s, now %s, and the fleet has not changed since the review, so the merged commit holds more than the reviewed head (main moved under it); re-run the plan on a new pull request, or read the plan and adopt it by hand",
		what, refs.Short(rv.PlanHash), refs.Short(hash))
}

// fleetChange says what last changed the applied fleet after since (Unix
// ms), from the audit: "T by an edit by ops@box"; "" when nothing did.
func (a *Agent) fleetChange(since int64) (string, error) {
	var row *state.AuditRow
	err := a.store.View(func(tx *state.Tx) (err error) {
		row, err = tx.LastAudit(func(r state.AuditRow) bool {
			return r.At > since && (r.Action == "apply" || r.Action == "edit" || r.Action == "heal")
		})
		return err
	})
	if err != nil || row == nil {
		return "", err
	}
	return time.UnixMilli(row.At).UTC().Format(time.RFC3339) + " by " + changeOf(*row), nil
}

// changeOf names a change of the fleet as a person would: an edit, a drift
// heal, the agent's apply of a commit, or an apply by hand.
func changeOf(r state.AuditRow) string {
	switch {
	case r.Action == "edit":
		return "an edit by " + r.Who
	case r.Action == "heal":
		return "a drift heal by the agent"
	case strings.HasPrefix(r.Who, "agent"):
		return "the apply of " + refs.Short(r.Commit) + " by " + r.Who
	case r.Commit != "":
		return "a hand apply of " + refs.Short(r.Commit) + " by " + r.Who
	}
	return "a hand apply of a file by " + r.Who
}

// reviewed reads the plan recorded for a head.
func (a *Agent) reviewed(head string) (Reviewed, bool, error) {
	var rv Reviewed
	var found bool
	err := a.store.View(func(tx *state.Tx) (err error) { found, err = tx.Get(spaceReviewed, head, &rv); return })
	return rv, found, err
}

// verdictOf turns an error met by a step into its verdict: an unreachable
// repository, provider or GitHub waits; anything else refuses with its code.
func verdictOf(err error) verdict {
	code := refusal.CodeOf(err)
	if code == refusal.Unavailable {
		return waitFor("%s", refusal.Text(err))
	}
	if code == "" {
		code = refusal.Internal
	}
	return verdict{kind: refuse, code: code, reason: refusal.Message(err)}
}
