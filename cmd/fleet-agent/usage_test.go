package main

import (
	"strings"
	"testing"
)

// TestUnknownFlagSuggests: an unknown flag names the command's closest flag
// and points at that command's own help; one far from every flag suggests
// nothing; the top level still points at the top help.
func TestUnknownFlagSuggests(t *testing.T) {
	cases := []struct {
		args []string
		says []string
		not  string
	}{
		{[]string{"plan", "x.json", "--stat", "s.db"}, []string{"unknown flag: --stat (did you mean --state?)", "Run 'fleet-agent plan --help' for its flags"}, "Run 'fleet-agent --help'"},
		{[]string{"apply", "x.json", "--plan-has", "abc"}, []string{"(did you mean --plan-hash?)", "Run 'fleet-agent apply --help'"}, ""},
		{[]string{"status", "-state", "s.db"}, []string{"(did you mean --state?)", "Run 'fleet-agent status --help'"}, ""},
		{[]string{"validate", "--zzzzzzzz", "x.json"}, []string{"unknown flag: --zzzzzzzz\n", "Run 'fleet-agent validate --help'"}, "did you mean"},
		{[]string{"--colour"}, []string{"unknown flag: --colour", "Run 'fleet-agent --help' for the commands."}, ""},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			_, errs, code := cli(t, nil, c.args...)
			if code != 2 {
				t.Fatalf("code %d: %s", code, errs)
			}
			for _, s := range c.says {
				if !strings.Contains(errs, s) {
					t.Fatalf("missing %q in:\n%s", s, errs)
				}
			}
			if c.not != "" && strings.Contains(errs, c.not) {
				t.Fatalf("%q in:\n%s", c.not, errs)
			}
		})
	}
}
