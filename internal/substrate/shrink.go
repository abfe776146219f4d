package substrate

// A step of the node pools step: a node pool made smaller loses the Nodes
// the in-cluster half chose and drained, never ones the provider picks.
//
// It needs both halves: the in-cluster half (Drainer) chooses and drains
// the Nodes, the provider (providers.NodeRemover) removes exactly them.
// Without either, a shrink is a resize and the provider chooses (as its
// own scale-in does, draining as it goes or not).
//
// The drained scale-down of one node pool, per pass (the first row that
// holds decides):
//
//	the shrink                 the step                                     reason
//	not begun, outside window  wait for the window                          OutsideWindow
//	Nodes chosen, not empty    one drain pass over the chosen Nodes         Draining / DrainBlocked
//	chosen Nodes empty         removeNodes, journaled (providerIDs, size)   OperationInProgress
//	removeNodes done           converged: the pool at its new size          NodePoolsReady
//	taken back before removal  uncordon what it cordoned (Undrain)          Draining until done
//
// The choice lives on the Nodes (the in-cluster half's annotation), the
// removal in the journal: a restart at any point finds the same Nodes
// chosen, and a removal sent is read back (the pool at its new size) and
// never sent twice.

import (
	"fmt"
	"slices"

	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/substrate/opjournal"
)

// shrinkingNote is a node pool's seen message while a drained scale-down
// is under way; the next pass reads it back (shrinkBegun) to finish a
// drain begun in a window, or to let go of one taken back.
const shrinkingNote = "shrinking; draining the Nodes it removes"

// remover is the provider's NodeRemover when the substrate also has an
// in-cluster half that drains: only then is a shrink drained.
func (p *step) remover() (providers.NodeRemover, bool) {
	if _, ok := p.r.opts.InCluster.(Drainer); !ok {
		return nil, false
	}
	nr, ok := p.prov.(providers.NodeRemover)
	return nr, ok
}

// shrinkBegun reports whether a previous pass began a drained scale-down
// of the node pool.
func (p *step) shrinkBegun(name string) bool {
	for _, sp := range p.seen.NodePools {
		if sp.Name == name && sp.Message == shrinkingNote {
			return true
		}
	}
	return false
}

// perZone reads whether the provider counts a node pool's nodes per
// zone; a provider that does not say is taken to count them in all.
func (p *step) perZone() (bool, error) {
	rr, ok := p.prov.(providers.Catalog)
	if !ok {
		return false, nil
	}
	r, err := rr.Rules(p.ctx, p.acct)
	if err != nil {
		return false, err
	}
	return r.NodesPerZone, nil
}

// drainShrink runs one pass of a scale-down's drain and, once the chosen
// Nodes are empty, returns their providerIDs (ok true). Its error is a
// crash the campaign asked for.
func (p *step) drainShrink(ref providers.ClusterRef, f fleet.SubstrateFlavor, np providers.NodePool, size providers.Size, label string) ([]string, bool, error) {
	d := p.r.opts.InCluster.(Drainer)
	what := fmt.Sprintf("%s: node pool %s from %d to %d nodes", label, np.Name, np.NodeCount, size.NodeCount)
	next := p.r.clock.Now().Add(p.r.opts.Poll)
	perZone, err := p.perZone()
	if err != nil {
		p.readFail("the provider's rules", err)
		return nil, false, nil
	}
	if err := p.shrinkIntent(f.Name, np.Name); err != nil {
		p.wait(ReasonDraining, what+": recording the drain before it begins: "+err.Error(), next)
		return nil, false, nil
	}
	settings := p.want.Spec.DrainOf(f.Name)
	ask := DrainAsk{NodePool: np.Name, Budget: p.want.DisruptionBudget, Timeout: settings.TimeoutDuration(),
		Force: settings != nil && settings.Then == fleet.DrainForce, Shrink: &Shrink{Keep: size.NodeCount, PerZone: perZone}}
	if err := p.r.at(opjournal.Point{Kind: pointBeforeDrain, PoolID: p.want.PoolID, Op: np.Name, Step: "drainShrink"}); err != nil {
		return nil, false, err
	}
	rep, err := d.Drain(p.ctx, p.target(ref), ask)
	if err := p.r.at(opjournal.Point{Kind: pointAfterDrain, PoolID: p.want.PoolID, Op: np.Name, Step: "drainShrink"}); err != nil {
		return nil, false, err
	}
	if !p.drainVerdict(what, rep, err) {
		return nil, false, nil
	}
	return rep.ProviderIDs, true, nil
}

// callRemoveNodes is the removeNodes step's provider call.
func (p *pass) callRemoveNodes(req request) (observed, error) {
	nr, ok := p.prov.(providers.NodeRemover)
	if !ok {
		// The journal holds a removal and the provider lost the call (an
		// adapter replaced by one without it): a refusal a person reads.
		return observed{}, providers.Invalidf("RemoveNodes", "removeNodes", "the provider of account %s cannot remove chosen nodes; put the node pool's size back, or let the provider choose", p.acct.Name)
	}
	np, err := nr.RemoveNodes(p.ctx, p.acct, req.Cluster, req.Name, req.ProviderIDs, *req.Size)
	return observed{Value: made{pool: &np}}, err
}

// letGoOfShrink uncordons what a drained scale-down cordoned once it is
// no longer wanted (the size put back before the removal was sent), and
// reports whether nothing is left to let go; a failure is said and tried
// again on the next pass. A removal this generation made is never let
// go of: its Nodes are on their way out. Its error is a crash the
// campaign asked for.
func (p *step) letGoOfShrink(ref providers.ClusterRef, name string) (bool, error) {
	if _, ok := p.r.opts.InCluster.(Drainer); !ok || !p.shrinkBegun(name) {
		return true, nil
	}
	for _, op := range p.ops {
		if op.Step == stepRemoveNodes && op.Object == name && op.Generation == p.want.Generation && op.State == state.Succeeded {
			return true, nil
		}
	}
	d := p.r.opts.InCluster.(Drainer)
	if err := p.r.at(opjournal.Point{Kind: pointBeforeUndrain, PoolID: p.want.PoolID, Op: name, Step: "drainShrink"}); err != nil {
		return false, err
	}
	err := d.Undrain(p.ctx, p.target(ref), name)
	if err := p.r.at(opjournal.Point{Kind: pointAfterUndrain, PoolID: p.want.PoolID, Op: name, Step: "drainShrink"}); err != nil {
		return false, err
	}
	if err != nil {
		p.wait(ReasonDraining, "node pool "+name+": its shrink was taken back; uncordoning the Nodes it chose: "+err.Error(), p.r.clock.Now().Add(p.r.opts.Poll))
		return false, nil
	}
	return true, nil
}

// shrinkIntent records, before the first drain pass cordons anything, that
// the node pool's scale-down began: a crash before the pass is recorded
// must still find it, so that a shrink taken back then lets go of what it
// cordoned (found by the exhaustive campaign).
func (p *step) shrinkIntent(flavor, name string) error {
	if p.shrinkBegun(name) {
		return nil
	}
	if err := p.alive(); err != nil {
		return err
	}
	seen := p.seen
	seen.NodePools = slices.Clone(p.seen.NodePools)
	i := slices.IndexFunc(seen.NodePools, func(sp state.SeenNodePool) bool { return sp.Name == name })
	if i < 0 {
		seen.NodePools = append(seen.NodePools, state.SeenNodePool{Flavor: flavor, Name: name, Status: string(providers.NodePoolRunning)})
		i = len(seen.NodePools) - 1
	}
	seen.NodePools[i].Message = shrinkingNote
	if err := p.r.store.UpdateIn(p.ctx, func(tx *state.Tx) error { return tx.PutSubstrateSeen(seen) }); err != nil {
		return err
	}
	p.seen.NodePools = seen.NodePools
	return nil
}
