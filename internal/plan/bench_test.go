package plan

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
)

// benchDocument is a document of about n objects, in units of ten: a site,
// a pool with three owner quota resources and three offers, a flavor and a
// template (every list stays within its 1,000 items up to 10,000 objects).
func benchDocument(tb testing.TB, n int) []byte {
	tb.Helper()
	units := n / 10
	var b strings.Builder
	b.WriteString(`{"version":1,"providerAccounts":[{"name":"acct","provider":"fake","config":{"token":"secret://tok","region":"fra1"}}],"sites":[`)
	for i := range units {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"name":"site-%d","kind":"shared","region":"eu-central-%d","iamRegion":"eu-central"}`, i, i%7)
	}
	b.WriteString(`],"pools":[`)
	for i := range units {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"name":"pool-%d","site":"site-%d","class":"metal-host","gpuModel":"H100","sharing":"mig",`+
			`"policy":{"disruptionBudget":0.1,"weight":%d,"labels":{"team":"ml","tier":"gold"}},"ownerQuota":{"gpu":8,"vcpu":512,"memory":4096},"offers":[`, i, i, i)
		for j := range 3 {
			if j > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"tenant":"tenant-%d","quota":{"gpu":%d,"vcpu":64},"includeDescendants":%t,"priority":%d}`, j, j, j%2 == 0, j*10)
		}
		b.WriteString(`]}`)
	}
	b.WriteString(`],"flavors":[`)
	for i := range units {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"pool":"pool-%d","name":"g1.f%d","vcpu":%d,"memoryGiB":%d,"diskGiB":100,"gpus":1,"placement":{"numaAffine":true,"hugepages":"1Gi"}}`, i, i, 1+i%64, 4+i%128)
	}
	b.WriteString(`],"sandboxTemplates":[`)
	for i := range units {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"name":"tpl-%d","pool":"pool-%d","flavor":"g1.f%d","imageId":"ubuntu-24.04","defaultTtlSeconds":3600,"maxTtlSeconds":86400,`+
			`"warm":{"min":1,"max":4},"env":{"A_TOKEN":"secret://acme/sec_%d"},"network":"private","volumes":[{"volume":"data","mountPath":"/data","readOnly":true}]}`, i, i, i, i)
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

type benchFleet struct {
	data     []byte
	doc      *fleet.Document
	same     *inventory.Snapshot // the fleet the document describes
	changed  *inventory.Snapshot // the same, every tenth object changed
	objects  int
	nChanged int
}

func newBenchFleet(tb testing.TB, n int) *benchFleet {
	tb.Helper()
	data := benchDocument(tb, n)
	doc, errs := fleet.Validate("bench.json", data)
	if errs != nil {
		tb.Fatal(errs.Text())
	}
	objs := applyCalls(tb, nil, Make(doc, nil, Options{}).Calls)
	f := &benchFleet{data: data, doc: doc, same: inventory.NewSnapshot(objs), objects: len(objs)}
	changed := cloneObjects(objs)
	for i := range changed {
		if i%10 != 0 {
			continue
		}
		o := &changed[i]
		switch o.Kind {
		case inventory.Pool:
			o.Spec["gpuModel"] = "B200"
		case inventory.OwnerQuota:
			o.Spec["max"] = int64(1)
		case inventory.Offer:
			o.Spec["priority"] = int64(-1)
		case inventory.Flavor:
			o.Spec["vcpu"] = int64(999)
		case inventory.SandboxTemplate:
			o.Spec["imageId"] = "debian"
		case inventory.ProviderAccount:
			o.Spec["config"] = map[string]any{}
		case inventory.Site:
			continue // sites never change: that would block
		}
		f.nChanged++
	}
	f.changed = inventory.NewSnapshot(changed)
	if p := Make(doc, f.same, Options{}); !p.Empty() {
		tb.Fatalf("unchanged fleet plans %d calls", len(p.Calls))
	}
	p := Make(doc, f.changed, Options{})
	if p.Blocked() || len(p.Calls) != f.nChanged {
		tb.Fatalf("changed fleet: %d calls for %d changes, blocked %v", len(p.Calls), f.nChanged, p.Blocked())
	}
	return f
}

// BenchmarkPlanVsDecode plans a parsed document of about 5,000 objects
// against a snapshot of the same size, all unchanged and 10% changed, and
// reports the time as a ratio to json.Unmarshal of the document's bytes
// into any, measured in the same run (goal: at most 3x). Each iteration
// times one of each, interleaved, and the ratio is taken between the
// fastest of each: on a busy machine the minimum is the least disturbed.
func BenchmarkPlanVsDecode(b *testing.B) {
	f := newBenchFleet(b, 5000)
	for _, tc := range []struct {
		name string
		snap *inventory.Snapshot
	}{{"unchanged", f.same}, {"changed10pct", f.changed}} {
		b.Run(tc.name, func(b *testing.B) {
			var bestDecode, bestPlan time.Duration
			for b.Loop() {
				t0 := time.Now()
				var v any
				if err := json.Unmarshal(f.data, &v); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				Make(f.doc, tc.snap, Options{})
				t2 := time.Now()
				if d := t1.Sub(t0); bestDecode == 0 || d < bestDecode {
					bestDecode = d
				}
				if d := t2.Sub(t1); bestPlan == 0 || d < bestPlan {
					bestPlan = d
				}
			}
			b.ReportMetric(float64(bestPlan)/float64(bestDecode), "x-json-decode")
			b.ReportMetric(float64(bestPlan.Microseconds())/1000, "plan-ms")
			b.ReportMetric(float64(bestDecode.Microseconds())/1000, "decode-ms")
			b.ReportMetric(float64(f.objects), "objects")
		})
	}
}

// BenchmarkPlanGrowth shows the plan grows linearly: ns per object stays
// flat from 1,000 to 8,000 objects (10% changed).
func BenchmarkPlanGrowth(b *testing.B) {
	for _, n := range []int{1000, 2000, 4000, 8000} {
		f := newBenchFleet(b, n)
		b.Run(fmt.Sprintf("objects=%d", n), func(b *testing.B) {
			var best time.Duration
			for b.Loop() {
				t0 := time.Now()
				Make(f.doc, f.changed, Options{})
				if d := time.Since(t0); best == 0 || d < best {
					best = d
				}
			}
			b.ReportMetric(float64(best.Nanoseconds())/float64(f.objects), "ns/object")
			b.ReportMetric(float64(f.objects), "objects")
		})
	}
}

// The benchmark fleets are what they claim (sizes, 10% changed).
func TestBenchFleet(t *testing.T) {
	f := newBenchFleet(t, 5000)
	if f.objects < 4900 || f.objects > 5100 {
		t.Errorf("%d objects", f.objects)
	}
	if pct := float64(f.nChanged) / float64(f.objects); pct < 0.08 || pct > 0.11 {
		t.Errorf("%.1f%% changed", pct*100)
	}
}
