package state_test

import (
	"context"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/testutil/etcdcluster"
)

// cutLink is a TCP proxy to one etcd member that can be cut: while cut it
// neither forwards a byte nor closes a connection, as a network that
// drops every packet (a partition, a frozen switch) does.
type cutLink struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	thawn chan struct{} // closed when the link is restored
	conns []net.Conn
}

func newCutLink(t *testing.T, target string) *cutLink {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &cutLink{ln: ln, target: target, thawn: make(chan struct{})}
	close(c.thawn)
	t.Cleanup(func() {
		ln.Close()
		c.restore()
		c.mu.Lock()
		for _, n := range c.conns {
			n.Close()
		}
		c.mu.Unlock()
	})
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			c.mu.Lock()
			c.conns = append(c.conns, in, out)
			c.mu.Unlock()
			go c.pipe(in, out)
			go c.pipe(out, in)
		}
	}()
	return c
}

func (c *cutLink) url() string { return "http://" + c.ln.Addr().String() }

// pipe copies from src to dst, holding each read while the link is cut.
func (c *cutLink) pipe(src, dst net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			c.mu.Lock()
			thawn := c.thawn
			c.mu.Unlock()
			<-thawn
			if _, werr := dst.Write(buf[:n]); werr != nil {
				src.Close()
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				src.Close()
			}
			dst.Close()
			return
		}
	}
}

func (c *cutLink) sever() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.cut {
		c.cut, c.thawn = true, make(chan struct{})
	}
}

func (c *cutLink) restore() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cut {
		c.cut = false
		close(c.thawn)
	}
}

// The leader cut off from etcd (every link to every member dropping its
// packets) stops answering as the leader before the standby begins to:
// over many failovers on a three-member cluster that compacts its history
// (at every trial, and on its own), the two never both believe they lead.
// Both stores measure their hold on one clock, so the overlap (the old
// hold's end minus the new leader's start) is exact, not sampled. It
// prints failover min/median/max (the cut to the standby acting as the
// leader): FLEET_AGENT_FAILOVER_TRIALS sets how many (5 by default).
func TestEtcdFailoverNeverTwoLeaders(t *testing.T) {
	trials := 5
	if v, err := strconv.Atoi(os.Getenv("FLEET_AGENT_FAILOVER_TRIALS")); err == nil && v > 0 {
		trials = v
	}
	c := etcdcluster.Start(t, etcdcluster.Options{Members: 3})
	cli := c.Client(t)
	start := time.Now()
	clock := func() time.Duration { return time.Since(start) }
	const lease = 2 * time.Second
	stores := make([]*state.Store, 2)
	links := make([][]*cutLink, 2)
	for i := range stores {
		var eps []string
		for _, ep := range c.Endpoints() {
			host := ep[len("http://"):]
			l := newCutLink(t, host)
			links[i] = append(links[i], l)
			eps = append(eps, l.url())
		}
		o := state.EtcdOptions{Endpoints: eps, Prefix: "/failover", Name: "agent-" + strconv.Itoa(i),
			Lease: lease, RequestTimeout: lease, Clock: clock}
		stores[i] = openEtcd(t, o)
	}
	campaign := func(s *state.Store) chan *state.Leadership {
		won := make(chan *state.Leadership, 1)
		go func() {
			for {
				// Bounded by the test: a campaign that fails (its link was
				// cut while it waited) is started again, as `run` does.
				ctx, cancel := context.WithTimeout(t.Context(), 60*lease)
				l, err := s.Lead(ctx)
				cancel()
				if err == nil {
					won <- l
					return
				}
				if t.Context().Err() != nil {
					won <- nil
					return
				}
				time.Sleep(lease / 10) // a retry interval, as run's backoff
			}
		}()
		return won
	}
	cur := lead(t, stores[0])
	leader := 0
	var failovers []time.Duration
	worstOverlap := -time.Hour
	for trial := range trials {
		standby := 1 - leader
		won := campaign(stores[standby])
		// The standby waits on the leader's key; a compaction past the
		// revision its campaign began at must not matter.
		if r, err := cli.Get(t.Context(), "compact-marker"); err == nil {
			if _, err := cli.Compact(t.Context(), r.Header.Revision); err != nil {
				t.Fatal(err)
			}
		} else {
			t.Fatal(err)
		}
		cutAt := clock()
		for _, l := range links[leader] {
			l.sever()
		}
		var next *state.Leadership
		select {
		case next = <-won:
		case <-time.After(60 * lease):
			t.Fatalf("trial %d: no standby led within 60 leases of the leader being cut off", trial)
		}
		if next == nil {
			t.FailNow()
		}
		// The old leader's belief: its hold, which no renewal can extend
		// while it is cut off.
		select {
		case <-cur.Lost():
		case <-time.After(60 * lease):
			t.Fatalf("trial %d: the cut-off leader never noticed", trial)
		}
		overlap := state.HeldUntil(cur) - state.WonAt(next)
		worstOverlap = max(worstOverlap, overlap)
		failovers = append(failovers, state.WonAt(next)-cutAt)
		if overlap >= 0 {
			t.Errorf("trial %d: agent-%d believed it led until %s, agent-%d from %s: both for %s", trial,
				leader, state.HeldUntil(cur), standby, state.WonAt(next), overlap)
		}
		if err := stores[leader].Fenced(); err == nil {
			t.Errorf("trial %d: the cut-off leader is not fenced", trial)
		}
		for _, l := range links[leader] {
			l.restore()
		}
		cur, leader = next, standby
	}
	slices.Sort(failovers)
	t.Logf("failover over %d trials (lease %s, 3 members, compacted at every trial): min %s, median %s, max %s; "+
		"the old hold ended %s before the new leader began at the closest",
		len(failovers), lease, failovers[0].Round(time.Millisecond), failovers[len(failovers)/2].Round(time.Millisecond),
		failovers[len(failovers)-1].Round(time.Millisecond), (-worstOverlap).Round(time.Millisecond))
}
