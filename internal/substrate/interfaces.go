package substrate

import (
	"context"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

// Provider is what the reconciler asks of a provider adapter: clusters,
// node pools, and the credentials the in-cluster half mints through it.
// Every adapter satisfies it (providers.Kubernetes is wider).
type Provider interface {
	providers.Clusters
	providers.NodePools
	providers.Access
}

var _ Provider = providers.Kubernetes(nil)

// InCluster is the in-cluster half of a substrate: the node
// daemon, the claim ConfigMap and joining, through client-go. The
// reconciler calls Apply on every pass once the cluster runs and no flavor's
// node pool is still being made (also while another flavor is in error: the
// nodes that joined are still looked after), and Teardown first thing when
// the substrate is torn down. Without one (this phase) a substrate whose
// cluster and node pools run stays creating, saying it waits for the node
// daemon.
type InCluster interface {
	// Apply puts the node daemon's objects in the cluster (server-side
	// apply, field manager fleet-agent) and reports the Nodes. An error is
	// the substrate's error with its message; the next pass tries again.
	Apply(ctx context.Context, t Target) (Nodes, error)
	// Teardown removes only what Apply put in the cluster (the objects
	// carrying the pool's label, the claim) after the Nodes are drained and,
	// on an adopted cluster, revokes the access the substrate granted itself
	// (t.RevokeAccess). An error keeps the substrate deleting; the next
	// attempt is two minutes later.
	Teardown(ctx context.Context, t Target) error
}

// Drainer empties the Nodes of a node pool before the pool deletes it,
// or the Nodes it chose before a scale-down removes them (DrainAsk.Shrink;
// docs/substrates.md, "Drains"): the in-cluster half implements it.
// Without one, a node pool goes as the provider deletes it, and a shrink
// is a resize.
type Drainer interface {
	// Drain runs one pass of the node pool's drain; it never waits.
	Drain(ctx context.Context, t Target, ask DrainAsk) (DrainReport, error)
	// Undrain lets go of a drain no longer wanted: the Nodes it cordoned
	// are schedulable again, and a scale-down's choice is forgotten.
	Undrain(ctx context.Context, t Target, nodePool string) error
}

// PoolNodeReader tells how far a node pool's Nodes have come in the
// cluster: the in-cluster half implements it. A blue/green replacement
// counts its new node pool as joined only once it says so; without one,
// the provider's report that the pool runs with all its nodes is enough.
type PoolNodeReader interface {
	PoolNodes(ctx context.Context, t Target, nodePool string) (PoolNodes, error)
}

// PoolNodes is what the cluster shows of one node pool's Nodes.
type PoolNodes struct {
	// Listed are the Nodes of the node pool; Ready those Ready.
	Listed, Ready int
	// Joined are the Ready Nodes whose node daemon joined the pool, when
	// JoinKnown (the in-cluster half keeps the joins).
	Joined    int
	JoinKnown bool
}

// DrainAsk is one node pool's drain.
type DrainAsk struct {
	NodePool string
	// Budget is the pool's policy.disruptionBudget (nil: none written).
	Budget *float64
	// Timeout (zero: never) and Force are the document's drain settings.
	Timeout time.Duration
	Force   bool
	// Shrink, when set, makes the drain a scale-down's: only the Nodes the
	// in-cluster half chooses to go are drained, not the whole node pool.
	Shrink *Shrink
}

// Shrink is what a scale-down asks of the drain: the in-cluster half
// chooses the Nodes beyond Keep (NotReady first, then cordoned, then
// those without GPU pods or a booking, then the fewest evictable pods),
// records its choice on them so that it holds across passes and restarts,
// and reports their providerIDs once they are empty.
type Shrink struct {
	// Keep is how many Nodes the node pool keeps: per zone when PerZone
	// (the provider counts nodes per zone), else in all, the ones that go
	// then spread over the zones.
	Keep    int
	PerZone bool
}

// DrainReport is what a drain pass found.
type DrainReport struct {
	// Finished: every Node of the node pool is empty (or gone).
	Finished bool
	// Blocked: pods or a booking hold it; Overdue: past the timeout, and
	// the settings say wait.
	Blocked, Overdue bool
	// Message names the blockers, why and since when.
	Message string
	// ProviderIDs are a scale-down's chosen Nodes (their spec.providerID),
	// sorted; set once Finished.
	ProviderIDs []string
}

// Target is one substrate as the in-cluster half sees it. It holds no
// credential: Credentials mints one for the run (providers.CredentialTTL),
// which the caller holds in memory and never stores, logs or returns.
type Target struct {
	PoolID, Pool, Tenant string
	// Owner is the pool in this installation: every object the in-cluster
	// half puts in the cluster carries its labels, and the claim is ours
	// only when it names both.
	Owner providers.Owner
	// Mode is "create" or "adopt".
	Mode      string
	Account   providers.Account
	Cluster   providers.ClusterRef
	GlobalID  string
	NodePools []state.SeenNodePool
	// Credentials mints an admin credential for the cluster through the
	// account's provider (providers.Access.Credentials).
	Credentials func(ctx context.Context) (providers.Credential, error)
	// RevokeAccess withdraws what Credentials granted inside an adopted
	// cluster (providers.Access.RevokeAccess).
	RevokeAccess func(ctx context.Context) error
}

// Nodes is what Apply found in the cluster.
type Nodes struct {
	// Listed are the Nodes carrying the pool's label; Joined those whose
	// node daemon joined the pool.
	Listed, Joined int
	// WaitingSince is when a Node last joined while some are still waiting
	// (zero when none waits).
	WaitingSince time.Time
	// Message, when set, is added to the substrate's message (the DaemonSet
	// to look at after 15 minutes without a join).
	Message string
}

// Metrics receives what the reconciler does; the agent passes its
// Prometheus metrics (internal/metrics), tests nothing.
type Metrics interface {
	// JournalOp counts a journal transition by step and result (sent,
	// accepted, verifying, retried, deferred, succeeded, failed, abandoned).
	JournalOp(step, result string)
	// SweepDecision counts a discovery sweep's decision (adopted, orphan,
	// reported, foreign, ghost, nodePoolOrphan, nodePoolGhost, error), and
	// a pass's refusal to touch another installation's object (foreign).
	SweepDecision(decision string)
	// PassFailed counts a pass that failed before it finished (its error is
	// also written as the substrate's message).
	PassFailed(pool string)
	// SubstrateStates sets how many substrates are in each state.
	SubstrateStates(byState map[string]int)
	// SubstrateNodes sets each pool's listed and joined Nodes.
	SubstrateNodes(listed, joined map[string]int)
}

type nopMetrics struct{}

func (nopMetrics) JournalOp(string, string)           {}
func (nopMetrics) SweepDecision(string)               {}
func (nopMetrics) PassFailed(string)                  {}
func (nopMetrics) SubstrateStates(map[string]int)     {}
func (nopMetrics) SubstrateNodes(_, _ map[string]int) {}
