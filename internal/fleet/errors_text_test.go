package fleet

import (
	"os"
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/textline"
)

// A key is the document author's text, and validate's lines reach a CI log
// and a terminal: each error stays one printable line there, whatever the
// key holds, while -o json keeps the key exactly.
func TestErrorTextIsOneLineWhateverTheKey(t *testing.T) {
	for name, key := range map[string]string{
		"line break":      `evil\nfleet.json: valid`,
		"carriage return": `evil\r`,
		"escape":          `evil\u001b[31m`,
		"line separator":  `evil\u2028x`,
		"bidi override":   `evil\u202ex`,
	} {
		t.Run(name, func(t *testing.T) {
			doc := `{"version":1,"sites":[],"` + key + `":1}`
			_, errs := Validate("fleet.json", []byte(doc))
			if len(errs) == 0 {
				t.Fatalf("%s: valid", doc)
			}
			lines := strings.Split(strings.TrimSuffix(errs.Text(), "\n"), "\n")
			if len(lines) != len(errs) {
				t.Errorf("%q: %d errors printed as %d lines: %q", doc, len(errs), len(lines), errs.Text())
			}
			for _, s := range append(lines, errs.Error()) {
				if !textline.IsPlain(s) {
					t.Errorf("%q: printed %q, not one plain line", doc, s)
				}
			}
			if errs[0].Path == "/evil" || !strings.HasPrefix(errs[0].Path, "/evil") || textline.IsPlain(errs[0].Path) {
				t.Errorf("the JSON's path %q is not the key as written", errs[0].Path)
			}
		})
	}
}

// A cluster id to adopt is shown in plan lines and refusals: a space of any
// kind (a no-break or an ideographic space passes for a plain one) and the
// line and paragraph separators are refused with the controls.
func TestAdoptRefusesEverySpaceAndSeparator(t *testing.T) {
	base, err := os.ReadFile("../../testdata/documents/invalid/substrate-strings.json")
	if err != nil {
		t.Fatal(err)
	}
	const was = `"adopt": "us-east-1/name with space"`
	if !strings.Contains(string(base), was) {
		t.Fatal("the adopt to replace is not in the document")
	}
	for _, id := range []string{`x\u2028y`, `x\u2029y`, `x\u00a0y`, `x\u3000y`, `x\u1680y`, `x\u2000y`, `x\u202fy`, `x\u0085y`, `x\u200by`} {
		doc := strings.Replace(string(base), was, `"adopt": "fake-east/`+id+`"`, 1)
		_, errs := Validate("fleet.json", []byte(doc))
		found := false
		for _, e := range errs {
			found = found || e.Path == "/pools/1/policy/substrate/cluster/adopt"
		}
		if !found {
			t.Errorf("adopt %q: not refused (%v)", id, errs)
		}
	}
	doc := strings.Replace(string(base), was, `"adopt": "us-east-1/name-without-space"`, 1)
	_, errs := Validate("fleet.json", []byte(doc))
	for _, e := range errs {
		if strings.HasSuffix(e.Path, "/adopt") {
			t.Errorf("a plain cluster id refused: %v", e)
		}
	}
}
