package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/substrate/join"
	"github.com/fleet-agent/fleet-agent/internal/testutil/gitserver"
)

// The join listener's attacks against the built binary: `fleet-agent run`
// as a process, its join listener on loopback over TLS with the production
// limits, and each attack of the exposed-surfaces review as a bounded loop
// from loopback addresses (127.x.y.z, the dialer's LocalAddr). During each
// one the real node daemon's client (join.RunDaemon, what `fleet-agent node`
// runs) joins a Node of its own and heartbeats: it must get through within
// attackGoodBound plus attackSlowdown times what a good node took with no
// attack on this machine just before that attack (a busy machine slows both). Each attack prints the good client's successes and
// attempts, and the agent's peak resident memory (VmHWM) after it.
const (
	attackPool       = "pool_attack"
	attackGoodBound  = 20 * time.Second
	attackSlowdown   = 20 // how many times its unattacked time the good node may take under attack
	attackBeats      = 4  // heartbeats after the first, each by a restarted daemon
	attackUnderway   = 15 * time.Second
	attackPeakMiB    = 200 // the agent's VmHWM after every attack
	attackMaxBackoff = time.Second
	attackHold       = 3 * time.Second
	// attackFairShare is how many times its fair share of the agent's
	// answers during an attack the good node may wait for, and attackGoodCap
	// the most it may take in any case (see fairBound).
	attackFairShare = 4
	attackGoodCap   = 3 * time.Minute
)

// joinAttack is one attack: start spends its goroutines on wg until ctx
// ends, counting what they did in acts; the good node starts once
// acts.n reaches underway.
// attackCounts are an attack's actions (a connection tried, a request
// answered) and the answers that were not the refusal expected, with the
// last of them.
type attackCounts struct {
	n, odd atomic.Int64
	// open are the attacker's connections open now; clients how many
	// dialling loops the attack runs.
	open, clients atomic.Int64
	mu            sync.Mutex
	last          string
}

func (a *attackCounts) oddAnswer(what string) {
	a.odd.Add(1)
	a.mu.Lock()
	a.last = what
	a.mu.Unlock()
}

type joinAttack struct {
	name     string
	underway int64
	// hold, when set, is how many connections the attack tries to keep
	// open at once: the good node starts once they are open, or attackHold
	// after underway if the listener does not let them be.
	hold  int64
	start func(ctx context.Context, addr string, wg *sync.WaitGroup, acts *attackCounts)
}

// TestJoinAttacksOnTheBinary: the attacks fail against the built binary,
// and a good node joins and heartbeats during each.
func TestJoinAttacksOnTheBinary(t *testing.T) {
	bin := buildAgent(t)
	dir := t.TempDir()
	cert, key, pin := selfSigned(t, dir)
	addr := freePort(t)
	statePath := filepath.Join(dir, "fleet.db")

	// The pool's join token for the good nodes (one Node name per attack),
	// written into the state file before the agent opens it, as the
	// in-cluster half would have.
	attacks := joinAttacks()
	var names []string
	for i := range attacks {
		names = append(names, fmt.Sprintf("good-%d", i), fmt.Sprintf("quiet-%d", i))
	}
	st, err := state.Open(statePath, state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	token, _, err := join.NewStore(st, join.StoreOptions{Log: zerolog.Nop()}).Token(t.Context(), attackPool, names, false)
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}

	srv := gitserver.Start(t)
	remo := srv.NewRepo(t, "fleet")
	work := remo.Clone(t)
	work.Git(t, "checkout", "-q", "-B", "main")
	work.Write(t, "fleet.json", emptyDoc)
	work.CommitAll(t, "empty")
	work.Push(t, "HEAD:refs/heads/main")
	ops := freePort(t)
	cfg := fmt.Sprintf("git:\n  url: %s\n  interval: 1m\n  auth: { token: env://GIT_TOKEN }\nstate: %s\nsocket: %s\nlisten: %s\n"+
		"substrate:\n  nodeDaemon:\n    image: registry.example.com/fleet-agent:1.2.0\n    joinURL: https://%s/\n    caPins: [%q]\n"+
		"  join:\n    listen: %s\n    tlsCert: %s\n    tlsKey: %s\n",
		remo.URL, statePath, filepath.Join(dir, "api.sock"), ops, addr, pin, addr, cert, key)
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "run", "--config", path, "--log-level", "error")
	cmd.Env = append(os.Environ(), "GIT_TOKEN="+srv.Password)
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	waitFor(t, "the binary to answer /readyz", 30*time.Second, func() bool {
		resp, err := http.Get("http://" + ops + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	waitFor(t, "the join listener to listen", 10*time.Second, func() bool {
		c, err := dialFrom(t.Context(), "127.0.0.254", addr, true)
		if err == nil {
			c.Close()
		}
		return err == nil
	})

	for i, a := range attacks {
		// The good node's time with no attack, measured again just before
		// each attack: the bound under attack is derived from it, so a
		// machine whose load changes while the test runs (the whole suite
		// beside it) does not fail the test, and an attack that starves the
		// good node still does.
		quiet := runGoodNode(t, addr, pin, token, fmt.Sprintf("quiet-%d", i), dir, 10*attackGoodBound)
		if quiet.err != "" {
			t.Fatalf("before %s, the good node with no attack: %s", a.name, quiet.err)
		}
		bound := attackGoodBound + attackSlowdown*quiet.took
		ctx, stop := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		var acts attackCounts
		began := time.Now()
		a.start(ctx, addr, &wg, &acts)
		deadline := time.Now().Add(attackUnderway)
		for acts.n.Load() < a.underway && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if a.hold > 0 {
			held := time.Now().Add(attackHold)
			for acts.open.Load() < a.hold && time.Now().Before(held) {
				time.Sleep(20 * time.Millisecond)
			}
		}
		ramp, open := acts.n.Load(), acts.open.Load()
		good := runGoodNode(t, addr, pin, token, names[i], dir, attackGoodCap)
		flood := time.Since(began)
		fair := fairBound(acts.clients.Load(), acts.n.Load()-ramp, good.took)
		allowed := min(max(bound, fair), attackGoodCap)
		stop()
		wg.Wait()
		select {
		case <-exited:
			t.Fatalf("%s: the agent exited:\n%s", a.name, stderr.String())
		default:
		}
		peak := vmHWM(t, cmd.Process.Pid)
		t.Logf("attack %q: %d attacker actions (connections tried, answers read) and %d of its connections open when the good node started, %s of flood; good node: %d/%d requests succeeded (joined in %s, %d heartbeats, %s in all; with no attack just before %s, %s; its fair share of the agent's answers allowed %s); agent VmHWM %.1f MiB",
			a.name, ramp, open, flood.Round(time.Millisecond), good.ok, good.attempts, good.joinedIn.Round(time.Millisecond), good.beats,
			good.took.Round(time.Millisecond), quiet.took.Round(time.Millisecond), bound.Round(time.Millisecond), fair.Round(time.Millisecond), float64(peak)/1024)
		if ramp < a.underway {
			t.Errorf("%s: the attack made only %d of %d actions in %s before the good node started", a.name, ramp, a.underway, attackUnderway)
		}
		if n := acts.odd.Load(); n > 0 {
			t.Errorf("%s: %d answers were not the refusal expected; the last: %s", a.name, n, acts.last)
		}
		if good.err != "" {
			t.Errorf("%s: the good node did not get through: %s", a.name, good.err)
		} else if good.took > allowed {
			t.Errorf("%s: the good node took %s, more than %s (%s with no attack just before, and %d times its fair share of the agent's answers to %d attacking clients)",
				a.name, good.took.Round(time.Millisecond), allowed.Round(time.Millisecond), bound.Round(time.Millisecond), attackFairShare, acts.clients.Load())
		}
		if peak >= attackPeakMiB<<10 {
			t.Errorf("%s: the agent's VmHWM is %.1f MiB, over %d MiB", a.name, float64(peak)/1024, attackPeakMiB)
		}
	}
	if strings.Contains(stderr.String(), token) {
		t.Error("the join token is in the agent's log")
	}
}

// fairBound is how long the good node may take during an attack that keeps
// the agent answering its clients as fast as the machine lets it: served
// actions in took, shared fairly among clients and the good node, give each
// of them a turn every clients*took/served; the good node needs a turn for
// its join and each heartbeat, and may wait attackFairShare times that. A
// busy machine lowers the rate and so raises the bound with what it
// measures; an agent that lets the attackers' clients go ahead of the good
// node still fails. Zero when the attack was not served at all (then the
// quiet bound alone holds).
func fairBound(clients, served int64, took time.Duration) time.Duration {
	if clients <= 0 || served <= 0 {
		return 0
	}
	turn := time.Duration(float64(took) * float64(clients+1) / float64(served))
	return attackFairShare * time.Duration(attackBeats+2) * turn
}

// goodRun is what the good node did during one attack.
type goodRun struct {
	ok, attempts, beats int
	joinedIn, took      time.Duration
	err                 string
}

// runGoodNode joins node with the real daemon's client and then restarts
// it attackBeats times (a restarted daemon heartbeats at once with the key
// it kept), all within bound. Every request's outcome is a
// status: joined and connected are successes; refused, unreachable and a
// pin mismatch are failures.
func runGoodNode(t *testing.T, addr, pin, token, node, dir string, bound time.Duration) goodRun {
	t.Helper()
	root := filepath.Join(dir, node)
	confDir, stateDir := filepath.Join(root, "config"), filepath.Join(root, "state")
	for _, d := range []string{confDir, stateDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for k, v := range map[string]string{join.KeyPoolID: attackPool, join.KeyJoinURL: "https://" + addr + "/", join.KeyCAPins: `["` + pin + `"]`} {
		if err := os.WriteFile(filepath.Join(confDir, k), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tokenFile := filepath.Join(root, "token")
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	var g goodRun
	start := time.Now()
	deadline := start.Add(bound)
	for run := 0; run <= attackBeats; run++ {
		statuses := make(chan join.Status, 64)
		ctx, stop := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() {
			done <- join.RunDaemon(ctx, join.DaemonOptions{ConfigDir: confDir, TokenFile: tokenFile, PodTokenFile: filepath.Join(root, "no-pod-token"),
				StateDir: stateDir, NodeName: node, Log: zerolog.Nop(), MinBackoff: 100 * time.Millisecond, MaxBackoff: attackMaxBackoff,
				Poll: 100 * time.Millisecond, RequestTimeout: 5 * time.Second,
				OnStatus: func(s join.Status) {
					select {
					case statuses <- s:
					default:
					}
				}})
		}()
		connected := false
		var last join.Status
		for !connected && g.err == "" {
			select {
			case s := <-statuses:
				last = s
				switch s.Phase {
				case join.PhaseJoined:
					g.ok++
					g.attempts++
					g.joinedIn = time.Since(start)
				case join.PhaseConnected:
					g.ok++
					g.attempts++
					g.beats++
					connected = true
				case join.PhaseRefused, join.PhaseUnreachable, join.PhasePinMismatch:
					g.attempts++
				}
			case <-time.After(time.Until(deadline)):
				g.err = fmt.Sprintf("not connected within %s (run %d; last said %s %s: %s)", bound, run, last.Phase, last.Code, last.Message)
			}
		}
		stop()
		if err := <-done; err != nil && g.err == "" {
			g.err = fmt.Sprintf("the daemon ended: %v", err)
		}
		if g.err != "" {
			break
		}
	}
	g.took = time.Since(start)
	return g
}

func joinAttacks() []joinAttack {
	// Each attack has addresses of its own, so no bucket spent by one is
	// still spent in the next; the one from the good node's own address
	// (127.0.0.1) comes last.
	return []joinAttack{
		{
			// 33 sources x 64 keep-alive connections sending `OPTIONS *`
			// (the review: every 20 s, holding all 2,048 slots; here every
			// second, re-dialling at once when cut).
			name: "OPTIONS * keep-alive from 33 sources x 64", underway: 33 * 64, hold: 33 * 64,
			start: func(ctx context.Context, addr string, wg *sync.WaitGroup, acts *attackCounts) {
				for s := range 33 {
					src := fmt.Sprintf("127.1.%d.1", s)
					for range 64 {
						wg.Go(func() { attacker(ctx, src, addr, true, acts, optionsLoop) })
					}
				}
			},
		},
		{
			// One source holds as many idle connections as it can (256
			// dialling at once, the cap is 64 per source).
			name: "connection flood from one source", underway: 512, hold: 256,
			start: func(ctx context.Context, addr string, wg *sync.WaitGroup, acts *attackCounts) {
				for range 256 {
					wg.Go(func() { attacker(ctx, "127.2.0.1", addr, false, acts, holdConn) })
				}
			},
		},
		{
			// 40 sources x 64 idle connections: 2,560, past the 2,048 in
			// all.
			name: "connection flood across 40 sources x 64", underway: 40 * 64, hold: 2048,
			start: func(ctx context.Context, addr string, wg *sync.WaitGroup, acts *attackCounts) {
				for s := range 40 {
					src := fmt.Sprintf("127.3.%d.1", s)
					for range 64 {
						wg.Go(func() { attacker(ctx, src, addr, false, acts, holdConn) })
					}
				}
			},
		},
		{
			// 16 sources x 8 connections announcing a 1,000-byte body and
			// sending a byte a second.
			name: "slow bodies from 16 sources x 8", underway: 16 * 8, hold: 16 * 8,
			start: func(ctx context.Context, addr string, wg *sync.WaitGroup, acts *attackCounts) {
				for s := range 16 {
					src := fmt.Sprintf("127.4.%d.1", s)
					for range 8 {
						wg.Go(func() { attacker(ctx, src, addr, true, acts, slowBody) })
					}
				}
			},
		},
		{
			// 16 sources x 4 sending requests with a 1 MiB header.
			name: "oversized headers from 16 sources x 4", underway: 16 * 4 * 4,
			start: func(ctx context.Context, addr string, wg *sync.WaitGroup, acts *attackCounts) {
				for s := range 16 {
					src := fmt.Sprintf("127.5.%d.1", s)
					for range 4 {
						wg.Go(func() { attacker(ctx, src, addr, true, acts, bigHeader) })
					}
				}
			},
		},
		{
			// Empty connections from the good node's own address (any Pod
			// on its Node, anyone behind the same NAT): 32 at once, each
			// re-dialled as soon as it is cut.
			name: "empty connections from the good node's address", underway: 256,
			start: func(ctx context.Context, addr string, wg *sync.WaitGroup, acts *attackCounts) {
				for range 32 {
					wg.Go(func() { attacker(ctx, "127.0.0.1", addr, false, acts, holdConn) })
				}
			},
		},
	}
}

// attacker dials addr from src (TLS when withTLS) until ctx ends, counting
// each attempt in acts (made or not: the listener's defences slow the
// attacker down, and what counts for "under way" is what it tries) and
// handing each connection made to use, which returns when the connection
// is done with.
func attacker(ctx context.Context, src, addr string, withTLS bool, acts *attackCounts, use func(context.Context, net.Conn, *attackCounts)) {
	acts.clients.Add(1)
	for ctx.Err() == nil {
		acts.n.Add(1)
		c, err := dialFrom(ctx, src, addr, withTLS)
		if err != nil {
			// Closed as accepted, or the handshake cut: the attacker paces
			// itself (its dials cost this machine too).
			pace(ctx, 100*time.Millisecond)
			continue
		}
		acts.open.Add(1)
		use(ctx, c, acts)
		c.Close()
		acts.open.Add(-1)
	}
}

// dialFrom opens a connection to addr from the loopback address src, over
// TLS (not verified: an attacker does not care) when withTLS.
func dialFrom(ctx context.Context, src, addr string, withTLS bool) (net.Conn, error) {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil || !withTLS {
		return c, err
	}
	tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true, ServerName: "127.0.0.1"})
	hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := tc.HandshakeContext(hctx); err != nil {
		c.Close()
		return nil, err
	}
	return tc, nil
}

// holdConn sends nothing and holds the connection until the server cuts it.
func holdConn(ctx context.Context, c net.Conn, _ *attackCounts) {
	closed := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, c); close(closed) }()
	select {
	case <-ctx.Done():
		c.Close()
		<-closed
	case <-closed:
	}
}

// optionsLoop sends `OPTIONS *` on the connection every second, keeping it
// alive, until the server closes it.
func optionsLoop(ctx context.Context, c net.Conn, acts *attackCounts) {
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	br := bufio.NewReader(c)
	for ctx.Err() == nil {
		if _, err := io.WriteString(c, "OPTIONS * HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: keep-alive\r\n\r\n"); err != nil {
			return
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		acts.n.Add(1)
		if resp.StatusCode < 400 {
			acts.oddAnswer(fmt.Sprintf("OPTIONS * answered %d", resp.StatusCode))
		}
		if resp.Close {
			return
		}
		pace(ctx, time.Second)
	}
}

// slowBody announces a body of 1,000 bytes and sends one a second.
func slowBody(ctx context.Context, c net.Conn, _ *attackCounts) {
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	if _, err := io.WriteString(c, "POST /v1/join HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"); err != nil {
		return
	}
	for ctx.Err() == nil {
		pace(ctx, time.Second)
		if _, err := io.WriteString(c, " "); err != nil {
			return
		}
	}
}

var bigHeaderRequest = "POST /v1/join HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + strings.Repeat("a", 1<<20) + "\r\nContent-Length: 2\r\n\r\n{}"

// bigHeader sends a request with a 1 MiB header and reads the answer.
func bigHeader(ctx context.Context, c net.Conn, acts *attackCounts) {
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	go func() { _, _ = io.WriteString(c, bigHeaderRequest) }()
	if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
		resp.Body.Close()
		acts.n.Add(1)
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			acts.oddAnswer(fmt.Sprintf("a 1 MiB header answered %d", resp.StatusCode))
		}
	}
}

// pace waits d or until ctx ends: an attacker's rhythm, never a test's
// synchronisation.
func pace(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// buildAgent builds the binary under test (FLEET_AGENT_BIN: another build,
// an older commit's for a before figure).
func buildAgent(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("FLEET_AGENT_BIN"); bin != "" {
		return bin
	}
	bin := filepath.Join(t.TempDir(), "fleet-agent")
	build := exec.CommandContext(t.Context(), "go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key
// into dir, and returns their paths and the certificate's pin.
func selfSigned(t *testing.T, dir string) (certFile, keyFile, pin string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "join"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "join.crt"), filepath.Join(dir, "join.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile, join.Pin(cert)
}

func TestFairBound(t *testing.T) {
	for _, c := range []struct {
		clients, served int64
		took, want      time.Duration
	}{
		{clients: 0, served: 100, took: time.Second, want: 0},
		{clients: 10, served: 0, took: time.Second, want: 0},
		// Every client answered once a second: the good node's turn comes
		// each second, six turns, four times over.
		{clients: 99, served: 100, took: time.Second, want: 24 * time.Second},
		// Half the rate (a machine twice as busy): twice the bound.
		{clients: 99, served: 50, took: time.Second, want: 48 * time.Second},
	} {
		if got := fairBound(c.clients, c.served, c.took); got != c.want {
			t.Errorf("fairBound(%d clients, %d served in %s) = %s, want %s", c.clients, c.served, c.took, got, c.want)
		}
	}
}
