package forge

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/google/go-github/v62/github"
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
// commit: for a commit on the base branch, the one that merged it (merge,
// squash and rebase alike); for an unmerged commit, the open ones holding it.
func (g *GitHub) PullRequestsForCommit(ctx context.Context, sha string) ([]PullRequest, error) {
	op := "list pull requests of commit " + short(sha)
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

// MergedPullRequest is the merged pull request among those of a commit whose
// merge produced that commit, or else the only merged one; ok is false when
// none was merged.
func (g *GitHub) MergedPullRequest(ctx context.Context, sha string) (pr PullRequest, ok bool, err error) {
	prs, err := g.PullRequestsForCommit(ctx, sha)
	if err != nil {
		return PullRequest{}, false, err
	}
	var merged []PullRequest
	for _, p := range prs {
		if !p.Merged {
			continue
		}
		if p.MergeCommitSHA == sha {
			return p, true, nil
		}
		merged = append(merged, p)
	}
	if len(merged) == 1 {
		return merged[0], true, nil
	}
	return PullRequest{}, false, nil
}

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}
