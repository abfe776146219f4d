package etcdcluster

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// leaderIndex is the member that leads the raft group now.
func leaderIndex(t *testing.T, c *Cluster, cl *clientv3.Client) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for i := range c.Size() {
		if !c.Running(i) {
			continue
		}
		st, err := cl.Status(ctx, c.Endpoint(i))
		if err != nil {
			t.Fatalf("status of member %d: %v", i, err)
		}
		if st.Header.MemberId == st.Leader {
			return i
		}
	}
	t.Fatal("no member leads")
	return -1
}

func put(ctx context.Context, cl *clientv3.Client, k, v string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := cl.Put(ctx, k, v)
	return err
}

// A 3-member cluster keeps taking writes through a client of every
// endpoint while one member is down, whether it was the raft leader or
// a follower, and the member comes back on its data dir with every key.
func TestThreeMembersSurviveOneKilledAndRestarted(t *testing.T) {
	c := Start(t, Options{Members: 3})
	cl := c.Client(t)
	ctx := t.Context()

	for _, tc := range []struct {
		name   string
		leader bool
	}{
		{"follower", false},
		{"raft leader", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i := range 10 {
				if err := put(ctx, cl, fmt.Sprintf("%s/before/%d", tc.name, i), "v"); err != nil {
					t.Fatalf("put before the kill: %v", err)
				}
			}
			lead := leaderIndex(t, c, cl)
			victim := lead
			if !tc.leader {
				victim = (lead + 1) % c.Size()
			}
			if err := c.Kill(victim); err != nil {
				t.Fatal(err)
			}
			if c.Running(victim) {
				t.Fatalf("member %d still runs after Kill", victim)
			}
			// A lost leader costs an election (about a second by default);
			// a put in flight may fail with it. The first put after it
			// must land within the bound, and every one after it.
			first := time.Now()
			deadline := first.Add(15 * time.Second)
			for {
				err := put(ctx, cl, tc.name+"/during/first", "v")
				if err == nil {
					break
				}
				if !tc.leader {
					t.Fatalf("put with a follower down: %v", err)
				}
				if time.Now().After(deadline) {
					t.Fatalf("no put landed 15s after the raft leader was killed: %v", err)
				}
			}
			t.Logf("first put after killing member %d (%s): %s", victim, tc.name, time.Since(first).Round(time.Millisecond))
			for i := range 20 {
				if err := put(ctx, cl, fmt.Sprintf("%s/during/%d", tc.name, i), "v"); err != nil {
					t.Fatalf("put %d with member %d down: %v", i, victim, err)
				}
			}
			if err := c.Restart(victim); err != nil {
				t.Fatal(err)
			}
			if err := c.WaitHealthy(30 * time.Second); err != nil {
				t.Fatal(err)
			}
			for i := range 10 {
				if err := put(ctx, cl, fmt.Sprintf("%s/after/%d", tc.name, i), "v"); err != nil {
					t.Fatalf("put after the restart: %v", err)
				}
			}
			// The restarted member caught up: a read served by it alone
			// (serializable: its own copy) sees every key.
			one, err := clientv3.New(clientv3.Config{Endpoints: []string{c.Endpoint(victim)}, DialTimeout: 5 * time.Second, Logger: c.ClientConfig().Logger})
			if err != nil {
				t.Fatal(err)
			}
			defer one.Close()
			want := 10 + 1 + 20 + 10
			var got int64
			for deadline := time.Now().Add(15 * time.Second); ; {
				rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				resp, err := one.Get(rctx, tc.name+"/", clientv3.WithPrefix(), clientv3.WithCountOnly(), clientv3.WithSerializable())
				cancel()
				if err == nil {
					got = resp.Count
					if got == int64(want) {
						break
					}
				}
				if time.Now().After(deadline) {
					t.Fatalf("restarted member %d holds %d keys of %s/, want %d (last error %v)", victim, got, tc.name, want, err)
				}
				time.Sleep(100 * time.Millisecond) // poll interval
			}
		})
	}
}

// Losing two of three members loses the quorum: a put fails within its
// timeout; one member back restores it.
func TestQuorumLostAndRegained(t *testing.T) {
	c := Start(t, Options{Members: 3})
	cl := c.Client(t)
	if err := put(t.Context(), cl, "k", "1"); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{1, 2} {
		if err := c.Kill(i); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	_, err := cl.Put(ctx, "k", "2")
	cancel()
	if err == nil {
		t.Fatal("a put landed with two of three members down")
	}
	if err := c.Restart(2); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := put(t.Context(), cl, "k", "3"); err != nil {
		t.Fatalf("put with the quorum back: %v", err)
	}
}

// TLS with client certificates (peers too) and a user with a password: the client
// the cluster gives works; one without a certificate, or with the wrong
// password, is refused.
func TestTLSAndAuth(t *testing.T) {
	c := Start(t, Options{Members: 3, TLS: true, Username: "fleet-agent", Password: "s3cret-pw"})
	if !strings.HasPrefix(c.Endpoint(0), "https://") {
		t.Fatalf("endpoint %s is not https", c.Endpoint(0))
	}
	f := c.TLSFiles()
	for _, p := range []string{f.CA, f.Cert, f.Key} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("TLS file: %v", err)
		}
	}
	cl := c.Client(t)
	if err := put(t.Context(), cl, "k", "v"); err != nil {
		t.Fatalf("put with the cluster's client: %v", err)
	}

	for _, tc := range []struct {
		name string
		cfg  func(*clientv3.Config)
	}{
		{"no client certificate", func(cfg *clientv3.Config) { cfg.TLS.Certificates = nil }},
		{"wrong password", func(cfg *clientv3.Config) { cfg.Password = "wrong" }},
		{"no credentials", func(cfg *clientv3.Config) { cfg.Username, cfg.Password = "", "" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := c.ClientConfig()
			cfg.DialTimeout = 2 * time.Second
			tc.cfg(&cfg)
			bad, err := clientv3.New(cfg)
			if err != nil {
				return // refused at once (a failed authentication at dial)
			}
			defer bad.Close()
			if err := put(t.Context(), bad, "k", "bad"); err == nil {
				t.Fatal("the put landed")
			}
		})
	}
	resp, err := cl.Get(t.Context(), "k")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("k after the refused clients: %v %v", resp, err)
	}
}

// Without the control plane cache the harness fails saying how to build
// it (it never skips).
func TestMissingBinarySaysHowToGetIt(t *testing.T) {
	t.Setenv("FLEET_AGENT_KUBE_CACHE", t.TempDir())
	_, err := New(t.TempDir(), Options{})
	if err == nil || !strings.Contains(err.Error(), "scripts/kube-cache.sh") {
		t.Fatalf("err = %v, want one naming scripts/kube-cache.sh", err)
	}
}
