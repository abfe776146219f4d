package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/forge"
	"github.com/fleet-agent/fleet-agent/internal/localapi"
)

// The hostile-input suite: the running agent (`run` in-process, its real
// ops listener, webhook and socket) under the attacks an outsider on the
// ops listener's network, or a local user allowed on the socket, can make.
// Each attack asserts that a good client still gets its answer during it
// (or, where the attack may hold what it attacks, right after it is cut)
// and that the process's heap in use grows by less than a stated bound at
// its peak. The process holds the git server and the GitHub emulator too:
// the bounds are on growth over the attack, sampled every 5 ms.

// heapWatch samples HeapInuse until stopped and keeps its peak.
type heapWatch struct {
	base uint64
	stop chan struct{}
	peak chan uint64
}

func watchHeap() *heapWatch {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	h := &heapWatch{base: ms.HeapInuse, stop: make(chan struct{}), peak: make(chan uint64, 1)}
	go func() {
		peak := ms.HeapInuse
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-h.stop:
				h.peak <- peak
				return
			case <-tick.C:
				runtime.ReadMemStats(&ms)
				peak = max(peak, ms.HeapInuse)
			}
		}
	}()
	return h
}

// done stops the watch and fails the test when the peak grew by more than
// boundMiB over the heap before the attack.
func (h *heapWatch) done(t *testing.T, what string, boundMiB uint64) {
	t.Helper()
	close(h.stop)
	peak := <-h.peak
	grown := (max(peak, h.base) - h.base) >> 20
	t.Logf("%s: heap in use %d MiB before, peak %d MiB (+%d MiB; bound +%d MiB)", what, h.base>>20, peak>>20, grown, boundMiB)
	if grown > boundMiB {
		t.Errorf("%s: the heap grew by %d MiB at its peak, over the bound of %d MiB", what, grown, boundMiB)
	}
}

// hostile is the running agent and its good clients.
type hostile struct {
	r      *runningAgent
	socket string
	// seq makes every good delivery's id new, so none is a replay.
	mu  sync.Mutex
	seq int
}

func (h *hostile) goodOps(t *testing.T) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for _, path := range []string{"/healthz", "/status"} {
		resp, err := c.Get("http://" + h.r.ops + path)
		if err != nil {
			t.Fatalf("a good client of the ops listener (%s) was not answered: %v", path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("a good client of the ops listener (%s) was answered %d", path, resp.StatusCode)
		}
	}
}

func (h *hostile) goodSocket(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	var st localapi.StatusView
	if err := localapi.NewClient(h.socket).Do(ctx, "GET", "/v1/status", nil, &st); err != nil || st.TenantID != "root" {
		t.Fatalf("a good client of the socket was not answered: %v %+v", err, st)
	}
}

// hook posts a signed delivery and returns its answer's status (0 when the
// connection failed).
func (h *hostile) hook(t *testing.T, body []byte, id string) int {
	t.Helper()
	req, _ := http.NewRequest("POST", "http://"+h.r.ops+"/hooks/github", bytes.NewReader(body))
	req.Header.Set(forge.SignatureHeader, forge.Sign([]byte(hookSecret), body))
	req.Header.Set("X-GitHub-Event", "push")
	req.Header.Set("X-GitHub-Delivery", id)
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// goodHook is a new signed delivery, answered 204 within limit (the
// webhook answers 503 while its slots are held).
func (h *hostile) goodHook(t *testing.T, limit time.Duration) {
	t.Helper()
	h.mu.Lock()
	h.seq++
	id := fmt.Sprintf("good-%d", h.seq)
	h.mu.Unlock()
	var code int
	waitFor(t, "a good delivery to be answered 204", limit, func() bool {
		code = h.hook(t, []byte(`{"ref":"refs/heads/main"}`), id)
		return code == http.StatusNoContent
	})
}

func rawLoc(addr, network, request string) (int, string, string, error) {
	return rawLocBytes(addr, network, []byte(request))
}

// rawLocBytes is rawLoc for a request already in bytes: an attack that
// sends one big request many times shares it rather than copy it each time.
func rawLocBytes(addr, network string, request []byte) (int, string, string, error) {
	c, err := net.DialTimeout(network, addr, 5*time.Second)
	if err != nil {
		return 0, "", "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(request); err != nil {
		return 0, "", "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, "", "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, string(b), resp.Header.Get("Location"), nil
}

func TestHostileInput(t *testing.T) {
	r := startRunning(t, "1s")
	h := &hostile{r: r, socket: filepath.Join(filepath.Dir(r.path), "api.sock")}
	h.goodOps(t)
	h.goodSocket(t)
	h.goodHook(t, 5*time.Second)

	t.Run("oversized headers", func(t *testing.T) {
		w := watchHeap()
		big := strings.Repeat("a", 128<<10)
		for _, c := range []struct{ name, network, addr, path string }{
			{"ops", "tcp", r.ops, "/healthz"},
			{"webhook", "tcp", r.ops, "/hooks/github"},
			{"socket", "unix", h.socket, "/v1/ping"},
		} {
			// One request string for the twenty: the heap watched is this
			// process's, so the attack's own copies would count against the
			// agent.
			req := []byte("GET " + c.path + " HTTP/1.1\r\nHost: agent\r\nX-Big: " + big + "\r\n\r\n")
			var wg sync.WaitGroup
			codes := make(chan int, 20)
			for range 20 {
				wg.Go(func() {
					code, _, _, _ := rawLocBytes(c.addr, c.network, req)
					codes <- code
				})
			}
			h.goodOps(t)
			h.goodSocket(t)
			wg.Wait()
			close(codes)
			for code := range codes {
				if code != http.StatusRequestHeaderFieldsTooLarge {
					t.Errorf("%s: a 128 KiB header was answered %d, want 431", c.name, code)
				}
			}
		}
		h.goodHook(t, 5*time.Second)
		w.done(t, "60 requests with a 128 KiB header", 16)
	})

	t.Run("oversized bodies", func(t *testing.T) {
		w := watchHeap()
		// Over the webhook's 25 MiB: said up front (413 at once), or sent
		// chunked and cut at the cap; bad signatures, as an outsider has.
		over := int64(forge.MaxWebhookBody + 1<<20)
		var wg sync.WaitGroup
		codes := make(chan string, 16)
		for i := range 8 {
			wg.Go(func() {
				req, _ := http.NewRequest("POST", "http://"+r.ops+"/hooks/github", io.LimitReader(zeros{}, over))
				if i%2 == 0 {
					req.ContentLength = over
				} else {
					req.ContentLength = -1 // chunked
				}
				req.Header.Set(forge.SignatureHeader, "sha256="+strings.Repeat("00", 32))
				resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
				if err != nil {
					codes <- "cut" // the webhook closes a connection it refused
					return
				}
				resp.Body.Close()
				codes <- fmt.Sprint(resp.StatusCode)
			})
		}
		h.goodOps(t)
		h.goodSocket(t)
		wg.Wait()
		close(codes)
		for code := range codes {
			if code != "413" && code != "503" && code != "cut" {
				t.Errorf("a webhook body over 25 MiB was answered %s, want 413 (or 503 while the slots are full)", code)
			}
		}
		h.goodHook(t, 10*time.Second)
		w.done(t, "8 webhook bodies of 26 MiB, half chunked", 16)

		// The socket reads a request of at most 32 MiB (a 16 MiB document
		// as base64), whose length is given: 8 at once of 33 MiB, or chunked,
		// are refused INVALID_INPUT unread (or cut while still sending).
		refused := func(code int, body string, want int, says string) bool {
			if code == 0 && (strings.Contains(body, "broken pipe") || strings.Contains(body, "connection reset")) {
				return true
			}
			return code == want && strings.Contains(body, "INVALID_INPUT") && strings.Contains(body, says)
		}
		w = watchHeap()
		for i := range 8 {
			wg.Go(func() {
				code, body := h.socketPost(t, "/v1/plan-document", `{"name":"x","document":"`, 33<<20, 'A', `"}`, i%2 == 1)
				if !refused(code, body, http.StatusBadRequest, "too large") && !refused(code, body, http.StatusLengthRequired, "Content-Length") {
					t.Errorf("a 33 MiB request on the socket: %d %s", code, body)
				}
			})
		}
		h.goodOps(t)
		h.goodSocket(t)
		wg.Wait()
		w.done(t, "8 socket requests of 33 MiB, half chunked", 16)
		// 2 at once of the largest size read (32 MiB of a document that is
		// not base64) take their turns, one at a time. The socket's read
		// limit (a minute) counts the wait in line, so more in line
		// measure the machine: eight took over a minute in turn under the
		// race detector on a busy machine, and four did at three times
		// the load of two cores.
		w = watchHeap()
		for range 2 {
			wg.Go(func() {
				code, body := h.socketPost(t, "/v1/plan-document", `{"name":"x","document":"`, 32<<20-64, '!', `"}`, false)
				if !refused(code, body, http.StatusBadRequest, "bad request") {
					t.Errorf("a 32 MiB request on the socket that is not base64: %d %s", code, body)
				}
			})
		}
		h.goodOps(t)
		h.goodSocket(t)
		wg.Wait()
		w.done(t, "2 socket requests of 32 MiB, one at a time", 160)
	})
}

func TestHostileClients(t *testing.T) {
	r := startRunning(t, "1s")
	h := &hostile{r: r, socket: filepath.Join(filepath.Dir(r.path), "api.sock")}
	h.goodHook(t, 5*time.Second)

	t.Run("slow headers and slow bodies", func(t *testing.T) {
		w := watchHeap()
		stop := make(chan struct{})
		// trickle sends s a byte every gap until the server closes the
		// connection, and tells when that was and the status line it was
		// answered with, if any.
		type cut struct {
			what string
			took time.Duration
			err  error
		}
		cuts := make(chan cut, 200)
		trickleOnce := func(what, network, addr, head, s string) (cut, string) {
			c, err := net.Dial(network, addr)
			if err != nil {
				return cut{what, 0, err}, ""
			}
			defer c.Close()
			start := time.Now()
			if _, err := io.WriteString(c, head); err != nil {
				return cut{what, time.Since(start), nil}, ""
			}
			closed := make(chan struct{})
			var status string
			go func() {
				line, _ := bufio.NewReader(c).ReadString('\n')
				status = strings.TrimSpace(line)
				_, _ = io.Copy(io.Discard, c)
				close(closed)
			}()
			tick := time.NewTicker(500 * time.Millisecond)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-closed:
					return cut{what, time.Since(start), nil}, status
				case <-stop:
					return cut{what, time.Since(start), fmt.Errorf("still open after %v", time.Since(start).Round(time.Second))}, ""
				case <-tick.C:
					_, _ = c.Write([]byte{s[i%len(s)]})
				}
			}
		}
		trickle := func(what, network, addr, head, s string) {
			c, _ := trickleOnce(what, network, addr, head, s)
			cuts <- c
		}
		var wg sync.WaitGroup
		const hookHead = "POST /hooks/github HTTP/1.1\r\nHost: agent\r\n" + forge.SignatureHeader + ": sha256=00\r\nContent-Length: 100000\r\n\r\n"
		// The webhook's slots are taken first, and seen taken (a probe
		// answered 503), before anything else competes for the machine:
		// the two clients after them then meet no slot, whatever the load.
		// The probe takes a slot itself while it is answered, so a holder
		// arriving then is refused 503 at once; a holder refused comes
		// back until every slot is held, and is then measured from the
		// attempt that held. The holders keep their slots until their
		// read timeout, so the probe has that long; not seeing every slot
		// held is a failure.
		allHeld := make(chan struct{})
		var cameBack atomic.Int32
		for range forge.MaxWebhookInFlight {
			wg.Go(func() {
				for {
					c, status := trickleOnce("webhook body", "tcp", r.ops, hookHead, "{")
					refused := strings.Contains(status, " 503 ")
					select {
					case <-allHeld:
						refused = false
					default:
					}
					if !refused || c.err != nil {
						cuts <- c
						return
					}
					cameBack.Add(1)
				}
			})
		}
		held := false
		for deadline := time.Now().Add(forge.WebhookReadTimeout); !held && time.Now().Before(deadline); {
			held = h.hook(t, []byte("{}"), "probe") == http.StatusServiceUnavailable
		}
		close(allHeld)
		t.Logf("webhook holders refused while the probe held a slot, and back: %d", cameBack.Load())
		if !held {
			t.Errorf("the %d slow webhook bodies never held every slot within %v", forge.MaxWebhookInFlight, forge.WebhookReadTimeout)
		}
		webhook := func(what string) { trickle(what, "tcp", r.ops, hookHead, "{") }
		for range 2 {
			wg.Go(func() { webhook("webhook body without a slot") })
		}
		for range 50 {
			wg.Go(func() {
				trickle("ops header", "tcp", r.ops, "GET /healthz HTTP/1.1\r\n", "X-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")
			})
			wg.Go(func() {
				trickle("socket header", "unix", h.socket, "GET /v1/ping HTTP/1.1\r\n", "X-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")
			})
		}
		for range 20 {
			wg.Go(func() {
				trickle("ops body", "tcp", r.ops, "POST /status HTTP/1.1\r\nHost: agent\r\nContent-Length: 100000\r\n\r\n", "aaaa")
			})
			wg.Go(func() {
				trickle("socket body", "unix", h.socket, "POST /v1/plan HTTP/1.1\r\nHost: agent\r\nContent-Length: 100000\r\n\r\n", `{"commit":"aaaaaaaa`)
			})
		}
		// During: the ops listener and the socket answer.
		h.goodOps(t)
		h.goodSocket(t)
		// Each is cut within its limit: a header within 10 s, a webhook
		// body within 20 s, a request on the ops listener within 30 s, on
		// the socket within 1 min.
		limits := map[string]time.Duration{"ops header": 10 * time.Second, "socket header": 10 * time.Second,
			"webhook body": forge.WebhookReadTimeout, "webhook body without a slot": time.Second,
			"ops body": 30 * time.Second, "socket body": time.Minute}
		timer := time.AfterFunc(time.Minute+5*time.Second, func() { close(stop) })
		wg.Wait()
		timer.Stop()
		close(cuts)
		worst := map[string]time.Duration{}
		for c := range cuts {
			if c.err != nil {
				t.Errorf("%s: %v", c.what, c.err)
				continue
			}
			worst[c.what] = max(worst[c.what], c.took)
		}
		for what, took := range worst {
			t.Logf("%s a byte every 500 ms: cut after at most %v (limit %v)", what, took.Round(100*time.Millisecond), limits[what])
			if took > limits[what]+3*time.Second {
				t.Errorf("%s: held for %v, over its limit of %v", what, took.Round(100*time.Millisecond), limits[what])
			}
		}
		// After: the webhook's slots are free again.
		h.goodHook(t, 5*time.Second)
		h.goodSocket(t)
		w.done(t, "230 slow clients", 32)
	})

	t.Run("many connections", func(t *testing.T) {
		w := watchHeap()
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for _, l := range []struct {
			network, addr string
			n             int
		}{{"tcp", r.ops, 1000}, {"unix", h.socket, 300}} {
			for range l.n {
				c, err := net.DialTimeout(l.network, l.addr, 5*time.Second)
				if err != nil {
					t.Fatalf("connection %d to %s: %v", len(conns), l.addr, err)
				}
				conns = append(conns, c)
			}
		}
		h.goodOps(t)
		h.goodSocket(t)
		h.goodHook(t, 5*time.Second)
		w.done(t, "1,000 idle connections to the ops listener and 300 to the socket", 48)
	})

	t.Run("replayed deliveries", func(t *testing.T) {
		w := watchHeap()
		body := []byte(`{"ref":"refs/heads/main","after":"0000000000000000000000000000000000000000"}`)
		counts := map[int]int{}
		for range 100 {
			counts[h.hook(t, body, "replayed-1")]++
		}
		if counts[http.StatusNoContent] != 1 || counts[http.StatusOK] != 99 {
			t.Errorf("100 posts of one delivery: %v; want one 204 and 99 200s", counts)
		}
		h.goodHook(t, 5*time.Second)
		h.goodOps(t)
		w.done(t, "100 replays of one signed delivery", 16)
	})

	t.Run("malformed input", func(t *testing.T) {
		w := watchHeap()
		body := []byte(`{"ref":`)
		for sig, want := range map[string]int{
			"":                                   http.StatusUnauthorized,
			"sha256=zz":                          http.StatusUnauthorized,
			"sha1=" + strings.Repeat("00", 20):   http.StatusUnauthorized,
			"sha256=" + strings.Repeat("00", 32): http.StatusUnauthorized,
			forge.Sign([]byte(hookSecret), body): http.StatusNoContent, // the payload is never read
		} {
			req, _ := http.NewRequest("POST", "http://"+r.ops+"/hooks/github", bytes.NewReader(body))
			if sig != "" {
				req.Header.Set(forge.SignatureHeader, sig)
			}
			req.Header.Set("X-GitHub-Delivery", "malformed-"+sig)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != want {
				t.Errorf("a webhook signed %q: %d, want %d", sig, resp.StatusCode, want)
			}
		}
		for _, b := range []string{`{"commit":`, `[1,2]`, `{"commit":"a"}{"commit":"b"}`, `{"commit":1}`, `{"commit":"\ud800"}x`,
			strings.Repeat("[", 100000) + strings.Repeat("]", 100000), `{"commit":"a","planHash":"b","by":"x","extra":true}`} {
			code, out := h.socketPost(t, "/v1/apply", b, 0, 0, "", false)
			if code != http.StatusBadRequest || !strings.Contains(out, "INVALID_INPUT") {
				t.Errorf("malformed JSON %.40q on the socket: %d %s", b, code, out)
			}
		}
		h.goodOps(t)
		h.goodSocket(t)
		h.goodHook(t, 5*time.Second)
		w.done(t, "malformed deliveries and requests", 16)
	})

	t.Run("odd paths and methods", func(t *testing.T) {
		w := watchHeap()
		const canary = "canary-header-value"
		for _, l := range []struct {
			name, network, addr, path string
		}{{"ops", "tcp", r.ops, "/status"}, {"socket", "unix", h.socket, "/v1/status"}} {
			for _, req := range []string{
				"OPTIONS * HTTP/1.1\r\nHost: agent\r\n\r\n",
				"TRACE / HTTP/1.1\r\nHost: agent\r\nX-Canary: " + canary + "\r\n\r\n",
				"TRACE " + l.path + " HTTP/1.1\r\nHost: agent\r\nX-Canary: " + canary + "\r\n\r\n",
				"CONNECT 127.0.0.1:22 HTTP/1.1\r\nHost: 127.0.0.1:22\r\n\r\n",
				"GET http://evil.example" + l.path + "/../x HTTP/1.1\r\nHost: agent\r\n\r\n",
				"GET /ui/../../../../etc/passwd HTTP/1.1\r\nHost: agent\r\n\r\n",
				"GET /ui/..%2f..%2f..%2fetc%2fpasswd HTTP/1.1\r\nHost: agent\r\n\r\n",
				"GET /v1/..%2f..%2fetc/passwd HTTP/1.1\r\nHost: agent\r\n\r\n",
				"GET //evil.example/ HTTP/1.1\r\nHost: agent\r\n\r\n",
				"GET /debug/pprof/ HTTP/1.1\r\nHost: agent\r\n\r\n",
				"DELETE " + l.path + " HTTP/1.1\r\nHost: agent\r\n\r\n",
				"GET /\x00 HTTP/1.1\r\nHost: agent\r\n\r\n",
				"GET / HTTP/9.9\r\nHost: agent\r\n\r\n",
				"BREW /pot HTTP/1.1\r\nHost: agent\r\n\r\n",
			} {
				line, _, _ := strings.Cut(req, "\r\n")
				code, body, loc, err := rawLoc(l.addr, l.network, req)
				if err != nil {
					t.Errorf("%s: %q ended without an answer: %v", l.name, line, err)
					continue
				}
				if code == http.StatusOK || (code >= 500 && code != http.StatusHTTPVersionNotSupported) {
					t.Errorf("%s: %q answered %d: %.200s", l.name, line, code, body)
				}
				if strings.Contains(body, canary) || strings.Contains(body, "root:") {
					t.Errorf("%s: %q echoed what it should not: %.200s", l.name, line, body)
				}
				// A redirect stays on this server: a path, never another host.
				if loc != "" && (!strings.HasPrefix(loc, "/") || strings.HasPrefix(loc, "//") || strings.Contains(loc, "://")) {
					t.Errorf("%s: %q redirects off the server: Location %q", l.name, line, loc)
				}
				t.Logf("%s: %-60q %d %s", l.name, line, code, loc)
			}
		}
		h.goodOps(t)
		h.goodSocket(t)
		h.goodHook(t, 5*time.Second)
		w.done(t, "odd paths and methods", 16)
	})
}

// socketPost streams a request body to the socket: head, n bytes of fill,
// tail; it returns the answer's status and body.
func (h *hostile) socketPost(t *testing.T, path, head string, n int64, fill byte, tail string, chunked bool) (int, string) {
	t.Helper()
	body := io.MultiReader(strings.NewReader(head), io.LimitReader(repeat(fill), n), strings.NewReader(tail))
	req, _ := http.NewRequestWithContext(t.Context(), "POST", "http://agent"+path, body)
	req.ContentLength = int64(len(head)) + n + int64(len(tail))
	if chunked {
		req.ContentLength = -1
	}
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", h.socket)
	}}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: time.Minute}).Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, string(b)
}

// repeat reads as an endless run of one byte.
type repeat byte

func (r repeat) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(r)
	}
	return len(p), nil
}

// zeros reads as an endless run of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
