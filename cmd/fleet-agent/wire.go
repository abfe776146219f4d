package main

import (
	"context"

	"github.com/fleet-agent/fleet-agent/internal/agent"
	"github.com/fleet-agent/fleet-agent/internal/forge"
)

// The adapters below are the only place GitHub meets the agent: the agent
// and the outbox declare what they need, the forge provides it.

// agentForge gives the agent the reads it declares.
type agentForge struct{ g *forge.GitHub }

func toPR(p forge.PullRequest) agent.PullRequest {
	return agent.PullRequest{Number: p.Number, HeadSHA: p.HeadSHA, HeadRef: p.HeadRef, Author: p.Author, Merged: p.Merged, MergeCommitSHA: p.MergeCommitSHA}
}

func (f agentForge) OpenPullRequests(ctx context.Context, base string) ([]agent.PullRequest, error) {
	prs, err := f.g.OpenPullRequests(ctx, base)
	if err != nil {
		return nil, err
	}
	out := make([]agent.PullRequest, len(prs))
	for i, p := range prs {
		out[i] = toPR(p)
	}
	return out, nil
}

func (f agentForge) MergedPullRequest(ctx context.Context, sha string) (agent.PullRequest, bool, error) {
	p, ok, err := f.g.MergedPullRequest(ctx, sha)
	return toPR(p), ok, err
}

// Approvals and TeamMember are what policy approve rules read.
func (f agentForge) Approvals(ctx context.Context, pr int, head string) ([]string, error) {
	return f.g.Approvals(ctx, pr, head)
}

func (f agentForge) TeamMember(ctx context.Context, org, team, login string) (bool, error) {
	return f.g.TeamMember(ctx, org, team, login)
}

var (
	_ agent.Forge    = agentForge{}
	_ agent.Approver = agentForge{}
)

// driftForgeOf is GitHub for drift pull requests, or none without github
// (an interface holding a nil *forge.GitHub would not be nil).
func driftForgeOf(gh *forge.GitHub) agent.DriftForge {
	if gh == nil {
		return nil
	}
	return gh
}
