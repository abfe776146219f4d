package fleet

import (
	"reflect"
	"testing"
	"unicode/utf8"
)

// checkPlace asserts the property of issue 17: an error's line and column
// hold the offending value or its key (a missing field: its parent object; a
// text that is not JSON: a place inside the text). It reads the text at that
// place with a fresh parser started there and compares with the value the
// pointer names in the tree, so a wrong offset table cannot vouch for
// itself.
func checkPlace(t testing.TB, data []byte, e Error) {
	t.Helper()
	if e.summary {
		if !e.IsZero() {
			t.Errorf("the summary error has a place %+v", e.Position)
		}
		return
	}
	if e.IsZero() {
		t.Errorf("%s: no place", e)
		return
	}
	off, ok := offsetOfLineColumn(data, e.Line, e.Column)
	if !ok || off != e.Offset {
		t.Errorf("%s: line %d column %d is offset %d (%v), the error says %d", e, e.Line, e.Column, off, ok, e.Offset)
		return
	}
	tree, p := parseDocument(data, false)
	if p.err != nil || e.Path == "" {
		// A syntax error (or a refusal of the whole document) stands
		// somewhere in the text; the offset check above is all there is.
		return
	}
	toks := splitPointer(e.Path)
	if off < len(data) && data[off] == '"' {
		q := &parser{data: data, pos: off, keys: map[string]string{}}
		if k, ok := q.key(); ok && len(toks) > 0 && k == toks[len(toks)-1] {
			q.skipSpace()
			if q.pos < len(data) && data[q.pos] == ':' {
				return // the key
			}
		}
	}
	q := &parser{data: data, pos: off, keys: map[string]string{}}
	got := q.value()
	if q.err != nil {
		t.Errorf("%s: no JSON value at line %d column %d: %s", e, e.Line, e.Column, q.err.msg)
		return
	}
	if want, ok := lookup(tree, toks); ok {
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: line %d column %d holds %v, the pointer names %v", e, e.Line, e.Column, got, want)
		}
		return
	}
	// A missing field: its parent object.
	want, ok := lookup(tree, toks[:len(toks)-1])
	if !ok || !reflect.DeepEqual(got, want) {
		t.Errorf("%s: the pointer names nothing, and line %d column %d does not hold its parent", e, e.Line, e.Column)
	}
}

// offsetOfLineColumn walks the text the simple way: independent of
// lineIndex.
func offsetOfLineColumn(data []byte, line, col int) (int, bool) {
	l, c := 1, 1
	for off := 0; ; {
		if l == line && c == col {
			return off, true
		}
		if off >= len(data) || l > line {
			return 0, false
		}
		r, size := utf8.DecodeRune(data[off:])
		off += size
		if r == '\n' {
			l, c = l+1, 1
		} else {
			c++
		}
	}
}

func TestErrorPositions(t *testing.T) {
	cases := []struct {
		name, doc, path string
		line, col       int
	}{
		{"bad priority at its value",
			"{\"version\":1,\"pools\":[\n {\"name\":\"p\",\"site\":\"s\",\"class\":\"vps-host\",\n  \"offers\":[{\"tenant\":\"t\",\n   \"priority\": 5000}]}]}",
			"/pools/0/offers/0/priority", 4, 16},
		{"missing field at its parent object",
			"{\"version\":1,\n\"pools\":[\n  {\"name\":\"p\",\"class\":\"vps-host\"}]}",
			"/pools/0/site", 3, 3},
		{"unknown field at its key",
			"{\"version\":1,\"sites\":[{\"name\":\"s\",\"kind\":\"shared\",\"region\":\"r\",\n\t\"regoin\":\"x\"}]}",
			"/sites/0/regoin", 2, 2},
		{"repeated key at the repeat",
			"{\"version\":1,\n\"version\":1}",
			"/version", 2, 1},
		{"columns count code points",
			"{\"version\":1,\"sites\":[{\"name\":\"été\",\"kind\":\"big\",\"region\":\"r\"}]}",
			"/sites/0/kind", 1, 44}, // 1 + the 43 code points before it (46 bytes)
		{"a syntax error at the offending byte",
			"{\"version\":1,\n  \"sites\": [}",
			"", 2, 13},
		{"CRLF lines",
			"{\r\n\"version\": 2\r\n}",
			"/version", 2, 12},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, errs := Validate("f", []byte(c.doc))
			for _, e := range errs {
				if e.Path != c.path {
					continue
				}
				if e.Line != c.line || e.Column != c.col {
					t.Errorf("%s at line %d column %d, want %d:%d", e, e.Line, e.Column, c.line, c.col)
				}
				checkPlace(t, []byte(c.doc), e)
				return
			}
			t.Fatalf("no error at %q; got:\n%s", c.path, errs.Text())
		})
	}
}

func TestSummaryErrorHasNoPlace(t *testing.T) {
	doc := []byte(`{"version":1,"sites":[` + repeatJoin(`{"name":1}`, MaxErrors+5) + `]}`)
	_, errs := Validate("f", doc)
	if len(errs) != MaxErrors+1 {
		t.Fatalf("%d errors", len(errs))
	}
	for _, e := range errs {
		checkPlace(t, doc, e)
	}
	if last := errs[len(errs)-1]; !last.IsZero() {
		t.Errorf("summary at %+v", last.Position)
	}
}

func repeatJoin(s string, n int) string {
	out := s
	for range n - 1 {
		out += "," + s
	}
	return out
}

func TestLocator(t *testing.T) {
	doc := []byte("{\"version\":1,\n\"pools\":[\n  {\"name\":\"p\",\n   \"site\":\"s\"}]}")
	l := Locate(doc)
	cases := []struct {
		ptr       string
		key       bool
		line, col int
	}{
		{"/pools/0", false, 3, 3},
		{"/pools/0/site", false, 4, 11},
		{"/pools/0/site", true, 4, 4},
		{"/pools/0/absent", false, 3, 3}, // the nearest value that stands
		{"/pools/0", true, 3, 3},         // an item has no key
		{"", false, 1, 1},
	}
	for _, c := range cases {
		get := l.Value
		if c.key {
			get = l.Key
		}
		pos, ok := get(c.ptr)
		if !ok || pos.Line != c.line || pos.Column != c.col {
			t.Errorf("%q key=%v: %+v %v, want %d:%d", c.ptr, c.key, pos, ok, c.line, c.col)
		}
	}
	if Locate([]byte("{")) != nil {
		t.Error("a locator for a text that does not parse")
	}
	if _, ok := (*Locator)(nil).Value("/a"); ok {
		t.Error("a nil locator places something")
	}
}
