package doemu

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/clock"
)

// Routes are the DigitalOcean API routes the emulator serves, as the OpenAPI
// description spells them. The wirecheck package holds the description of
// exactly these.
var Routes = []string{
	"GET /v2/account",
	"GET /v2/sizes",
	"GET /v2/kubernetes/options",
	"GET /v2/kubernetes/clusters",
	"POST /v2/kubernetes/clusters",
	"GET /v2/kubernetes/clusters/{cluster_id}",
	"PUT /v2/kubernetes/clusters/{cluster_id}",
	"DELETE /v2/kubernetes/clusters/{cluster_id}",
	"GET /v2/kubernetes/clusters/{cluster_id}/credentials",
	"GET /v2/kubernetes/clusters/{cluster_id}/kubeconfig",
	"GET /v2/kubernetes/clusters/{cluster_id}/upgrades",
	"POST /v2/kubernetes/clusters/{cluster_id}/upgrade",
	"GET /v2/kubernetes/clusters/{cluster_id}/node_pools",
	"POST /v2/kubernetes/clusters/{cluster_id}/node_pools",
	"GET /v2/kubernetes/clusters/{cluster_id}/node_pools/{node_pool_id}",
	"PUT /v2/kubernetes/clusters/{cluster_id}/node_pools/{node_pool_id}",
	"DELETE /v2/kubernetes/clusters/{cluster_id}/node_pools/{node_pool_id}",
	"DELETE /v2/kubernetes/clusters/{cluster_id}/node_pools/{node_pool_id}/nodes/{node_id}",
}

// TokenReviewPath is where kube-apiserver's webhook token authentication
// posts its TokenReview (the `server` of its webhook kubeconfig is the
// emulator's URL plus this path).
const TokenReviewPath = "/kube/tokenreview"

// Account is one API token and the team it acts for. Tokens of one team see
// the same clusters, as two tokens of one DigitalOcean team do.
type Account struct {
	Token string
	Team  string
	Email string
	// DropletLimit bounds the droplets (nodes) the team may run; 0 is 25.
	DropletLimit int
	// Previews lets the team's node pools ask for the Spot preview.
	Previews bool
	// ReadOnly tokens are refused every write with 403.
	ReadOnly bool
	// Locked accounts verify with status "locked".
	Locked bool
}

// Steps are how many observations (reads of the object, or Advance) an
// asynchronous change takes; with Options.StepEvery, each interval of the
// injected clock counts as one too.
type Steps struct {
	Cluster int // provisioning -> running
	Node    int // a node's provisioning -> running
	Upgrade int // upgrading -> running on the new version
	Delete  int // a deleted cluster stays visible this long, then 404
	Drain   int // a node leaving (scale down, pool deleted) drains this long
}

// KubeAPI is a real API server the emulator's clusters stand for.
type KubeAPI struct {
	// URL is handed out as every cluster's endpoint and credential server.
	URL string
	// CAPEM is the PEM of the CA that signed its serving certificate.
	CAPEM []byte
}

// Options configure an emulator. The zero value of each field has a default
// (see New).
type Options struct {
	Clock     clock.Clock
	Steps     Steps
	StepEvery time.Duration
	Accounts  []Account
	Regions   []Region
	Sizes     []Size
	Versions  []Version
	Kube      *KubeAPI
	// DeletingState is the state a deleted cluster shows until it is gone:
	// "deleted" (the default: the only one godo v1.237.0 parses) or
	// "deleting" (listed by the OpenAPI description, refused by godo).
	DeletingState string
	// AllowDuplicateNames lets a team have two clusters (or a cluster two
	// node pools) of one name.
	AllowDuplicateNames bool
	// MaxPerPage caps per_page (the service's cap is 200).
	MaxPerPage int
	// RatePerHour and RatePerMinute are the per-token limits (5000 and 250
	// by default, DigitalOcean's documented limits); negative disables.
	RatePerHour, RatePerMinute int
	// NoRetryAfter leaves Retry-After out of 429 answers, leaving only the
	// RateLimit-* headers.
	NoRetryAfter bool
	// IgnoreSpot answers as a service without the Spot preview's field
	// would: it takes `spot` silently and makes an on-demand pool.
	IgnoreSpot bool
}

// DefaultSteps are the steps of a zero Options.Steps.
var DefaultSteps = Steps{Cluster: 3, Node: 2, Upgrade: 2, Delete: 2, Drain: 1}

// Emulator is the DigitalOcean API emulator; it is an http.Handler.
type Emulator struct {
	opts Options
	mux  *http.ServeMux
	ca   []byte

	mu        sync.Mutex
	seq       int
	clusters  map[string]*cluster // by id
	order     []string            // cluster ids in creation order
	minted    map[string]*minted  // by hash of token
	faults    []*Fault
	stockouts map[string]bool // size@region
	rate      map[string][]time.Time
	exchanges []Exchange
}

// New makes an emulator.
func New(opts Options) *Emulator {
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.Steps == (Steps{}) {
		opts.Steps = DefaultSteps
	}
	if opts.Regions == nil {
		opts.Regions = DefaultRegions()
	}
	if opts.Sizes == nil {
		opts.Sizes = DefaultSizes()
	}
	if opts.Versions == nil {
		opts.Versions = DefaultVersions()
	}
	if opts.DeletingState == "" {
		opts.DeletingState = "deleted"
	}
	if opts.MaxPerPage <= 0 || opts.MaxPerPage > 200 {
		opts.MaxPerPage = 200
	}
	if opts.RatePerHour == 0 {
		opts.RatePerHour = 5000
	}
	if opts.RatePerMinute == 0 {
		opts.RatePerMinute = 250
	}
	e := &Emulator{
		opts:      opts,
		clusters:  map[string]*cluster{},
		minted:    map[string]*minted{},
		stockouts: map[string]bool{},
		rate:      map[string][]time.Time{},
	}
	if opts.Kube != nil {
		e.ca = opts.Kube.CAPEM
	} else {
		e.ca = newCA()
	}
	e.routes()
	return e
}

// Exchange is one request the emulator received and what it answered.
type Exchange struct {
	// Route is the pattern that served it ("GET /v2/kubernetes/clusters/{cluster_id}"),
	// or "" when none did (a 404 for an unknown path).
	Route      string
	Method     string
	Path       string
	RawQuery   string
	Header     http.Header
	Body       []byte
	Status     int
	RespHeader http.Header
	RespBody   []byte
	// Dropped: the emulator acted, then closed the connection unanswered.
	Dropped bool
}

// Exchanges returns every exchange so far, in order.
func (e *Emulator) Exchanges() []Exchange {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.exchanges)
}

// Mark returns a position in the exchanges for Since.
func (e *Emulator) Mark() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.exchanges)
}

// Since returns the routes of the exchanges after mark, in order: what a
// step of the adapter asked.
func (e *Emulator) Since(mark int) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, x := range e.exchanges[mark:] {
		r := x.Route
		if r == "" {
			r = x.Method + " " + x.Path
		}
		out = append(out, r)
	}
	return out
}

// Count returns how many exchanges a route served.
func (e *Emulator) Count(route string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, x := range e.exchanges {
		if x.Route == route {
			n++
		}
	}
	return n
}

// Fault changes the answer to the next requests of a route.
type Fault struct {
	// Route is a pattern of Routes; "" is any route.
	Route string
	// Times is how many requests it applies to; 0 is 1.
	Times int
	// Status, when set, answers with this status and an error body instead
	// of acting (ID and Message default to the service's for the status).
	Status  int
	ID      string
	Message string
	// RetryAfter is sent as Retry-After with a 429.
	RetryAfter time.Duration
	// Drop makes the emulator act and then close the connection without an
	// answer: the create that happened although the caller never heard.
	Drop bool
}

// Inject arms a fault.
func (e *Emulator) Inject(f Fault) {
	if f.Times == 0 {
		f.Times = 1
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.faults = append(e.faults, &f)
}

// takeFault returns the first armed fault for route. Called with mu held.
func (e *Emulator) takeFault(route string) *Fault {
	for i, f := range e.faults {
		if f.Route == "" || f.Route == route {
			c := *f
			f.Times--
			if f.Times <= 0 {
				e.faults = slices.Delete(e.faults, i, i+1)
			}
			return &c
		}
	}
	return nil
}

// Stockout makes a size unavailable (or available again) in a region: node
// pools of it are refused there, as when DigitalOcean has no capacity left.
func (e *Emulator) Stockout(size, region string, out bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.stockouts[size+"@"+region] = out
}

// SetClusterState puts a cluster in a state DigitalOcean reports by itself
// when something outside the API goes wrong, with the status message the
// cluster then shows: "degraded" (the control plane answers and node pool
// changes are still taken, but part of the cluster does not work), "error"
// (DigitalOcean could not bring the cluster up, or keep it), or "running"
// to end the trouble. A create or upgrade in progress ends there. A cluster
// being deleted, or an unknown one, is an error.
//
// Guess: what the service still takes of a cluster in error is not
// documented; the emulator takes a delete and a PUT of its name, tags and
// device plugins, and refuses node pool changes and upgrades as busy (409),
// as it does while the cluster provisions.
func (e *Emulator) SetClusterState(id, state, message string) error {
	if state != "degraded" && state != "error" && state != "running" {
		return fmt.Errorf("doemu: SetClusterState takes degraded, error or running, not %q", state)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.clusters[id]
	if c == nil || !e.settle(c) {
		return fmt.Errorf("doemu: no cluster %s", id)
	}
	if c.state == e.opts.DeletingState {
		return fmt.Errorf("doemu: cluster %s is being deleted", id)
	}
	c.state, c.message, c.op, c.target = state, message, nil, ""
	c.updated = e.opts.Clock.Now()
	return nil
}

// Advance counts one observation of every operation in progress.
func (e *Emulator) Advance() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, id := range slices.Clone(e.order) {
		if c := e.clusters[id]; c != nil {
			c.observe()
			e.settle(c)
		}
	}
}

func (e *Emulator) account(r *http.Request) (*Account, bool) {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return nil, false
	}
	for i := range e.opts.Accounts {
		if e.opts.Accounts[i].Token == tok {
			return &e.opts.Accounts[i], true
		}
	}
	return nil, false
}

// recorder holds an answer until the emulator decides to send or drop it.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) WriteHeader(s int) {
	if r.status == 0 {
		r.status = s
	}
}
func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(b)
}

// ServeHTTP records the exchange, checks the token and the rate limits,
// applies faults, and serves the route.
func (e *Emulator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	_, route := e.mux.Handler(r)
	rec := &recorder{header: http.Header{}}
	dropped := e.serve(rec, r, route)
	x := Exchange{
		Route: route, Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery,
		Header: r.Header.Clone(), Body: body,
		Status: rec.status, RespHeader: rec.header.Clone(), RespBody: slices.Clone(rec.body.Bytes()),
		Dropped: dropped,
	}
	e.mu.Lock()
	e.exchanges = append(e.exchanges, x)
	e.mu.Unlock()
	if dropped {
		drop(w)
		return
	}
	for k, v := range rec.header {
		w.Header()[k] = v
	}
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	w.WriteHeader(rec.status)
	_, _ = w.Write(rec.body.Bytes())
}

// drop closes the connection without an answer.
func drop(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic("doemu: dropping an answer needs an HTTP/1 server")
	}
	conn, _, err := hj.Hijack()
	if err == nil {
		_ = conn.Close()
	}
}

func (e *Emulator) serve(w *recorder, r *http.Request, route string) (dropped bool) {
	if route == "POST "+TokenReviewPath {
		e.tokenReview(w, r)
		return false
	}
	acct, ok := e.account(r)
	if !ok {
		// Refused tokens are counted against what they present, and get
		// the headers every answer of the description carries.
		e.mu.Lock()
		e.limit(w, r.Header.Get("Authorization"))
		e.mu.Unlock()
		writeError(w, http.StatusUnauthorized, "unauthorized", "Unable to authenticate you")
		return false
	}
	e.mu.Lock()
	limited, retry := e.limit(w, acct.Token)
	var f *Fault
	if !limited {
		f = e.takeFault(route)
	}
	e.mu.Unlock()
	switch {
	case limited:
		if !e.opts.NoRetryAfter {
			w.Header().Set("Retry-After", fmt.Sprint(int(retry.Seconds()+0.999)))
		}
		writeError(w, http.StatusTooManyRequests, "too_many_requests", "API rate limit exceeded.")
		return false
	case f != nil && f.Status != 0:
		if f.Status == http.StatusTooManyRequests && f.RetryAfter > 0 {
			w.Header().Set("Retry-After", fmt.Sprint(int(f.RetryAfter.Seconds())))
		}
		id, msg := f.ID, f.Message
		if id == "" {
			id, msg = statusID(f.Status)
		}
		writeError(w, f.Status, id, msg)
		return false
	}
	if route == "" {
		writeError(w, http.StatusNotFound, "not_found", "The resource you were accessing could not be found.")
		return false
	}
	if acct.ReadOnly && r.Method != http.MethodGet {
		writeError(w, http.StatusForbidden, "forbidden", "You do not have access for the attempted action.")
		return false
	}
	// The mux itself serves, so that the request carries its path values.
	e.mux.ServeHTTP(w, r.WithContext(withAccount(r.Context(), acct)))
	return f != nil && f.Drop
}

// limit applies the per-token rate limits on the emulator's clock and sets
// the RateLimit-* headers every answer carries. Called with mu held.
func (e *Emulator) limit(w *recorder, token string) (bool, time.Duration) {
	now := e.opts.Clock.Now()
	key := tokenKey(token)
	kept := e.rate[key][:0]
	for _, t := range e.rate[key] {
		if now.Sub(t) < time.Hour {
			kept = append(kept, t)
		}
	}
	var inMinute []time.Time
	for _, t := range kept {
		if now.Sub(t) < time.Minute {
			inMinute = append(inMinute, t)
		}
	}
	limited := false
	var retry time.Duration
	switch {
	case e.opts.RatePerHour > 0 && len(kept) >= e.opts.RatePerHour:
		limited, retry = true, kept[0].Add(time.Hour).Sub(now)
	case e.opts.RatePerMinute > 0 && len(inMinute) >= e.opts.RatePerMinute:
		limited, retry = true, inMinute[0].Add(time.Minute).Sub(now)
	}
	if !limited {
		kept = append(kept, now)
	}
	e.rate[key] = kept
	limit := e.opts.RatePerHour
	if limit < 0 {
		limit = 5000
	}
	reset := now.Add(time.Hour)
	if len(kept) > 0 {
		reset = kept[0].Add(time.Hour)
	}
	w.Header().Set("RateLimit-Limit", fmt.Sprint(limit))
	w.Header().Set("RateLimit-Remaining", fmt.Sprint(max(limit-len(kept), 0)))
	w.Header().Set("RateLimit-Reset", fmt.Sprint(reset.Unix()))
	return limited, retry
}

func tokenKey(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}
