package forge_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/forge"
	"github.com/fleet-agent/fleet-agent/internal/forge/githubemu"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

var epoch = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// canary is a token value that must never show in an error or a log line.
const canary = "ghp_CANARY7f3a9c1e5b"

// secrets is a Resolver over a map; it counts resolutions so tests can see
// that values are fetched at the moment of use.
type secrets struct {
	mu     sync.Mutex
	values map[string]string
	calls  int
}

func (s *secrets) Resolve(_ context.Context, ref string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	v, ok := s.values[ref]
	if !ok {
		return "", fmt.Errorf("no secret %s", ref)
	}
	return v, nil
}

func (s *secrets) set(ref, v string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.values[ref] = v
}

type env struct {
	emu   *githubemu.Server
	repo  *githubemu.Repo
	clk   *clock.Fake
	sec   *secrets
	logs  *syncBuffer
	cfg   forge.Config
	forge *forge.GitHub
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func newEnv(t *testing.T, opts githubemu.Options) *env {
	t.Helper()
	clk := clock.NewFake(epoch)
	opts.Clock = clk
	e := &env{clk: clk, emu: githubemu.New(t, opts), logs: &syncBuffer{}}
	e.emu.AddToken(canary, "fleet-bot")
	e.repo = e.emu.Repo("acme/fleet")
	e.sec = &secrets{values: map[string]string{"env://GITHUB_TOKEN": canary + "\n", "secret://hook": "hook-secret"}}
	e.cfg = forge.Config{
		Repository:    "acme/fleet",
		APIURL:        e.emu.URL(),
		Token:         "env://GITHUB_TOKEN",
		WebhookSecret: "secret://hook",
		Resolver:      e.sec,
		Clock:         clk,
		Log:           slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	e.forge = e.restart(t)
	// Every request the forge makes names the API version it reads.
	t.Cleanup(func() {
		for _, r := range e.emu.Requests() {
			if r.APIVersion != forge.APIVersion {
				t.Errorf("%s %s named API version %q, want %s", r.Method, r.Path, r.APIVersion, forge.APIVersion)
			}
		}
	})
	return e
}

// restart builds a new forge on the same configuration: nothing in memory.
func (e *env) restart(t *testing.T) *forge.GitHub {
	t.Helper()
	g, err := forge.New(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.forge = g
	return g
}

func sha(i int) string { return fmt.Sprintf("%040x", i) }

func classOf(t *testing.T, err error) *forge.Error {
	t.Helper()
	var fe *forge.Error
	if !errors.As(err, &fe) {
		t.Fatalf("want a *forge.Error, got %T %v", err, err)
	}
	return fe
}

func TestOpenPullRequestsPaginatesAndIdlePollIsFree(t *testing.T) {
	e := newEnv(t, githubemu.Options{})
	for i := 1; i <= 250; i++ {
		e.repo.OpenPR(githubemu.PR{HeadSHA: sha(i), HeadRef: fmt.Sprintf("b%d", i), User: "alice"})
	}
	e.repo.OpenPR(githubemu.PR{HeadSHA: sha(900), BaseRef: "develop"})
	ctx := t.Context()
	prs, err := e.forge.OpenPullRequests(ctx, "main")
	if err != nil {
		t.Fatal(err)
	}
	if len(prs) != 250 {
		t.Fatalf("%d pull requests, want 250", len(prs))
	}
	want := forge.PullRequest{Number: 250, HeadSHA: sha(250), HeadRef: "b250", BaseRef: "main", Author: "alice", State: "open"}
	if prs[0] != want {
		t.Errorf("first = %+v, want %+v", prs[0], want)
	}
	seen := map[int]bool{}
	for _, p := range prs {
		seen[p.Number] = true
	}
	if len(seen) != 250 {
		t.Errorf("%d distinct pull requests", len(seen))
	}

	// Idle: every page answered 304, no budget spent.
	budget := e.emu.RateRemaining()
	e.emu.ResetLog()
	again, err := e.forge.OpenPullRequests(ctx, "main")
	if err != nil || len(again) != 250 || again[0] != want {
		t.Fatalf("idle poll: %d, %v", len(again), err)
	}
	if c := e.emu.Counters(); c.Counted != 0 || c.NotModified != 3 || c.Total != 3 {
		t.Errorf("idle poll over 3 pages: %+v", c)
	}
	if e.emu.RateRemaining() != budget {
		t.Errorf("idle poll spent budget: %d -> %d", budget, e.emu.RateRemaining())
	}

	// A moved head shows.
	e.repo.PushHead(7, sha(7000))
	moved, err := e.forge.OpenPullRequests(ctx, "main")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range moved {
		if p.Number == 7 {
			found = p.HeadSHA == sha(7000)
		}
	}
	if !found {
		t.Error("the moved head of #7 did not show")
	}
}

func TestIdlePollIsOneConditionalRequest(t *testing.T) {
	e := newEnv(t, githubemu.Options{})
	e.repo.OpenPR(githubemu.PR{HeadSHA: sha(1)})
	if _, err := e.forge.OpenPullRequests(t.Context(), "main"); err != nil {
		t.Fatal(err)
	}
	budget := e.emu.RateRemaining()
	e.emu.ResetLog()
	prs, err := e.forge.OpenPullRequests(t.Context(), "main")
	if err != nil || len(prs) != 1 {
		t.Fatal(prs, err)
	}
	reqs := e.emu.Requests()
	if len(reqs) != 1 || !reqs[0].Conditional || reqs[0].Status != http.StatusNotModified {
		t.Errorf("idle poll requests: %+v", reqs)
	}
	if e.emu.RateRemaining() != budget {
		t.Errorf("budget %d -> %d", budget, e.emu.RateRemaining())
	}
}

func TestPlanCommentIsEditedInPlaceAcrossRestarts(t *testing.T) {
	e := newEnv(t, githubemu.Options{})
	n := e.repo.OpenPR(githubemu.PR{HeadSHA: sha(1)})
	for i := range 250 {
		e.repo.AddComment(n, "reviewer", fmt.Sprintf("looks good %d", i))
	}
	ctx := t.Context()
	c, err := e.forge.UpsertPlanComment(ctx, n, "plan one")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(c.Body, "<!-- fleet-agent:plan -->\n") {
		t.Errorf("marker missing: %q", c.Body)
	}

	// The same body again: nothing sent.
	e.emu.ResetLog()
	if _, err := e.forge.UpsertPlanComment(ctx, n, "plan one"); err != nil {
		t.Fatal(err)
	}
	if got := e.emu.Counters().Total; got != 0 {
		t.Errorf("an unchanged body made %d requests", got)
	}
	if _, err := e.forge.UpsertPlanComment(ctx, n, "plan two"); err != nil {
		t.Fatal(err)
	}

	// A restart: the comment is found by its marker past 250 others.
	g := e.restart(t)
	if _, err := g.UpsertPlanComment(ctx, n, "plan three"); err != nil {
		t.Fatal(err)
	}
	var marked []githubemu.Comment
	for _, cm := range e.repo.Comments(n) {
		if strings.Contains(cm.Body, "<!-- fleet-agent:plan -->") {
			marked = append(marked, cm)
		}
	}
	if len(marked) != 1 {
		t.Fatalf("%d plan comments, want 1", len(marked))
	}
	if marked[0].ID != c.ID || marked[0].Edits != 2 || !strings.HasSuffix(marked[0].Body, "plan three") {
		t.Errorf("plan comment %+v", marked[0])
	}

	// Someone deletes it: the next upsert makes a new one.
	e.repo.DeleteComment(c.ID)
	if _, err := g.UpsertPlanComment(ctx, n, "plan four"); err != nil {
		t.Fatal(err)
	}
	cs := e.repo.Comments(n)
	if last := cs[len(cs)-1]; len(cs) != 251 || !strings.HasSuffix(last.Body, "plan four") {
		t.Errorf("after a deletion: %d comments, last %+v", len(cs), last)
	}
}

func TestStatusContextPrefixesMarker(t *testing.T) {
	e := newEnv(t, githubemu.Options{})
	e.cfg.StatusContext = "fleet-staging"
	g := e.restart(t)
	n := e.repo.OpenPR(githubemu.PR{HeadSHA: sha(1)})
	// Another agent's plan comment must be left alone.
	e.repo.AddComment(n, "other-bot", "<!-- fleet-agent:plan -->\nother")
	if _, err := g.UpsertPlanComment(t.Context(), n, "mine"); err != nil {
		t.Fatal(err)
	}
	cs := e.repo.Comments(n)
	if len(cs) != 2 || cs[0].Edits != 0 || !strings.HasPrefix(cs[1].Body, "<!-- fleet-staging:plan -->") {
		t.Errorf("comments %+v", cs)
	}
	if _, err := g.SetStatus(t.Context(), sha(1), forge.Status{Context: forge.ContextPlan, State: forge.StateSuccess}); err != nil {
		t.Fatal(err)
	}
	if st := e.repo.Statuses(sha(1)); len(st) != 1 || st[0].Context != "fleet-staging/plan" {
		t.Errorf("statuses %+v", st)
	}
}

func TestAddCommentOnceSurvivesRestart(t *testing.T) {
	e := newEnv(t, githubemu.Options{})
	n := e.repo.OpenPR(githubemu.PR{HeadSHA: sha(1)})
	marker := e.forge.Marker("apply " + sha(2))
	ctx := t.Context()
	if _, posted, err := e.forge.AddCommentOnce(ctx, n, marker, "applied 3 calls"); err != nil || !posted {
		t.Fatal(posted, err)
	}
	if _, posted, err := e.forge.AddCommentOnce(ctx, n, marker, "applied 3 calls"); err != nil || posted {
		t.Fatal("posted twice in one process", err)
	}
	g := e.restart(t)
	c, posted, err := g.AddCommentOnce(ctx, n, marker, "applied 3 calls")
	if err != nil || posted {
		t.Fatal("posted again after a restart", err)
	}
	if !strings.Contains(c.Body, marker) || len(e.repo.Comments(n)) != 1 {
		t.Errorf("comments %+v", e.repo.Comments(n))
	}
	found, ok, err := g.FindComment(ctx, n, marker)
	if err != nil || !ok || found.ID != c.ID || found.Author != "fleet-bot" {
		t.Errorf("find: %+v %v %v", found, ok, err)
	}
	if _, ok, err := g.FindComment(ctx, n, g.Marker("apply "+sha(3))); err != nil || ok {
		t.Errorf("found a comment for another commit: %v %v", ok, err)
	}
	if _, err := g.AddComment(ctx, n, "drift again"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := g.FindComment(ctx, n, "fleet-agent:plan"); classOf(t, err).Class != forge.ClassValidation {
		t.Errorf("a bare word taken as a marker: %v", err)
	}
}

func TestCommentLengthLimit(t *testing.T) {
	e := newEnv(t, githubemu.Options{})
	n := e.repo.OpenPR(githubemu.PR{HeadSHA: sha(1)})
	ctx := t.Context()
	e.emu.ResetLog()
	_, err := e.forge.AddComment(ctx, n, strings.Repeat("ж", forge.MaxCommentLength+1))
	fe := classOf(t, err)
	if fe.Class != forge.ClassValidation || fe.Retryable() || !strings.Contains(fe.Error(), "65537") {
		t.Errorf("too long: %v", err)
	}
	if _, err := e.forge.UpsertPlanComment(ctx, n, strings.Repeat("ж", forge.MaxCommentLength)); classOf(t, err).Class != forge.ClassValidation {
		t.Errorf("the marker pushes it over: %v", err)
	}
	if e.emu.Counters().Total != 0 {
		t.Errorf("a refused body was sent")
	}
	if _, err := e.forge.AddComment(ctx, n, strings.Repeat("ж", forge.MaxCommentLength)); err != nil {
		t.Errorf("exactly the limit: %v", err)
	}
}

func TestCutDescription(t *testing.T) {
	for _, tc := range []struct{ name, in string }{
		{"ascii", strings.Repeat("a", 500)},
		{"two-byte", strings.Repeat("é", 200)},
		{"emoji", strings.Repeat("🚀", 141)},
		{"mixed at the cut", strings.Repeat("a", 138) + "日本語"},
		{"invalid utf-8", strings.Repeat("a", 100) + "\xff\xfe" + strings.Repeat("b", 100)},
	} {
		got := forge.CutDescription(tc.in)
		if !utf8.ValidString(got) || utf8.RuneCountInString(got) != 140 || !strings.HasSuffix(got, "…") {
			t.Errorf("%s: %d code points, valid %v: %q", tc.name, utf8.RuneCountInString(got), utf8.ValidString(got), got)
		}
	}
	if got := forge.CutDescription(strings.Repeat("ü", 140)); got != strings.Repeat("ü", 140) {
		t.Errorf("140 code points were cut")
	}
	if got := forge.CutDescription("short"); got != "short" {
		t.Errorf("short: %q", got)
	}
}

func TestStatusesCutAndNotRepeated(t *testing.T) {
	e := newEnv(t, githubemu.Options{})
	e.repo.OpenPR(githubemu.PR{HeadSHA: sha(1)})
	ctx := t.Context()
	long := strings.Repeat("Ünïcödé ✓ ", 40)
	st := forge.Status{Context: forge.ContextPlan, State: forge.StateSuccess, Description: long, TargetURL: "https://ci.example/1"}
	if posted, err := e.forge.SetStatus(ctx, sha(1), st); err != nil || !posted {
		t.Fatal(posted, err)
	}
	got := e.repo.Statuses(sha(1))
	if len(got) != 1 || got[0].Context != "fleet-agent/plan" || utf8.RuneCountInString(got[0].Description) != 140 ||
		!strings.HasPrefix(long, strings.TrimSuffix(got[0].Description, "…")) || got[0].TargetURL != "https://ci.example/1" {
		t.Fatalf("status %+v", got)
	}
	if posted, err := e.forge.SetStatus(ctx, sha(1), st); err != nil || posted {
		t.Errorf("identical status posted again: %v %v", posted, err)
	}
	st.State = forge.StateFailure
	if posted, _ := e.forge.SetStatus(ctx, sha(1), st); !posted {
		t.Error("a changed status was not posted")
	}
	if posted, _ := e.forge.SetStatus(ctx, sha(1), forge.Status{Context: forge.ContextApply, State: forge.StatePending}); !posted {
		t.Error("another context was not posted")
	}
	if n := len(e.repo.Statuses(sha(1))); n != 3 {
		t.Errorf("%d statuses, want 3", n)
	}
	_, err := e.forge.SetStatus(ctx, sha(1), forge.Status{Context: forge.ContextPlan, State: "green"})
	if classOf(t, err).Class != forge.ClassValidation {
		t.Errorf("bad state: %v", err)
	}
}

func TestMergedPullRequest(t *testing.T) {
	e := newEnv(t, githubemu.Options{})
	n := e.repo.OpenPR(githubemu.PR{HeadSHA: sha(1), HeadRef: "grow", User: "bob"})
	e.repo.MergePR(n, sha(100))
	pr, ok, err := e.forge.MergedPullRequest(t.Context(), sha(100))
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if pr.Number != n || pr.HeadSHA != sha(1) || !pr.Merged || pr.MergeCommitSHA != sha(100) || pr.Author != "bob" || pr.MergedAt.IsZero() {
		t.Errorf("merged pull request %+v", pr)
	}
	e.repo.AddCommit(sha(200))
	if _, ok, err := e.forge.MergedPullRequest(t.Context(), sha(200)); err != nil || ok {
		t.Errorf("a direct push has a merged pull request: %v %v", ok, err)
	}
	open := e.repo.OpenPR(githubemu.PR{HeadSHA: sha(300)})
	prs, err := e.forge.PullRequestsForCommit(t.Context(), sha(300))
	if err != nil || len(prs) != 1 || prs[0].Number != open || prs[0].Merged {
		t.Errorf("open head: %+v %v", prs, err)
	}
}

func TestErrorClasses(t *testing.T) {
	e := newEnv(t, githubemu.Options{})
	e.repo.OpenPR(githubemu.PR{HeadSHA: sha(1)})
	ctx := t.Context()

	e.emu.RevokeToken(canary)
	_, err := e.forge.OpenPullRequests(ctx, "main")
	fe := classOf(t, err)
	if fe.Class != forge.ClassUnauthorized || fe.Status != 401 || fe.Retryable() || !fe.RetryAt(epoch).IsZero() {
		t.Errorf("401: %v", err)
	}
	if refusal.CodeOf(err) != refusal.InvalidState {
		t.Errorf("401 code %s", refusal.CodeOf(err))
	}
	e.emu.AddToken(canary, "fleet-bot")

	e.cfg.Repository = "acme/gone"
	gone := e.restart(t)
	if _, err := gone.OpenPullRequests(ctx, "main"); classOf(t, err).Class != forge.ClassNotFound {
		t.Errorf("404: %v", err)
	}
	e.cfg.Repository = "acme/fleet"
	g := e.restart(t)
	if _, err := g.SetStatus(ctx, sha(42), forge.Status{Context: "plan", State: "success"}); classOf(t, err).Class != forge.ClassValidation {
		t.Errorf("422: %v", err)
	} else if !strings.Contains(err.Error(), "No commit found") {
		t.Errorf("422 lost GitHub's message: %v", err)
	}

	e.emu.Fail5xxNext(1)
	_, err = g.OpenPullRequests(ctx, "main")
	if fe := classOf(t, err); fe.Class != forge.ClassServer || !fe.Retryable() || !fe.RetryAt(epoch).Equal(epoch.Add(forge.DefaultRetryDelay)) {
		t.Errorf("5xx: %v", err)
	}
	if refusal.CodeOf(err) != refusal.Unavailable {
		t.Errorf("5xx code %s", refusal.CodeOf(err))
	}

	e.emu.SetOutage(true)
	_, err = g.OpenPullRequests(ctx, "main")
	if fe := classOf(t, err); fe.Class != forge.ClassNetwork || !fe.Retryable() {
		t.Errorf("outage: %v", err)
	}
	e.emu.SetOutage(false)

	e.sec.set("env://GITHUB_TOKEN", "  ")
	e.emu.ResetLog()
	_, err = g.OpenPullRequests(ctx, "main")
	if fe := classOf(t, err); fe.Class != forge.ClassCredentials || fe.Retryable() {
		t.Errorf("empty secret: %v", err)
	}
	if e.emu.Counters().Total != 0 {
		t.Error("sent without a credential")
	}
}

func TestPrimaryRateLimit(t *testing.T) {
	e := newEnv(t, githubemu.Options{})
	e.repo.OpenPR(githubemu.PR{HeadSHA: sha(1)})
	ctx := t.Context()
	e.emu.SetRateBudget(0)
	reset := e.emu.RateReset()
	_, err := e.forge.SetStatus(ctx, sha(1), forge.Status{Context: "plan", State: "pending"})
	fe := classOf(t, err)
	if fe.Class != forge.ClassRateLimited || !fe.RetryAt(epoch).Equal(reset) || !fe.Retryable() {
		t.Fatalf("primary: %v (retry at %v, reset %v)", err, fe.RetryAt(epoch), reset)
	}
	if r := e.forge.Rate(); !r.Seen || r.Remaining != 0 || !r.Reset.Equal(reset) {
		t.Errorf("rate %+v", r)
	}
	// Until the reset, nothing is sent.
	e.emu.ResetLog()
	e.clk.Advance(30 * time.Minute)
	_, err = e.forge.SetStatus(ctx, sha(1), forge.Status{Context: "plan", State: "pending"})
	if classOf(t, err).Class != forge.ClassRateLimited || e.emu.Counters().Total != 0 {
		t.Errorf("sent while limited: %v, %d requests", err, e.emu.Counters().Total)
	}
	e.clk.Advance(30 * time.Minute)
	if _, err := e.forge.SetStatus(ctx, sha(1), forge.Status{Context: "plan", State: "pending"}); err != nil {
		t.Errorf("after the reset: %v", err)
	}
}

func TestSecondaryRateLimit(t *testing.T) {
	e := newEnv(t, githubemu.Options{})
	n := e.repo.OpenPR(githubemu.PR{HeadSHA: sha(1)})
	ctx := t.Context()
	e.clk.Advance(1500 * time.Millisecond)
	now := e.clk.Now()
	e.emu.SecondaryLimitNext(1, 90*time.Second)
	_, err := e.forge.AddComment(ctx, n, "hello")
	fe := classOf(t, err)
	if fe.Class != forge.ClassSecondaryRateLimited || !fe.RetryAt(now).Equal(now.Add(90*time.Second)) {
		t.Fatalf("secondary: %v, retry at %v", err, fe.RetryAt(now))
	}
	if got := fe.RetryAt(now.Add(2 * time.Minute)); !got.Equal(now.Add(2 * time.Minute)) {
		t.Errorf("retry at after the wait: %v", got)
	}
	e.emu.ResetLog()
	e.clk.Advance(60 * time.Second)
	if _, err := e.forge.AddComment(ctx, n, "hello"); classOf(t, err).Class != forge.ClassSecondaryRateLimited || e.emu.Counters().Total != 0 {
		t.Errorf("sent before Retry-After: %v", err)
	}
	e.clk.Advance(30 * time.Second)
	if _, err := e.forge.AddComment(ctx, n, "hello"); err != nil {
		t.Errorf("after Retry-After: %v", err)
	}
	if len(e.repo.Comments(n)) != 1 {
		t.Errorf("comments %d", len(e.repo.Comments(n)))
	}
}

func TestEnterpriseBaseURL(t *testing.T) {
	e := newEnv(t, githubemu.Options{Prefix: "/api/v3"})
	e.repo.OpenPR(githubemu.PR{HeadSHA: sha(1)})
	if !strings.HasSuffix(e.cfg.APIURL, "/api/v3/") {
		t.Fatalf("apiURL %s", e.cfg.APIURL)
	}
	prs, err := e.forge.OpenPullRequests(t.Context(), "main")
	if err != nil || len(prs) != 1 {
		t.Fatal(prs, err)
	}
	e.cfg.APIURL = strings.TrimSuffix(e.cfg.APIURL, "/") // no trailing slash: still the root
	if _, err := e.restart(t).OpenPullRequests(t.Context(), "main"); err != nil {
		t.Errorf("without a trailing slash: %v", err)
	}
	e.cfg.APIURL = strings.TrimSuffix(e.cfg.APIURL, "api/v3")
	if _, err := e.restart(t).OpenPullRequests(t.Context(), "main"); classOf(t, err).Class != forge.ClassNotFound {
		t.Errorf("without /api/v3: %v", err)
	}
}

func TestSecretResolvedAtUse(t *testing.T) {
	e := newEnv(t, githubemu.Options{})
	e.repo.OpenPR(githubemu.PR{HeadSHA: sha(1)})
	ctx := t.Context()
	if _, err := e.forge.OpenPullRequests(ctx, "main"); err != nil {
		t.Fatal(err)
	}
	e.emu.RevokeToken(canary)
	e.emu.AddToken("ghp_rotated", "fleet-bot")
	e.sec.set("env://GITHUB_TOKEN", "ghp_rotated")
	if _, err := e.forge.OpenPullRequests(ctx, "main"); err != nil {
		t.Errorf("a rotated token was not picked up: %v", err)
	}
}

func pemKey(t *testing.T) (*rsa.PrivateKey, string) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return key, string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}))
}

func TestAppInstallationTokens(t *testing.T) {
	e := newEnv(t, githubemu.Options{})
	e.repo.OpenPR(githubemu.PR{HeadSHA: sha(1)})
	key, pemText := pemKey(t)
	e.emu.AddApp("4242", 77, &key.PublicKey)
	e.sec.set("secret://app-key", pemText)
	e.cfg.Token = ""
	e.cfg.App = &forge.App{ID: "4242", InstallationID: 77, PrivateKey: "secret://app-key"}
	g := e.restart(t)
	ctx := t.Context()
	poll := func() {
		t.Helper()
		if _, err := g.OpenPullRequests(ctx, "main"); err != nil {
			t.Fatal(err)
		}
	}
	poll()
	poll()
	if e.emu.TokensMinted() != 1 {
		t.Fatalf("minted %d, want 1", e.emu.TokensMinted())
	}
	e.clk.Advance(54 * time.Minute)
	poll()
	if e.emu.TokensMinted() != 1 {
		t.Errorf("renewed too early: %d", e.emu.TokensMinted())
	}
	// Within five minutes of expiry: renewed before it dies.
	e.clk.Advance(2 * time.Minute)
	poll()
	if e.emu.TokensMinted() != 2 {
		t.Errorf("not renewed before expiry: %d", e.emu.TokensMinted())
	}
	n := e.repo.OpenPR(githubemu.PR{HeadSHA: sha(2)})
	c, err := g.UpsertPlanComment(ctx, n, "as the app")
	if err != nil || c.Author != "fleet-agent[bot]" {
		t.Errorf("comment as the app: %+v %v", c, err)
	}

	// A wrong key: the mint is refused, classed unauthorized.
	_, other := pemKey(t)
	e.sec.set("secret://app-key", other)
	e.clk.Advance(time.Hour)
	_, err = g.OpenPullRequests(ctx, "main")
	fe := classOf(t, err)
	if fe.Class != forge.ClassUnauthorized || !strings.Contains(fe.Error(), "installation token") {
		t.Errorf("wrong key: %v", err)
	}
	e.sec.set("secret://app-key", "not a key")
	_, err = g.OpenPullRequests(ctx, "main")
	if classOf(t, err).Class != forge.ClassCredentials {
		t.Errorf("unparsable key: %v", err)
	}
	for _, s := range []string{err.Error(), e.logs.String()} {
		if strings.Contains(s, "PRIVATE KEY") || strings.Contains(s, "not a key") {
			t.Errorf("key material leaked: %s", s)
		}
	}
}

func TestCanaryNeverLeaks(t *testing.T) {
	e := newEnv(t, githubemu.Options{})
	n := e.repo.OpenPR(githubemu.PR{HeadSHA: sha(1)})
	ctx := t.Context()
	var errs []error
	collect := func(_ any, err error) { errs = append(errs, err) }
	collect(e.forge.OpenPullRequests(ctx, "main"))
	collect(e.forge.SetStatus(ctx, sha(9), forge.Status{Context: "plan", State: "success"}))
	e.emu.Fail5xxNext(1)
	collect(e.forge.AddComment(ctx, n, "x"))
	e.emu.SecondaryLimitNext(1, time.Second)
	collect(e.forge.AddComment(ctx, n, "x"))
	e.clk.Advance(2 * time.Second)
	e.emu.SetOutage(true)
	collect(e.forge.OpenPullRequests(ctx, "develop"))
	e.emu.SetOutage(false)
	e.emu.RevokeToken(canary)
	collect(e.forge.OpenPullRequests(ctx, "main"))
	e.emu.SetRateBudget(0)
	e.emu.AddToken(canary, "fleet-bot")
	collect(e.forge.AddComment(ctx, n, "x"))
	e.sec.set("env://GITHUB_TOKEN", "")
	collect(e.forge.AddComment(ctx, n, "x"))

	failures := 0
	for _, err := range errs {
		if err == nil {
			continue
		}
		failures++
		if strings.Contains(err.Error(), canary) || strings.Contains(fmt.Sprintf("%+v", err), canary) {
			t.Errorf("canary in error: %v", err)
		}
	}
	if failures < 6 {
		t.Errorf("only %d of %d calls failed: the test does not exercise the error paths", failures, len(errs))
	}
	if logs := e.logs.String(); logs == "" || strings.Contains(logs, canary) {
		t.Errorf("canary in logs (or no logs at all): %q", logs)
	}
}

func TestConfigRefused(t *testing.T) {
	res := &secrets{values: map[string]string{}}
	for name, cfg := range map[string]forge.Config{
		"no repository":  {Token: "env://T", Resolver: res},
		"both":           {Repository: "a/b", Token: "env://T", App: &forge.App{ID: "1", InstallationID: 1, PrivateKey: "secret://k"}, Resolver: res},
		"neither":        {Repository: "a/b", Resolver: res},
		"no resolver":    {Repository: "a/b", Token: "env://T"},
		"bad url":        {Repository: "a/b", Token: "env://T", Resolver: res, APIURL: "ftp://x"},
		"bad prefix":     {Repository: "a/b", Token: "env://T", Resolver: res, StatusContext: "a-->b"},
		"incomplete app": {Repository: "a/b", App: &forge.App{ID: "1"}, Resolver: res},
	} {
		if _, err := forge.New(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if res.calls != 0 {
		t.Error("New resolved a secret")
	}
}

func TestConcurrentUpsertsMakeOneComment(t *testing.T) {
	e := newEnv(t, githubemu.Options{})
	n := e.repo.OpenPR(githubemu.PR{HeadSHA: sha(1)})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			if _, err := e.forge.UpsertPlanComment(t.Context(), n, fmt.Sprintf("plan %d", i)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if cs := e.repo.Comments(n); len(cs) != 1 {
		t.Errorf("%d comments from concurrent upserts, want 1", len(cs))
	}
}
