package digitalocean

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/fleet-agent/fleet-agent/internal/providers"
)

var _ providers.NodeRemover = (*Adapter)(nil)

// RemoveNodes deletes the chosen nodes of a DOKS node pool without
// replacement and without DOKS's own drain (the caller emptied them), so
// the pool's count drops by each. A providerID is `digitalocean://<droplet
// id>`, mapped to the pool's node through the pool's nodes. Every id is
// checked before any delete: a droplet of another pool of the cluster, or
// an id that is not DigitalOcean's, is Invalid; a droplet of no pool is
// taken as already gone. The count that stays must be size.
func (a *Adapter) RemoveNodes(ctx context.Context, acct providers.Account, cluster providers.ClusterRef, pool string, providerIDs []string, size providers.Size) (providers.NodePool, error) {
	s, err := a.open(ctx, "RemoveNodes", acct)
	if err != nil {
		return providers.NodePool{}, err
	}
	if err := checkSize(s.op, size); err != nil {
		return providers.NodePool{}, err
	}
	droplets := make([]string, 0, len(providerIDs))
	for _, p := range providerIDs {
		d, ok := strings.CutPrefix(p, "digitalocean://")
		if _, err := strconv.ParseUint(d, 10, 64); !ok || err != nil {
			return providers.NodePool{}, providers.Invalidf(s.op, "providerID", "%q is not a DigitalOcean droplet's providerID (digitalocean://<droplet id>)", p)
		}
		droplets = append(droplets, d)
	}
	c, p, err := a.existingPool(ctx, s, cluster, pool, true)
	if err != nil {
		return providers.NodePool{}, err
	}
	sizes, err := a.sizes(ctx, s)
	if err != nil {
		return providers.NodePool{}, err
	}
	if v := poolView(providers.ClusterRunning, p, sizes); v.Status == providers.NodePoolDeleting {
		return providers.NodePool{}, providers.Errorf(s.op, providers.Conflict, providers.None, "node pool %s is being deleted", pool)
	}
	// A droplet of no pool of the cluster is already gone.
	var take []string // node ids of this pool
	for i, d := range droplets {
		for _, op := range c.NodePools {
			for _, n := range op.Nodes {
				if n == nil || n.DropletID != d {
					continue
				}
				if op.ID != p.ID {
					return providers.NodePool{}, providers.Invalidf(s.op, "providerID", "%s is a node of node pool %s, not of %s", providerIDs[i], op.Name, pool)
				}
				if n.Status == nil || n.Status.State != "draining" && n.Status.State != "deleting" {
					take = append(take, n.ID)
				}
			}
		}
	}
	if left := p.Count - len(take); size.Autoscaling == nil && left != size.NodeCount {
		return providers.NodePool{}, providers.Invalidf(s.op, "size", "node pool %s has %d nodes; removing %d of them leaves %d, not the %d asked for", pool, p.Count, len(take), left, size.NodeCount)
	}
	for _, id := range take {
		path := "v2/kubernetes/clusters/" + c.ID + "/node_pools/" + p.ID + "/nodes/" + id + "?replace=0&skip_drain=1"
		if err := a.call(ctx, s, http.MethodDelete, path, nil, nil); err != nil && !errors.Is(err, providers.ErrNotFound) {
			return providers.NodePool{}, err
		}
	}
	if len(take) == 0 {
		v := poolView(providers.ClusterRunning, p, sizes)
		v.Version = c.VersionSlug
		return v, nil
	}
	c, p, err = a.existingPool(ctx, s, cluster, pool, false)
	if err != nil {
		return providers.NodePool{}, err
	}
	st, _ := clusterStatus(c.Status)
	v := poolView(st, p, sizes)
	v.Version = c.VersionSlug
	return v, nil
}
