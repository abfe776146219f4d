package apply_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/apply"
	"github.com/fleet-agent/fleet-agent/internal/canon"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

func createsDocument(n int) string {
	var b strings.Builder
	b.WriteString(`{"version":1,"sites":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"name":"s%d","kind":"shared","region":"eu"}`, i)
	}
	b.WriteString(`],"providerAccounts":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"name":"a%d","provider":"fake","config":{"token":"secret://t%d"}}`, i, i)
	}
	b.WriteString(`],"pools":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"name":"p%d","site":"s%d","class":"provider","providerAccount":"a%d","policy":{"w":%d}}`, i, i, i, i)
	}
	b.WriteString(`],"flavors":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"pool":"p%d","name":"f","vcpu":2,"memoryGiB":4,"diskGiB":40}`, i)
	}
	b.WriteString(`],"sandboxTemplates":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"name":"t%d","pool":"p%d","flavor":"f","imageId":"img"}`, i, i)
	}
	b.WriteString(`]}`)
	return b.String()
}

// BenchmarkApply5000Creates reports the apply of 5,000 creates as a ratio
// to a bare bbolt transaction writing the same records (objects, names,
// one audit row per call and one for the apply), each on a fresh file,
// interleaved, fastest of each (goal: at most 2x).
func BenchmarkApply5000Creates(b *testing.B) {
	d := doc(b, createsDocument(1000))
	p := plan.Make(d, nil, plan.Options{})
	if len(p.Calls) != 5000 {
		b.Fatalf("%d calls", len(p.Calls))
	}
	var bestApply, bestBare time.Duration
	i := 0
	for b.Loop() {
		i++
		bare, err := state.Open(filepath.Join(b.TempDir(), fmt.Sprintf("bare%d.db", i)), state.Options{})
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		err = bare.Update(func(tx *state.Tx) error {
			for _, c := range p.Calls {
				spec := map[string]any{}
				for k, v := range c.Params {
					if k != "id" {
						spec[k] = v
					}
				}
				if err := tx.PutObject(inventory.Object{Kind: c.Kind(), ID: c.ID(), Spec: spec}, c.Name()); err != nil {
					return err
				}
				if err := tx.AppendAudit(state.AuditRow{Action: "call", Method: c.Method, Params: canon.MustMarshal(c.Params)}); err != nil {
					return err
				}
			}
			return tx.AppendAudit(state.AuditRow{Action: "apply"})
		})
		t1 := time.Now()
		bare.Close()
		if err != nil {
			b.Fatal(err)
		}
		s, err := state.Open(filepath.Join(b.TempDir(), fmt.Sprintf("apply%d.db", i)), state.Options{})
		if err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		res, err := apply.Apply(b.Context(), s, d, apply.Options{AppliedBy: "bench"})
		t3 := time.Now()
		s.Close()
		if err != nil || res.Applied != 5000 {
			b.Fatal(err)
		}
		if d := t1.Sub(t0); bestBare == 0 || d < bestBare {
			bestBare = d
		}
		if d := t3.Sub(t2); bestApply == 0 || d < bestApply {
			bestApply = d
		}
	}
	b.ReportMetric(float64(bestApply)/float64(bestBare), "x-bare-tx")
	b.ReportMetric(float64(bestApply.Microseconds())/1000, "apply-ms")
	b.ReportMetric(float64(bestBare.Microseconds())/1000, "bare-ms")
}
