package fake

// The fake's nodes: each node of a node pool has a number, a Node name and
// a providerID built from it, and RemoveNodes takes chosen ones away.

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/fleet-agent/fleet-agent/internal/providers"
)

var _ providers.NodeRemover = (*Fake)(nil)

// LabelZone is the well-known label that says which zone a Node is in; the
// fake spreads a node pool's nodes over its zones in turn.
const LabelZone = "topology.kubernetes.io/zone"

// nodeNumbers are the numbers of a pool's nodes now: the first NodeCount
// numbers RemoveNodes did not take. A resize that shrinks drops the
// highest (the provider chooses, as a cloud's scale-in does).
func nodeNumbers(p *NodePoolRecord) []int {
	out := make([]int, 0, p.NodeCount)
	for i := 0; len(out) < p.NodeCount; i++ {
		if !slices.Contains(p.Removed, i) {
			out = append(out, i)
		}
	}
	return out
}

// NodeName is the Node name of node number i of a cluster's node pool.
func NodeName(cluster, pool string, i int) string { return fmt.Sprintf("%s-%s-%d", cluster, pool, i) }

// ProviderID is the spec.providerID of that Node: fake://<cluster>/<node pool>/<Node name>.
func ProviderID(cluster, pool string, i int) string {
	return "fake://" + cluster + "/" + pool + "/" + NodeName(cluster, pool, i)
}

// Nodes are the Node names of a node pool's nodes now, of the cluster
// named cluster (what the fake registers in Kubernetes).
func (p *NodePoolRecord) Nodes(cluster string) []string {
	var out []string
	for _, i := range nodeNumbers(p) {
		out = append(out, NodeName(cluster, p.Name, i))
	}
	return out
}

// ProviderIDs are the providerIDs of a node pool's nodes now, in the
// order of Nodes.
func (p *NodePoolRecord) ProviderIDs(cluster string) []string {
	var out []string
	for _, i := range nodeNumbers(p) {
		out = append(out, ProviderID(cluster, p.Name, i))
	}
	return out
}

// nodeZone is the zone node number i is in: the pool's zones in turn.
func nodeZone(p *NodePoolRecord, i int) string {
	if len(p.Zones) == 0 {
		return ""
	}
	return p.Zones[i%len(p.Zones)]
}

// numberOf reads a providerID of the pool back to its node number; ok
// false for one that is not of this cluster's pool.
func numberOf(cluster, pool, providerID string) (int, bool) {
	rest, ok := strings.CutPrefix(providerID, "fake://"+cluster+"/"+pool+"/"+cluster+"-"+pool+"-")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(rest)
	if err != nil || i < 0 || strconv.Itoa(i) != rest {
		return 0, false
	}
	return i, true
}

// RemoveNodes removes the named nodes of a node pool and leaves it at
// size. It is asynchronous as a resize is: the pool reads Updating, with
// its new size at once, until the work is done.
func (f *Fake) RemoveNodes(ctx context.Context, acct providers.Account, cluster providers.ClusterRef, name string, providerIDs []string, size providers.Size) (providers.NodePool, error) {
	a, fx, finish, err := f.callFault(ctx, "RemoveNodes", &acct)
	if err != nil {
		return providers.NodePool{}, err
	}
	if err := f.lockFor(ctx, "RemoveNodes"); err != nil {
		return providers.NodePool{}, err
	}
	defer f.unlock()
	c, err := f.runningCluster(a, cluster)
	if err != nil {
		return providers.NodePool{}, finish(err)
	}
	p, err := changeable(c, cluster, name)
	if err != nil {
		return providers.NodePool{}, finish(err)
	}
	if err := f.checkSize(size); err != nil {
		return providers.NodePool{}, finish(err)
	}
	// Every providerID is checked before anything goes.
	have := nodeNumbers(p)
	var take []int
	for _, id := range providerIDs {
		i, ok := numberOf(c.Name, name, id)
		if !ok {
			return providers.NodePool{}, finish(providers.Invalidf("", "providerID", "%q is not a node of node pool %s in cluster %s; nothing was removed", id, name, c.Name))
		}
		if slices.Contains(have, i) && !slices.Contains(take, i) {
			take = append(take, i) // a node already gone is no error
		}
	}
	if p.Op != nil {
		return providers.NodePool{}, finish(providers.Errorf("", providers.Conflict, providers.None, "node pool %s: a %s is in progress", name, p.Op.Kind))
	}
	size = normalSize(size)
	if len(take) == 0 && sameSize(p.Size, size) {
		return poolView(p), finish(nil)
	}
	p.Removed = append(p.Removed, take...)
	slices.Sort(p.Removed)
	p.Size = size
	p.Status = providers.NodePoolUpdating
	p.Op = f.newOp("update", f.cfg.Steps.Update)
	f.settlePool(c, p)
	v := poolView(p)
	f.after(fx, c, name, false)
	if err := f.persist(); err != nil {
		return providers.NodePool{}, err
	}
	return v, finish(nil)
}
