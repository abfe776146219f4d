// Package substrate is the Kubernetes substrate: the reconciler that makes
// the managed cluster and node pools behind every pool whose policy asks for
// one (docs/substrates.md), and the journal of provider operations that
// makes a kill -9 at any moment safe.
//
// # Records
//
// Apply records what it wants (state.SubstrateWant: the spec, a generation
// that moves with every change, present or torn down) in its own
// transaction; the reconciler writes only what it saw and did
// (state.SubstrateSeen). Each writes its own half of the record, so neither
// overwrites the other.
//
// # The journal
//
// Every mutating provider call is one operation (state.JournalOp), written
// before the call is made and moved after it, each move a checked
// compare-and-swap in one transaction (opjournal holds the state machine
// and the driver of one operation; this package writes the moves and makes
// the calls):
//
//	journaled -> in_flight -> accepted -> succeeded
//	                 |            |   \-> failed
//	                 |            \-> journaled (vanished before done: call again)
//	                 |-> journaled (refused with no effect: retry later)
//	                 |-> failed    (refused for good)
//	                 \-> verifying (an unknown outcome, or found in flight after a restart)
//	verifying -> accepted (read back: it happened) | journaled (it did not) | failed
//
// An operation's key is derived from the pool id, the step, the object and
// the wanted generation, and its client token from the key: a retry of the
// same change after any number of restarts sends the same token, and a
// changed document gets new ones. The journal is the only retry authority
// (adapters never retry): backoff grows with the attempt count, a provider's
// Retry-After is honoured, and a refusal a person must fix (a permission, a
// quota, a refused delete) is tried again after 5, 10, 20, 40 minutes and so
// on, at most every 6 hours. An outcome that is not known is settled by
// reading the provider back by name, never guessed; a create whose outcome
// stays unknown is read back until the provider answers, so it never wedges.
//
// # The reconciler
//
// One pass at a time per pool, all pools concurrently within a small bound,
// every Options.Every on the injected clock and at once on Wake. A pass
// creates or adopts the cluster, claims its provider-global id before any
// node pool (one cluster backs one pool), makes one node pool per flavor
// (named providers.NodePoolName, labelled providers.PoolLabels), resizes in
// place (with autoscaling only the bounds are ours; a shrink with a Drainer
// and a providers.NodeRemover drains the Nodes the in-cluster half chose,
// then removes exactly them: shrink.go), deletes a removed
// flavor's node pool, and hands the running cluster to the in-cluster half
// (InCluster). Teardown runs the in-cluster
// teardown first, then deletes our node pools, then a created cluster.
//
// Each step (account, cluster, claim, node pools, in-cluster half,
// teardown, orphans) runs on a report of its own and returns a Condition;
// summarize folds the conditions into the substrate's state and message
// through one table, and the record keeps them (conditions.go).
//
// A substrate that converged is left alone (no provider call) until its
// document changes, the agent restarts, or the discovery sweep (Sweep)
// finds the provider disagrees with the records: a cluster carrying our
// label that no record explains (an orphan: adopted back, or removed when it
// is certainly ours), or a recorded cluster or node pool that is gone (a
// ghost: made again, or reported gone).
//
// Status and Statuses read the surface of docs/substrates.md from the
// state file, with or without a running reconciler. Nothing here holds a
// credential or a secret value: accounts carry references, adapters resolve
// them, and the in-cluster half gets a way to mint a credential, never one
// to keep.
package substrate
