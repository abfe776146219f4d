// Package golden compares test output with files under testdata/ and
// rewrites them when the tests run with -update. Every test package that
// keeps golden files imports it, so the one flag is defined once.
package golden

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

// Update is the -update flag: rewrite the golden files instead of
// comparing with them.
var Update = flag.Bool("update", false, "rewrite the golden files under testdata/ instead of comparing with them")

// Check compares got with the file at path, or writes it with -update.
func Check(t testing.TB, path string, got []byte) {
	t.Helper()
	if *Update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run make golden, or go test -update in this package, and review the diff)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (run make golden and review the diff):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}
