package fleet

import (
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
