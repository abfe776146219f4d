// Package githubemu is a GitHub REST API emulator for tests: an httptest
// server on 127.0.0.1 that answers the endpoints fleet-agent uses the way
// GitHub documents them (shapes go-github decodes, Link pagination, ETags and
// 304s, rate-limit headers and budget, secondary limits, 401/404/422, App
// installation tokens), with state a test can drive and read.
//
// It follows GitHub's REST description (version 2022-11-28, the parts kept
// under testdata/restapi and checked by the tests) where fleet-agent's tests
// once followed their own idea of GitHub: the X-GitHub-Api-Version header is
// checked and answered; status contexts are case-insensitive; creating or
// editing a comment can answer 422 "was submitted too quickly"
// (SubmittedTooQuicklyNext); and commits/{sha}/pulls lists, for a commit on
// the default branch, the merged pull requests that brought it, and for any
// other commit the open and merged pull requests that hold it, whatever their
// base branch. Check runs (checks.go) are created and updated only with an
// installation token, with the description's limits (50 annotations per
// request, appended by updates) and the refusals issue threads show.
//
// It is an ordinary package so that end-to-end tests elsewhere can use it;
// only tests import it.
package githubemu

import (
	"crypto/rsa"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/clock"
)

// Options configure a Server.
type Options struct {
	// Prefix is the path the API is served under: "" like api.github.com,
	// "/api/v3" like GitHub Enterprise Server.
	Prefix string
	// Clock stamps objects, runs the rate-limit window and ages tokens.
	// Default: the wall clock.
	Clock clock.Clock
	// RateLimit is the budget of counted requests per hour (default 5000).
	RateLimit int
	// APIVersions are the REST API versions answered (default
	// SupportedAPIVersion only). A request naming another version in
	// X-GitHub-Api-Version gets GitHub's 400; one naming none is answered
	// as the first.
	APIVersions []string
}

// SupportedAPIVersion is the REST API version the emulator's answers follow
// (GitHub also offers 2026-03-10, whose changes the emulator does not model,
// so it refuses that version rather than answer it wrongly).
const SupportedAPIVersion = "2022-11-28"

// Server is the emulator. All methods are safe for concurrent use.
type Server struct {
	srv    *httptest.Server
	prefix string
	clock  clock.Clock

	mu        sync.Mutex
	tokens    map[string]tokenInfo
	apps      map[int64]appInfo // by installation id
	repos     map[string]*Repo
	nextID    int64
	limit     int
	remaining int
	used      int
	reset     time.Time
	secondary int
	secAfter  time.Duration
	fail5xx   int
	tooQuick  int
	versions  []string
	outage    bool
	log       []Request
	minted    int
	// teams: org/slug (lower case) -> member logins (lower case).
	teams map[string]map[string]bool
}

type tokenInfo struct {
	login   string
	expires time.Time // zero: never
	// installation: an installation token (an App's, or Actions'
	// GITHUB_TOKEN), not a user: GET /user answers 403.
	installation bool
	// readOnly: a user with only read access to the repositories: it may
	// read, and every write answers 403 as GitHub does.
	readOnly bool
}

type appInfo struct {
	id   string
	slug string
	key  *rsa.PublicKey
}

// DefaultAppSlug is the slug of an App added with AddApp: its installation
// tokens comment as fleet-agent[bot].
const DefaultAppSlug = "fleet-agent"

// Request is one request the server saw.
type Request struct {
	Method string
	// Path is without the prefix; Query is the raw query.
	Path  string
	Query string
	// Status is the answer; 0 when the connection was dropped (outage).
	Status int
	// Counted says whether it spent rate limit.
	Counted bool
	// Conditional says whether it carried If-None-Match.
	Conditional bool
	// APIVersion is the X-GitHub-Api-Version the request named, "" for none.
	APIVersion string
}

// Counters sum up the request log.
type Counters struct {
	Total       int
	Counted     int
	NotModified int
}

// New starts a server; it is closed when the test ends.
func New(tb testing.TB, opts Options) *Server {
	tb.Helper()
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.RateLimit <= 0 {
		opts.RateLimit = 5000
	}
	if len(opts.APIVersions) == 0 {
		opts.APIVersions = []string{SupportedAPIVersion}
	}
	s := &Server{
		prefix:   strings.TrimSuffix(opts.Prefix, "/"),
		clock:    opts.Clock,
		tokens:   map[string]tokenInfo{},
		apps:     map[int64]appInfo{},
		repos:    map[string]*Repo{},
		nextID:   1000,
		limit:    opts.RateLimit,
		versions: append([]string(nil), opts.APIVersions...),
	}
	s.remaining = s.limit
	s.reset = s.clock.Now().Add(time.Hour)
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	tb.Cleanup(s.srv.Close)
	return s
}

// URL is the API root with its trailing slash, prefix included: what
// go-github takes as BaseURL and fleet-agent as github.apiURL.
func (s *Server) URL() string { return s.srv.URL + s.prefix + "/" }

// Close stops the server (New already arranges it for the test's end).
func (s *Server) Close() { s.srv.Close() }

// AddToken accepts token for requests made as login, a user: GET /user
// answers login.
func (s *Server) AddToken(token, login string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokens[token] = tokenInfo{login: login}
}

// AddReadOnlyToken accepts token for a user who may read the
// repositories but not write to them (pull access only): posts answer 403.
func (s *Server) AddReadOnlyToken(token, login string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokens[token] = tokenInfo{login: login, readOnly: true}
}

// AddInstallationToken accepts token as an installation token of the App
// slug (never expiring), as Actions' GITHUB_TOKEN is one of github-actions:
// its requests are made as slug[bot], and GET /user answers 403.
func (s *Server) AddInstallationToken(token, slug string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokens[token] = tokenInfo{login: slug + "[bot]", installation: true}
}

// RevokeToken makes token answer 401 from now on.
func (s *Server) RevokeToken(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.tokens, token)
}

// AddApp registers a GitHub App (id as the JWT issuer, numeric or client id)
// with its public key and one installation; its slug is DefaultAppSlug.
func (s *Server) AddApp(appID string, installationID int64, key *rsa.PublicKey) {
	s.AddAppWithSlug(appID, DefaultAppSlug, installationID, key)
}

// AddAppWithSlug is AddApp with the App's slug: GET /app with its JWT
// answers it, and its installation tokens act as slug[bot], as GitHub names
// an App's bot user.
func (s *Server) AddAppWithSlug(appID, slug string, installationID int64, key *rsa.PublicKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.apps[installationID] = appInfo{id: appID, slug: slug, key: key}
}

// TokensMinted counts installation tokens handed out.
func (s *Server) TokensMinted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.minted
}

// SetOutage drops every connection without an answer while on.
func (s *Server) SetOutage(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.outage = on
}

// SetRateBudget sets the requests left in the current window (until Reset).
func (s *Server) SetRateBudget(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.roll()
	s.remaining = n
}

// RateRemaining is the budget left.
func (s *Server) RateRemaining() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.roll()
	return s.remaining
}

// RateReset is when the window ends and the budget refills.
func (s *Server) RateReset() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.roll()
	return s.reset
}

// SecondaryLimitNext answers the next n requests with a secondary rate limit
// (403 and Retry-After: retryAfter in whole seconds; no Retry-After when
// retryAfter is 0, as GitHub sometimes answers).
func (s *Server) SecondaryLimitNext(n int, retryAfter time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.secondary, s.secAfter = n, retryAfter
}

// SubmittedTooQuicklyNext answers the next n requests that create or edit a
// comment with the 422 GitHub gives an integration that creates content too
// fast ("was submitted too quickly"): the comment is not made, and the same
// request succeeds later. The answer has the shape of a validation error, as
// GitHub's has.
func (s *Server) SubmittedTooQuicklyNext(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tooQuick = n
}

// Fail5xxNext answers the next n requests with 502 Bad Gateway.
func (s *Server) Fail5xxNext(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail5xx = n
}

// Requests returns a copy of the request log.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.log...)
}

// Counters sums up the request log.
func (s *Server) Counters() Counters {
	s.mu.Lock()
	defer s.mu.Unlock()
	var c Counters
	for _, r := range s.log {
		c.Total++
		if r.Counted {
			c.Counted++
		}
		if r.Status == http.StatusNotModified {
			c.NotModified++
		}
	}
	return c
}

// ResetLog empties the request log.
func (s *Server) ResetLog() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = nil
}

// roll starts a new rate-limit window when the current one has ended.
// Called with s.mu held.
func (s *Server) roll() {
	now := s.clock.Now()
	if !now.Before(s.reset) {
		s.remaining, s.used = s.limit, 0
		s.reset = now.Add(time.Hour)
	}
}

func (s *Server) id() int64 {
	s.nextID++
	return s.nextID
}

// Repo returns the repository owner/name, creating it when new.
func (s *Server) Repo(fullName string) *Repo {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.repos[fullName]; ok {
		return r
	}
	owner, name, _ := strings.Cut(fullName, "/")
	r := &Repo{
		s: s, owner: owner, name: name, id: s.id(),
		defaultBranch: "main",
		pulls:         map[int]*pull{},
		commits:       map[string][]int{},
		branches:      map[string]map[string]bool{},
		comments:      map[int][]*comment{},
		statuses:      map[string][]*status{},
	}
	s.repos[fullName] = r
	return r
}

// Repo is one repository of the emulator.
type Repo struct {
	s             *Server
	owner, name   string
	id            int64
	defaultBranch string
	number        int
	pulls         map[int]*pull
	commits       map[string][]int // sha -> the pull requests that hold it
	// branches: the commits known to be on each branch (pushed there or
	// made there by a merge), which decides what commits/{sha}/pulls lists.
	branches map[string]map[string]bool
	comments map[int][]*comment
	statuses map[string][]*status
	// checkRuns in the order they were created.
	checkRuns []*CheckRun
	// reviews of each pull request, oldest first.
	reviews map[int][]*review
	// headOf resolves a branch to its commit (pullwrite.go); nil: unknown.
	headOf func(branch string) string
}

// SetDefaultBranch makes name the repository's default branch ("main" until
// then): commits/{sha}/pulls lists only merged pull requests for a commit on
// it.
func (r *Repo) SetDefaultBranch(name string) {
	s := r.s
	s.mu.Lock()
	defer s.mu.Unlock()
	r.defaultBranch = name
}

// PushCommit records that sha is on branch (a direct push, or a commit a
// merge made there) and makes it known, as AddCommit does.
func (r *Repo) PushCommit(branch, sha string) {
	s := r.s
	s.mu.Lock()
	defer s.mu.Unlock()
	r.onBranch(branch, sha)
}

func (r *Repo) onBranch(branch, sha string) {
	if _, ok := r.commits[sha]; !ok {
		r.commits[sha] = nil
	}
	b := r.branches[branch]
	if b == nil {
		b = map[string]bool{}
		r.branches[branch] = b
	}
	b[sha] = true
}

// PR is a pull request as tests set and read it.
type PR struct {
	Number  int
	Title   string
	Body    string
	HeadSHA string
	HeadRef string
	BaseRef string
	User    string
	// Read only:
	State          string
	Merged         bool
	MergeCommitSHA string
	MergedAt       time.Time
}

type pull struct {
	PR
	id                 int64
	created, updated   time.Time
	closedAt, mergedAt time.Time
}

// Comment is an issue comment as tests read it.
type Comment struct {
	ID    int64
	Body  string
	User  string
	Edits int
}

type comment struct {
	Comment
	created, updated time.Time
}

// Status is a commit status as tests read it.
type Status struct {
	ID          int64
	State       string
	Context     string
	Description string
	TargetURL   string
	Creator     string
	Created     time.Time
}

type status struct{ Status }

// OpenPR opens a pull request; Number 0 takes the next one, BaseRef ""
// means the default branch, User "" means octocat. Its head commit becomes
// one of its commits. It returns the number.
func (r *Repo) OpenPR(p PR) int {
	s := r.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if p.Number == 0 {
		r.number++
		p.Number = r.number
	} else if p.Number > r.number {
		r.number = p.Number
	}
	if p.BaseRef == "" {
		p.BaseRef = r.defaultBranch
	}
	if p.HeadRef == "" {
		p.HeadRef = fmt.Sprintf("change-%d", p.Number)
	}
	if p.User == "" {
		p.User = "octocat"
	}
	if p.Title == "" {
		p.Title = "Change " + p.HeadRef
	}
	p.State, p.Merged, p.MergeCommitSHA, p.MergedAt = "open", false, "", time.Time{}
	now := s.clock.Now()
	r.pulls[p.Number] = &pull{PR: p, id: s.id(), created: now, updated: now}
	r.link(p.HeadSHA, p.Number)
	return p.Number
}

func (r *Repo) link(sha string, number int) {
	if sha == "" {
		return
	}
	for _, n := range r.commits[sha] {
		if n == number {
			return
		}
	}
	r.commits[sha] = append(r.commits[sha], number)
}

// PushHead moves the head of pull request number to sha.
func (r *Repo) PushHead(number int, sha string) {
	s := r.s
	s.mu.Lock()
	defer s.mu.Unlock()
	p := r.mustPull(number)
	p.HeadSHA = sha
	p.updated = s.clock.Now()
	r.link(sha, number)
}

// MergePR merges pull request number; mergeSHA is the commit the merge made
// on the base branch (merge, squash or rebase), which is then on that branch
// and one of the pull request's commits. The head commits are not put on the
// base branch (as a squash leaves them): say PushCommit for those that are.
func (r *Repo) MergePR(number int, mergeSHA string) {
	s := r.s
	s.mu.Lock()
	defer s.mu.Unlock()
	p := r.mustPull(number)
	now := s.clock.Now()
	p.State, p.Merged, p.MergeCommitSHA = "closed", true, mergeSHA
	p.MergedAt, p.mergedAt, p.closedAt, p.updated = now, now, now, now
	r.link(mergeSHA, number)
	r.onBranch(p.BaseRef, mergeSHA)
}

// ClosePR closes pull request number without merging.
func (r *Repo) ClosePR(number int) {
	s := r.s
	s.mu.Lock()
	defer s.mu.Unlock()
	p := r.mustPull(number)
	now := s.clock.Now()
	p.State, p.closedAt, p.updated = "closed", now, now
}

// AddCommit makes sha known (statuses can be set on it) and makes it one of
// the commits of pull requests prs, which commits/{sha}/pulls then lists by
// GitHub's rules (see commitPulls). It puts sha on no branch.
func (r *Repo) AddCommit(sha string, prs ...int) {
	s := r.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := r.commits[sha]; !ok {
		r.commits[sha] = nil
	}
	for _, n := range prs {
		r.link(sha, n)
	}
}

// PR returns pull request number.
func (r *Repo) PR(number int) (PR, bool) {
	s := r.s
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := r.pulls[number]
	if !ok {
		return PR{}, false
	}
	return p.PR, true
}

func (r *Repo) mustPull(number int) *pull {
	p, ok := r.pulls[number]
	if !ok {
		panic(fmt.Sprintf("githubemu: %s/%s has no pull request #%d", r.owner, r.name, number))
	}
	return p
}

// AddComment posts a comment as user, as if from elsewhere; it returns its id.
func (r *Repo) AddComment(pr int, user, body string) int64 {
	s := r.s
	s.mu.Lock()
	defer s.mu.Unlock()
	r.mustPull(pr)
	return r.addComment(pr, user, body).ID
}

func (r *Repo) addComment(pr int, user, body string) *comment {
	now := r.s.clock.Now()
	c := &comment{Comment: Comment{ID: r.s.id(), Body: body, User: user}, created: now, updated: now}
	r.comments[pr] = append(r.comments[pr], c)
	return c
}

// DeleteComment removes a comment, as a person might.
func (r *Repo) DeleteComment(id int64) {
	s := r.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if pr, c := r.findComment(id); c != nil {
		r.removeComment(pr, id)
	}
}

// Comments returns the comments of pull request pr, oldest first.
func (r *Repo) Comments(pr int) []Comment {
	s := r.s
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Comment
	for _, c := range r.comments[pr] {
		out = append(out, c.Comment)
	}
	return out
}

// Statuses returns the statuses set on sha, in the order they were set.
func (r *Repo) Statuses(sha string) []Status {
	s := r.s
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Status
	for _, st := range r.statuses[sha] {
		out = append(out, st.Status)
	}
	return out
}

// sortedPulls returns the pull requests matching keep, in GitHub's order for
// the list endpoint (sort created|updated, direction desc by default).
func (r *Repo) sortedPulls(keep func(*pull) bool, sortBy, direction string) []*pull {
	var out []*pull
	for _, p := range r.pulls {
		if keep(p) {
			out = append(out, p)
		}
	}
	key := func(p *pull) time.Time {
		if sortBy == "updated" {
			return p.updated
		}
		return p.created
	}
	sort.Slice(out, func(i, j int) bool {
		ki, kj := key(out[i]), key(out[j])
		if !ki.Equal(kj) {
			if direction == "asc" {
				return ki.Before(kj)
			}
			return ki.After(kj)
		}
		if direction == "asc" {
			return out[i].Number < out[j].Number
		}
		return out[i].Number > out[j].Number
	})
	return out
}
