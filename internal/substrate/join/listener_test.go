package join

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/clock"
)

// TestListener: both routes and every refusal, over real TLS (a
// certificate made here) and over plain HTTP.
func TestListener(t *testing.T) {
	for _, secure := range []bool{true, false} {
		t.Run(map[bool]string{true: "tls", false: "insecure"}[secure], func(t *testing.T) {
			f := newFixture(t, clock.Real{})
			var cert *testCert
			if secure {
				cert = newCert(t, t.TempDir(), "join", nil, false)
			}
			f.serve(t, "127.0.0.1:0", cert, ListenerOptions{HeartbeatEvery: 15 * time.Second})
			c := client(cert, "")
			tok := f.mint(t, "pool_a", "n1", "n2")
			joinBody := func(node, token string) string {
				return fmt.Sprintf(`{"poolId":"pool_a","nodeName":%q,"token":%q}`, node, token)
			}
			status, body, resp := post(t, c, f.url+"v1/join", joinBody("n1", tok), "")
			var ans struct{ NodeKey, HeartbeatEvery string }
			if status != 200 || json.Unmarshal([]byte(body), &ans) != nil || len(ans.NodeKey) < 43 || ans.HeartbeatEvery != "15s" {
				t.Fatalf("join: %d %s", status, body)
			}
			if resp.Proto != "HTTP/1.1" || resp.Header.Get("Cache-Control") != "no-store" {
				t.Fatalf("join answered over %s, Cache-Control %q", resp.Proto, resp.Header.Get("Cache-Control"))
			}
			if secure && (resp.TLS == nil || resp.TLS.NegotiatedProtocol == "h2") {
				t.Fatalf("TLS %+v", resp.TLS)
			}
			k1 := ans.NodeKey
			_, body, _ = post(t, c, f.url+"v1/join", joinBody("n2", tok), "")
			_ = json.Unmarshal([]byte(body), &ans)
			k2 := ans.NodeKey
			hb := `{"poolId":"pool_a","nodeName":"n1"}`
			badKey := offByOne(k1)
			if status, body, _ := post(t, c, f.url+"v1/heartbeat", hb, k1); status != 204 || body != "" {
				t.Fatalf("heartbeat: %d %q", status, body)
			}
			cases := []struct {
				name, path, body, bearer string
				status                   int
				code                     string
			}{
				{"a reused token", "v1/join", joinBody("n1", tok), "", 401, CodeTokenUsed},
				{"a bad token", "v1/join", joinBody("n1", "nope"), "", 401, CodeTokenUnknown},
				{"a name not allowed", "v1/join", joinBody("n9", tok), "", 403, CodeNameNotAllowed},
				{"another node's key", "v1/heartbeat", hb, k2, 403, CodeKeyOtherNode},
				{"no key", "v1/heartbeat", hb, "", 401, CodeKeyUnknown},
				{"a bad key", "v1/heartbeat", hb, badKey, 401, CodeKeyUnknown},
				{"not JSON", "v1/join", `{"poolId":`, "", 400, CodeInvalidRequest},
				{"a body too large", "v1/join", `{"poolId":"` + strings.Repeat("a", 5000) + `"}`, "", 413, CodeBodyTooLarge},
				{"another route", "v1/status", "{}", "", 404, CodeNotFound},
				{"a route below", "v1/join/x", "{}", "", 404, CodeNotFound},
			}
			for _, tc := range cases {
				status, body, resp := post(t, c, f.url+tc.path, tc.body, tc.bearer)
				var ref map[string]string
				if err := json.Unmarshal([]byte(body), &ref); err != nil || status != tc.status || ref["code"] != tc.code || ref["reason"] == "" || len(ref) != 2 {
					t.Errorf("%s: %d %s", tc.name, status, body)
				}
				if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
					t.Errorf("%s: Content-Type %q", tc.name, ct)
				}
			}
			// Another method on a route is no route either.
			resp, err := c.Get(f.url + "v1/join")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 404 {
				t.Fatalf("GET /v1/join: %d", resp.StatusCode)
			}
			// Refusals changed nothing: n1 and n2 joined, each key its own.
			nodes, _ := f.store.Joined(t.Context(), "pool_a")
			if len(nodes) != 2 || f.metrics.joinedN("pool_a") != 2 {
				t.Fatalf("joined %+v, metrics %v", nodes, f.metrics)
			}
			if f.metrics.refusedN("join "+CodeTokenUsed) != 1 || f.metrics.refusedN("other "+CodeNotFound) != 3 || f.metrics.refusedN("heartbeat "+CodeKeyUnknown) != 2 {
				t.Fatalf("refusals counted: %v", f.metrics)
			}
			logs := f.logs.String()
			for _, code := range []string{CodeTokenUsed, CodeNameNotAllowed, CodeKeyOtherNode, CodeBodyTooLarge, CodeNotFound} {
				if !strings.Contains(logs, `"code":"`+code+`"`) {
					t.Errorf("refusal %s not logged", code)
				}
			}
			for _, s := range []string{tok, k1, k2} {
				if strings.Contains(logs, s) {
					t.Fatalf("a token or key is in the log:\n%s", logs)
				}
			}
		})
	}
}

// request sends one request to the handler as if from src.
func request(l *Listener, src, path, body, bearer string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	r.RemoteAddr = src
	if bearer != "" {
		r.Header.Set("Authorization", "Bearer "+bearer)
	}
	w := httptest.NewRecorder()
	l.ServeHTTP(w, r)
	return w
}

// TestRateLimit: failures spend a source's bucket (20, then one every 3 s),
// successes do not; a limited source is refused 429 for anything but a
// request that succeeds (a good token still joins: it is served from a
// budget of its own, and gives nothing back to the source's bucket); other
// sources are not touched; an IPv6 /64 is one source; 429s are logged once
// per source per 10 s.
func TestRateLimit(t *testing.T) {
	clk := clock.NewFake(t0)
	f := newFixture(t, clk)
	l := NewListener(ListenerOptions{Store: f.store, Log: f.log(), Metrics: f.metrics, Clock: clk})
	tok := f.mint(t, "pool_a", "n1", "n2")
	bad := `{"poolId":"pool_a","nodeName":"n1","token":"bad"}`
	good := `{"poolId":"pool_a","nodeName":"n1","token":"` + tok + `"}`
	const a, b = "192.0.2.1:4000", "192.0.2.2:4000"
	for i := range 20 {
		if w := request(l, a, JoinPath, bad, ""); w.Code != 401 {
			t.Fatalf("failure %d: %d", i+1, w.Code)
		}
	}
	w := request(l, "192.0.2.1:5000", JoinPath, bad, "")
	if w.Code != 429 || w.Header().Get("Retry-After") != "3" || w.Header().Get("Connection") != "close" || !strings.Contains(w.Body.String(), CodeRateLimited) {
		t.Fatalf("the 21st: %d %q %s", w.Code, w.Header().Get("Retry-After"), w.Body)
	}
	if w := request(l, "192.0.2.1:5000", JoinPath, good, ""); w.Code != 200 {
		t.Fatalf("a good join from a limited source: %d %s", w.Code, w.Body)
	}
	if nodes, _ := f.store.Joined(t.Context(), "pool_a"); len(nodes) != 1 {
		t.Fatalf("joined: %v", nodes)
	}
	if w := request(l, a, JoinPath, bad, ""); w.Code != 429 {
		t.Fatalf("after the good join, still limited: %d", w.Code)
	}
	if w := request(l, b, JoinPath, bad, ""); w.Code != 401 {
		t.Fatalf("another source: %d", w.Code)
	}
	clk.Advance(3 * time.Second) // one attempt back
	if w := request(l, a, JoinPath, bad, ""); w.Code != 401 {
		t.Fatalf("after 3 s: %d", w.Code)
	}
	for range 5 {
		if w := request(l, a, JoinPath, bad, ""); w.Code != 429 {
			t.Fatalf("still limited: %d", w.Code)
		}
	}
	if n := strings.Count(f.logs.String(), `"code":"rateLimited"`); n != 1 {
		t.Fatalf("%d lines for the 429s of one source within 10 s", n)
	}
	clk.Advance(10 * time.Second) // 3 attempts back: 3 failures, then 2 more 429s
	for i := range 5 {
		if w := request(l, a, JoinPath, bad, ""); w.Code != map[bool]int{true: 401, false: 429}[i < 3] {
			t.Fatalf("10 s later, attempt %d: %d", i+1, w.Code)
		}
	}
	if logs := f.logs.String(); strings.Count(logs, `"code":"rateLimited"`) != 2 || !strings.Contains(logs, `"heldBack":6`) {
		t.Fatalf("the second line: %s", logs)
	}
	// Successes never spend: a node beating from a busy NAT address.
	var key string
	{
		w := request(l, "192.0.2.9:1", JoinPath, `{"poolId":"pool_a","nodeName":"n2","token":"`+tok+`"}`, "")
		var ans joinAnswer
		_ = json.Unmarshal(w.Body.Bytes(), &ans)
		key = ans.NodeKey
	}
	for i := range 100 {
		if w := request(l, "192.0.2.9:1", HeartbeatPath, `{"poolId":"pool_a","nodeName":"n2"}`, key); w.Code != 204 {
			t.Fatalf("beat %d: %d", i, w.Code)
		}
	}
	// IPv6: one /64 is one source.
	for i := range 20 {
		request(l, fmt.Sprintf("[2001:db8::%x]:1", i+1), JoinPath, bad, "")
	}
	if w := request(l, "[2001:db8::ffff]:1", JoinPath, bad, ""); w.Code != 429 {
		t.Fatalf("the same /64: %d", w.Code)
	}
	if w := request(l, "[2001:db8:0:1::1]:1", JoinPath, bad, ""); w.Code != 401 {
		t.Fatalf("another /64: %d", w.Code)
	}
	if f.metrics.refusedN("join "+CodeRateLimited) != 1+1+5+2+1 {
		t.Fatalf("429s counted: %v", f.metrics)
	}
}

// TestLimiterSources: past MaxSources, buckets that refilled are dropped,
// and when none can go a new source shares one of the overflow buckets,
// picked by a keyed hash: sources that hash elsewhere keep their attempts.
func TestLimiterSources(t *testing.T) {
	clk := clock.NewFake(t0)
	lim := newLimiter(clk, Limits{FailureBurst: 2, FailureEvery: time.Second, MaxSources: 2})
	spend := func(src string) bool { _, ok, _ := lim.take(src); return ok }
	spend("a")
	spend("b")
	// Full: c spends its overflow bucket; d, which hashes to another one,
	// is not touched; e, hashing to c's, shares it.
	d, e := "", ""
	for i := 0; d == "" || e == ""; i++ {
		src := fmt.Sprintf("192.0.2.%d", i)
		if lim.overflowOf(src) == lim.overflowOf("c") {
			if e == "" && src != "c" {
				e = src
			}
		} else if d == "" {
			d = src
		}
	}
	// Spent one at a time: each call takes an attempt.
	for i, want := range []bool{true, true, false} {
		if spend("c") != want {
			t.Fatalf("the overflow bucket of c: attempt %d", i+1)
		}
	}
	for i := range 2 {
		if !spend(d) {
			t.Fatalf("a newcomer in another overflow bucket was limited with c (attempt %d)", i+1)
		}
	}
	if spend(e) {
		t.Fatal("a newcomer in c's overflow bucket had attempts of its own")
	}
	clk.Advance(2 * time.Second) // a and b refilled: swept for f
	if !spend("f") || len(lim.buckets) != 1 {
		t.Fatalf("after the sweep: %d buckets", len(lim.buckets))
	}
	for _, c := range []struct{ in, want string }{
		{"192.0.2.1:80", "192.0.2.1"},
		{"[::ffff:192.0.2.1]:80", "192.0.2.1"},
		{"[2001:db8:1:2:3:4:5:6]:80", "2001:db8:1:2::/64"},
		{"[fe80::1%eth0]:80", "fe80::/64"},
		{"pipe", "pipe"},
	} {
		if got := sourceOf(c.in); got != c.want {
			t.Errorf("sourceOf(%s) = %s, want %s", c.in, got, c.want)
		}
	}
}

// TestConnLimits: connections past the per-source or the total cap are
// closed as they are accepted; a closed one frees its place. (The held ones
// begin a request: past the total cap, idle ones give their places,
// TestTotalCapTakesIdlePlaces.)
func TestConnLimits(t *testing.T) {
	f := newFixture(t, clock.Real{})
	f.serve(t, "127.0.0.1:0", nil, ListenerOptions{Limits: Limits{ConnsPerSource: 3, MaxConns: 5}})
	dial := func(from string) net.Conn {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		c, err := d.Dial("tcp", f.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_, _ = io.WriteString(c, "POST /v1/")
		return c
	}
	// open reports whether the server keeps c open (a read times out)
	// rather than closing it (EOF).
	open := func(c net.Conn) bool {
		_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		_, err := c.Read(make([]byte, 1))
		ne, ok := err.(net.Error)
		return ok && ne.Timeout()
	}
	var kept []net.Conn
	for range 3 {
		kept = append(kept, dial("127.0.0.2"))
	}
	extra := dial("127.0.0.2")
	if !open(kept[0]) || open(extra) {
		t.Fatal("the per-source cap")
	}
	dial("127.0.0.3")
	dial("127.0.0.3")
	if over := dial("127.0.0.4"); open(over) {
		t.Fatal("the total cap")
	}
	kept[0].Close()
	time.Sleep(100 * time.Millisecond)
	if again := dial("127.0.0.2"); !open(again) {
		t.Fatal("a closed connection did not free its place")
	}
	if n := f.metrics.refusedN("other " + CodeTooManyConnections); n != 2 {
		t.Fatalf("%d connections counted refused", n)
	}
	if total, src := f.lis.conns.counts("127.0.0.2"); total != 5 || src != 3 {
		t.Fatalf("open: %d in all, %d of the source", total, src)
	}
}

// TestCertificateReload: a certificate replaced on disk is served from the
// first handshake 10 s later; one that does not load leaves the previous.
func TestCertificateReload(t *testing.T) {
	clk := clock.NewFake(t0)
	f := newFixture(t, clk)
	dir := t.TempDir()
	first := newCert(t, dir, "join", nil, false)
	f.serve(t, "127.0.0.1:0", first, ListenerOptions{})
	served := func() string {
		conn, err := (&net.Dialer{}).DialContext(t.Context(), "tcp", f.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		tc := tlsClient(conn)
		if err := tc.HandshakeContext(t.Context()); err != nil {
			t.Fatal(err)
		}
		return Pin(tc.ConnectionState().PeerCertificates[0])
	}
	if served() != first.pin {
		t.Fatal("not the first certificate")
	}
	second := newCert(t, dir, "join", nil, false) // same files, a new key
	if served() != first.pin {
		t.Fatal("reloaded before 10 s")
	}
	clk.Advance(10 * time.Second)
	if served() != second.pin {
		t.Fatal("the renewed certificate is not served")
	}
	if err := os.WriteFile(second.certFile, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	clk.Advance(10 * time.Second)
	if served() != second.pin || !strings.Contains(f.logs.String(), "does not load") {
		t.Fatal("a broken certificate replaced a good one")
	}
}

// TestServeRefusesABadCertificate: Serve says which files did not load.
func TestServeRefusesABadCertificate(t *testing.T) {
	f := newFixture(t, clock.Real{})
	l := NewListener(ListenerOptions{Store: f.store})
	dir := t.TempDir()
	err := l.Serve(t.Context(), configJoin("127.0.0.1:0", dir+"/none.crt", dir+"/none.key"))
	if err == nil || !strings.Contains(err.Error(), "substrate.join.tlsCert") {
		t.Fatalf("Serve: %v", err)
	}
	err = l.Serve(t.Context(), configJoin("256.0.0.1:1", "", ""))
	if err == nil || !strings.Contains(err.Error(), "substrate.join.listen") {
		t.Fatalf("Serve: %v", err)
	}
}

// TestFailedConnectionsSpend: a connection that ends before any request
// (nothing sent, a failed handshake) spends an attempt of its address; one
// that carried requests spends only what they failed; an address with none
// left is answered 429 (on probation: TestProbation).
func TestFailedConnectionsSpend(t *testing.T) {
	f := newFixture(t, clock.Real{})
	cert := newCert(t, t.TempDir(), "join", nil, false)
	f.serve(t, "127.0.0.1:0", cert, ListenerOptions{Limits: Limits{FailureBurst: 3, FailureEvery: time.Hour, ReadHeaderTimeout: 200 * time.Millisecond}})
	from := func(ip string) *net.Dialer { return &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}} }
	// closedAfter dials from ip, sends what, and says how soon the server
	// closed the connection.
	closedAfter := func(ip string, what []byte) time.Duration {
		c, err := from(ip).Dial("tcp", f.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		start := time.Now()
		if what != nil {
			_, _ = c.Write(what)
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, _ = io.Copy(io.Discard, c)
		return time.Since(start)
	}
	// Two requests that fail on their own connections: two attempts.
	c := client(cert, "127.0.0.5")
	c.Transport.(*http.Transport).DisableKeepAlives = true
	for range 2 {
		if status, _, _ := post(t, c, f.url+"v1/nothing", "{}", ""); status != 404 {
			t.Fatal(status)
		}
	}
	// A connection that never sends a ClientHello: cut at the header
	// timeout, and the third attempt.
	if d := closedAfter("127.0.0.5", nil); d < 150*time.Millisecond {
		t.Fatalf("an idle connection was closed after %s, before the timeout: spent twice?", d)
	}
	waitLimited(t, f.lis, "127.0.0.5")
	// None left: a request that fails is answered 429, on probation.
	if status, _, _ := post(t, c, f.url+"v1/nothing", "{}", ""); status != 429 {
		t.Fatalf("with no attempt left: %d", status)
	}
	if n := f.metrics.refusedN("other " + CodeRateLimited); n != 1 {
		t.Fatalf("%d requests refused as rate-limited", n)
	}
	// A garbage handshake spends too; another address is not touched.
	closedAfter("127.0.0.6", []byte("GET / HTTP/1.0\r\n\r\n"))
	closedAfter("127.0.0.6", []byte("\x16\x03\x01\x00\x05hello"))
	if status, _, _ := post(t, client(cert, "127.0.0.6"), f.url+"v1/nothing", "{}", ""); status != 404 {
		t.Fatalf("the third attempt of 127.0.0.6: %d", status)
	}
	waitLimited(t, f.lis, "127.0.0.6")
	if status, _, _ := post(t, c, f.url+"v1/nothing", "{}", ""); status != 429 {
		t.Fatalf("127.0.0.5 again: %d", status)
	}
}
