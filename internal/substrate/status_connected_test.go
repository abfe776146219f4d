package substrate_test

import (
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/substrate"
)

// TestStatusConnected: a substrate's status lists each joined node as
// connected or not (a heartbeat within 90 s of now, as the state file
// records it) and counts those connected; another pool's nodes are not
// its; a pool with none lists [] (never null).
func TestStatusConnected(t *testing.T) {
	st, err := state.Open(filepath.Join(t.TempDir(), "state.db"), state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	now := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) int64 { return now.Add(-d).UnixMilli() }
	err = st.Update(func(tx *state.Tx) error {
		for _, p := range []struct{ id, name string }{{"pool_a", "a"}, {"pool_b", "b"}, {"pool_c", "c"}} {
			if err := tx.PutSubstrateWant(state.SubstrateWant{PoolID: p.id, Pool: p.name, Tenant: "acme", Present: true}); err != nil {
				return err
			}
			if err := tx.PutSubstrateSeen(state.SubstrateSeen{PoolID: p.id, State: state.SubstrateReady,
				Nodes: state.SeenNodes{Listed: 3, Joined: 3}}); err != nil {
				return err
			}
		}
		for i, n := range []state.JoinedNode{
			{PoolID: "pool_a", Name: "n1", LastSeen: ago(10 * time.Second), Beaten: true},
			{PoolID: "pool_a", Name: "n2", LastSeen: ago(90 * time.Second), Beaten: true},
			{PoolID: "pool_a", Name: "n3", LastSeen: ago(91 * time.Second), Beaten: true},
			{PoolID: "pool_b", Name: "n1", LastSeen: ago(2 * time.Hour)},
		} {
			n.KeyHash, n.JoinedAt = string(rune('a'+i)), ago(3*time.Hour)
			if err := tx.PutJoinedNode(n); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var list []substrate.Status
	if err := st.View(func(tx *state.Tx) (err error) { list, err = substrate.StatusesAt(tx, now); return }); err != nil {
		t.Fatal(err)
	}
	type node struct {
		name      string
		connected bool
		lastSeen  int64
	}
	for i, tc := range []struct {
		pool      string
		connected int
		nodes     []node
	}{
		{"a", 2, []node{{"n1", true, ago(10 * time.Second)}, {"n2", true, ago(90 * time.Second)}, {"n3", false, ago(91 * time.Second)}}},
		{"b", 0, []node{{"n1", false, ago(2 * time.Hour)}}},
		{"c", 0, nil},
	} {
		s := list[i]
		if s.Pool != tc.pool || s.Nodes.Connected != tc.connected || len(s.JoinedNodes) != len(tc.nodes) {
			t.Fatalf("pool %s: %+v", tc.pool, s)
		}
		for j, want := range tc.nodes {
			got := s.JoinedNodes[j]
			if got.Name != want.name || got.Connected != want.connected || got.LastSeen != want.lastSeen {
				t.Errorf("pool %s node %d: %+v, want %+v", tc.pool, j, got, want)
			}
		}
		data, _ := json.Marshal(s)
		var raw map[string]json.RawMessage
		_ = json.Unmarshal(data, &raw)
		if tc.nodes == nil && string(raw["joinedNodes"]) != "[]" {
			t.Errorf("pool %s: joinedNodes %s, want []", tc.pool, raw["joinedNodes"])
		}
	}
}
