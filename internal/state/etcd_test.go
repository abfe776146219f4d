package state_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/state/statetest"
)

// These tests run on a real etcd server whichever backend the rest of the
// suite uses (statetest starts it from $FLEET_AGENT_ETCD).

func openEtcd(t *testing.T, opts state.EtcdOptions) *state.Store {
	t.Helper()
	s, err := state.OpenEtcd(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func lead(t *testing.T, s *state.Store) *state.Leadership {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := s.Lead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func pools(n int, gen int) []inventory.Object {
	out := make([]inventory.Object, n)
	for i := range out {
		out[i] = inventory.Object{Kind: inventory.Pool, ID: fmt.Sprintf("pool_%05d", i),
			Spec: map[string]any{"class": "vps-host", "gen": int64(gen), "pad": strings.Repeat("x", 200)}}
	}
	return out
}

// A commit of thousands of objects is bigger than one etcd transaction; a
// reader on another connection sees all of it or none, at every moment.
func TestEtcdLargeCommitIsAllOrNothing(t *testing.T) {
	opts := statetest.EtcdOptions(t)
	w := openEtcd(t, opts)
	lead(t, w)
	ro := opts
	ro.ReadOnly = true
	r := openEtcd(t, ro)

	const n = 5000
	var stop atomic.Bool
	var seen sync.Map
	var wg sync.WaitGroup
	var readErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			snap, err := r.Snapshot()
			if err != nil {
				readErr = err
				return
			}
			gens := map[any]int{}
			for _, o := range snap.Objects(inventory.Pool) {
				gens[o.Spec["gen"]]++
			}
			seen.Store(fmt.Sprint(snap.Len(), gens), true)
		}
	}()
	for gen := 1; gen <= 2; gen++ {
		err := w.Update(func(tx *state.Tx) error {
			for _, o := range pools(n, gen) {
				if err := tx.PutObject(o, ""); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	if readErr != nil {
		t.Fatal(readErr)
	}
	seen.Range(func(k, _ any) bool {
		switch k.(string) {
		case "0 map[]", fmt.Sprintf("%d map[1:%d]", n, n), fmt.Sprintf("%d map[2:%d]", n, n):
		default:
			t.Errorf("a reader saw a half commit: %s objects by generation", k)
		}
		return true
	})
	if w.EtcdStats().LargeCommits.Load() != 2 {
		t.Errorf("large commits = %d, want 2 (each commit was over etcd's transaction limits)", w.EtcdStats().LargeCommits.Load())
	}
	snap, err := r.Snapshot()
	if err != nil || snap.Len() != n {
		t.Fatalf("after: %v objects, %v", snap.Len(), err)
	}
}

// A record over etcd's request limit (an applied document of a big fleet)
// is split and read back whole; replacing it drops the old parts.
func TestEtcdBigRecordRoundTrips(t *testing.T) {
	opts := statetest.EtcdOptions(t)
	s := openEtcd(t, opts)
	lead(t, s)
	doc := bytes.Repeat([]byte(`{"a":"0123456789abcdef"},`), 150_000) // 3.75 MB
	doc = append(append([]byte("["), doc[:len(doc)-1]...), ']')
	for i := range 2 {
		if err := s.Update(func(tx *state.Tx) error {
			return tx.SetApplied(state.Applied{Document: doc, PlanHash: fmt.Sprint(i)})
		}); err != nil {
			t.Fatal(err)
		}
	}
	var got *state.Applied
	if err := s.View(func(tx *state.Tx) (err error) { got, err = tx.Applied(); return err }); err != nil {
		t.Fatal(err)
	}
	if got == nil || !bytes.Equal(got.Document, doc) || got.PlanHash != "1" {
		t.Fatalf("the big record did not round-trip")
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: opts.Endpoints, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	r, err := cli.Get(context.Background(), opts.Prefix+"/x/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if want := int64((len(doc)+100)/(256<<10) + 1); r.Count > want {
		t.Errorf("%d parts stored, want at most %d: the first value's parts were not dropped", r.Count, want)
	}
}

// Only the leader writes; a leader whose lease is gone (paused past it,
// cut off) is refused by etcd's comparison in the same transaction, and the
// new leader's records stand.
func TestEtcdWritesAreFenced(t *testing.T) {
	opts := statetest.EtcdOptions(t)
	opts.Lease = 2 * time.Second
	a := openEtcd(t, withName(opts, "a"))
	b := openEtcd(t, withName(opts, "b"))
	la := lead(t, a)

	put := func(s *state.Store, key string) error {
		return s.Update(func(tx *state.Tx) error { return tx.Put("test", key, key) })
	}
	if err := put(a, "a1"); err != nil {
		t.Fatal(err)
	}
	if err := put(b, "b0"); !errors.Is(err, state.ErrNotLeader) || !refusal.Is(err, refusal.Unavailable) {
		t.Fatalf("a standby's write: %v, want UNAVAILABLE, not the leader", err)
	}
	if name, err := b.Leader(context.Background()); err != nil || name != "a" {
		t.Fatalf("leader seen by b: %q %v", name, err)
	}
	bLeads := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := b.Lead(ctx)
		bLeads <- err
	}()
	// a's lease ends at etcd as it would after a pause: revoked from
	// outside, while a itself has not been told.
	cli, err := clientv3.New(clientv3.Config{Endpoints: opts.Endpoints, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	resp, err := cli.Get(context.Background(), opts.Prefix+"/leader/", clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) == 0 {
		t.Fatalf("election keys: %v %v", resp, err)
	}
	if _, err := cli.Revoke(context.Background(), clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	if err := <-bLeads; err != nil {
		t.Fatal(err)
	}
	if err := put(b, "b1"); err != nil {
		t.Fatal(err)
	}
	if err := put(a, "a2"); !errors.Is(err, state.ErrNotLeader) {
		t.Fatalf("the old leader's write after losing: %v", err)
	}
	select {
	case <-la.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("the old leader never noticed it lost")
	}
	if err := a.Fenced(); err == nil {
		t.Fatal("Fenced is nil on a store that lost its leadership")
	}
	for key, want := range map[string]bool{"a1": true, "b1": true, "a2": false, "b0": false} {
		var v string
		var ok bool
		err := b.View(func(tx *state.Tx) (err error) { ok, err = tx.Get("test", key, &v); return err })
		if err != nil || ok != want {
			t.Errorf("record %s: present=%v (%v), want %v", key, ok, err, want)
		}
	}
}

func withName(o state.EtcdOptions, name string) state.EtcdOptions { o.Name = name; return o }

// A store moves between backends with every record and its installation,
// and a backup of an etcd store is a bbolt file that opens on one box.
func TestCopyBetweenBackends(t *testing.T) {
	dir := t.TempDir()
	src, err := state.Open(filepath.Join(dir, "src.db"), state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	err = src.Update(func(tx *state.Tx) error {
		for _, o := range pools(300, 1) {
			if err := tx.PutObject(o, "name-"+o.ID); err != nil {
				return err
			}
		}
		for i := range 3 {
			if err := tx.AppendAudit(state.AuditRow{Action: "apply", Who: fmt.Sprint(i)}); err != nil {
				return err
			}
			if _, err := tx.OutboxAppend(fmt.Sprint("k", i), []byte("data")); err != nil {
				return err
			}
		}
		return tx.PutSubstrateWant(state.SubstrateWant{PoolID: "pool_00001"})
	})
	if err != nil {
		t.Fatal(err)
	}
	mid := openEtcd(t, statetest.EtcdOptions(t))
	lead(t, mid)
	if n, err := src.CopyTo(mid); err != nil || n < 300 {
		t.Fatalf("copy to etcd: %d %v", n, err)
	}
	if _, err := src.CopyTo(mid); !refusal.Is(err, refusal.InvalidState) {
		t.Fatalf("a copy into a store that holds one: %v", err)
	}
	back := filepath.Join(dir, "back.db")
	if err := mid.Backup(back); err != nil {
		t.Fatal(err)
	}
	dst, err := state.Open(back, state.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	if err := dst.Check(); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*state.Store{mid, dst} {
		if s.Installation() != src.Installation() {
			t.Errorf("%s: installation %q, want the source's %q", s.Backend(), s.Installation(), src.Installation())
		}
		if got, want := dump(t, s), dump(t, src); got != want {
			t.Errorf("%s holds other records than the source:\n%s\nwant\n%s", s.Backend(), got[:min(400, len(got))], want[:min(400, len(want))])
		}
	}
	// Sequences travel: the next audit row after the copy is number 4.
	if err := mid.Update(func(tx *state.Tx) error { return tx.AppendAudit(state.AuditRow{Action: "apply"}) }); err != nil {
		t.Fatal(err)
	}
	var last *state.AuditRow
	_ = mid.View(func(tx *state.Tx) (err error) {
		last, err = tx.LastAudit(func(state.AuditRow) bool { return true })
		return err
	})
	if last == nil || last.Seq != 4 {
		t.Fatalf("the audit row after the copy: %+v, want seq 4", last)
	}
}

// dump is a store's records as text.
func dump(t *testing.T, s *state.Store) string {
	t.Helper()
	var out struct {
		Snap   []inventory.Object
		Audit  []state.AuditRow
		Outbox []state.OutboxEntry
		Subs   []state.SubstrateRecord
	}
	err := s.View(func(tx *state.Tx) error {
		snap, err := tx.Snapshot()
		if err != nil {
			return err
		}
		out.Snap = snap.Objects(inventory.Pool)
		if out.Audit, err = tx.Audit(); err != nil {
			return err
		}
		if err := tx.OutboxEntries(func(e state.OutboxEntry) error { out.Outbox = append(out.Outbox, e); return nil }); err != nil {
			return err
		}
		out.Subs, err = tx.Substrates()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(out)
	return string(b)
}

// On etcd the audit log keeps its newest rows, so it cannot grow without
// bound in etcd's memory.
func TestEtcdAuditIsBounded(t *testing.T) {
	opts := statetest.EtcdOptions(t)
	opts.AuditKeep = 5
	s := openEtcd(t, opts)
	lead(t, s)
	for i := range 12 {
		if err := s.Update(func(tx *state.Tx) error { return tx.AppendAudit(state.AuditRow{Action: "apply", Who: fmt.Sprint(i)}) }); err != nil {
			t.Fatal(err)
		}
	}
	var rows []state.AuditRow
	if err := s.View(func(tx *state.Tx) (err error) { rows, err = tx.Audit(); return err }); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 5 || rows[0].Seq != 8 || rows[4].Seq != 12 {
		t.Fatalf("rows kept: %+v, want seq 8..12", rows)
	}
}
