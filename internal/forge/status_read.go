package forge

import (
	"context"

	"github.com/google/go-github/v62/github"

	"github.com/fleet-agent/fleet-agent/internal/refs"
)

// LatestStatus returns the newest status on sha for the context suffix (the
// prefix is put before it, as SetStatus does), reading GitHub's list of the
// commit's statuses newest first and stopping at the first match; contexts
// match without case, as on GitHub. found is false when no status has that
// context. The Status returned has the suffix as asked.
func (g *GitHub) LatestStatus(ctx context.Context, sha, suffix string) (s Status, found bool, err error) {
	full := g.Context(suffix)
	op := "read status " + full + " on " + refs.Short(sha)
	if suffix == "" || sha == "" {
		return Status{}, false, invalid(op, "a status needs a commit and a context")
	}
	opts := &github.ListOptions{PerPage: perPage, Page: 1}
	for opts.Page != 0 {
		var got []*github.RepoStatus
		resp, err := g.call(ctx, op, func(ctx context.Context) (*github.Response, error) {
			var resp *github.Response
			var err error
			got, resp, err = g.client.Repositories.ListStatuses(ctx, g.owner, g.repo, sha, opts)
			return resp, err
		})
		if err != nil {
			return Status{}, false, err
		}
		for _, rs := range got {
			if foldContext(rs.GetContext()) == foldContext(full) {
				return Status{Context: suffix, State: rs.GetState(), Description: rs.GetDescription(), TargetURL: rs.GetTargetURL()}, true, nil
			}
		}
		opts.Page = resp.NextPage
	}
	return Status{}, false, nil
}

// ClassName is the error's class as a plain string, for consumers that must
// not import this package (the outbox tells a 401 from a 404 by it).
func (e *Error) ClassName() string { return string(e.Class) }

// Poster is GitHub seen through plain types: the methods the outbox's Sender
// declares (the outbox does not import this package, so it cannot name
// Status or Comment). Errors are *Error.
type Poster struct{ g *GitHub }

// Poster returns the outbox's view of g.
func (g *GitHub) Poster() *Poster { return &Poster{g: g} }

// SetStatus sets a commit status; context is the suffix (plan, apply, drift).
// An identical status this process posted last is not posted again.
func (p *Poster) SetStatus(ctx context.Context, sha, context, state, description, targetURL string) error {
	_, err := p.g.SetStatus(ctx, sha, Status{Context: context, State: state, Description: description, TargetURL: targetURL})
	return err
}

// StatusIsLatest reports whether the newest status on sha for context is
// this one (the description compared as SetStatus would send it). It costs
// one request (more only when the commit has over a hundred statuses); the
// outbox asks it only for a status that may have been posted before a crash
// or a lost answer. When it is, the status is remembered as posted.
func (p *Poster) StatusIsLatest(ctx context.Context, sha, context, state, description, targetURL string) (bool, error) {
	want := Status{Context: context, State: state, Description: CutDescription(description), TargetURL: targetURL}
	got, found, err := p.g.LatestStatus(ctx, sha, context)
	if err != nil || !found {
		return false, err
	}
	if foldStatus(got) != foldStatus(want) {
		return false, nil
	}
	p.g.statuses.put(statusKey(sha, p.g.Context(context)), want)
	return true, nil
}

// UpsertComment keeps the one comment holding marker on pull request pr and
// makes its body body.
func (p *Poster) UpsertComment(ctx context.Context, pr int, marker, body string) error {
	_, err := p.g.UpsertComment(ctx, pr, marker, body)
	return err
}

// AddCommentOnce posts body unless a comment holding marker is on the pull
// request already.
func (p *Poster) AddCommentOnce(ctx context.Context, pr int, marker, body string) error {
	_, _, err := p.g.AddCommentOnce(ctx, pr, marker, body)
	return err
}
