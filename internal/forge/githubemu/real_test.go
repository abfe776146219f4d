package githubemu

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-github/v62/github"
)

// The answers below are the ones fleet-agent's tests once assumed away:
// each is GitHub's documented (or observed) behaviour, see the package
// comment and testdata/restapi.

func TestAPIVersionHeader(t *testing.T) {
	cases := []struct {
		name      string
		versions  []string
		send      string // "" sends no header
		status    int
		selected  string
		logged    string
		bodyWords string
	}{
		{"go-github's default", nil, SupportedAPIVersion, http.StatusOK, SupportedAPIVersion, SupportedAPIVersion, ""},
		{"no header is answered as 2022-11-28", nil, "", http.StatusOK, SupportedAPIVersion, "", ""},
		{"a version the emulator does not model", nil, "2026-03-10", http.StatusBadRequest, "", "2026-03-10", `"2026-03-10"`},
		{"not a version", nil, "v3", http.StatusBadRequest, "", "v3", "supported: 2022-11-28"},
		{"a second version offered", []string{SupportedAPIVersion, "2026-03-10"}, "2026-03-10", http.StatusOK, "2026-03-10", "2026-03-10", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, repo, gh, _ := setup(t, Options{APIVersions: c.versions})
			repo.OpenPR(PR{HeadSHA: sha(1)})
			req, err := gh.NewRequest(http.MethodGet, "repos/acme/fleet/pulls", nil)
			if err != nil {
				t.Fatal(err)
			}
			if c.send == "" {
				req.Header.Del("X-GitHub-Api-Version")
			} else {
				req.Header.Set("X-GitHub-Api-Version", c.send)
			}
			resp, err := gh.Do(t.Context(), req, nil)
			if resp == nil || resp.StatusCode != c.status {
				t.Fatalf("answered %v (%v), want %d", resp, err, c.status)
			}
			if got := resp.Header.Get("X-GitHub-Api-Version-Selected"); got != c.selected {
				t.Errorf("selected %q, want %q", got, c.selected)
			}
			var er *github.ErrorResponse
			if c.bodyWords != "" && (!errors.As(err, &er) || !strings.Contains(er.Message, c.bodyWords)) {
				t.Errorf("400 says %v, want it to name %s", err, c.bodyWords)
			}
			if log := s.Requests(); len(log) != 1 || log[0].APIVersion != c.logged {
				t.Errorf("log %+v, want the version %q", log, c.logged)
			}
		})
	}
}

func TestSubmittedTooQuickly(t *testing.T) {
	s, repo, c, _ := setup(t, Options{})
	n := repo.OpenPR(PR{HeadSHA: sha(1)})
	ctx := t.Context()
	made, _, err := c.Issues.CreateComment(ctx, "acme", "fleet", n, &github.IssueComment{Body: github.String("first")})
	if err != nil {
		t.Fatal(err)
	}
	s.SubmittedTooQuicklyNext(2)
	tooQuick := func(what string, err error) {
		t.Helper()
		var er *github.ErrorResponse
		if !errors.As(err, &er) || er.Response.StatusCode != http.StatusUnprocessableEntity || len(er.Errors) != 1 ||
			er.Errors[0].Message != "was submitted too quickly" || er.Errors[0].Field != "data" || er.Errors[0].Code != "unprocessable" {
			t.Errorf("%s: %v, want GitHub's 422 was submitted too quickly", what, err)
		}
	}
	_, _, err = c.Issues.CreateComment(ctx, "acme", "fleet", n, &github.IssueComment{Body: github.String("second")})
	tooQuick("create", err)
	_, _, err = c.Issues.EditComment(ctx, "acme", "fleet", made.GetID(), &github.IssueComment{Body: github.String("edited")})
	tooQuick("edit", err)
	if got := repo.Comments(n); len(got) != 1 || got[0].Body != "first" || got[0].Edits != 0 {
		t.Errorf("a refused post changed something: %+v", got)
	}
	// Statuses and reads are not content.
	repo.AddCommit(sha(1))
	s.SubmittedTooQuicklyNext(1)
	if _, _, err := c.Repositories.CreateStatus(ctx, "acme", "fleet", sha(1), &github.RepoStatus{State: github.String("success")}); err != nil {
		t.Errorf("status while comments are limited: %v", err)
	}
	if _, _, err := c.Issues.ListComments(ctx, "acme", "fleet", n, nil); err != nil {
		t.Errorf("read while comments are limited: %v", err)
	}
	_, _, err = c.Issues.CreateComment(ctx, "acme", "fleet", n, &github.IssueComment{Body: github.String("third")})
	tooQuick("the one left", err)
	if _, _, err := c.Issues.CreateComment(ctx, "acme", "fleet", n, &github.IssueComment{Body: github.String("later")}); err != nil {
		t.Errorf("after the limit: %v", err)
	}
}

// "context: ... This field is case-insensitive."
func TestStatusContextsAreCaseInsensitive(t *testing.T) {
	_, repo, c, _ := setup(t, Options{})
	repo.AddCommit(sha(1))
	ctx := t.Context()
	for _, st := range []struct{ context, state string }{
		{"fleet-agent/plan", "pending"},
		{"Fleet-Agent/Plan", "failure"},
		{"fleet-agent/apply", "success"},
		{"FLEET-AGENT/PLAN", "success"},
	} {
		if _, _, err := c.Repositories.CreateStatus(ctx, "acme", "fleet", sha(1), &github.RepoStatus{State: github.String(st.state), Context: github.String(st.context)}); err != nil {
			t.Fatal(err)
		}
	}
	comb, _, err := c.Repositories.GetCombinedStatus(ctx, "acme", "fleet", sha(1), nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, st := range comb.Statuses {
		got = append(got, st.GetContext()+"="+st.GetState())
	}
	if strings.Join(got, " ") != "FLEET-AGENT/PLAN=success fleet-agent/apply=success" || comb.GetState() != "success" {
		t.Errorf("combined %s %q: one entry per context without case, the newest as sent", comb.GetState(), got)
	}
	// The cap of 1000 per context counts all spellings.
	for i := 3; i < 1000; i++ {
		ctxName := "fleet-agent/plan"
		if i%2 == 0 {
			ctxName = "Fleet-Agent/PLAN"
		}
		if _, _, err := c.Repositories.CreateStatus(ctx, "acme", "fleet", sha(1), &github.RepoStatus{State: github.String("pending"), Context: github.String(ctxName)}); err != nil {
			t.Fatalf("status %d: %v", i+1, err)
		}
	}
	_, resp, _ := c.Repositories.CreateStatus(ctx, "acme", "fleet", sha(1), &github.RepoStatus{State: github.String("success"), Context: github.String("fleet-agent/PLAN")})
	if resp == nil || resp.StatusCode != http.StatusUnprocessableEntity {
		t.Errorf("status 1001 of one context in three spellings: %v", resp)
	}
}

// "Lists the merged pull request that introduced the commit to the
// repository. If the commit is not present in the default branch, it will
// return merged and open pull requests associated with the commit."
func TestCommitPullsFollowGitHubsRules(t *testing.T) {
	_, repo, c, _ := setup(t, Options{})
	// #1 merged into main as M; its head H is also the head of #2, open
	// into release, and of #3, closed unmerged.
	one := repo.OpenPR(PR{HeadSHA: sha(10)})
	two := repo.OpenPR(PR{HeadSHA: sha(10), BaseRef: "release"})
	three := repo.OpenPR(PR{HeadSHA: sha(10)})
	repo.ClosePR(three)
	repo.MergePR(one, sha(100))
	// #4 merged into release as R; R was then pushed onto main too.
	four := repo.OpenPR(PR{HeadSHA: sha(20), BaseRef: "release"})
	repo.MergePR(four, sha(200))
	repo.PushCommit("main", sha(200))
	// #5 merged into release as S, which never reached main; #6 is open
	// with S as its head (release into main).
	five := repo.OpenPR(PR{HeadSHA: sha(30), BaseRef: "release"})
	repo.MergePR(five, sha(300))
	six := repo.OpenPR(PR{HeadSHA: sha(300)})
	repo.AddCommit(sha(300), six)

	cases := []struct {
		name string
		sha  string
		want []int
	}{
		{"a merge commit on the default branch: the merged pull request", sha(100), []int{one}},
		{"a head not on the default branch: open and merged, closed ones left out", sha(10), []int{one, two}},
		{"on the default branch by a push: the one merged elsewhere", sha(200), []int{four}},
		{"off the default branch: merged into release and open into main", sha(300), []int{five, six}},
	}
	for _, tc := range cases {
		prs, _, err := c.PullRequests.ListPullRequestsWithCommit(t.Context(), "acme", "fleet", tc.sha, nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var got []int
		for _, p := range prs {
			got = append(got, p.GetNumber())
		}
		if !equalInts(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	// Another default branch changes the answer for the same commit.
	repo.SetDefaultBranch("release")
	prs, _, err := c.PullRequests.ListPullRequestsWithCommit(t.Context(), "acme", "fleet", sha(300), nil)
	if err != nil || len(prs) != 1 || prs[0].GetNumber() != five || prs[0].GetBase().GetRef() != "release" {
		t.Errorf("S on the default branch release: %v %v", prs, err)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
