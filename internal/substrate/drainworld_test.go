package substrate_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/providers/fake"
	"github.com/fleet-agent/fleet-agent/internal/substrate"
	"github.com/fleet-agent/fleet-agent/internal/substrate/crashtest"
	"github.com/fleet-agent/fleet-agent/internal/substrate/drain"
)

// drainWorld is the cluster of a drain scenario, as the campaign models
// it: the Nodes of each node pool the provider runs, each holding pods;
// the first Node of each pool runs a GPU job that holds its drain for a
// few passes. It is the cluster, not the agent: a crash and a restart of
// the agent leave it as it was. It is also the in-cluster half the agent
// is given (Apply reports its Nodes, Drain and Undrain act on them), and
// it watches the provider's node pool deletes (guarded), so that it can
// say what the agent did wrong:
//   - a node pool deleted while a Node of it still holds pods;
//   - more of a pool's Nodes unavailable at once than the document's
//     disruption budget allows (a cordoned Node still holding pods is
//     unavailable);
//   - at the end, a Node left cordoned in a node pool that stays.
type drainWorld struct {
	env *env
	// budget is the document's policy.disruptionBudget; hold is how many
	// drain passes a GPU job holds its Node.
	budget *float64
	hold   int

	mu     sync.Mutex
	pools  map[string][]*worldNode
	peak   map[string]int
	drains int
	wrong  []string
}

type worldNode struct {
	name     string
	cordoned bool
	pods     int
	// gpuHold is how many more drain passes its GPU job blocks it.
	gpuHold int
}

// podsPerNode is what a Node runs before it is drained.
const podsPerNode = 2

func newDrainWorld(budget *float64) *drainWorld {
	return &drainWorld{budget: budget, hold: 2, pools: map[string][]*worldNode{}, peak: map[string]int{}}
}

// sync makes the Nodes follow the provider: a running node pool has as
// many Nodes as it reports (new ones full), a pool gone has none. It is
// called with mu held.
func (w *drainWorld) sync() {
	present := map[string]bool{}
	for _, c := range w.env.fake.Snapshot().Clusters {
		if c.Labels[providers.LabelInstallation] != w.env.owner() {
			continue
		}
		for name, np := range c.NodePools {
			present[name] = true
			if np.Status != providers.NodePoolRunning {
				continue
			}
			nodes := w.pools[name]
			for i := len(nodes); i < np.NodeCount; i++ {
				n := &worldNode{name: fmt.Sprintf("%s-n%d", name, i), pods: podsPerNode}
				if i == 0 {
					n.gpuHold = w.hold
				}
				nodes = append(nodes, n)
			}
			w.pools[name] = nodes
		}
	}
	for name := range w.pools {
		if !present[name] {
			delete(w.pools, name)
		}
	}
}

// unavailable counts a pool's Nodes cordoned and not yet empty.
func unavailable(nodes []*worldNode) int {
	n := 0
	for _, nd := range nodes {
		if nd.cordoned && nd.pods > 0 {
			n++
		}
	}
	return n
}

// measure records a pool's unavailable Nodes against the document's
// budget. It is called with mu held.
func (w *drainWorld) measure(pool string) {
	nodes := w.pools[pool]
	u := unavailable(nodes)
	w.peak[pool] = max(w.peak[pool], u)
	if allowed := drain.Budget(w.budget, len(nodes)); u > allowed {
		w.wrong = append(w.wrong, fmt.Sprintf("node pool %s: %d of %d Nodes unavailable at once, the budget allows %d", pool, u, len(nodes), allowed))
	}
}

func (w *drainWorld) Apply(context.Context, substrate.Target) (substrate.Nodes, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sync()
	n := 0
	for _, nodes := range w.pools {
		n += len(nodes)
	}
	return substrate.Nodes{Listed: n, Joined: n}, nil
}

func (w *drainWorld) Teardown(context.Context, substrate.Target) error { return nil }

// Drain is one pass of the drain room over the model: a GPU job holds
// its Node while it runs; elsewhere each cordoned Node loses one pod a
// pass; more Nodes are cordoned while the budget the agent asked with
// allows.
func (w *drainWorld) Drain(_ context.Context, _ substrate.Target, ask substrate.DrainAsk) (substrate.DrainReport, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sync()
	w.drains++
	if (ask.Budget == nil) != (w.budget == nil) || (ask.Budget != nil && *ask.Budget != *w.budget) {
		w.wrong = append(w.wrong, fmt.Sprintf("node pool %s drained with budget %v, the document says %v", ask.NodePool, ask.Budget, w.budget))
	}
	nodes := w.pools[ask.NodePool]
	var blockers []string
	for _, n := range nodes {
		switch {
		case !n.cordoned || n.pods == 0:
		case n.gpuHold > 0:
			n.gpuHold--
			blockers = append(blockers, "pod ml/train on "+n.name+" (GPU job)")
		default:
			n.pods--
		}
	}
	for _, n := range nodes {
		if !n.cordoned && unavailable(nodes) < drain.Budget(ask.Budget, len(nodes)) {
			n.cordoned = true
		}
	}
	w.measure(ask.NodePool)
	empty := 0
	for _, n := range nodes {
		if n.cordoned && n.pods == 0 {
			empty++
		}
	}
	rep := substrate.DrainReport{Finished: empty == len(nodes), Message: fmt.Sprintf("%d of %d nodes empty", empty, len(nodes))}
	if len(blockers) > 0 {
		rep.Blocked, rep.Message = true, "drain blocked by "+strings.Join(blockers, ", ")
	}
	return rep, nil
}

// Undrain uncordons a pool's Nodes; their pods come back.
func (w *drainWorld) Undrain(_ context.Context, _ substrate.Target, nodePool string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sync()
	for _, n := range w.pools[nodePool] {
		n.cordoned, n.pods = false, podsPerNode
	}
	return nil
}

// deleting is the provider told to delete a node pool: its Nodes must be
// empty by then.
func (w *drainWorld) deleting(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sync()
	for _, n := range w.pools[name] {
		if n.pods > 0 {
			w.wrong = append(w.wrong, fmt.Sprintf("node pool %s deleted while Node %s still holds %d pods (its drain had not finished)", name, n.name, n.pods))
		}
	}
}

// verdict is what went wrong in the trial ("" for nothing): the
// invariants watched all along, and no Node left cordoned in a node pool
// that stays.
func (w *drainWorld) verdict() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sync()
	wrong := slices.Clone(w.wrong)
	for name, nodes := range w.pools {
		for _, n := range nodes {
			if n.cordoned {
				wrong = append(wrong, fmt.Sprintf("node pool %s stays, and its Node %s is left cordoned", name, n.name))
			}
		}
	}
	sort.Strings(wrong)
	return strings.Join(slices.Compact(wrong), "; ")
}

// peakOf is the most Nodes of any pool unavailable at once, and the drain
// passes made.
func (w *drainWorld) peakOf() (int, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := 0
	for _, n := range w.peak {
		p = max(p, n)
	}
	return p, w.drains
}

// guarded is the fake provider as the drain scenarios' agent sees it: its
// node pool deletes are shown to the cluster first.
type guarded struct {
	*fake.Fake
	w *drainWorld
}

func (g guarded) DeleteNodePool(ctx context.Context, acct providers.Account, cluster providers.ClusterRef, name string) (providers.NodePool, error) {
	g.w.deleting(name)
	return g.Fake.DeleteNodePool(ctx, acct, cluster, name)
}

// campaignEnv is a campaign's env for a scenario: crashed by c, with the
// drain scenarios' cluster or the drained shrink's in-cluster half (nil
// for the others; each outlives the reconciler's restarts). one runs the pools'
// passes one at a time, so that a crash point drawn from a clean run lands
// on the same place.
func campaignEnv(t testing.TB, s crashtest.Scenario, c *crasher, one bool) (*env, *drainWorld, *shrinker) {
	var (
		w  *drainWorld
		sh *shrinker
	)
	switch {
	case s.Drains:
		w = newDrainWorld(scenarioBudget(s))
	case s.Drained():
		sh = newShrinker()
	}
	e := newEnv(t, func(o *substrate.Options) {
		substrate.SetCrashAt(o, c.at)
		if one {
			o.Concurrency = 1
		}
		switch {
		case w != nil:
			o.InCluster = w
			o.Providers = map[string]substrate.Provider{"fake": guarded{Fake: o.Providers["fake"].(*fake.Fake), w: w}}
		case sh != nil:
			o.InCluster = sh
		}
	})
	if w != nil {
		w.env = e
	}
	if sh != nil {
		sh.env = e
	}
	return e, w, sh
}

// scenarioBudget is the disruption budget of a drain scenario's pools.
func scenarioBudget(s crashtest.Scenario) *float64 {
	for _, st := range append(slices.Clone(s.Setup), s.Steps...) {
		for _, p := range st.Pools {
			if p.Budget != nil {
				return p.Budget
			}
		}
	}
	return nil
}

// drainPoints are the crash points around the drain calls the campaign
// must crash at: each drain pass's call and the undrain of a drain taken
// back, for a removed flavor and for a blue/green replacement.
var drainPoints = []string{
	"drainRemoved " + string(substrate.PointBeforeDrain), "drainRemoved " + string(substrate.PointAfterDrain),
	"drainRemoved " + string(substrate.PointBeforeUndrain), "drainRemoved " + string(substrate.PointAfterUndrain),
	"drainReplaced " + string(substrate.PointBeforeDrain), "drainReplaced " + string(substrate.PointAfterDrain),
	"drainReplaced " + string(substrate.PointBeforeUndrain), "drainReplaced " + string(substrate.PointAfterUndrain),
}

// checkTrial is crashtest's check of a trial's end, with the in-cluster
// half when the scenario has one.
func checkTrial(e *env, w *drainWorld, last crashtest.Step) crashtest.Findings {
	if w != nil {
		return crashtest.CheckInCluster(e.fake.Snapshot(), last, e.records(), testInstallation)
	}
	return crashtest.Check(e.fake.Snapshot(), last, e.records(), testInstallation)
}

// PoolNodes reports a node pool's Nodes: every Node the model holds is
// Ready and joined.
func (w *drainWorld) PoolNodes(_ context.Context, _ substrate.Target, nodePool string) (substrate.PoolNodes, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sync()
	n := len(w.pools[nodePool])
	return substrate.PoolNodes{Listed: n, Ready: n, Joined: n, JoinKnown: true}, nil
}
