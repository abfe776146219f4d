package substrate

// A gate of the node pools step: the node pool of a removed flavor is
// deleted only once its Nodes are empty. The in-cluster half drains them
// (Drainer); this step asks it once a pass, says what blocks it, and lets
// go of a drain whose node pool is wanted again.

import (
	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

// drainingNote is a node pool's seen message while its Nodes are emptied;
// the next pass reads it back (draining) to know a drain was begun.
const drainingNote = "flavor removed; draining its Nodes before the delete"

// draining is the node pools a previous pass began draining.
func (p *step) draining() map[string]bool {
	out := map[string]bool{}
	for _, sp := range p.seen.NodePools {
		if sp.Message == drainingNote {
			out[sp.Name] = true
		}
	}
	return out
}

// drained runs one pass of a node pool's drain and reports whether the
// node pool may go. Without a drainer, it may (the provider drains as it
// deletes).
func (p *step) drained(ref providers.ClusterRef, np providers.NodePool) bool {
	return p.drainedAs(ref, np, "node pool "+np.Name+" (its flavor was removed)", p.want.Spec.Drain)
}

// drainedAs is drained with the drain settings that apply and the label
// its messages start with.
func (p *step) drainedAs(ref providers.ClusterRef, np providers.NodePool, label string, settings *fleet.Drain) bool {
	d, ok := p.r.opts.InCluster.(Drainer)
	if !ok {
		return true
	}
	ask := DrainAsk{NodePool: np.Name, Budget: p.want.DisruptionBudget, Timeout: settings.TimeoutDuration(),
		Force: settings != nil && settings.Then == fleet.DrainForce}
	rep, err := d.Drain(p.ctx, p.target(ref), ask)
	next := p.r.clock.Now().Add(p.r.opts.Poll)
	switch {
	case err != nil && refusal.CodeOf(err) == refusal.Unavailable:
		p.wait(ReasonDraining, label+": draining: "+err.Error(), next)
		return false
	case err != nil:
		p.problem(ReasonDrainBlocked, label+": cannot drain: "+err.Error())
		p.schedule(next)
		p.scheduled = true
		return false
	case rep.Finished:
		return true
	case rep.Overdue:
		p.problem(ReasonDrainBlocked, label+": "+rep.Message)
		p.schedule(next)
		p.scheduled = true
	case rep.Blocked:
		p.wait(ReasonDrainBlocked, label+": "+rep.Message, next)
	default:
		p.wait(ReasonDraining, label+": "+rep.Message, next)
	}
	return false
}

// undrain lets go of a drain no longer wanted and reports whether it did;
// a failure is said, and tried again on the next pass.
func (p *step) undrain(ref providers.ClusterRef, name string) bool {
	d, ok := p.r.opts.InCluster.(Drainer)
	if !ok {
		return true
	}
	if err := d.Undrain(p.ctx, p.target(ref), name); err != nil {
		p.wait(ReasonDraining, "node pool "+name+": its flavor is back; uncordoning its Nodes: "+err.Error(), p.r.clock.Now().Add(p.r.opts.Poll))
		return false
	}
	return true
}
