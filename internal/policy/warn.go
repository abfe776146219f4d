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
		r.warnKinds(kinds, say)
		r.warnTypes(say)
	}
	return out
}

// takesType reports whether the rule's match.changes take change type t.
func (r *Rule) takesType(t string) bool {
	if len(r.Match.Changes) == 0 {
		return t != "unchanged" && t != "upgrade"
	}
	return slices.Contains(r.Match.Changes, t)
}

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// warnKinds names the kinds the expression compares change.kind with that
// no change has (wherever the comparison is), and says when what the
// expression requires of the kind, with match.kinds, leaves none.
func (r *Rule) warnKinds(kinds []string, say func(*Rule, string, ...any)) {
	r.warnLiterals("kind", kinds, say)
	allowed := kinds
	if len(r.Match.Kinds) > 0 {
		allowed = r.Match.Kinds
	}
	for _, set := range r.impliedKinds {
		known := slices.DeleteFunc(slices.Clone(set), func(k string) bool { return !slices.Contains(kinds, k) })
		if len(known) > 0 && !slices.ContainsFunc(known, func(k string) bool { return slices.Contains(allowed, k) }) {
			say(r, "the expression asks for change.kind %s, which match.kinds (%s) leaves out: the rule can never break", asked(set), strings.Join(r.Match.Kinds, ", "))
		}
	}
	if len(r.impliedKinds) > 1 && len(intersect(r.impliedKinds)) == 0 {
		say(r, "the expression asks for change.kind to be %s at once: the rule can never break", strings.Join(union(r.impliedKinds), " and "))
	}
}

// warnTypes is warnKinds for change.type and match.changes.
func (r *Rule) warnTypes(say func(*Rule, string, ...any)) {
	r.warnLiterals("type", changes, say)
	for _, set := range r.impliedTypes {
		known := slices.DeleteFunc(slices.Clone(set), func(t string) bool { return !slices.Contains(changes, t) })
		if len(known) > 0 && !slices.ContainsFunc(known, r.takesType) {
			say(r, "the expression asks for change.type %s, which match.changes leaves out (the default is create, update, delete): the rule can never break", asked(set))
		}
	}
	if len(r.impliedTypes) > 1 && len(intersect(r.impliedTypes)) == 0 {
		say(r, "the expression asks for change.type to be %s at once: the rule can never break", strings.Join(union(r.impliedTypes), " and "))
	}
}

// warnLiterals names each literal the expression compares change.<field>
// with that is not one of known: a misspelling (a plural, a capital) makes
// an == never true, a != always true, an entry of an in list dead.
func (r *Rule) warnLiterals(field string, known []string, say func(*Rule, string, ...any)) {
	var said []string
	for _, c := range r.compared {
		if c.field != field {
			continue
		}
		for _, v := range c.values {
			if slices.Contains(known, v) || slices.Contains(said, v) {
				continue
			}
			said = append(said, v)
			what := "which no change has"
			if c.op == "_==_" && len(c.values) == 1 && r.requires(field, v) {
				say(r, "the expression asks for change.%s == %q, %s (%ss: %s): the rule can never break", field, v, what, field, strings.Join(known, ", "))
				continue
			}
			say(r, "the expression compares change.%s with %q, %s (%ss: %s): check its spelling", field, v, what, field, strings.Join(known, ", "))
		}
	}
}

// requires reports whether the expression's conjunction asks for
// change.<field> == v alone (so the rule can never break).
func (r *Rule) requires(field, v string) bool {
	sets := r.impliedKinds
	if field == "type" {
		sets = r.impliedTypes
	}
	return slices.ContainsFunc(sets, func(s []string) bool { return len(s) == 1 && s[0] == v })
}

// asked says what a set of implied values asks: == 'x', or in [x, y].
func asked(set []string) string {
	if len(set) == 1 {
		return fmt.Sprintf("== %q", set[0])
	}
	return fmt.Sprintf("in [%s]", strings.Join(set, ", "))
}

// intersect is what every set holds.
func intersect(sets [][]string) []string {
	out := slices.Clone(sets[0])
	for _, s := range sets[1:] {
		out = slices.DeleteFunc(out, func(v string) bool { return !slices.Contains(s, v) })
	}
	return out
}

// union is every value of the sets, sorted, once each.
func union(sets [][]string) []string {
	var out []string
	for _, s := range sets {
		out = append(out, s...)
	}
	return slices.Compact(slices.Sorted(slices.Values(out)))
}
