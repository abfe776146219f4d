package join

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

// joinsContract is incluster.Joins as joins-interface.md declares it (the
// in-cluster half's file does not exist on this branch), with this
// package's JoinedNode: the store must satisfy it exactly.
type joinsContract interface {
	Token(ctx context.Context, poolID string, waiting []string, renew bool) (token string, minted bool, err error)
	Revoke(ctx context.Context, poolID string) error
	Joined(ctx context.Context, poolID string) ([]JoinedNode, error)
	Retire(ctx context.Context, poolID, nodeName string) error
	Forget(ctx context.Context, poolID string) error
}

var _ joinsContract = (*Store)(nil)

// incluster.JoinedNode as the interface file declares it: the conversion
// compiles only while the fields are the same, in the same order.
type inclusterJoinedNode struct {
	Name      string
	JoinedAt  time.Time
	LastSeen  time.Time
	Connected bool
}

var _ = inclusterJoinedNode(JoinedNode{})

func refusalCode(err error) string {
	if r, ok := errorsAsRefusal(err); ok {
		return r.Code
	}
	if err != nil {
		return "error: " + err.Error()
	}
	return ""
}

func tokens(t *testing.T, f *fixture, pool string) *state.JoinTokens {
	t.Helper()
	var rec *state.JoinTokens
	if err := f.st.View(func(tx *state.Tx) (err error) { rec, err = tx.JoinTokens(pool); return }); err != nil {
		t.Fatal(err)
	}
	return rec
}

// TestToken: a token is minted for the waiting Nodes, kept while they are
// exactly what it still allows, replaced (the old one revoked) when they
// change or renew is asked, and refused for nothing or a bad name.
func TestToken(t *testing.T) {
	type call struct {
		waiting    []string
		renew      bool
		wantMinted bool
		wantErr    string
	}
	cases := []struct {
		name  string
		calls []call
	}{
		{"first mint", []call{{waiting: []string{"n1", "n2"}, wantMinted: true}}},
		{"same names kept", []call{{waiting: []string{"n1", "n2"}, wantMinted: true}, {waiting: []string{"n2", "n1", "n1"}}}},
		{"renew mints", []call{{waiting: []string{"n1"}, wantMinted: true}, {waiting: []string{"n1"}, renew: true, wantMinted: true}}},
		{"a new Node mints", []call{{waiting: []string{"n1"}, wantMinted: true}, {waiting: []string{"n1", "n3"}, wantMinted: true}}},
		{"fewer Nodes mint", []call{{waiting: []string{"n1", "n3"}, wantMinted: true}, {waiting: []string{"n3"}, wantMinted: true}}},
		{"nothing waits", []call{{waiting: nil, wantErr: "no Node waits"}}},
		{"not a Node name", []call{{waiting: []string{"Node_1"}, wantErr: "not a Kubernetes Node name"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, clock.NewFake(t0))
			var prev string
			for i, c := range tc.calls {
				tok, minted, err := f.store.Token(t.Context(), "pool_a", c.waiting, c.renew)
				if c.wantErr != "" {
					if err == nil || !strings.Contains(err.Error(), c.wantErr) {
						t.Fatalf("call %d: err %v, want %q", i, err, c.wantErr)
					}
					if tokens(t, f, "pool_a") != nil {
						t.Fatal("a refused call wrote a token")
					}
					continue
				}
				if err != nil || minted != c.wantMinted || (tok != "") != minted {
					t.Fatalf("call %d: %q %v %v", i, tok, minted, err)
				}
				rec := tokens(t, f, "pool_a")
				want := slices.Compact(slices.Sorted(slices.Values(c.waiting)))
				if got := allowed(rec.Current); !slices.Equal(got, want) {
					t.Fatalf("call %d: allows %v, want %v", i, got, want)
				}
				if minted {
					if len(tok) < 43 || rec.Current.Hash != hashOf(tok) || rec.Current.Serial != uint64(len(rec.Revoked)+1) {
						t.Fatalf("call %d: token %q record %+v", i, tok, rec)
					}
					if prev != "" {
						// The old token stops working at once.
						if code := refusalCode(joinErr(f, "pool_a", want[0], prev)); code != CodeTokenRevoked {
							t.Fatalf("call %d: the replaced token: %s", i, code)
						}
					}
					prev = tok
				}
			}
		})
	}
}

func joinErr(f *fixture, pool, node, token string) error {
	_, err := f.store.Join(context.Background(), pool, node, token)
	return err
}

// TestJoin: one join per allowed name; every refusal changes nothing.
func TestJoin(t *testing.T) {
	f := newFixture(t, clock.NewFake(t0))
	tok := f.mint(t, "pool_a", "n1", "n2")
	other := f.mint(t, "pool_b", "n1")
	steps := []struct {
		name, pool, node, token string
		want                    string
	}{
		{"allowed", "pool_a", "n1", tok, ""},
		{"reused for the same name", "pool_a", "n1", tok, CodeTokenUsed},
		{"a name not allowed", "pool_a", "n3", tok, CodeNameNotAllowed},
		{"a bad token", "pool_a", "n2", offByOne(tok), CodeTokenUnknown},
		{"another pool's token", "pool_a", "n2", other, CodeTokenUnknown},
		{"an unknown pool", "pool_zz", "n2", tok, CodeTokenUnknown},
		{"not a Node name", "pool_a", "N2!", tok, CodeInvalidRequest},
		{"no token", "pool_a", "n2", "", CodeInvalidRequest},
		{"the second name", "pool_a", "n2", tok, ""},
		{"then the token allows nothing", "pool_a", "n2", tok, CodeTokenUsed},
	}
	keys := map[string]string{}
	for _, s := range steps {
		if s.want == CodeTokenUsed {
			// The node's daemon got its key and beat with it (before a
			// beat, a join again is taken for a lost answer).
			if err := f.store.Heartbeat(t.Context(), s.pool, s.node, keys[s.node], ""); err != nil {
				t.Fatal(err)
			}
		}
		before := snapshot(t, f)
		key, err := f.store.Join(t.Context(), s.pool, s.node, s.token)
		if got := refusalCode(err); got != s.want {
			t.Fatalf("%s: %q, want %q", s.name, got, s.want)
		}
		after := snapshot(t, f)
		if s.want != "" {
			if key != "" || before != after {
				t.Fatalf("%s: a refusal changed the state:\n%s\n%s", s.name, before, after)
			}
			continue
		}
		if len(key) < 43 || before == after {
			t.Fatalf("%s: key %q", s.name, key)
		}
		keys[s.node] = key
	}
	nodes, err := f.store.Joined(t.Context(), "pool_a")
	if err != nil || len(nodes) != 2 || nodes[0].Name != "n1" || nodes[1].Name != "n2" || !nodes[0].Connected || !nodes[0].JoinedAt.Equal(t0) {
		t.Fatalf("joined %+v %v", nodes, err)
	}
	// Every use spent: the in-cluster half asks again for the same (none
	// waits) and revokes.
	if err := f.store.Revoke(t.Context(), "pool_a"); err != nil {
		t.Fatal(err)
	}
	if err := f.store.Revoke(t.Context(), "pool_a"); err != nil {
		t.Fatal("revoking twice:", err)
	}
	if code := refusalCode(joinErr(f, "pool_a", "n1", tok)); code != CodeTokenRevoked {
		t.Fatalf("a revoked token: %s", code)
	}
	if err := f.store.Revoke(t.Context(), "pool_never"); err != nil {
		t.Fatal("revoking a pool without a token:", err)
	}
}

// snapshot is the pool's joins as the state file holds them.
func snapshot(t *testing.T, f *fixture) string {
	t.Helper()
	var out []any
	err := f.st.View(func(tx *state.Tx) error {
		for _, p := range []string{"pool_a", "pool_b"} {
			rec, err := tx.JoinTokens(p)
			if err != nil {
				return err
			}
			ns, err := tx.JoinedNodes(p)
			if err != nil {
				return err
			}
			out = append(out, rec, ns)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(out)
	return string(b)
}

// TestJoinAnswerLost: a daemon that never got its answer joins again with
// the same token and gets a new key (the first stops working); once a node
// beat, the same join is refused as a reuse.
func TestJoinAnswerLost(t *testing.T) {
	clk := clock.NewFake(t0)
	f := newFixture(t, clk)
	tok := f.mint(t, "pool_a", "n1", "n2")
	lost, err := f.store.Join(t.Context(), "pool_a", "n1", tok)
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Second)
	key, err := f.store.Join(t.Context(), "pool_a", "n1", tok)
	if err != nil || key == lost {
		t.Fatalf("the retry: %v", err)
	}
	if code := refusalCode(f.store.Heartbeat(t.Context(), "pool_a", "n1", lost, "")); code != CodeKeyUnknown {
		t.Fatalf("the lost key: %s", code)
	}
	if err := f.store.Heartbeat(t.Context(), "pool_a", "n1", key, ""); err != nil {
		t.Fatal(err)
	}
	if code := refusalCode(joinErr(f, "pool_a", "n1", tok)); code != CodeTokenUsed {
		t.Fatalf("after a beat: %s", code)
	}
	// The beat written to the file (a restart) still counts.
	if err := f.store.Flush(); err != nil {
		t.Fatal(err)
	}
	again := NewStore(f.st, StoreOptions{Clock: clk})
	if _, err := again.Join(t.Context(), "pool_a", "n1", tok); refusalCode(err) != CodeTokenUsed {
		t.Fatalf("after a written beat: %v", err)
	}
	// n2's use was not touched by n1's second join.
	if rec := tokens(t, f, "pool_a"); strings.Join(allowed(rec.Current), ",") != "n2" {
		t.Fatalf("allows %v", allowed(rec.Current))
	}
}

// TestJoinAgainReplacesTheKey: a Node the token allows again (the
// in-cluster half listed it as waiting) gets a new key; the old one stops.
func TestJoinAgainReplacesTheKey(t *testing.T) {
	f := newFixture(t, clock.NewFake(t0))
	k1, err := f.store.Join(t.Context(), "pool_a", "n1", f.mint(t, "pool_a", "n1"))
	if err != nil {
		t.Fatal(err)
	}
	k2, err := f.store.Join(t.Context(), "pool_a", "n1", f.mint(t, "pool_a", "n1"))
	if err != nil {
		t.Fatal(err)
	}
	if code := refusalCode(f.store.Heartbeat(t.Context(), "pool_a", "n1", k1, "")); code != CodeKeyUnknown {
		t.Fatalf("the old key: %s", code)
	}
	if err := f.store.Heartbeat(t.Context(), "pool_a", "n1", k2, ""); err != nil {
		t.Fatal(err)
	}
}

// TestHeartbeats: a node's key beats for it alone; beats keep it connected
// for 90 s on the store's clock and reach the state file in batches, at most
// every 30 s; a retired node's key stops working.
func TestHeartbeats(t *testing.T) {
	clk := clock.NewFake(t0)
	f := newFixture(t, clk)
	tok := f.mint(t, "pool_a", "n1", "n2")
	k1, err := f.store.Join(t.Context(), "pool_a", "n1", tok)
	if err != nil {
		t.Fatal(err)
	}
	k2, err := f.store.Join(t.Context(), "pool_a", "n2", tok)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, pool, node, key, want string
	}{
		{"its own key", "pool_a", "n1", k1, ""},
		{"another node's key", "pool_a", "n2", k1, CodeKeyOtherNode},
		{"n2's key as n1", "pool_a", "n1", k2, CodeKeyOtherNode},
		{"in another pool", "pool_b", "n1", k1, CodeKeyOtherNode},
		{"an unknown key", "pool_a", "n1", offByOne(k1), CodeKeyUnknown},
		{"no key", "pool_a", "n1", "", CodeKeyUnknown},
		{"the join token as a key", "pool_a", "n1", tok, CodeKeyUnknown},
		{"not a Node name", "pool_a", "N1", k1, CodeInvalidRequest},
	} {
		if got := refusalCode(f.store.Heartbeat(t.Context(), c.pool, c.node, c.key, "")); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
	lastSeen := func(name string) (mem, file time.Time, connected bool) {
		t.Helper()
		nodes, err := f.store.Joined(t.Context(), "pool_a")
		if err != nil {
			t.Fatal(err)
		}
		var rec *state.JoinedNode
		if err := f.st.View(func(tx *state.Tx) (err error) { rec, err = tx.JoinedNode("pool_a", name); return }); err != nil || rec == nil {
			t.Fatalf("record %v %v", rec, err)
		}
		for _, n := range nodes {
			if n.Name == name {
				return n.LastSeen, time.UnixMilli(rec.LastSeen), n.Connected
			}
		}
		t.Fatalf("%s not joined", name)
		return
	}
	beat := func(d time.Duration) {
		clk.Advance(d)
		if err := f.store.Heartbeat(t.Context(), "pool_a", "n1", k1, ""); err != nil {
			t.Fatal(err)
		}
	}
	beat(10 * time.Second)
	if mem, file, ok := lastSeen("n1"); !mem.Equal(t0.Add(10*time.Second)) || !file.Equal(t0) || !ok {
		t.Fatalf("after a beat at +10s: seen %s, file %s, connected %v", mem, file, ok)
	}
	beat(10 * time.Second) // +20s: still not written
	if _, file, _ := lastSeen("n1"); !file.Equal(t0) {
		t.Fatalf("written at +20s: %s", file)
	}
	beat(10 * time.Second) // +30s: the batch is due
	if mem, file, _ := lastSeen("n1"); !mem.Equal(t0.Add(30*time.Second)) || !file.Equal(mem) {
		t.Fatalf("at +30s: seen %s, file %s", mem, file)
	}
	// n2 never beat: connected for 90 s after its join, then not.
	clk.Advance(60 * time.Second) // +90s
	if _, _, ok := lastSeen("n2"); !ok {
		t.Fatal("n2 disconnected at exactly 90 s")
	}
	clk.Advance(time.Second)
	if _, _, ok := lastSeen("n2"); ok {
		t.Fatal("n2 connected 91 s after its join")
	}
	if _, _, ok := lastSeen("n1"); !ok {
		t.Fatal("n1 disconnected 61 s after a beat")
	}
	// A beat kept in memory survives Flush (the agent stopping).
	beat(5 * time.Second)
	if err := f.store.Flush(); err != nil {
		t.Fatal(err)
	}
	if mem, file, _ := lastSeen("n1"); !file.Equal(mem) {
		t.Fatalf("after Flush: seen %s, file %s", mem, file)
	}
	// Retire: the key stops working; retiring twice is fine.
	for range 2 {
		if err := f.store.Retire(t.Context(), "pool_a", "n1"); err != nil {
			t.Fatal(err)
		}
	}
	if code := refusalCode(f.store.Heartbeat(t.Context(), "pool_a", "n1", k1, "")); code != CodeKeyUnknown {
		t.Fatalf("a retired key: %s", code)
	}
	if nodes, _ := f.store.Joined(t.Context(), "pool_a"); len(nodes) != 1 || nodes[0].Name != "n2" {
		t.Fatalf("after retiring n1: %+v", nodes)
	}
}

// TestRestartKeepsWhatWasWritten: a new Store over the same file knows the
// nodes and their last written beat; the node key still works.
func TestRestartKeepsWhatWasWritten(t *testing.T) {
	clk := clock.NewFake(t0)
	f := newFixture(t, clk)
	key, err := f.store.Join(t.Context(), "pool_a", "n1", f.mint(t, "pool_a", "n1"))
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(40 * time.Second)
	if err := f.store.Heartbeat(t.Context(), "pool_a", "n1", key, ""); err != nil {
		t.Fatal(err)
	}
	again := NewStore(f.st, StoreOptions{Clock: clk})
	clk.Advance(80 * time.Second) // 80 s after the written beat
	nodes, err := again.Joined(t.Context(), "pool_a")
	if err != nil || len(nodes) != 1 || !nodes[0].LastSeen.Equal(t0.Add(40*time.Second)) || !nodes[0].Connected {
		t.Fatalf("after a restart: %+v %v", nodes, err)
	}
	if err := again.Heartbeat(t.Context(), "pool_a", "n1", key, ""); err != nil {
		t.Fatal(err)
	}
}

// TestForget drops a pool's tokens, nodes and keys, and nothing of another.
func TestForget(t *testing.T) {
	f := newFixture(t, clock.NewFake(t0))
	ka, err := f.store.Join(t.Context(), "pool_a", "n1", f.mint(t, "pool_a", "n1", "n2"))
	if err != nil {
		t.Fatal(err)
	}
	kb, err := f.store.Join(t.Context(), "pool_b", "n1", f.mint(t, "pool_b", "n1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.store.Heartbeat(t.Context(), "pool_a", "n1", ka, ""); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := f.store.Forget(t.Context(), "pool_a"); err != nil {
			t.Fatal(err)
		}
	}
	if nodes, _ := f.store.Joined(t.Context(), "pool_a"); len(nodes) != 0 || tokens(t, f, "pool_a") != nil {
		t.Fatalf("pool_a left: %+v", nodes)
	}
	if code := refusalCode(f.store.Heartbeat(t.Context(), "pool_a", "n1", ka, "")); code != CodeKeyUnknown {
		t.Fatalf("a forgotten key: %s", code)
	}
	if err := f.store.Heartbeat(t.Context(), "pool_b", "n1", kb, ""); err != nil {
		t.Fatal("pool_b's key after forgetting pool_a:", err)
	}
}

// TestNothingInClear: the tokens and node keys handed out are nowhere in
// the state file, whatever encoding: the file holds their hashes.
func TestNothingInClear(t *testing.T) {
	clk := clock.NewFake(t0)
	f := newFixture(t, clk)
	var secretsOut []string
	for i := range 3 {
		tok := f.mint(t, "pool_a", "n1", "n2")
		secretsOut = append(secretsOut, tok)
		if i == 2 {
			for _, n := range []string{"n1", "n2"} {
				key, err := f.store.Join(t.Context(), "pool_a", n, tok)
				if err != nil {
					t.Fatal(err)
				}
				clk.Advance(31 * time.Second)
				if err := f.store.Heartbeat(t.Context(), "pool_a", n, key, ""); err != nil {
					t.Fatal(err)
				}
				secretsOut = append(secretsOut, key)
			}
		}
	}
	// A join attempt with a canary as its token leaves nothing of it either.
	const canary = "canary-7f3a9e0c-join-token-never-stored"
	if code := refusalCode(joinErr(f, "pool_a", "n1", canary)); code != CodeTokenUnknown {
		t.Fatal(code)
	}
	if err := f.store.Flush(); err != nil {
		t.Fatal(err)
	}
	backup := t.TempDir() + "/copy.db"
	if err := f.st.Backup(backup); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(backup)
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) == 0 || !strings.Contains(string(raw), hashOf(secretsOut[len(secretsOut)-1])) {
		t.Fatal("the copy does not even hold the hashes: the test reads the wrong file")
	}
	for _, s := range append(secretsOut, canary) {
		if strings.Contains(string(raw), s) {
			t.Fatalf("the state file holds a secret in clear: %.8s...", s)
		}
	}
}

func TestStoreHonoursContext(t *testing.T) {
	f := newFixture(t, clock.NewFake(t0))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, _, err := f.store.Token(ctx, "pool_a", []string{"n"}, false); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if _, err := f.store.Joined(ctx, "pool_a"); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}
