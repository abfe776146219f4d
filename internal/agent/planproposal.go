package agent

import (
	"context"
	"sort"
	"strconv"
	"strings"

	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/policy"
	"github.com/fleet-agent/fleet-agent/internal/refs"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

// PlanProposal plans a proposal the agent has planned, as its pull
// request comment shows it: the plan of its head against the fleet now,
// judged by the policy in use, blocked changes with their reasons. name is
// a branch (feature, refs/heads/feature), a pull request (#7, pull/7) or
// the head commit (or a prefix of it) of a planned proposal. Nothing is
// posted or recorded: this is the read a person makes without GitHub.
func (a *Agent) PlanProposal(ctx context.Context, name string) (*plan.Plan, string, error) {
	p, err := a.findProposal(name)
	if err != nil {
		return nil, "", err
	}
	doc, errs, err := a.readDocument(p.Commit)
	if err != nil {
		return nil, p.Commit, err
	}
	if errs != nil {
		return nil, p.Commit, errs.Refusal()
	}
	made, err := a.makePlan(ctx, doc, planHow{})
	if err != nil {
		return nil, p.Commit, err
	}
	data, _ := a.repo.ReadFile(p.Commit, a.cfg.Path)
	made.Plan.Policy = a.judgeProposal(ctx, p.Commit, p.PR, doc, data, made)
	return made.Plan, p.Commit, nil
}

// findProposal finds the recorded proposal a person named, or refuses
// with the names there are.
func (a *Agent) findProposal(name string) (storedProposal, error) {
	name = strings.TrimSpace(name)
	var all []storedProposal
	if err := a.store.View(func(tx *state.Tx) error {
		return eachRecord(tx, spaceProposals, func(p storedProposal) { all = append(all, p) })
	}); err != nil {
		return storedProposal{}, err
	}
	wanted := map[string]bool{name: true, "refs/heads/" + name: true}
	if n, err := strconv.Atoi(strings.TrimPrefix(strings.TrimPrefix(name, "#"), "pull/")); err == nil && n > 0 {
		wanted[refs.PullHead(n)] = true
	}
	var byCommit []storedProposal
	for _, p := range all {
		if wanted[p.Ref] {
			return p, nil
		}
		if len(name) >= 7 && strings.HasPrefix(p.Commit, strings.ToLower(name)) {
			byCommit = append(byCommit, p)
		}
	}
	if len(byCommit) == 1 {
		return byCommit[0], nil
	}
	names := make([]string, 0, len(all))
	for _, p := range all {
		names = append(names, strings.TrimPrefix(p.Ref, "refs/heads/"))
	}
	sort.Strings(names)
	if len(names) == 0 {
		names = []string{"none yet"}
	}
	return storedProposal{}, refusal.New(refusal.InvalidInput,
		"no planned proposal is named %q; the agent plans every branch other than %s (and, with GitHub, every open pull request) after its next poll; planned now: %s",
		name, a.cfg.Branch, strings.Join(names, ", "))
}

// judgeByHand is the policy's verdict on the plan of a commit of the
// branch as an apply by hand would meet it (stepPolicy): only deny rules
// hold, and they are shown with the plan so that a denied plan does not
// read as one to apply.
func (a *Agent) judgeByHand(commit string, doc *fleet.Document, made planned) *plan.PolicyReport {
	pol, view := a.currentPolicy()
	if pol == nil {
		return nil
	}
	data, err := a.repo.ReadFile(commit, a.cfg.Path)
	if err != nil {
		return nil
	}
	// Under the agent's deadline and budget, like every judgement the agent
	// makes: over them, every rule not yet broken fails closed.
	jctx, cancel := context.WithTimeout(context.Background(), PolicyDeadline)
	defer cancel()
	rep, _, _ := pol.Judge(jctx, a.policyInput(doc, data, made), policy.PlanCostBudget)
	rep.Source = view.Path + "@" + refs.Short(view.Commit)
	return rep
}
