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
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/agent"
	"github.com/fleet-agent/fleet-agent/internal/forge"
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
	var st agent.StatusView
	if err := agent.NewClient(h.socket).Do(ctx, "GET", "/v1/status", nil, &st); err != nil || st.TenantID != "root" {
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

// raw sends one request as written and returns the answer's status line
// and body (at most 64 KiB), or the error that ended the connection.
func raw(addr, network, request string) (int, string, error) {
	c, err := net.DialTimeout(network, addr, 5*time.Second)
	if err != nil {
		return 0, "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, request); err != nil {
		return 0, "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, string(b), nil
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
			var wg sync.WaitGroup
			codes := make(chan int, 20)
			for range 20 {
				wg.Go(func() {
					code, _, _ := raw(c.addr, c.network, "GET "+c.path+" HTTP/1.1\r\nHost: agent\r\nX-Big: "+big+"\r\n\r\n")
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
		// 8 at once of the largest size read (32 MiB of a document that is
		// not base64) take their turns, one at a time.
		w = watchHeap()
		for range 8 {
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
		w.done(t, "8 socket requests of 32 MiB, one at a time", 160)
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
