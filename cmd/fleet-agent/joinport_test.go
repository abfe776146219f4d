package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/state/statetest"
	"github.com/fleet-agent/fleet-agent/internal/substrate/join"
	"github.com/fleet-agent/fleet-agent/internal/testutil/gitserver"
)

// TestJoinPortHeldOnStandby: on etcd, an agent binds the join listener's
// port once for its process. While it stands by, a connection to the port
// is refused at once (docs/ha.md: a node daemon moves on to the next
// agent's address) and no other socket can take it; leading, it serves
// joins on the same port; its leadership lost, it refuses again, the port
// still its own.
func TestJoinPortHeldOnStandby(t *testing.T) {
	opts := statetest.EtcdOptions(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	// Another agent leads first: the one under test starts as a standby.
	other := opts
	other.Name = "other"
	s, err := state.OpenEtcd(ctx, other)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	first, err := s.Lead(ctx)
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
	dir := t.TempDir()
	joinAddr, ops := freePort(t), freePort(t)
	path := writeFile(t, dir, "config.yaml", fmt.Sprintf(`git:
  url: %s
  interval: 1s
  auth: { token: env://GIT_TOKEN }
state:
  backend: etcd
  etcd:
    endpoints: [%s]
    prefix: %s
    name: agent-a
    lease: 2s
socket: %s
listen: %s
substrate:
  nodeDaemon:
    image: registry.example.com/fleet-agent:1.2.0
    joinURL: http://%s/
  join:
    listen: %s
    insecure: true
`, remo.URL, opts.Endpoints[0], opts.Prefix, filepath.Join(dir, "api.sock"), ops, joinAddr, joinAddr))
	env := map[string]string{"GIT_TOKEN": srv.Password, "STATE_DIRECTORY": dir}
	log := &syncBuffer{}
	a := &app{stdin: strings.NewReader(""), stdout: io.Discard, stderr: log,
		lookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }}
	actx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.runAgent(actx, mustLoad(t, path, a), path, zerolog.InfoLevel) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
		if t.Failed() {
			t.Logf("the agent's log:\n%s", log.String())
		}
	}()
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("not within 60 s: %s", what)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitFor("the ops listener answers", func() bool {
		resp, err := http.Get("http://" + ops + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	})
	refused := func() error {
		c, err := net.DialTimeout("tcp", joinAddr, 2*time.Second)
		if err == nil {
			c.Close()
			return errors.New("a connection was accepted")
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return fmt.Errorf("a connection was not refused at once: %v", err)
		}
		if ln, err := net.Listen("tcp", joinAddr); err == nil {
			ln.Close()
			return errors.New("another socket took the port")
		}
		return nil
	}
	standingBy := func(when string) {
		t.Helper()
		if err := refused(); err != nil {
			t.Fatalf("%s: %v", when, err)
		}
	}
	standingBy("standing by from the start")
	// Still so a while later: nothing binds or listens on it meanwhile.
	time.Sleep(time.Second)
	standingBy("standing by a second later")

	// The other agent steps down and campaigns again behind this one.
	if err := first.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	next := make(chan error, 1)
	go func() { _, err := s.Lead(ctx); next <- err }()
	joinAnswer := func() (int, string, error) {
		resp, err := http.Post("http://"+joinAddr+join.JoinPath, "application/json",
			strings.NewReader(`{"poolId":"pool_x","nodeName":"node-1","token":"not-a-token"}`))
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), nil
	}
	waitFor("the leader serves joins", func() bool { _, _, err := joinAnswer(); return err == nil })
	if code, body, _ := joinAnswer(); code != http.StatusUnauthorized || !strings.Contains(body, join.CodeTokenUnknown) {
		t.Fatalf("a join with a token never issued, on the leader: %d %s", code, body)
	}

	// The agent's lease ends (as when it is cut off from etcd): the other
	// agent leads, and this one stands by on the same port.
	cli, err := clientv3.New(clientv3.Config{Endpoints: opts.Endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	keys, err := cli.Get(ctx, opts.Prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	revoked := 0
	for _, kv := range keys.Kvs {
		if kv.Lease != 0 && string(kv.Value) == "agent-a" {
			if _, err := cli.Revoke(ctx, clientv3.LeaseID(kv.Lease)); err != nil {
				t.Fatal(err)
			}
			revoked++
		}
	}
	if revoked == 0 {
		t.Fatal("no election key of agent-a in etcd")
	}
	select {
	case err := <-next:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("the other agent never led again")
	}
	waitFor("the term ended: joins refused", func() bool { return refused() == nil })
	time.Sleep(time.Second)
	standingBy("standing by again, a second later")
}
