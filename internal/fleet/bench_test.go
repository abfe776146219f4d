package fleet

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// largeDocument generates the benchmark document: 1,000 items in
// every top-level list, 10 offers on every pool, 8 volumes on every
// template.
func largeDocument(tb testing.TB) []byte {
	tb.Helper()
	var b strings.Builder
	b.WriteString(`{"version":1,"sites":[`)
	for i := range 1000 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"name":"site-%d","kind":"shared","region":"eu-central-%d","iamRegion":"eu-central"}`, i, i%7)
	}
	b.WriteString(`],"providerAccounts":[`)
	for i := range 1000 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"name":"acct-%d","provider":"fake","config":{"token":"secret://tok-%d","region":"r%d","zones":["a","b"],"nested":{"apiKey":"env://KEY_%d","limit":%d}}}`, i, i, i, i, i)
	}
	b.WriteString(`],"pools":[`)
	for i := range 1000 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"name":"pool-%d","site":"site-%d","class":"metal-host","gpuModel":"H100","sharing":"mig","policy":{"disruptionBudget":0.1,"weight":%d},"ownerQuota":{"gpu":8,"vcpu":512},"offers":[`, i, i, i)
		for j := range 10 {
			if j > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"tenant":"tenant-%d","quota":{"gpu":%d,"vcpu":64},"includeDescendants":%t,"priority":%d}`, j, j, j%2 == 0, j*10)
		}
		b.WriteString(`]}`)
	}
	b.WriteString(`],"flavors":[`)
	for i := range 1000 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"pool":"pool-%d","name":"g1.f%d","vcpu":%d,"memoryGiB":%d,"diskGiB":100,"gpus":1,"placement":{"numaAffine":true,"hugepages":"1Gi"}}`, i, i, 1+i%64, 4+i%128)
	}
	b.WriteString(`],"sandboxTemplates":[`)
	for i := range 1000 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"name":"tpl-%d","pool":"pool-%d","flavor":"g1.f%d","imageId":"ubuntu-24.04","defaultTtlSeconds":3600,"maxTtlSeconds":86400,"warm":{"min":1,"max":4},"env":{"A_TOKEN":"secret://acme/sec_%d","B":"secret://acme/b"},"network":"private","volumes":[`, i, i, i, i)
		for j := range 8 {
			if j > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"volume":"vol-%d","mountPath":"/mnt/v%d","readOnly":%t}`, j, j, j%2 == 0)
		}
		b.WriteString(`]}`)
	}
	b.WriteString(`]}`)
	data := []byte(b.String())
	if len(data) > MaxDocumentBytes {
		tb.Fatalf("generated document is %d bytes, over the 16 MiB limit", len(data))
	}
	return data
}

// BenchmarkValidateLarge reports validation time as a ratio to
// json.Unmarshal of the same bytes into any, measured in the same run
// (goal: at most 5x). Each iteration times one of each, interleaved, and
// the ratio is taken between the fastest of each: on a shared 2-core
// machine the minimum is the figure least disturbed by other work.
func BenchmarkValidateLarge(b *testing.B) {
	data := largeDocument(b)
	if _, errs := Validate("bench", data); errs != nil {
		b.Fatalf("generated document invalid: %s", errs.Text())
	}
	b.SetBytes(int64(len(data)))
	var bestDecode, bestValidate time.Duration
	for b.Loop() {
		t0 := time.Now()
		var v any
		if err := json.Unmarshal(data, &v); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, errs := Validate("bench", data); errs != nil {
			b.Fatal(errs)
		}
		t2 := time.Now()
		if d := t1.Sub(t0); bestDecode == 0 || d < bestDecode {
			bestDecode = d
		}
		if d := t2.Sub(t1); bestValidate == 0 || d < bestValidate {
			bestValidate = d
		}
	}
	b.ReportMetric(float64(bestValidate)/float64(bestDecode), "x-json-decode")
	b.ReportMetric(float64(bestValidate.Microseconds())/1000, "validate-ms")
	b.ReportMetric(float64(bestDecode.Microseconds())/1000, "decode-ms")
	b.ReportMetric(float64(len(data))/(1<<20), "MiB")
}

var writeLarge = flag.String("write-large", "", "write the largest benchmark document to this file (bench/startup.sh times the command line on it)")

// TestLargeDocumentIsValid also hands the document to bench/startup.sh
// (-write-large FILE), so that one generator serves both.
func TestLargeDocumentIsValid(t *testing.T) {
	data := largeDocument(t)
	if _, errs := Validate("large", data); errs != nil {
		t.Fatal(errs.Text())
	}
	if *writeLarge != "" {
		if err := os.WriteFile(*writeLarge, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
