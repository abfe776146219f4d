// Package gkeemu is an HTTP emulator of Google Kubernetes Engine for tests:
// the container/v1 routes the adapter uses (clusters, node pools,
// operations, server config), the parts of compute/v1 that node pools stand
// on (regions, machine types with their accelerators, accelerator types,
// the managed instance groups that hold a node pool's nodes), Google's
// OAuth2 token endpoint for service account keys and the metadata server's
// token route, and kube-apiserver's webhook token authentication
// (TokenReview) for the tokens it minted.
//
// It behaves like the service where the adapter can tell: the SDK's exact
// routes and wire format (checked against the discovery documents by the
// wirecheck subpackage), asynchronous operations that advance per
// observation or on an injected clock, one mutating operation per cluster at
// a time, Google's JSON errors with their codes, reasons and statuses,
// name and size limits, regional quotas, stockouts, throttling and answers
// dropped after acting. It records every exchange so tests can count the
// calls a step made, and shows its own truth (Snapshot) so they can say
// what exists without asking the API under test. Fronting a real
// kube-apiserver (Options.Kube), its TokenReview route (or TokenReviewer,
// for a webhook that posts elsewhere) is what checks the tokens it minted.
//
// Where no primary source says what GKE does, the emulator guesses, says so
// in a comment at that spot, and where the guess matters offers the other
// answer in Options.Guesses.
package gkeemu

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"
)

// Emulator is one emulated Google Cloud. It is safe for concurrent use.
type Emulator struct {
	opts  Options
	srv   *httptest.Server
	caPEM []byte

	mu         sync.Mutex
	seq        int
	accounts   map[string]*serviceAccount // by email
	tokens     map[string]*issuedToken    // by token hash
	clusters   map[string]*cluster        // by clusterKey
	ops        map[string]*operation      // by operation name
	opOrder    []string
	migs       map[string]*mig    // by migKey
	zoneOps    map[string]*zoneOp // compute zone operations, by migKey-style project/zone/name
	faults     []Fault
	quotas     map[string]map[string]float64 // region -> metric -> limit
	stockouts  map[string]bool               // zone + "/" + machine type
	exchanges  []Exchange
	metadataSA string
	keysIssued int
}

// New makes an emulator; Start serves it.
func New(opts Options) (*Emulator, error) {
	opts = opts.withDefaults()
	e := &Emulator{
		opts:      opts,
		accounts:  map[string]*serviceAccount{},
		tokens:    map[string]*issuedToken{},
		clusters:  map[string]*cluster{},
		ops:       map[string]*operation{},
		migs:      map[string]*mig{},
		zoneOps:   map[string]*zoneOp{},
		quotas:    map[string]map[string]float64{},
		stockouts: map[string]bool{},
	}
	if err := e.validate(); err != nil {
		return nil, fmt.Errorf("gkeemu: %w", err)
	}
	e.caPEM = opts.Kube.CAPEM
	if e.caPEM == nil {
		ca, err := selfSignedCA(opts.Clock.Now())
		if err != nil {
			return nil, fmt.Errorf("gkeemu: %w", err)
		}
		e.caPEM = ca
	}
	return e, nil
}

// Start makes an emulator and serves it on a loopback port until Close.
func Start(opts Options) (*Emulator, error) {
	e, err := New(opts)
	if err != nil {
		return nil, err
	}
	e.srv = httptest.NewServer(e)
	return e, nil
}

// URL is the emulator's base URL (no trailing slash). Point container/v1 at
// URL()+"/" and compute/v1 at URL()+"/compute/v1/".
func (e *Emulator) URL() string {
	if e.srv == nil {
		return ""
	}
	return e.srv.URL
}

// ContainerEndpoint is what option.WithEndpoint takes for container/v1.
func (e *Emulator) ContainerEndpoint() string { return e.URL() + "/" }

// ComputeEndpoint is what option.WithEndpoint takes for compute/v1.
func (e *Emulator) ComputeEndpoint() string { return e.URL() + "/compute/v1/" }

// TokenURI is the token endpoint service account keys name.
func (e *Emulator) TokenURI() string { return e.URL() + "/token" }

// TokenReviewURL is where a kube-apiserver's webhook token authentication
// posts TokenReviews.
func (e *Emulator) TokenReviewURL() string {
	return e.URL() + tokenReviewPath
}

// TokenReviewer is the TokenReview route as a handler that answers at any
// path, for a kube-apiserver's webhook that posts somewhere else (kubeplane's
// SetTokenReviewer): each review is served, and recorded, as if posted to
// TokenReviewURL.
func (e *Emulator) TokenReviewer() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r2 := r.Clone(r.Context())
		r2.URL.Path, r2.URL.RawPath = tokenReviewPath, ""
		e.ServeHTTP(w, r2)
	})
}

const tokenReviewPath = "/apis/authentication.k8s.io/v1/tokenreviews"

// MetadataHost is the host:port to put in GCE_METADATA_HOST.
func (e *Emulator) MetadataHost() string { return strings.TrimPrefix(e.URL(), "http://") }

// CAPEM is the PEM of the CA every cluster hands out.
func (e *Emulator) CAPEM() []byte { return bytes.Clone(e.caPEM) }

// Close stops serving.
func (e *Emulator) Close() {
	if e.srv != nil {
		e.srv.Close()
	}
}

// Options returns the options the emulator runs with.
func (e *Emulator) Options() Options { return e.opts }

func (e *Emulator) now() time.Time { return e.opts.Clock.Now().UTC() }

func (e *Emulator) validate() error {
	zones := map[string]bool{}
	for _, r := range e.opts.Regions {
		for _, z := range r.Zones {
			if !strings.HasPrefix(z, r.Name+"-") {
				return fmt.Errorf("zone %q is not named after its region %q", z, r.Name)
			}
			zones[z] = true
		}
	}
	for _, m := range e.opts.MachineTypes {
		for _, z := range m.Zones {
			if !zones[z] {
				return fmt.Errorf("machine type %s: unknown zone %q", m.Name, z)
			}
		}
	}
	found := false
	for _, v := range e.opts.Versions {
		found = found || v == e.opts.DefaultVersion
	}
	if !found {
		return fmt.Errorf("defaultVersion %q is not one of versions", e.opts.DefaultVersion)
	}
	return nil
}

// selfSignedCA makes the CA certificate clusters hand out when no real API
// server is fronted. Nothing is signed with it; it only has to parse.
func selfSignedCA(now time.Time) ([]byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "gkeemu cluster CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// --- recording ---

// Exchange is one request and the answer the emulator gave.
type Exchange struct {
	Method string
	// Path is the request's escaped path; Query its raw query.
	Path  string
	Query string
	// MethodID is the discovery method the request reached
	// ("container.projects.locations.clusters.create"), or a name of the
	// emulator's own for the routes outside the discovery documents
	// ("oauth2.token", "metadata.token", "tokenreviews.create"); "" for a
	// route it does not serve.
	MethodID    string
	RequestBody []byte
	Status      int
	Header      http.Header
	Body        []byte
	// Dropped: the emulator acted, then closed the connection instead of
	// answering (Status is 0).
	Dropped bool
	At      time.Time
}

// Exchanges returns every exchange so far, in order.
func (e *Emulator) Exchanges() []Exchange {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]Exchange, len(e.exchanges))
	copy(out, e.exchanges)
	return out
}

// Count reports how many requests reached a method id ("" counts every
// request the discovery documents describe, i.e. every API call, leaving
// token fetches and TokenReviews out).
func (e *Emulator) Count(methodID string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, x := range e.exchanges {
		if methodID == "" && isAPIMethod(x.MethodID) || methodID != "" && x.MethodID == methodID {
			n++
		}
	}
	return n
}

// Mark returns how many exchanges there are, for CountSince.
func (e *Emulator) Mark() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.exchanges)
}

// CountSince counts like Count over the exchanges after a Mark.
func (e *Emulator) CountSince(mark int, methodID string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, x := range e.exchanges[min(mark, len(e.exchanges)):] {
		if methodID == "" && isAPIMethod(x.MethodID) || methodID != "" && x.MethodID == methodID {
			n++
		}
	}
	return n
}

func isAPIMethod(id string) bool {
	return strings.HasPrefix(id, "container.") || strings.HasPrefix(id, "compute.")
}

// recorder captures what a handler writes.
type recorder struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (r *recorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	r.body.Write(p)
	return r.ResponseWriter.Write(p)
}

// ServeHTTP serves every route.
func (e *Emulator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	x := Exchange{Method: r.Method, Path: r.URL.EscapedPath(), Query: r.URL.RawQuery, RequestBody: body, At: e.now()}
	rec := &recorder{ResponseWriter: w}
	dropped := e.route(rec, r, body, &x)
	x.Status, x.Body, x.Header, x.Dropped = rec.status, rec.body.Bytes(), w.Header().Clone(), dropped
	if dropped {
		x.Status, x.Body = 0, nil
	}
	e.mu.Lock()
	e.exchanges = append(e.exchanges, x)
	e.mu.Unlock()
	if dropped {
		// Recorded first, so that a caller's next request is never seen
		// before the one it lost.
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
				return
			}
		}
		panic(http.ErrAbortHandler)
	}
}

// route answers one request and reports whether it dropped the answer.
func (e *Emulator) route(w http.ResponseWriter, r *http.Request, body []byte, x *Exchange) bool {
	p := r.URL.EscapedPath()
	switch {
	case p == "/token" && r.Method == http.MethodPost:
		x.MethodID = "oauth2.token"
		e.serveToken(w, r, body)
		return false
	case strings.HasPrefix(p, "/computeMetadata/v1/"):
		x.MethodID = "metadata.token"
		e.serveMetadata(w, r)
		return false
	case p == tokenReviewPath && r.Method == http.MethodPost:
		x.MethodID = "tokenreviews.create"
		e.serveTokenReview(w, body)
		return false
	case strings.HasPrefix(p, "/v1/"):
		return e.serveAPI(w, r, body, x, containerRoute)
	case strings.HasPrefix(p, "/compute/v1/"):
		return e.serveAPI(w, r, body, x, computeRoute)
	case strings.HasPrefix(p, serviceUsagePrefix):
		return e.serveAPI(w, r, body, x, serviceUsageRoute)
	}
	writeError(w, http.StatusNotFound, "NOT_FOUND", "notFound", "The requested URL "+p+" was not found on this server.")
	return false
}

// call is one API request being served: its route, the project it names
// and the identity that made it.
type call struct {
	r        *http.Request
	body     []byte
	id       string   // discovery method id
	segs     []string // path segments after the service's base
	verb     string   // the ":verb" of the last segment, if any
	project  *Project
	identity string
}

type router func(e *Emulator, c *call) (handler func(e *Emulator, w http.ResponseWriter, c *call), ok bool)

// serveAPI authenticates an API call, applies faults, and hands it to its
// handler. A fault that drops the answer lets the handler act, then closes
// the connection.
func (e *Emulator) serveAPI(w http.ResponseWriter, r *http.Request, body []byte, x *Exchange, route router) bool {
	c := &call{r: r, body: body}
	base := "/v1/"
	switch {
	case strings.HasPrefix(r.URL.EscapedPath(), "/compute/v1/"):
		base = "/compute/v1/"
	case strings.HasPrefix(r.URL.EscapedPath(), serviceUsagePrefix):
		base = serviceUsagePrefix
	}
	for _, s := range strings.Split(strings.TrimPrefix(r.URL.EscapedPath(), base), "/") {
		u, err := unescape(s)
		if err != nil {
			writeError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "badRequest", "Invalid path segment "+s+".")
			return false
		}
		c.segs = append(c.segs, u)
	}
	if n := len(c.segs); n > 0 {
		if i := strings.LastIndexByte(c.segs[n-1], ':'); i >= 0 {
			c.segs[n-1], c.verb = c.segs[n-1][:i], c.segs[n-1][i+1:]
		}
	}
	h, ok := route(e, c)
	x.MethodID = c.id
	if !ok {
		writeError(w, http.StatusNotFound, "NOT_FOUND", "notFound", "Method not found.")
		return false
	}
	if alt := r.URL.Query().Get("alt"); alt != "" && alt != "json" {
		// alt defaults to json in the discovery document, and googleapis
		// for Node sends none; the Go SDK sends alt=json. Other
		// representations (proto, media) are not served.
		writeError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "badRequest", "Only alt=json is served.")
		return false
	}
	who, status := e.authenticate(r)
	if status != 0 {
		writeAuthError(w, status)
		return false
	}
	c.identity = who
	if len(c.segs) >= 2 && c.segs[0] == "projects" {
		p, ok := e.projectFor(c.segs[1], who)
		if !ok {
			perm := strings.TrimSuffix(strings.TrimPrefix(c.id, "container.projects.locations."), "s")
			writeError(w, http.StatusForbidden, "PERMISSION_DENIED", "forbidden",
				fmt.Sprintf("Permission '%s' denied on resource 'projects/%s' (or it may not exist).", perm, c.segs[1]))
			return false
		}
		c.project = p
	}
	f := e.takeFault(c.id)
	if f != nil && !f.Drop {
		f.write(w)
		return false
	}
	if f != nil {
		// Act, answer into nothing, and close the connection: the caller
		// never learns what happened.
		h(e, &discard{header: http.Header{}}, c)
		return true
	}
	h(e, w, c)
	return false
}

// discard is the writer of an answer that will never be sent.
type discard struct{ header http.Header }

func (d *discard) Header() http.Header         { return d.header }
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }
func (d *discard) WriteHeader(int)             {}

// unescape undoes one path segment's escaping.
func unescape(s string) (string, error) {
	if !strings.Contains(s, "%") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", fmt.Errorf("bad escape")
		}
		var v byte
		if _, err := fmt.Sscanf(s[i+1:i+3], "%02x", &v); err != nil {
			return "", err
		}
		b.WriteByte(v)
		i += 2
	}
	return b.String(), nil
}

// projectFor finds a project by id or number that the identity reaches.
func (e *Emulator) projectFor(idOrNumber, identity string) (*Project, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	sa := e.accounts[identity]
	for i := range e.opts.Projects {
		p := &e.opts.Projects[i]
		if p.ID != idOrNumber && fmt.Sprint(p.Number) != idOrNumber {
			continue
		}
		if sa == nil {
			return nil, false
		}
		if len(sa.projects) == 0 {
			return p, true
		}
		for _, id := range sa.projects {
			if id == p.ID {
				return p, true
			}
		}
		return nil, false
	}
	return nil, false
}

// --- errors ---

// googleError is the body of every error the APIs answer.
type googleError struct {
	Error googleErrorBody `json:"error"`
}

type googleErrorBody struct {
	Code    int               `json:"code"`
	Message string            `json:"message"`
	Errors  []googleErrorItem `json:"errors"`
	Status  string            `json:"status,omitempty"`
	Details []map[string]any  `json:"details,omitempty"`
}

type googleErrorItem struct {
	Message      string `json:"message"`
	Domain       string `json:"domain"`
	Reason       string `json:"reason"`
	Location     string `json:"location,omitempty"`
	LocationType string `json:"locationType,omitempty"`
}

// apiError is an error a handler answers with.
type apiError struct {
	code    int
	status  string
	reason  string
	message string
	details []map[string]any
	header  http.Header
}

func (a *apiError) Error() string { return a.message }

func errf(code int, status, reason, format string, args ...any) *apiError {
	return &apiError{code: code, status: status, reason: reason, message: fmt.Sprintf(format, args...)}
}

func notFound(name string) *apiError {
	return errf(http.StatusNotFound, "NOT_FOUND", "notFound", "Not found: %s.", name)
}

func alreadyExists(name string) *apiError {
	return errf(http.StatusConflict, "ALREADY_EXISTS", "alreadyExists", "Already exists: %s.", name)
}

func badRequest(format string, args ...any) *apiError {
	return errf(http.StatusBadRequest, "INVALID_ARGUMENT", "badRequest", format, args...)
}

func failedPrecondition(format string, args ...any) *apiError {
	return errf(http.StatusBadRequest, "FAILED_PRECONDITION", "failedPrecondition", format, args...)
}

func writeError(w http.ResponseWriter, code int, status, reason, message string) {
	writeAPIError(w, &apiError{code: code, status: status, reason: reason, message: message})
}

func writeAPIError(w http.ResponseWriter, a *apiError) {
	for k, v := range a.header {
		w.Header()[k] = v
	}
	body := googleError{Error: googleErrorBody{
		Code: a.code, Message: a.message, Status: a.status, Details: a.details,
		Errors: []googleErrorItem{{Message: a.message, Domain: "global", Reason: a.reason}},
	}}
	writeJSON(w, a.code, body)
}

// writeAuthError answers a missing or dead token (401) as Google does.
func writeAuthError(w http.ResponseWriter, status int) {
	msg := "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project."
	w.Header().Set("WWW-Authenticate", `Bearer realm="https://accounts.google.com/"`)
	writeJSON(w, status, googleError{Error: googleErrorBody{
		Code: status, Message: msg, Status: "UNAUTHENTICATED",
		Errors: []googleErrorItem{{Message: "Invalid Credentials", Domain: "global", Reason: "authError", Location: "Authorization", LocationType: "header"}},
	}})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(`{"error":{"code":500,"message":"emulator could not encode its answer","errors":[{"message":"encode","domain":"global","reason":"backendError"}],"status":"INTERNAL"}}`)
	}
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}
