package policy

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/fleet-agent/fleet-agent/internal/fleet"
)

// A rule that compiles may still never match anything: an account name in
// a letter case no account can have, an account the fleet does not hold, an
// expression that asks for change.kind == 'flavors' (the kind is flavor),
// or match and expression that ask for different kinds. Such a rule passes
// every plan, silently; Warnings names them so `policy check` can say so.

// accountName is the form every provider account name has (the document's
// schema): lower case.
var accountName = regexp.MustCompile(`^[a-z0-9._-]{1,63}$`)

// Warnings are the rules of p that can never match, each said with the
// rule's line and what to fix. doc, when not nil, is the fleet: an account
// it does not hold is one too (an account the document adds later is fine
// then, so it is a warning, not a refusal).
func (p *Policy) Warnings(doc *fleet.Document) []string {
	var accounts []string
	if doc != nil {
		for _, a := range doc.ProviderAccounts {
			accounts = append(accounts, a.Name)
		}
	}
	var out []string
	say := func(r *Rule, format string, args ...any) {
		out = append(out, fmt.Sprintf("line %d: rule %q: ", r.Line, r.Name)+fmt.Sprintf(format, args...))
	}
	kinds := kindNames()
	for _, r := range p.Rules {
		for _, a := range r.Match.Accounts {
			switch {
			case !accountName.MatchString(a):
				hint := ""
				if l := strings.ToLower(a); accountName.MatchString(l) {
					hint = fmt.Sprintf(" (did you mean %q?)", l)
				}
				say(r, "match.accounts %q can never match: account names are lower case letters, digits, '.', '_' and '-'%s", a, hint)
			case doc != nil && !slices.Contains(accounts, a):
				say(r, "match.accounts %q is not a provider account of the document (it has %s): the rule matches nothing of it", a, listOrNone(accounts))
			}
		}
		for _, k := range r.impliedKinds {
			if !slices.Contains(kinds, k) {
				say(r, "the expression asks for change.kind == %q, which no change has (kinds: %s): the rule can never break", k, strings.Join(kinds, ", "))
			} else if len(r.Match.Kinds) > 0 && !slices.Contains(r.Match.Kinds, k) {
				say(r, "the expression asks for change.kind == %q, which match.kinds (%s) leaves out: the rule can never break", k, strings.Join(r.Match.Kinds, ", "))
			}
		}
		for _, t := range r.impliedTypes {
			if !slices.Contains(changes, t) {
				say(r, "the expression asks for change.type == %q, which no change has (types: %s): the rule can never break", t, strings.Join(changes, ", "))
			} else if !r.takesType(t) {
				say(r, "the expression asks for change.type == %q, which match.changes leaves out (the default is create, update, delete): the rule can never break", t)
			}
		}
		if k := slices.Compact(slices.Sorted(slices.Values(r.impliedKinds))); len(k) > 1 {
			say(r, "the expression asks for change.kind to be %s at once: the rule can never break", strings.Join(k, " and "))
		}
		if t := slices.Compact(slices.Sorted(slices.Values(r.impliedTypes))); len(t) > 1 {
			say(r, "the expression asks for change.type to be %s at once: the rule can never break", strings.Join(t, " and "))
		}
	}
	return out
}

// takesType reports whether the rule's match.changes take change type t.
func (r *Rule) takesType(t string) bool {
	if len(r.Match.Changes) == 0 {
		return t != "unchanged"
	}
	return slices.Contains(r.Match.Changes, t)
}

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
