package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/fleet-agent/fleet-agent/internal/annotation"
	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/gitsync"
	"github.com/fleet-agent/fleet-agent/internal/localapi"
	"github.com/fleet-agent/fleet-agent/internal/outbox"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/policy"
	"github.com/fleet-agent/fleet-agent/internal/refs"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

// The policy (docs/policy.md) is the file at Config.PolicyPath in the
// applied commit of the branch: what was merged and applied, never the pull
// request under review, so a pull request cannot loosen the rules it is
// judged by. A pull request that changes the file is judged by the current
// policy; its comment also shows what the proposed one would say.
//
// A policy that does not compile never stops the agent: the last good one
// keeps judging and status says why (PolicyView). With none good yet, plans
// are not judged and status says that.

// Approver is what approve rules need of GitHub: the logins whose review
// approves a head, and team membership. The agent's Forge has it when it
// speaks to GitHub (forge.GitHub); without it an approve rule cannot be met
// and a plan that breaks one is refused.
type Approver interface {
	Approvals(ctx context.Context, pr int, head string) ([]string, error)
	TeamMember(ctx context.Context, org, team, login string) (bool, error)
}

const (
	keyPolicy = "policy"
	// keyPolicyInForce is the last good policy, durable: what judges plans
	// after a restart or a failover when the applied commit's file does
	// not compile, and what a state copy carries.
	keyPolicyInForce = "policyInForce"
)

// PolicyInForce is the last good policy as the state keeps it: its bytes,
// the commit of the branch it was read at, and its hash.
type PolicyInForce struct {
	Path   string `json:"path"`
	Commit string `json:"commit"`
	Hash   string `json:"hash"`
	Data   []byte `json:"data"`
}

// policyState is the policy in use, cached by the applied commit.
type policyState struct {
	readAt string // the applied commit last read
	good   *policy.Policy
	goodAt string // the commit good was read at
	data   []byte // good's bytes
	view   localapi.PolicyView
	// loaded: the state's PolicyInForce was read into good (once a process).
	loaded bool
}

// currentPolicy is the policy in use: read again when the applied commit
// moved. nil when none is configured, none is in the applied commit, or
// none compiled yet. Its view is recorded for status.
//
// The last good policy is kept in the state (PolicyInForce), so a policy
// that does not compile never replaces it, whatever happens between: a
// restart, a failover to another agent, a state copy. A policy is read
// from there only when it is of the same policy.path.
func (a *Agent) currentPolicy() (*policy.Policy, localapi.PolicyView) {
	if a.cfg.PolicyPath == "" {
		return nil, localapi.PolicyView{}
	}
	ap, err := a.applied()
	a.policyMu.Lock()
	defer a.policyMu.Unlock()
	ps := &a.policy
	commit := ""
	if err == nil && ap != nil {
		commit = ap.Commit
	}
	if commit == ps.readAt && ps.view.Path == a.cfg.PolicyPath {
		return ps.good, ps.view
	}
	if ps.view.Path != a.cfg.PolicyPath {
		*ps = policyState{} // policy.path changed (a reload): nothing of the old file holds
	}
	if !ps.loaded {
		ps.loaded = true
		a.loadPolicyInForce(ps)
	}
	view := localapi.PolicyView{Path: a.cfg.PolicyPath}
	var data []byte
	switch {
	case err != nil:
		view.Problem = "cannot read the applied record: " + refusal.Text(err)
	case commit == "":
		view.Problem = "no commit of " + a.cfg.Branch + " is applied yet: plans are judged once one holding " + a.cfg.PolicyPath + " is"
	default:
		data, err = a.repo.ReadFile(commit, a.cfg.PolicyPath)
		var ge *gitsync.Error
		switch {
		case errors.As(err, &ge) && ge.Kind == gitsync.KindFileMissing:
			// No policy file is no policy, not a broken one: a commit that
			// deletes it was applied, through review (trust.go).
			ps.good, ps.goodAt, ps.data = nil, "", nil
			view.Commit = commit
			view.Problem = "the applied commit " + refs.Short(commit) + " has no " + a.cfg.PolicyPath + ": plans are not judged"
			data = nil
			a.storePolicyInForce(nil)
		case err != nil:
			view.Problem = "cannot read " + a.cfg.PolicyPath + " at " + refs.Short(commit) + ": " + refusal.Text(err)
			if ps.good != nil {
				view.Problem += "; the last good one, from " + refs.Short(ps.goodAt) + ", judges plans"
			}
			data = nil
		}
	}
	if data != nil {
		pol, err := policy.Load(data)
		if err != nil {
			view.Problem = fmt.Sprintf("the policy at %s does not compile (%s)", refs.Short(commit), refusal.Text(err))
			if ps.good != nil {
				view.Problem += "; the last good one, from " + refs.Short(ps.goodAt) + ", judges plans until it is fixed"
			} else {
				view.Problem += "; no policy judges plans until it is fixed"
			}
			a.log.Warn().Str("commit", commit).Str("path", a.cfg.PolicyPath).Msg(view.Problem)
		} else {
			if ps.good == nil || ps.good.Hash != pol.Hash || ps.goodAt != commit {
				a.storePolicyInForce(&PolicyInForce{Path: a.cfg.PolicyPath, Commit: commit, Hash: pol.Hash, Data: data})
			}
			ps.good, ps.goodAt, ps.data = pol, commit, data
		}
	}
	if ps.good != nil {
		view.Commit, view.Hash, view.Rules = ps.goodAt, ps.good.Hash, len(ps.good.Rules)
	}
	ps.readAt, ps.view = commit, view
	_ = a.store.Update(func(tx *state.Tx) error { return tx.Put(spaceAgent, keyPolicy, view) })
	return ps.good, view
}

// loadPolicyInForce reads the last good policy kept in the state into ps.
// One that does not load (a damaged record, a policy of another
// policy.path) is not used, and said in the log.
func (a *Agent) loadPolicyInForce(ps *policyState) {
	var in PolicyInForce
	var found bool
	err := a.store.View(func(tx *state.Tx) (err error) { found, err = tx.Get(spaceAgent, keyPolicyInForce, &in); return })
	switch {
	case err != nil:
		a.log.Error().Err(err).Msg("cannot read the policy in force from the state")
		return
	case !found || in.Path != a.cfg.PolicyPath:
		return
	}
	pol, err := policy.Load(in.Data)
	if err != nil || pol.Hash != in.Hash {
		a.log.Error().Str("commit", in.Commit).Msg("the policy in force kept in the state does not load; it is not used")
		return
	}
	ps.good, ps.goodAt, ps.data = pol, in.Commit, in.Data
}

// policyOfCommit is what an apply of commit does to the policy in force,
// in the apply's own transaction: a policy that compiles becomes it, a
// deleted file ends it, and a file that does not compile or cannot be read
// leaves the last good one as it is.
func (a *Agent) policyOfCommit(commit string) func(tx *state.Tx) error {
	keepAsIs := func(*state.Tx) error { return nil }
	if a.cfg.PolicyPath == "" {
		return keepAsIs
	}
	data, err := a.repo.ReadFile(commit, a.cfg.PolicyPath)
	var ge *gitsync.Error
	switch {
	case errors.As(err, &ge) && ge.Kind == gitsync.KindFileMissing:
		return func(tx *state.Tx) error { return tx.Delete(spaceAgent, keyPolicyInForce) }
	case err != nil:
		return keepAsIs
	}
	pol, err := policy.Load(data)
	if err != nil {
		return keepAsIs
	}
	in := PolicyInForce{Path: a.cfg.PolicyPath, Commit: commit, Hash: pol.Hash, Data: data}
	return func(tx *state.Tx) error { return tx.Put(spaceAgent, keyPolicyInForce, in) }
}

// storePolicyInForce keeps the last good policy in the state (nil: none).
func (a *Agent) storePolicyInForce(in *PolicyInForce) {
	err := a.store.Update(func(tx *state.Tx) error {
		if in == nil {
			return tx.Delete(spaceAgent, keyPolicyInForce)
		}
		return tx.Put(spaceAgent, keyPolicyInForce, in)
	})
	if err != nil {
		a.log.Error().Err(err).Msg("cannot keep the policy in force in the state")
	}
}

// policyInput is what a policy judges of a plan: the document, the plan,
// the fleet it was planned against and the accounts of the substrates
// recorded in the state (the last place a stored pool's account is read
// from).
func (a *Agent) policyInput(doc *fleet.Document, data []byte, made planned) policy.Input {
	subs := map[string]string{}
	_ = a.store.View(func(tx *state.Tx) error {
		recs, err := tx.Substrates()
		for _, r := range recs {
			subs[r.Want.PoolID] = r.Want.Account
		}
		return err
	})
	return policy.Input{Doc: doc, Data: data, Snap: made.snap, Plan: made.Plan, Tenant: a.cfg.Tenant, Substrates: subs}
}

// policyNotes are the notes of a report made by the policy in use.
func policyNotes(view localapi.PolicyView) []string {
	if view.Problem == "" {
		return nil
	}
	return []string{view.Problem}
}

// judgeProposal judges a proposal's plan by the policy in use and, when
// the head changes the policy file, says what the proposed policy would
// say. Approvals of the head are read, so that the comment and the status
// show an approve rule met. nil when no policy is configured.
func (a *Agent) judgeProposal(ctx context.Context, head string, pr int, doc *fleet.Document, data []byte, made planned) *plan.PolicyReport {
	if a.cfg.PolicyPath == "" {
		return nil
	}
	pol, view := a.currentPolicy()
	in := a.policyInput(doc, data, made)
	rep := &plan.PolicyReport{Rules: []plan.RuleVerdict{}}
	if pol != nil {
		jctx, cancel := context.WithTimeout(ctx, PolicyDeadline)
		rep, _, _ = pol.Judge(jctx, in, policy.PlanCostBudget) // over its bounds, every rule fails closed
		cancel()
		rep.Source = a.cfg.PolicyPath + "@" + refs.Short(view.Commit)
	}
	rep.Notes = append(rep.Notes, policyNotes(view)...)
	if len(rep.Awaiting()) > 0 && pr > 0 {
		if err := a.approve(ctx, rep, pr, head); err != nil {
			rep.Notes = append(rep.Notes, "the approvals could not be read from GitHub: "+refusal.Text(err))
		}
	}
	// What the proposed policy would say, when the head changes it.
	a.policyMu.Lock()
	current := a.policy.data
	a.policyMu.Unlock()
	proposed, err := a.repo.ReadFile(head, a.cfg.PolicyPath)
	var ge *gitsync.Error
	if errors.As(err, &ge) && ge.Kind == gitsync.KindFileMissing && current != nil {
		rep.Notes = append(rep.Notes, "this pull request deletes "+a.cfg.PolicyPath+": it is judged by the current policy; once applied, plans are not judged")
	}
	if err == nil && !bytes.Equal(proposed, current) {
		next, err := policy.Load(proposed)
		if err != nil {
			rep.Notes = append(rep.Notes, "this pull request changes "+a.cfg.PolicyPath+", and the new policy does not compile ("+refusal.Text(err)+"); merged, it would not be used")
		} else {
			notes, _ := a.proposedNotes(ctx, head, proposed, next, in)
			rep.Notes = append(rep.Notes, notes...)
		}
	}
	if pol == nil && len(rep.Notes) == 0 {
		return nil
	}
	return rep
}

// approve marks the approve rules of rep met by an approval of head on
// pull request pr, read from GitHub.
func (a *Agent) approve(ctx context.Context, rep *plan.PolicyReport, pr int, head string) error {
	ap, ok := a.forge.(Approver)
	if !ok || a.forge == nil {
		return refusal.New(refusal.Unavailable, "approvals are read from GitHub: configure github")
	}
	fctx, cancel := context.WithTimeout(ctx, ForgeTimeout)
	defer cancel()
	logins, err := ap.Approvals(fctx, pr, head)
	if err != nil {
		a.metrics.ForgeError()
		return err
	}
	return policy.MarkApproved(rep, logins, func(org, team, login string) (bool, error) {
		return ap.TeamMember(fctx, org, team, login)
	})
}

// policyPosts are the fleet-agent/policy status of a head and, with check
// runs, its check run annotated on the lines of the offending objects.
func (a *Agent) policyPosts(head string, rep *plan.PolicyReport) []outbox.Post {
	if rep == nil {
		return nil
	}
	st, desc := "success", rep.Summary()
	if aw := rep.Awaiting(); len(aw) > 0 {
		st, desc = "pending", fmt.Sprintf("awaiting approval by %s (rule %s: %s)", strings.Join(aw[0].Approvers, ", "), aw[0].Name, aw[0].Message)
	}
	for _, v := range rep.Rules {
		if v.Verdict == plan.VerdictDeny {
			st, desc = "failure", fmt.Sprintf("denied by rule %s: %s", v.Name, v.Message)
			break
		}
	}
	status := outbox.Status(head, "policy", st, desc, "")
	posts := []outbox.Post{status}
	if !a.cfg.Checks {
		return posts
	}
	var anns []annotation.Annotation
	for _, v := range rep.Rules {
		level := map[plan.RuleOutcome]string{plan.VerdictDeny: annotation.Failure, plan.VerdictWarn: annotation.Warning, plan.VerdictApprove: annotation.Warning}[v.Verdict]
		if level == "" || (v.Verdict == plan.VerdictApprove && v.Approved != "") {
			continue
		}
		for _, h := range v.Matched {
			if h.Line == 0 {
				continue
			}
			anns = append(anns, annotation.Annotation{Path: a.cfg.Path, Line: h.Line, Level: level,
				Title: fmt.Sprintf("%s: %s", v.Verdict, v.Name), Message: h.Message})
		}
	}
	summary := "**" + rep.Summary() + "**\n\n" + strings.Join(rep.MarkdownLines(), "\n") + "\n"
	if rep.Source != "" {
		summary += "\nJudged by `" + rep.Source + "`.\n"
	}
	return append(posts, planCheck(status, outbox.Post{Body: summary}, anns))
}

// stepPolicy judges the plan of a commit of the branch by the policy in
// use: a broken deny rule refuses it with the rule's message; a broken
// approve rule waits until a review of the reviewed head by one of its
// approvers exists. An apply by hand is held to deny rules only: the
// operator who applies the reviewed plan by hand is its approval.
func (a *Agent) stepPolicy(ctx context.Context, c *candidate) verdict {
	pol, view := a.currentPolicy()
	if pol == nil {
		return proceed()
	}
	data, err := a.repo.ReadFile(c.commit, a.cfg.Path)
	if err != nil {
		return verdictOf(err)
	}
	jctx, cancel := context.WithTimeout(ctx, PolicyDeadline)
	defer cancel()
	rep, _, err := pol.Judge(jctx, a.policyInput(c.doc, data, c.plan), policy.PlanCostBudget)
	if err == nil {
		err = a.judgeKept(jctx, pol, c, data, rep)
	}
	switch {
	case err != nil && ctx.Err() != nil:
		return waitFor("the policy's judgement was cut short (%s); it is judged again at the next poll", refusal.Text(err))
	case err != nil:
		r := refused(refusal.PlanBlocked, "the policy (%s@%s) could not judge the plan: %s", view.Path, refs.Short(view.Commit), refusal.Text(err))
		r.what = "policy denies"
		return r
	}
	for _, v := range rep.Rules {
		if v.Verdict == plan.VerdictDeny {
			r := refused(refusal.PlanBlocked, "policy rule %q (%s@%s) denies the plan: %s", v.Name, view.Path, refs.Short(view.Commit), v.Message)
			r.what = "policy denies"
			return r
		}
	}
	aw := rep.Awaiting()
	if len(aw) == 0 || c.operator != "" {
		return proceed()
	}
	if c.pr == 0 {
		return refused(refusal.PlanBlocked, "policy rule %q needs an approval by %s on a pull request, and no pull request merged %s; apply it by hand after review (fleet-agent apply --commit)",
			aw[0].Name, strings.Join(aw[0].Approvers, ", "), refs.Short(c.commit))
	}
	head := c.prHead
	if head == "" {
		head = c.commit
	}
	if err := a.approve(ctx, rep, c.pr, head); err != nil {
		return waitFor("waiting for GitHub to list the approvals of #%d: %s", c.pr, refusal.Text(err))
	}
	if aw = rep.Awaiting(); len(aw) > 0 {
		return waitFor("waiting for an approval of #%d at %s by %s (policy rule %s: %s)",
			c.pr, refs.Short(head), strings.Join(aw[0].Approvers, ", "), aw[0].Name, aw[0].Message)
	}
	return proceed()
}

// judgeKept judges what the commit writes into the document when the fleet
// was changed by hand since the applied commit: a value the fleet already
// holds plans no call, so the plan above never shows it, and a document
// that keeps a hand edit would step round every rule. Such a commit is also
// planned against the fleet as the applied document has it, and judged so:
// a denial there is a denial of the commit (its message says why), and an
// approval asked there is asked of it. A fleet as applied adds nothing.
func (a *Agent) judgeKept(ctx context.Context, pol *policy.Policy, c *candidate, data []byte, rep *plan.PolicyReport) error {
	kept := a.keptPlan(c)
	if kept == nil {
		return nil
	}
	rep2, _, err := pol.Judge(ctx, a.policyInput(c.doc, data, *kept), policy.PlanCostBudget)
	if err != nil {
		return err
	}
	for i, v := range rep2.Rules {
		if i >= len(rep.Rules) || rep.Rules[i].Verdict != plan.VerdictPass {
			continue
		}
		if v.Verdict == plan.VerdictDeny && v.Message != "" {
			v.Message += " (what the commit writes into the document, judged against the fleet as the applied document has it: the fleet was changed by hand since, so the commit's own plan makes no call for it)"
		}
		if v.Verdict == plan.VerdictDeny || v.Verdict == plan.VerdictApprove {
			rep.Rules[i] = v
		}
	}
	return nil
}

// keptPlan is the commit's document planned against the fleet as the
// applied document has it, when the fleet drifted from it; nil when it did
// not (the commit's own plan says everything) or nothing is applied.
func (a *Agent) keptPlan(c *candidate) *planned {
	if c.applied == nil || len(c.applied.Document) == 0 || c.doc == nil || c.plan.Plan == nil {
		return nil
	}
	applied, errs := fleet.Validate("applied", c.applied.Document)
	if errs != nil {
		return nil
	}
	a.mu.Lock()
	prune := a.cfg.Prune
	a.mu.Unlock()
	drift := plan.Make(applied, c.plan.snap, plan.Options{Tenant: a.cfg.Tenant, Prune: c.applied.Prune})
	if len(drift.Calls) == 0 {
		return nil
	}
	base := applyInMemory(c.plan.snap, drift.Calls)
	return &planned{Plan: plan.Make(c.doc, base, plan.Options{Tenant: a.cfg.Tenant, Prune: prune}), snap: base}
}

// policyView reads the policy status the agent recorded.
func policyView(tx *state.Tx) (*localapi.PolicyView, error) {
	var v localapi.PolicyView
	found, err := tx.Get(spaceAgent, keyPolicy, &v)
	if err != nil || !found {
		return nil, err
	}
	return &v, nil
}
