package substrate

// A step of the pass: one node pool per flavor, resized in place, removed
// with its flavor.

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

// nodePoolSpec is what a flavor asks of its node pool.
func nodePoolSpec(o providers.Owner, f fleet.SubstrateFlavor) providers.NodePoolSpec {
	s := providers.NodePoolSpec{
		Name:   o.NodePoolName(f.Name),
		Shape:  providers.Shape{MachineType: f.MachineType, Spot: f.Spot, Zones: slices.Clone(f.Zones)},
		Labels: o.PoolLabels(f.Spot),
	}
	if f.GPUs != nil {
		s.Accelerators = &providers.Accelerators{Type: f.GPUs.Type, Count: int(f.GPUs.Count)}
	}
	if f.DiskGiB != nil {
		s.DiskGiB = int(*f.DiskGiB)
	}
	switch {
	case f.Nodes != nil:
		s.NodeCount = int(*f.Nodes)
	case f.Autoscaling != nil:
		s.NodeCount = int(f.Autoscaling.MinNodes)
	default:
		// The documented surface leaves nodes optional without a default; one node
		// is the least every provider accepts for a fixed-size pool.
		s.NodeCount = 1
	}
	if a := f.Autoscaling; a != nil {
		s.Autoscaling = &providers.Autoscaling{MinNodes: int(a.MinNodes), MaxNodes: int(a.MaxNodes)}
	}
	return s
}

// shrinks reports whether asking size of a node pool that has have can take
// running Nodes away: fewer nodes, or an autoscaler bound below the count.
func shrinks(have, size providers.Size) bool {
	return size.NodeCount < have.NodeCount || size.Autoscaling != nil && size.Autoscaling.MaxNodes < have.NodeCount
}

// sizeFor is the size to ask of an existing node pool: the wanted one, and
// with autoscaling the autoscaler's current count kept within the bounds.
func sizeFor(have providers.NodePool, want providers.Size) providers.Size {
	if want.Autoscaling == nil {
		return want
	}
	a := *want.Autoscaling
	return providers.Size{NodeCount: min(max(have.NodeCount, a.MinNodes), a.MaxNodes), Autoscaling: &a}
}

// nodePools converges one node pool per flavor and deletes those of
// removed flavors; making reports that a flavor's pool is still being made.
func (p *step) nodePools(ref providers.ClusterRef) (nodePoolsResult, error) {
	if !p.full {
		return nodePoolsResult{}, nil
	}
	list, err := p.prov.ListNodePools(p.ctx, p.acct, ref)
	if err != nil {
		if errors.Is(err, providers.ErrNotFound) {
			p.doubt()
		}
		p.readFail("the node pools of cluster "+ref.Name, err)
		return nodePoolsResult{making: true}, nil
	}
	listed := map[string]providers.NodePool{}
	for _, np := range list {
		listed[np.Name] = np
	}
	wanted := map[string]bool{}
	var seen []state.SeenNodePool
	making := false
	draining := p.draining()
	for _, f := range p.want.Spec.Flavors {
		res, err := p.flavor(ref, f, listed)
		if err != nil {
			return nodePoolsResult{making: true}, err
		}
		sp, m := res.seen, res.making
		wanted[sp.Name] = true
		seen = append(seen, sp)
		for _, o := range res.replaced {
			wanted[o.Name] = true
			seen = append(seen, o)
		}
		making = making || m
	}
	// What a removed flavor's node pool had in flight (its create, a
	// resize, when the document changed under it) is finished first:
	// abandoned where nothing runs at the provider yet, else followed to its
	// end; the delete below then finds the pool, never an operation left
	// open for ever (found by the exhaustive campaign).
	for _, key := range p.keys() {
		op := p.ops[key]
		if op.State.Terminal() || isDelete(op.Step) || !slices.Contains(nodePoolSteps, op.Step) || wanted[op.Object] || strings.HasPrefix(op.Object, orphanPrefix) {
			continue
		}
		out, err := p.drive(op, true)
		if err != nil {
			return nodePoolsResult{making: true}, err
		}
		if out.res == resWait {
			p.take(out, "flavor removed")
		}
	}
	for _, np := range list {
		if wanted[np.Name] || !p.ours(np) {
			continue
		}
		// A delete not started, or refused and not sent again yet (its
		// retry lands whenever the schedule says), waits for a window; a
		// drain begun in one is finished.
		op := p.pending(np.Name, stepDeleteNodePool)
		if (op == nil || op.State == state.Journaled) && !draining[np.Name] && p.outsideWindow(fmt.Sprintf("the delete of node pool %s (its flavor was removed, %d nodes)", np.Name, np.NodeCount)) {
			seen = append(seen, state.SeenNodePool{Name: np.Name, Status: string(np.Status), Nodes: np.NodeCount, Message: "flavor removed; its delete waits for a maintenance window"})
			continue
		}
		// The delete is journaled only once the drain finished: an
		// operation in the journal means its Nodes were emptied.
		if op == nil {
			done, err := p.drained(ref, np)
			if err != nil {
				return nodePoolsResult{making: true}, err
			}
			if !done {
				seen = append(seen, state.SeenNodePool{Name: np.Name, Status: string(np.Status), Nodes: np.NodeCount, Message: drainingNote})
				continue
			}
		}
		del, err := p.deleteNodePool(ref, "", np.Name, "flavor removed")
		if err != nil {
			return nodePoolsResult{making: true}, err
		}
		if !del.gone {
			seen = append(seen, state.SeenNodePool{Name: np.Name, Status: string(providers.NodePoolDeleting), Nodes: np.NodeCount, Message: "flavor removed; deleting"})
		}
	}
	// A drain whose node pool is wanted again (its flavor put back) is
	// let go: the Nodes it cordoned take pods again.
	for name := range draining {
		if !wanted[name] {
			continue
		}
		if done, err := p.undrain(ref, name, "drainRemoved"); err != nil {
			return nodePoolsResult{making: true}, err
		} else if done {
			continue
		}
		for i := range seen {
			if seen[i].Name == name {
				seen[i].Message = drainingNote
			}
		}
	}
	if err := p.settleUnlisted("", listed, wanted); err != nil {
		return nodePoolsResult{making: true}, err
	}
	p.seen.NodePools = seen
	return nodePoolsResult{making: making, listed: p.flavorPools(listed)}, nil
}

// flavorPools are our node pools of the wanted flavors, a blue/green
// flavor's generations with them, by flavor name (the order the plan shows
// an upgrade's node pool hops in) and then by name.
func (p *step) flavorPools(listed map[string]providers.NodePool) []providers.NodePool {
	flavors := slices.Clone(p.want.Spec.Flavors)
	slices.SortFunc(flavors, func(a, b fleet.SubstrateFlavor) int { return strings.Compare(a.Name, b.Name) })
	ours := []providers.NodePool{}
	for _, f := range flavors {
		var mine []providers.NodePool
		for name, np := range listed {
			if !p.ours(np) {
				continue
			}
			if _, gen := generationOf(p.owner(), f.Name, name); name == p.owner().NodePoolName(f.Name) || f.Replace == fleet.ReplaceBlueGreen && gen {
				mine = append(mine, np)
			}
		}
		slices.SortFunc(mine, func(a, b providers.NodePool) int { return strings.Compare(a.Name, b.Name) })
		ours = append(ours, mine...)
	}
	return ours
}

// ours reports whether a node pool is one this substrate made: its labels
// name the pool and the installation, and its name has the substrate's
// prefix. A pool of the owner's own on an adopted cluster is never either,
// nor one another installation made.
func (p *pass) ours(np providers.NodePool) bool {
	o := p.owner()
	return o.Owns(np.Labels) && o.OwnsNodePoolName(np.Name)
}

var nodePoolSteps = []string{stepCreateNodePool, stepUpdateNodePool, stepResizeNodePool, stepDeleteNodePool, stepRemoveNodes}

// flavorResult is what converging one flavor's node pool found: the pool
// as seen, and whether it is still being made (the in-cluster half waits
// for every pool being made; a resize or an error does not hold it).
type flavorResult struct {
	seen   state.SeenNodePool
	making bool
	// replaced are the node pools a blue/green flavor is replacing: its
	// own, never a removed flavor's.
	replaced []state.SeenNodePool
}

// flavor converges one flavor's node pool. A refusal is this flavor's
// error; the others go on.
func (p *step) flavor(ref providers.ClusterRef, f fleet.SubstrateFlavor, listed map[string]providers.NodePool) (flavorResult, error) {
	if f.Replace == fleet.ReplaceBlueGreen {
		return p.blueGreen(ref, f, listed)
	}
	return p.flavorPool(ref, f, nodePoolSpec(p.owner(), f), listed)
}

// flavorPool converges the node pool want names for flavor f.
func (p *step) flavorPool(ref providers.ClusterRef, f fleet.SubstrateFlavor, want providers.NodePoolSpec, listed map[string]providers.NodePool) (flavorResult, error) {
	name := want.Name
	sp := state.SeenNodePool{Flavor: f.Name, Name: name, Status: "missing"}
	label := "flavor " + f.Name
	np, exists := listed[name]
	fileOut := func(out outcome) {
		if out.message != "" {
			sp.Message = out.message
		}
		p.take(out, label)
	}
	if exists && !p.owner().Owns(np.Labels) {
		// A node pool under our name that does not carry our labels (made
		// by hand, or relabelled): never resized, changed or deleted.
		inst := p.owner().Foreign(np.Labels)
		whose := "carries no " + providers.LabelSubstratePool + " and " + providers.LabelInstallation + " labels of this pool"
		if inst != "" {
			whose = "belongs to installation " + inst
		}
		sp.Status, sp.Message = string(np.Status), "not ours: "+whose
		p.problem(ReasonNodePoolNotOurs, fmt.Sprintf("%s: node pool %s exists and %s; fleet-agent never changes a node pool that is not its own: delete or rename it", label, name, whose))
		return flavorResult{seen: sp}, nil
	}
	if op := p.pending(name, nodePoolSteps...); op != nil {
		if exists && op.Step == stepResizeNodePool && op.State == state.Journaled {
			// Refused before and not sent again yet: it has not started,
			// so a shrink waits for a window like a new one.
			if r, err := decodeRequest(op); err == nil && r.Size != nil && shrinks(np.Size, *r.Size) &&
				p.outsideWindow(fmt.Sprintf("%s: node pool %s from %d to %d nodes", label, name, np.NodeCount, r.Size.NodeCount)) {
				sp.Status, sp.Nodes = string(np.Status), np.NodeCount
				return flavorResult{seen: sp}, nil
			}
		}
		stale := op.Generation < p.want.Generation && op.Step != stepCreateNodePool && op.Step != stepDeleteNodePool
		out, err := p.drive(op, stale)
		if err != nil {
			return flavorResult{seen: sp, making: true}, err
		}
		// A removal not done keeps its Nodes chosen and cordoned: the
		// note stays, so that a shrink taken back is let go from it.
		removing := op.Step == stepRemoveNodes && out.res != resDone
		switch out.res {
		case resDone:
			if out.obs.Value.pool != nil && op.Step != stepDeleteNodePool {
				np, exists = *out.obs.Value.pool, true
			} else if op.Step == stepDeleteNodePool {
				exists = false
			}
		case resSuperseded:
		case resFailed:
			if op.Generation == p.want.Generation {
				fileOut(out)
				if removing {
					sp.Message = shrinkingNote
				}
				return flavorResult{seen: sp, making: false}, nil
			}
		default:
			if exists {
				sp.Status, sp.Nodes = string(np.Status), np.NodeCount
			}
			fileOut(out)
			if removing {
				sp.Message = shrinkingNote
			}
			return flavorResult{seen: sp, making: out.res == resWait && op.Step == stepCreateNodePool}, nil
		}
	}
	if !exists {
		a, err := p.try(nil, stepCreateNodePool, name, request{Cluster: ref, NodePool: &want}, true, func() {
			// Made at this generation and gone since: a ghost.
			p.r.metrics.SweepDecision("nodePoolGhost")
			p.r.log.Warn().Str("pool", p.want.Pool).Str("nodePool", name).Msg("substrate: a node pool made before is gone at the provider; making it again")
		})
		switch {
		case err != nil:
			return flavorResult{seen: sp, making: true}, err
		case a.failed:
			fileOut(a.out)
			return flavorResult{seen: sp, making: false}, nil
		case a.over > 0:
			p.problem(ReasonNodePoolKeepsDisappearing, fmt.Sprintf("%s: node pool %s was made %d times and keeps disappearing at the provider; see the provider's console", label, name, a.over))
			return flavorResult{seen: sp, making: false}, nil
		}
		out := a.out
		if out.res != resDone {
			fileOut(out)
			return flavorResult{seen: sp, making: out.res == resWait}, nil
		}
		if out.obs.Value.pool == nil {
			return flavorResult{seen: sp, making: true}, nil
		}
		np = *out.obs.Value.pool
	}
	sp.Status, sp.Nodes = string(np.Status), np.NodeCount
	now := p.r.clock.Now()
	switch np.Status {
	case providers.NodePoolProvisioning, providers.NodePoolUpdating:
		p.wait(ReasonNodePoolProvisioning, fmt.Sprintf("%s: node pool %s is %s", label, name, np.Status), now.Add(p.r.opts.Poll))
		return flavorResult{seen: sp, making: np.Status == providers.NodePoolProvisioning}, nil
	case providers.NodePoolDeleting:
		p.wait(ReasonNodePoolDeletedElsewhere, fmt.Sprintf("%s: node pool %s is being deleted at the provider (not by fleet-agent); it is made again once it is gone", label, name), now.Add(p.r.opts.Poll))
		return flavorResult{seen: sp, making: true}, nil
	case providers.NodePoolError:
		sp.Message = cmpOr(np.Message, "in error at the provider")
		p.problem(ReasonNodePoolError, fmt.Sprintf("%s: node pool %s is in error at the provider: %s; see the provider's console", label, name, sp.Message))
		return flavorResult{seen: sp, making: false}, nil
	}
	var (
		step string
		req  request
	)
	switch {
	case !shapeMatches(np.Shape, want.Shape) || !labelsHold(np.Labels, want.Labels):
		upd := want
		upd.Size = sizeFor(np, want.Size)
		step, req = stepUpdateNodePool, request{Cluster: ref, NodePool: &upd}
	case !sizeMatches(np.Size, want.Size):
		size := sizeFor(np, want.Size)
		shrinking := shrinks(np.Size, size)
		_, drained := p.remover()
		drained = drained && shrinking
		// A drain begun inside a window is finished after it closes.
		if shrinking && !(drained && p.shrinkBegun(name)) && p.outsideWindow(fmt.Sprintf("%s: node pool %s from %d to %d nodes", label, name, np.NodeCount, size.NodeCount)) {
			return flavorResult{seen: sp, making: false}, nil
		}
		step, req = stepResizeNodePool, request{Cluster: ref, Name: name, Size: &size}
		if drained {
			// The removal is journaled only once the chosen Nodes are
			// empty: an operation in the journal means they were drained.
			ids, ok, err := p.drainShrink(ref, f, np, size, label)
			if err != nil {
				return flavorResult{seen: sp, making: false}, err
			}
			if !ok {
				sp.Message = shrinkingNote
				return flavorResult{seen: sp, making: false}, nil
			}
			step, req = stepRemoveNodes, request{Cluster: ref, Name: name, Size: &size, ProviderIDs: ids}
		} else if done, err := p.letGoOfShrink(ref, name); err != nil {
			return flavorResult{seen: sp, making: false}, err
		} else if !done {
			sp.Message = shrinkingNote
		}
	default:
		done, err := p.letGoOfShrink(ref, name)
		if err != nil {
			return flavorResult{seen: sp, making: false}, err
		}
		if !done {
			sp.Message = shrinkingNote
		}
		return flavorResult{seen: sp, making: false}, nil
	}
	a, err := p.try(nil, step, name, req, true, nil)
	switch {
	case err != nil:
		return flavorResult{seen: sp, making: true}, err
	case a.failed:
		fileOut(a.out)
		if step == stepRemoveNodes {
			sp.Message = shrinkingNote
		}
		return flavorResult{seen: sp, making: false}, nil
	case a.over > 0:
		p.problem(ReasonNodePoolKeepsDiffering, fmt.Sprintf("%s: node pool %s still differs from the document after %d changes; the provider keeps another value (see its console)", label, name, a.over))
		return flavorResult{seen: sp, making: false}, nil
	}
	out := a.out
	if out.obs.Value.pool != nil {
		sp.Status, sp.Nodes = string(out.obs.Value.pool.Status), out.obs.Value.pool.NodeCount
	}
	if out.res != resDone {
		fileOut(out)
		if step == stepRemoveNodes {
			sp.Message = shrinkingNote
		}
	}
	return flavorResult{seen: sp, making: false}, nil
}

// deleteNodePool deletes one of our node pools; its result says whether it is gone.
func (p *step) deleteNodePool(ref providers.ClusterRef, prefix, name, why string) (removeResult, error) {
	object := prefix + name
	a, err := p.try(p.pending(object, stepDeleteNodePool), stepDeleteNodePool, object, request{Cluster: ref, Name: name}, false, nil)
	if err != nil {
		return removeResult{}, err
	}
	if a.over > 0 {
		p.problem(ReasonNodePoolKeepsComingBack, fmt.Sprintf("node pool %s was deleted %d times and keeps coming back at the provider (%s); fleet-agent stops deleting it: find what makes it again (the provider's console or audit log), then change the substrate in the document to try again",
			name, a.over, why))
		return removeResult{}, nil
	}
	out := a.out
	if out.res == resDone {
		p.r.log.Info().Str("pool", p.want.Pool).Str("nodePool", name).Str("why", why).Msg("substrate: node pool deleted")
		return removeResult{gone: true}, nil
	}
	p.take(out, why)
	return removeResult{}, nil
}
