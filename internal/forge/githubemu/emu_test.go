package githubemu

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-github/v62/github"

	"github.com/fleet-agent/fleet-agent/internal/clock"
)

var epoch = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// setup starts an emulator with one repository and a go-github client on it.
func setup(t *testing.T, opts Options) (*Server, *Repo, *github.Client, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(epoch)
	if opts.Clock == nil {
		opts.Clock = clk
	}
	s := New(t, opts)
	s.AddToken("good-token", "fleet-bot")
	repo := s.Repo("acme/fleet")
	return s, repo, client(t, s, "good-token"), clk
}

func client(t *testing.T, s *Server, token string) *github.Client {
	t.Helper()
	c := github.NewClient(nil).WithAuthToken(token)
	u, err := url.Parse(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	c.BaseURL = u
	return c
}

func sha(i int) string { return fmt.Sprintf("%040x", i) }

func TestPullsPaginateWithLinkHeaders(t *testing.T) {
	_, repo, c, _ := setup(t, Options{})
	for i := 1; i <= 250; i++ {
		repo.OpenPR(PR{HeadSHA: sha(i), User: "alice"})
	}
	repo.OpenPR(PR{HeadSHA: sha(999), BaseRef: "develop"})
	closed := repo.OpenPR(PR{HeadSHA: sha(998)})
	repo.ClosePR(closed)

	var all []*github.PullRequest
	opts := &github.PullRequestListOptions{State: "open", Base: "main", ListOptions: github.ListOptions{PerPage: 100}}
	pages := 0
	for {
		prs, resp, err := c.PullRequests.List(t.Context(), "acme", "fleet", opts)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		all = append(all, prs...)
		if resp.NextPage == 0 {
			if resp.LastPage != 0 || resp.PrevPage != 2 {
				t.Errorf("last page links: last %d prev %d", resp.LastPage, resp.PrevPage)
			}
			break
		}
		if resp.LastPage != 3 {
			t.Errorf("last page %d, want 3", resp.LastPage)
		}
		opts.Page = resp.NextPage
	}
	if pages != 3 || len(all) != 250 {
		t.Fatalf("%d pages, %d pull requests; want 3 and 250", pages, len(all))
	}
	// Newest first, GitHub's default order.
	first := all[0]
	if first.GetNumber() != 250 || first.GetHead().GetSHA() != sha(250) || first.GetBase().GetRef() != "main" ||
		first.GetUser().GetLogin() != "alice" || first.GetState() != "open" || first.MergedAt != nil {
		t.Errorf("first pull request decoded as %+v", first)
	}
	if all[249].GetNumber() != 1 {
		t.Errorf("last is #%d, want #1", all[249].GetNumber())
	}
}

func TestETagAnswers304WithoutSpendingBudget(t *testing.T) {
	s, repo, c, _ := setup(t, Options{})
	n := repo.OpenPR(PR{HeadSHA: sha(1)})
	req, _ := c.NewRequest(http.MethodGet, "repos/acme/fleet/pulls", nil)
	resp, err := c.Do(t.Context(), req, nil)
	if err != nil {
		t.Fatal(err)
	}
	etag := resp.Header.Get("ETag")
	if etag == "" {
		t.Fatal("no ETag on a list")
	}
	before := s.RateRemaining()

	req, _ = c.NewRequest(http.MethodGet, "repos/acme/fleet/pulls", nil)
	req.Header.Set("If-None-Match", etag)
	resp, err = c.Do(t.Context(), req, nil)
	if resp == nil || resp.StatusCode != http.StatusNotModified {
		t.Fatalf("want 304, got %v %v", resp, err)
	}
	if got := resp.Header.Get("X-RateLimit-Remaining"); got != fmt.Sprint(before) {
		t.Errorf("304 said remaining %s, want %d", got, before)
	}
	if s.RateRemaining() != before {
		t.Errorf("a 304 spent budget: %d -> %d", before, s.RateRemaining())
	}
	cnt := s.Counters()
	if cnt.Total != 2 || cnt.Counted != 1 || cnt.NotModified != 1 {
		t.Errorf("counters %+v", cnt)
	}

	repo.PushHead(n, sha(2))
	req, _ = c.NewRequest(http.MethodGet, "repos/acme/fleet/pulls", nil)
	req.Header.Set("If-None-Match", etag)
	var prs []*github.PullRequest
	resp, err = c.Do(t.Context(), req, &prs)
	if err != nil || resp.StatusCode != http.StatusOK || prs[0].GetHead().GetSHA() != sha(2) {
		t.Fatalf("after a push: %v %v", resp, err)
	}
}

func TestAuthAndNotFound(t *testing.T) {
	s, repo, c, _ := setup(t, Options{})
	repo.OpenPR(PR{HeadSHA: sha(1)})
	_, _, err := client(t, s, "wrong").PullRequests.List(t.Context(), "acme", "fleet", nil)
	var er *github.ErrorResponse
	if !errors.As(err, &er) || er.Response.StatusCode != http.StatusUnauthorized || er.Message != "Bad credentials" {
		t.Errorf("bad token: %v", err)
	}
	if _, _, err := c.PullRequests.List(t.Context(), "acme", "nope", nil); !errors.As(err, &er) || er.Response.StatusCode != 404 {
		t.Errorf("unknown repo: %v", err)
	}
	if _, _, err := c.PullRequests.Get(t.Context(), "acme", "fleet", 42); !errors.As(err, &er) || er.Response.StatusCode != 404 {
		t.Errorf("unknown pull request: %v", err)
	}
	if _, _, err := c.Repositories.CreateStatus(t.Context(), "acme", "fleet", sha(77), &github.RepoStatus{State: github.String("success")}); !errors.As(err, &er) ||
		er.Response.StatusCode != 422 || !strings.Contains(er.Message, "No commit found") {
		t.Errorf("unknown commit: %v", err)
	}
	if s.Counters().Counted != 3 {
		t.Errorf("counted %d, want 3 (a 401 is not counted)", s.Counters().Counted)
	}
}

func TestCommentsAndStatuses(t *testing.T) {
	_, repo, c, _ := setup(t, Options{})
	n := repo.OpenPR(PR{HeadSHA: sha(1)})
	ctx := t.Context()
	made, _, err := c.Issues.CreateComment(ctx, "acme", "fleet", n, &github.IssueComment{Body: github.String("hello")})
	if err != nil || made.GetID() == 0 || made.GetUser().GetLogin() != "fleet-bot" {
		t.Fatalf("create: %+v %v", made, err)
	}
	if _, _, err := c.Issues.EditComment(ctx, "acme", "fleet", made.GetID(), &github.IssueComment{Body: github.String("edited")}); err != nil {
		t.Fatal(err)
	}
	got := repo.Comments(n)
	if len(got) != 1 || got[0].Body != "edited" || got[0].Edits != 1 {
		t.Errorf("comments %+v", got)
	}
	long := strings.Repeat("ü", 65537)
	_, _, err = c.Issues.CreateComment(ctx, "acme", "fleet", n, &github.IssueComment{Body: github.String(long)})
	var er *github.ErrorResponse
	if !errors.As(err, &er) || er.Response.StatusCode != 422 || len(er.Errors) != 1 || er.Errors[0].Field != "data" ||
		er.Errors[0].Code != "unprocessable" || !strings.HasPrefix(er.Errors[0].Message, "Body is too long") {
		t.Errorf("long body: %v", err)
	}
	if _, _, err := c.Issues.CreateComment(ctx, "acme", "fleet", n, &github.IssueComment{Body: github.String(long[:len(long)-2])}); err != nil {
		t.Errorf("65,536 code points refused: %v", err)
	}

	desc140 := strings.Repeat("€", 140)
	for i, st := range []string{"pending", "success"} {
		if _, _, err := c.Repositories.CreateStatus(ctx, "acme", "fleet", sha(1), &github.RepoStatus{
			State: github.String(st), Context: github.String("fleet-agent/plan"), Description: github.String(desc140[:len(desc140)-i*3]),
		}); err != nil {
			t.Fatal(err)
		}
	}
	_, _, err = c.Repositories.CreateStatus(ctx, "acme", "fleet", sha(1), &github.RepoStatus{State: github.String("success"), Description: github.String(desc140 + "x")})
	if !errors.As(err, &er) || er.Response.StatusCode != 422 || er.Errors[0].Field != "description" {
		t.Errorf("141 code points: %v", err)
	}
	sts := repo.Statuses(sha(1))
	if len(sts) != 2 || sts[0].State != "pending" || sts[1].State != "success" || sts[1].Creator != "fleet-bot" {
		t.Errorf("statuses %+v", sts)
	}
	listed, _, err := c.Repositories.ListStatuses(ctx, "acme", "fleet", sha(1), nil)
	if err != nil || len(listed) != 2 || listed[0].GetState() != "success" {
		t.Errorf("list newest first: %v %v", listed, err)
	}
	comb, _, err := c.Repositories.GetCombinedStatus(ctx, "acme", "fleet", sha(1), nil)
	if err != nil || comb.GetState() != "success" || comb.GetTotalCount() != 1 {
		t.Errorf("combined: %+v %v", comb, err)
	}
}

func TestCommitPullsAfterMerge(t *testing.T) {
	_, repo, c, _ := setup(t, Options{})
	n := repo.OpenPR(PR{HeadSHA: sha(1), HeadRef: "grow", User: "bob"})
	repo.MergePR(n, sha(100))
	prs, _, err := c.PullRequests.ListPullRequestsWithCommit(t.Context(), "acme", "fleet", sha(100), nil)
	if err != nil || len(prs) != 1 {
		t.Fatalf("%v %v", prs, err)
	}
	p := prs[0]
	if p.GetNumber() != n || p.MergedAt == nil || p.GetMergeCommitSHA() != sha(100) || p.GetHead().GetSHA() != sha(1) || p.GetUser().GetLogin() != "bob" {
		t.Errorf("decoded %+v", p)
	}
	single, _, err := c.PullRequests.Get(t.Context(), "acme", "fleet", n)
	if err != nil || !single.GetMerged() || single.GetState() != "closed" {
		t.Errorf("single: %+v %v", single, err)
	}
}

func TestLimitsAndFailures(t *testing.T) {
	s, repo, c, clk := setup(t, Options{})
	repo.OpenPR(PR{HeadSHA: sha(1)})
	ctx := t.Context()

	s.SecondaryLimitNext(1, 90*time.Second)
	_, _, err := c.PullRequests.List(ctx, "acme", "fleet", nil)
	var ab *github.AbuseRateLimitError
	if !errors.As(err, &ab) || ab.RetryAfter == nil || *ab.RetryAfter != 90*time.Second {
		t.Errorf("secondary: %v", err)
	}

	// go-github now refuses by itself until Retry-After passes on the
	// wall clock: go on with fresh clients.
	c = client(t, s, "good-token")
	s.Fail5xxNext(1)
	_, resp, err := c.PullRequests.List(ctx, "acme", "fleet", nil)
	if err == nil || resp.StatusCode != http.StatusBadGateway {
		t.Errorf("5xx: %v", err)
	}

	s.SetOutage(true)
	_, resp, err = c.PullRequests.List(ctx, "acme", "fleet", nil)
	if err == nil || resp != nil {
		t.Errorf("outage answered: %v %v", resp, err)
	}
	s.SetOutage(false)

	// A fresh client: go-github refuses by itself once it saw the limit.
	c2 := client(t, s, "good-token")
	s.SetRateBudget(1)
	if _, _, err := c2.PullRequests.List(ctx, "acme", "fleet", nil); err != nil {
		t.Fatal(err)
	}
	_, _, err = c2.PullRequests.List(ctx, "acme", "fleet", nil)
	var rl *github.RateLimitError
	if !errors.As(err, &rl) || rl.Rate.Remaining != 0 || !rl.Rate.Reset.Time.Equal(epoch.Add(time.Hour)) {
		t.Errorf("primary: %v", err)
	}
	if s.RateRemaining() != 0 {
		t.Errorf("remaining %d", s.RateRemaining())
	}
	clk.Advance(time.Hour)
	if s.RateRemaining() != 5000 {
		t.Errorf("window did not roll: %d", s.RateRemaining())
	}
}

func TestEnterprisePrefix(t *testing.T) {
	s, repo, _, _ := setup(t, Options{Prefix: "/api/v3"})
	if !strings.HasSuffix(s.URL(), "/api/v3/") {
		t.Fatalf("URL %s", s.URL())
	}
	// go-github's own Enterprise setting, given the host alone.
	c, err := github.NewClient(nil).WithAuthToken("good-token").WithEnterpriseURLs(strings.TrimSuffix(s.URL(), "api/v3/"), "")
	if err != nil {
		t.Fatal(err)
	}
	repo.OpenPR(PR{HeadSHA: sha(1)})
	if _, _, err := c.PullRequests.List(t.Context(), "acme", "fleet", nil); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(strings.TrimSuffix(s.URL(), "api/v3/") + "repos/acme/fleet/pulls")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("outside the prefix: %d", resp.StatusCode)
	}
}

func signJWT(t *testing.T, key *rsa.PrivateKey, iss string, iat, exp time.Time) string {
	t.Helper()
	enc := base64.RawURLEncoding
	h, _ := json.Marshal(map[string]string{"alg": "RS256", "typ": "JWT"})
	c, _ := json.Marshal(map[string]any{"iat": iat.Unix(), "exp": exp.Unix(), "iss": iss})
	in := enc.EncodeToString(h) + "." + enc.EncodeToString(c)
	sum := sha256.Sum256([]byte(in))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, sum[:])
	if err != nil {
		t.Fatal(err)
	}
	return in + "." + enc.EncodeToString(sig)
}

func TestInstallationTokens(t *testing.T) {
	s, repo, _, clk := setup(t, Options{})
	repo.OpenPR(PR{HeadSHA: sha(1)})
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	s.AddApp("4242", 77, &key.PublicKey)
	ctx := t.Context()

	mint := func(jwt string, inst int64) (*github.InstallationToken, error) {
		tok, _, err := client(t, s, jwt).Apps.CreateInstallationToken(ctx, inst, nil)
		return tok, err
	}
	now := clk.Now()
	cases := []struct {
		name string
		jwt  string
		inst int64
		ok   bool
	}{
		{"good", signJWT(t, key, "4242", now.Add(-time.Minute), now.Add(9*time.Minute)), 77, true},
		{"other key", signJWT(t, other, "4242", now.Add(-time.Minute), now.Add(9*time.Minute)), 77, false},
		{"other issuer", signJWT(t, key, "1", now.Add(-time.Minute), now.Add(9*time.Minute)), 77, false},
		{"expired", signJWT(t, key, "4242", now.Add(-11*time.Minute), now.Add(-time.Minute)), 77, false},
		{"too long", signJWT(t, key, "4242", now, now.Add(11*time.Minute)), 77, false},
		{"future iat", signJWT(t, key, "4242", now.Add(time.Minute), now.Add(5*time.Minute)), 77, false},
		{"unknown installation", signJWT(t, key, "4242", now.Add(-time.Minute), now.Add(9*time.Minute)), 78, false},
		{"garbage", "not.a.jwt", 77, false},
	}
	var tok *github.InstallationToken
	for _, tc := range cases {
		got, err := mint(tc.jwt, tc.inst)
		if (err == nil) != tc.ok {
			t.Errorf("%s: err %v", tc.name, err)
		}
		if tc.ok {
			tok = got
		}
	}
	if s.TokensMinted() != 1 || tok == nil || !tok.GetExpiresAt().Time.Equal(epoch.Add(time.Hour)) {
		t.Fatalf("minted %d, token %+v", s.TokensMinted(), tok)
	}
	if s.Counters().Counted != 0 {
		t.Errorf("token requests spent the installation's budget")
	}
	c := client(t, s, tok.GetToken())
	if _, _, err := c.PullRequests.List(ctx, "acme", "fleet", nil); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Hour)
	if _, _, err := c.PullRequests.List(ctx, "acme", "fleet", nil); err == nil {
		t.Error("an expired installation token was accepted")
	}
}

func TestRateLimitEndpointIsFree(t *testing.T) {
	s, _, c, _ := setup(t, Options{RateLimit: 10})
	lim, _, err := c.RateLimit.Get(t.Context())
	if err != nil || lim.GetCore().Limit != 10 || lim.GetCore().Remaining != 10 {
		t.Fatalf("%+v %v", lim, err)
	}
	if s.RateRemaining() != 10 || s.Counters().Counted != 0 {
		t.Errorf("GET /rate_limit was counted")
	}
}
