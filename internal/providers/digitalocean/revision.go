package digitalocean

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"
)

// poolsRevision is a digest of what a cluster's answer shows of its node
// pools, for the discovery sweep's cheap change check.
//
// DOKS answers a cluster (in the account's listing as in a read) with its
// node pools inside it: their id, size, count, autoscaling bounds, tags,
// labels, taints and each node's state. That is everything ListNodePools
// reads, so the digest moves whenever a listing of the pools would show
// something else (a pool resized in the control panel or by doctl, made,
// deleted, relabelled, a node draining) and the sweep's one listing of the
// account's clusters is enough to tell. A cluster answered without its
// pools gives "" (the sweep lists them).
func poolsRevision(c *wireCluster) string {
	if c == nil || c.NodePools == nil {
		return ""
	}
	type node struct{ ID, State string }
	type pool struct {
		ID, Name, Size string
		Count          int
		AutoScale      bool
		Min, Max       int
		Spot           bool
		Tags           []string
		Labels         map[string]string
		Taints         []string
		Nodes          []node
	}
	pools := make([]pool, 0, len(c.NodePools))
	for _, p := range c.NodePools {
		if p == nil {
			continue
		}
		v := pool{ID: p.ID, Name: p.Name, Size: p.Size, Count: p.Count, AutoScale: p.AutoScale, Min: p.MinNodes, Max: p.MaxNodes,
			Spot: p.Spot != nil && *p.Spot, Tags: slices.Sorted(slices.Values(p.Tags)), Labels: p.Labels}
		for _, t := range p.Taints {
			v.Taints = append(v.Taints, t.Key+"="+t.Value+":"+t.Effect)
		}
		slices.Sort(v.Taints)
		for _, n := range p.Nodes {
			if n == nil {
				continue
			}
			st := ""
			if n.Status != nil {
				st = n.Status.State
			}
			v.Nodes = append(v.Nodes, node{ID: n.ID, State: st})
		}
		slices.SortFunc(v.Nodes, func(x, y node) int { return strings.Compare(x.ID, y.ID) })
		pools = append(pools, v)
	}
	slices.SortFunc(pools, func(x, y pool) int { return strings.Compare(x.Name+"\x00"+x.ID, y.Name+"\x00"+y.ID) })
	data, err := json.Marshal(pools)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8])
}
