// Package crashtest is the substrate's crash campaign without its runner:
// the scenarios (documents applied one after the other), the fake
// provider's configuration, and the check of the provider's ground truth
// (the fake's own state file) against the last document and the state
// file's records. The in-process campaign (internal/substrate's tests,
// crashing at test hooks between journal steps) and a campaign that SIGKILLs
// a `fleet-agent run` child share it: both end a trial with Check.
package crashtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/providers/fake"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

// Tenant is the tenant of every document here.
const Tenant = "root"

// Account is the provider account every pool's substrate uses.
const Account = "k8s"

// Adoptable is the adopt id of the cluster the fake holds for adoption; its
// owner's node pool is OwnerPool.
const (
	Adoptable = "fake-east/theirs"
	OwnerPool = "default"
)

// Flavor is one flavor of a pool's substrate.
type Flavor struct {
	Name        string
	MachineType string
	Nodes       int
	Spot        bool
	// Autoscaling is {min, max}, nil for a fixed size.
	Autoscaling *[2]int
	// Replace: the flavor asks for blue/green replacement; its node pool
	// may be any generation of it, and exactly one.
	Replace bool
}

// Pool is one pool of a document. A pool with no flavors has no substrate;
// Left is a pool the document leaves out (with prune: archived).
type Pool struct {
	Name    string
	Adopt   bool
	Flavors []Flavor
	Left    bool
	// Version is the Kubernetes minor of a created cluster ("": the
	// provider's default, not checked).
	Version string
	// Budget is the pool's policy.disruptionBudget (nil: none written).
	Budget *float64
}

// ID is the pool's id.
func (p Pool) ID() string { return inventory.ID(Tenant, inventory.Pool, p.Name) }

// Step is one document to apply.
type Step struct {
	Pools []Pool
	Prune bool
	// Rush: the next step is applied after one pass of this one, while
	// what it started (a create) is still in flight at the provider.
	Rush bool
	// Passes, when set, is Rush with that many passes: the next step is
	// applied while this one is part way (a drain under way). A runner
	// that does not know it converges the step.
	Passes int
	// Tamper names a Spot flavor whose node pools lose their capacity label
	// at the provider (a hand edit) before the step is applied: the step
	// puts it back in place (an update of the node pool).
	Tamper string
	// Faults are armed at the fake before the step is applied: what the
	// provider does to this step's calls (FaultScenarios).
	Faults []fake.Fault
	// Drained: the agent runs with an in-cluster half that drains (a
	// scale-down then removes the Nodes it chose); its substrates read
	// ready rather than waiting for the node daemon.
	Drained bool
}

// Scenario is a story: Setup is applied and converged without a crash, then
// each of Steps is applied and converged while the agent is crashed.
type Scenario struct {
	Name  string
	Setup []Step
	Steps []Step
	// Drains: the agent has an in-cluster half that drains, over a
	// cluster whose Nodes hold pods (the runner's model of it), so that
	// node pools are deleted only once drained.
	Drains bool
}

// Drained reports whether the scenario's agent runs with an in-cluster
// half that drains (any of its steps says Drained).
func (s Scenario) Drained() bool {
	for _, st := range append(slices.Clone(s.Setup), s.Steps...) {
		if st.Drained {
			return true
		}
	}
	return false
}

// drained is a step of an agent with an in-cluster half that drains.
func drained(pools ...Pool) Step { return Step{Pools: pools, Drained: true} }

// shrunk is the gpu pool with its l4 flavor at n nodes.
func shrunk(n int) Pool { return Pool{Name: "gpu", Flavors: []Flavor{h100, with(l4, n)}} }

var (
	h100 = Flavor{Name: "h100", MachineType: "fake-h100x8", Nodes: 1}
	l4   = Flavor{Name: "l4", MachineType: "fake-l4x1", Nodes: 2, Spot: true}
	cpu  = Flavor{Name: "cpu", MachineType: "fake-cpu-4", Nodes: 1, Autoscaling: &[2]int{1, 3}}
)

func with(f Flavor, nodes int) Flavor { f.Nodes = nodes; return f }

// withFaults is st with faults armed before it.
func withFaults(st Step, faults ...fake.Fault) Step { st.Faults = faults; return st }

// versioned is the gpu pool of two flavors on a cluster of version v.
func versioned(v string) []Pool {
	return []Pool{{Name: "gpu", Version: v, Flavors: []Flavor{h100, l4}}}
}

// Scenarios are the campaign's stories: create, resize, add a flavor,
// remove a flavor, teardown, adopt (and an adopted teardown), a node
// pool's label edited by hand, and the document changed while its create
// is in flight.
func Scenarios() []Scenario {
	created := []Pool{{Name: "gpu", Flavors: []Flavor{h100, l4}}}
	return []Scenario{
		{Name: "create", Steps: []Step{{Pools: []Pool{{Name: "gpu", Flavors: []Flavor{h100, l4}}, {Name: "inf", Flavors: []Flavor{cpu}}}}}},
		{Name: "resize", Setup: []Step{{Pools: created}},
			Steps: []Step{{Pools: []Pool{{Name: "gpu", Flavors: []Flavor{with(h100, 3), with(l4, 1)}}}}}},
		{Name: "addFlavor", Setup: []Step{{Pools: created}},
			Steps: []Step{{Pools: []Pool{{Name: "gpu", Flavors: []Flavor{h100, l4, cpu}}}}}},
		{Name: "removeFlavor", Setup: []Step{{Pools: created}},
			Steps: []Step{{Pools: []Pool{{Name: "gpu", Flavors: []Flavor{h100}}}, Prune: true}}},
		{Name: "teardown", Setup: []Step{{Pools: created}},
			Steps: []Step{{Pools: []Pool{{Name: "gpu", Left: true, Flavors: created[0].Flavors}}, Prune: true}}},
		{Name: "adopt", Steps: []Step{
			{Pools: []Pool{{Name: "own", Adopt: true, Flavors: []Flavor{h100, cpu}}}},
			{Pools: []Pool{{Name: "own", Adopt: true, Left: true, Flavors: []Flavor{h100, cpu}}}, Prune: true},
		}},
		{Name: "relabel", Setup: []Step{{Pools: created}},
			Steps: []Step{{Pools: []Pool{{Name: "gpu", Flavors: []Flavor{with(h100, 2), l4}}}, Tamper: l4.Name}}},
		{Name: "changeWhileCreating", Steps: []Step{
			{Pools: created, Rush: true},
			{Pools: []Pool{{Name: "gpu", Flavors: []Flavor{with(h100, 2), cpu}}}, Prune: true},
		}},
		// A cluster of two node pools upgraded one minor in place (the
		// control plane, then each pool), and one upgraded two minors: a
		// path of two hops.
		{Name: "upgrade", Setup: []Step{{Pools: versioned("1.33")}},
			Steps: []Step{{Pools: versioned("1.34")}}},
		{Name: "createThenResize", Steps: []Step{
			{Pools: created},
			{Pools: []Pool{{Name: "gpu", Flavors: []Flavor{with(h100, 2), cpu}}}, Prune: true},
		}},
		// A blue/green flavor's machine type changes twice (generations 2
		// and 3), the second time with a resize; the other flavor resizes
		// in place meanwhile.
		// A drained scale-down: the Nodes chosen are drained, then
		// removed in one journaled removeNodes.
		{Name: "shrinkDrained", Setup: []Step{drained(shrunk(3))}, Steps: []Step{drained(shrunk(1))}},
		{Name: "replaceBlueGreen", Setup: []Step{{Pools: []Pool{{Name: "gpu", Flavors: []Flavor{bg, l4}}}}},
			Steps: []Step{
				{Pools: []Pool{{Name: "gpu", Flavors: []Flavor{shaped(bg, "fake-cpu-8"), with(l4, 1)}}}},
				{Pools: []Pool{{Name: "gpu", Flavors: []Flavor{with(shaped(bg, "fake-h100x8"), 2), with(l4, 1)}}}},
			}},
	}
}

// DrainScenarios are the stories whose node pools are drained before they
// go (Scenario.Drains), under a disruption budget of one node of two: a
// removed flavor's node pool, the old node pool of a blue/green
// replacement, and a drain taken back (the flavor put back while its
// Nodes were being emptied).
func DrainScenarios() []Scenario {
	half := 0.5
	budgeted := func(pools ...Pool) []Pool {
		pools = slices.Clone(pools)
		for i := range pools {
			pools[i].Budget = &half
		}
		return pools
	}
	created := budgeted(Pool{Name: "gpu", Flavors: []Flavor{h100, l4}})
	return []Scenario{
		{Name: "drainRemoved", Drains: true, Setup: []Step{{Pools: created}},
			Steps: []Step{{Pools: budgeted(Pool{Name: "gpu", Flavors: []Flavor{h100}}), Prune: true}}},
		{Name: "drainReplaced", Drains: true, Setup: []Step{{Pools: budgeted(Pool{Name: "gpu", Flavors: []Flavor{with(bg, 2), l4}})}},
			Steps: []Step{{Pools: budgeted(Pool{Name: "gpu", Flavors: []Flavor{with(shaped(bg, "fake-cpu-8"), 2), l4}})}}},
		// The shape of a blue/green flavor goes back while the old pool's
		// drain is under way: the old pool is kept and let go, the new
		// one drained and deleted.
		{Name: "drainReplacedTakenBack", Drains: true, Setup: []Step{{Pools: budgeted(Pool{Name: "gpu", Flavors: []Flavor{with(bg, 2), l4}})}},
			Steps: []Step{
				{Pools: budgeted(Pool{Name: "gpu", Flavors: []Flavor{with(shaped(bg, "fake-cpu-8"), 2), l4}}), Passes: 6},
				{Pools: budgeted(Pool{Name: "gpu", Flavors: []Flavor{with(bg, 2), l4}})},
			}},
		{Name: "drainTakenBack", Drains: true, Setup: []Step{{Pools: created}},
			Steps: []Step{
				{Pools: budgeted(Pool{Name: "gpu", Flavors: []Flavor{h100}}), Prune: true, Rush: true},
				{Pools: created},
			}},
	}
}

// bg is a blue/green flavor.
var bg = Flavor{Name: "h100", MachineType: "fake-h100x8", Nodes: 1, Replace: true}

func shaped(f Flavor, machineType string) Flavor { f.MachineType = machineType; return f }

// FaultScenarios are the stories whose steps meet faults of their own, so
// that every transition of the journal's state machine a step may make is
// reached (and crashed in): calls lost before they reached the provider,
// read-backs that fail, objects dropped or removed by another hand, work
// that fails at the provider, refusals for good followed by a fixed
// document, and operations abandoned because the document moved on. They
// run without the campaign's fault variants, whose faults would take
// theirs' place. Each has one pool: two pools' passes run in either order,
// and a crash point drawn from a clean run must land on the same
// transition in every run.
func FaultScenarios() []Scenario {
	created := []Pool{{Name: "gpu", Flavors: []Flavor{h100, l4}}}
	gone := func(pools ...Pool) Step {
		pools = slices.Clone(pools) // not the caller's: created... shares it
		for i := range pools {
			pools[i].Left = true
		}
		return Step{Pools: pools, Prune: true}
	}
	// bare is the pool without its substrate: torn down, and the pool kept
	// (an archived pool is never taken back; a substrate is).
	bare := []Pool{{Name: "gpu"}}
	cpu2 := Flavor{Name: "cpu2", MachineType: "fake-cpu-8", Nodes: 1}
	maybe := func(m string) fake.Fault {
		return fake.Fault{Method: m, Class: providers.Unavailable, SideEffect: providers.Maybe}
	}
	lost := func(m string) fake.Fault { f := maybe(m); f.Lost = true; return f }
	throttled := func(m string) fake.Fault {
		return fake.Fault{Method: m, Class: providers.Throttled, SideEffect: providers.None, RetryAfter: 20 * time.Second}
	}
	invalid := func(m string) fake.Fault {
		return fake.Fault{Method: m, Class: providers.Invalid, SideEffect: providers.None, Message: "injected: refused for good"}
	}
	// readBackFails fails the second GetCluster: the read-back after the
	// call, not the read before it.
	readBackFails := fake.Fault{Method: "GetCluster", After: 1, Class: providers.Unavailable, SideEffect: providers.None}
	up := func(v string, faults ...fake.Fault) Step { return Step{Pools: versioned(v), Faults: faults} }
	// poolReadBackFails fails the second GetNodePool: a node pool hop's
	// read-back, not the read right before its call.
	poolReadBackFails := fake.Fault{Method: "GetNodePool", After: 1, Class: providers.Unavailable, SideEffect: providers.None}
	vanish := func(m string, drop bool) fake.Fault { return fake.Fault{Method: m, Vanish: true, Drop: drop} }
	fails := func(m string, drop bool) fake.Fault { return fake.Fault{Method: m, WorkFails: true, Drop: drop} }
	changed := func(pools ...string) []Pool {
		var out []Pool
		for _, n := range pools {
			out = append(out, Pool{Name: n, Flavors: []Flavor{with(h100, 2), l4}})
		}
		return out
	}
	return []Scenario{
		{Name: "lostCalls", Setup: []Step{{Pools: created}}, Steps: []Step{
			{Pools: changed("gpu"), Tamper: l4.Name, Faults: []fake.Fault{lost("ResizeNodePool"), lost("EnsureNodePool")}},
			{Pools: []Pool{{Name: "gpu", Left: true, Flavors: changed("gpu")[0].Flavors}}, Prune: true, Faults: []fake.Fault{lost("DeleteNodePool"), lost("DeleteCluster")}},
		}},
		{Name: "createLostVanish", Steps: []Step{
			{Pools: created, Faults: []fake.Fault{lost("EnsureCluster"), vanish("EnsureCluster", false), lost("EnsureNodePool"), vanish("EnsureNodePool", false)}},
		}},
		{Name: "readBackFailsVerifying", Steps: []Step{
			{Pools: created, Faults: []fake.Fault{maybe("EnsureCluster"), readBackFails}},
			{Pools: gone(created...).Pools, Prune: true, Faults: []fake.Fault{readBackFails}},
		}},
		{Name: "readBackFailsAccepted", Steps: []Step{
			{Pools: created, Faults: []fake.Fault{readBackFails}},
			{Pools: gone(created...).Pools, Prune: true, Faults: []fake.Fault{maybe("DeleteCluster"), readBackFails}},
		}},
		{Name: "changeVanish", Setup: []Step{{Pools: created}}, Steps: []Step{
			{Pools: changed("gpu"), Tamper: l4.Name, Faults: []fake.Fault{vanish("ResizeNodePool", false), vanish("EnsureNodePool", false)}},
		}},
		{Name: "changeLostVanish", Setup: []Step{{Pools: created}}, Steps: []Step{
			{Pools: changed("gpu"), Tamper: l4.Name, Faults: []fake.Fault{vanish("ResizeNodePool", true), vanish("EnsureNodePool", true)}},
		}},
		{Name: "createFails", Steps: []Step{
			{Pools: created, Faults: []fake.Fault{fails("EnsureCluster", false)}},
			gone(created...),
		}},
		{Name: "createLostFails", Steps: []Step{
			{Pools: created, Faults: []fake.Fault{fails("EnsureCluster", true)}},
			gone(created...),
		}},
		{Name: "nodePoolFails", Setup: []Step{{Pools: created}}, Steps: []Step{
			{Pools: []Pool{{Name: "gpu", Flavors: []Flavor{h100, l4, cpu, cpu2}}}, Faults: []fake.Fault{fails("EnsureNodePool", false), fails("EnsureNodePool", true)}},
			{Pools: created, Prune: true},
		}},
		{Name: "refusedThenFixed", Setup: []Step{{Pools: created}}, Steps: []Step{
			{Pools: []Pool{{Name: "gpu", Flavors: []Flavor{with(h100, 2), l4, cpu}}}, Tamper: l4.Name,
				Faults: []fake.Fault{invalid("ResizeNodePool"), func() fake.Fault { f := invalid("EnsureNodePool"); f.Count = 2; return f }()}},
			{Pools: []Pool{{Name: "gpu", Flavors: []Flavor{with(h100, 3), l4, with(cpu, 2)}}}},
		}},
		{Name: "createRefusedThenFixed", Steps: []Step{
			{Pools: created, Faults: []fake.Fault{invalid("EnsureCluster")}},
			{Pools: changed("gpu")},
		}},
		{Name: "abandoned", Setup: []Step{{Pools: created}}, Steps: []Step{
			{Pools: []Pool{{Name: "gpu", Flavors: []Flavor{with(h100, 2), l4, cpu}}}, Tamper: l4.Name, Rush: true,
				Faults: []fake.Fault{throttled("ResizeNodePool"), func() fake.Fault { f := throttled("EnsureNodePool"); f.Count = 2; return f }()}},
			{Pools: []Pool{{Name: "gpu", Flavors: []Flavor{with(h100, 3), l4}}}, Prune: true},
		}},
		{Name: "createAbandoned", Steps: []Step{
			{Pools: created, Rush: true, Faults: []fake.Fault{throttled("EnsureCluster")}},
			gone(created...),
		}},
		// Upgrade hops: two minors as two hops; a hop's call lost before
		// it reached the provider (read back, made again); refused for
		// good, then made again by a newer document; its read-back
		// failing while verifying and once accepted; its work failing at
		// the provider, answered or not (then torn down).
		{Name: "upgradeTwoHops", Setup: []Step{{Pools: versioned("1.33")}}, Steps: []Step{up("1.35")}},
		{Name: "upgradeLost", Setup: []Step{{Pools: versioned("1.33")}}, Steps: []Step{up("1.34", lost("EnsureCluster"), lost("EnsureNodePool"))}},
		{Name: "upgradeRefusedThenFixed", Setup: []Step{{Pools: versioned("1.33")}}, Steps: []Step{
			up("1.34", invalid("EnsureCluster")),
			{Pools: []Pool{{Name: "gpu", Version: "1.34", Flavors: []Flavor{with(h100, 2), l4}}}, Faults: []fake.Fault{invalid("EnsureNodePool")}},
			{Pools: []Pool{{Name: "gpu", Version: "1.34", Flavors: []Flavor{with(h100, 3), l4}}}},
		}},
		{Name: "upgradeReadBackFails", Setup: []Step{{Pools: versioned("1.33")}}, Steps: []Step{
			up("1.34", maybe("EnsureCluster"), readBackFails),
			up("1.35", readBackFails),
		}},
		{Name: "upgradePoolReadBackFails", Setup: []Step{{Pools: versioned("1.33")}}, Steps: []Step{
			up("1.34", maybe("EnsureNodePool"), poolReadBackFails),
			up("1.35", poolReadBackFails),
		}},
		{Name: "upgradeFails", Setup: []Step{{Pools: versioned("1.33")}}, Steps: []Step{up("1.34", fails("EnsureCluster", false)), gone(versioned("1.34")...)}},
		{Name: "upgradeLostFails", Setup: []Step{{Pools: versioned("1.33")}}, Steps: []Step{up("1.34", fails("EnsureCluster", true)), gone(versioned("1.34")...)}},
		{Name: "upgradePoolFails", Setup: []Step{{Pools: versioned("1.33")}}, Steps: []Step{up("1.34", fails("EnsureNodePool", false)), gone(versioned("1.34")...)}},
		{Name: "upgradePoolLostFails", Setup: []Step{{Pools: versioned("1.33")}}, Steps: []Step{up("1.34", fails("EnsureNodePool", true)), gone(versioned("1.34")...)}},
		// A drained scale-down's removal: lost before it reached the
		// provider (read back, sent again); its answer lost and its
		// read-back failing; refused for good, then a newer size; held by
		// a throttle and taken back before it was sent (its Nodes let
		// go of); its work failing at the provider (then torn down).
		{Name: "shrinkLost", Setup: []Step{drained(shrunk(3))}, Steps: []Step{withFaults(drained(shrunk(1)), lost("RemoveNodes"))}},
		{Name: "shrinkReadBackFails", Setup: []Step{drained(shrunk(3))}, Steps: []Step{
			withFaults(drained(shrunk(2)), maybe("RemoveNodes"), poolReadBackFails),
			withFaults(drained(shrunk(1)), poolReadBackFails),
		}},
		{Name: "shrinkVerifyingReadFails", Setup: []Step{drained(shrunk(3))}, Steps: []Step{
			withFaults(drained(shrunk(1)), maybe("RemoveNodes"), fake.Fault{Method: "GetNodePool", Count: 2, Class: providers.Unavailable, SideEffect: providers.None}),
		}},
		{Name: "shrinkLostVanish", Setup: []Step{drained(shrunk(3))}, Steps: []Step{withFaults(drained(shrunk(1)), vanish("RemoveNodes", true))}},
		{Name: "shrinkRefusedThenFixed", Setup: []Step{drained(shrunk(3))}, Steps: []Step{
			withFaults(drained(shrunk(2)), invalid("RemoveNodes")),
			drained(shrunk(1)),
		}},
		{Name: "shrinkTakenBack", Setup: []Step{drained(shrunk(3))}, Steps: []Step{
			func() Step { st := withFaults(drained(shrunk(1)), throttled("RemoveNodes")); st.Rush = true; return st }(),
			drained(shrunk(3)),
		}},
		{Name: "shrinkFails", Setup: []Step{drained(shrunk(3))}, Steps: []Step{
			withFaults(drained(shrunk(1)), fails("RemoveNodes", false)),
			func() Step { st := gone(shrunk(1)); st.Drained = true; return st }(),
		}},
		{Name: "teardownTakenBack", Setup: []Step{{Pools: created}}, Steps: []Step{
			{Pools: bare, Prune: true, Rush: true, Faults: []fake.Fault{throttled("DeleteCluster")}},
			{Pools: created},
		}},
		{Name: "teardownTakenBackLost", Setup: []Step{{Pools: created}}, Steps: []Step{
			{Pools: bare, Prune: true, Rush: true, Faults: []fake.Fault{lost("DeleteCluster"), readBackFails}},
			{Pools: created},
		}},
		{Name: "teardownVanish", Setup: []Step{{Pools: created}}, Steps: []Step{
			{Pools: gone(created...).Pools, Prune: true, Faults: []fake.Fault{
				func() fake.Fault { f := throttled("DeleteNodePool"); f.Vanish = true; return f }(),
				func() fake.Fault { f := throttled("DeleteCluster"); f.Vanish = true; return f }()}},
		}},
		{Name: "teardownFails", Setup: []Step{{Pools: created}}, Steps: []Step{
			{Pools: gone(created...).Pools, Prune: true, Faults: []fake.Fault{fails("DeleteNodePool", false), fails("DeleteCluster", false)}},
		}},
	}
}

// Document is the fleet.json of a step: one site, the fake account (its
// token a reference), and each pool not left out.
func Document(step Step) string {
	var b strings.Builder
	b.WriteString(`{"version":1,"sites":[{"name":"k8s","kind":"shared","region":"fake-east"}],`)
	fmt.Fprintf(&b, `"providerAccounts":[{"name":%q,"provider":"fake","config":{"token":"secret://fake-token","project":"fleet"}}],"pools":[`, Account)
	first := true
	for _, p := range step.Pools {
		if p.Left {
			continue
		}
		if !first {
			b.WriteString(",")
		}
		first = false
		policy := "{}"
		budget := ""
		if p.Budget != nil {
			budget = fmt.Sprintf(`"disruptionBudget":%g,`, *p.Budget)
		}
		if len(p.Flavors) > 0 {
			cluster := `{"create":{"location":"fake-east"}}`
			if p.Version != "" {
				cluster = fmt.Sprintf(`{"create":{"location":"fake-east","version":%q}}`, p.Version)
			}
			if p.Adopt {
				cluster = fmt.Sprintf(`{"adopt":%q}`, Adoptable)
			}
			var fl []string
			for _, f := range p.Flavors {
				s := fmt.Sprintf(`{"name":%q,"machineType":%q,"nodes":%d`, f.Name, f.MachineType, f.Nodes)
				if f.Spot {
					s += `,"spot":true`
				}
				if a := f.Autoscaling; a != nil {
					s += fmt.Sprintf(`,"autoscaling":{"minNodes":%d,"maxNodes":%d}`, a[0], a[1])
				}
				if f.Replace {
					s += `,"replace":"blueGreen"`
				}
				fl = append(fl, s+"}")
			}
			policy = fmt.Sprintf(`{%s"substrate":{"kind":"kubernetes","account":%q,"cluster":%s,"flavors":[%s]}}`, budget, Account, cluster, strings.Join(fl, ","))
		}
		fmt.Fprintf(&b, `{"name":%q,"site":"k8s","class":"metal-host","gpuModel":"H100","policy":%s}`, p.Name, policy)
	}
	b.WriteString("]}")
	return b.String()
}

// Secrets resolves the references of the documents and the fake's config.
type Secrets map[string]string

// Resolve returns a reference's value.
func (s Secrets) Resolve(_ context.Context, ref string) (string, error) {
	if v, ok := s[ref]; ok {
		return v, nil
	}
	return "", errors.New("no such secret")
}

// TokenValue is what secret://fake-token resolves to; a canary, so that a
// test can look for it where it must never be.
const TokenValue = "CANARY-fake-token-5f1c9e"

// DefaultSecrets are the secrets of the documents.
var DefaultSecrets = Secrets{"secret://fake-token": TokenValue}

// FakeConfig is the fake provider of the campaign: its truth in statePath,
// the token checked, operations taking a few observations, one cluster to
// adopt with a node pool of its owner's.
func FakeConfig(statePath string) fake.Config {
	cfg := fake.DefaultConfig()
	cfg.StatePath = statePath
	cfg.Token = "secret://fake-token"
	cfg.Steps = fake.Steps{Cluster: 2, NodePool: 1, Update: 1, Delete: 1}
	loc, name, _ := strings.Cut(Adoptable, "/")
	cfg.Adoptable = []fake.SeedCluster{{Name: name, Location: loc,
		NodePools: []fake.SeedNodePool{{Name: OwnerPool, MachineType: "fake-cpu-4", NodeCount: 2}}}}
	return cfg
}

// Findings is what Check found wrong; zero is a pass.
type Findings struct {
	// Duplicates: more than one cluster, or node pool, where the document
	// wants one.
	Duplicates int
	// Leaks: something of ours the document no longer wants, still at the
	// provider.
	Leaks int
	// Disagreements: what the document wants missing or different at the
	// provider, or records that say otherwise than the provider.
	Disagreements int
	Problems      []string
}

// OK reports whether nothing was found.
func (f Findings) OK() bool { return f.Duplicates+f.Leaks+f.Disagreements == 0 }

func (f *Findings) add(n *int, format string, args ...any) {
	*n++
	f.Problems = append(f.Problems, fmt.Sprintf(format, args...))
}

// Check compares the provider's truth with the last step applied and with
// the state file's records, for the installation whose state file they
// are: what another installation made in the same account is not its
// business (and must be untouched: the caller checks that apart).
func Check(truth fake.State, last Step, recs []state.SubstrateRecord, installation string) Findings {
	return check(truth, last, recs, installation, false)
}

// CheckInCluster is Check for an agent with an in-cluster half (a drain
// scenario's): a substrate that stays is ready, not waiting for the node
// daemon.
func CheckInCluster(truth fake.State, last Step, recs []state.SubstrateRecord, installation string) Findings {
	return check(truth, last, recs, installation, true)
}

func check(truth fake.State, last Step, recs []state.SubstrateRecord, installation string, inCluster bool) Findings {
	var f Findings
	byPool := map[string]state.SubstrateRecord{}
	for _, r := range recs {
		byPool[r.Want.PoolID] = r
	}
	var seeded *fake.ClusterRecord
	clustersOf := map[string][]*fake.ClusterRecord{}
	for _, id := range sortedKeys(truth.Clusters) {
		c := truth.Clusters[id]
		if c.Seeded {
			seeded = c
			continue
		}
		if inst := c.Labels[providers.LabelInstallation]; inst != "" && inst != installation {
			continue // another installation's
		}
		if c.Status == providers.ClusterDeleting {
			f.add(&f.Leaks, "cluster %s (%s) is still being deleted", c.Name, c.ID)
		}
		if len(c.ClientTokens) != 1 {
			// A create retried under another key: on a provider that
			// keys creates on the token, that is a twin.
			f.add(&f.Duplicates, "cluster %s was asked for under %d client tokens", c.Name, len(c.ClientTokens))
		}
		clustersOf[c.Labels[providers.LabelSubstratePool]] = append(clustersOf[c.Labels[providers.LabelSubstratePool]], c)
	}
	wantedPools := map[string]bool{}
	for _, p := range last.Pools {
		id := p.ID()
		rec, recorded := byPool[id]
		present := !p.Left && len(p.Flavors) > 0
		wantedPools[id] = present && !p.Adopt
		var cluster *fake.ClusterRecord
		switch {
		case p.Adopt:
			cluster = seeded
			if n := len(clustersOf[id]); n > 0 {
				f.add(&f.Leaks, "pool %s adopts, yet %d cluster(s) carry its label", p.Name, n)
			}
		case !present:
			for _, c := range clustersOf[id] {
				f.add(&f.Leaks, "pool %s is torn down, yet cluster %s (%s) is there", p.Name, c.Name, c.ID)
			}
		default:
			switch cs := clustersOf[id]; len(cs) {
			case 0:
				f.add(&f.Disagreements, "pool %s has no cluster", p.Name)
			case 1:
				cluster = cs[0]
			default:
				f.add(&f.Duplicates, "pool %s has %d clusters", p.Name, len(cs))
				cluster = cs[0]
			}
		}
		if cluster != nil {
			o := providers.Owner{Installation: installation, PoolID: id, Legacy: recorded && rec.Want.LegacyNames}
			checkPools(&f, p, present, cluster, o)
			if present && p.Version != "" {
				checkVersions(&f, p, cluster, o)
			}
		}
		if !recorded {
			if present {
				f.add(&f.Disagreements, "pool %s has no substrate record", p.Name)
			}
			continue
		}
		checkRecord(&f, p, present, rec, cluster, inCluster || last.Drained)
	}
	for pid, cs := range clustersOf {
		if _, named := wantedPools[pid]; !named {
			for _, c := range cs {
				f.add(&f.Leaks, "cluster %s (%s) of an unknown pool %q", c.Name, c.ID, pid)
			}
		}
	}
	if seeded != nil {
		if np := seeded.NodePools[OwnerPool]; np == nil || np.Status != providers.NodePoolRunning {
			f.add(&f.Disagreements, "the adopted cluster's own node pool %s was touched", OwnerPool)
		}
	}
	return f
}

// checkPools compares a cluster's node pools of pool p with its flavors.
func checkPools(f *Findings, p Pool, present bool, c *fake.ClusterRecord, o providers.Owner) {
	id := p.ID()
	wanted := map[string]Flavor{}
	if present {
		for _, fl := range p.Flavors {
			wanted[o.NodePoolName(fl.Name)] = fl
		}
	}
	// A blue/green flavor's pool is any one generation of it.
	generations := map[string][]string{}
	for _, name := range sortedKeys(c.NodePools) {
		for _, fl := range p.Flavors {
			if gen, ok := fleet.GenerationOf(fl.Name, strings.TrimPrefix(name, o.NodePoolName(""))); present && fl.Replace && gen > 1 && ok {
				generations[fl.Name] = append(generations[fl.Name], name)
			}
		}
	}
	for _, fl := range p.Flavors {
		if !present || !fl.Replace {
			continue
		}
		base := o.NodePoolName(fl.Name)
		all := generations[fl.Name]
		if _, ok := c.NodePools[base]; ok {
			all = append([]string{base}, all...)
		}
		if len(all) > 1 {
			f.add(&f.Duplicates, "pool %s: flavor %s has %d node pools %v, want one", p.Name, fl.Name, len(all), all)
		}
		if len(all) > 0 {
			delete(wanted, base)
			for _, name := range all {
				wanted[name] = fl
			}
		}
	}
	seenGen := map[string]bool{}
	for _, name := range sortedKeys(c.NodePools) {
		np := c.NodePools[name]
		if np.Seeded || np.Labels[providers.LabelSubstratePool] != id || o.Foreign(np.Labels) != "" {
			continue
		}
		fl, ok := wanted[name]
		if ok && fl.Replace {
			// Counted once above when there are more; each is
			// checked for its shape here.
			seenGen[fl.Name] = true
		}
		switch {
		case !ok:
			f.add(&f.Leaks, "pool %s: node pool %s of no wanted flavor is there (%s)", p.Name, name, np.Status)
		case np.Status != providers.NodePoolRunning:
			f.add(&f.Disagreements, "pool %s: node pool %s is %s", p.Name, name, np.Status)
		case np.MachineType != fl.MachineType || np.Spot != fl.Spot:
			f.add(&f.Disagreements, "pool %s: node pool %s has shape %s spot %v", p.Name, name, np.MachineType, np.Spot)
		case fl.Autoscaling == nil && (np.NodeCount != fl.Nodes || np.Autoscaling != nil):
			f.add(&f.Disagreements, "pool %s: node pool %s has %d nodes, want %d", p.Name, name, np.NodeCount, fl.Nodes)
		case fl.Autoscaling != nil && (np.Autoscaling == nil || np.Autoscaling.MinNodes != fl.Autoscaling[0] || np.Autoscaling.MaxNodes != fl.Autoscaling[1]):
			f.add(&f.Disagreements, "pool %s: node pool %s has autoscaling %+v", p.Name, name, np.Autoscaling)
		}
		if !slices.Equal(sortedLabels(np.Labels), sortedLabels(o.PoolLabels(fl.Spot))) && ok {
			f.add(&f.Disagreements, "pool %s: node pool %s has labels %v", p.Name, name, np.Labels)
		}
		delete(wanted, name)
	}
	for name, fl := range wanted {
		if fl.Replace && seenGen[fl.Name] {
			continue
		}
		f.add(&f.Disagreements, "pool %s: node pool %s is missing", p.Name, name)
	}
}

// checkRecord compares a substrate's record with the provider.
func checkRecord(f *Findings, p Pool, present bool, rec state.SubstrateRecord, c *fake.ClusterRecord, inCluster bool) {
	s := rec.Seen
	if s == nil {
		f.add(&f.Disagreements, "pool %s: the reconciler never wrote its record", p.Name)
		return
	}
	if s.ObservedGeneration != rec.Want.Generation || !s.Converged {
		f.add(&f.Disagreements, "pool %s: record at generation %d of %d, converged %v", p.Name, s.ObservedGeneration, rec.Want.Generation, s.Converged)
	}
	if !present {
		if s.State != state.SubstrateDeleted {
			f.add(&f.Disagreements, "pool %s: torn down but %s: %s", p.Name, s.State, s.Message)
		}
		return
	}
	if inCluster && s.State != state.SubstrateReady || !inCluster && (s.State != state.SubstrateCreating || !strings.Contains(s.Message, "waiting for the node daemon")) {
		f.add(&f.Disagreements, "pool %s: %s: %s", p.Name, s.State, s.Message)
	}
	if c == nil || s.Cluster == nil || s.Cluster.ID != c.ID {
		f.add(&f.Disagreements, "pool %s: the record names cluster %+v", p.Name, s.Cluster)
	}
	if len(s.NodePools) != len(p.Flavors) {
		f.add(&f.Disagreements, "pool %s: the record has %d node pools, want %d", p.Name, len(s.NodePools), len(p.Flavors))
		return
	}
	for i, fl := range p.Flavors {
		np := s.NodePools[i]
		if np.Flavor != fl.Name || np.Status != string(providers.NodePoolRunning) || (fl.Autoscaling == nil && np.Nodes != fl.Nodes) {
			f.add(&f.Disagreements, "pool %s: the record's node pool %+v", p.Name, np)
		}
	}
}

func sortedLabels(m map[string]string) []string {
	var out []string
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// FakeBlock is FakeConfig as the agent config's providers.fake block
// (YAML), for a campaign that runs `fleet-agent run` as a child.
func FakeBlock(statePath string) string {
	cfg := FakeConfig(statePath)
	s := cfg.Adoptable[0]
	return fmt.Sprintf(`fake:
  statePath: %q
  token: %s
  steps: { cluster: %d, nodePool: %d, update: %d, delete: %d }
  adoptable:
    - { name: %s, location: %s, nodePools: [{ name: %s, machineType: %s, nodeCount: %d }] }
`, statePath, cfg.Token, cfg.Steps.Cluster, cfg.Steps.NodePool, cfg.Steps.Update, cfg.Steps.Delete,
		s.Name, s.Location, s.NodePools[0].Name, s.NodePools[0].MachineType, s.NodePools[0].NodeCount)
}

// checkVersions compares the versions a created cluster and its node pools
// run with the version the pool names.
func checkVersions(f *Findings, p Pool, c *fake.ClusterRecord, o providers.Owner) {
	if c.Version != p.Version {
		f.add(&f.Disagreements, "pool %s: cluster %s runs %s, want %s", p.Name, c.Name, c.Version, p.Version)
	}
	for _, fl := range p.Flavors {
		if np := c.NodePools[o.NodePoolName(fl.Name)]; np != nil && np.Version != p.Version {
			f.add(&f.Disagreements, "pool %s: node pool %s runs %s, want %s", p.Name, np.Name, np.Version, p.Version)
		}
	}
}
