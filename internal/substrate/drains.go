package substrate

// A gate of the node pools step: the node pool of a removed flavor is
// deleted only once its Nodes are empty. The in-cluster half drains them
// (Drainer); this step asks it once a pass, says what blocks it, and lets
// go of a drain whose node pool is wanted again.
//
// That a drain began is written to the record before the first Drain call
// (its intent, as the journal does for provider calls): a drain taken
// back after a kill that came between the call and the pass's record
// still finds the Nodes it cordoned, and uncordons them.

import (
	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/substrate/opjournal"
)

// The crash points around the in-cluster half's drain calls: the campaign
// crashes at each, for each kind of drain (the Point's Step: drainRemoved,
// drainReplaced).
const (
	pointBeforeDrain   opjournal.PointKind = "beforeDrain"
	pointAfterDrain    opjournal.PointKind = "afterDrain"
	pointBeforeUndrain opjournal.PointKind = "beforeUndrain"
	pointAfterUndrain  opjournal.PointKind = "afterUndrain"
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

// drainCase is one kind of drain: the crash points' step, the label its
// messages start with, the note its record keeps while it runs, and the
// document's drain settings that apply.
type drainCase struct {
	point, label, note string
	settings           *fleet.Drain
}

// drained runs one pass of a node pool's drain and reports whether the
// node pool may go. Without a drainer, it may (the provider drains as it
// deletes).
func (p *step) drained(ref providers.ClusterRef, np providers.NodePool) (bool, error) {
	return p.drainedAs(ref, np, drainCase{point: "drainRemoved", label: "node pool " + np.Name + " (its flavor was removed)", note: drainingNote, settings: p.want.Spec.Drain})
}

// drainedAs is drained for one kind of drain.
func (p *step) drainedAs(ref providers.ClusterRef, np providers.NodePool, c drainCase) (bool, error) {
	d, ok := p.r.opts.InCluster.(Drainer)
	if !ok {
		return true, nil
	}
	if err := p.drainIntent(np, c.note); err != nil {
		return false, err
	}
	settings, label := c.settings, c.label
	ask := DrainAsk{NodePool: np.Name, Budget: p.want.DisruptionBudget, Timeout: settings.TimeoutDuration(),
		Force: settings != nil && settings.Then == fleet.DrainForce}
	if err := p.r.at(opjournal.Point{Kind: pointBeforeDrain, PoolID: p.want.PoolID, Op: np.Name, Step: c.point}); err != nil {
		return false, err
	}
	rep, err := d.Drain(p.ctx, p.target(ref), ask)
	if err := p.r.at(opjournal.Point{Kind: pointAfterDrain, PoolID: p.want.PoolID, Op: np.Name, Step: c.point}); err != nil {
		return false, err
	}
	return p.drainVerdict(label, rep, err), nil
}

// drainVerdict is the one reading of a drain pass, whatever drains: true
// when it finished; otherwise what holds it is said (a wait, or a problem
// past the timeout or when the cluster refused), and the next pass looks
// again after the poll.
func (p *step) drainVerdict(label string, rep DrainReport, err error) bool {
	next := p.r.clock.Now().Add(p.r.opts.Poll)
	switch {
	case err != nil && refusal.CodeOf(err) == refusal.Unavailable:
		p.wait(ReasonDraining, label+": draining: "+err.Error(), next)
	case err != nil:
		p.problem(ReasonDrainBlocked, label+": cannot drain: "+err.Error())
		p.schedule(next)
		p.scheduled = true
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

// drainIntent writes, before a node pool's first drain call, that its
// drain began (its record's note), unless the record already says so.
func (p *step) drainIntent(np providers.NodePool, note string) error {
	for _, sp := range p.seen.NodePools {
		if sp.Name == np.Name && sp.Message == note {
			return nil
		}
	}
	if err := p.alive(); err != nil {
		return err
	}
	entry := state.SeenNodePool{Name: np.Name, Status: string(np.Status), Nodes: np.NodeCount, Message: note}
	return p.r.store.UpdateIn(p.ctx, func(tx *state.Tx) error {
		seen, err := tx.SubstrateSeen(p.want.PoolID)
		if err != nil {
			return err
		}
		if seen == nil {
			s := p.seen
			seen = &s
		}
		pools := make([]state.SeenNodePool, 0, len(seen.NodePools)+1)
		for _, sp := range seen.NodePools {
			if sp.Name != np.Name {
				pools = append(pools, sp)
			} else {
				entry.Flavor = sp.Flavor
			}
		}
		seen.NodePools = append(pools, entry)
		return tx.PutSubstrateSeen(*seen)
	})
}

// undrain lets go of a drain no longer wanted and reports whether it did;
// a failure is said, and tried again on the next pass.
func (p *step) undrain(ref providers.ClusterRef, name, point string) (bool, error) {
	d, ok := p.r.opts.InCluster.(Drainer)
	if !ok {
		return true, nil
	}
	if err := p.r.at(opjournal.Point{Kind: pointBeforeUndrain, PoolID: p.want.PoolID, Op: name, Step: point}); err != nil {
		return false, err
	}
	err := d.Undrain(p.ctx, p.target(ref), name)
	if err := p.r.at(opjournal.Point{Kind: pointAfterUndrain, PoolID: p.want.PoolID, Op: name, Step: point}); err != nil {
		return false, err
	}
	if err != nil {
		p.wait(ReasonDraining, "node pool "+name+": its flavor is back; uncordoning its Nodes: "+err.Error(), p.r.clock.Now().Add(p.r.opts.Poll))
		return false, nil
	}
	return true, nil
}
