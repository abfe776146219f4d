package gcp

import (
	"context"
	"maps"
	"slices"
	"strings"

	compute "google.golang.org/api/compute/v1"

	"github.com/fleet-agent/fleet-agent/internal/providers"
)

var _ providers.NodeRemover = (*Adapter)(nil)

// group is one zone's instance group of a pool, with the machines it holds.
type group struct {
	project, zone, name, base string
	instances                 []string
}

// RemoveNodes deletes the chosen machines of a GKE node pool through their
// zones' instance groups (compute's deleteInstances), which lowers each
// group's target by the machines it loses, so nothing replaces them. GKE
// keeps no count of its own beside the groups' targets (initialNodeCount is
// only what the pool was made with), so the pool reads the new size without
// a setSize. A providerID is gce://<project>/<zone>/<instance>; one of
// another project, of a zone the pool is not in, or not named after the
// pool's group there is Invalid before any delete; one named after the group
// but no longer in it is taken as gone. Size is per zone: every zone must be
// left with size.NodeCount machines.
func (a *Adapter) RemoveNodes(ctx context.Context, acct providers.Account, cluster providers.ClusterRef, pool string, providerIDs []string, size providers.Size) (providers.NodePool, error) {
	const op = "RemoveNodes"
	s, err := a.open(ctx, op, acct)
	if err != nil {
		return providers.NodePool{}, err
	}
	if err := checkSize(op, size); err != nil {
		return providers.NodePool{}, err
	}
	type target struct{ project, zone, name, id string }
	targets := make([]target, 0, len(providerIDs))
	for _, id := range providerIDs {
		rest, ok := strings.CutPrefix(id, "gce://")
		parts := strings.Split(rest, "/")
		if !ok || len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
			return providers.NodePool{}, providers.Invalidf(op, "providerID", "%q is not a GCE machine's providerID (gce://<project>/<zone>/<instance>)", id)
		}
		targets = append(targets, target{parts[0], parts[1], parts[2], id})
	}
	np, p, err := s.getPool(ctx, cluster, pool)
	if err != nil {
		return providers.NodePool{}, err
	}
	if poolStatus(np.Status) == providers.NodePoolDeleting {
		return providers.NodePool{}, providers.Errorf(op, providers.Conflict, providers.None, "node pool %s is being deleted", p)
	}
	groups := map[string]*group{} // by zone
	for _, u := range np.InstanceGroupUrls {
		project, zone, name, ok := parseGroupURL(u)
		if !ok {
			return providers.NodePool{}, providers.Errorf(op, providers.Unavailable, providers.None, "node pool %s: instance group %s not understood; resize it instead", p, u)
		}
		m, err := s.cmp.InstanceGroupManagers.Get(project, zone, name).Context(ctx).Do()
		if err != nil {
			return providers.NodePool{}, classify(op, err, read)
		}
		l, err := s.cmp.InstanceGroupManagers.ListManagedInstances(project, zone, name).Context(ctx).Do()
		if err != nil {
			return providers.NodePool{}, classify(op, err, read)
		}
		g := &group{project: project, zone: zone, name: name, base: m.BaseInstanceName}
		for _, mi := range l.ManagedInstances {
			g.instances = append(g.instances, mi.Instance[strings.LastIndex(mi.Instance, "/")+1:])
		}
		if int(m.TargetSize) != len(g.instances) {
			return providers.NodePool{}, providers.Errorf(op, providers.Conflict, providers.None, "node pool %s: instance group %s is still moving (target %d, %d machines); try again when it is stable", p, name, m.TargetSize, len(g.instances))
		}
		groups[zone] = g
	}
	take := map[string][]string{} // zone → instance URLs
	for _, t := range targets {
		g := groups[t.zone]
		if g == nil || t.project != g.project || !strings.HasPrefix(t.name, g.base+"-") {
			return providers.NodePool{}, providers.Invalidf(op, "providerID", "%s is not a machine of node pool %s", t.id, p)
		}
		if !slices.Contains(g.instances, t.name) {
			continue // already gone
		}
		u := "projects/" + g.project + "/zones/" + g.zone + "/instances/" + t.name
		if !slices.Contains(take[t.zone], u) {
			take[t.zone] = append(take[t.zone], u)
		}
	}
	if size.Autoscaling == nil {
		for zone, g := range groups {
			if left := len(g.instances) - len(take[zone]); left != size.NodeCount {
				return providers.NodePool{}, providers.Invalidf(op, "size", "node pool %s has %d nodes in %s; removing %d of them leaves %d, not the %d per zone asked for", p, len(g.instances), zone, len(take[zone]), left, size.NodeCount)
			}
		}
	}
	for _, zone := range slices.Sorted(maps.Keys(take)) {
		g := groups[zone]
		req := &compute.InstanceGroupManagersDeleteInstancesRequest{Instances: take[zone]}
		if _, err := s.cmp.InstanceGroupManagers.DeleteInstances(g.project, g.zone, g.name, req).Context(ctx).Do(); err != nil {
			return providers.NodePool{}, classify(op, err, mutate)
		}
	}
	np, _, err = s.getPool(ctx, cluster, pool)
	if err != nil {
		return providers.NodePool{}, err
	}
	return s.poolView(ctx, np)
}
