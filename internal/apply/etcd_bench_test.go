package apply_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/apply"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/state/statetest"
)

// BenchmarkEtcdVsBbolt reports, in one run, an apply of 5,000 creates and
// the recording of one reviewed plan (what the agent writes per proposal)
// on the etcd backend (one local member that syncs each commit, on the
// same two cores) as ratios to the same on a bbolt file, fastest of each.
// An apply of that size is over etcd's transaction limits, so it goes as
// chunks and a roll-forward (internal/state/etcd.go).
func BenchmarkEtcdVsBbolt(b *testing.B) {
	d := doc(b, createsDocument(1000))
	small := plan.Make(doc(b, createsDocument(2)), nil, plan.Options{})
	record, err := json.Marshal(small)
	if err != nil {
		b.Fatal(err)
	}
	const records = 50
	var best [4]time.Duration // apply bbolt, apply etcd, record bbolt, record etcd
	keep := func(i int, d time.Duration) {
		if best[i] == 0 || d < best[i] {
			best[i] = d
		}
	}
	endpoint := statetest.EtcdEndpointSynced(b)
	i := 0
	for b.Loop() {
		i++
		file, err := state.Open(filepath.Join(b.TempDir(), fmt.Sprintf("f%d.db", i)), state.Options{})
		if err != nil {
			b.Fatal(err)
		}
		opts := statetest.EtcdOptions(b)
		opts.Endpoints = []string{endpoint}
		etcd, err := state.OpenEtcd(context.Background(), opts)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := etcd.Lead(b.Context()); err != nil {
			b.Fatal(err)
		}
		for k, s := range []*state.Store{file, etcd} {
			t0 := time.Now()
			res, err := apply.Apply(b.Context(), s, d, apply.Options{AppliedBy: "bench"})
			if err != nil || res.Applied != 5000 {
				b.Fatalf("%s: %v", s.Backend(), err)
			}
			keep(k, time.Since(t0))
			t0 = time.Now()
			for n := range records {
				if err := s.Update(func(tx *state.Tx) error { return tx.Put("reviewed", fmt.Sprint(n), json.RawMessage(record)) }); err != nil {
					b.Fatal(err)
				}
			}
			keep(2+k, time.Since(t0)/records)
		}
		file.Close()
		etcd.Close()
	}
	b.ReportMetric(float64(best[1])/float64(best[0]), "apply-etcd/bbolt")
	b.ReportMetric(float64(best[3])/float64(best[2]), "record-etcd/bbolt")
	b.ReportMetric(float64(best[0].Microseconds())/1000, "apply-bbolt-ms")
	b.ReportMetric(float64(best[1].Microseconds())/1000, "apply-etcd-ms")
	b.ReportMetric(float64(best[2].Microseconds())/1000, "record-bbolt-ms")
	b.ReportMetric(float64(best[3].Microseconds())/1000, "record-etcd-ms")
}
