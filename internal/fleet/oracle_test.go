package fleet

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"net/url"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v5"

	"github.com/fleet-agent/fleet-agent/schema"
)

// The oracle: santhosh-tekuri/jsonschema, an independent implementation of
// JSON Schema 2020-12, validating the same inlined schema (with the integer
// keyword registered as an extension of the same meaning). Its errors are
// turned into schemaErrors and worded by the package's own findings, so
// that the whole refusal, pointers, messages and order, can be compared
// with the schema stage's.

type integerExt struct{}

func (integerExt) Compile(_ jsonschema.CompilerContext, m map[string]any) (jsonschema.ExtSchema, error) {
	r, ok := m[integerKeyword].(map[string]any)
	if !ok {
		return nil, nil
	}
	return oracleInteger{newIntegerSchema(r)}, nil
}

type oracleInteger struct{ *integerSchema }

func (s oracleInteger) Validate(ctx jsonschema.ValidationContext, v any) error {
	if why := s.check(v); why != "" {
		return ctx.Error(integerKeyword, why)
	}
	return nil
}

var oracleSchema = sync.OnceValue(func() *jsonschema.Schema {
	c := jsonschema.NewCompiler()
	c.Draft = jsonschema.Draft2020
	meta := jsonschema.MustCompileString("fleet-integer-meta.json", `{"properties":{"`+integerKeyword+`":{"type":"object"}}}`)
	c.RegisterExtension(integerKeyword, meta, integerExt{})
	flat, err := json.Marshal(inlinedSchema())
	if err != nil {
		panic(err)
	}
	if err := c.AddResource(schema.ID, bytes.NewReader(flat)); err != nil {
		panic(err)
	}
	return c.MustCompile(schema.ID)
})

// oracleFindings is schemaFindings done by the library.
func oracleFindings(tree any) []finding {
	err := oracleSchema().Validate(tree)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return []finding{{msg: "could not be checked against the schema: " + err.Error()}}
	}
	var out []finding
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				walk(c)
			}
			return
		}
		sub, keyword := schemaAt(inlinedSchema(), e.AbsoluteKeywordLocation)
		se := schemaError{toks: instancePath(e), keyword: keyword, sub: sub,
			inKey: strings.Contains(e.KeywordLocation, "/propertyNames"),
			inMap: strings.Contains(e.KeywordLocation, "/additionalProperties")}
		out = append(out, se.findings(tree)...)
	}
	walk(ve)
	return out
}

// instancePath returns the instance tokens of a library error. The library
// joins an empty key as no token at all ({"": 1} under ownerQuota is
// reported at ownerQuota); the keyword location says how many tokens the
// path has, and the missing ones are those empty keys (the innermost map
// steps, where there are several).
func instancePath(e *jsonschema.ValidationError) []string {
	inst := instanceTokens(e.InstanceLocation)
	kw := instanceTokens(e.KeywordLocation)
	if len(kw) == 0 {
		return inst
	}
	kw = kw[:len(kw)-1] // the failing keyword applies to the value the steps reach
	type step struct {
		name  string
		fixed bool
	}
	var steps []step
	for i := 0; i < len(kw); i++ {
		switch kw[i] {
		case "properties":
			if i+1 < len(kw) {
				steps = append(steps, step{name: kw[i+1], fixed: true})
			}
			i++
		case "additionalProperties", "propertyNames", "items":
			steps = append(steps, step{})
		}
	}
	missing := len(steps) - len(inst)
	if missing <= 0 {
		return inst
	}
	variable := 0
	for _, s := range steps {
		if !s.fixed {
			variable++
		}
	}
	out := make([]string, 0, len(steps))
	for _, s := range steps {
		empty := missing > 0 && ((s.fixed && s.name == "") || (!s.fixed && variable <= missing))
		if !s.fixed {
			variable--
		}
		if empty || len(inst) == 0 {
			out = append(out, "")
			missing--
			continue
		}
		out = append(out, inst[0])
		inst = inst[1:]
	}
	return out
}

// instanceTokens converts a library location (its tokens are also
// URL-path-escaped) into unescaped RFC 6901 tokens.
func instanceTokens(loc string) []string {
	if loc == "" {
		return nil
	}
	parts := strings.Split(strings.TrimPrefix(loc, "/"), "/")
	for i, s := range parts {
		if u, err := url.PathUnescape(s); err == nil {
			s = u
		}
		parts[i] = unescapeToken(s)
	}
	return parts
}

func schemaAt(raw map[string]any, absLoc string) (sub map[string]any, keyword string) {
	_, frag, _ := strings.Cut(absLoc, "#")
	toks := instanceTokens(frag)
	if len(toks) == 0 {
		return raw, ""
	}
	cur, _ := lookup(raw, toks[:len(toks)-1])
	sub, _ = cur.(map[string]any)
	return sub, toks[len(toks)-1]
}

// agree fails t when the schema stage and the oracle refuse data
// differently, in anything: pointers, messages, order, count.
func agree(t testing.TB, data []byte, what string) bool {
	t.Helper()
	_, got := validateWith("f", data, schemaFindings)
	_, want := validateWith("f", data, oracleFindings)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s: the schema stage and the library differ\nschema stage:\n%slibrary:\n%sdocument: %s", what, got.Text(), want.Text(), data)
		return false
	}
	return len(got) == 0
}

func TestSchemaCompiles(t *testing.T) {
	if _, err := compileNode(inlinedSchema()); err != nil {
		t.Fatal(err)
	}
	patterns.mu.Lock()
	defer patterns.mu.Unlock()
	if len(patterns.m) == 0 {
		t.Fatal("no patterns")
	}
	for expr := range patterns.m {
		if _, err := regexp.Compile(expr); err != nil {
			t.Errorf("pattern %q: %v", expr, err)
		}
	}
}

// TestSchemaStageAgreesWithTheLibrary takes every document under testdata
// as it is, then changes each valid one in one place at a time, for every
// place: each value replaced by values of every kind and edge, each key
// removed, keys added to each object, lists emptied and grown. On every
// variant the refusal must be the library's, byte for byte.
func TestSchemaStageAgreesWithTheLibrary(t *testing.T) {
	var files []string
	for _, dir := range []string{"valid", "invalid"} {
		f, _ := filepath.Glob(filepath.Join(docs, dir, "*.json"))
		files = append(files, f...)
	}
	replacements := append([]any{nil, true, false, json.Number("0"), json.Number("-1"), json.Number("1.5"),
		json.Number("1e2"), json.Number("2.0"), json.Number("1.0"), json.Number("1e-2"), "", "x", "A_B", "1gpu", "secret://acme/a",
		[]any{}, []any{"x"}, map[string]any{}}, edges(inlinedSchema())...)
	addedKeys := []string{"zz", "", "1gpu", "A_B", "name"}
	// A place of the schema changed in the same way in two documents is
	// tried once: the documents repeat the same kinds of objects.
	var tried sync.Map
	var passed, refused atomic.Int64
	t.Run("documents", func(t *testing.T) {
		for _, f := range files {
			data := readFile(t, f)
			name := filepath.Base(f)
			t.Run(name, func(t *testing.T) {
				t.Parallel() // each document has its own tree
				count := func(ok bool) {
					if ok {
						passed.Add(1)
					} else {
						refused.Add(1)
					}
				}
				count(agree(t, data, name))
				tree, p := parseDocument(data, false)
				if p.err != nil || strings.Contains(f, "invalid") || len(data) > 8<<10 {
					return // changing one place of a refused document mostly leaves it refused
				}
				variant := 0
				check := func(place, what string) {
					if _, seen := tried.LoadOrStore(place+" "+what, true); seen {
						return
					}
					if variant++; raceDetector && variant%4 != 0 {
						return // a quarter of them under the race detector (see race_test.go)
					}
					b, err := json.Marshal(tree)
					if err != nil {
						t.Fatal(err)
					}
					count(agree(t, b, name+" "+strings.ReplaceAll(what, "%", place)))
				}
				mutate(tree, replacements, addedKeys, check)
			})
		}
	})
	// Both verdicts must be common, or the test proves little.
	if passed.Load() < 100 || refused.Load() < 1000 {
		t.Errorf("only %d variants passed and %d were refused", passed.Load(), refused.Load())
	}
	t.Logf("%d variants passed, %d refused, the schema stage agreeing with the library on all", passed.Load(), refused.Load())
}

// mutate changes tree in one place at a time and calls check on each
// variant with the place (the pointer, list indices as "*") and what was
// done ("%" standing for the pointer); tree is as it was when it returns.
func mutate(tree any, replacements []any, addedKeys []string, check func(place, what string)) {
	for _, path := range paths(tree, nil) {
		parent, _ := lookup(tree, path[:len(path)-1])
		last := path[len(path)-1]
		place := placeOf(path)
		put, old := slot(parent, last)
		for _, r := range replacements {
			put(r)
			check(place, "% = "+describeValue(r))
		}
		put(old)
		if m, ok := parent.(map[string]any); ok {
			delete(m, last)
			check(place, "without %")
			m[last] = old
		}
		switch x := old.(type) {
		case map[string]any:
			for _, k := range addedKeys {
				if _, ok := x[k]; ok {
					continue
				}
				for _, r := range replacements[:8] {
					x[k] = r
					check(place, "% with key "+strconv.Quote(k)+" = "+describeValue(r))
				}
				delete(x, k)
			}
		case []any:
			if len(x) > 0 {
				put(append(slices.Clip(x), x[0]))
				check(place, "% with its first item twice")
				put([]any{})
				check(place, "% emptied")
				put(x)
			}
		}
	}
}

// placeOf is the pointer of path with list indices as "*".
func placeOf(path []string) string {
	p := slices.Clone(path)
	for i, t := range p {
		if isIndex(t) {
			p[i] = "*"
		}
	}
	return joinPointer("", p...)
}

// edges lists the values at the edges of the schema's bounds: for every
// length and integer bound, the bound and one past it on each side.
func edges(schema map[string]any) []any {
	lengths := map[int64]bool{}
	numbers := map[string]bool{}
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				n, isNum := e.(json.Number)
				i, err := n.Int64()
				switch {
				case isNum && err == nil && (k == "minLength" || k == "maxLength"):
					lengths[i-1], lengths[i], lengths[i+1] = true, true, true
				case isNum && err == nil && (k == "minimum" || k == "maximum"):
					for _, d := range []int64{-1, 0, 1} {
						numbers[strconv.FormatInt(i+d, 10)] = true
					}
				}
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(schema)
	var out []any
	for _, n := range slices.Sorted(maps.Keys(lengths)) {
		if n >= 0 {
			out = append(out, strings.Repeat("a", int(n)))
		}
	}
	for _, n := range slices.Sorted(maps.Keys(numbers)) {
		out = append(out, json.Number(n))
	}
	return out
}

// slot returns a setter of parent's member at token and its value.
func slot(parent any, token string) (put func(any), old any) {
	if m, ok := parent.(map[string]any); ok {
		return func(v any) { m[token] = v }, m[token]
	}
	a := parent.([]any)
	i, _ := strconv.Atoi(token)
	return func(v any) { a[i] = v }, a[i]
}

// paths lists the token paths of every value below v (not v itself).
func paths(v any, prefix []string) [][]string {
	var out [][]string
	switch x := v.(type) {
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(x)) {
			p := append(slices.Clip(prefix), k)
			out = append(out, p)
			out = append(out, paths(x[k], p)...)
		}
	case []any:
		for i := range x {
			p := append(slices.Clip(prefix), strconv.Itoa(i))
			out = append(out, p)
			out = append(out, paths(x[i], p)...)
		}
	}
	return out
}
