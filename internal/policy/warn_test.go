package policy

import (
	"strings"
	"testing"
)

// TestWarnings: a rule that can never match is named, with its line and
// what to fix; a rule that can match is not.
func TestWarnings(t *testing.T) {
	cases := []struct {
		name, rule string
		want       string // "" for no warning
	}{
		{"account in upper case", `{name: r, match: {accounts: [Prod]}, expression: "true", action: deny}`, `match.accounts "Prod" can never match: account names are lower case letters, digits, '.', '_' and '-' (did you mean "prod"?)`},
		{"account the document lacks", `{name: r, match: {accounts: [staging]}, expression: "true", action: deny}`, `match.accounts "staging" is not a provider account of the document (it has sim, prod)`},
		{"account the document has", `{name: r, match: {accounts: [prod]}, expression: "true", action: deny}`, ``},
		{"kind that does not exist", `{name: r, expression: "change.kind == 'flavors' && change.after.gpus > 8", action: deny}`, `the expression asks for change.kind == "flavors", which no change has`},
		{"kind in the wrong case", `{name: r, expression: "change.kind == 'Flavor'", action: deny}`, `the expression asks for change.kind == "Flavor", which no change has`},
		{"kind match leaves out", `{name: r, match: {kinds: [pool]}, expression: "change.kind == 'flavor'", action: deny}`, `which match.kinds (pool) leaves out`},
		{"type that does not exist", `{name: r, expression: "change.type == 'updated'", action: deny}`, `the expression asks for change.type == "updated", which no change has`},
		{"unchanged without match", `{name: r, expression: "change.type == 'unchanged'", action: warn}`, `which match.changes leaves out (the default is create, update, delete)`},
		{"unchanged with match", `{name: r, match: {changes: [unchanged]}, expression: "change.type == 'unchanged'", action: warn}`, ``},
		{"two kinds", `{name: r, expression: "change.kind == 'pool' && change.kind == 'flavor'", action: warn}`, `change.kind to be flavor and pool at once`},
		{"a dead entry of an in list", `{name: r, expression: "change.kind in ['flavor', 'pools'] && change.after.gpus > 8", action: deny}`, `the expression compares change.kind with "pools", which no change has (kinds: `},
		{"a misspelt kind in a negation", `{name: r, expression: "change.kind != 'Flavor' && change.type == 'delete'", action: deny}`, `the expression compares change.kind with "Flavor", which no change has`},
		{"a misspelt kind under or", `{name: r, expression: "change.kind == 'flavor' || change.kind == 'flavour'", action: deny}`, `the expression compares change.kind with "flavour", which no change has`},
		{"a misspelt type in a list", `{name: r, expression: "change.type in ['create', 'updated']", action: deny}`, `the expression compares change.type with "updated", which no change has (types: `},
		{"in list match leaves out", `{name: r, match: {kinds: [site]}, expression: "change.kind in ['pool', 'flavor']", action: deny}`, `the expression asks for change.kind in [pool, flavor], which match.kinds (site) leaves out`},
		{"in list and == disagree", `{name: r, expression: "change.kind in ['pool', 'site'] && change.kind == 'flavor'", action: warn}`, `change.kind to be flavor and pool and site at once`},
		{"in list of unchanged only", `{name: r, expression: "change.type in ['unchanged']", action: warn}`, `the expression asks for change.type == "unchanged", which match.changes leaves out`},
		{"in lists that meet", `{name: r, expression: "change.kind in ['pool', 'flavor'] && change.kind in ['flavor', 'site'] && change.type in ['create', 'update']", action: warn}`, ``},
		{"a rule that matches", `{name: r, match: {kinds: [flavor]}, expression: "change.kind == 'flavor' && change.after.gpus > 8", action: deny}`, ``},
	}
	doc := document(t, base)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pol, err := Load([]byte("rules:\n  - " + c.rule + "\n"))
			if err != nil {
				t.Fatal(err)
			}
			got := strings.Join(pol.Warnings(doc), "\n")
			if c.want == "" {
				if got != "" {
					t.Fatalf("warnings %q, want none", got)
				}
				return
			}
			if !strings.Contains(got, c.want) || !strings.HasPrefix(got, `line 2: rule "r": `) {
				t.Fatalf("warnings %q, want %q", got, c.want)
			}
		})
	}
	// Without a document, an account is only held to its form.
	pol, err := Load([]byte("rules:\n  - {name: r, match: {accounts: [staging]}, expression: 'true', action: deny}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if w := pol.Warnings(nil); len(w) != 0 {
		t.Fatalf("warnings without a document: %q", w)
	}
}
