package digitalocean

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/digitalocean/godo"

	"github.com/fleet-agent/fleet-agent/internal/providers"
)

// poolStatus derives a node pool's state from its nodes: DOKS node pools
// have no state of their own.
func poolStatus(cluster providers.ClusterStatus, p *wirePool) (providers.NodePoolStatus, string) {
	if cluster == providers.ClusterDeleting {
		return providers.NodePoolDeleting, "the cluster is being deleted"
	}
	var prov, run, leaving int
	for _, n := range p.Nodes {
		state := ""
		if n.Status != nil {
			state = n.Status.State
		}
		switch state {
		case "running":
			run++
		case "draining", "deleting":
			leaving++
		default:
			prov++
		}
	}
	switch {
	case len(p.Nodes) > 0 && leaving == len(p.Nodes) && p.Count > 0:
		// Every node leaves although the pool should keep some: the pool
		// itself is being deleted.
		return providers.NodePoolDeleting, fmt.Sprintf("%d nodes draining", leaving)
	case run == p.Count && len(p.Nodes) == p.Count:
		return providers.NodePoolRunning, ""
	case run == 0 && leaving == 0:
		return providers.NodePoolProvisioning, fmt.Sprintf("%d of %d nodes provisioning", prov, p.Count)
	}
	return providers.NodePoolUpdating, fmt.Sprintf("%d of %d nodes running, %d provisioning, %d draining", run, p.Count, prov, leaving)
}

func poolView(cluster providers.ClusterStatus, p *wirePool, sizes map[string]godo.Size) providers.NodePool {
	status, msg := poolStatus(cluster, p)
	v := providers.NodePool{
		Name: p.Name, ID: p.ID,
		Shape:  providers.Shape{MachineType: p.Size, Spot: p.Spot != nil && *p.Spot},
		Size:   providers.Size{NodeCount: p.Count},
		Labels: maps.Clone(p.Labels),
		Status: status, Message: msg,
	}
	if z, ok := sizes[p.Size]; ok {
		v.Accelerators = accelerators(z)
		// A DOKS pool's disk is its size's.
		v.DiskGiB = z.Disk
	}
	if p.AutoScale {
		v.Autoscaling = &providers.Autoscaling{MinNodes: p.MinNodes, MaxNodes: p.MaxNodes}
	}
	return v
}

// findPool finds a pool of the cluster by name; nil when there is none. Two
// of one name (DOKS may allow it) are settled by the marker tag, else they
// are a Conflict a person must settle.
func findPool(op string, c *wireCluster, name string) (*wirePool, error) {
	var hits []*wirePool
	for _, p := range c.NodePools {
		if p.Name == name {
			hits = append(hits, p)
		}
	}
	if len(hits) > 1 {
		hits = slices.DeleteFunc(hits, func(p *wirePool) bool { return !marked(p.Tags) })
	}
	switch len(hits) {
	case 0:
		return nil, nil
	case 1:
		return hits[0], nil
	}
	return nil, providers.Errorf(op, providers.Conflict, providers.None, "cluster %s has %d node pools named %s carrying the tag %s; delete the extra ones", c.ID, len(hits), name, markerTag)
}

// checkSize holds a size to DOKS's rules: a fixed pool of 1 to 1000 nodes,
// or autoscaling from 0.
func checkSize(op string, s providers.Size) error {
	if s.NodeCount < 0 || s.NodeCount > 1000 {
		return providers.Invalidf(op, "size", "nodeCount %d is not between 0 and 1000", s.NodeCount)
	}
	if as := s.Autoscaling; as != nil {
		if as.MinNodes < 0 || as.MaxNodes < 1 || as.MinNodes > as.MaxNodes || as.MaxNodes > 1000 {
			return providers.Invalidf(op, "autoscaling", "autoscaling needs 0 <= minNodes <= maxNodes and 1 <= maxNodes <= 1000")
		}
		return nil
	}
	if s.NodeCount == 0 {
		return providers.Invalidf(op, "zeroNodes", "a fixed-size DOKS node pool has at least one node; for nodes: 0 use autoscaling with minNodes 0")
	}
	return nil
}

// wire is a size as DOKS takes it: an autoscaled pool's count within its
// bounds.
func wireSize(s providers.Size) (count int, auto bool, minN, maxN int) {
	if as := s.Autoscaling; as != nil {
		return min(max(s.NodeCount, as.MinNodes), as.MaxNodes), true, as.MinNodes, as.MaxNodes
	}
	return s.NodeCount, false, 0, 0
}

func sameSize(p *wirePool, s providers.Size) bool {
	count, auto, minN, maxN := wireSize(s)
	return p.Count == count && p.AutoScale == auto && (!auto || (p.MinNodes == minN && p.MaxNodes == maxN))
}

// runningCluster resolves the cluster a pool change goes to; one that is not
// running is busy (Conflict): DOKS takes node pool changes on a running
// cluster only, and the adapter says so before asking, whatever status the
// service would answer with.
func (a *Adapter) runningCluster(ctx context.Context, s *session, ref providers.ClusterRef) (*wireCluster, error) {
	c, err := a.resolve(ctx, s, ref)
	if err != nil {
		return nil, err
	}
	if st, _ := clusterStatus(c.Status); st != providers.ClusterRunning {
		return nil, providers.Errorf(s.op, providers.Conflict, providers.None, "cluster %s is %s; node pools change once it runs", ref, st)
	}
	return c, nil
}

// devicePlugin refuses a GPU pool on a cluster whose DigitalOcean device
// plugin for that vendor is on. Left unset, DigitalOcean turns it on with a
// GPU node pool, so unset counts as on.
func devicePlugin(op string, c *wireCluster, acc *providers.Accelerators) error {
	if acc == nil {
		return nil
	}
	var enabled *bool
	var field, vendor string
	switch {
	case strings.HasPrefix(acc.Type, "nvidia"):
		field, vendor = "nvidia_gpu_device_plugin", "NVIDIA"
		if c.NvidiaGpuDevicePlugin != nil {
			enabled = c.NvidiaGpuDevicePlugin.Enabled
		}
	case strings.HasPrefix(acc.Type, "amd"):
		field, vendor = "amd_gpu_device_plugin", "AMD"
		if c.AmdGpuDevicePlugin != nil {
			enabled = c.AmdGpuDevicePlugin.Enabled
		}
	default:
		return nil
	}
	if enabled != nil && !*enabled {
		return nil
	}
	return providers.Invalidf(op, "devicePluginOn",
		"cluster %s has DigitalOcean's %s GPU device plugin on (or unset, which DigitalOcean turns on with a GPU node pool); it would hand out the GPUs the node daemon books. "+
			"Turn it off (PUT /v2/kubernetes/clusters/%s with {\"name\":%q,\"%s\":{\"enabled\":false}}) and apply again",
		c.ID, vendor, c.ID, c.Name, field)
}

// EnsureNodePool creates the pool or converges the one of that name: its
// size and labels in place; its size slug and Spot never.
func (a *Adapter) EnsureNodePool(ctx context.Context, acct providers.Account, cluster providers.ClusterRef, spec providers.NodePoolSpec) (providers.NodePool, error) {
	s, err := a.open(ctx, "EnsureNodePool", acct)
	if err != nil {
		return providers.NodePool{}, err
	}
	switch {
	case !nameRE.MatchString(spec.Name):
		return providers.NodePool{}, providers.Invalidf(s.op, "name", "node pool name %q must be a DNS label of at most 63 characters", spec.Name)
	case spec.DiskGiB != 0:
		return providers.NodePool{}, providers.Invalidf(s.op, "diskSize", "DOKS node pools take their size's disk; remove diskGiB")
	case len(spec.Zones) > 0:
		return providers.NodePool{}, providers.Invalidf(s.op, "zones", "DOKS node pools have no zones (they are regional); remove zones")
	case spec.Spot && !rules(s.cfg).Spot:
		return providers.NodePool{}, providers.Invalidf(s.op, "spotUnsupported", "Spot node pools are a DigitalOcean preview: account %q needs allowSpot and previews", acct.Name)
	}
	if err := checkSize(s.op, spec.Size); err != nil {
		return providers.NodePool{}, err
	}
	c, err := a.runningCluster(ctx, s, cluster)
	if err != nil {
		return providers.NodePool{}, err
	}
	sizes, err := a.sizes(ctx, s)
	if err != nil {
		return providers.NodePool{}, err
	}
	z, ok := sizes[spec.MachineType]
	if !ok || !z.Available || !slices.Contains(z.Regions, c.RegionSlug) {
		return providers.NodePool{}, providers.Invalidf(s.op, "machineType", "size %s is not offered in %s for new droplets", spec.MachineType, c.RegionSlug)
	}
	have := accelerators(z)
	if spec.Accelerators != nil && (have == nil || *have != *spec.Accelerators) {
		return providers.NodePool{}, providers.Invalidf(s.op, "accelerators", "size %s has %s, not %d x %s", spec.MachineType, gpuText(have), spec.Accelerators.Count, spec.Accelerators.Type)
	}
	if err := devicePlugin(s.op, c, have); err != nil {
		return providers.NodePool{}, err
	}
	clusterStat, _ := clusterStatus(c.Status)
	p, err := findPool(s.op, c, spec.Name)
	if err != nil {
		return providers.NodePool{}, err
	}
	if p == nil {
		return a.createPool(ctx, s, c, spec, sizes)
	}
	v := poolView(clusterStat, p, sizes)
	v.Version = c.VersionSlug
	// DOKS upgrades a cluster's node pools with it (EnsureCluster's
	// upgrade replaces every pool's nodes): a pool's wanted version is
	// reached when its cluster's is, and only checked here.
	if _, err := providers.NextPoolVersion(s.op, spec.Name, c.VersionSlug, spec.Version, c.VersionSlug); err != nil {
		return providers.NodePool{}, err
	}
	switch {
	case v.Status == providers.NodePoolDeleting:
		return providers.NodePool{}, providers.Errorf(s.op, providers.Conflict, providers.None, "node pool %s is being deleted; it can be made again once it is gone", spec.Name)
	case p.Size != spec.MachineType || v.Spot != spec.Spot:
		return providers.NodePool{}, providers.Invalidf(s.op, "shapeChange", "node pool %s is %s (spot %v); a DOKS pool's size and Spot never change in place: make a new node pool", spec.Name, p.Size, v.Spot)
	}
	labels := p.Labels
	if spec.Labels != nil {
		labels = spec.Labels
	}
	if sameSize(p, spec.Size) && maps.Equal(labels, p.Labels) {
		return v, nil
	}
	return a.updatePool(ctx, s, c, p, spec.Size, labels, sizes)
}

func gpuText(a *providers.Accelerators) string {
	if a == nil {
		return "no GPUs"
	}
	return fmt.Sprintf("%d x %s", a.Count, a.Type)
}

func (a *Adapter) createPool(ctx context.Context, s *session, c *wireCluster, spec providers.NodePoolSpec, sizes map[string]godo.Size) (providers.NodePool, error) {
	count, auto, minN, maxN := wireSize(spec.Size)
	body := poolCreate{
		Name: spec.Name, Size: spec.MachineType, Count: count,
		Tags: poolTags(spec.Labels), Labels: spec.Labels, AutoScale: auto, Spot: spec.Spot,
	}
	if auto {
		body.MinNodes, body.MaxNodes = &minN, &maxN
	}
	var root poolRoot
	if err := a.call(ctx, s, http.MethodPost, "v2/kubernetes/clusters/"+c.ID+"/node_pools", body, &root); err != nil {
		return providers.NodePool{}, err
	}
	if root.NodePool == nil || root.NodePool.ID == "" {
		return providers.NodePool{}, &providers.Error{Op: s.op, Class: providers.Unknown, SideEffect: providers.Done,
			Message: "DigitalOcean accepted node pool " + spec.Name + " without saying which it is; read it back by name"}
	}
	v := poolView(providers.ClusterRunning, root.NodePool, sizes)
	if spec.Spot && !v.Spot {
		return providers.NodePool{}, &providers.Error{Op: s.op, Class: providers.Terminal, SideEffect: providers.Done, Reason: "spotNotTaken",
			Message: fmt.Sprintf("DigitalOcean made node pool %s but not as Spot: the preview is not on for this account; delete the pool or the flavor's spot, and turn allowSpot off until DigitalOcean enables it", spec.Name)}
	}
	return v, nil
}

func (a *Adapter) updatePool(ctx context.Context, s *session, c *wireCluster, p *wirePool, size providers.Size, labels map[string]string, sizes map[string]godo.Size) (providers.NodePool, error) {
	count, auto, minN, maxN := wireSize(size)
	// The description requires name and count; the rest is sent whole, so
	// that the pool is what is asked whether the service keeps or clears a
	// field left out.
	body := &godo.KubernetesNodePoolUpdateRequest{
		Name: p.Name, Count: &count, Labels: labels, Tags: withOurTags(p.Tags, poolTags(labels)),
		AutoScale: &auto, MinNodes: &minN, MaxNodes: &maxN,
	}
	var root poolRoot
	if err := a.call(ctx, s, http.MethodPut, "v2/kubernetes/clusters/"+c.ID+"/node_pools/"+p.ID, body, &root); err != nil {
		return providers.NodePool{}, err
	}
	if root.NodePool == nil {
		return providers.NodePool{}, &providers.Error{Op: s.op, Class: providers.Unknown, SideEffect: providers.Done, Message: "DigitalOcean accepted the change of node pool " + p.Name + " without showing it; read it back"}
	}
	if root.NodePool.Spot == nil {
		root.NodePool.Spot = p.Spot
	}
	return poolView(providers.ClusterRunning, root.NodePool, sizes), nil
}

// existingPool resolves the cluster (running, when the call changes the
// pool) and the pool of that name in it, or ErrNotFound.
func (a *Adapter) existingPool(ctx context.Context, s *session, cluster providers.ClusterRef, name string, change bool) (*wireCluster, *wirePool, error) {
	resolve := a.resolve
	if change {
		resolve = a.runningCluster
	}
	c, err := resolve(ctx, s, cluster)
	if err != nil {
		return nil, nil, err
	}
	p, err := findPool(s.op, c, name)
	if err != nil {
		return nil, nil, err
	}
	if p == nil {
		return nil, nil, providers.NotFoundf(s.op, "node pool %s not found in cluster %s", name, cluster)
	}
	return c, p, nil
}

// GetNodePool reads one node pool by name.
func (a *Adapter) GetNodePool(ctx context.Context, acct providers.Account, cluster providers.ClusterRef, name string) (providers.NodePool, error) {
	s, err := a.open(ctx, "GetNodePool", acct)
	if err != nil {
		return providers.NodePool{}, err
	}
	c, p, err := a.existingPool(ctx, s, cluster, name, false)
	if err != nil {
		return providers.NodePool{}, err
	}
	sizes, err := a.sizes(ctx, s)
	if err != nil {
		return providers.NodePool{}, err
	}
	st, _ := clusterStatus(c.Status)
	v := poolView(st, p, sizes)
	// A DOKS pool's nodes follow their cluster's release.
	v.Version = c.VersionSlug
	return v, nil
}

// ResizeNodePool changes a pool's count and autoscaling in place.
func (a *Adapter) ResizeNodePool(ctx context.Context, acct providers.Account, cluster providers.ClusterRef, name string, size providers.Size) (providers.NodePool, error) {
	s, err := a.open(ctx, "ResizeNodePool", acct)
	if err != nil {
		return providers.NodePool{}, err
	}
	if err := checkSize(s.op, size); err != nil {
		return providers.NodePool{}, err
	}
	c, p, err := a.existingPool(ctx, s, cluster, name, true)
	if err != nil {
		return providers.NodePool{}, err
	}
	sizes, err := a.sizes(ctx, s)
	if err != nil {
		return providers.NodePool{}, err
	}
	v := poolView(providers.ClusterRunning, p, sizes)
	switch {
	case v.Status == providers.NodePoolDeleting:
		return providers.NodePool{}, providers.Errorf(s.op, providers.Conflict, providers.None, "node pool %s is being deleted", name)
	case sameSize(p, size):
		return v, nil
	}
	return a.updatePool(ctx, s, c, p, size, p.Labels, sizes)
}

// ListNodePools lists every pool of the cluster, ours and the owner's,
// sorted by name.
func (a *Adapter) ListNodePools(ctx context.Context, acct providers.Account, cluster providers.ClusterRef) ([]providers.NodePool, error) {
	s, err := a.open(ctx, "ListNodePools", acct)
	if err != nil {
		return nil, err
	}
	c, err := a.resolve(ctx, s, cluster)
	if err != nil {
		return nil, err
	}
	sizes, err := a.sizes(ctx, s)
	if err != nil {
		return nil, err
	}
	st, _ := clusterStatus(c.Status)
	out := []providers.NodePool{}
	for _, p := range c.NodePools {
		v := poolView(st, p, sizes)
		v.Version = c.VersionSlug
		out = append(out, v)
	}
	slices.SortFunc(out, func(x, y providers.NodePool) int { return strings.Compare(x.Name+"\x00"+x.ID, y.Name+"\x00"+y.ID) })
	return out, nil
}

// DeleteNodePool deletes a pool; its nodes drain first. A pool already
// being deleted is returned as it is.
func (a *Adapter) DeleteNodePool(ctx context.Context, acct providers.Account, cluster providers.ClusterRef, name string) (providers.NodePool, error) {
	s, err := a.open(ctx, "DeleteNodePool", acct)
	if err != nil {
		return providers.NodePool{}, err
	}
	c, p, err := a.existingPool(ctx, s, cluster, name, false)
	if err != nil {
		return providers.NodePool{}, err
	}
	st, _ := clusterStatus(c.Status)
	v := poolView(st, p, nil)
	if v.Status == providers.NodePoolDeleting {
		return v, nil
	}
	if st != providers.ClusterRunning {
		return providers.NodePool{}, providers.Errorf(s.op, providers.Conflict, providers.None, "cluster %s is %s; its node pools go once it runs", cluster, st)
	}
	if err := a.call(ctx, s, http.MethodDelete, "v2/kubernetes/clusters/"+c.ID+"/node_pools/"+p.ID, nil, nil); err != nil {
		return providers.NodePool{}, err
	}
	v.Status, v.Message = providers.NodePoolDeleting, "nodes draining"
	return v, nil
}
