package docgen

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/schema"
	"github.com/prometheus/client_golang/prometheus"
)

const repoRoot = "../.."

func TestSplice(t *testing.T) {
	b, e := beginMarker("x"), endMarker("x")
	cases := []struct {
		name, page, want, err string
	}{
		{"replaces and keeps the rest", "a\n" + b + "\nold\n" + e + "\nz\n", "a\n" + b + "\nnew\n" + e + "\nz\n", ""},
		{"an empty section fills", b + "\n" + e + "\n", b + "\nnew\n" + e + "\n", ""},
		{"an older command in the marker", "<!-- generated:x (make docs) -->\n" + e + "\n", "<!-- generated:x (make docs) -->\nnew\n" + e + "\n", ""},
		{"not closed", b + "\nold\n", "", "is not closed"},
		{"missing section", "text\n", "", `the page has no section "x"`},
		{"twice", b + "\n" + e + "\n" + b + "\n" + e + "\n", "", "appears twice"},
		{"unknown section", "<!-- generated:y -->\n<!-- end:y -->\n" + b + "\n" + e + "\n", "", `no generator for section "y"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Splice([]byte(c.page), map[string]string{"x": "new"})
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want %q", err, c.err)
				}
				return
			}
			if err != nil || string(got) != c.want {
				t.Fatalf("got %q, %v\nwant %q", got, err, c.want)
			}
		})
	}
}

// TestSchemaDefaultsAreTheNormalForm holds every "default" the schema (and
// so the page) states to what the document's normal form does: leaving the
// field out and writing the default give the same canonical document.
func TestSchemaDefaultsAreTheNormalForm(t *testing.T) {
	root, err := parseOrdered(schema.JSON)
	if err != nil {
		t.Fatal(err)
	}
	defs := root.get("$defs")
	// Where each object with a defaulted field sits in base.
	at := map[string]string{
		"offer": "/pools/0/offers/0", "flavor": "/flavors/0", "placement": "/flavors/0/placement",
		"sandboxTemplate": "/sandboxTemplates/0", "volume": "/sandboxTemplates/0/volumes/0",
		"create": "/pools/1/policy/substrate/cluster/create", "substrateFlavor": "/pools/1/policy/substrate/flavors/0",
		"substrate": "/pools/1/policy/substrate", "maintenanceWindow": "/pools/1/policy/substrate/maintenance/windows/0",
		"drain": "/pools/1/policy/substrate/drain",
	}
	found := 0
	var walk func(name string, o *object)
	walk = func(name string, o *object) {
		o = resolve(o, defs)
		props := o.get("properties")
		if props == nil {
			return
		}
		for _, k := range props.keys {
			p := props.get(k)
			if _, ok := p.str("$ref"); ok {
				continue // a definition: the loop below walks each
			}
			if d, ok := p.vals["default"]; ok {
				found++
				ptr, known := at[name[strings.LastIndex(name, ".")+1:]]
				if !known {
					t.Errorf("%s.%s has a default: add where a %s sits in this test's base document", name, k, name)
					continue
				}
				without := canonical(t, withField(t, ptr, k, nil))
				with := canonical(t, withField(t, ptr, k, d))
				if without != with {
					t.Errorf("%s.%s: the schema says the default is %s, but the normal form differs:\nwithout: %s\nwith:    %s", name, k, literal(d), without, with)
				}
			}
			walk(name+"."+k, p)
			if it := p.get("items"); it != nil && it.get("$ref") == nil && it.vals["$ref"] == nil {
				walk(name+"."+k, it)
			}
		}
	}
	for _, k := range defs.keys {
		walk(k, defs.get(k))
	}
	if found < 9 {
		t.Fatalf("found %d defaults in the schema, want at least 9", found)
	}
}

const base = `{"version": 1,
 "sites": [{"name": "lab", "kind": "shared", "region": "local"}],
 "providerAccounts": [{"name": "sim", "provider": "fake"}],
 "pools": [{"name": "gpu", "site": "lab", "class": "provider", "providerAccount": "sim", "offers": [{"tenant": "acme", "quota": {"gpu": 1}}]},
  {"name": "k8s", "site": "lab", "class": "metal-host", "policy": {"substrate": {"kind": "kubernetes", "account": "sim",
   "cluster": {"create": {"location": "fake-east"}}, "flavors": [{"name": "cpu", "machineType": "fake-cpu-4"}],
   "maintenance": {"windows": [{"days": ["sat"], "start": "02:00", "duration": "4h"}]}, "drain": {"timeout": "1h"}}}}],
 "flavors": [{"pool": "gpu", "name": "small", "vcpu": 1, "memoryGiB": 1, "diskGiB": 1, "placement": {"hugepages": "2Mi"}}],
 "sandboxTemplates": [{"name": "py", "pool": "gpu", "flavor": "small", "imageId": "x", "volumes": [{"volume": "data", "mountPath": "/data"}]}]
}`

// withField returns base with field k of the object at ptr set to v, or
// removed when v is nil.
func withField(t *testing.T, ptr, k string, v any) []byte {
	t.Helper()
	doc, err := parseOrdered([]byte(base))
	if err != nil {
		t.Fatal(err)
	}
	var cur any = doc
	for _, part := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
		switch c := cur.(type) {
		case *object:
			cur = c.vals[part]
		case []any:
			cur = c[int(part[0]-'0')]
		}
	}
	o := cur.(*object)
	if v == nil {
		delete(o.vals, k)
		return mustJSON(t, doc)
	}
	if _, ok := o.vals[k]; !ok {
		o.keys = append(o.keys, k)
	}
	o.vals[k] = v
	return mustJSON(t, doc)
}

func canonical(t *testing.T, text []byte) string {
	t.Helper()
	d, errs := fleet.Validate("base.json", text)
	if len(errs) > 0 {
		t.Fatalf("%v\n%s", errs, text)
	}
	return string(d.Canonical())
}

func mustJSON(t *testing.T, o *object) []byte {
	t.Helper()
	b, err := o.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestEveryServedMetricIsOnThePage scrapes /metrics of the metrics as the
// agent registers them (with GitHub, every optional part on) and checks
// that docs/metrics.md lists each metric served, and each metric
// registered, including vectors that have no series yet.
func TestEveryServedMetricIsOnThePage(t *testing.T) {
	page, err := os.ReadFile(filepath.Join(repoRoot, "docs/metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	listed := func(name string) bool { return strings.Contains(string(page), "| `"+name+"` |") }
	m := NewServed()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	served := 0
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		name, ok := strings.CutPrefix(line, "# HELP ")
		if !ok {
			continue
		}
		name, _, _ = strings.Cut(name, " ")
		served++
		switch {
		case strings.HasPrefix(name, "fleet_agent_"):
			if !listed(name) {
				t.Errorf("%s is served but docs/metrics.md does not list it: run `%s`", name, Command)
			}
		case slices.ContainsFunc(ServedPrefixes, func(p string) bool { return strings.HasPrefix(name, p) }):
			prefix := name[:strings.Index(name, "_")+1]
			if !strings.Contains(string(page), "`"+prefix+"*`") {
				t.Errorf("%s is served but docs/metrics.md does not mention `%s*`", name, prefix)
			}
		default:
			t.Errorf("%s is served, neither fleet_agent_* nor a standard collector's: name it fleet_agent_* and run `%s`", name, Command)
		}
	}
	if served < 16 {
		t.Fatalf("the scrape served %d metrics, want at least 16:\n%s", served, rec.Body.String())
	}
	ch := make(chan *prometheus.Desc)
	go func() { m.Describe(ch); close(ch) }()
	for d := range ch {
		name, _, _, _, err := parseDesc(d)
		if err != nil {
			t.Error(err)
			continue
		}
		if strings.HasPrefix(name, "fleet_agent_") && !listed(name) {
			t.Errorf("%s is registered but docs/metrics.md does not list it: run `%s`", name, Command)
		}
	}
}
