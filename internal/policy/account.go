package policy

import (
	"slices"
	"strings"

	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/plan"
)

// A change belongs to the provider accounts of what it touches: the object
// as the document writes it and the object as stored. Each side is resolved
// from everything known, in order: the document, the stored object, the
// stored pool of a flavor, offer, owner quota or template (by name when the
// document leaves the pool out, by id when the object is deleted), and the
// substrate recorded for a pool. A side that cannot be resolved makes the
// account unknown, and an unknown account is matched by every `accounts`
// rule unless the rule says otherwise (match.unknownAccount: skip): an
// account rule cannot be dodged by leaving a pool out of the document or by
// deleting what it guards.

// UnknownAccount is what a rule does with a change whose account cannot
// be known.
type UnknownAccount string

// The choices of match.unknownAccount.
const (
	// UnknownMatches (the default) evaluates the rule on the change, as if
	// it were of every account the rule names: a policy fails closed.
	UnknownMatches UnknownAccount = "match"
	// UnknownSkips leaves the change to the rules without accounts.
	UnknownSkips UnknownAccount = "skip"
)

// accountSide is one side's account: a name, none (the object belongs to
// no account: a site, a pool without one), or unknown.
type accountSide struct {
	name    string
	unknown bool
}

// changeAccounts are the accounts a change touches.
type changeAccounts struct {
	// name is change.account: the document's side, else the stored one's;
	// "" when none or unknown.
	name string
	// names is every account either side names, for match.accounts.
	names   []string
	unknown bool
}

// takes reports whether a rule's accounts select a change of these accounts.
func (m *Match) takes(ca *changeAccounts) bool {
	if len(m.Accounts) == 0 {
		return true
	}
	if ca.unknown && m.UnknownAccount != UnknownSkips {
		return true
	}
	for _, n := range ca.names {
		if slices.Contains(m.Accounts, n) {
			return true
		}
	}
	return false
}

// poolAccount is a document pool's account: its providerAccount, or its
// substrate's account; "" for a pool that has neither.
func poolAccount(p *fleet.Pool) string {
	if p.ProviderAccount != "" {
		return p.ProviderAccount
	}
	if s := p.Substrate(); s != nil {
		return s.Account
	}
	return ""
}

// accountsOf resolves the accounts of change c. after is the object as the
// document writes it (nil when the document has none); stored the object
// as stored, when had.
func (w *world) accountsOf(c *plan.Change, after any, stored inventory.Object, had bool) changeAccounts {
	var sides []accountSide
	if after != nil {
		sides = append(sides, w.documentSide(c, after)...)
	}
	if had {
		sides = append(sides, w.storedSide(stored))
	}
	if len(sides) == 0 {
		// Neither in the document nor stored: nothing says whose it is.
		sides = append(sides, accountSide{unknown: true})
	}
	var ca changeAccounts
	for _, s := range sides {
		switch {
		case s.unknown:
			ca.unknown = true
		case s.name != "":
			if ca.name == "" {
				ca.name = s.name
			}
			if !slices.Contains(ca.names, s.name) {
				ca.names = append(ca.names, s.name)
			}
		}
	}
	return ca
}

// documentSide is the account of the object as the document writes it.
// An object on a pool is of every account its pool has, in the document and
// as stored: without prune, a pool whose substrate the document leaves out
// keeps it, so the document alone would say "no account" of a pool that
// still runs on one.
func (w *world) documentSide(c *plan.Change, after any) []accountSide {
	switch c.Kind {
	case inventory.ProviderAccount:
		return []accountSide{{name: c.Name}}
	case inventory.Site:
		return []accountSide{{}}
	case inventory.Pool:
		return w.poolSides(c.Name)
	}
	pool := ""
	if m, ok := after.(map[string]any); ok {
		pool, _ = m["pool"].(string)
	}
	if pool == "" {
		pool = poolOfName(c.Kind, c.Name)
	}
	return w.poolSides(pool)
}

// poolOfName is the pool a pool-owned object's fleet name names.
func poolOfName(k inventory.Kind, name string) string {
	switch k {
	case inventory.OwnerQuota:
		p, _, _ := strings.Cut(name, ":")
		return p
	case inventory.Offer:
		p, _, _ := strings.Cut(name, " -> ")
		return p
	case inventory.Flavor:
		p, _, _ := strings.Cut(name, "/")
		return p
	}
	return ""
}

// poolSides are the accounts of the pool of that name: the document's and
// the stored one's (a pool left out of the document stays stored without
// prune, and so does a substrate the document leaves out); unknown when
// neither has the pool.
func (w *world) poolSides(name string) []accountSide {
	if name == "" {
		return []accountSide{{unknown: true}}
	}
	var out []accountSide
	if a, ok := w.poolAcct[name]; ok {
		out = append(out, accountSide{name: a})
	}
	if p, ok := w.in.Snap.ByName(inventory.Pool, name); ok {
		out = append(out, w.storedPool(p))
	}
	if len(out) == 0 {
		return []accountSide{{unknown: true}}
	}
	return out
}

// poolNamed is the first of poolSides: the document's account of the pool,
// else the stored one's.
func (w *world) poolNamed(name string) accountSide { return w.poolSides(name)[0] }

// storedSide is the account of a stored object.
func (w *world) storedSide(o inventory.Object) accountSide {
	switch o.Kind {
	case inventory.ProviderAccount:
		return accountSide{name: o.Name}
	case inventory.Site:
		return accountSide{}
	case inventory.Pool:
		return w.storedPool(o)
	}
	id, _ := o.Spec["pool"].(string)
	if p, ok := w.in.Snap.ByID(id); ok {
		return w.storedPool(p)
	}
	if name := poolOfName(o.Kind, o.Name); name != "" {
		return w.poolNamed(name)
	}
	return accountSide{unknown: true}
}

// storedPool is a stored pool's account: its providerAccount (an id, named
// by the stored account), its stored substrate's account, or the account
// of the substrate recorded for it.
func (w *world) storedPool(p inventory.Object) accountSide {
	if id, _ := p.Spec["providerAccount"].(string); id != "" {
		if a, ok := w.in.Snap.ByID(id); ok {
			return accountSide{name: a.Name}
		}
		if a, ok := w.in.Snap.ByName(inventory.ProviderAccount, id); ok {
			return accountSide{name: a.Name}
		}
		return accountSide{unknown: true}
	}
	if pol, ok := p.Spec["policy"].(map[string]any); ok {
		if s, ok := pol["substrate"].(map[string]any); ok {
			if a, _ := s["account"].(string); a != "" {
				return accountSide{name: a}
			}
			return accountSide{unknown: true}
		}
	}
	if a := w.in.Substrates[p.ID]; a != "" {
		return accountSide{name: a}
	}
	return accountSide{}
}
