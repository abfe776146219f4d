package plan

import (
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/canon"
	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
)

// jdoc is a document as decoded JSON, edited by tests before validation.
type jdoc = map[string]any

// parseJSON decodes a document literal into a jdoc.
func parseJSON(t testing.TB, s string) jdoc {
	t.Helper()
	var d jdoc
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("test document: %v", err)
	}
	return d
}

// docOf validates a jdoc through fleet.Validate, as the agent does.
func docOf(t testing.TB, d jdoc) *fleet.Document {
	t.Helper()
	data, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return docBytes(t, data)
}

func docBytes(t testing.TB, data []byte) *fleet.Document {
	t.Helper()
	doc, errs := fleet.Validate("test.json", data)
	if errs != nil {
		t.Fatalf("test document invalid: %s\n%s", errs.Text(), data)
	}
	return doc
}

// clone deep-copies a jdoc.
func clone(d jdoc) jdoc {
	data, _ := json.Marshal(d)
	var out jdoc
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.UseNumber()
	_ = dec.Decode(&out)
	return out
}

// walk finds the container of the last step of a slash path
// ("pools/0/gpuModel") and calls fn with it and the last step.
func walk(t testing.TB, d jdoc, path string, fn func(parent any, key string) any) {
	t.Helper()
	steps := strings.Split(path, "/")
	var cur any = d
	var set func(v any)
	for i, s := range steps {
		last := i == len(steps)-1
		switch c := cur.(type) {
		case map[string]any:
			if last {
				if r := fn(c, s); r != nil {
					set(r)
				}
				return
			}
			next, ok := c[s]
			if !ok {
				next = map[string]any{}
				c[s] = next
			}
			m, key := c, s
			set = func(v any) { m[key] = v }
			cur = next
		case []any:
			n, err := strconv.Atoi(s)
			if err != nil || n >= len(c) {
				t.Fatalf("path %s: bad index %s", path, s)
			}
			if last {
				if r := fn(c, s); r != nil {
					set(r)
				}
				return
			}
			cur = c[n]
		default:
			t.Fatalf("path %s: %T at %s", path, cur, s)
		}
	}
}

// set writes a value at a path; del removes a key or a list item.
func set(t testing.TB, d jdoc, path string, v any) {
	t.Helper()
	walk(t, d, path, func(parent any, key string) any {
		switch c := parent.(type) {
		case map[string]any:
			c[key] = v
		case []any:
			n, _ := strconv.Atoi(key)
			c[n] = v
		}
		return nil
	})
}

func del(t testing.TB, d jdoc, path string) {
	t.Helper()
	walk(t, d, path, func(parent any, key string) any {
		switch c := parent.(type) {
		case map[string]any:
			delete(c, key)
		case []any:
			n, _ := strconv.Atoi(key)
			return append(append([]any{}, c[:n]...), c[n+1:]...)
		}
		return nil
	})
}

func add(t testing.TB, d jdoc, path string, v any) {
	t.Helper()
	walk(t, d, path, func(parent any, key string) any {
		m := parent.(map[string]any)
		l, _ := m[key].([]any)
		m[key] = append(l, v)
		return nil
	})
}

// applied returns the objects an apply of doc's plan against nothing
// creates.
func applied(t testing.TB, d *fleet.Document, opts Options) []inventory.Object {
	t.Helper()
	p := Make(d, nil, opts)
	if p.Blocked() {
		t.Fatalf("base plan blocked:\n%s", text(p, true))
	}
	return applyCalls(t, nil, p.Calls)
}

func cloneObjects(objs []inventory.Object) []inventory.Object {
	out := make([]inventory.Object, len(objs))
	for i, o := range objs {
		out[i] = o.Clone()
	}
	return out
}

// find returns a pointer to the object of kind and name.
func find(t testing.TB, objs []inventory.Object, k inventory.Kind, name string) *inventory.Object {
	t.Helper()
	for i := range objs {
		if objs[i].Kind == k && objs[i].Name == name {
			return &objs[i]
		}
	}
	t.Fatalf("no %s %s in the state", k, name)
	return nil
}

func drop(objs []inventory.Object, k inventory.Kind, name string) []inventory.Object {
	out := objs[:0:0]
	for _, o := range objs {
		if o.Kind != k || o.Name != name {
			out = append(out, o)
		}
	}
	return out
}

func text(p *Plan, calls bool) string { return strings.Join(p.TextLines(calls), "\n") }

// methods lists "method name" per call.
func methods(p *Plan) []string {
	out := make([]string, len(p.Calls))
	for i, c := range p.Calls {
		out[i] = c.Method + " " + c.Name()
	}
	return out
}

func id(k inventory.Kind, name string) string { return inventory.ID("root", k, name) }

func jsonUnmarshalNumber(s string, v any) error {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	return dec.Decode(v)
}

func canonString(v any) string { return string(canon.MustMarshal(v)) }

func mustRead(t testing.TB, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
