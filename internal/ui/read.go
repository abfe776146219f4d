package ui

import (
	"context"
	"sort"
	"strings"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/localapi"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

// RecentOps is how many of a substrate's journal operations the page shows.
const RecentOps = 12

// Agent is what the page reads from the running agent's loop.
type Agent interface {
	// LastPoll is when the last poll succeeded (zero before one did).
	LastPoll() time.Time
	// PollError is the last poll's failure, nil after a good poll.
	PollError() error
	// Following is the tenant, the repository as people may see it and
	// the branch the agent applies.
	Following() (tenant, repository, branch string)
	// StatusView is the status the agent serves.
	StatusView() (localapi.StatusView, error)
	// ProposalPages are the recorded proposals with their plan lines.
	ProposalPages() ([]localapi.ProposalPage, error)
}

// Source is where a running agent's page reads the fleet.
type Source struct {
	Agent Agent
	Store *state.Store
	// Outbox reports the posts waiting; nil without GitHub.
	Outbox func() (*Outbox, error)
	// CommitURL is the link prefix of a commit (see CommitURL).
	CommitURL string
	// NoNodeDaemon: substrate.nodeDaemon is not configured.
	NoNodeDaemon bool
}

// Read reads the fleet as the running agent knows it now.
func (s Source) Read(ctx context.Context) (*Fleet, error) {
	f := &Fleet{CommitURL: s.CommitURL, LastPoll: s.Agent.LastPoll(), NoNodeDaemon: s.NoNodeDaemon}
	f.Tenant, f.Repository, f.Branch = s.Agent.Following()
	if err := s.Agent.PollError(); err != nil {
		f.PollError = err.Error()
	}
	st, err := s.Agent.StatusView()
	if err != nil {
		return nil, err
	}
	f.Applied, f.Drift, f.Store, f.Webhooks = st.Applied, st.Drift, st.Store, st.Webhooks
	if f.Proposals, err = s.Agent.ProposalPages(); err != nil {
		return nil, err
	}
	// Status lists the refusals an apply has not overtaken since: the
	// branch moved on and the fleet follows it again.
	f.Refused = st.Refused
	if st.Substrates != nil {
		if f.Substrates, err = SubstratesOf(st.Substrates); err != nil {
			return nil, err
		}
	}
	err = s.Store.View(func(tx *state.Tx) error {
		for i := range f.Substrates {
			ops, err := tx.JournalOps(f.Substrates[i].PoolID + "/")
			if err != nil {
				return err
			}
			sort.SliceStable(ops, func(a, b int) bool { return ops[a].UpdatedAt > ops[b].UpdatedAt })
			f.Substrates[i].Ops = ops[:min(len(ops), RecentOps)]
		}
		f.Audit, err = tx.Audit()
		return err
	})
	if err != nil {
		return nil, err
	}
	if s.Outbox != nil {
		if f.Outbox, err = s.Outbox(); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// CommitURL is the link prefix of a commit in the repository's web view:
// GitHub's when the agent posts to GitHub (an Enterprise API URL names its
// host), else the https remote's own path (GitHub, GitLab and Gitea all
// serve /commit/SHA there), else "" (a local path or ssh: no link).
func CommitURL(gitURL, githubRepository, githubAPIURL string) string {
	if githubRepository != "" {
		host := "https://github.com/"
		if u := strings.TrimSuffix(githubAPIURL, "/"); u != "" && !strings.Contains(u, "api.github.com") {
			host = strings.TrimSuffix(u, "/api/v3") + "/"
		}
		return host + githubRepository + "/commit/"
	}
	if strings.HasPrefix(gitURL, "https://") {
		return strings.TrimSuffix(strings.TrimSuffix(gitURL, "/"), ".git") + "/commit/"
	}
	return ""
}
