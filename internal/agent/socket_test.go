package agent_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/agent"
	"github.com/fleet-agent/fleet-agent/internal/localapi"
)

// shortLimits are the socket's limits scaled down so that a test sees each
// one fire: the same shape as the defaults (header < request < handler <
// answer).
var shortLimits = localapi.SocketLimits{ReadHeader: 300 * time.Millisecond, Read: 600 * time.Millisecond,
	Handler: 2 * time.Second, Write: 3 * time.Second, Idle: 2 * time.Second}

// serveSocket serves h with limits on a real unix socket.
func serveSocket(t *testing.T, h http.Handler, lim localapi.SocketLimits) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "fa-sock")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "api.sock")
	l, err := localapi.ListenSocket(path, "")
	if err != nil {
		t.Fatal(err)
	}
	srv := localapi.SocketServerWith(h, lim)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	t.Cleanup(func() {
		_ = srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("the socket server stopped: %v", err)
		}
	})
	return path
}

// closedWithin reads c until the server closes it, and fails when that
// takes longer than limit.
func closedWithin(t *testing.T, c net.Conn, limit time.Duration, what string) time.Duration {
	t.Helper()
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(limit))
	_, err := io.Copy(io.Discard, c)
	took := time.Since(start)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s: the server still held the connection after %v", what, took.Round(time.Millisecond))
	}
	return took
}

// pingOK checks that a good client gets its answer.
func pingOK(t *testing.T, path string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	var out map[string]any
	if err := localapi.NewClient(path).Do(ctx, "GET", "/v1/ping", nil, &out); err != nil {
		t.Fatalf("a good client was not answered: %v", err)
	}
}

// Slow clients on the socket are cut off by its limits, while a good client
// is answered; a request whose work takes longer than the time allowed to
// read it (a long apply) still gets its answer.
func TestSocketLimitsSlowClients(t *testing.T) {
	w := newWorld(t, agent.Config{})
	mux := http.NewServeMux()
	mux.Handle("/v1/", localapi.Handler(w.agent, w.store))
	// long works three read timeouts after reading its body, and says
	// whether its context was cancelled meanwhile.
	mux.HandleFunc("/long", func(rw http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
			// The answer may not reach the client; the test sees the cut.
			http.Error(rw, "cancelled: "+context.Cause(r.Context()).Error(), http.StatusInternalServerError)
		case <-time.After(3 * shortLimits.Read):
			_, _ = io.WriteString(rw, "done")
		}
	})
	// forever works until its context ends, and says why it ended.
	ended := make(chan error, 1)
	mux.HandleFunc("/forever", func(rw http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
		ended <- r.Context().Err()
	})
	// big answers more than the socket buffers hold.
	wrote := make(chan error, 1)
	mux.HandleFunc("/big", func(rw http.ResponseWriter, r *http.Request) {
		chunk := make([]byte, 64<<10)
		var err error
		for i := 0; i < 1024 && err == nil; i++ {
			_, err = rw.Write(chunk)
		}
		wrote <- err
	})
	path := serveSocket(t, mux, shortLimits)
	dial := func(t *testing.T) net.Conn {
		t.Helper()
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// pace sends s one byte at a time, every gap, until the server stops
	// taking them or stop closes.
	pace := func(c net.Conn, s string, gap time.Duration, stop <-chan struct{}) {
		tick := time.NewTicker(gap)
		defer tick.Stop()
		for i := 0; i < len(s); i++ {
			if _, err := c.Write([]byte{s[i]}); err != nil {
				return
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}

	t.Run("slow header", func(t *testing.T) {
		c := dial(t)
		stop := make(chan struct{})
		defer close(stop)
		go pace(c, "GET /v1/ping HTTP/1.1\r\nHost: agent\r\nX-Slow: "+strings.Repeat("a", 200)+"\r\n\r\n", 50*time.Millisecond, stop)
		pingOK(t, path)
		took := closedWithin(t, c, 3*shortLimits.ReadHeader, "a header sent a byte at a time")
		t.Logf("slow header cut after %v (ReadHeader %v)", took.Round(time.Millisecond), shortLimits.ReadHeader)
	})
	t.Run("slow body", func(t *testing.T) {
		c := dial(t)
		body := `{"commit":"` + strings.Repeat("a", 200) + `"}`
		fmt.Fprintf(c, "POST /v1/plan HTTP/1.1\r\nHost: agent\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
		stop := make(chan struct{})
		defer close(stop)
		go pace(c, body, 50*time.Millisecond, stop)
		pingOK(t, path)
		took := closedWithin(t, c, 3*shortLimits.Read, "a body sent a byte at a time")
		t.Logf("slow body cut after %v (Read %v)", took.Round(time.Millisecond), shortLimits.Read)
	})
	t.Run("slow reader", func(t *testing.T) {
		c := dial(t)
		fmt.Fprint(c, "GET /big HTTP/1.1\r\nHost: agent\r\n\r\n")
		// The client never reads the answer.
		pingOK(t, path)
		select {
		case err := <-wrote:
			if err == nil {
				t.Fatal("64 MiB went into a connection nobody reads")
			}
		case <-time.After(3 * shortLimits.Write):
			t.Fatalf("an answer nobody reads still held its handler after %v", 3*shortLimits.Write)
		}
	})
	for _, method := range []string{"GET", "POST"} {
		t.Run("long work by "+method, func(t *testing.T) {
			var body io.Reader
			if method == "POST" {
				body = strings.NewReader(`{"commit":"abc"}`)
			}
			req, _ := http.NewRequestWithContext(t.Context(), method, "http://agent/long", body)
			tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", path)
			}}
			defer tr.CloseIdleConnections()
			resp, err := (&http.Client{Transport: tr}).Do(req)
			if err != nil {
				t.Fatalf("a request that works longer than the read limit lost its answer: %v", err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || string(b) != "done" {
				t.Fatalf("a request that works longer than the read limit: %d %s", resp.StatusCode, b)
			}
		})
	}
	t.Run("work past the handler limit", func(t *testing.T) {
		c := dial(t)
		fmt.Fprint(c, "GET /forever HTTP/1.1\r\nHost: agent\r\n\r\n")
		select {
		case err := <-ended:
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("the handler ended by %v, want its deadline", err)
			}
		case <-time.After(2 * shortLimits.Handler):
			t.Fatalf("a handler still worked after %v", 2*shortLimits.Handler)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("no answer after the handler's deadline: %v", err)
		}
		resp.Body.Close()
	})
}

// The default limits leave a long apply its time: the handler's limit is the
// command line's own bound on an apply, the answer's is longer.
func TestSocketDefaultLimits(t *testing.T) {
	d := localapi.DefaultSocketLimits
	if d.ReadHeader <= 0 || d.ReadHeader > d.Read || d.Read >= d.Handler || d.Handler < 5*time.Minute || d.Write <= d.Handler || d.Idle <= 0 {
		t.Fatalf("default socket limits out of shape: %+v", d)
	}
}
