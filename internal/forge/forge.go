// Package forge is fleet-agent's adapter to GitHub: commit statuses, the one
// plan comment per pull request edited in place, result and drift comments
// found again by hidden markers (in the comments its own identity wrote, and
// no others: see FindComment), the open pull requests of a branch, the pull
// requests that merged a commit, and the check of webhook signatures.
//
// It is the only package besides the binary that imports go-github, and its
// method signatures carry plain types so that the agent can declare its own
// interface over them. Every error is an *Error with a class and the moment a
// retry makes sense; nothing in here retries: the agent's outbox is the one
// retry authority. Secrets arrive as references and are resolved through a
// Resolver at the moment of use; resolved values are never kept, logged or put
// in an error.
package forge

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/go-github/v62/github"

	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

// Resolver turns a secret reference (secret://, vault://, env://) into its
// value. The forge calls it each time it needs the value and drops the value
// after use, so a rotated secret takes effect on the next request.
type Resolver interface {
	Resolve(ctx context.Context, ref string) (string, error)
}

// App is the GitHub App identity the forge authenticates as when no token is
// configured.
type App struct {
	// ID is the app's numeric id or its client id; it becomes the JWT issuer.
	ID string
	// InstallationID is the installation on the repository's owner.
	InstallationID int64
	// PrivateKey is a reference to the app's PEM private key (PKCS#1 or PKCS#8).
	PrivateKey string
}

// Config says which repository to talk to and how.
type Config struct {
	// Repository is owner/name.
	Repository string
	// APIURL is the REST API root: https://api.github.com/ (the default) or,
	// for GitHub Enterprise Server, https://HOST/api/v3/. It is used as given.
	APIURL string
	// Token is a reference to a token; exclusive with App.
	Token string
	// App authenticates as a GitHub App installation; exclusive with Token.
	App *App
	// WebhookSecret is a reference to the webhook secret; optional.
	WebhookSecret string
	// StatusContext prefixes the status contexts and the comment markers
	// (default "fleet-agent"), so two agents on one repository stay apart.
	// GitHub compares status contexts without case, and so does the forge.
	StatusContext string
	// Branch is the agent's branch, the only one applied (default "main"):
	// MergedPullRequest finds only pull requests merged into it.
	Branch string
	// Resolver resolves Token, App.PrivateKey and WebhookSecret.
	Resolver Resolver
	// Clock stamps responses for retry times and ages installation tokens.
	Clock clock.Clock
	// Transport is the HTTP transport underneath (default
	// http.DefaultTransport); tests and proxies set it.
	Transport http.RoundTripper
	// Log receives debug lines about requests; never a secret. Default: none.
	Log *slog.Logger
}

// DefaultAPIURL is github.com's REST API root.
const DefaultAPIURL = "https://api.github.com/"

// DefaultStatusContext is the prefix of status contexts and markers.
const DefaultStatusContext = "fleet-agent"

// DefaultBranch is the branch of Config.Branch when none is given, as the
// agent's git.branch defaults to it.
const DefaultBranch = "main"

// APIVersion is the REST API version every request names
// (X-GitHub-Api-Version): the answers the forge reads are those of this
// version, whatever GitHub makes its default later.
const APIVersion = "2022-11-28"

// GitHub talks to one repository. It is safe for concurrent use.
type GitHub struct {
	owner, repo string
	prefix      string
	cfg         Config
	clock       clock.Clock
	log         *slog.Logger
	client      *github.Client
	app         *appAuth

	// blocked remembers a rate limit GitHub announced, so that no request is
	// sent before it lifts: requests made while limited count against the
	// integration and can get it banned.
	mu      sync.Mutex
	blocked *Error
	rate    Rate

	pulls    etagCache
	statuses statusMemory
	checks   checkMemory
	comments commentMemory
	upsertMu sync.Mutex
	ident    identity
}

// Rate is the primary rate limit as GitHub last reported it.
type Rate struct {
	Limit, Remaining, Used int
	Reset                  time.Time
	// Seen is false until a response carried the headers.
	Seen bool
}

// New checks the configuration and builds the client. It makes no request and
// resolves no secret.
func New(cfg Config) (*GitHub, error) {
	owner, repo, ok := strings.Cut(cfg.Repository, "/")
	if !ok || owner == "" || repo == "" || strings.Contains(repo, "/") {
		return nil, refusal.New(refusal.InvalidInput, "github.repository must be owner/name, got %q", cfg.Repository)
	}
	if (cfg.Token == "") == (cfg.App == nil) {
		return nil, refusal.New(refusal.InvalidInput, "github: set exactly one of token and app")
	}
	if cfg.App != nil && (cfg.App.ID == "" || cfg.App.InstallationID <= 0 || cfg.App.PrivateKey == "") {
		return nil, refusal.New(refusal.InvalidInput, "github.app needs id, installationId and privateKey")
	}
	if cfg.Resolver == nil {
		return nil, refusal.New(refusal.Internal, "github: no secret resolver")
	}
	if cfg.StatusContext == "" {
		cfg.StatusContext = DefaultStatusContext
	}
	if strings.ContainsAny(cfg.StatusContext, " \t\r\n<>") || strings.Contains(cfg.StatusContext, "--") {
		return nil, refusal.New(refusal.InvalidInput, "github.statusContext %q may not hold spaces, '<', '>' or '--' (it goes into an HTML comment)", cfg.StatusContext)
	}
	if cfg.Branch == "" {
		cfg.Branch = DefaultBranch
	}
	if cfg.APIURL == "" {
		cfg.APIURL = DefaultAPIURL
	}
	base, err := url.Parse(cfg.APIURL)
	if err != nil || (base.Scheme != "https" && base.Scheme != "http") || base.Host == "" {
		return nil, refusal.New(refusal.InvalidInput, "github.apiURL must be an http(s) URL such as %s or https://HOST/api/v3/", DefaultAPIURL)
	}
	if !strings.HasSuffix(base.Path, "/") {
		base.Path += "/"
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Transport == nil {
		cfg.Transport = http.DefaultTransport
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	g := &GitHub{owner: owner, repo: repo, prefix: cfg.StatusContext, cfg: cfg, clock: cfg.Clock, log: log}
	g.statuses.init()
	g.comments.init()
	g.pulls.init()
	g.ident.init()
	if cfg.App != nil {
		g.app = newAppAuth(g, base)
	}
	g.client = newClient(base, &authTransport{g: g, base: cfg.Transport})
	return g, nil
}

func newClient(base *url.URL, rt http.RoundTripper) *github.Client {
	c := github.NewClient(&http.Client{Transport: rt})
	u := *base
	c.BaseURL = &u
	c.UploadURL = &u
	c.UserAgent = "fleet-agent"
	return c
}

// Rate reports the primary rate limit GitHub last announced, for metrics.
func (g *GitHub) Rate() Rate {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.rate
}

// Headers that go-github would act upon by itself: with them it refuses
// requests until a reset it computes from the wall clock. The transport moves
// them aside so that only this package (on the injected clock) decides.
const (
	hdrRetryAfter = "Retry-After"
	hdrReset      = "X-Ratelimit-Reset"
	hdrRemaining  = "X-Ratelimit-Remaining"
	hdrLimit      = "X-Ratelimit-Limit"
	hdrUsed       = "X-Ratelimit-Used"
	movedPrefix   = "X-Fleet-Agent-"
)

// hdrAPIVersion names the REST API version of a request.
const hdrAPIVersion = "X-GitHub-Api-Version"

// authTransport sets the credential on each request, resolving it at that
// moment, and moves the rate-limit headers where go-github will not see them.
type authTransport struct {
	g    *GitHub
	base http.RoundTripper
}

func (t *authTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	// A token pinned by the caller (the identity lookup) or the one in
	// use now.
	cred, pinned := req.Context().Value(credKey{}).(string)
	var err error
	if !pinned {
		cred, err = t.g.credential(req.Context())
	}
	if err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	r := req.Clone(req.Context())
	r.Header.Set("Authorization", "Bearer "+cred)
	r.Header.Set(hdrAPIVersion, APIVersion)
	resp, err := t.base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	t.g.observe(resp)
	hideLimitHeaders(resp.Header)
	if resp.StatusCode == http.StatusUnauthorized && t.g.app != nil {
		// A revoked installation token answers 401 long before its
		// expiry; the next request mints a new one.
		t.g.app.forget()
	}
	return resp, nil
}

func hideLimitHeaders(h http.Header) {
	for _, k := range []string{hdrRetryAfter, hdrReset} {
		if v := h.Get(k); v != "" {
			h.Set(movedPrefix+k, v)
			h.Del(k)
		}
	}
}

func movedHeader(h http.Header, k string) string {
	if v := h.Get(movedPrefix + k); v != "" {
		return v
	}
	return h.Get(k)
}

// observe records the rate-limit headers of a response.
func (g *GitHub) observe(resp *http.Response) {
	h := resp.Header
	if h.Get(hdrRemaining) == "" {
		return
	}
	r := Rate{Seen: true}
	r.Limit, _ = strconv.Atoi(h.Get(hdrLimit))
	r.Remaining, _ = strconv.Atoi(h.Get(hdrRemaining))
	r.Used, _ = strconv.Atoi(h.Get(hdrUsed))
	if s, err := strconv.ParseInt(h.Get(hdrReset), 10, 64); err == nil {
		r.Reset = time.Unix(s, 0)
	}
	g.mu.Lock()
	g.rate = r
	// The answer that spent the last of the budget is a success with
	// Remaining 0: everything after it would be refused until the reset,
	// and sending anyway counts against the integration.
	res := h.Get("X-Ratelimit-Resource")
	if r.Remaining == 0 && r.Limit > 0 && (res == "" || res == "core") && r.Reset.After(g.clock.Now()) {
		g.blocked = &Error{Class: ClassRateLimited, Status: resp.StatusCode, Until: r.Reset,
			Message: "the primary rate limit is spent (X-RateLimit-Remaining: 0)"}
	}
	g.mu.Unlock()
}

// credential returns the token for the next request.
func (g *GitHub) credential(ctx context.Context) (string, error) {
	if g.app != nil {
		return g.app.token(ctx)
	}
	return g.resolve(ctx, g.cfg.Token, "github.token")
}

// resolve resolves a reference; the error names the reference and the field,
// never a value.
func (g *GitHub) resolve(ctx context.Context, ref, field string) (string, error) {
	v, err := g.cfg.Resolver.Resolve(ctx, ref)
	if err != nil {
		return "", &Error{Class: ClassCredentials, Op: "resolve " + field, Message: fmt.Sprintf("cannot resolve %s (%s)", field, ref), Err: err}
	}
	v = strings.TrimSpace(v)
	if v == "" {
		return "", &Error{Class: ClassCredentials, Op: "resolve " + field, Message: fmt.Sprintf("%s (%s) resolves to an empty value", field, ref)}
	}
	return v, nil
}

// call runs one request through go-github: it refuses to send while a rate
// limit GitHub announced still holds, and classifies what comes back. A 304
// is not an error.
func (g *GitHub) call(ctx context.Context, op string, do func(context.Context) (*github.Response, error)) (*github.Response, error) {
	now := g.clock.Now()
	g.mu.Lock()
	b := g.blocked
	if b != nil && !now.Before(b.Until) {
		g.blocked, b = nil, nil
	}
	g.mu.Unlock()
	if b != nil {
		e := *b
		e.Op = op
		e.Message = "not sent: " + b.Message
		return nil, &e
	}
	resp, err := do(ctx)
	if err == nil {
		g.log.Debug("github request", "op", op, "status", resp.StatusCode)
		return resp, nil
	}
	if resp != nil && resp.Response != nil && resp.StatusCode == http.StatusNotModified {
		g.log.Debug("github request", "op", op, "status", resp.StatusCode)
		return resp, nil
	}
	e := g.classify(ctx, op, resp, err)
	g.log.Debug("github request failed", "op", op, "class", string(e.Class), "status", e.Status)
	if e.Class == ClassRateLimited || e.Class == ClassSecondaryRateLimited {
		g.mu.Lock()
		g.blocked = e
		g.mu.Unlock()
	}
	return resp, e
}
