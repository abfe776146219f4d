package join

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestOptionsStarHeldNoConnection is the attack where `OPTIONS *` is
// answered by net/http itself (never reaching the handler, never counted)
// and keep-alive lets one connection send it for ever: the answer must come
// from the handler, and the connection must close after one request.
func TestOptionsStarHeldNoConnection(t *testing.T) {
	f := newFixture(t, nil)
	f.serve(t, "127.0.0.1:0", nil, ListenerOptions{})
	c, err := net.DialTimeout("tcp", f.addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	for i := range 2 {
		if _, err := io.WriteString(c, "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			if i == 0 {
				t.Fatal(err)
			}
			return // closed after the first: what we want
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			if i == 0 {
				t.Fatalf("first OPTIONS *: %v", err)
			}
			return // closed after the first: what we want
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if i == 0 && resp.StatusCode == http.StatusOK {
			t.Errorf("OPTIONS * answered 200 (net/http's general handler), want the listener's refusal")
		}
		if i == 1 {
			t.Fatalf("a second request on one connection was answered (%d): keep-alive lets a source hold its slot", resp.StatusCode)
		}
	}
}
