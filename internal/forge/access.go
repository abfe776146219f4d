package forge

import (
	"context"
	"maps"
	"slices"
	"strings"

	"github.com/google/go-github/v62/github"
)

// Access is what GitHub says of the agent's credentials for its repository:
// who they are, what they may do there, and what is missing for the agent's
// posts. `fleet-agent doctor` shows it.
type Access struct {
	// Login is the user (or App bot) the credentials act as.
	Login string
	// App says the credentials are a GitHub App installation's.
	App bool
	// Permissions are GitHub's words: for a user token the repository
	// roles it holds (pull, triage, push, maintain, admin: "true"); for an
	// App the installation's permissions ("write", "read").
	Permissions map[string]string
	// Missing names what the agent needs and does not have, each with
	// what it is for; empty when nothing is missing.
	Missing []string
	// WebhookSecret says whether github.webhookSecret resolves; false
	// when none is configured (see HasWebhookSecret).
	WebhookSecret bool
}

// HasWebhookSecret says whether a webhook secret is configured.
func (g *GitHub) HasWebhookSecret() bool { return g.cfg.WebhookSecret != "" }

// Access asks GitHub, with one or two harmless reads, who the configured
// credentials are and whether they may post what the agent posts on the
// repository. An error is the forge's (unauthorized, not found, network).
func (g *GitHub) Access(ctx context.Context, checks bool) (Access, error) {
	var a Access
	login, err := g.self(ctx)
	if err != nil {
		return a, err
	}
	a.Login = login
	if g.app != nil {
		a.App = true
		if _, err := g.app.token(ctx); err != nil {
			return a, err
		}
		a.Permissions = g.app.permissions()
		need := map[string]string{"statuses": "commit statuses", "contents": "reading the repository's commits",
			"pull_requests": "finding the pull request of a merge"}
		want := map[string]string{"statuses": "write", "contents": "read", "pull_requests": "read"}
		if checks {
			need["checks"], want["checks"] = "check runs", "write"
		}
		for _, k := range slices.Sorted(maps.Keys(want)) {
			if !grants(a.Permissions[k], want[k]) {
				a.Missing = append(a.Missing, k+": "+want[k]+" ("+need[k]+")")
			}
		}
		// Comments go through the issues API; either permission serves.
		if !grants(a.Permissions["issues"], "write") && !grants(a.Permissions["pull_requests"], "write") {
			a.Missing = append(a.Missing, "issues: write or pull_requests: write (the plan comments)")
		}
	} else {
		op := "read the repository " + g.owner + "/" + g.repo
		var repo *github.Repository
		_, err = g.call(ctx, op, func(ctx context.Context) (*github.Response, error) {
			r, resp, err := g.client.Repositories.Get(ctx, g.owner, g.repo)
			repo = r
			return resp, err
		})
		if err != nil {
			return a, err
		}
		a.Permissions = map[string]string{}
		for k, v := range repo.GetPermissions() {
			if v {
				a.Permissions[k] = "true"
			}
		}
		if a.Permissions["push"] != "true" {
			a.Missing = append(a.Missing, "push (write) access to "+g.owner+"/"+g.repo+" (commit statuses and comments need it)")
		}
	}
	if g.cfg.WebhookSecret != "" {
		if _, err := g.resolve(ctx, g.cfg.WebhookSecret, "github.webhookSecret"); err == nil {
			a.WebhookSecret = true
		}
	}
	return a, nil
}

// grants says whether a permission level covers the wanted one.
func grants(have, want string) bool {
	switch strings.ToLower(have) {
	case "admin", "write":
		return true
	case "read":
		return want == "read"
	}
	return false
}

// permissionsOf keeps the permissions the agent cares about, in GitHub's
// words.
func permissionsOf(p *github.InstallationPermissions) map[string]string {
	out := map[string]string{}
	if p == nil {
		return out
	}
	for k, v := range map[string]*string{"checks": p.Checks, "contents": p.Contents, "issues": p.Issues,
		"pull_requests": p.PullRequests, "statuses": p.Statuses} {
		if v != nil {
			out[k] = *v
		}
	}
	return out
}
