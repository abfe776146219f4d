package substrate

// A step of the node pools step, for a flavor that asks for blue/green
// replacement (replace: "blueGreen"): a change its node pool cannot take
// in place makes a new node pool beside the old one, under the next
// generation's name; once the new pool's Nodes are up, the old pool is
// drained through the drain room, then deleted, inside a maintenance
// window.
//
// Nothing about a replacement is kept outside the provider and the
// journal: the generations of a flavor are read from the node pools'
// names (fleet.GenerationName), and the new pool's create is journaled
// under its name before it is sent. So a restart at any point finds the
// same new pool (never a twin), and the old one is deleted only once the
// new one runs.
//
// The replacement, per flavor, is this table (the first row that holds
// decides; each pass moves it at most one row):
//
//	new pool        old pools      what the step does               reason
//	missing         any            create it (journaled)            Replacing (making)
//	provisioning    any            wait                             Replacing (making)
//	running, short  any            wait for its Nodes               Replacing (joining)
//	running, full   outside window wait for the window              OutsideWindow
//	running, full   Nodes in use   drain them (drain room)          Draining / DrainBlocked
//	running, full   empty          delete them (journaled)          Replacing (deleting)
//	running, full   none           converged: one pool, new shape   NodePoolsReady

import (
	"fmt"
	"slices"
	"strings"

	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

// generationOf is the generation of flavor f a node pool name is (ok
// false: none of f's).
func generationOf(o providers.Owner, f string, name string) (int, bool) {
	prefix := o.NodePoolName("")
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return 0, false
	}
	return fleet.GenerationOf(f, rest)
}

// generationFlavor finds the blue/green flavor a node pool name is a
// generation of, for the sweep.
func generationFlavor(o providers.Owner, flavors []fleet.SubstrateFlavor, name string) (fleet.SubstrateFlavor, bool) {
	for _, f := range flavors {
		if f.Replace != fleet.ReplaceBlueGreen {
			continue
		}
		if _, ok := generationOf(o, f.Name, name); ok {
			return f, true
		}
	}
	return fleet.SubstrateFlavor{}, false
}

// blueGreen converges a blue/green flavor: the newest generation of the
// wanted shape is kept (made when there is none), the others are
// replaced.
func (p *step) blueGreen(ref providers.ClusterRef, f fleet.SubstrateFlavor, listed map[string]providers.NodePool) (flavorResult, error) {
	o := p.owner()
	want := nodePoolSpec(o, f)
	label := "flavor " + f.Name
	gens := map[int]string{}
	for name, np := range listed {
		if gen, ok := generationOf(o, f.Name, name); ok && p.ours(np) {
			gens[gen] = name
		}
	}
	for _, op := range p.ops {
		if op.State.Terminal() || !slices.Contains(nodePoolSteps, op.Step) {
			continue
		}
		if gen, ok := generationOf(o, f.Name, op.Object); ok {
			gens[gen] = op.Object
		}
	}
	keep, newest := 0, 0
	for gen, name := range gens {
		newest = max(newest, gen)
		np, isListed := listed[name]
		// A pool on its way out is never kept: its delete is finished.
		leaving := p.pending(name, stepDeleteNodePool) != nil || np.Status == providers.NodePoolDeleting
		if !leaving && ((isListed && shapeMatches(np.Shape, want.Shape)) || p.madeNow(name)) {
			keep = max(keep, gen)
		}
	}
	if keep == 0 {
		// The first pool of the flavor, or a shape no generation has:
		// the next generation. Its name is fixed from here on by the
		// journal's create.
		keep = newest + 1
	}
	want.Name = o.NodePoolName(fleet.GenerationName(f.Name, keep))
	// What the new pool's own steps wait for (its create in flight) is
	// a step of the replacement: the condition says Replacing.
	before := p.waitReason
	res, err := p.flavorPool(ref, f, want, listed)
	if err != nil {
		return res, err
	}
	var olds []string
	for gen, name := range gens {
		if gen != keep {
			olds = append(olds, name)
		}
	}
	// The pool kept may be one a previous pass began draining (the shape
	// went back before its delete): its Nodes take pods again.
	for _, sp := range p.seen.NodePools {
		if sp.Name != want.Name || !strings.HasPrefix(sp.Message, "replaced by ") || !strings.HasSuffix(sp.Message, drainingTail) {
			continue
		}
		done, err := p.undrain(ref, want.Name, "drainReplaced")
		if err != nil {
			return res, err
		}
		if !done {
			// Kept as it was, so that the next pass tries again.
			res.seen.Message = sp.Message
		}
	}
	if len(olds) == 0 {
		return res, nil
	}
	slices.Sort(olds)
	oldNodes := 0
	for _, name := range olds {
		oldNodes += listed[name].NodeCount
	}
	what := fmt.Sprintf("%s: replacing node pool %s (%d nodes) with %s", label, strings.Join(olds, ", "), oldNodes, want.Name)
	running := res.seen.Status == string(providers.NodePoolRunning)
	joined := running && res.seen.Nodes >= want.NodeCount
	progress := fmt.Sprintf("%d of %d nodes of %s up", res.seen.Nodes, want.NodeCount, want.Name)
	if joined {
		if joined, progress, err = p.nodesJoined(ref, want.Name, want.NodeCount); err != nil {
			return res, err
		}
	}
	if !joined {
		// The old pools keep serving until the new one is up.
		for _, name := range olds {
			res.replaced = append(res.replaced, p.oldSeen(f, name, listed, "kept until "+want.Name+" runs"))
		}
		step := "making"
		if running {
			step = "joining"
		}
		if before == "" {
			p.waitReason = ReasonReplacing
		}
		p.wait(ReasonReplacing, fmt.Sprintf("%s: step 1 of 2 (%s): %s", what, step, progress), p.r.clock.Now().Add(p.r.opts.Poll))
		return res, nil
	}
	for _, name := range olds {
		sp, err := p.retire(ref, f, name, want.Name, listed, what)
		if err != nil {
			return res, err
		}
		if sp != nil {
			res.replaced = append(res.replaced, *sp)
		}
	}
	return res, nil
}

// nodesJoined is the last gate of the replacement's first step, once the
// provider reports the new node pool running with all its nodes: with an
// in-cluster half that reads Nodes (PoolNodeReader), its Nodes must also
// be Ready in the cluster and, where the half keeps the joins, joined to
// the pool. It says how many of how many are.
func (p *step) nodesJoined(ref providers.ClusterRef, name string, want int) (bool, string, error) {
	r, ok := p.r.opts.InCluster.(PoolNodeReader)
	if !ok {
		return true, "", nil
	}
	if err := p.alive(); err != nil {
		return false, "", err
	}
	n, err := r.PoolNodes(p.ctx, p.target(ref), name)
	if err != nil {
		return false, fmt.Sprintf("the provider runs %s; its Nodes could not be read in the cluster: %v", name, err), nil
	}
	count, what := n.Ready, "Ready"
	if n.JoinKnown {
		count, what = min(n.Ready, n.Joined), "Ready and joined"
	}
	return count >= want, fmt.Sprintf("%d of %d Nodes of %s %s in the cluster", count, want, name, what), nil
}

// retire is the replacement's second step for one old node pool: what it
// had in flight is finished or given up, then it is deleted inside a
// maintenance window. It returns the pool as seen while it is not gone.
func (p *step) retire(ref providers.ClusterRef, f fleet.SubstrateFlavor, name, by string, listed map[string]providers.NodePool, what string) (*state.SeenNodePool, error) {
	// A resize or change it had in flight (from before the document
	// changed its shape) is followed to its end or abandoned: its
	// delete then finds the pool, never an operation left open.
	for _, key := range p.keys() {
		op := p.ops[key]
		if op.Object != name || op.State.Terminal() || isDelete(op.Step) {
			continue
		}
		out, err := p.drive(op, true)
		if err != nil {
			return nil, err
		}
		if out.res == resWait {
			p.take(out, what)
			sp := p.oldSeen(f, name, listed, "finishing what it had in flight before its delete")
			return &sp, nil
		}
	}
	np, isListed := listed[name]
	op := p.pending(name, stepDeleteNodePool)
	if !isListed && op == nil {
		return nil, nil
	}
	// A drain begun inside a window is finished after it closes.
	draining := slices.ContainsFunc(p.seen.NodePools, func(sp state.SeenNodePool) bool {
		return sp.Name == name && sp.Message == replacedDraining(by)
	})
	if (op == nil || op.State == state.Journaled) && !draining && p.outsideWindow(fmt.Sprintf("%s: step 2 of 2, the drain and delete of %s (%d nodes)", what, name, np.NodeCount)) {
		sp := p.oldSeen(f, name, listed, "replaced by "+by+"; its drain and delete wait for a maintenance window")
		return &sp, nil
	}
	// The delete is journaled only once the drain finished (as a removed
	// flavor's): an operation in the journal means its Nodes were emptied.
	if op == nil {
		done, err := p.drainedAs(ref, np, drainCase{point: "drainReplaced", label: what + ": step 2 of 2, draining " + name,
			note: replacedDraining(by), settings: p.want.Spec.DrainOf(f.Name)})
		if err != nil {
			return nil, err
		}
		if !done {
			sp := p.oldSeen(f, name, listed, replacedDraining(by))
			return &sp, nil
		}
	}
	before := p.waitReason
	del, err := p.deleteNodePool(ref, "", name, "replaced by "+by)
	if err != nil || del.gone {
		return nil, err
	}
	if before == "" {
		p.waitReason = ReasonReplacing
	}
	p.wait(ReasonReplacing, fmt.Sprintf("%s: step 2 of 2 (deleting %s, %d nodes)", what, name, np.NodeCount), p.r.clock.Now().Add(p.r.opts.Poll))
	sp := p.oldSeen(f, name, listed, "replaced by "+by+"; deleting")
	sp.Status = string(providers.NodePoolDeleting)
	return &sp, nil
}

// replacedDraining is an old node pool's seen message while its Nodes are
// emptied; the next pass reads it back to know its drain was begun. It is
// not drains.go's note: a replaced pool is wanted, and a wanted pool
// with that note is let go.
func replacedDraining(by string) string {
	return "replaced by " + by + drainingTail
}

const drainingTail = "; draining its Nodes before the delete"

// oldSeen is an old node pool of a replacement as the record shows it.
func (p *step) oldSeen(f fleet.SubstrateFlavor, name string, listed map[string]providers.NodePool, msg string) state.SeenNodePool {
	sp := state.SeenNodePool{Flavor: f.Name, Name: name, Status: "missing", Message: msg}
	if np, ok := listed[name]; ok {
		sp.Status, sp.Nodes = string(np.Status), np.NodeCount
	}
	return sp
}

// madeNow reports whether a node pool's create was journaled at this
// generation: it is the pool this generation asked for, whatever shape a
// listing reports, so that a provider reporting a shape another way is
// an error of that pool and never a generation made after another.
func (p *pass) madeNow(name string) bool {
	for _, op := range p.ops {
		if op.Step == stepCreateNodePool && op.Object == name && op.Generation == p.want.Generation {
			return true
		}
	}
	return false
}
