package join

import (
	"container/list"
	"context"
	"crypto/tls"
	"errors"
	"hash/maphash"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/fleet-agent/fleet-agent/internal/clock"
)

// Limits are the listener's defences; a zero field takes its default.
//
// The numbers: a node daemon never fails a request except around a token
// change (a join with the Secret's previous token) or a retirement, and it
// backs off for seconds after any failure, so FailureBurst failures in a row
// is far beyond an honest daemon, and even many daemons behind one NAT
// address (they share one bucket, and only failures spend it). Past the
// burst a source gets one attempt per FailureEvery: a guesser of 256-bit
// secrets gains nothing either way; the bucket caps the work and the log
// lines one address can cause. Node daemons do not keep connections alive
// (one short request every heartbeatEvery), so ConnsPerSource concurrent
// connections allow hundreds of nodes behind one address while a slow client
// there cannot hold more; MaxConns bounds file descriptors and goroutines in
// all. The timeouts are generous for a request of a few hundred bytes on any
// network, and short enough that a slow client holds a connection for
// seconds, not minutes.
type Limits struct {
	// FailureBurst is how many failed requests (or connections that ended
	// before a request) a source address may make in a row before it is
	// refused 429 and its new connections are closed (default 20).
	FailureBurst int
	// FailureEvery is how often a spent attempt comes back (default 3 s).
	FailureEvery time.Duration
	// MaxSources is how many source addresses have their own bucket
	// (default 16384); past it, a new address shares one of overflowBuckets
	// buckets, picked by a keyed hash of the address (the key drawn at
	// start, so an attacker cannot choose whom it shares with).
	MaxSources int
	// ProbationConns is how many connections at once a source with no
	// attempt left may still have open (default 8): its neighbours on the
	// same address (pods of one Node, hosts behind one NAT) can spend the
	// address's bucket, and a node daemon's valid request must still get
	// through. Such a connection has a second for its handshake and its
	// request; the request is served only if it succeeds (a valid node
	// key, a valid join), else answered 429; a new connection past the cap
	// closes one of them that has not reached the handler: the oldest whose
	// client has sent nothing yet, else the oldest older than a quarter
	// second, so idle ones cannot hold the places.
	ProbationConns int
	// ConnsPerSource and MaxConns cap the open connections of one source
	// address and of all (defaults 64 and 2048); a connection past either
	// is closed as it is accepted, except that past MaxConns it takes the
	// place of the oldest connection whose client has sent nothing for a
	// quarter second, when there is one.
	ConnsPerSource int
	MaxConns       int
	// MaxHeaderBytes caps the request headers (default 8 KiB), MaxBodyBytes
	// the body (default 4 KiB: a request is about 200 bytes).
	MaxHeaderBytes int
	MaxBodyBytes   int64
	// ReadHeaderTimeout bounds the TLS handshake and the headers (default
	// 5 s), ReadTimeout the whole request (10 s), WriteTimeout the answer
	// (10 s), IdleTimeout a kept-alive connection between requests (30 s).
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	WriteTimeout      time.Duration
	IdleTimeout       time.Duration
}

// DefaultLimits are the limits of a listener in production.
func DefaultLimits() Limits {
	return Limits{FailureBurst: 20, FailureEvery: 3 * time.Second, MaxSources: 16384,
		ProbationConns: 8, ConnsPerSource: 64, MaxConns: 2048, MaxHeaderBytes: 8 << 10, MaxBodyBytes: 4 << 10,
		ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second, IdleTimeout: 30 * time.Second}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	pick := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	pickD := func(v *time.Duration, def time.Duration) {
		if *v <= 0 {
			*v = def
		}
	}
	pick(&l.FailureBurst, d.FailureBurst)
	pickD(&l.FailureEvery, d.FailureEvery)
	pick(&l.MaxSources, d.MaxSources)
	pick(&l.ProbationConns, d.ProbationConns)
	pick(&l.ConnsPerSource, d.ConnsPerSource)
	pick(&l.MaxConns, d.MaxConns)
	pick(&l.MaxHeaderBytes, d.MaxHeaderBytes)
	if l.MaxBodyBytes <= 0 {
		l.MaxBodyBytes = d.MaxBodyBytes
	}
	pickD(&l.ReadHeaderTimeout, d.ReadHeaderTimeout)
	pickD(&l.ReadTimeout, d.ReadTimeout)
	pickD(&l.WriteTimeout, d.WriteTimeout)
	pickD(&l.IdleTimeout, d.IdleTimeout)
	return l
}

// sourceOf is the address a request or connection is limited under: the
// IPv4 address, or the /64 of an IPv6 one (one host commonly holds a whole
// /64, so a bucket per IPv6 address would be no limit at all).
func sourceOf(remoteAddr string) string {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	ip = ip.Unmap().WithZone("")
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}

// limiter is one token bucket of failed attempts per source address: a
// rate.Limiter per address, read and spent at the injected clock's time.
type limiter struct {
	clock      clock.Clock
	every      rate.Limit
	interval   time.Duration
	burst      int
	maxSources int
	seed       maphash.Seed

	mu        sync.Mutex
	buckets   map[string]*rate.Limiter
	overflow  [overflowBuckets]*rate.Limiter
	lastSweep time.Time
}

// overflowBuckets is how many buckets the addresses past MaxSources share:
// an attacker that filled the table shares its bucket with one in 256 of
// the newcomers, not with all of them (and their valid requests pass
// whatever the bucket holds).
const overflowBuckets = 256

func newLimiter(c clock.Clock, l Limits) *limiter {
	lim := &limiter{clock: c, every: rate.Every(l.FailureEvery), interval: l.FailureEvery, burst: l.FailureBurst,
		maxSources: l.MaxSources, seed: maphash.MakeSeed(), buckets: map[string]*rate.Limiter{}}
	for i := range lim.overflow {
		lim.overflow[i] = lim.full()
	}
	return lim
}

// full is a bucket with every attempt in it.
func (l *limiter) full() *rate.Limiter { return rate.NewLimiter(l.every, l.burst) }

// overflowOf is the overflow bucket src shares, past MaxSources.
func (l *limiter) overflowOf(src string) int {
	return int(maphash.String(l.seed, src) % overflowBuckets)
}

// bucketOf returns src's bucket; the caller holds mu. Past maxSources the
// buckets that refilled to full (the same as none) are dropped, at most once
// a second so that a flood of new addresses cannot make every request pay a
// sweep; when none can go, a new address shares an overflow bucket.
func (l *limiter) bucketOf(src string, now time.Time) *rate.Limiter {
	if b, ok := l.buckets[src]; ok {
		return b
	}
	if len(l.buckets) >= l.maxSources && now.Sub(l.lastSweep) >= time.Second {
		l.lastSweep = now
		for k, b := range l.buckets {
			if b.TokensAt(now) >= float64(l.burst) {
				delete(l.buckets, k)
			}
		}
	}
	if len(l.buckets) >= l.maxSources {
		return l.overflow[l.overflowOf(src)]
	}
	b := l.full()
	l.buckets[src] = b
	return b
}

// take spends one attempt of src. Refused, it says how long until the next.
func (l *limiter) take(src string) (b *rate.Limiter, ok bool, retryAfter time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock.Now() // under mu, so a bucket never sees time go back
	b = l.bucketOf(src, now)
	if b.AllowN(now, 1) {
		return b, true, 0
	}
	return b, false, time.Duration((1 - b.TokensAt(now)) * float64(l.interval))
}

// allows reports whether src has an attempt left, spending none: a new
// connection from a source that has none is closed before its TLS
// handshake, the listener's most expensive step.
func (l *limiter) allows(src string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock.Now() // under mu, so a bucket never sees time go back
	return l.bucketOf(src, now).TokensAt(now) >= 1
}

// fail spends an attempt of src for a connection that failed before any
// request (a failed handshake, headers too slow or too large, nothing sent).
// With less than a whole attempt left it empties the bucket rather than
// borrowing from the future: rate.Limiter has no way to set its tokens, but
// it holds them at most at its burst, so a burst of zero for an instant
// empties it.
func (l *limiter) fail(src string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock.Now() // under mu, so a bucket never sees time go back
	b := l.bucketOf(src, now)
	if b.AllowN(now, 1) {
		return
	}
	b.SetBurstAt(now, 0)
	b.SetBurstAt(now, l.burst)
}

// give returns an attempt that succeeded. rate.Limiter takes a negative
// count as tokens handed back; it holds them at most at its burst.
func (l *limiter) give(b *rate.Limiter) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock.Now() // under mu, so a bucket never sees time go back
	b.AllowN(now, -1)
}

// sampler lets a log line about one source through at most once per
// window, counting the ones it held back, so that a flood of refusals
// (rate-limited, too many connections) costs a line per address per window,
// not a line per request.
type sampler struct {
	clock  clock.Clock
	window time.Duration
	mu     sync.Mutex
	seen   map[string]*sample
}

type sample struct {
	at   time.Time
	held int
}

func newSampler(c clock.Clock, window time.Duration) *sampler {
	return &sampler{clock: c, window: window, seen: map[string]*sample{}}
}

// let reports whether to log about key now, and how many lines were held
// back since the last one.
func (s *sampler) let(key string) (bool, int) {
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	sm, ok := s.seen[key]
	if !ok {
		if len(s.seen) >= 4096 {
			// Many addresses at once: start over rather than grow.
			clear(s.seen)
		}
		s.seen[key] = &sample{at: now}
		return true, 0
	}
	if now.Sub(sm.at) < s.window {
		sm.held++
		return false, 0
	}
	held := sm.held
	sm.at, sm.held = now, 0
	return true, held
}

// connLimit closes, as they are accepted, the connections past the per
// source cap, and past the total cap unless an idle connection gives its
// place (idlest); a source with no attempt left keeps at most probation
// connections open, a new one closing one of them that no request reached
// yet (Limits.ProbationConns says why). It tells when a
// connection closes whether a request on it reached the handler (the
// handler accounts for those itself).
type connLimit struct {
	net.Listener
	perSource, total int
	probation        int
	admit            func(src string) bool
	refused          func(src, code string)
	closed           func(src string, served bool)

	mu       sync.Mutex
	open     int
	bySource map[string]int
	// onProbation are the open connections of each source with no attempt
	// left, oldest first.
	onProbation map[string][]*countedConn
	// order are all the open connections, oldest first (idlest).
	order list.List
}

func (c *connLimit) Accept() (net.Conn, error) {
	for {
		conn, err := c.Listener.Accept()
		if err != nil {
			return nil, err
		}
		src := sourceOf(conn.RemoteAddr().String())
		limited := !c.admit(src)
		c.mu.Lock()
		now := time.Now()
		var full *countedConn // an idle connection whose place in all this one takes
		if c.bySource[src] < c.perSource && c.open >= c.total {
			full = c.idlest(now)
		}
		if c.bySource[src] >= c.perSource || (c.open >= c.total && full == nil) {
			c.mu.Unlock()
			_ = conn.Close()
			c.refused(src, CodeTooManyConnections)
			continue
		}
		cc := &countedConn{Conn: conn, owner: c, src: src, at: now}
		var evict *countedConn
		if limited {
			list := c.onProbation[src]
			if len(list) >= c.probation {
				evict = evictable(list, now)
				if evict == nil {
					// All are being served: short, and bounded by the
					// request timeouts.
					c.mu.Unlock()
					_ = conn.Close()
					c.refused(src, CodeRateLimited)
					continue
				}
				c.dropProbation(evict)
			}
			cc.probation, cc.until = true, now.Add(probationLife)
			_ = conn.SetReadDeadline(cc.until)
			c.onProbation[src] = append(c.onProbation[src], cc)
		}
		c.open++
		c.bySource[src]++
		cc.elem = c.order.PushBack(cc)
		c.mu.Unlock()
		if evict != nil {
			_ = evict.Close()
			c.refused(src, CodeRateLimited)
		}
		if full != nil {
			_ = full.Close()
			c.refused(full.src, CodeTooManyConnections)
		}
		return cc, nil
	}
}

// evictable is the probation connection a new one takes the place of, of
// those no request reached yet: one whose client has gone already (a
// connection closed by its client sits in the accept queue and on the list
// until the server reads its end, and a burst of them must not fill the
// places; the socket is peeked, nothing read); else the oldest idle one, a
// connection whose client has sent nothing at all, however young (a node
// daemon sends its ClientHello as it connects, so empty connections from
// its address, made as fast as a neighbour can, only take each other's
// places: with the grace for them too, they held all the places young and
// the node's joins were closed, 0 of 27 through); else the oldest past
// probationGrace; nil when all are being served, or sent bytes and are too
// young.
func evictable(list []*countedConn, now time.Time) *countedConn {
	var idle *countedConn
	for _, o := range list {
		if o.served.Load() {
			continue
		}
		gone, pending := peek(o.Conn)
		if gone {
			return o
		}
		if idle == nil && !pending && !o.began.Load() {
			idle = o
		}
	}
	if idle != nil {
		return idle
	}
	for _, o := range list {
		if !o.served.Load() && now.Sub(o.at) >= probationGrace {
			return o
		}
	}
	return nil
}

// idleScan bounds how many of the oldest open connections idlest looks at:
// when every place in all is taken, a connection that sent nothing is
// among the oldest (the others finish their requests within the timeouts).
const idleScan = 64

// idlest is the open connection a new one takes the place of when every
// place in all is taken: the oldest, of the first idleScan, that no request
// reached, whose client sent nothing at all (or left), and that is past
// probationGrace (or on probation, where an idle one gives its place at
// once); nil when there is none. It is taken off the list, so that no other
// accept picks it too; the caller holds mu and closes it. So connections
// made to hold places (from any number of addresses, each under its own
// cap) cannot keep a node's out: its ClientHello comes as it connects.
func (c *connLimit) idlest(now time.Time) *countedConn {
	i := 0
	for e := c.order.Front(); e != nil && i < idleScan; e, i = e.Next(), i+1 {
		o := e.Value.(*countedConn)
		if o.served.Load() || o.began.Load() || (!o.probation && now.Sub(o.at) < probationGrace) {
			continue
		}
		if gone, pending := peek(o.Conn); !gone && pending {
			continue
		}
		c.order.Remove(e)
		o.elem = nil
		return o
	}
	return nil
}

// dropProbation takes cc off its source's probation list; the caller holds
// mu.
func (c *connLimit) dropProbation(cc *countedConn) {
	if !cc.probation {
		return
	}
	cc.probation = false
	list := c.onProbation[cc.src]
	for i, o := range list {
		if o == cc {
			list = append(list[:i:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(c.onProbation, cc.src)
	} else {
		c.onProbation[cc.src] = list
	}
}

func (c *connLimit) release(cc *countedConn) {
	c.mu.Lock()
	c.open--
	if c.bySource[cc.src]--; c.bySource[cc.src] <= 0 {
		delete(c.bySource, cc.src)
	}
	c.dropProbation(cc)
	if cc.elem != nil {
		c.order.Remove(cc.elem)
		cc.elem = nil
	}
	c.mu.Unlock()
	c.closed(cc.src, cc.served.Load())
}

// counts reports the open connections, in all and of src (for tests).
func (c *connLimit) counts(src string) (int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.open, c.bySource[src]
}

// countedConn is an accepted connection; began is set once a byte was read
// from it, served once a request on it reached the handler.
type countedConn struct {
	net.Conn
	owner  *connLimit
	src    string
	began  atomic.Bool
	served atomic.Bool
	once   sync.Once
	// probation is set while it is on its source's probation list (under
	// the owner's mu).
	probation bool
	at        time.Time     // accepted
	elem      *list.Element // its place in the owner's order, under the owner's mu
	until     time.Time     // on probation: when its reads are cut
	relMu     sync.Mutex
	release   func() // the probation handshake slot it holds, if any
	isClosed  bool   // under relMu: Close ran, a slot taken now is released at once
}

// A connection on probation has probationLife for its handshake and its
// request (its reads are cut then, whatever the server's timeouts): a node
// daemon needs milliseconds, and an idle one holds its place no longer.
// For probationGrace it is safe from being closed for a newer one, time for
// a handshake and a request over a wide-area network, so that a flood of
// new connections cannot close a node daemon's before its request arrives,
// while an idle one loses its place to the next arrival after that.
const (
	probationLife  = time.Second
	probationGrace = 250 * time.Millisecond
)

// probationHandshakes lets one TLS handshake of a connection on probation
// run at a time, across all sources: they are the costly step (a key
// exchange and a signature each), and a rate-limited source could
// otherwise have the listener make them as fast as it sends ClientHellos,
// taking the CPU the other sources' handshakes need. A node daemon's
// handshake waits behind at most its own source's few (the per-source
// cap), each a millisecond or two; the wait ends with the connection's
// probationLife.
type probationHandshakes struct{ slot chan struct{} }

func newProbationHandshakes() *probationHandshakes {
	return &probationHandshakes{slot: make(chan struct{}, 1)}
}

// configFor is the listener's GetConfigForClient: nil (the base config)
// for a connection not on probation; for one on probation, the base config
// once the slot is taken, released when the handshake ends (or the
// connection closes first).
func (h *probationHandshakes) configFor(base *tls.Config) func(*tls.ClientHelloInfo) (*tls.Config, error) {
	return func(hi *tls.ClientHelloInfo) (*tls.Config, error) {
		cc, ok := hi.Conn.(*countedConn)
		if !ok || cc.until.IsZero() {
			return nil, nil
		}
		ctx := hi.Context()
		if ctx == nil {
			ctx = context.Background()
		}
		t := time.NewTimer(time.Until(cc.until))
		defer t.Stop()
		select {
		case h.slot <- struct{}{}:
		case <-t.C:
			return nil, errProbationBusy
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		var once sync.Once
		release := func() { once.Do(func() { <-h.slot }) }
		if !cc.setRelease(release) {
			// Closed while it waited (a newer connection took its place):
			// its Close has run, and nothing would free the slot again.
			release()
			return nil, net.ErrClosed
		}
		c := base.Clone()
		c.GetConfigForClient = nil
		c.VerifyConnection = func(tls.ConnectionState) error { release(); return nil }
		return c, nil
	}
}

var errProbationBusy = errors.New("join listener: a handshake on probation waited its whole life for its turn")

// setRelease records what to release when the connection closes; false
// when it is closed already (the caller releases it then).
func (c *countedConn) setRelease(f func()) bool {
	c.relMu.Lock()
	defer c.relMu.Unlock()
	if c.isClosed {
		return false
	}
	c.release = f
	return true
}

// Read records that the client sent something.
func (c *countedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && !c.began.Load() {
		c.began.Store(true)
	}
	return n, err
}

// SetReadDeadline is the server's, cut to probationLife on probation.
func (c *countedConn) SetReadDeadline(t time.Time) error {
	if !c.until.IsZero() && (t.IsZero() || t.After(c.until)) {
		t = c.until
	}
	return c.Conn.SetReadDeadline(t)
}

// SetDeadline is the server's, its reads cut to probationLife on probation.
func (c *countedConn) SetDeadline(t time.Time) error {
	if err := c.Conn.SetWriteDeadline(t); err != nil {
		return err
	}
	return c.SetReadDeadline(t)
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.relMu.Lock()
		rel := c.release
		c.isClosed = true
		c.relMu.Unlock()
		if rel != nil {
			rel()
		}
		c.owner.release(c)
	})
	return err
}

type connKey struct{}

// withConn puts the accepted connection under a request's context
// (http.Server.ConnContext), so that the handler can mark it served.
func withConn(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if cc, ok := c.(*countedConn); ok {
		return context.WithValue(ctx, connKey{}, cc)
	}
	return ctx
}

// markServed records that a request on the request's connection reached
// the handler.
func markServed(ctx context.Context) {
	if cc, ok := ctx.Value(connKey{}).(*countedConn); ok {
		cc.served.Store(true)
	}
}
