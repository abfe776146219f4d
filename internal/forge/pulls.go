package forge

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/google/go-github/v62/github"

	"github.com/fleet-agent/fleet-agent/internal/refs"
)

// PullRequest is what the agent needs to know of a pull request.
type PullRequest struct {
	Number  int
	HeadSHA string
	HeadRef string
	BaseRef string
	// Author is the login of the pull request's author.
	Author string
	// State is "open" or "closed".
	State  string
	Merged bool
	// MergeCommitSHA is the commit the merge produced on the base branch
	// (merge, squash or rebase); for an open pull request GitHub reports a
	// test merge here, which means nothing.
	MergeCommitSHA string
	MergedAt       time.Time
}

func fromGitHub(p *github.PullRequest) PullRequest {
	return PullRequest{
		Number:         p.GetNumber(),
		HeadSHA:        p.GetHead().GetSHA(),
		HeadRef:        p.GetHead().GetRef(),
		BaseRef:        p.GetBase().GetRef(),
		Author:         p.GetUser().GetLogin(),
		State:          p.GetState(),
		Merged:         p.GetMerged() || p.MergedAt != nil,
		MergeCommitSHA: p.GetMergeCommitSHA(),
		MergedAt:       p.GetMergedAt().Time,
	}
}

// perPage is GitHub's largest page: fewest requests.
const perPage = 100

// etagCache keeps the last answer to each page of a list with its ETag, so
// that asking again costs a 304, which GitHub does not count.
type etagCache struct {
	mu    sync.Mutex
	pages map[string]cachedPage
}

type cachedPage struct {
	etag  string
	pulls []PullRequest
	next  int
}

func (c *etagCache) init() { c.pages = map[string]cachedPage{} }

func (c *etagCache) get(u string) (cachedPage, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.pages[u]
	return p, ok
}

func (c *etagCache) put(u string, p cachedPage) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pages[u] = p
}

// OpenPullRequests lists the open pull requests into base, newest first.
// Each page is asked for with the ETag of its last answer: when nothing
// changed, GitHub answers 304 and the poll costs no rate limit (one request
// for up to 100 open pull requests).
func (g *GitHub) OpenPullRequests(ctx context.Context, base string) ([]PullRequest, error) {
	op := "list open pull requests into " + base
	var all []PullRequest
	for page := 1; page != 0; {
		q := url.Values{"state": {"open"}, "base": {base}, "per_page": {fmt.Sprint(perPage)}, "page": {fmt.Sprint(page)}}
		u := fmt.Sprintf("repos/%s/%s/pulls?%s", url.PathEscape(g.owner), url.PathEscape(g.repo), q.Encode())
		cached, haveCached := g.pulls.get(u)
		var got []*github.PullRequest
		resp, err := g.call(ctx, op, func(ctx context.Context) (*github.Response, error) {
			req, err := g.client.NewRequest(http.MethodGet, u, nil)
			if err != nil {
				return nil, err
			}
			if haveCached {
				req.Header.Set("If-None-Match", cached.etag)
			}
			return g.client.Do(ctx, req, &got)
		})
		if err != nil {
			return nil, err
		}
		if resp.StatusCode == http.StatusNotModified && haveCached {
			all = append(all, cached.pulls...)
			page = cached.next
			continue
		}
		p := cachedPage{etag: resp.Header.Get("ETag"), next: resp.NextPage}
		for _, pr := range got {
			p.pulls = append(p.pulls, fromGitHub(pr))
		}
		if p.etag != "" {
			g.pulls.put(u, p)
		}
		all = append(all, p.pulls...)
		page = p.next
	}
	return all, nil
}

// PullRequestsForCommit lists the pull requests GitHub associates with a
// commit. GitHub's rules: for a commit on the repository's default branch,
// the merged pull requests that brought it, whatever branch they were merged
// into; for any other commit, the open and the merged pull requests that
// hold it. So the list can hold pull requests that are open, or merged into
// another branch than the agent's: MergedPullRequest sorts them out.
func (g *GitHub) PullRequestsForCommit(ctx context.Context, sha string) ([]PullRequest, error) {
	op := "list pull requests of commit " + refs.Short(sha)
	var all []PullRequest
	opts := &github.ListOptions{PerPage: perPage, Page: 1}
	for opts.Page != 0 {
		var got []*github.PullRequest
		resp, err := g.call(ctx, op, func(ctx context.Context) (*github.Response, error) {
			var resp *github.Response
			var err error
			got, resp, err = g.client.PullRequests.ListPullRequestsWithCommit(ctx, g.owner, g.repo, sha, opts)
			return resp, err
		})
		if err != nil {
			return nil, err
		}
		for _, pr := range got {
			all = append(all, fromGitHub(pr))
		}
		opts.Page = resp.NextPage
	}
	return all, nil
}

// MergedPullRequest is the pull request that merged sha into the agent's
// branch (Config.Branch): MergedPullRequestInto that branch.
func (g *GitHub) MergedPullRequest(ctx context.Context, sha string) (pr PullRequest, ok bool, err error) {
	return g.MergedPullRequestInto(ctx, sha, g.cfg.Branch)
}

// MergedPullRequestInto is the pull request that merged sha into branch
// base. Of the pull requests GitHub lists for the commit, only those merged
// (an open one merely holds the commit) into base (one merged into another
// branch did not bring it here, even when the commit reached base by a push
// since) count. Of those, the one whose merge made sha (merge, squash or
// rebase: its merge commit is sha) wins; else the most recently merged, the
// higher number on a tie. ok is false when none counts.
func (g *GitHub) MergedPullRequestInto(ctx context.Context, sha, base string) (pr PullRequest, ok bool, err error) {
	prs, err := g.PullRequestsForCommit(ctx, sha)
	if err != nil {
		return PullRequest{}, false, err
	}
	var best PullRequest
	for _, p := range prs {
		if !p.Merged || p.BaseRef != base {
			continue
		}
		if p.MergeCommitSHA == sha {
			return p, true, nil
		}
		if !ok || p.MergedAt.After(best.MergedAt) || (p.MergedAt.Equal(best.MergedAt) && p.Number > best.Number) {
			best, ok = p, true
		}
	}
	return best, ok, nil
}
