package forge

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/google/go-github/v62/github"
)

// Approvals are the logins whose latest review of pull request number is an
// approval of head: a review of an older head, or one followed by a
// request for changes or a dismissal, does not count (as GitHub's own
// "approved" reads). Policy approve rules are met by them.
func (g *GitHub) Approvals(ctx context.Context, number int, head string) ([]string, error) {
	op := fmt.Sprintf("list reviews of #%d", number)
	latest := map[string]*github.PullRequestReview{}
	var order []string
	opts := &github.ListOptions{PerPage: perPage, Page: 1}
	for opts.Page != 0 {
		var got []*github.PullRequestReview
		resp, err := g.call(ctx, op, func(ctx context.Context) (*github.Response, error) {
			var resp *github.Response
			var err error
			got, resp, err = g.client.PullRequests.ListReviews(ctx, g.owner, g.repo, number, opts)
			return resp, err
		})
		if err != nil {
			return nil, err
		}
		for _, r := range got {
			login := strings.ToLower(r.GetUser().GetLogin())
			switch r.GetState() {
			case "APPROVED", "CHANGES_REQUESTED", "DISMISSED":
			default:
				continue // a comment leaves the last verdict standing
			}
			if _, ok := latest[login]; !ok {
				order = append(order, login)
			}
			latest[login] = r
		}
		opts.Page = resp.NextPage
	}
	var out []string
	for _, login := range order {
		r := latest[login]
		if r.GetState() == "APPROVED" && r.GetCommitID() == head {
			out = append(out, login)
		}
	}
	return out, nil
}

// TeamMember reports whether login is an active member of the team slug of
// org. A 404 is no (GitHub answers it for a non-member, and for a team the
// credentials cannot see: the status names the team, so that is found).
func (g *GitHub) TeamMember(ctx context.Context, org, slug, login string) (bool, error) {
	var m *github.Membership
	_, err := g.call(ctx, "read membership of "+login+" in "+org+"/"+slug, func(ctx context.Context) (*github.Response, error) {
		var resp *github.Response
		var err error
		m, resp, err = g.client.Teams.GetTeamMembershipBySlug(ctx, org, slug, login)
		return resp, err
	})
	var fe *Error
	if errors.As(err, &fe) && fe.Class == ClassNotFound {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return m.GetState() == "active", nil
}
