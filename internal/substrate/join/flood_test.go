package join

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

// The flood's shape and the bound a good node must join within while it
// runs (under -race on 2 cores: a join takes milliseconds alone).
const (
	floodSources = 8 // attacking addresses, 127.0.0.2 and on
	floodPosters = 4 // goroutines per address posting bad tokens
	floodSlow    = 4 // per address: connections dribbling headers, and as many never finishing a body
	floodHog     = 100
	floodFor     = 5 * time.Second
	// joinBound is the bound on a quiet, fast machine; the test adds
	// joinSlowdown times what a join takes here without the flood, so a
	// machine that is busy already stretches the bound with the join.
	joinBound     = 5 * time.Second
	joinSlowdown  = 20
	floodHeaderTO = 500 * time.Millisecond
	floodReadTO   = time.Second
	// A timer fires late on a machine this loaded; the median must be
	// close to the timeout, the longest within closeSlack of it, and both
	// well short of floodFor (what a slow client would hold without them).
	medianSlack    = 500 * time.Millisecond
	closeSlack     = 2 * time.Second
	goodNodeSource = "127.0.0.1"
)

// quietJoin is how long a node daemon takes to join a listener of its own
// with nothing else going on, on this machine as loaded as it is now.
func quietJoin(t *testing.T, cert *testCert) time.Duration {
	t.Helper()
	f := newFixture(t, clock.Real{})
	stop := f.serve(t, "127.0.0.1:0", cert, ListenerOptions{HeartbeatEvery: 100 * time.Millisecond})
	defer stop()
	tok := f.mint(t, "pool_a", "calibration")
	n := newNode(t, "pool_a", f.url, cert.pin)
	writeToken(t, n.tokenFile, tok)
	start := time.Now()
	stopDaemon := runDaemon(t, n.options("calibration", DaemonOptions{}))
	defer stopDaemon()
	n.st.wait(t, 0, PhaseJoined, time.Minute)
	return time.Since(start)
}

// holds are how long the server kept slow connections.
type holds struct {
	mu  sync.Mutex
	all []time.Duration
}

func (h *holds) add(d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.all = append(h.all, d)
}

// stats returns the count, the median and the longest.
func (h *holds) stats() (int, time.Duration, time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.all) == 0 {
		return 0, 0, 0
	}
	s := slices.Sorted(slices.Values(h.all))
	return len(s), s[len(s)/2], s[len(s)-1]
}

// TestFlood: bad tokens from many goroutines on several addresses, slow
// clients (headers dribbled, bodies never finished) and a connection hog,
// all at once over TLS; a good node daemon still joins within joinBound and
// keeps beating, the bad ones are rate-limited (429s counted against the
// bucket's arithmetic), the slow ones are cut at the timeouts, the hog at
// the per-address cap, nothing changes in the state file but the good
// join, and the log holds a line per address rather than per request, and
// no token.
func TestFlood(t *testing.T) {
	cert := newCert(t, t.TempDir(), "join", nil, false)
	quiet := quietJoin(t, cert)
	bound := joinBound + joinSlowdown*quiet
	t.Logf("a join without the flood takes %s here: the good node must join within %s under it", quiet.Round(time.Millisecond), bound.Round(time.Millisecond))
	f := newFixture(t, clock.Real{})
	f.serve(t, "127.0.0.1:0", cert, ListenerOptions{HeartbeatEvery: 100 * time.Millisecond,
		Limits: Limits{ReadHeaderTimeout: floodHeaderTO, ReadTimeout: floodReadTO}})
	tok := f.mint(t, "pool_a", "good-node", "other-1", "other-2")
	const canary = "canary-flood-3e9d1c-never-logged"

	// The hog first: idle connections from one address, past its cap
	// (cut after the handshake timeout, each a failure of that address).
	hog := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.100")}}
	for range floodHog {
		if c, err := hog.Dial("tcp", f.addr); err == nil {
			defer c.Close()
		}
	}

	ctx, stopFlood := context.WithCancel(t.Context())
	defer stopFlood()
	var wg sync.WaitGroup
	var sent, n401, n429, nOther, nCut atomic.Int64
	var slowHeaders, slowBodies holds
	for s := range floodSources {
		src := fmt.Sprintf("127.0.0.%d", s+2)
		c := client(cert, src)
		for g := range floodPosters {
			body := fmt.Sprintf(`{"poolId":"pool_a","nodeName":"other-1","token":"%s-%d-%d"}`, canary, s, g)
			wg.Go(func() {
				for ctx.Err() == nil {
					req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.url+"v1/join", strings.NewReader(body))
					resp, err := c.Do(req)
					if err != nil {
						// A connection closed as accepted: the attacker's
						// dial costs this machine too, so it paces itself.
						nCut.Add(1)
						pause(ctx, 50*time.Millisecond)
						continue
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					sent.Add(1)
					switch resp.StatusCode {
					case 401:
						n401.Add(1)
					case 429:
						n429.Add(1)
					default:
						nOther.Add(1)
					}
				}
			})
		}
		for range floodSlow {
			wg.Go(func() { slowClient(ctx, f.addr, src, false, &slowHeaders) })
			wg.Go(func() { slowClient(ctx, f.addr, src, true, &slowBodies) })
		}
	}

	time.Sleep(500 * time.Millisecond) // the flood is under way
	n := newNode(t, "pool_a", f.url, cert.pin)
	writeToken(t, n.tokenFile, tok)
	start := time.Now()
	stopDaemon := runDaemon(t, n.options("good-node", DaemonOptions{RequestTimeout: 10 * time.Second}))
	_, i := n.st.wait(t, 0, PhaseJoined, 2*bound)
	joinedIn := time.Since(start)
	// Beats go on during the flood.
	for range 3 {
		_, i = n.st.wait(t, i, PhaseConnected, 5*time.Second)
	}
	if rest := floodFor - time.Since(start) - 500*time.Millisecond; rest > 0 {
		time.Sleep(rest)
	}
	elapsed := time.Since(start) + 500*time.Millisecond
	stopFlood()
	wg.Wait()
	stopDaemon()

	hn, hmed, hmax := slowHeaders.stats()
	bn, bmed, bmax := slowBodies.stats()
	t.Logf("flood of %s: %d bad-token requests answered (%d 401, %d 429, %d other) and %d cut (closed as accepted) from %d addresses; "+
		"%d slow-header connections held %s (median) to %s, %d slow-body ones %s to %s; hog connections refused at accept: %d; the good node joined in %s",
		elapsed.Round(time.Millisecond), sent.Load(), n401.Load(), n429.Load(), nOther.Load(), nCut.Load(), floodSources,
		hn, hmed.Round(time.Millisecond), hmax.Round(time.Millisecond), bn, bmed.Round(time.Millisecond), bmax.Round(time.Millisecond),
		f.metrics.refusedN("other "+CodeTooManyConnections), joinedIn.Round(time.Millisecond))

	if joinedIn > bound {
		t.Errorf("the good node joined in %s, beyond %s; it said:\n%s", joinedIn, bound, n.st)
	}
	// Each address fails at most its burst plus what came back meanwhile:
	// 20 + elapsed/3 s + 1, slow bodies (400s) included.
	lim := DefaultLimits()
	perSource := int64(lim.FailureBurst) + int64(elapsed/lim.FailureEvery) + 1
	if n401.Load() > floodSources*perSource || n429.Load() == 0 || nOther.Load() != 0 {
		t.Errorf("401s %d (at most %d), 429s %d, other %d", n401.Load(), floodSources*perSource, n429.Load(), nOther.Load())
	}
	// Past their bucket, the posters get 429s and closed connections, far
	// more than the 401s: their requests reach neither a check nor the
	// state file.
	limited := int64(f.metrics.refusedN("join "+CodeRateLimited) + f.metrics.refusedN("other "+CodeRateLimited))
	if limited < n429.Load()+nCut.Load()/2 || limited < 3*n401.Load() {
		t.Errorf("rate-limited: %d counted, %d 429s and %d cut seen, %d 401s", limited, n429.Load(), nCut.Load(), n401.Load())
	}
	for _, c := range []struct {
		what          string
		n             int
		med, max, cut time.Duration
	}{{"slow headers", hn, hmed, hmax, floodHeaderTO}, {"slow bodies", bn, bmed, bmax, floodReadTO}} {
		if c.n < floodSources*floodSlow || c.med > c.cut+medianSlack || c.max > c.cut+closeSlack {
			t.Errorf("%s: %d connections held %s (median) to %s; the timeout is %s", c.what, c.n, c.med, c.max, c.cut)
		}
	}
	if got := f.metrics.refusedN("other " + CodeTooManyConnections); got < floodHog-lim.ConnsPerSource {
		t.Errorf("hog connections refused at accept: %d, want at least %d", got, floodHog-lim.ConnsPerSource)
	}
	// Nothing changed but the good join.
	nodes, _ := f.store.Joined(t.Context(), "pool_a")
	if len(nodes) != 1 || nodes[0].Name != "good-node" {
		t.Errorf("joined %+v", nodes)
	}
	var rec *state.JoinTokens
	_ = f.st.View(func(tx *state.Tx) (err error) { rec, err = tx.JoinTokens("pool_a"); return })
	if got := strings.Join(allowed(rec.Current), ","); got != "other-1,other-2" {
		t.Errorf("the token allows %s", got)
	}
	logs := f.logs.String()
	if strings.Contains(logs, canary) || strings.Contains(logs, tok) {
		t.Error("a token is in the listener's log")
	}
	if got := strings.Count(logs, `"code":"rateLimited"`); got > floodSources {
		for _, line := range strings.Split(logs, "\n") {
			if strings.Contains(line, `"code":"rateLimited"`) {
				t.Log(line)
			}
		}
		t.Errorf("%d log lines for 429s from %d addresses in %s", got, floodSources, elapsed)
	}
	if got := strings.Count(logs, `"code":"tooManyConnections"`); got != 1 {
		t.Errorf("%d log lines for the hog", got)
	}
}

// slowClient opens TLS connections from src and, until ctx ends, either
// dribbles header lines (one every 100 ms, never the blank line) or sends
// whole headers announcing a body it never finishes; it records how long the
// server took to close each.
func slowClient(ctx context.Context, addr, src string, body bool, held *holds) {
	d := &tls.Dialer{NetDialer: &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second},
		Config: &tls.Config{InsecureSkipVerify: true}}
	for ctx.Err() == nil {
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			// Closed as accepted (the address has no attempt left).
			pause(ctx, 200*time.Millisecond)
			continue
		}
		// The server's clock for the timeouts started a little earlier, at
		// the accept.
		start := time.Now()
		closed := make(chan struct{})
		go func() {
			_, _ = io.Copy(io.Discard, conn)
			close(closed)
		}()
		head := "POST /v1/join HTTP/1.1\r\nHost: join\r\n"
		if body {
			head += "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"poolId\":"
		}
		_, _ = conn.Write([]byte(head))
		tick := time.NewTicker(100 * time.Millisecond)
	dribble:
		for {
			select {
			case <-closed:
				held.add(time.Since(start))
				break dribble
			case <-ctx.Done():
				break dribble
			case <-tick.C:
				if !body {
					_, _ = conn.Write([]byte("X-Slow: a\r\n"))
				}
			}
		}
		tick.Stop()
		conn.Close()
		<-closed
	}
}

func pause(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
