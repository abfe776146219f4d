package policy

import (
	"slices"

	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/plan"
)

// A pool's owner quotas and offers are objects of their own in a plan, so a
// plan that only raises a quota leaves the pool unchanged, and a rule on
// pools (change.after.ownerQuota, change.after.offers) would never run on
// it. A pool whose owner quotas or offers change is judged as an update of
// the pool whose fields are "ownerQuota" and "offers" (as they change), its
// note saying so; the quota and offer changes are judged as themselves too.

// ownedChanges are, by pool name, the pool fields its owned objects change.
func ownedChanges(p *plan.Plan) map[string][]string {
	var out map[string][]string
	for i := range p.Changes {
		c := &p.Changes[i]
		if c.Action == plan.Unchanged {
			continue
		}
		field := ""
		switch c.Kind {
		case inventory.OwnerQuota:
			field = "ownerQuota"
		case inventory.Offer:
			field = "offers"
		default:
			continue
		}
		if out == nil {
			out = map[string][]string{}
		}
		pool := poolOfName(c.Kind, c.Name)
		if !slices.Contains(out[pool], field) {
			out[pool] = append(out[pool], field)
			slices.Sort(out[pool])
		}
	}
	return out
}

// withOwned is c as a rule judges it: an unchanged pool whose owned objects
// change is an update of those fields.
func withOwned(c *plan.Change, owned map[string][]string) *plan.Change {
	if c.Kind != inventory.Pool || c.Action != plan.Unchanged {
		return c
	}
	fields, ok := owned[c.Name]
	if !ok {
		return c
	}
	u := *c
	u.Action, u.Fields = plan.Update, fields
	u.Note = "its " + joinFields(fields) + " change (the pool itself does not)"
	return &u
}

func joinFields(f []string) string {
	if len(f) == 2 {
		return f[0] + " and " + f[1]
	}
	return f[0]
}

// An object on a pool that moves to an account (the document gives the pool
// a substrate, or an account it did not have) is unchanged in the plan, yet
// from the apply on it runs on that account. It is judged as an update of
// its "account", with a note, so that a rule scoped to the account sees what
// comes onto it: a 4-GPU flavor made on a pool of no account cannot be
// carried onto prod by the pool's next change without a flavor rule seeing
// it.

// movedPools are, by name, the pools whose document account is not the
// account they are stored with, and that account.
func (w *world) movedPools() map[string]string {
	var out map[string]string
	for name, a := range w.poolAcct {
		if a == "" {
			continue
		}
		p, ok := w.in.Snap.ByName(inventory.Pool, name)
		if !ok {
			continue
		}
		if s := w.storedPool(p); s.unknown || s.name != a {
			if out == nil {
				out = map[string]string{}
			}
			out[name] = a
		}
	}
	return out
}

// withMoved is c as a rule judges it: an unchanged object on a pool that
// moves to an account is an update of its account.
func (w *world) withMoved(c *plan.Change, moved map[string]string) *plan.Change {
	if len(moved) == 0 || c.Action != plan.Unchanged {
		return c
	}
	pool := ""
	switch c.Kind {
	case inventory.Flavor, inventory.Offer, inventory.OwnerQuota:
		pool = poolOfName(c.Kind, c.Name)
	case inventory.SandboxTemplate:
		if o, ok := w.in.Snap.ByName(c.Kind, c.Name); ok {
			id, _ := o.Spec["pool"].(string)
			if p, ok := w.in.Snap.ByID(id); ok {
				pool = p.Name
			}
		}
	}
	a, ok := moved[pool]
	if !ok {
		return c
	}
	u := *c
	u.Action, u.Fields = plan.Update, []string{"account"}
	u.Note = "its pool " + pool + " moves to account " + a + " (the object itself does not change)"
	return &u
}
