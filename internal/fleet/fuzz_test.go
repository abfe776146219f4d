package fleet

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// FuzzValidate: parse and validate never panic; every error's pointer
// resolves in the input, or its parent does, or it is ""; its line and
// column hold the offending value or its key (checkPlace); a valid
// document's canonical form is itself valid with the same canonical form;
// and the schema stage refuses every input as santhosh-tekuri/jsonschema
// does (oracle_test.go).
func FuzzValidate(f *testing.F) {
	for _, dir := range []string{"valid", "invalid"} {
		files, _ := filepath.Glob(filepath.Join(docs, dir, "*.json"))
		for _, file := range files {
			if data, err := os.ReadFile(file); err == nil && len(data) < 64<<10 {
				f.Add(data)
			}
		}
	}
	f.Add([]byte(`{"version":1,"x":"\ud800\u0041"}`))
	f.Add([]byte(`{"version":1e0,"pools":[{"name":"a","site":"b","class":"provider","policy":{"a":-0.0e-5}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		doc, errs := Validate("f", data)
		if doc == nil && len(errs) == 0 {
			t.Fatal("neither a document nor an error")
		}
		if doc != nil && len(errs) > 0 {
			t.Fatal("both a document and errors")
		}
		if len(errs) > MaxErrors+1 {
			t.Fatalf("%d errors", len(errs))
		}
		for _, e := range errs {
			checkPointer(t, data, e.Path)
			checkPlace(t, data, e)
		}
		agree(t, data, "the input")
		if doc != nil {
			c := doc.Canonical()
			doc2, errs2 := Validate("canonical", c)
			if errs2 != nil {
				t.Fatalf("canonical form refused: %s\n%s", errs2.Text(), c)
			}
			if c2 := doc2.Canonical(); !bytes.Equal(c, c2) {
				t.Fatalf("canonical form not stable:\n%s\n%s", c, c2)
			}
		}
	})
}
