package join

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleet-agent/fleet-agent/internal/clock"
)

// node is one node daemon's files.
type node struct {
	dir, configDir, tokenFile, stateDir string
	logs                                *logFile
	st                                  *statuses
}

func newNode(t *testing.T, pool, joinURL string, pins ...string) *node {
	t.Helper()
	dir := t.TempDir()
	return &node{dir: dir, configDir: nodeFiles(t, dir, pool, joinURL, pins), tokenFile: filepath.Join(dir, "join", "token"),
		stateDir: filepath.Join(dir, "state"), logs: newLogFile(t), st: newStatuses()}
}

func (n *node) options(name string, o DaemonOptions) DaemonOptions {
	o.ConfigDir, o.TokenFile, o.StateDir, o.NodeName = n.configDir, n.tokenFile, n.stateDir, name
	if o.PodTokenFile == "" {
		o.PodTokenFile = filepath.Join(n.dir, "pod", "token") // none: the Secret token joins
	}
	o.Log = zerolog.New(n.logs).Level(zerolog.DebugLevel)
	o.OnStatus = n.st.add
	return o
}

// TestDaemonJoinsAndRestarts: a daemon with a pinned listener waits for its
// token, joins, keeps its key (0600) and heartbeats; restarted without a
// token, it heartbeats with the kept key instead of joining again. Neither
// the token nor the key reaches its log.
func TestDaemonJoinsAndRestarts(t *testing.T) {
	f := newFixture(t, clock.Real{})
	cert := newCert(t, t.TempDir(), "join", nil, false)
	f.serve(t, "127.0.0.1:0", cert, ListenerOptions{HeartbeatEvery: 50 * time.Millisecond})
	n := newNode(t, "pool_a", f.url, cert.pin)
	stop := runDaemon(t, n.options("n1", DaemonOptions{}))
	st, i := n.st.wait(t, 0, PhaseWaitingForToken, 5*time.Second)
	if !strings.Contains(st.Message, "fleet-node/fleet-node-join") || !strings.Contains(st.Message, n.tokenFile) {
		t.Fatalf("waiting says: %s", st.Message)
	}
	tok := f.mint(t, "pool_a", "n1", "n2")
	writeToken(t, n.tokenFile, tok+"\n")
	n.st.wait(t, i, PhaseJoined, 5*time.Second)
	_, i = n.st.wait(t, i, PhaseConnected, 5*time.Second)
	fi, err := os.Stat(filepath.Join(n.stateDir, keyFileName))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file %v %v", fi, err)
	}
	nodes, _ := f.store.Joined(t.Context(), "pool_a")
	if len(nodes) != 1 || nodes[0].Name != "n1" || !nodes[0].Connected {
		t.Fatalf("joined %+v", nodes)
	}
	joinedAt := nodes[0].JoinedAt
	// Beats arrive: lastSeen moves.
	n.st.wait(t, i, PhaseConnected, 5*time.Second)
	time.Sleep(120 * time.Millisecond)
	if nodes, _ := f.store.Joined(t.Context(), "pool_a"); !nodes[0].LastSeen.After(joinedAt) {
		t.Fatalf("no heartbeat reached the store: %+v", nodes)
	}
	stop()

	// The Secret is gone (every Node joined) and the token revoked: the
	// restarted daemon heartbeats with its key.
	if err := os.Remove(n.tokenFile); err != nil {
		t.Fatal(err)
	}
	if err := f.store.Revoke(t.Context(), "pool_a"); err != nil {
		t.Fatal(err)
	}
	again := newStatuses()
	o := n.options("n1", DaemonOptions{})
	o.OnStatus = again.add
	runDaemon(t, o)
	again.wait(t, 0, PhaseConnected, 5*time.Second)
	if again.count(PhaseJoined) != 0 {
		t.Fatal("the restarted daemon joined again")
	}
	if nodes, _ := f.store.Joined(t.Context(), "pool_a"); len(nodes) != 1 || !nodes[0].JoinedAt.Equal(joinedAt) {
		t.Fatalf("after the restart: %+v", nodes)
	}
	key, _ := os.ReadFile(filepath.Join(n.stateDir, keyFileName))
	logs := n.logs.String()
	if strings.Contains(logs, tok) || len(key) == 0 {
		t.Fatal("the token is in the daemon's log")
	}
	for _, l := range strings.Split(string(key), `"`) {
		if len(l) >= 43 && strings.Contains(logs, l) {
			t.Fatal("the node key is in the daemon's log")
		}
	}
}

// TestDaemonAgentDownThenUp: with no listener the daemon says it cannot
// reach it and backs off; once the listener is up it joins.
func TestDaemonAgentDownThenUp(t *testing.T) {
	f := newFixture(t, clock.Real{})
	// A port that nothing listens on, for now.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	n := newNode(t, "pool_a", "http://"+addr+"/")
	writeToken(t, n.tokenFile, f.mint(t, "pool_a", "n1"))
	runDaemon(t, n.options("n1", DaemonOptions{MinBackoff: 20 * time.Millisecond, MaxBackoff: 10 * time.Second}))
	st, i := n.st.wait(t, 0, PhaseUnreachable, 5*time.Second)
	if !strings.Contains(st.Message, addr) || !strings.Contains(st.Message, "retrying in") {
		t.Fatalf("unreachable says: %s", st.Message)
	}
	// Several attempts, each waiting about twice the one before (drawn in
	// the upper half of its doubling range: 10-20 ms, 20-40, 40-80).
	for range 3 {
		_, i = n.st.wait(t, i, PhaseUnreachable, 5*time.Second)
	}
	if w := n.st.retries(0, PhaseUnreachable); w[0] < 10*time.Millisecond || w[0] > 20*time.Millisecond || w[2] < 40*time.Millisecond || w[2] > 80*time.Millisecond {
		t.Fatalf("waits %v: not a doubling backoff from 20 ms", w)
	}
	stop := f.serve(t, addr, nil, ListenerOptions{HeartbeatEvery: 50 * time.Millisecond})
	_, i = n.st.wait(t, i, PhaseConnected, 5*time.Second)
	if !strings.Contains(n.logs.String(), "plain http") {
		t.Fatal("no warning about a plain http join URL")
	}
	// The agent goes away for a while (its backoff would reach seconds),
	// then comes back: the daemon beats again within about a beat, with
	// its key, without joining again.
	stop()
	down := i
	_, i = n.st.wait(t, i, PhaseUnreachable, 5*time.Second)
	time.Sleep(1500 * time.Millisecond)
	if waits := n.st.retries(down, PhaseUnreachable); len(waits) < 5 || slices.Max(waits) > 50*time.Millisecond {
		t.Fatalf("heartbeat retries waited %v: more than a beat", waits)
	}
	f.serve(t, addr, nil, ListenerOptions{HeartbeatEvery: 50 * time.Millisecond})
	back := time.Now()
	for range 2 { // the first may be a report from before the restart
		_, i = n.st.wait(t, i, PhaseConnected, 5*time.Second)
	}
	if el := time.Since(back); el > time.Second || n.st.count(PhaseJoined) != 1 {
		t.Fatalf("beating again %s after the agent came back, %d joins", el, n.st.count(PhaseJoined))
	}
}

// TestDaemonTrust: pins of the listener's key or of a CA in its chain are
// trusted; a wrong pin, or no pin and a certificate the roots do not trust,
// is a pinMismatch that shows the pins and what the listener presented.
func TestDaemonTrust(t *testing.T) {
	dir := t.TempDir()
	ca := newCert(t, dir, "ca", nil, true)
	leaf := newCert(t, dir, "leaf", ca, false)
	other := newCert(t, dir, "other", nil, false)
	cases := []struct {
		name    string
		serve   *testCert
		pins    []string
		roots   bool // the test's roots trust the certificate
		join    bool
		message []string
	}{
		{"the listener's pin", other, []string{other.pin}, false, true, nil},
		{"one of two pins", other, []string{leaf.pin, other.pin}, false, true, nil},
		{"a CA in the chain", leaf, []string{ca.pin}, false, true, nil},
		{"trusted roots, no pin", other, nil, true, true, nil},
		{"a wrong pin", other, []string{leaf.pin}, false, false, []string{leaf.pin, other.pin, "caPins", `CN=other`}},
		{"no pin, untrusted", other, nil, false, false, []string{"system roots", other.pin, "caPins"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, clock.Real{})
			f.serve(t, "127.0.0.1:0", tc.serve, ListenerOptions{HeartbeatEvery: 50 * time.Millisecond})
			n := newNode(t, "pool_a", f.url, tc.pins...)
			writeToken(t, n.tokenFile, f.mint(t, "pool_a", "n1"))
			o := DaemonOptions{}
			if tc.roots {
				o.RootCAs = tc.serve.pool
			}
			runDaemon(t, n.options("n1", o))
			if tc.join {
				n.st.wait(t, 0, PhaseConnected, 5*time.Second)
				return
			}
			st, _ := n.st.wait(t, 0, PhasePinMismatch, 5*time.Second)
			t.Log(st.Message)
			for _, m := range tc.message {
				if !strings.Contains(st.Message, m) {
					t.Errorf("the message lacks %q: %s", m, st.Message)
				}
			}
			if n.st.count(PhaseJoined) != 0 {
				t.Fatal("joined through an untrusted listener")
			}
			if nodes, _ := f.store.Joined(t.Context(), "pool_a"); len(nodes) != 0 {
				t.Fatal("the token reached an untrusted listener and was used")
			}
		})
	}
}

// TestDaemonRefusals: a revoked token and a Node name the token does not
// allow are refused with messages naming the Secret; a new token in the
// file is tried and joins. A retired node's daemon joins again.
func TestDaemonRefusals(t *testing.T) {
	f := newFixture(t, clock.Real{})
	f.serve(t, "127.0.0.1:0", nil, ListenerOptions{HeartbeatEvery: 50 * time.Millisecond})

	t.Run("revoked", func(t *testing.T) {
		n := newNode(t, "pool_a", f.url)
		writeToken(t, n.tokenFile, f.mint(t, "pool_a", "n1"))
		if err := f.store.Revoke(t.Context(), "pool_a"); err != nil {
			t.Fatal(err)
		}
		runDaemon(t, n.options("n1", DaemonOptions{}))
		st, i := n.st.wait(t, 0, PhaseRefused, 5*time.Second)
		if st.Code != CodeTokenRevoked || !strings.Contains(st.Message, "fleet-node/fleet-node-join") {
			t.Fatalf("refused: %+v", st)
		}
		// The same token is not sent again and again.
		time.Sleep(150 * time.Millisecond)
		if got := f.metrics.refusedN("join " + CodeTokenRevoked); got > 2 {
			t.Fatalf("the refused token was sent %d times in 150 ms", got)
		}
		writeToken(t, n.tokenFile, f.mint(t, "pool_a", "n1"))
		n.st.wait(t, i, PhaseConnected, 5*time.Second)
	})
	t.Run("name not allowed", func(t *testing.T) {
		n := newNode(t, "pool_b", f.url)
		writeToken(t, n.tokenFile, f.mint(t, "pool_b", "n1"))
		runDaemon(t, n.options("n7", DaemonOptions{}))
		st, _ := n.st.wait(t, 0, PhaseRefused, 5*time.Second)
		if st.Code != CodeNameNotAllowed || !strings.Contains(st.Message, "n7") || !strings.Contains(st.Message, "fleet-agent.dev/substrate-pool=pool_b") {
			t.Fatalf("refused: %+v", st)
		}
	})
	t.Run("retired", func(t *testing.T) {
		n := newNode(t, "pool_c", f.url)
		writeToken(t, n.tokenFile, f.mint(t, "pool_c", "n1"))
		runDaemon(t, n.options("n1", DaemonOptions{}))
		_, i := n.st.wait(t, 0, PhaseConnected, 5*time.Second)
		if err := f.store.Retire(t.Context(), "pool_c", "n1"); err != nil {
			t.Fatal(err)
		}
		st, i := n.st.wait(t, i, PhaseRefused, 5*time.Second)
		if st.Code != CodeKeyUnknown {
			t.Fatalf("after retiring: %+v", st)
		}
		// The in-cluster half lists the Node again: a new token for it.
		writeToken(t, n.tokenFile, f.mint(t, "pool_c", "n1"))
		n.st.wait(t, i, PhaseJoined, 5*time.Second)
	})
	t.Run("config missing", func(t *testing.T) {
		n := newNode(t, "pool_d", f.url)
		if err := os.Remove(filepath.Join(n.configDir, KeyJoinURL)); err != nil {
			t.Fatal(err)
		}
		runDaemon(t, n.options("n1", DaemonOptions{}))
		st, _ := n.st.wait(t, 0, PhaseWaitingForConfig, 5*time.Second)
		if !strings.Contains(st.Message, "joinURL") || !strings.Contains(st.Message, "fleet-node/fleet-node") {
			t.Fatalf("config missing: %s", st.Message)
		}
		bad := newNode(t, "pool_d", f.url)
		runDaemon(t, bad.options("", DaemonOptions{}))
		if st, _ := bad.st.wait(t, 0, PhaseWaitingForConfig, 5*time.Second); !strings.Contains(st.Message, NodeNameEnv) {
			t.Fatalf("no Node name: %s", st.Message)
		}
	})
}

// TestDaemonPinnedCAChecksTheHost: with a pinned CA, the listener's
// certificate must also be for the host of joinURL, an IP address as much as
// a name: a certificate the CA gave to another address or name does not get
// the token. (Before, with an IP host no name was checked at all, so any
// certificate of the CA collected the token.)
func TestDaemonPinnedCAChecksTheHost(t *testing.T) {
	dir := t.TempDir()
	ca := newCert(t, dir, "ca", nil, true)
	ip := func(s string) []net.IP { return []net.IP{net.ParseIP(s)} }
	cases := []struct {
		name  string
		dns   []string
		ips   []net.IP
		host  string // of joinURL; the listener is on 127.0.0.1
		join  bool
		chain string // in the refusal
	}{
		{"the IP dialled", nil, ip("127.0.0.1"), "127.0.0.1", true, ""},
		{"another IP", nil, ip("127.0.0.2"), "127.0.0.1", false, "127.0.0.1"},
		{"a name, dialled by IP", []string{"join.example"}, nil, "127.0.0.1", false, "127.0.0.1"},
		{"the IP written as a name", []string{"127.0.0.1"}, nil, "127.0.0.1", false, "127.0.0.1"},
		{"the name dialled", []string{"localhost"}, nil, "localhost", true, ""},
		{"another name", []string{"join.example"}, ip("127.0.0.1"), "localhost", false, "localhost"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			leaf := newCertFor(t, dir, "leaf"+strconv.Itoa(i), ca, false, tc.dns, tc.ips)
			f := newFixture(t, clock.Real{})
			f.serve(t, "127.0.0.1:0", leaf, ListenerOptions{HeartbeatEvery: 50 * time.Millisecond})
			_, port, _ := net.SplitHostPort(f.addr)
			n := newNode(t, "pool_a", "https://"+net.JoinHostPort(tc.host, port)+"/", ca.pin)
			writeToken(t, n.tokenFile, f.mint(t, "pool_a", "n1"))
			runDaemon(t, n.options("n1", DaemonOptions{}))
			if tc.join {
				n.st.wait(t, 0, PhaseConnected, 5*time.Second)
				return
			}
			st, _ := n.st.wait(t, 0, PhasePinMismatch, 5*time.Second)
			if !strings.Contains(st.Message, "does not vouch") || !strings.Contains(st.Message, tc.chain) {
				t.Errorf("the refusal does not say the certificate is not for %s: %s", tc.chain, st.Message)
			}
			if n.st.count(PhaseJoined) != 0 {
				t.Fatal("joined through a listener whose certificate is for another host")
			}
			if nodes, _ := f.store.Joined(t.Context(), "pool_a"); len(nodes) != 0 {
				t.Fatal("the token reached a listener whose certificate is for another host, and was used")
			}
		})
	}
}

// TestDaemonFirstBeatAtOnce: after a join the daemon beats at once, not a
// heartbeat period later (here an hour, which the daemon caps at a minute:
// before, the node was first seen connected a minute after its join).
func TestDaemonFirstBeatAtOnce(t *testing.T) {
	f := newFixture(t, clock.Real{})
	f.serve(t, "127.0.0.1:0", nil, ListenerOptions{HeartbeatEvery: time.Hour})
	n := newNode(t, "pool_a", f.url)
	writeToken(t, n.tokenFile, f.mint(t, "pool_a", "n1"))
	runDaemon(t, n.options("n1", DaemonOptions{}))
	_, i := n.st.wait(t, 0, PhaseJoined, 5*time.Second)
	joined := time.Now()
	n.st.wait(t, i, PhaseConnected, 5*time.Second)
	t.Logf("the first heartbeat %s after the join", time.Since(joined).Round(time.Millisecond))
}
