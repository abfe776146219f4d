package gcp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"

	container "google.golang.org/api/container/v1"
)

// The discovery sweep's cheap change check on GKE.
//
// A cluster in GKE's listing carries its node pools (config, labels,
// autoscaling, status, version, etag) but no pool's live size: that lives in
// the pools' managed instance groups, and whether a pool's etag or
// initialNodeCount follows setSize is not documented. Every change made
// through GKE's API, the console's and gcloud's included (a resize, a pool
// made or deleted, an update, an upgrade), is an operation whose targetLink
// names the cluster or one of its pools, and one operations.list over every
// location returns them all. So a cluster's revision is a digest of the
// pools its listing shows and of the operations on it (name and status: one
// started or finished moves it). Resizes made beside GKE, on the instance
// groups themselves, are not operations of GKE's; the sweep's daily full
// read finds those.

// clusterOps lists the project's GKE operations in every location, by the
// cluster they act on ("<location>/<name>"). ok is false when the list
// failed or missed zones: the revisions are then "" and the sweep lists the
// pools, as it does without a revision.
func (s *session) clusterOps(ctx context.Context) (map[string][]*container.Operation, bool) {
	res, err := s.ctr.Projects.Locations.Operations.List(s.parent("-")).Context(ctx).Do()
	if err != nil || len(res.MissingZones) > 0 {
		return nil, false
	}
	out := map[string][]*container.Operation{}
	for _, op := range res.Operations {
		if key := opCluster(op.TargetLink); key != "" {
			out[key] = append(out[key], op)
		}
	}
	return out, true
}

// opCluster is "<location>/<cluster>" of an operation's targetLink
// (".../projects/<p>/locations|zones/<l>/clusters/<c>[/nodePools/<np>]"),
// or "" for an operation on no cluster.
func opCluster(link string) string {
	segs := strings.Split(link, "/")
	for i := 2; i+1 < len(segs); i++ {
		if segs[i] == "clusters" && (segs[i-2] == "locations" || segs[i-2] == "zones") {
			return segs[i-1] + "/" + segs[i+1]
		}
	}
	return ""
}

// poolsRevision is the digest of what the cluster's listing shows of its
// pools and of the operations on it.
func poolsRevision(c *container.Cluster, ops []*container.Operation) string {
	type pool struct {
		Name, Status, Etag, Version string
		Initial                     int64
		Locations, Groups           []string
		Config                      *container.NodeConfig
		Autoscaling                 *container.NodePoolAutoscaling
	}
	type op struct{ Name, Status string }
	var v struct {
		Pools []pool
		Ops   []op
	}
	for _, p := range c.NodePools {
		if p == nil {
			continue
		}
		v.Pools = append(v.Pools, pool{Name: p.Name, Status: p.Status, Etag: p.Etag, Version: p.Version, Initial: p.InitialNodeCount,
			Locations: p.Locations, Groups: p.InstanceGroupUrls, Config: p.Config, Autoscaling: p.Autoscaling})
	}
	slices.SortFunc(v.Pools, func(x, y pool) int { return strings.Compare(x.Name, y.Name) })
	for _, o := range ops {
		v.Ops = append(v.Ops, op{Name: o.Name, Status: o.Status})
	}
	slices.SortFunc(v.Ops, func(x, y op) int { return strings.Compare(x.Name, y.Name) })
	data, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8])
}
