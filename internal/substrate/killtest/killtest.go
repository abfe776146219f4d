// Package killtest kills a substrate reconciler from outside, for the
// adapters' tests: a wrapper of the provider the reconciler calls makes one
// chosen call and then stops every later write (the test closes the state
// store), as a kill -9 right after the provider answered would. The
// reconciler carries no crash hook for it; the test starts a fresh one over
// the same store, as a restarted process would. Only tests import it (the
// binary-deps test refuses it in the binary).
package killtest

import (
	"context"
	"strings"
	"sync/atomic"

	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/substrate"
)

// Call names a provider call the journal makes.
type Call string

// The calls a kill can follow.
const (
	EnsureCluster  Call = "EnsureCluster"
	DeleteCluster  Call = "DeleteCluster"
	EnsureNodePool Call = "EnsureNodePool"
	ResizeNodePool Call = "ResizeNodePool"
	DeleteNodePool Call = "DeleteNodePool"
)

// KillAfter kills a reconciler from outside right after a provider
// answered one call: the call is made, then Kill runs (a test closes the
// state store there, so nothing the reconciler writes afterwards lands),
// then the provider's answer is returned to a reconciler that can no longer
// record it. That is a kill -9 between the provider's answer and the
// journal's write, with no hook inside the reconciler. The test then opens
// the store again and starts a fresh reconciler over it.
//
// It fires once, at the first call of kind Call whose object's name
// contains Name ("" matches any); the providers it wraps before and after
// (one per start of the agent) share that once.
type KillAfter struct {
	Call Call
	Name string
	// Kill is run after the call returned and before its answer is handed
	// back; it must stop every later write (close the store).
	Kill  func()
	fired atomic.Bool
}

// Fired reports whether the kill happened.
func (k *KillAfter) Fired() bool { return k.fired.Load() }

// Provider wraps p: its calls go to p, and the chosen one kills.
func (k *KillAfter) Provider(p substrate.Provider) substrate.Provider {
	return killing{Provider: p, k: k}
}

// after runs the kill when call on name is the chosen one, not yet fired.
func (k *KillAfter) after(call Call, name string) {
	if call != k.Call || !strings.Contains(name, k.Name) || !k.fired.CompareAndSwap(false, true) {
		return
	}
	k.Kill()
}

type killing struct {
	substrate.Provider
	k *KillAfter
}

func (w killing) EnsureCluster(ctx context.Context, acct providers.Account, spec providers.ClusterSpec) (providers.Cluster, error) {
	c, err := w.Provider.EnsureCluster(ctx, acct, spec)
	w.k.after(EnsureCluster, spec.Name)
	return c, err
}

func (w killing) DeleteCluster(ctx context.Context, acct providers.Account, ref providers.ClusterRef) (providers.Cluster, error) {
	c, err := w.Provider.DeleteCluster(ctx, acct, ref)
	w.k.after(DeleteCluster, ref.Name)
	return c, err
}

func (w killing) EnsureNodePool(ctx context.Context, acct providers.Account, cluster providers.ClusterRef, spec providers.NodePoolSpec) (providers.NodePool, error) {
	np, err := w.Provider.EnsureNodePool(ctx, acct, cluster, spec)
	w.k.after(EnsureNodePool, spec.Name)
	return np, err
}

func (w killing) ResizeNodePool(ctx context.Context, acct providers.Account, cluster providers.ClusterRef, name string, size providers.Size) (providers.NodePool, error) {
	np, err := w.Provider.ResizeNodePool(ctx, acct, cluster, name, size)
	w.k.after(ResizeNodePool, name)
	return np, err
}

func (w killing) DeleteNodePool(ctx context.Context, acct providers.Account, cluster providers.ClusterRef, name string) (providers.NodePool, error) {
	np, err := w.Provider.DeleteNodePool(ctx, acct, cluster, name)
	w.k.after(DeleteNodePool, name)
	return np, err
}
