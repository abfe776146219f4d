package join

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/config"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

// The listener's routes; nothing else is served.
const (
	JoinPath      = "/v1/join"
	HeartbeatPath = "/v1/heartbeat"
)

// DefaultHeartbeatEvery is how often a joined node daemon is told to beat:
// four beats fit in the 90 s a node stays connected, so one or two lost
// beats do not disconnect it.
const DefaultHeartbeatEvery = 20 * time.Second

// Metrics receives what the listener does; the agent passes its Prometheus
// metrics, tests a counter.
type Metrics interface {
	// Joined counts a node daemon that joined a pool.
	Joined(poolID string)
	// Refused counts a refused request by route ("join", "heartbeat", or
	// "other" for anything else) and code (Code*).
	Refused(route, code string)
}

type nopMetrics struct{}

func (nopMetrics) Joined(string)          {}
func (nopMetrics) Refused(string, string) {}

// ListenerOptions make a Listener.
type ListenerOptions struct {
	Store   *Store
	Log     zerolog.Logger
	Metrics Metrics
	// Clock runs the rate limits and the certificate reload checks.
	Clock clock.Clock
	// HeartbeatEvery is what joins answer (default DefaultHeartbeatEvery).
	HeartbeatEvery time.Duration
	// Limits are the defences (zero fields: DefaultLimits).
	Limits Limits
}

// Listener is the join listener: an http.Handler serving only
// POST /v1/join and POST /v1/heartbeat, and the server around it.
type Listener struct {
	store   *Store
	log     zerolog.Logger
	metrics Metrics
	clock   clock.Clock
	every   time.Duration
	limits  Limits
	limiter *limiter
	quiet   *sampler

	mu    sync.Mutex
	conns *connLimit // of the running server, for tests
}

// NewListener makes a listener over a Store.
func NewListener(o ListenerOptions) *Listener {
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Metrics == nil {
		o.Metrics = nopMetrics{}
	}
	if o.HeartbeatEvery <= 0 {
		o.HeartbeatEvery = DefaultHeartbeatEvery
	}
	lim := o.Limits.withDefaults()
	return &Listener{store: o.Store, log: o.Log, metrics: o.Metrics, clock: o.Clock, every: o.HeartbeatEvery,
		limits: lim, limiter: newLimiter(o.Clock, lim), quiet: newSampler(o.Clock, 10*time.Second)}
}

type joinRequest struct {
	PoolID   string `json:"poolId"`
	NodeName string `json:"nodeName"`
	// Token is the pool's Secret token; PodToken the daemon's projected
	// Pod token (tried first; the Secret token is the fallback).
	Token    string `json:"token,omitempty"`
	PodToken string `json:"podToken,omitempty"`
}

type joinAnswer struct {
	NodeKey        string `json:"nodeKey"`
	HeartbeatEvery string `json:"heartbeatEvery"`
}

type heartbeatRequest struct {
	PoolID   string `json:"poolId"`
	NodeName string `json:"nodeName"`
	// PodUID is the daemon's Pod's uid (the downward API's metadata.uid),
	// when it knows it: a key issued to another Pod is refused.
	PodUID string `json:"podUid,omitempty"`
}

// ServeHTTP answers one request. Every request spends an attempt of its
// source address first and gets it back if it succeeds. A source with no
// attempt left is refused 429 for anything but a request that succeeds: a
// node daemon's heartbeat with its valid key, or a join with a valid token,
// is served from a budget of its own (it spends nothing, as successes never
// do), so that a neighbour on the same address that spends the bucket
// cannot shut the node out; everything else is answered 429 without a word
// about why it failed.
func (l *Listener) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	src := sourceOf(r.RemoteAddr)
	route := "other"
	if r.Method == http.MethodPost {
		switch r.URL.Path {
		case JoinPath:
			route = "join"
		case HeartbeatPath:
			route = "heartbeat"
		}
	}
	// From here the handler accounts for the connection's attempts.
	markServed(r.Context())
	b, ok, wait := l.limiter.take(src)
	if !ok && route == "other" {
		l.rateLimited(w, route, src, wait)
		return
	}
	var pool, node string
	var err error
	switch route {
	case "join":
		pool, node, err = l.join(w, r)
	case "heartbeat":
		pool, node, err = l.heartbeat(w, r)
	default:
		err = refuse(CodeNotFound)
	}
	if err == nil {
		if ok {
			l.limiter.give(b)
		}
		return
	}
	if !ok {
		if _, isRefusal := errorsAsRefusal(err); isRefusal {
			l.rateLimited(w, route, src, wait)
			return
		}
	}
	ref, isRefusal := errorsAsRefusal(err)
	if !isRefusal {
		// The agent's own trouble (the state file): not the caller's
		// failure, so its attempt is given back.
		if ok {
			l.limiter.give(b)
		}
		l.log.Error().Err(err).Str("route", route).Str("source", src).Str("pool", clip(pool, 128)).Str("node", clip(node, 253)).
			Msg("join listener: cannot answer; the node daemon will retry")
		ref = refuse(CodeUnavailable)
		l.answerRefusal(w, ref)
		l.metrics.Refused(route, ref.Code)
		return
	}
	l.answerRefusal(w, ref)
	l.metrics.Refused(route, ref.Code)
	ev := l.log.Warn().Str("route", route).Str("source", src).Str("code", ref.Code).Int("status", ref.Status)
	if route == "other" {
		ev = ev.Str("method", clip(r.Method, 16)).Str("path", clip(r.URL.Path, 128))
	} else {
		ev = ev.Str("pool", clip(pool, 128)).Str("node", clip(node, 253))
	}
	ev.Msg("join listener refused a request: " + ref.Reason)
}

// rateLimited answers 429 to a source with no attempt left.
func (l *Listener) rateLimited(w http.ResponseWriter, route, src string, wait time.Duration) {
	w.Header().Set("Retry-After", strconv.Itoa(int((wait+time.Second-1)/time.Second)))
	// Closed after the answer (there is no keep-alive anyway): the source's
	// next connection is on probation while it has no attempt left.
	w.Header().Set("Connection", "close")
	l.answerRefusal(w, refuse(CodeRateLimited))
	l.metrics.Refused(route, CodeRateLimited)
	if let, held := l.quiet.let(CodeRateLimited + " " + src); let {
		l.log.Warn().Str("route", route).Str("source", src).Str("code", CodeRateLimited).Int("heldBack", held).
			Msg("join listener: a source address failed too often and is refused for now, but for requests that succeed (one line per address every 10 s)")
	}
}

// clip cuts what a caller sent before it is logged.
func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

func (l *Listener) decode(w http.ResponseWriter, r *http.Request, v any) error {
	body := http.MaxBytesReader(w, r.Body, l.limits.MaxBodyBytes)
	if err := json.NewDecoder(body).Decode(v); err != nil {
		if _, tooLarge := errors.AsType[*http.MaxBytesError](err); tooLarge {
			return refuse(CodeBodyTooLarge)
		}
		return refuse(CodeInvalidRequest)
	}
	return nil
}

func (l *Listener) join(w http.ResponseWriter, r *http.Request) (pool, node string, err error) {
	var req joinRequest
	if err := l.decode(w, r, &req); err != nil {
		return "", "", err
	}
	var key string
	how := "the pool's join token"
	ev := l.log.Info()
	if req.PodToken != "" {
		var id PodIdentity
		key, id, err = l.store.JoinPod(r.Context(), req.PoolID, req.NodeName, req.PodToken)
		switch {
		case err == nil:
			how = "its Pod's token"
			ev = ev.Str("pod", id.PodName).Str("podUID", id.PodUID)
		case errors.Is(err, ErrCannotReview) && req.Token != "":
			l.log.Warn().Err(err).Str("pool", req.PoolID).Str("node", req.NodeName).
				Msg("join listener: the Pod token cannot be reviewed; trying the pool's join token")
		case errors.Is(err, ErrCannotReview):
			l.log.Warn().Err(err).Str("pool", req.PoolID).Str("node", req.NodeName).
				Msg("join listener: the Pod token cannot be reviewed, and no join token came with it")
			return req.PoolID, req.NodeName, refuse(CodeUnavailable)
		default:
			return req.PoolID, req.NodeName, err
		}
	}
	if key == "" {
		key, err = l.store.Join(r.Context(), req.PoolID, req.NodeName, req.Token)
		if err != nil {
			return req.PoolID, req.NodeName, err
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(joinAnswer{NodeKey: key, HeartbeatEvery: l.every.String()})
	l.metrics.Joined(req.PoolID)
	ev.Str("pool", req.PoolID).Str("node", req.NodeName).Str("source", sourceOf(r.RemoteAddr)).Msg("a node daemon joined with " + how)
	return req.PoolID, req.NodeName, nil
}

func (l *Listener) heartbeat(w http.ResponseWriter, r *http.Request) (pool, node string, err error) {
	var req heartbeatRequest
	if err := l.decode(w, r, &req); err != nil {
		return "", "", err
	}
	scheme, key, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	if !strings.EqualFold(scheme, "Bearer") {
		key = ""
	}
	if err := l.store.Heartbeat(r.Context(), req.PoolID, req.NodeName, strings.TrimSpace(key), req.PodUID); err != nil {
		return req.PoolID, req.NodeName, err
	}
	w.WriteHeader(http.StatusNoContent)
	return req.PoolID, req.NodeName, nil
}

func (l *Listener) answerRefusal(w http.ResponseWriter, ref *Refusal) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(ref.Status)
	_ = json.NewEncoder(w).Encode(ref)
}

// Serve listens where substrate.join says and serves until ctx ends.
func (l *Listener) Serve(ctx context.Context, cfg config.Join) error {
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return refusal.Wrap(refusal.InvalidState, err, "cannot listen on %s (substrate.join.listen)", cfg.Listen)
	}
	return l.ServeOn(ctx, ln, cfg)
}

// ServeOn serves on ln (closed when it returns) until ctx ends: TLS with
// cfg's certificate and key, which are read again when they change on disk
// (a renewed certificate needs no restart), or plain HTTP with insecure.
func (l *Listener) ServeOn(ctx context.Context, ln net.Listener, cfg config.Join) error {
	lim := &connLimit{Listener: ln, perSource: l.limits.ConnsPerSource, total: l.limits.MaxConns, probation: l.limits.ProbationConns,
		bySource: map[string]int{}, onProbation: map[string][]*countedConn{},
		admit:   l.limiter.allows,
		refused: l.refusedConn,
		closed: func(src string, served bool) {
			if !served {
				l.limiter.fail(src)
			}
		}}
	l.mu.Lock()
	l.conns = lim
	l.mu.Unlock()
	srv := &http.Server{
		Handler:           l,
		ReadHeaderTimeout: l.limits.ReadHeaderTimeout,
		ReadTimeout:       l.limits.ReadTimeout,
		WriteTimeout:      l.limits.WriteTimeout,
		IdleTimeout:       l.limits.IdleTimeout,
		MaxHeaderBytes:    l.limits.MaxHeaderBytes,
		// net/http's own complaints (failed handshakes, oversized headers)
		// come once per bad connection: a flood's worth of lines, so debug.
		ErrorLog:    log.New(debugWriter{l.log}, "", 0),
		BaseContext: func(net.Listener) context.Context { return ctx },
		ConnContext: withConn,
		// `OPTIONS *` would otherwise be answered by net/http itself, never
		// reaching the handler, its limiter or its counters.
		DisableGeneralOptionsHandler: true,
	}
	// One request per connection: with keep-alive, a source could keep its
	// slots for ever by sending a cheap request before each idle timeout.
	// Node daemons send one request a heartbeat, so nothing is lost.
	srv.SetKeepAlivesEnabled(false)
	// HTTP/1.1 only: node daemons need nothing more, and HTTP/2's streams
	// and frames are surface a listener facing the nodes' network is better
	// without.
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	if !cfg.Insecure {
		kp, err := loadKeypair(cfg.TLSCert, cfg.TLSKey, l.clock, l.log)
		if err != nil {
			_ = ln.Close()
			return err
		}
		base := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: kp.get, NextProtos: []string{"http/1.1"}}
		srv.TLSConfig = base.Clone()
		srv.TLSConfig.GetConfigForClient = newProbationHandshakes().configFor(base)
	}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if srv.Shutdown(shut) != nil {
			_ = srv.Close()
		}
	}()
	var err error
	if cfg.Insecure {
		err = srv.Serve(lim)
	} else {
		err = srv.ServeTLS(lim, "", "")
	}
	if errors.Is(err, http.ErrServerClosed) {
		<-stopped
		return nil
	}
	_ = srv.Close()
	return err
}

// refusedConn counts and logs (sampled) a connection closed as accepted.
func (l *Listener) refusedConn(src, code string) {
	l.metrics.Refused("other", code)
	what := "too many connections from one address (or in all)"
	if code == CodeRateLimited {
		what = "a source address failed too often"
	}
	if let, held := l.quiet.let(code + " " + src); let {
		l.log.Warn().Str("source", src).Str("code", code).Int("heldBack", held).
			Msg("join listener: " + what + "; its new connections are closed as accepted (one line per address every 10 s)")
	}
}

type debugWriter struct{ log zerolog.Logger }

func (d debugWriter) Write(p []byte) (int, error) {
	d.log.Debug().Msg("join listener: " + strings.TrimSpace(string(p)))
	return len(p), nil
}

// keypair serves the listener's certificate and reads it again when either
// file changes (checked at most every 10 s, on the first handshake after).
// A renewed certificate that fails to load is logged and the old one kept.
type keypair struct {
	certFile, keyFile string
	clock             clock.Clock
	log               zerolog.Logger

	mu              sync.Mutex
	cert            *tls.Certificate
	certMod, keyMod time.Time
	checkedAt       time.Time
}

func loadKeypair(certFile, keyFile string, c clock.Clock, lg zerolog.Logger) (*keypair, error) {
	k := &keypair{certFile: certFile, keyFile: keyFile, clock: c, log: lg, checkedAt: c.Now()}
	if err := k.load(); err != nil {
		return nil, refusal.Wrap(refusal.InvalidState, err, "cannot load the join listener's certificate (substrate.join.tlsCert %s, tlsKey %s); give a PEM certificate and its key, or insecure: true for tests", certFile, keyFile)
	}
	return k, nil
}

func modTime(path string) time.Time {
	fi, err := os.Stat(path)
	if err != nil {
		return time.Time{}
	}
	return fi.ModTime()
}

func (k *keypair) load() error {
	cm, km := modTime(k.certFile), modTime(k.keyFile)
	cert, err := tls.LoadX509KeyPair(k.certFile, k.keyFile)
	if err != nil {
		return err
	}
	k.cert, k.certMod, k.keyMod = &cert, cm, km
	return nil
}

func (k *keypair) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if now := k.clock.Now(); now.Sub(k.checkedAt) >= 10*time.Second {
		k.checkedAt = now
		if !modTime(k.certFile).Equal(k.certMod) || !modTime(k.keyFile).Equal(k.keyMod) {
			if err := k.load(); err != nil {
				k.log.Error().Err(err).Str("tlsCert", k.certFile).Str("tlsKey", k.keyFile).
					Msg("join listener: the changed certificate does not load; still serving the previous one")
			} else {
				k.log.Info().Str("tlsCert", k.certFile).Msg("join listener: serving the renewed certificate")
			}
		}
	}
	return k.cert, nil
}
