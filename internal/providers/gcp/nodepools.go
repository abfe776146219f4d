package gcp

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"

	container "google.golang.org/api/container/v1"

	"github.com/fleet-agent/fleet-agent/internal/providers"
)

// nameRE is what GKE takes as a cluster or node pool name (at most 40
// characters, checked apart).
var nameRE = lazyRE(`^[a-z]([-a-z0-9]*[a-z0-9])?$`)

// defaultDiskGiB is GKE's boot disk when a node pool asks for none.
const defaultDiskGiB = 100

func (s *session) poolPath(cluster providers.ClusterRef, name string) (string, error) {
	p, _, err := s.clusterPath(cluster)
	if err != nil {
		return "", err
	}
	return p + "/nodePools/" + name, nil
}

// getPool reads a node pool; a missing one (or a missing cluster) is
// ErrNotFound naming it.
func (s *session) getPool(ctx context.Context, cluster providers.ClusterRef, name string) (*container.NodePool, string, error) {
	p, err := s.poolPath(cluster, name)
	if err != nil {
		return nil, "", err
	}
	np, err := s.ctr.Projects.Locations.Clusters.NodePools.Get(p).Context(ctx).Do()
	if err != nil {
		err = classify(s.op, err, read)
		if errors.Is(err, providers.ErrNotFound) {
			return nil, p, providers.NotFoundf(s.op, "node pool %s not found", p)
		}
		return nil, p, err
	}
	return np, p, nil
}

func poolStatus(s string) providers.NodePoolStatus {
	switch s {
	case "PROVISIONING":
		return providers.NodePoolProvisioning
	case "RUNNING":
		return providers.NodePoolRunning
	case "RECONCILING":
		return providers.NodePoolUpdating
	case "STOPPING":
		return providers.NodePoolDeleting
	case "ERROR", "RUNNING_WITH_ERROR":
		// RUNNING_WITH_ERROR is partly usable (a stockout in one zone): a
		// settled error, whose nodes are still looked after.
		return providers.NodePoolError
	}
	return providers.NodePoolUpdating
}

// poolShape is a node pool's shape as GKE reports it.
func poolShape(np *container.NodePool) providers.Shape {
	sh := providers.Shape{Zones: slices.Sorted(slices.Values(np.Locations))}
	if c := np.Config; c != nil {
		sh.MachineType, sh.Spot, sh.DiskGiB = c.MachineType, c.Spot || c.Preemptible, int(c.DiskSizeGb)
		for _, acc := range c.Accelerators {
			if acc.AcceleratorCount > 0 {
				sh.Accelerators = &providers.Accelerators{Type: acc.AcceleratorType, Count: int(acc.AcceleratorCount)}
				break
			}
		}
	}
	return sh
}

// poolAutoscaling reads GKE's bounds as per-zone ones, the unit of a
// flavor's nodes; pool-wide totals (the owner's pools may use them) are
// spread over the zones.
func poolAutoscaling(np *container.NodePool) *providers.Autoscaling {
	as := np.Autoscaling
	if as == nil || !as.Enabled {
		return nil
	}
	if as.TotalMaxNodeCount > 0 && as.MaxNodeCount == 0 {
		z := int64(max(1, len(np.Locations)))
		return &providers.Autoscaling{MinNodes: int((as.TotalMinNodeCount + z - 1) / z), MaxNodes: int(as.TotalMaxNodeCount / z)}
	}
	return &providers.Autoscaling{MinNodes: int(as.MinNodeCount), MaxNodes: int(as.MaxNodeCount)}
}

// poolView is a node pool as the boundary sees it. Its live size is read
// from the pool's managed instance groups (one per zone, targetSize):
// GKE's NodePool has no current count, and whether initialNodeCount follows
// setSize is not settled (GKE's documentation), so the adapter never relies on
// it once the groups exist. A group still moving (not stable) makes a
// running pool read as updating.
func (s *session) poolView(ctx context.Context, np *container.NodePool) (providers.NodePool, error) {
	v := providers.NodePool{
		Name: np.Name, Shape: poolShape(np), Status: poolStatus(np.Status),
		Size:    providers.Size{NodeCount: int(np.InitialNodeCount), Autoscaling: poolAutoscaling(np)},
		Version: np.Version,
	}
	if np.Config != nil {
		v.Labels = maps.Clone(np.Config.Labels)
	}
	var msgs []string
	if np.StatusMessage != "" {
		msgs = append(msgs, np.StatusMessage)
	}
	for _, c := range np.Conditions {
		if m := strings.TrimSpace(c.Code + ": " + c.Message); !slices.Contains(msgs, m) && c.Message != np.StatusMessage {
			msgs = append(msgs, m)
		}
	}
	if np.Status != "PROVISIONING" && np.Status != "STOPPING" && len(np.InstanceGroupUrls) > 0 {
		n, moving, note, err := s.groupSize(ctx, np.InstanceGroupUrls)
		if err != nil {
			return providers.NodePool{}, err
		}
		if note != "" {
			msgs = append(msgs, note)
		} else {
			v.NodeCount = n
		}
		if moving && v.Status == providers.NodePoolRunning {
			v.Status = providers.NodePoolUpdating
		}
	}
	v.Message = strings.Join(msgs, "; ")
	return v, nil
}

// groupSize reads a pool's instance groups: the largest target size (the
// zones of a fixed pool agree; while they do not, the pool is moving), and
// whether any is still moving. A group the account may not read, or that
// is gone, leaves a note instead of failing the read.
func (s *session) groupSize(ctx context.Context, urls []string) (int, bool, string, error) {
	n, moving := 0, false
	for _, u := range urls {
		project, zone, name, ok := parseGroupURL(u)
		if !ok {
			return 0, false, "instance group " + u + " not understood; size from initialNodeCount", nil
		}
		m, err := s.cmp.InstanceGroupManagers.Get(project, zone, name).Context(ctx).Do()
		if err != nil {
			err = classify(s.op, err, read)
			switch providers.ReasonOf(err) {
			case "permissionDenied":
				return 0, false, "size from initialNodeCount: the account may not read instance group " + name + " (grant roles/compute.viewer)", nil
			}
			if errors.Is(err, providers.ErrNotFound) {
				return 0, false, "size from initialNodeCount: instance group " + name + " is gone", nil
			}
			return 0, false, "", err
		}
		n = max(n, int(m.TargetSize))
		if m.Status != nil && !m.Status.IsStable {
			moving = true
		}
	}
	return n, moving, "", nil
}

// parseGroupURL splits .../projects/{p}/zones/{z}/instanceGroupManagers/{name}.
func parseGroupURL(u string) (project, zone, name string, ok bool) {
	pu, err := url.Parse(u)
	if err != nil {
		return "", "", "", false
	}
	parts := strings.Split(strings.Trim(pu.Path, "/"), "/")
	for i := 0; i+5 < len(parts); i++ {
		if parts[i] == "projects" && parts[i+2] == "zones" && (parts[i+4] == "instanceGroupManagers" || parts[i+4] == "instanceGroups") {
			return parts[i+1], parts[i+3], parts[i+5], true
		}
	}
	return "", "", "", false
}

// GetNodePool reads one pool by name, or ErrNotFound.
func (a *Adapter) GetNodePool(ctx context.Context, acct providers.Account, cluster providers.ClusterRef, name string) (providers.NodePool, error) {
	s, err := a.open(ctx, "GetNodePool", acct)
	if err != nil {
		return providers.NodePool{}, err
	}
	np, _, err := s.getPool(ctx, cluster, name)
	if err != nil {
		return providers.NodePool{}, err
	}
	return s.poolView(ctx, np)
}

// ListNodePools lists every pool of the cluster, sorted by name.
func (a *Adapter) ListNodePools(ctx context.Context, acct providers.Account, cluster providers.ClusterRef) ([]providers.NodePool, error) {
	const op = "ListNodePools"
	s, err := a.open(ctx, op, acct)
	if err != nil {
		return nil, err
	}
	p, _, err := s.clusterPath(cluster)
	if err != nil {
		return nil, err
	}
	res, err := s.ctr.Projects.Locations.Clusters.NodePools.List(p).Context(ctx).Do()
	if err != nil {
		err = classify(op, err, read)
		if errors.Is(err, providers.ErrNotFound) {
			return nil, providers.NotFoundf(op, "cluster %s not found", p)
		}
		return nil, err
	}
	out := []providers.NodePool{}
	for _, np := range res.NodePools {
		v, err := s.poolView(ctx, np)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	slices.SortFunc(out, func(x, y providers.NodePool) int { return strings.Compare(x.Name, y.Name) })
	return out, nil
}

func checkSize(op string, sz providers.Size) error {
	if sz.NodeCount < 0 || sz.NodeCount > 1000 {
		return providers.Invalidf(op, "size", "nodeCount %d is not between 0 and 1000 (nodes per zone)", sz.NodeCount)
	}
	if as := sz.Autoscaling; as != nil && (as.MinNodes < 0 || as.MaxNodes < 1 || as.MinNodes > as.MaxNodes || as.MaxNodes > 1000) {
		return providers.Invalidf(op, "autoscaling", "autoscaling needs 0 <= minNodes <= maxNodes and 1 <= maxNodes <= 1000 (per zone), not %d..%d", as.MinNodes, as.MaxNodes)
	}
	return nil
}

// initialCount is the per-zone count to start (or restart) a pool at: the
// spec's count, inside the autoscaling bounds when there are some.
func initialCount(sz providers.Size) int {
	if as := sz.Autoscaling; as != nil {
		return min(max(sz.NodeCount, as.MinNodes), as.MaxNodes)
	}
	return sz.NodeCount
}

func autoscalingOf(as *providers.Autoscaling) *container.NodePoolAutoscaling {
	if as == nil {
		// Enabled false is dropped by omitempty and sent as {}: disabled.
		return &container.NodePoolAutoscaling{}
	}
	return &container.NodePoolAutoscaling{Enabled: true, MinNodeCount: int64(as.MinNodes), MaxNodeCount: int64(as.MaxNodes),
		LocationPolicy: "BALANCED", ForceSendFields: []string{"MinNodeCount"}}
}

// EnsureNodePool creates the pool or converges the existing one of the same
// name: size and labels in place, the shape never.
func (a *Adapter) EnsureNodePool(ctx context.Context, acct providers.Account, cluster providers.ClusterRef, spec providers.NodePoolSpec) (providers.NodePool, error) {
	const op = "EnsureNodePool"
	s, err := a.open(ctx, op, acct)
	if err != nil {
		return providers.NodePool{}, err
	}
	if !nameRE().MatchString(spec.Name) || len(spec.Name) > 40 {
		return providers.NodePool{}, providers.Invalidf(op, "name", "node pool name %q: GKE takes lowercase letters, digits and '-', starting with a letter, at most 40 characters", spec.Name)
	}
	if err := checkSize(op, spec.Size); err != nil {
		return providers.NodePool{}, err
	}
	np, p, err := s.getPool(ctx, cluster, spec.Name)
	switch {
	case errors.Is(err, providers.ErrNotFound):
		created, err := a.createPool(ctx, s, cluster, spec)
		if providers.ReasonOf(err) != "alreadyExists" {
			return created, err
		}
		if np, p, err = s.getPool(ctx, cluster, spec.Name); err != nil {
			return providers.NodePool{}, err
		}
	case err != nil:
		return providers.NodePool{}, err
	}
	return a.convergePool(ctx, s, cluster, p, np, spec)
}

func (a *Adapter) createPool(ctx context.Context, s *session, ref providers.ClusterRef, spec providers.NodePoolSpec) (providers.NodePool, error) {
	c, full, err := s.getCluster(ctx, ref)
	if err != nil {
		return providers.NodePool{}, err
	}
	if c.Status != "RUNNING" {
		return providers.NodePool{}, providers.Errorf(s.op, providers.Conflict, providers.None, "cluster %s is %s; node pools are added once it runs", full.ID, c.Status)
	}
	zones := slices.Sorted(slices.Values(spec.Zones))
	at := zones
	if len(at) == 0 {
		at = c.Locations
	}
	if len(at) == 0 {
		at = []string{c.Location}
	}
	// The machine type decides the accelerators: its own (A2, A3, G2) must
	// be what the flavor asks for; other types take attached GPUs (GKE
	// checks the accelerator type per zone).
	mt, err := s.cmp.MachineTypes.Get(s.cfg.ProjectID, at[0], spec.MachineType).Context(ctx).Do()
	if err != nil {
		err = classify(s.op, err, read)
		if errors.Is(err, providers.ErrNotFound) {
			return providers.NodePool{}, providers.Invalidf(s.op, "machineType", "machine type %s does not exist in %s", spec.MachineType, at[0])
		}
		return providers.NodePool{}, err
	}
	acc := spec.Accelerators
	if own := builtIn(mt); own != nil {
		if acc != nil && *acc != *own {
			return providers.NodePool{}, providers.Invalidf(s.op, "accelerators", "machine type %s comes with %d x %s, not %d x %s", spec.MachineType, own.Count, own.Type, acc.Count, acc.Type)
		}
		acc = own
	}
	labels, err := encodeLabels(spec.Labels)
	if err != nil {
		return providers.NodePool{}, providers.Invalidf(s.op, "label", "%v", err)
	}
	cfg := &container.NodeConfig{MachineType: spec.MachineType, DiskSizeGb: int64(spec.DiskGiB), Spot: spec.Spot, Labels: spec.Labels, ResourceLabels: labels}
	if acc != nil {
		// Unspecified means no driver at all (GKE's documentation): say which.
		cfg.Accelerators = []*container.AcceleratorConfig{{AcceleratorType: acc.Type, AcceleratorCount: int64(acc.Count),
			GpuDriverInstallationConfig: &container.GPUDriverInstallationConfig{GpuDriverVersion: a.cfg.GPUDriverVersion}}}
	}
	np := &container.NodePool{
		Name: spec.Name, InitialNodeCount: int64(initialCount(spec.Size)), ForceSendFields: []string{"InitialNodeCount"},
		Locations: zones, Config: cfg, Management: &container.NodeManagement{AutoRepair: true, AutoUpgrade: true},
	}
	if spec.Autoscaling != nil {
		np.Autoscaling = autoscalingOf(spec.Autoscaling)
	}
	opn, err := s.ctr.Projects.Locations.Clusters.NodePools.Create(full.ID, &container.CreateNodePoolRequest{NodePool: np}).Context(ctx).Do()
	if err != nil {
		return providers.NodePool{}, classify(s.op, err, mutate)
	}
	if opn.Status == "DONE" && opn.Error != nil {
		return providers.NodePool{}, opError(s.op, "create node pool "+spec.Name, opn.Error.Code, opn.Error.Message)
	}
	sh := spec.Shape
	sh.Accelerators, sh.Zones = acc, slices.Clone(at)
	slices.Sort(sh.Zones)
	if sh.DiskGiB == 0 {
		sh.DiskGiB = defaultDiskGiB
	}
	return providers.NodePool{Name: spec.Name, Shape: sh, Size: providers.Size{NodeCount: initialCount(spec.Size), Autoscaling: spec.Autoscaling},
		Labels: maps.Clone(spec.Labels), Status: providers.NodePoolProvisioning, Message: "GKE operation " + opn.Name + " creates the node pool"}, nil
}

// sameShape reports whether a spec asks for the shape a pool has; what the
// spec leaves to GKE (accelerators, disk, zones) matches what GKE chose.
func sameShape(have providers.Shape, want providers.Shape) bool {
	disk := want.DiskGiB
	if disk == 0 {
		disk = defaultDiskGiB
	}
	zones := slices.Sorted(slices.Values(want.Zones))
	return have.MachineType == want.MachineType && have.Spot == want.Spot && have.DiskGiB == disk &&
		(len(zones) == 0 || slices.Equal(have.Zones, zones)) &&
		(want.Accelerators == nil || (have.Accelerators != nil && *have.Accelerators == *want.Accelerators))
}

func (a *Adapter) convergePool(ctx context.Context, s *session, cluster providers.ClusterRef, p string, np *container.NodePool, spec providers.NodePoolSpec) (providers.NodePool, error) {
	v, err := s.poolView(ctx, np)
	if err != nil {
		return providers.NodePool{}, err
	}
	switch {
	case v.Status == providers.NodePoolDeleting:
		return providers.NodePool{}, providers.Errorf(s.op, providers.Conflict, providers.None, "node pool %s is being deleted; wait until it is gone", p)
	case !sameShape(v.Shape, spec.Shape):
		return providers.NodePool{}, providers.Invalidf(s.op, "shapeChange", "node pool %s: machine type, GPUs, Spot, disk and zones never change in place; make a new node pool", spec.Name)
	}
	var steps []step
	if spec.Labels != nil && !maps.Equal(v.Labels, spec.Labels) {
		steps = append(steps, s.labelStep(p, np, spec.Labels))
	}
	steps = append(steps, s.sizeSteps(p, v.Size, spec.Size)...)
	if len(steps) > 0 || spec.Version == "" || versionIs(np.Version, spec.Version) {
		// Labels and size first; an upgrade is the next call's.
		return a.change(ctx, s, cluster, v, steps, spec.Size, spec.Labels)
	}
	return a.upgradePool(ctx, s, cluster, p, np, v, spec)
}

// upgradePool raises a pool's nodes one minor toward spec.Version with
// nodePools.update (nodeVersion), never past the control plane's version.
// A pool whose own operation runs is left to finish (the next call goes
// on), so an upgrade is never sent twice; the etag refuses one sent after
// the pool changed since it was read.
func (a *Adapter) upgradePool(ctx context.Context, s *session, cluster providers.ClusterRef, p string, np *container.NodePool, v providers.NodePool, spec providers.NodePoolSpec) (providers.NodePool, error) {
	c, _, err := s.getCluster(ctx, cluster)
	if err != nil {
		return providers.NodePool{}, err
	}
	next, err := providers.NextPoolVersion(s.op, spec.Name, np.Version, spec.Version, c.CurrentMasterVersion)
	if err != nil || next == "" {
		return v, err
	}
	switch np.Status {
	case "RECONCILING":
		return v, nil
	case "RUNNING":
	default:
		return providers.NodePool{}, providers.Errorf(s.op, providers.Conflict, providers.None, "node pool %s is %s; it is upgraded once RUNNING", spec.Name, np.Status)
	}
	image := ""
	if np.Config != nil {
		image = np.Config.ImageType
	}
	opn, err := s.ctr.Projects.Locations.Clusters.NodePools.Update(p, &container.UpdateNodePoolRequest{NodeVersion: next, ImageType: image, Etag: np.Etag}).Context(ctx).Do()
	if err != nil {
		return providers.NodePool{}, classify(s.op, err, mutate)
	}
	if opn.Status == "DONE" && opn.Error != nil {
		return providers.NodePool{}, opError(s.op, "upgrading node pool "+spec.Name, opn.Error.Code, opn.Error.Message)
	}
	v.Status, v.Operation = providers.NodePoolUpdating, opn.Name
	v.Message = fmt.Sprintf("GKE operation %s upgrades the nodes from %s to %s", opn.Name, np.Version, next)
	return v, nil
}

// change runs a pool's steps and returns the pool as it will be.
func (a *Adapter) change(ctx context.Context, s *session, cluster providers.ClusterRef, v providers.NodePool, steps []step, size providers.Size, labels map[string]string) (providers.NodePool, error) {
	if len(steps) == 0 {
		return v, nil
	}
	if err := s.run(ctx, a, cluster.Location, steps); err != nil {
		return providers.NodePool{}, err
	}
	v.Status, v.Size = providers.NodePoolUpdating, size
	if size.Autoscaling != nil {
		v.NodeCount = initialCount(size)
	}
	if labels != nil {
		v.Labels = maps.Clone(labels)
	}
	return v, nil
}

// labelStep replaces the pool's node labels. UpdateNodePool marks
// nodeVersion and imageType Required: they are sent as the pool has them,
// so nothing but the labels changes. The etag guards against a change made
// since the read.
func (s *session) labelStep(p string, np *container.NodePool, labels map[string]string) step {
	image := ""
	if np.Config != nil {
		image = np.Config.ImageType
	}
	req := &container.UpdateNodePoolRequest{NodeVersion: np.Version, ImageType: image, Labels: &container.NodeLabels{Labels: labels}, Etag: np.Etag}
	if len(labels) == 0 {
		req.Labels.ForceSendFields = []string{"Labels"}
	}
	return step{"replacing the node pool's labels", func(ctx context.Context) (*container.Operation, error) {
		return s.ctr.Projects.Locations.Clusters.NodePools.Update(p, req).Context(ctx).Do()
	}}
}

// sizeSteps take a pool from one size to another. With the same
// autoscaling on, the count is the autoscaler's and nothing is done; a
// fixed pool is set to its count. Switching autoscaling off goes first
// (then the count); switching it on or moving its bounds sets the count
// first (inside the bounds) and the bounds last. Each order is safe to
// repeat from any point: a call made after a partial run sees what was
// done and does the rest.
func (s *session) sizeSteps(p string, have, want providers.Size) []step {
	pools := s.ctr.Projects.Locations.Clusters.NodePools
	setSize := func(n int) step {
		return step{"resizing the node pool", func(ctx context.Context) (*container.Operation, error) {
			return pools.SetSize(p, &container.SetNodePoolSizeRequest{NodeCount: int64(n), ForceSendFields: []string{"NodeCount"}}).Context(ctx).Do()
		}}
	}
	setAutoscaling := func(as *providers.Autoscaling) step {
		return step{"setting the node pool's autoscaling", func(ctx context.Context) (*container.Operation, error) {
			return pools.SetAutoscaling(p, &container.SetNodePoolAutoscalingRequest{Autoscaling: autoscalingOf(as)}).Context(ctx).Do()
		}}
	}
	sameBounds := (have.Autoscaling == nil) == (want.Autoscaling == nil) && (have.Autoscaling == nil || *have.Autoscaling == *want.Autoscaling)
	var steps []step
	switch {
	case sameBounds && want.Autoscaling == nil && have.NodeCount != want.NodeCount:
		steps = append(steps, setSize(want.NodeCount))
	case sameBounds:
	case want.Autoscaling == nil:
		steps = append(steps, setAutoscaling(nil))
		if have.NodeCount != want.NodeCount {
			steps = append(steps, setSize(want.NodeCount))
		}
	default:
		if n := initialCount(want); have.NodeCount != n {
			steps = append(steps, setSize(n))
		}
		steps = append(steps, setAutoscaling(want.Autoscaling))
	}
	return steps
}

// ResizeNodePool changes a pool's size in place.
func (a *Adapter) ResizeNodePool(ctx context.Context, acct providers.Account, cluster providers.ClusterRef, name string, size providers.Size) (providers.NodePool, error) {
	const op = "ResizeNodePool"
	s, err := a.open(ctx, op, acct)
	if err != nil {
		return providers.NodePool{}, err
	}
	if err := checkSize(op, size); err != nil {
		return providers.NodePool{}, err
	}
	np, p, err := s.getPool(ctx, cluster, name)
	if err != nil {
		return providers.NodePool{}, err
	}
	v, err := s.poolView(ctx, np)
	if err != nil {
		return providers.NodePool{}, err
	}
	if v.Status == providers.NodePoolDeleting {
		return providers.NodePool{}, providers.Errorf(op, providers.Conflict, providers.None, "node pool %s is being deleted", p)
	}
	return a.change(ctx, s, cluster, v, s.sizeSteps(p, v.Size, size), size, nil)
}

// DeleteNodePool starts deleting one of our pools. A pool without our
// substrate-pool label (in its node labels or resource labels) is the
// owner's, on an adopted cluster, and is refused.
func (a *Adapter) DeleteNodePool(ctx context.Context, acct providers.Account, cluster providers.ClusterRef, name string) (providers.NodePool, error) {
	const op = "DeleteNodePool"
	s, err := a.open(ctx, op, acct)
	if err != nil {
		return providers.NodePool{}, err
	}
	np, p, err := s.getPool(ctx, cluster, name)
	if err != nil {
		return providers.NodePool{}, err
	}
	v := providers.NodePool{Name: np.Name, Shape: poolShape(np), Status: poolStatus(np.Status),
		Size: providers.Size{NodeCount: int(np.InitialNodeCount), Autoscaling: poolAutoscaling(np)}}
	if np.Config != nil {
		v.Labels = maps.Clone(np.Config.Labels)
	}
	if v.Status == providers.NodePoolDeleting {
		return v, nil
	}
	ours := v.Labels[providers.LabelSubstratePool] != ""
	if np.Config != nil {
		ours = ours || decodeLabels(np.Config.ResourceLabels)[providers.LabelSubstratePool] != ""
	}
	if !ours {
		return providers.NodePool{}, providers.Invalidf(op, "notOurs", "node pool %s carries no %s label: fleet-agent deletes only node pools it made", p, providers.LabelSubstratePool)
	}
	if _, err := s.ctr.Projects.Locations.Clusters.NodePools.Delete(p).Context(ctx).Do(); err != nil {
		err = classify(op, err, mutate)
		if errors.Is(err, providers.ErrNotFound) {
			return providers.NodePool{}, providers.NotFoundf(op, "node pool %s not found", p)
		}
		return providers.NodePool{}, err
	}
	v.Status = providers.NodePoolDeleting
	return v, nil
}
