package forge

import (
	"context"
	"fmt"

	"github.com/google/go-github/v62/github"
)

// The agent opens pull requests of its own only for drift proposals, on its
// own branches; these calls need pull requests: write (and the push before
// them contents: write, which is git's, not the API's).

// OpenPullRequest opens a pull request of head into base and returns its
// number.
func (g *GitHub) OpenPullRequest(ctx context.Context, head, base, title, body string) (int, error) {
	var out *github.PullRequest
	_, err := g.call(ctx, "open a pull request of "+head, func(ctx context.Context) (resp *github.Response, err error) {
		out, resp, err = g.client.PullRequests.Create(ctx, g.owner, g.repo, &github.NewPullRequest{
			Title: github.String(title), Head: github.String(head), Base: github.String(base), Body: github.String(body)})
		return resp, err
	})
	if err != nil {
		return 0, err
	}
	return out.GetNumber(), nil
}

// EditPullRequest replaces a pull request's title and text.
func (g *GitHub) EditPullRequest(ctx context.Context, number int, title, body string) error {
	_, err := g.call(ctx, fmt.Sprintf("edit pull request #%d", number), func(ctx context.Context) (*github.Response, error) {
		_, resp, err := g.client.PullRequests.Edit(ctx, g.owner, g.repo, number, &github.PullRequest{Title: github.String(title), Body: github.String(body)})
		return resp, err
	})
	return err
}

// ClosePullRequest says why in a comment, then closes the pull request.
func (g *GitHub) ClosePullRequest(ctx context.Context, number int, comment string) error {
	if comment != "" {
		if _, err := g.call(ctx, fmt.Sprintf("comment on pull request #%d", number), func(ctx context.Context) (*github.Response, error) {
			_, resp, err := g.client.Issues.CreateComment(ctx, g.owner, g.repo, number, &github.IssueComment{Body: github.String(comment)})
			return resp, err
		}); err != nil {
			return err
		}
	}
	_, err := g.call(ctx, fmt.Sprintf("close pull request #%d", number), func(ctx context.Context) (*github.Response, error) {
		_, resp, err := g.client.PullRequests.Edit(ctx, g.owner, g.repo, number, &github.PullRequest{State: github.String("closed")})
		return resp, err
	})
	return err
}

// PullRequestState is "open", "closed" (without merging) or "merged".
func (g *GitHub) PullRequestState(ctx context.Context, number int) (string, error) {
	var out *github.PullRequest
	_, err := g.call(ctx, fmt.Sprintf("read pull request #%d", number), func(ctx context.Context) (resp *github.Response, err error) {
		out, resp, err = g.client.PullRequests.Get(ctx, g.owner, g.repo, number)
		return resp, err
	})
	if err != nil {
		return "", err
	}
	switch {
	case out.GetMerged() || out.MergedAt != nil:
		return "merged", nil
	case out.GetState() == "closed":
		return "closed", nil
	}
	return "open", nil
}
