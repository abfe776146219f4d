package plan

import (
	"fmt"

	"github.com/fleet-agent/fleet-agent/internal/inventory"
)

// DefaultMaxTeardowns is how many substrates one plan may tear down when
// Options.MaxTeardowns is nil: the config's default for apply.maxTeardowns.
const DefaultMaxTeardowns = 1

// Deletes in two steps (docs/substrates.md). A substrate teardown deletes
// clusters and node pools that take long to make again and hold what no
// document describes, so a plan may only make one that was asked for twice:
//
//	step     looks at                                   blocks
//	protect  the substrate as stored (applied)          each teardown of a protected substrate
//	count    how many substrates the plan tears down    every teardown, when more than the limit
//
// Both read what the fleet holds, never the document: the document is what
// might be empty, truncated or wrong.
//
// What tears a substrate down, as the apply records it (internal/apply,
// recordSubstrate):
//
//	change                                   when
//	pool delete (pools.archive)              its stored policy has a substrate (prune archives a pool the document leaves out)
//	pool update whose policy loses substrate with prune (without, the plan keeps the stored substrate)
//
// A pool the document leaves out without prune is not archived, so it tears
// nothing down and neither step sees it.

// teardown is one change of the plan that would tear a substrate down.
type teardown struct {
	e         *entry
	protected bool
}

// teardowns finds the unblocked changes that tear a substrate down: a
// change blocked for another reason makes no call, so tears nothing down.
func (p *planner) teardowns() []teardown {
	var out []teardown
	for i := range p.out {
		e := &p.out[i]
		if e.change.Kind != inventory.Pool || e.change.Blocked != "" || e.call == nil {
			continue
		}
		stored, ok := p.snap.ByName(inventory.Pool, e.change.Name)
		if !ok || stored.Archived {
			continue
		}
		old := storedSubstrate(stored)
		if old == nil {
			continue
		}
		switch e.change.Action {
		case Delete:
		case Update:
			pol, _ := e.call.Params["policy"].(map[string]any)
			if _, stays := pol["substrate"]; stays || pol == nil {
				continue
			}
		default:
			continue
		}
		protected, _ := old["protect"].(bool)
		out = append(out, teardown{e: e, protected: protected})
	}
	return out
}

func storedSubstrate(o inventory.Object) map[string]any {
	pol, _ := o.Spec["policy"].(map[string]any)
	sub, _ := pol["substrate"].(map[string]any)
	return sub
}

// guardTeardowns runs the two steps over the plan's teardowns.
func (p *planner) guardTeardowns() {
	list := p.teardowns()
	for _, td := range list {
		if td.protected {
			p.block(td.e, "the substrate is protected (policy.substrate.protect is true as applied): apply \"protect\": false first, in its own reviewed change, then tear it down")
		}
	}
	limit := DefaultMaxTeardowns
	if p.opts.MaxTeardowns != nil {
		limit = *p.opts.MaxTeardowns
	}
	if len(list) <= limit {
		return
	}
	why := fmt.Sprintf("the plan tears down %d substrate%s and apply.maxTeardowns allows %d: tear them down over several plans, or raise apply.maxTeardowns", len(list), plural(len(list)), limit)
	if limit == 0 {
		why = fmt.Sprintf("the plan tears down %d substrate%s and apply.maxTeardowns is 0, which allows none: raise it to tear a substrate down", len(list), plural(len(list)))
	}
	for _, td := range list {
		p.block(td.e, why)
	}
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
