package state

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

// TestOpenGuessesADocumentGivenAsState: a fleet document, another JSON
// file or a config given where the state file belongs is named for what it
// looks like, with where it goes; it is left as it was; a damaged binary
// file gets no guess.
func TestOpenGuessesADocumentGivenAsState(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name, text, says string
	}{
		{"fleet.json", "\n  {\"version\":1,\"sites\":[]}\n", "it looks like a fleet document (JSON), not a state file"},
		{"other.json", "[1,2]", "it looks like a JSON document, not a state file"},
		{"fleet-agent.yaml", "git:\n  url: https://example.com/fleet.git\n", "a config is given with --config"},
		{"damaged.db", "\x00\x01\x02\xff" + strings.Repeat("\x00", 5000), ""},
	}
	for _, c := range cases {
		for _, ro := range []bool{true, false} {
			path := filepath.Join(dir, c.name)
			if err := os.WriteFile(path, []byte(c.text), 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := Open(path, Options{ReadOnly: ro})
			if err == nil {
				s.Close()
				t.Fatalf("%s opened", c.name)
			}
			msg := refusal.Text(err)
			if !refusal.Is(err, refusal.InvalidState) || (c.says == "") != !strings.Contains(msg, "not a state file") || !strings.Contains(msg, c.says) {
				t.Fatalf("%s (read-only %v): %s", c.name, ro, msg)
			}
			if got, _ := os.ReadFile(path); string(got) != c.text {
				t.Fatalf("%s was changed", c.name)
			}
		}
	}
}
