package join

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/config"
)

// TestPortHeldBetweenTerms: a Port is bound once; between terms it refuses
// every connection at once and no other socket can take its address; each
// term's listener serves joins on the same address; closed, the port is
// free again.
func TestPortHeldBetweenTerms(t *testing.T) {
	p, err := BindPort("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := p.Addr().String()
	between := func(when string) {
		t.Helper()
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err == nil {
			c.Close()
			t.Fatalf("%s: a connection was accepted", when)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("%s: a connection was not refused at once: %v", when, err)
		}
		if ln, err := net.Listen("tcp", addr); err == nil {
			ln.Close()
			t.Fatalf("%s: another socket took the port", when)
		}
	}
	between("before the first term")

	f := newFixture(t, clock.NewFake(t0))
	f.lis = NewListener(ListenerOptions{Store: f.store, Log: f.log(), Metrics: f.metrics, Clock: f.clock})
	term := func(n int) {
		t.Helper()
		ln, err := p.Open()
		if err != nil {
			t.Fatalf("term %d: %v", n, err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- f.lis.ServeOn(ctx, ln, config.Join{Listen: addr, Insecure: true}) }()
		resp, err := http.Post("http://"+addr+JoinPath, "application/json",
			strings.NewReader(`{"poolId":"pool_x","nodeName":"node-1","token":"not-a-token"}`))
		if err != nil {
			cancel()
			t.Fatalf("term %d: %v", n, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("term %d: a join with a token never issued: %d", n, resp.StatusCode)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("term %d: ServeOn: %v", n, err)
		}
		_ = ln.Close() // again: its owner closes it too
	}
	term(1)
	between("after the first term")
	term(2)
	between("after the second term")

	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("the port given up is still held: %v", err)
	}
	ln.Close()
}
