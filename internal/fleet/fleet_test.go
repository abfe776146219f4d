package fleet

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/testutil/golden"
)

const docs = "../../testdata/documents"

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestValidDocumentsOfTheReferences(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(docs, "valid", "*.json"))
	if len(files) < 5 {
		t.Fatalf("expected the reference examples under %s, found %d", docs, len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			doc, errs := Validate(f, readFile(t, f))
			if errs != nil {
				t.Fatalf("refused:\n%s", errs.Text())
			}
			if doc.Version != 1 {
				t.Errorf("version %d", doc.Version)
			}
			// The canonical bytes are stable and valid JSON.
			c1, c2 := doc.Canonical(), doc.Canonical()
			if !bytes.Equal(c1, c2) || !json.Valid(c1) {
				t.Errorf("canonical form unstable or invalid: %s", c1)
			}
		})
	}
}

// TestInvalidDocumentsGolden checks every invalid document's full error
// output against testdata/documents/invalid/NAME.golden.
func TestInvalidDocumentsGolden(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(docs, "invalid", "*.json"))
	if len(files) < 15 {
		t.Fatalf("expected the invalid set, found %d files", len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data := readFile(t, f)
			name := filepath.Join("documents", "invalid", filepath.Base(f))
			doc, errs := Validate(name, data)
			if doc != nil || len(errs) == 0 {
				t.Fatal("accepted an invalid document")
			}
			for _, e := range errs {
				if e.Code != "INVALID_INPUT" {
					t.Errorf("code %q", e.Code)
				}
				checkPointer(t, data, e.Path)
				checkPlace(t, data, e)
			}
			golden.Check(t, strings.TrimSuffix(f, ".json")+".golden", []byte(errs.Text()))
		})
	}
}

// checkPointer asserts the fuzz property: a pointer resolves in the input,
// or its parent does (a missing field), or it is "".
func checkPointer(t testing.TB, data []byte, ptr string) {
	t.Helper()
	if ptr == "" {
		return
	}
	if !strings.HasPrefix(ptr, "/") {
		t.Errorf("pointer %q does not start with /", ptr)
		return
	}
	tree, p := parseDocument(data, false)
	if p.err != nil {
		t.Errorf("pointer %q for a text that does not parse", ptr)
		return
	}
	if _, ok := lookup(tree, splitPointer(ptr)); ok {
		return
	}
	if _, ok := lookup(tree, splitPointer(parentPointer(ptr))); ok {
		return
	}
	t.Errorf("pointer %q resolves neither in the input nor through its parent", ptr)
}

// TestErrorsInTextOrder: errors stand in the order of their values in the
// text, whatever order the stages find them in.
func TestErrorsInTextOrder(t *testing.T) {
	cases := []struct{ name, doc, want string }{
		// The unknown field stands before the bad kind in the text, though
		// the schema finds them in another order; the repeated key stands
		// last.
		{"stages", `{"version": 1, "sites": [{"zz": 1, "name": "a", "kind": "x", "region": "r"}], "pools": [], "version": 1}`,
			"/sites/0/zz /sites/0/kind /version"},
		// A repeated key's discarded value must not move the errors of the
		// value that is kept: they stand where the first value stands.
		{"repeated key keeps the first value's place", `{"sites":[{"name":"a","kind":"shared","region":"r","zz":1}],"version":1,"x":2,"sites":[{"zz":1}]}`,
			"/sites/0/zz /x /sites"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, errs := Validate("f", []byte(c.doc))
			var got []string
			for _, e := range errs {
				got = append(got, e.Path)
			}
			if strings.Join(got, " ") != c.want {
				t.Errorf("order %v, want %s", got, c.want)
			}
		})
	}
}

// Numbers a double holds, however written, are accepted and hashed.
func TestLargeNumbersInPolicy(t *testing.T) {
	doc, errs := Validate("f", []byte(`{"version":1,"pools":[{"name":"p","site":"s","class":"vps-host","policy":{"a":1.7976931348623157e308,"b":1e-400,"c":1e300}}]}`))
	if errs != nil {
		t.Fatal(errs.Text())
	}
	want := `{"pools":[{"class":"vps-host","name":"p","policy":{"a":1.7976931348623157e+308,"b":0,"c":1e+300},"site":"s"}],"version":1}`
	if got := string(doc.Canonical()); got != want {
		t.Errorf("canonical\n got %s\nwant %s", got, want)
	}
}

func TestMessagesSayWhatIsAllowed(t *testing.T) {
	cases := []struct {
		name, doc, path, msg string
	}{
		{"range", `{"version":1,"pools":[{"name":"p","site":"s","class":"vps-host","offers":[{"tenant":"t","priority":5000}]}]}`,
			"/pools/0/offers/0/priority", "priority must be an integer from -1000 to 1000, got 5000"},
		{"not an integer", `{"version":1,"flavors":[{"pool":"p","name":"f","vcpu":1.5,"memoryGiB":1,"diskGiB":1}]}`,
			"/flavors/0/vcpu", "vcpu must be an integer from 1 to 1024, got 1.5"},
		{"enum", `{"version":1,"sites":[{"name":"s","kind":"big","region":"r"}]}`,
			"/sites/0/kind", `kind must be one of "shared", "dedicated", "custom", got "big"`},
		{"unknown with suggestion", `{"version":1,"sites":[{"name":"s","kind":"shared","region":"r","regoin":"x"}]}`,
			"/sites/0/regoin", `unknown field "regoin" (did you mean "region"?); allowed here: iamRegion, kind, name, region`},
		{"missing", `{"version":1,"pools":[{"name":"p","class":"vps-host"}]}`,
			"/pools/0/site", "site is required in pools[0]"},
		{"invalid key", `{"version":1,"pools":[{"name":"p","site":"s","class":"vps-host","ownerQuota":{"1gpu":1}}]}`,
			"/pools/0/ownerQuota/1gpu", `invalid key "1gpu": each key must be a resource name: a letter, then up to 63 letters, digits, ".", "_" or "-"`},
		{"too long", `{"version":1,"sandboxTemplates":[{"name":"t","pool":"p","flavor":"f","imageId":"i","volumes":[` + strings.Repeat(`{"volume":"v","mountPath":"/v"},`, 8) + `{"volume":"v","mountPath":"/v"}]}]}`,
			"/sandboxTemplates/0/volumes", "volumes has 9 items; at most 8 are allowed"},
		{"repeat", `{"version":1,"sites":[{"name":"s","kind":"shared","region":"r"},{"name":"s","kind":"shared","region":"r"}]}`,
			"/sites/1/name", `site "s" is repeated (first at /sites/0/name); each must be unique`},
		{"version", `{"version":2}`, "/version", "version must be 1, got 2"},
		{"integer spelled as a float", `{"version":1.0e0}`, "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			doc, errs := Validate("f", []byte(c.doc))
			if c.path == "" && c.msg == "" {
				if errs != nil {
					t.Fatalf("refused: %s", errs.Text())
				}
				if doc.Version != 1 {
					t.Fatal("version not normalised")
				}
				return
			}
			for _, e := range errs {
				if e.Path == c.path {
					if e.Message != c.msg {
						t.Errorf("message\n got %q\nwant %q", e.Message, c.msg)
					}
					return
				}
			}
			t.Errorf("no error at %s; got:\n%s", c.path, errs.Text())
		})
	}
}

func TestNormalForm(t *testing.T) {
	a := `{"version":1,"pools":[{"name":"p","site":"s","class":"vps-host","policy":{"w":2.0,"f":0.50,"substrate":{"kind":"kubernetes","account":"a","cluster":{"create":{"location":"l","privateNodes":false}},"flavors":[{"name":"x","machineType":"m","spot":false}]}},"offers":[{"tenant":"t"}]}],
	  "flavors":[{"pool":"p","name":"f","vcpu":1,"memoryGiB":1e0,"diskGiB":1,"placement":{"pinned":false,"numaAffine":false}}],
	  "sandboxTemplates":[{"name":"t","pool":"p","flavor":"f","imageId":"i"}]}`
	b := `{"sandboxTemplates":[{"imageId":"i","network":"egress","flavor":"f","pool":"p","name":"t"}],"version":1,
	  "flavors":[{"gpus":0,"pool":"p","name":"f","vcpu":1,"memoryGiB":1,"diskGiB":1}],
	  "pools":[{"name":"p","site":"s","class":"vps-host","policy":{"f":0.5,"w":2,"substrate":{"flavors":[{"machineType":"m","name":"x"}],"kind":"kubernetes","account":"a","cluster":{"create":{"location":"l"}}}},"offers":[{"tenant":"t","quota":{},"includeDescendants":false,"priority":0}]}]}`
	da, errs := Validate("a", []byte(a))
	if errs != nil {
		t.Fatal(errs.Text())
	}
	db, errs := Validate("b", []byte(b))
	if errs != nil {
		t.Fatal(errs.Text())
	}
	if ca, cb := da.Canonical(), db.Canonical(); !bytes.Equal(ca, cb) {
		t.Errorf("normal forms differ:\n%s\n%s", ca, cb)
	}
	want := `{"flavors":[{"diskGiB":1,"gpus":0,"memoryGiB":1,"name":"f","pool":"p","vcpu":1}],"pools":[{"class":"vps-host","name":"p","offers":[{"includeDescendants":false,"priority":0,"quota":{},"tenant":"t"}],"policy":{"f":0.5,"substrate":{"account":"a","cluster":{"create":{"location":"l"}},"flavors":[{"machineType":"m","name":"x"}],"kind":"kubernetes"},"w":2},"site":"s"}],"sandboxTemplates":[{"flavor":"f","imageId":"i","name":"t","network":"egress","pool":"p"}],"version":1}`
	if got := string(da.Canonical()); got != want {
		t.Errorf("canonical\n got %s\nwant %s", got, want)
	}
	if da.Pools[0].Substrate() == nil || da.Pools[0].Substrate().Flavors[0].Name != "x" {
		t.Error("substrate not typed")
	}
}

// TestBadInputBounded feeds the inputs a careless or hostile user sends:
// each gets exactly one error with the pointer "", quickly.
func TestBadInputBounded(t *testing.T) {
	big := bytes.Repeat([]byte(" "), MaxDocumentBytes+1)
	cases := map[string][]byte{
		"not json":            []byte("version: 1"),
		"empty":               nil,
		"only space":          []byte(" \n\t "),
		"over 16 MiB":         big,
		"million arrays":      bytes.Repeat([]byte("["), 1_000_000),
		"million objects":     bytes.Repeat([]byte(`{"a":`), 1_000_000),
		"invalid utf-8":       []byte("{\"version\":1,\"x\":\"\xc3\x28\"}"),
		"nul byte":            []byte("{\"version\":1}\x00"),
		"trailing":            []byte(`{"version":1}x`),
		"lone high surrogate": []byte(`{"version":1,"x":"py\ud800x"}`),
		"lone low surrogate":  []byte(`{"version":1,"x":"\udc00"}`),
		"reversed pair":       []byte(`{"version":1,"x":"\udc00\ud800"}`),
		"lone surrogate key":  []byte(`{"version":1,"\ud800":1}`),
		"unterminated string": []byte(`{"version":1,"sites":"abc`),
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			_, errs := Validate("f", data)
			if len(errs) != 1 || errs[0].Path != "" {
				t.Fatalf("want one error at \"\", got %d: %v", len(errs), errs)
			}
		})
	}
}

// A byte-order mark is named as such, wherever it stands in place of a
// value.
func TestByteOrderMark(t *testing.T) {
	cases := []struct{ name, doc, msg string }{
		{"at the start", "\xef\xbb\xbf{\"version\":1}", "the document starts with a UTF-8 byte-order mark (EF BB BF); JSON text must not carry one: save the file as UTF-8 without a BOM"},
		{"after space", " \xef\xbb\xbf{\"version\":1}", "a UTF-8 byte-order mark (EF BB BF) at offset 1; JSON text must not carry one: remove it"},
		{"before a value", "{\"version\":\xef\xbb\xbf1}", "a UTF-8 byte-order mark (EF BB BF) at offset 11; JSON text must not carry one: remove it"},
		{"a lone 0xef is not one", "\xef\xbb{}", "the document is not valid UTF-8 (first bad byte at offset 0)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, errs := Validate("f", []byte(c.doc))
			if len(errs) != 1 || errs[0].Path != "" || errs[0].Message != c.msg {
				t.Fatalf("want one error at \"\": %q, got %v", c.msg, errs)
			}
		})
	}
}

// A short literal beyond a double has no canonical form: it is refused at
// its own pointer, once (the schema's verdict on the same value is not
// added), quickly however large its exponent, and validation goes on.
func TestNumberBeyondADouble(t *testing.T) {
	const msg = "this number is out of range; numbers must fit a 64-bit float (about ±1e308)"
	cases := []struct{ name, doc, path string }{
		{"huge exponent", `{"version":1e999999999}`, "/version"},
		{"policy", `{"version":1,"pools":[{"name":"p","site":"s","class":"vps-host","policy":{"x":1e309}}]}`, "/pools/0/policy/x"},
		{"policy, negative", `{"version":1,"pools":[{"name":"p","site":"s","class":"vps-host","policy":{"x":-99999e305}}]}`, "/pools/0/policy/x"},
		{"config", `{"version":1,"providerAccounts":[{"name":"a","provider":"x","config":{"n":1e400}}]}`, "/providerAccounts/0/config/n"},
		{"tiny exponent", `{"version":1,"pools":[{"name":"p","site":"s","class":"vps-host","policy":{"x":1e-999999999}}]}`, "/pools/0/policy/x"},
		{"bounded integer", `{"version":1,"flavors":[{"pool":"p","name":"f","vcpu":1e309,"memoryGiB":1,"diskGiB":1}]}`, "/flavors/0/vcpu"},
		{"min against max", `{"version":1,"sandboxTemplates":[{"name":"t","pool":"p","flavor":"f","imageId":"i","warm":{"min":1,"max":-1e309}}]}`, "/sandboxTemplates/0/warm/max"},
		{"in a repeated key's discarded value", `{"version":1,"version":1e309}`, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			_, errs := Validate("f", []byte(c.doc))
			if d := time.Since(start); d > time.Second {
				t.Errorf("took %v", d)
			}
			if c.path == "" {
				// The repeated key is the error; its discarded value is moot.
				if len(errs) != 1 || errs[0].Path != "/version" || strings.Contains(errs[0].Message, "range") {
					t.Fatalf("want only the repeated key, got:\n%s", errs.Text())
				}
				return
			}
			if len(errs) != 1 || errs[0].Path != c.path || errs[0].Message != msg {
				t.Fatalf("want one error at %s, got:\n%s", c.path, errs.Text())
			}
		})
	}
}

func TestTooManyErrorsAreSummed(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"version":1,"sites":[`)
	for i := range 150 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"name":"s","kind":"x","region":"r"}`)
	}
	b.WriteString(`]}`)
	_, errs := Validate("f", []byte(b.String()))
	if len(errs) != MaxErrors+1 {
		t.Fatalf("%d errors", len(errs))
	}
	last := errs[len(errs)-1]
	// 150 bad kinds and 149 repeated names: 299 in all.
	if last.Path != "" || !strings.HasPrefix(last.Message, "199 more errors") {
		t.Errorf("last error %+v", last)
	}
}

func TestSecretValuesNeverEchoed(t *testing.T) {
	const canary = "CANARY-3f9a1c"
	doc := `{"version":1,"providerAccounts":[{"name":"a","provider":"x","config":{"token":"` + canary + `","deep":{"accessKey":"` + canary + `"}}}],
	"sandboxTemplates":[{"name":"t","pool":"p","flavor":"f","imageId":"i","env":{"A":"` + canary + `"},"userData":"secret://` + canary + `"}]}`
	_, errs := Validate("f", []byte(doc))
	if len(errs) != 4 {
		t.Fatalf("want 4 errors, got:\n%s", errs.Text())
	}
	out, _ := json.Marshal(errs)
	if strings.Contains(errs.Text(), canary) || strings.Contains(string(out), canary) {
		t.Errorf("a secret value was echoed:\n%s", errs.Text())
	}
}
