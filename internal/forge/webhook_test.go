package forge_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/forge"
	"github.com/fleet-agent/fleet-agent/internal/forge/githubemu"
	"github.com/fleet-agent/fleet-agent/internal/refs"
)

type failingResolver struct{}

func (failingResolver) Resolve(context.Context, string) (string, error) {
	return "", errors.New("vault sealed")
}

func TestWebhookSignature(t *testing.T) {
	e := newEnv(t, githubemu.Options{})
	var woken atomic.Int32
	h := e.forge.WebhookHandler(func() { woken.Add(1) })
	body := []byte(`{"action":"synchronize","number":7}`)
	good := forge.Sign([]byte("hook-secret"), body)

	for _, tc := range []struct {
		name   string
		method string
		sig    string
		body   []byte
		status int
		wakes  bool
	}{
		{"good", http.MethodPost, good, body, http.StatusNoContent, true},
		{"missing", http.MethodPost, "", body, http.StatusUnauthorized, false},
		{"other secret", http.MethodPost, forge.Sign([]byte("guess"), body), body, http.StatusUnauthorized, false},
		{"body changed", http.MethodPost, good, append([]byte(`{"x":1}`), body...), http.StatusUnauthorized, false},
		{"sha1 form", http.MethodPost, "sha1=" + strings.TrimPrefix(good, "sha256="), body, http.StatusUnauthorized, false},
		{"not hex", http.MethodPost, "sha256=zz", body, http.StatusUnauthorized, false},
		{"GET", http.MethodGet, good, nil, http.StatusMethodNotAllowed, false},
		{"too large", http.MethodPost, good, bytes.Repeat([]byte("a"), forge.MaxWebhookBody+1), http.StatusRequestEntityTooLarge, false},
	} {
		woken.Store(0)
		req := httptest.NewRequest(tc.method, "/hooks/github", bytes.NewReader(tc.body))
		if tc.sig != "" {
			req.Header.Set(forge.SignatureHeader, tc.sig)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != tc.status || (woken.Load() == 1) != tc.wakes {
			t.Errorf("%s: status %d woke %d; want %d, wake %v", tc.name, rec.Code, woken.Load(), tc.status, tc.wakes)
		}
	}

	// The secret is resolved for each delivery: a rotation takes effect.
	e.sec.set("secret://hook", "rotated")
	req := httptest.NewRequest(http.MethodPost, "/hooks/github", bytes.NewReader(body))
	req.Header.Set(forge.SignatureHeader, good)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusUnauthorized {
		t.Errorf("old secret after rotation: %d", rec.Code)
	}

	// A secret that does not resolve: 503, not a wake.
	woken.Store(0)
	bad := forge.WebhookHandler(failingResolver{}, "vault://hooks#secret", func() { woken.Add(1) }, nil)
	req = httptest.NewRequest(http.MethodPost, "/hooks/github", bytes.NewReader(body))
	req.Header.Set(forge.SignatureHeader, good)
	rec = httptest.NewRecorder()
	bad.ServeHTTP(rec, req)
	if rec.Code != http.StatusServiceUnavailable || woken.Load() != 0 {
		t.Errorf("unresolvable secret: %d, woke %d", rec.Code, woken.Load())
	}
	if strings.Contains(e.logs.String(), "hook-secret") {
		t.Error("webhook secret in the logs")
	}

	// Without a webhook secret, there is no hook.
	e.cfg.WebhookSecret = ""
	rec = httptest.NewRecorder()
	e.restart(t).WebhookHandler(func() { t.Error("woken without a secret") }).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/hooks/github", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("no secret configured: %d", rec.Code)
	}
}

func TestVerifySignatureKnownVector(t *testing.T) {
	// GitHub's documented example: secret "It's a Secret to Everybody",
	// payload "Hello, World!".
	const want = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
	if !forge.VerifySignature([]byte("It's a Secret to Everybody"), []byte("Hello, World!"), want) {
		t.Error("GitHub's example does not verify")
	}
	if forge.Sign([]byte("It's a Secret to Everybody"), []byte("Hello, World!")) != want {
		t.Error("Sign differs from GitHub's example")
	}
}

// A merge_group delivery wakes the agent like any other: the queue's ref is
// learned from git, and its name is the one the agent follows.
func TestMergeGroupEventWakes(t *testing.T) {
	e := newEnv(t, githubemu.Options{})
	var woken atomic.Int32
	h := e.forge.WebhookHandler(func() { woken.Add(1) })
	body := e.repo.MergeGroupEvent("main", 7, sha(1), sha(2))
	req := httptest.NewRequest(http.MethodPost, "/hooks/github", bytes.NewReader(body))
	req.Header.Set(forge.SignatureHeader, forge.Sign([]byte("hook-secret"), body))
	req.Header.Set("X-GitHub-Event", "merge_group")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusNoContent || woken.Load() != 1 {
		t.Fatalf("status %d, woken %d", rec.Code, woken.Load())
	}
	if n, ok := refs.QueuePull(githubemu.QueueRef("main", 7, sha(1)), "main"); !ok || n != 7 {
		t.Errorf("the emulator's queue ref is not one the agent follows: %d %v", n, ok)
	}
}

type staticResolver string

func (s staticResolver) Resolve(context.Context, string) (string, error) { return string(s), nil }

// zeros reads as an endless run of zero bytes, without allocating a body.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// postHook posts body to url with signature sig (and delivery id when not
// empty), returning the status or the transport's error.
func postHook(c *http.Client, url string, body io.Reader, size int64, sig, delivery string) (int, error) {
	req, err := http.NewRequest(http.MethodPost, url, body)
	if err != nil {
		return 0, err
	}
	req.ContentLength = size
	req.Header.Set(forge.SignatureHeader, sig)
	if delivery != "" {
		req.Header.Set("X-GitHub-Delivery", delivery)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// A flood of bad-signature deliveries of the largest size does not make the
// agent hold the bodies: each is streamed into the HMAC and dropped.
func TestWebhookFloodIsNotBuffered(t *testing.T) {
	var woken atomic.Int32
	srv := httptest.NewServer(forge.WebhookHandler(staticResolver("hook-secret"), "secret://hook", func() { woken.Add(1) }, nil))
	defer srv.Close()
	bad := "sha256=" + strings.Repeat("00", 32)

	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const flood = 40
	statuses := make(chan int, flood)
	var wg sync.WaitGroup
	for range flood {
		wg.Go(func() {
			code, err := postHook(srv.Client(), srv.URL, io.LimitReader(zeros{}, forge.MaxWebhookBody), forge.MaxWebhookBody, bad, "")
			if err != nil {
				t.Errorf("bad post: %v", err)
			}
			statuses <- code
		})
	}
	wg.Wait()
	close(statuses)
	runtime.ReadMemStats(&after)
	for code := range statuses {
		if code != http.StatusUnauthorized && code != http.StatusServiceUnavailable && code != 0 {
			t.Errorf("bad signature answered %d", code)
		}
	}
	grown := (after.TotalAlloc - before.TotalAlloc) >> 20
	t.Logf("%d bad posts of 25 MiB: %d MiB allocated, heap in use %d -> %d MiB", flood, grown, before.HeapInuse>>20, after.HeapInuse>>20)
	if grown > 100 {
		t.Errorf("%d bad posts allocated %d MiB; want under 100", flood, grown)
	}
	if woken.Load() != 0 {
		t.Errorf("a bad signature woke the agent %d times", woken.Load())
	}
}

// A signed delivery replayed under the same X-GitHub-Delivery id wakes the
// agent once; a new id wakes it again.
func TestWebhookReplayDropped(t *testing.T) {
	var woken atomic.Int32
	srv := httptest.NewServer(forge.WebhookHandler(staticResolver("hook-secret"), "secret://hook", func() { woken.Add(1) }, nil))
	defer srv.Close()
	body := []byte(`{"action":"opened"}`)
	sig := forge.Sign([]byte("hook-secret"), body)
	for i := range 100 {
		code, err := postHook(srv.Client(), srv.URL, bytes.NewReader(body), int64(len(body)), sig, "d-1")
		want := http.StatusOK
		if i == 0 {
			want = http.StatusNoContent
		}
		if err != nil || code != want {
			t.Fatalf("replay %d: %d %v; want %d", i, code, err, want)
		}
	}
	if code, _ := postHook(srv.Client(), srv.URL, bytes.NewReader(body), int64(len(body)), sig, "d-2"); code != http.StatusNoContent {
		t.Errorf("a new delivery id: %d", code)
	}
	if n := woken.Load(); n != 2 {
		t.Errorf("100 replays and one new delivery woke %d times; want 2", n)
	}
}

// Deliveries whose bodies trickle hold at most MaxWebhookInFlight slots;
// one more is answered 503 at once, and a good delivery gets through as
// soon as the slow ones are cut.
func TestWebhookSlowBodiesAreBounded(t *testing.T) {
	var woken atomic.Int32
	srv := httptest.NewServer(forge.WebhookHandler(staticResolver("hook-secret"), "secret://hook", func() { woken.Add(1) }, nil))
	defer srv.Close()
	// The slow deliveries are raw connections that send their headers and
	// one byte of a 1000-byte body, then hold: a client's buffered writer
	// might keep even the headers back.
	addr := strings.TrimPrefix(srv.URL, "http://")
	slow := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nX-Hub-Signature-256: sha256=00\r\nContent-Length: 1000\r\n\r\n{")
		return c
	}
	// answered reports whether the server answered a slow delivery (it was
	// refused a slot: a probe held one when it came): a slot holder says
	// nothing until its body's deadline.
	answered := func(c net.Conn) bool {
		_ = c.SetReadDeadline(time.Now().Add(time.Millisecond))
		var b [1]byte
		_, err := c.Read(b[:])
		if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
			return false
		}
		return true
	}
	conns := make([]net.Conn, forge.MaxWebhookInFlight)
	for i := range conns {
		conns[i] = slow()
	}
	body := []byte(`{}`)
	sig := forge.Sign([]byte("hook-secret"), body)
	// The probes below take a slot while they are read: a slow delivery
	// that came meanwhile was refused, and comes again, until every slot is
	// held by a slow body and a probe is refused. However slowly the server
	// runs, that takes as many rounds as it does; the deadline is only for a
	// server that never fills.
	deadline := time.Now().Add(forge.WebhookReadTimeout / 2)
	for {
		for i, c := range conns {
			if answered(c) {
				c.Close()
				conns[i] = slow()
			}
		}
		code, err := postHook(srv.Client(), srv.URL, bytes.NewReader(body), 2, sig, "")
		if err == nil && code == http.StatusServiceUnavailable {
			break // every slot is held by a slow body
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slots never filled: %d %v", code, err)
		}
		woken.Store(0)
		runtime.Gosched()
	}
	for _, c := range conns {
		c.Close()
	}
	// A slot is freed when its handler returns, a moment after its
	// connection closes: the good delivery gets through within the deadline.
	woken.Store(0)
	for {
		code, err := postHook(srv.Client(), srv.URL, bytes.NewReader(body), 2, sig, "after")
		if err == nil && code == http.StatusNoContent && woken.Load() == 1 {
			break
		}
		if time.Now().After(deadline.Add(10*time.Second)) || (code != http.StatusServiceUnavailable && err == nil) {
			t.Fatalf("good delivery after the slow ones: %d %v woke %d", code, err, woken.Load())
		}
		runtime.Gosched()
	}
}
