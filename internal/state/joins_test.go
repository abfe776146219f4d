package state_test

import (
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/state/statetest"
)

func TestJoinTokensRecord(t *testing.T) {
	s := statetest.Open(t)
	var got *state.JoinTokens
	mustView(t, s, func(tx *state.Tx) (err error) { got, err = tx.JoinTokens("pool_a"); return })
	if got != nil {
		t.Fatalf("a pool without tokens: %+v", got)
	}
	rec := state.JoinTokens{PoolID: "pool_a", Serial: 1,
		Current: &state.JoinToken{Hash: "aa", Serial: 1, Names: []state.JoinName{{Name: "n1", UsesLeft: 1}}, CreatedAt: 5}}
	for i := range 12 {
		rec.Revoked = append(rec.Revoked, state.RevokedJoinToken{Hash: strings.Repeat("b", i+1)})
	}
	mustUpdate(t, s, func(tx *state.Tx) error { return tx.PutJoinTokens(rec) })
	mustView(t, s, func(tx *state.Tx) (err error) { got, err = tx.JoinTokens("pool_a"); return })
	if got == nil || got.Current.Hash != "aa" || got.Current.Names[0].UsesLeft != 1 || len(got.Revoked) != state.MaxRevokedJoinTokens || got.Revoked[0].Hash != "b" {
		t.Fatalf("read back %+v", got)
	}
	for name, bad := range map[string]state.JoinTokens{
		"no pool":          {Current: &state.JoinToken{Hash: "x"}},
		"NUL in pool":      {PoolID: "a\x00b"},
		"current, no hash": {PoolID: "pool_a", Current: &state.JoinToken{}},
	} {
		if err := s.Update(func(tx *state.Tx) error { return tx.PutJoinTokens(bad) }); err == nil {
			t.Errorf("%s: written", name)
		}
	}
}

// TestJoinedNodesAndKeys: nodes of a pool list sorted by name and apart from
// other pools (whose ids share a prefix); the key index follows a node that
// joins again, a retired node's key finds nothing, and Forget leaves other
// pools alone.
func TestJoinedNodesAndKeys(t *testing.T) {
	s := statetest.Open(t)
	put := func(n state.JoinedNode) error {
		return s.Update(func(tx *state.Tx) error { return tx.PutJoinedNode(n) })
	}
	for _, n := range []state.JoinedNode{
		{PoolID: "pool_a", Name: "node-b", KeyHash: "kb"},
		{PoolID: "pool_a", Name: "node-a", KeyHash: "ka"},
		{PoolID: "pool_ab", Name: "node-a", KeyHash: "kab"},
		{PoolID: "pool", Name: "x", KeyHash: "kx"},
	} {
		if err := put(n); err != nil {
			t.Fatal(err)
		}
	}
	names := func(pool string) string {
		var ns []state.JoinedNode
		mustView(t, s, func(tx *state.Tx) (err error) { ns, err = tx.JoinedNodes(pool); return })
		var out []string
		for _, n := range ns {
			out = append(out, n.Name)
		}
		return strings.Join(out, ",")
	}
	byKey := func(k string) string {
		var n *state.JoinedNode
		mustView(t, s, func(tx *state.Tx) (err error) { n, err = tx.JoinedNodeByKey(k); return })
		if n == nil {
			return ""
		}
		return n.PoolID + "/" + n.Name
	}
	if got := names("pool_a"); got != "node-a,node-b" {
		t.Fatalf("pool_a lists %q", got)
	}
	if got := names("pool"); got != "x" {
		t.Fatalf("pool lists %q", got)
	}
	if byKey("ka") != "pool_a/node-a" || byKey("kab") != "pool_ab/node-a" || byKey("nope") != "" || byKey("") != "" {
		t.Fatal("key index")
	}
	// Joining again with a new key: the old one stops working.
	if err := put(state.JoinedNode{PoolID: "pool_a", Name: "node-a", KeyHash: "ka2", JoinedAt: 9}); err != nil {
		t.Fatal(err)
	}
	if byKey("ka") != "" || byKey("ka2") != "pool_a/node-a" {
		t.Fatal("the old key still works after a new join")
	}
	// Another node's key hash is refused.
	if err := put(state.JoinedNode{PoolID: "pool_a", Name: "node-c", KeyHash: "kb"}); err == nil {
		t.Fatal("a key hash that is another node's was written")
	}
	for _, bad := range []state.JoinedNode{{PoolID: "pool_a", Name: "n"}, {PoolID: "pool_a", KeyHash: "k"}, {Name: "n", KeyHash: "k"}, {PoolID: "p", Name: "a\x00", KeyHash: "k"}} {
		if put(bad) == nil {
			t.Errorf("%+v written", bad)
		}
	}
	mustUpdate(t, s, func(tx *state.Tx) error { return tx.DeleteJoinedNode("pool_a", "node-b") })
	mustUpdate(t, s, func(tx *state.Tx) error { return tx.DeleteJoinedNode("pool_a", "node-b") })
	if byKey("kb") != "" || names("pool_a") != "node-a" {
		t.Fatal("a retired node is still there")
	}
	mustUpdate(t, s, func(tx *state.Tx) error {
		return tx.PutJoinTokens(state.JoinTokens{PoolID: "pool_a", Current: &state.JoinToken{Hash: "h"}})
	})
	mustUpdate(t, s, func(tx *state.Tx) error { return tx.ForgetJoins("pool_a") })
	var tok *state.JoinTokens
	mustView(t, s, func(tx *state.Tx) (err error) { tok, err = tx.JoinTokens("pool_a"); return })
	if names("pool_a") != "" || byKey("ka2") != "" || tok != nil {
		t.Fatal("Forget left something of the pool")
	}
	if names("pool_ab") != "node-a" || byKey("kab") != "pool_ab/node-a" || names("pool") != "x" {
		t.Fatal("Forget touched another pool")
	}
}

// TestJoinsOnAFileWithoutTheBucket: a file written before joins existed
// reads as empty in a read-only open (no bucket made).
func TestJoinsOnAFileWithoutTheBucket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fleet.db")
	s, err := state.Open(path, state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	// Take the bucket out, as a file of an older build would be.
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket([]byte("joins")) }); err != nil {
		t.Fatal(err)
	}
	db.Close()
	ro, err := state.Open(path, state.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	err = ro.View(func(tx *state.Tx) error {
		tok, err := tx.JoinTokens("p")
		if err != nil || tok != nil {
			t.Errorf("tokens %v %v", tok, err)
		}
		ns, err := tx.JoinedNodes("p")
		if err != nil || ns != nil {
			t.Errorf("nodes %v %v", ns, err)
		}
		n, err := tx.JoinedNodeByKey("k")
		if err != nil || n != nil {
			t.Errorf("by key %v %v", n, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
