package join

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/clock"
)

// oneShot is a client that dials from the loopback address from, trusts
// cert and keeps no connection (as a node daemon does).
func oneShot(cert *testCert, from string) *http.Client {
	c := client(cert, from)
	c.Transport.(*http.Transport).DisableKeepAlives = true
	c.Timeout = 5 * time.Second
	return c
}

// try posts body and returns the status, or the error of a connection that
// was closed or refused.
func try(ctx context.Context, c *http.Client, url, body, bearer string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// TestNeighbourCannotExhaustHeartbeats: a neighbour on the node's own
// source address (another pod on the Node, a host behind the same NAT)
// floods the listener with empty connections and junk requests, spending
// that address's bucket and keeping it empty; the node's heartbeats, which
// carry a valid node key, are still accepted, every one of them, at the
// first try. (Before, 23 empty connections were enough to have every
// heartbeat of the node closed as it was accepted.)
func TestNeighbourCannotExhaustHeartbeats(t *testing.T) {
	f := newFixture(t, clock.Real{})
	cert := newCert(t, t.TempDir(), "join", nil, false)
	// No refill during the test: the bucket stays empty once spent.
	f.serve(t, "127.0.0.1:0", cert, ListenerOptions{Limits: Limits{FailureBurst: 20, FailureEvery: time.Hour}})
	const nodeAddr = "127.0.0.7"
	good := oneShot(cert, nodeAddr)
	tok := f.mint(t, "pool_a", "n1")
	st, body, _ := post(t, good, f.url+"v1/join", `{"poolId":"pool_a","nodeName":"n1","token":"`+tok+`"}`, "")
	var ans joinAnswer
	if err := json.Unmarshal([]byte(body), &ans); st != 200 || err != nil || ans.NodeKey == "" {
		t.Fatalf("join: %d %s", st, body)
	}
	beat := `{"poolId":"pool_a","nodeName":"n1"}`

	// The neighbour: 23 empty connections first, as the attack did,
	// then empty connections and junk requests for as long as the node beats.
	empty := func() {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(nodeAddr)}, Timeout: time.Second}
		if c, err := d.Dial("tcp", f.addr); err == nil {
			_ = c.Close()
		}
	}
	for range 23 {
		empty()
	}
	deadline := time.Now().Add(5 * time.Second)
	for f.lis.limiter.allows(nodeAddr) {
		if time.Now().After(deadline) {
			t.Fatal("23 empty connections did not spend the address's bucket")
		}
		time.Sleep(5 * time.Millisecond) // polling the listener's own count of the closed connections
	}
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	var nEmpty, nJunk, junkServed atomic.Int64
	for range 2 {
		wg.Go(func() {
			for i := 0; i < 100000 && ctx.Err() == nil; i++ {
				empty()
				nEmpty.Add(1)
			}
		})
	}
	junk := []struct{ path, body, bearer string }{
		{"v1/heartbeat", beat, "not-the-key"},
		{"v1/heartbeat", beat, ""},
		{"v1/join", `{"poolId":"pool_a","nodeName":"n1","token":"guess"}`, ""},
		{"nothing-here", "{}", ""},
		{"v1/heartbeat", "{not json", ans.NodeKey},
	}
	for g := range 2 {
		bad := oneShot(cert, nodeAddr)
		wg.Go(func() {
			for i := 0; i < 100000 && ctx.Err() == nil; i++ {
				j := junk[(i+g)%len(junk)]
				if st, err := try(ctx, bad, f.url+j.path, j.body, j.bearer); err == nil && st != 429 {
					junkServed.Add(1)
				}
				nJunk.Add(1)
			}
		})
	}

	const beats = 30
	accepted := 0
	var refused []string
	for i := range beats {
		st, err := try(t.Context(), good, f.url+"v1/heartbeat", beat, ans.NodeKey)
		if err == nil && st == 204 {
			accepted++
		} else {
			refused = append(refused, fmt.Sprintf("beat %d: %d %v", i+1, st, err))
		}
		time.Sleep(10 * time.Millisecond) // a heartbeat period, shortened
	}
	stop()
	wg.Wait()
	t.Logf("the node's heartbeats accepted: %d of %d, during %d empty connections and %d junk requests from its address (%d of them answered other than 429)",
		accepted, beats, nEmpty.Load()+23, nJunk.Load(), junkServed.Load())
	if accepted != beats {
		t.Fatalf("heartbeats refused:\n%s", strings.Join(refused, "\n"))
	}
	if junkServed.Load() != 0 {
		t.Fatalf("%d junk requests from a limited address were answered other than 429", junkServed.Load())
	}
	if nodes, _ := f.store.Joined(t.Context(), "pool_a"); len(nodes) != 1 {
		t.Fatalf("joined: %v", nodes)
	}
}

// waitLimited polls until src has no attempt left (the listener counts a
// closed connection once its goroutine sees the end).
func waitLimited(t *testing.T, l *Listener, src string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for l.limiter.allows(src) {
		if time.Now().After(deadline) {
			t.Fatalf("%s still has attempts left", src)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestProbation: a source with no attempt left keeps at most
// ProbationConns connections open; a new one past that is closed while
// they are alive, young and have sent bytes, closes the oldest once it is
// past the grace, closes at once one whose client sent nothing at all
// (however young), and first of all one its client already closed; a
// connection on probation is cut after probationLife even when the header
// timeout is longer.
func TestProbation(t *testing.T) {
	f := newFixture(t, clock.Real{})
	f.serve(t, "127.0.0.1:0", nil, ListenerOptions{Limits: Limits{FailureBurst: 1, FailureEvery: time.Hour, ProbationConns: 2, ReadHeaderTimeout: 5 * time.Second}})
	const src = "127.0.0.9"
	dial := func(first string) net.Conn {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
		c, err := d.Dial("tcp", f.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if first != "" {
			if _, err := io.WriteString(c, first); err != nil {
				t.Fatal(err)
			}
		}
		return c
	}
	// closedWithin reports whether the server closed c within d.
	closedWithin := func(c net.Conn, d time.Duration) bool {
		_ = c.SetReadDeadline(time.Now().Add(d))
		_, err := c.Read(make([]byte, 1))
		ne, timeout := err.(net.Error)
		return err != nil && !(timeout && ne.Timeout())
	}
	openOn := func(want int) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			_, n := f.lis.conns.counts(src)
			if n == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d connections open from %s, want %d", n, src, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	_ = dial("").Close() // the one attempt, spent
	waitLimited(t, f.lis, src)
	openOn(0)
	// a1 and a2 begin a request (as a node daemon's ClientHello would).
	a1, a2 := dial("POST /v1/"), dial("POST /v1/")
	openOn(2)
	start := time.Now()
	if a3 := dial(""); !closedWithin(a3, 100*time.Millisecond) {
		t.Fatal("a third connection on probation was kept while the two were alive, young and sending")
	}
	if time.Since(start) < probationGrace {
		time.Sleep(probationGrace - time.Since(start)) // let a1 and a2 age past the grace
	}
	a4 := dial("")
	if !closedWithin(a1, time.Second) {
		t.Fatal("the oldest connection was not closed for a new one past the grace")
	}
	if closedWithin(a4, 100*time.Millisecond) {
		t.Fatal("the new connection was closed instead of the oldest one")
	}
	// a4 has sent nothing: the next one takes its place though it is young,
	// rather than a2's, which is older and has sent bytes.
	a5 := dial("")
	if !closedWithin(a4, time.Second) {
		t.Fatal("a connection that sent nothing kept its place for a newer one")
	}
	if closedWithin(a5, 100*time.Millisecond) {
		t.Fatal("the new connection was closed instead of the one that sent nothing")
	}
	// a2's client goes away; the next one takes its place first, before a5's.
	_ = a2.Close()
	a6 := dial("")
	if closedWithin(a6, 100*time.Millisecond) {
		t.Fatal("a connection was refused while one on the list had been closed by its client")
	}
	if closedWithin(a5, 100*time.Millisecond) {
		t.Fatal("a connection that sent nothing was closed while one on the list had been closed by its client")
	}
	// a5 is cut at probationLife, not at the 5 s header timeout.
	if !closedWithin(a5, probationLife+time.Second) {
		t.Fatal("an idle connection on probation outlived probationLife")
	}
}

// TestProbationHandshakesOneAtATime: a connection not on probation takes
// the base config at once; on probation, one handshake holds the slot, a
// second waits and gives up at the end of its life, and the slot is free
// again once the first handshake ends or its connection closes.
func TestProbationHandshakesOneAtATime(t *testing.T) {
	h := newProbationHandshakes()
	base := &tls.Config{MinVersion: tls.VersionTLS12}
	get := h.configFor(base)
	conn := func(life time.Duration) *countedConn {
		a, b := net.Pipe()
		t.Cleanup(func() { a.Close(); b.Close() })
		cl := &connLimit{bySource: map[string]int{}, onProbation: map[string][]*countedConn{}, closed: func(string, bool) {}}
		cl.open, cl.bySource["x"] = 1, 1
		cc := &countedConn{Conn: a, owner: cl, src: "x"}
		if life > 0 {
			cc.until = time.Now().Add(life)
		}
		return cc
	}
	if c, err := get(&tls.ClientHelloInfo{Conn: conn(0)}); c != nil || err != nil {
		t.Fatalf("not on probation: %v %v", c, err)
	}
	first := conn(time.Second)
	c1, err := get(&tls.ClientHelloInfo{Conn: first})
	if err != nil || c1 == nil || c1.VerifyConnection == nil {
		t.Fatalf("the first: %v %v", c1, err)
	}
	start := time.Now()
	if _, err := get(&tls.ClientHelloInfo{Conn: conn(200 * time.Millisecond)}); err != errProbationBusy {
		t.Fatalf("the second while the first holds the slot: %v", err)
	}
	if el := time.Since(start); el < 150*time.Millisecond {
		t.Fatalf("the second gave up after %s, before its life ended", el)
	}
	_ = c1.VerifyConnection(tls.ConnectionState{}) // the first handshake ends
	third := conn(time.Second)
	if _, err := get(&tls.ClientHelloInfo{Conn: third}); err != nil {
		t.Fatalf("after the first handshake ended: %v", err)
	}
	_ = third.Close() // closed mid-handshake: the slot is freed
	fourth := conn(time.Second)
	c4, err := get(&tls.ClientHelloInfo{Conn: fourth})
	if err != nil {
		t.Fatalf("after a connection holding the slot closed: %v", err)
	}
	// A connection closed while it waits for the slot (a newer one took its
	// place on probation) must not hold the slot once it gets it: nothing
	// would release it again, and every later handshake on probation would
	// wait its whole life. (The flood of `OPTIONS *` against the built
	// binary did this: after it, a node's joins on probation all failed.)
	waiting := conn(2 * time.Second)
	got := make(chan error, 1)
	go func() {
		_, err := get(&tls.ClientHelloInfo{Conn: waiting})
		got <- err
	}()
	_ = waiting.Close()                            // before or while it waits: c4 holds the slot
	_ = c4.VerifyConnection(tls.ConnectionState{}) // the slot is free: the closed one takes it
	if err := <-got; err == nil {
		t.Error("a connection closed before its handshake got a config")
	}
	if _, err := get(&tls.ClientHelloInfo{Conn: conn(300 * time.Millisecond)}); err != nil {
		t.Fatalf("after a connection closed while it waited for the slot: %v", err)
	}
}

// TestTotalCapTakesIdlePlaces: with every place in all taken by
// connections that sent nothing (from many addresses, each under its own
// cap), a node's join from another address takes the place of the oldest
// idle one past the grace instead of being closed as it is accepted; with
// every place taken by connections that have sent bytes, a new one is
// still closed. (Before, 40 addresses x 64 idle connections shut a new
// node out until the handshake timeout cut them.)
func TestTotalCapTakesIdlePlaces(t *testing.T) {
	f := newFixture(t, clock.Real{})
	cert := newCert(t, t.TempDir(), "join", nil, false)
	f.serve(t, "127.0.0.1:0", cert, ListenerOptions{Limits: Limits{MaxConns: 8, ConnsPerSource: 4}})
	tok := f.mint(t, "pool_a", "n1")
	dial := func(src, first string) net.Conn {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
		c, err := d.Dial("tcp", f.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if first != "" {
			_, _ = io.WriteString(c, first)
		}
		return c
	}
	waitOpen := func(want int) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			f.lis.mu.Lock()
			conns := f.lis.conns
			f.lis.mu.Unlock()
			n := 0
			if conns != nil {
				n, _ = conns.counts("")
			}
			if n == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d connections open, want %d", n, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	// Places held by bytes: a new connection is closed as accepted.
	var busy []net.Conn
	for i := range 8 {
		busy = append(busy, dial(fmt.Sprintf("127.0.8.%d", i/4+1), "\x16\x03\x01"))
	}
	waitOpen(8)
	time.Sleep(probationGrace) // past the grace: only bytes keep them
	if st, err := try(t.Context(), oneShot(cert, "127.0.9.1"), f.url+"v1/join", `{"poolId":"pool_a","nodeName":"n1","token":"`+tok+`"}`, ""); err == nil {
		t.Fatalf("a ninth connection was served (%d) while 8 that sent bytes held every place", st)
	}
	for _, c := range busy {
		c.Close()
	}
	waitOpen(0)
	// Places held by connections that sent nothing: the join gets one.
	var idle []net.Conn
	for i := range 8 {
		idle = append(idle, dial(fmt.Sprintf("127.0.10.%d", i/4+1), ""))
	}
	waitOpen(8)
	time.Sleep(probationGrace) // idle past the grace
	st, err := try(t.Context(), oneShot(cert, "127.0.9.2"), f.url+"v1/join", `{"poolId":"pool_a","nodeName":"n1","token":"`+tok+`"}`, "")
	if err != nil || st != 200 {
		t.Fatalf("the join while idle connections held every place: %d %v", st, err)
	}
	closed := 0
	for _, c := range idle {
		_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); err != nil {
			if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
				closed++
			}
		}
	}
	if closed != 1 {
		t.Errorf("%d idle connections were closed for the join, want 1 (the oldest)", closed)
	}
}
