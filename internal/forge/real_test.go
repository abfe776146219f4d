package forge_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/forge"
	"github.com/fleet-agent/fleet-agent/internal/forge/githubemu"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

// A 422 from creating or editing a comment is not always about the comment:
// GitHub answers an integration that creates content fast with "was
// submitted too quickly". That is a limit to wait out; classed as a
// validation error, the outbox would drop the plan comment for good.
func TestSubmittedTooQuicklyIsALimit(t *testing.T) {
	e := newEnv(t, githubemu.Options{})
	n := e.repo.OpenPR(githubemu.PR{HeadSHA: sha(1)})
	ctx := t.Context()
	marker := e.forge.PlanMarker()

	limited := func(what string, err error) {
		t.Helper()
		fe := classOf(t, err)
		if fe.Class != forge.ClassContentLimited || fe.Status != http.StatusUnprocessableEntity || !fe.Retryable() ||
			!fe.RetryAt(e.clk.Now()).Equal(e.clk.Now().Add(forge.DefaultSecondaryRetryDelay)) {
			t.Errorf("%s: %v (class %s, retry at %v), want a content limit retried after a minute", what, err, fe.Class, fe.RetryAt(e.clk.Now()))
		}
		if !strings.Contains(err.Error(), "was submitted too quickly") {
			t.Errorf("%s: the error lost GitHub's reason: %v", what, err)
		}
		if refusal.CodeOf(err) != refusal.Unavailable {
			t.Errorf("%s: code %s, want UNAVAILABLE", what, refusal.CodeOf(err))
		}
	}

	e.emu.SubmittedTooQuicklyNext(1)
	_, err := e.forge.UpsertComment(ctx, n, marker, "plan v1")
	limited("create", err)
	if got := e.repo.Comments(n); len(got) != 0 {
		t.Fatalf("comments %+v", got)
	}
	// Reads are not limited by it: nothing blocks the next request.
	if _, err := e.forge.UpsertComment(ctx, n, marker, "plan v1"); err != nil {
		t.Fatalf("the same request later: %v", err)
	}
	e.emu.SubmittedTooQuicklyNext(1)
	_, err = e.forge.UpsertComment(ctx, n, marker, "plan v2")
	limited("edit", err)
	e.emu.SubmittedTooQuicklyNext(1)
	_, _, err = e.forge.AddCommentOnce(ctx, n, e.forge.Marker("result-1"), "applied")
	limited("once", err)
	if got := e.repo.Comments(n); len(got) != 1 || got[0].Body != marker+"\nplan v1" {
		t.Errorf("comments %+v", got)
	}
}

// GitHub's 422s for a comment carry the reason in the message of an error
// whose field is "data": the classification reads the reason. These bodies
// are GitHub's own answers (see the comments); the emulator does not make
// the second, and cannot be made to send a body over the limit through the
// forge, which refuses it first.
func TestComment422sByReason(t *testing.T) {
	cases := []struct {
		name, body string
		class      forge.Class
	}{
		{
			// github/rest-api-description issue reports and
			// PyGithub traces, 2023.
			name:  "body over the limit: about the content",
			body:  `{"message":"Validation Failed","errors":[{"resource":"IssueComment","code":"unprocessable","field":"data","message":"Body is too long (maximum is 65536 characters)"}],"documentation_url":"https://docs.github.com/rest/issues/comments#create-an-issue-comment"}`,
			class: forge.ClassValidation,
		},
		{
			name:  "empty body: about the content",
			body:  `{"message":"Validation Failed","errors":[{"resource":"IssueComment","code":"missing_field","field":"body"}],"documentation_url":"https://docs.github.com/rest/issues/comments#create-an-issue-comment"}`,
			class: forge.ClassValidation,
		},
		{
			// trstringer/manual-approval#208, 2026: goes away on a
			// retry; reported with secondary limits.
			name:  "a node GitHub could not resolve: transient",
			body:  `{"message":"Validation Failed","errors":[{"resource":"IssueComment","code":"unprocessable","field":"data","message":"Could not resolve to a node with the global id of 'PR_x'."}],"documentation_url":"https://docs.github.com/rest/issues/comments#create-an-issue-comment"}`,
			class: forge.ClassContentLimited,
		},
		{
			name:  "spammed, without details: a limit",
			body:  `{"message":"Validation failed, or the endpoint has been spammed.","documentation_url":"https://docs.github.com/rest/issues/comments#create-an-issue-comment"}`,
			class: forge.ClassContentLimited,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, githubemu.Options{})
			e.cfg.Transport = roundTripFunc(func(r *http.Request) (*http.Response, error) {
				return &http.Response{StatusCode: http.StatusUnprocessableEntity, Status: "422 Unprocessable Entity",
					Header: http.Header{"Content-Type": {"application/json; charset=utf-8"}},
					Body:   io.NopCloser(strings.NewReader(c.body)), Request: r}, nil
			})
			g := e.restart(t)
			_, err := g.AddComment(t.Context(), 1, "hello")
			if fe := classOf(t, err); fe.Class != c.class {
				t.Errorf("class %s, want %s: %v", fe.Class, c.class, err)
			}
		})
	}
}

// A 422 on a status is about what was sent (an unknown commit, a state, a
// description, the cap per context): never a limit.
func TestStatus422IsAboutTheContent(t *testing.T) {
	e := newEnv(t, githubemu.Options{})
	e.repo.AddCommit(sha(1))
	ctx := t.Context()
	if _, err := e.forge.SetStatus(ctx, sha(404), forge.Status{Context: "plan", State: "success"}); classOf(t, err).Class != forge.ClassValidation {
		t.Errorf("unknown commit: %v", err)
	}
	for i := range 1000 {
		if _, err := e.forge.SetStatus(ctx, sha(1), forge.Status{Context: "plan", State: "pending", Description: time.Duration(i).String()}); err != nil {
			t.Fatal(i, err)
		}
	}
	_, err := e.forge.SetStatus(ctx, sha(1), forge.Status{Context: "plan", State: "success"})
	if fe := classOf(t, err); fe.Class != forge.ClassValidation || fe.Retryable() {
		t.Errorf("status 1001: %v", err)
	}
}

// Status contexts are case-insensitive on GitHub: "Fleet-Agent/Plan" and
// "fleet-agent/plan" are one context, whichever side wrote which.
func TestStatusContextsAreCaseInsensitive(t *testing.T) {
	e := newEnv(t, githubemu.Options{})
	e.repo.AddCommit(sha(1))
	e.repo.AddCommit(sha(2))
	ctx := t.Context()

	// GitHub holds the context in other case (an older configuration
	// wrote it): this forge, prefix fleet-agent, reads it as its own.
	e.cfg.StatusContext = "Fleet-Agent"
	upper := e.restart(t)
	if _, err := upper.SetStatus(ctx, sha(1), forge.Status{Context: "Plan", State: forge.StateFailure, Description: "blocked"}); err != nil {
		t.Fatal(err)
	}
	e.cfg.StatusContext = ""
	lower := e.restart(t)
	got, found, err := lower.LatestStatus(ctx, sha(1), forge.ContextPlan)
	if err != nil || !found || got.State != forge.StateFailure || got.Description != "blocked" {
		t.Errorf("lower-case reader: %+v %v %v", got, found, err)
	}
	if is, err := lower.Poster().StatusIsLatest(ctx, sha(1), forge.ContextPlan, forge.StateFailure, "blocked", ""); err != nil || !is {
		t.Errorf("StatusIsLatest across case: %v %v", is, err)
	}

	// The other way: GitHub holds it in lower case, the forge asks in upper.
	if _, err := lower.SetStatus(ctx, sha(2), forge.Status{Context: forge.ContextApply, State: forge.StateSuccess, Description: "applied"}); err != nil {
		t.Fatal(err)
	}
	e.cfg.StatusContext = "FLEET-AGENT"
	shout := e.restart(t)
	got, found, err = shout.LatestStatus(ctx, sha(2), "APPLY")
	if err != nil || !found || got.State != forge.StateSuccess {
		t.Errorf("upper-case reader: %+v %v %v", got, found, err)
	}

	// The memory of what was posted compares contexts without case too: the
	// same status under another spelling is not posted again.
	e.emu.ResetLog()
	for _, c := range []string{"drift", "Drift", "DRIFT"} {
		posted, err := lower.SetStatus(ctx, sha(2), forge.Status{Context: c, State: forge.StateSuccess, Description: "no drift"})
		if err != nil || posted != (c == "drift") {
			t.Errorf("%s: posted %v %v", c, posted, err)
		}
	}
	if n := len(e.emu.Requests()); n != 1 {
		t.Errorf("%d requests for one status in three spellings", n)
	}
}

// commits/{sha}/pulls lists open pull requests and pull requests merged into
// other branches too: the lookup keeps the merged ones into the agent's
// branch and, of those, the one whose merge made the commit, else the most
// recently merged.
func TestMergedPullRequestRules(t *testing.T) {
	cases := []struct {
		name   string
		branch string
		setup  func(r *githubemu.Repo, advance func())
		sha    string
		want   int // 0: none
	}{
		{
			name: "merged into another branch, then pushed here: none",
			setup: func(r *githubemu.Repo, _ func()) {
				n := r.OpenPR(githubemu.PR{HeadSHA: sha(1), BaseRef: "release"})
				r.MergePR(n, sha(10))
				r.PushCommit("main", sha(10))
			},
			sha: sha(10),
		},
		{
			name: "only open pull requests hold it: none",
			setup: func(r *githubemu.Repo, _ func()) {
				r.OpenPR(githubemu.PR{HeadSHA: sha(2)})
			},
			sha: sha(2),
		},
		{
			name:   "a branch that is not the default: the merged one, not the open promotion",
			branch: "prod",
			setup: func(r *githubemu.Repo, advance func()) {
				open := r.OpenPR(githubemu.PR{HeadSHA: sha(30), BaseRef: "main"})
				merged := r.OpenPR(githubemu.PR{HeadSHA: sha(3), BaseRef: "prod"})
				advance()
				r.MergePR(merged, sha(30))
				_ = open
			},
			sha:  sha(30),
			want: 2,
		},
		{
			name:   "merged into the default branch is not merged into ours",
			branch: "prod",
			setup: func(r *githubemu.Repo, _ func()) {
				n := r.OpenPR(githubemu.PR{HeadSHA: sha(4)})
				r.MergePR(n, sha(40))
			},
			sha: sha(40),
		},
		{
			name: "several merged here: the one whose merge is the commit, though older",
			setup: func(r *githubemu.Repo, advance func()) {
				a := r.OpenPR(githubemu.PR{HeadSHA: sha(5)})
				b := r.OpenPR(githubemu.PR{HeadSHA: sha(6)})
				r.MergePR(a, sha(50))
				advance()
				r.MergePR(b, sha(60))
				r.AddCommit(sha(50), b)
			},
			sha:  sha(50),
			want: 1,
		},
		{
			name: "several merged here, none made it: the most recently merged",
			setup: func(r *githubemu.Repo, advance func()) {
				a := r.OpenPR(githubemu.PR{HeadSHA: sha(7)})
				b := r.OpenPR(githubemu.PR{HeadSHA: sha(7)})
				c := r.OpenPR(githubemu.PR{HeadSHA: sha(7)})
				r.MergePR(b, sha(70))
				advance()
				r.MergePR(c, sha(71))
				advance()
				r.MergePR(a, sha(72))
				r.PushCommit("main", sha(7))
			},
			sha:  sha(7),
			want: 1,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, githubemu.Options{})
			if c.branch != "" {
				e.cfg.Branch = c.branch
				e.restart(t)
			}
			c.setup(e.repo, func() { e.clk.Advance(time.Minute) })
			pr, ok, err := e.forge.MergedPullRequest(t.Context(), c.sha)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case c.want == 0 && ok:
				t.Errorf("found #%d (base %s, merged %v), want none", pr.Number, pr.BaseRef, pr.Merged)
			case c.want != 0 && (!ok || pr.Number != c.want):
				t.Errorf("found %v #%d, want #%d", ok, pr.Number, c.want)
			}
		})
	}
}

// The forge names the REST API version on every request, the App's token
// requests included, and a GitHub that does not answer that version says so.
func TestAPIVersionSent(t *testing.T) {
	e := newEnv(t, githubemu.Options{})
	e.repo.OpenPR(githubemu.PR{HeadSHA: sha(1)})
	if _, err := e.forge.OpenPullRequests(t.Context(), "main"); err != nil {
		t.Fatal(err)
	}
	key, pemText := pemKey(t)
	e.emu.AddApp("4242", 77, &key.PublicKey)
	e.sec.set("secret://app-key", pemText)
	e.cfg.Token, e.cfg.App = "", &forge.App{ID: "4242", InstallationID: 77, PrivateKey: "secret://app-key"}
	app := e.restart(t)
	if _, err := app.UpsertPlanComment(t.Context(), 1, "plan"); err != nil {
		t.Fatal(err)
	}
	reqs := e.emu.Requests()
	if len(reqs) < 4 {
		t.Fatalf("%d requests", len(reqs))
	}
	for _, r := range reqs {
		if r.APIVersion != forge.APIVersion {
			t.Errorf("%s %s named version %q, want %s", r.Method, r.Path, r.APIVersion, forge.APIVersion)
		}
	}

	other := newEnv(t, githubemu.Options{APIVersions: []string{"2026-03-10"}})
	_, err := other.forge.OpenPullRequests(t.Context(), "main")
	if fe := classOf(t, err); fe.Status != http.StatusBadRequest || fe.Retryable() || !strings.Contains(err.Error(), forge.APIVersion) {
		t.Errorf("a GitHub without 2022-11-28: %v", err)
	}
}
