package plan

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/testutil/golden"
)

const goldenDir = "../../testdata/plans"

var mdOptions = MarkdownOptions{Marker: "<!-- fleet-agent:plan -->", Head: "0123456789abcdef0123456789abcdef01234567", Branch: "main"}

// mixedDoc against baseDoc's fleet, with prune: updates, deletes, creates,
// blocked changes and notes.
func mixedPlan(t testing.TB) *Plan {
	objs := applied(t, docOf(t, parseJSON(t, baseDoc)), Options{})
	d := parseJSON(t, baseDoc)
	set(t, d, "providerAccounts/0/config/location", "nbg1")
	set(t, d, pVps+"/gpuModel", "H100")
	del(t, d, pVps+"/ownerQuota/vcpu")
	del(t, d, pOffer)
	del(t, d, pTpl)
	set(t, d, "sites/0/kind", "custom")
	del(t, d, pSub)
	add(t, d, "pools", obj(`{"name":"lost","site":"nowhere","class":"vps-host"}`))
	add(t, d, "flavors", obj(`{"pool":"vps","name":"big","vcpu":8,"memoryGiB":32,"diskGiB":100,"placement":{"hugepages":"1Gi"}}`))
	return Make(docOf(t, d), inventory.NewSnapshot(objs), Options{Prune: true})
}

// nonASCIIDoc: names are ASCII by the schema; free-form values (policy,
// imageId, userData, an adopted cluster id) are not, and a blocked reason
// quotes one.
const nonASCIIDoc = `{"version":1,
 "sites":[{"name":"zürich-1","kind":"shared","region":"eu-central"}],
 "providerAccounts":[{"name":"k8s","provider":"fake","config":{"label":"Größe → naïve"}}],
 "pools":[
  {"name":"gpu","site":"zürich-1","class":"metal-host","policy":{"comment":"日本語のプール -> ok","budget":0.25},
   "offers":[{"tenant":"ACME.eu","quota":{"gpu":2}}]},
  {"name":"k1","site":"zürich-1","class":"metal-host","policy":{"substrate":{"kind":"kubernetes","account":"k8s","cluster":{"adopt":"集群/ü-1"},"flavors":[{"name":"n1","machineType":"m1"}]}}},
  {"name":"k2","site":"zürich-1","class":"metal-host","policy":{"substrate":{"kind":"kubernetes","account":"k8s","cluster":{"adopt":"集群/ü-1"},"flavors":[{"name":"n1","machineType":"m1"}]}}}],
 "flavors":[{"pool":"gpu","name":"small","vcpu":2,"memoryGiB":4,"diskGiB":40}],
 "sandboxTemplates":[{"name":"t","pool":"gpu","flavor":"small","imageId":"ubuntu-ü","userData":"#cloud-config\n# café <b>&</b>\n"}]}`

func TestGoldenRenderings(t *testing.T) {
	plans := []struct {
		name string
		plan func(t testing.TB) *Plan
	}{
		{"everything", func(t testing.TB) *Plan {
			return Make(mustDoc(t, "../../testdata/documents/valid/everything.json"), nil, Options{})
		}},
		{"mixed", mixedPlan},
		{"non-ascii", func(t testing.TB) *Plan {
			// zürich-1 is not a valid site name: the schema allows ASCII
			// only there, so the document fails; use an ASCII site.
			return Make(docOf(t, parseJSON(t, strings.ReplaceAll(nonASCIIDoc, "zürich-1", "zurich-1"))), nil, Options{})
		}},
		{"unchanged", func(t testing.TB) *Plan {
			d := docOf(t, parseJSON(t, baseDoc))
			return Make(d, inventory.NewSnapshot(applied(t, d, Options{})), Options{})
		}},
	}
	for _, tc := range plans {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.plan(t)
			var js bytes.Buffer
			if err := p.WriteJSON(&js); err != nil {
				t.Fatal(err)
			}
			var txt, calls bytes.Buffer
			if err := p.WriteText(&txt, false); err != nil {
				t.Fatal(err)
			}
			if err := p.WriteText(&calls, true); err != nil {
				t.Fatal(err)
			}
			for ext, got := range map[string][]byte{
				".txt":       txt.Bytes(),
				".calls.txt": calls.Bytes(),
				".json":      js.Bytes(),
				".md":        []byte(p.Markdown(mdOptions)),
			} {
				golden.Check(t, filepath.Join(goldenDir, tc.name+ext), got)
			}
			checkJSON(t, p, js.Bytes())
		})
	}
}

// checkJSON: the JSON rendering has exactly changes, calls, summary and
// planHash; the summary is five integers; `->` and non-ASCII unescaped.
func checkJSON(t *testing.T, p *Plan, data []byte) {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	if len(m) != 4 || m["changes"] == nil || m["calls"] == nil || m["summary"] == nil || m["planHash"] == nil {
		t.Errorf("JSON keys: %v", keys(m))
	}
	var s map[string]int
	if err := json.Unmarshal(m["summary"], &s); err != nil || len(s) != 5 {
		t.Errorf("summary %s: %v", m["summary"], err)
	}
	var changes []map[string]any
	if err := json.Unmarshal(m["changes"], &changes); err != nil || len(changes) != len(p.Changes) {
		t.Errorf("changes: %v", err)
	}
	if bytes.Contains(data, []byte(`\u003e`)) || bytes.Contains(data, []byte(`\u00`)) || bytes.Contains(data, []byte(`\u0026`)) {
		t.Errorf("JSON escapes HTML or non-ASCII:\n%s", data)
	}
}

func keys[V any](m map[string]V) []string { return inventory.SortedKeys(m) }

func TestNonASCIIKeptUnescaped(t *testing.T) {
	// Site names are ASCII only: the document with zürich-1 is invalid.
	if _, errs := fleet.Validate("x.json", []byte(nonASCIIDoc)); errs == nil {
		t.Fatal("a non-ASCII site name was accepted")
	}
	p := Make(docOf(t, parseJSON(t, strings.ReplaceAll(nonASCIIDoc, "zürich-1", "zurich-1"))), nil, Options{})
	calls := text(p, true)
	for _, want := range []string{
		`"comment":"日本語のプール -> ok"`,
		`"label":"Größe → naïve"`,
		`"imageId":"ubuntu-ü"`,
		`"userData":"#cloud-config\n# café <b>&</b>\n"`,
		`"adopt":"集群/ü-1"`,
		`+ offer gpu -> ACME.eu`,
		`! pool k2: cluster "集群/ü-1" of account "k8s" is already claimed by pool "k1"; one cluster backs one pool`,
	} {
		if !strings.Contains(calls, want) {
			t.Errorf("missing %s in:\n%s", want, calls)
		}
	}
	if strings.Contains(calls, `\u`) {
		t.Errorf("escaped text:\n%s", calls)
	}
	var js bytes.Buffer
	if err := p.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`日本語のプール -> ok`, `"name": "gpu -> ACME.eu"`, `集群/ü-1`} {
		if !strings.Contains(js.String(), want) {
			t.Errorf("JSON lacks %s", want)
		}
	}
}

// A comment never exceeds its limit: cut at line boundaries, fences
// closed, counts and hash kept, the cut said.
func TestMarkdownLimit(t *testing.T) {
	long := strings.Repeat("é日", 120) // 240 code points, 600 bytes
	for _, tc := range []struct {
		name                      string
		pools, adopters, policyKB int
		wantCut                   []string
	}{
		{"calls cut", 300, 0, 1, []string{"more call(s) cut"}},
		{"every section cut", 20, 800, 0, []string{"more call(s) cut", "more blocked change(s) cut", "more plan line(s) cut"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			b.WriteString(`{"version":1,"sites":[{"name":"s","kind":"shared","region":"eu"}],"providerAccounts":[{"name":"k","provider":"fake"}],"pools":[`)
			n := 0
			for i := range tc.pools {
				if n > 0 {
					b.WriteByte(',')
				}
				n++
				fmt.Fprintf(&b, `{"name":"p-%04d","site":"s","class":"metal-host","policy":{"text":%q}}`, i, strings.Repeat(long, tc.policyKB*4))
			}
			for i := range tc.adopters {
				if n > 0 {
					b.WriteByte(',')
				}
				n++
				fmt.Fprintf(&b, `{"name":"a-%04d","site":"s","class":"metal-host","policy":{"substrate":{"kind":"kubernetes","account":"k","cluster":{"adopt":%q},"flavors":[{"name":"n","machineType":"m"}]}}}`, i, long)
			}
			b.WriteString(`]}`)
			p := Make(docBytes(t, []byte(b.String())), nil, Options{})
			fullOpts := mdOptions
			fullOpts.Limit = 1 << 30
			full := p.Markdown(fullOpts)
			if utf8.RuneCountInString(full) <= CommentTarget {
				t.Fatalf("test plan too small: %d code points", utf8.RuneCountInString(full))
			}
			md := p.Markdown(mdOptions)
			cps := utf8.RuneCountInString(md)
			if cps > CommentTarget || cps > CommentLimit {
				t.Errorf("%d code points, limit %d", cps, CommentTarget)
			}
			if len(md) <= cps {
				t.Errorf("test text is not multibyte")
			}
			if cps < CommentTarget-2000 {
				t.Errorf("cut too much: %d code points", cps)
			}
			for _, want := range append([]string{p.Summary.Counts(), p.PlanHash, mdOptions.Marker}, tc.wantCut...) {
				if !strings.Contains(md, want) {
					t.Errorf("missing %q", want)
				}
			}
			fences := 0
			fullLines := map[string]bool{}
			for _, l := range strings.Split(full, "\n") {
				fullLines[l] = true
			}
			for _, l := range strings.Split(md, "\n") {
				if strings.HasPrefix(l, "```") {
					fences++
				}
				if !fullLines[l] && !strings.Contains(l, "cut to fit") {
					t.Errorf("line not in the full comment (cut inside a line?): %.80q", l)
				}
			}
			if fences%2 != 0 || fences == 0 {
				t.Errorf("%d fence lines: a code block is left open", fences)
			}
			if !strings.HasSuffix(md, "\n") {
				t.Errorf("comment does not end with a line")
			}
		})
	}
}
