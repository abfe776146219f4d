package splice

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if os.Getenv("UPDATE_GOLDEN") != "" {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs from its golden:\n%s\nwant:\n%s", name, got, want)
	}
}

// changedBytes counts the bytes between the first and last difference.
func changedBytes(a, b []byte) (int, int) {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	j := 0
	for j < len(a)-i && j < len(b)-i && a[len(a)-1-j] == b[len(b)-1-j] {
		j++
	}
	return len(a) - i - j, len(b) - i - j
}

func TestReplaceKeepsOddFormatting(t *testing.T) {
	src, err := os.ReadFile("testdata/odd.json")
	if err != nil {
		t.Fatal(err)
	}
	out, err := Replace(src, "/pools/0/maxNodes", []byte("6"))
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "odd.maxNodes.json", out)
	if old, neu := changedBytes(src, out); old != 1 || neu != 1 {
		t.Fatalf("changed %d bytes for %d: want exactly the one digit", old, neu)
	}
	out2, err := Replace(out, "/pools/0/labels/escaped~1key", []byte(`"y"`))
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "odd.label.json", out2)
}

func TestSetAddsAndRemoveDrops(t *testing.T) {
	src, _ := os.ReadFile("testdata/odd.json")
	d, err := Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	added, err := d.Set("/pools/0/minNodes", []byte("1"))
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "odd.added.json", added)
	d2, _ := Parse(added)
	if sp, ok := d2.Lookup("/pools/0/minNodes"); !ok || string(added[sp.Start:sp.End]) != "1" {
		t.Fatalf("added member not found: %v %v", sp, ok)
	}
	removed, err := d2.Remove("/pools/0/minNodes")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(removed, src) {
		t.Fatalf("add then remove is not the original:\n%s", removed)
	}
	for _, ptr := range []string{"/pools/1/name", "/pools/0/site", "/sites/0/region"} {
		out, err := d.Remove(ptr)
		if err != nil {
			t.Fatal(err)
		}
		var v map[string]any
		if err := json.Unmarshal(out, &v); err != nil {
			t.Fatalf("remove %s: %v\n%s", ptr, err, out)
		}
	}
	obj, err := d.Set("/pools/1/labels", []byte(`{"a": [1, 2]}`))
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "odd.object.json", obj)
}

func TestRefusals(t *testing.T) {
	for name, c := range map[string]struct{ src, ptr, val string }{
		"duplicate": {`{"a":1,"a":2}`, "/a", "3"},
		"invalid":   {`{"a":1,}`, "/a", "3"},
		"missing":   {`{"a":{"b":1}}`, "/x/b", "3"},
		"no slash":  {`{"a":1}`, "a", "3"},
		"bad value": {`{"a":1}`, "/a", "{"},
		"index":     {`{"a":[1]}`, "/a/01", "3"},
	} {
		if _, err := Replace([]byte(c.src), c.ptr, []byte(c.val)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func valueAt(t *testing.T, src []byte, ptr string) any {
	d, err := Parse(src)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	sp, ok := d.Lookup(ptr)
	if !ok {
		t.Fatalf("%s missing", ptr)
	}
	return decode(t, src[sp.Start:sp.End])
}

// decode keeps numbers as written, so any JSON number compares.
func decode(t *testing.T, b []byte) any {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decode %q: %v", b, err)
	}
	return v
}

func under(p, root string) bool {
	return p == root || (len(p) > len(root) && p[:len(root)] == root && p[len(root)] == '/')
}

// FuzzReplace replaces a value picked among a text's pointers and checks
// that only that value's bytes changed, that the new value reads back, and
// that every value elsewhere is unchanged.
func FuzzReplace(f *testing.F) {
	odd, _ := os.ReadFile("testdata/odd.json")
	f.Add(odd, uint(3), []byte(`7`))
	f.Add([]byte(`{"a":[1,{"b":"c\"d"}],"e/f":{"~g":null}}`), uint(5), []byte(`{"x":[true]}`))
	f.Add([]byte("[\n  1,\n  [2, 3]\n]"), uint(2), []byte(`"s"`))
	f.Fuzz(func(t *testing.T, src []byte, pick uint, value []byte) {
		d, err := Parse(src)
		if err != nil {
			return
		}
		if !json.Valid(value) {
			if _, err := d.Replace("", value); err == nil {
				t.Fatal("an invalid value was accepted")
			}
			return
		}
		ptrs := d.Pointers()
		ptr := ptrs[int(pick%uint(len(ptrs)))]
		sp, _ := d.Lookup(ptr)
		out, err := d.Replace(ptr, value)
		if err != nil {
			t.Fatalf("replace %s: %v", ptr, err)
		}
		if !bytes.Equal(out[:sp.Start], src[:sp.Start]) || !bytes.HasSuffix(out, src[sp.End:]) {
			t.Fatalf("bytes outside %s changed", ptr)
		}
		if _, err := Parse(out); err != nil {
			return // the new value itself holds duplicate names
		}
		want := decode(t, value)
		if got := valueAt(t, out, ptr); !reflect.DeepEqual(got, want) {
			t.Fatalf("%s reads back %v, want %v", ptr, got, want)
		}
		for _, p := range ptrs {
			if under(p, ptr) || under(ptr, p) {
				continue
			}
			if a, b := valueAt(t, src, p), valueAt(t, out, p); !reflect.DeepEqual(a, b) {
				t.Fatalf("%s changed from %v to %v", p, a, b)
			}
		}
	})
}
