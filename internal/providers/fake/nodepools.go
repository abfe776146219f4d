package fake

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/fleet-agent/fleet-agent/internal/providers"
)

// defaultDiskGiB is the disk a node pool gets when it asks for none.
const defaultDiskGiB = 100

// runningCluster finds a cluster that can take a node pool change: one that
// is running. A cluster still being made, upgraded or deleted is busy
// (Conflict), as on the real providers.
func (f *Fake) runningCluster(a account, ref providers.ClusterRef) (*ClusterRecord, error) {
	c, err := f.mustFind(a, ref)
	if err != nil {
		return nil, err
	}
	if c.Status != providers.ClusterRunning {
		return nil, providers.Errorf("", providers.Conflict, providers.None, "cluster %s is %s", ref, c.Status)
	}
	return c, nil
}

func (f *Fake) checkSize(s providers.Size) error {
	if s.NodeCount < 0 || s.NodeCount > 1000 {
		return providers.Invalidf("", "size", "nodeCount %d is not between 0 and 1000", s.NodeCount)
	}
	if as := s.Autoscaling; as != nil {
		if as.MinNodes < 0 || as.MaxNodes < 1 || as.MinNodes > as.MaxNodes || as.MaxNodes > 1000 {
			return providers.Invalidf("", "autoscaling", "autoscaling needs 0 <= minNodes <= maxNodes, 1 <= maxNodes <= 1000")
		}
		return nil
	}
	if s.NodeCount == 0 && !f.cfg.ZeroNodes {
		return providers.Invalidf("", "zeroNodes", "a fixed-size node pool needs at least one node here; use autoscaling with minNodes 0")
	}
	return nil
}

// normalSize puts an autoscaled pool's count within its bounds, as the
// providers' autoscalers do.
func normalSize(s providers.Size) providers.Size {
	if as := s.Autoscaling; as != nil {
		a := *as
		s.Autoscaling = &a
		s.NodeCount = min(max(s.NodeCount, a.MinNodes), a.MaxNodes)
	}
	return s
}

func sameSize(a, b providers.Size) bool {
	if a.NodeCount != b.NodeCount || (a.Autoscaling == nil) != (b.Autoscaling == nil) {
		return false
	}
	return a.Autoscaling == nil || *a.Autoscaling == *b.Autoscaling
}

// normalShape fills what a spec may leave to the provider (accelerators of
// the machine type, the region's zones, the default disk), so that two
// specs that mean the same shape compare equal.
func (f *Fake) normalShape(c *ClusterRecord, s providers.Shape) (providers.Shape, error) {
	region := f.cfg.region(c.Location)
	m, ok := f.cfg.machineType(region, s.MachineType)
	if !ok {
		return s, providers.Invalidf("", "machineType", "machine type %q does not exist in %s", s.MachineType, region)
	}
	have := describe(m, c.Location).Accelerators
	switch {
	case s.Accelerators == nil:
		s.Accelerators = have
	case have == nil || *have != *s.Accelerators:
		return s, providers.Invalidf("", "accelerators", "machine type %s has %s, not %d x %s", s.MachineType, gpuText(have), s.Accelerators.Count, s.Accelerators.Type)
	default:
		a := *s.Accelerators
		s.Accelerators = &a
	}
	if s.Spot && !f.cfg.Spot {
		return s, providers.Invalidf("", "spotUnsupported", "this provider has no Spot node pools")
	}
	zones := f.cfg.zonesOf(region)
	if len(s.Zones) == 0 {
		s.Zones = zones
	} else {
		s.Zones = slices.Clone(s.Zones)
		for _, z := range s.Zones {
			if !slices.Contains(zones, z) {
				return s, providers.Invalidf("", "zone", "zone %q is not in %s", z, region)
			}
		}
	}
	slices.Sort(s.Zones)
	s.Zones = slices.Compact(s.Zones)
	switch {
	case s.DiskGiB == 0:
		s.DiskGiB = defaultDiskGiB
	case s.DiskGiB < 10 || s.DiskGiB > 65536:
		return s, providers.Invalidf("", "disk", "diskGiB %d is not between 10 and 65536", s.DiskGiB)
	}
	return s, nil
}

func gpuText(a *providers.Accelerators) string {
	if a == nil {
		return "no GPUs"
	}
	return strconv.Itoa(a.Count) + " x " + a.Type
}

func sameShape(a, b providers.Shape) bool {
	return a.MachineType == b.MachineType && a.Spot == b.Spot && a.DiskGiB == b.DiskGiB &&
		slices.Equal(a.Zones, b.Zones) &&
		(a.Accelerators == nil) == (b.Accelerators == nil) &&
		(a.Accelerators == nil || *a.Accelerators == *b.Accelerators)
}

func poolView(p *NodePoolRecord) providers.NodePool {
	v := p.NodePool
	v.Zones = slices.Clone(p.Zones)
	v.Labels = maps.Clone(p.Labels)
	if p.Accelerators != nil {
		a := *p.Accelerators
		v.Accelerators = &a
	}
	if p.Autoscaling != nil {
		a := *p.Autoscaling
		v.Autoscaling = &a
	}
	if p.Op != nil {
		v.Message = p.Op.Kind + " in progress"
		if p.Op.Kind == "upgrade" {
			v.Message = fmt.Sprintf("upgrading from %s to %s: step %d of %d", p.Version, p.Op.Target, p.Op.Done, p.Op.Steps)
		}
	}
	return v
}

// EnsureNodePool creates a node pool or converges the one of the same name.
func (f *Fake) EnsureNodePool(ctx context.Context, acct providers.Account, cluster providers.ClusterRef, spec providers.NodePoolSpec) (providers.NodePool, error) {
	a, fx, finish, err := f.callFault(ctx, "EnsureNodePool", &acct)
	if err != nil {
		return providers.NodePool{}, err
	}
	if err := f.lockFor(ctx, "EnsureNodePool"); err != nil {
		return providers.NodePool{}, err
	}
	defer f.unlock()
	p, err := f.ensureNodePool(a, cluster, spec)
	if err != nil {
		return providers.NodePool{}, finish(err)
	}
	v := poolView(p)
	if c, err := f.runningCluster(a, cluster); err == nil {
		f.after(fx, c, spec.Name, false)
	}
	if err := f.persist(); err != nil {
		return providers.NodePool{}, err
	}
	if fx.vanish || fx.workFails {
		return v, finish(nil)
	}
	if fx.blank {
		return providers.NodePool{}, finish(nil)
	}
	return poolView(p), finish(nil)
}

func (f *Fake) ensureNodePool(a account, ref providers.ClusterRef, spec providers.NodePoolSpec) (*NodePoolRecord, error) {
	if !dnsLabel.MatchString(spec.Name) || len(spec.Name) > 63 {
		return nil, providers.Invalidf("", "name", "node pool name %q must be a DNS label of at most 63 characters", spec.Name)
	}
	c, err := f.runningCluster(a, ref)
	if err != nil {
		return nil, err
	}
	shape, err := f.normalShape(c, spec.Shape)
	if err != nil {
		return nil, err
	}
	if err := f.checkSize(spec.Size); err != nil {
		return nil, err
	}
	size := normalSize(spec.Size)
	p := c.NodePools[spec.Name]
	if p == nil {
		p = &NodePoolRecord{NodePool: providers.NodePool{
			Name: spec.Name, ID: f.nextID("nodepool", c.ID+"/"+spec.Name),
			Shape: shape, Size: size, Labels: maps.Clone(spec.Labels),
			Status: providers.NodePoolProvisioning, Version: c.Version,
		}, Op: f.newOp("create", f.cfg.Steps.NodePool), ClientTokens: addToken(nil, spec.ClientToken)}
		c.NodePools[spec.Name] = p
		f.settlePool(c, p)
		return p, nil
	}
	switch {
	case p.Status == providers.NodePoolDeleting:
		return nil, providers.Errorf("", providers.Conflict, providers.None, "node pool %s is being deleted", spec.Name)
	case !sameShape(p.Shape, shape):
		return nil, providers.Invalidf("", "shapeChange", "node pool %s: machine type, GPUs, Spot, disk and zones never change in place; make a new node pool", spec.Name)
	}
	p.ClientTokens = addToken(p.ClientTokens, spec.ClientToken)
	if spec.Labels != nil {
		p.Labels = maps.Clone(spec.Labels)
	}
	if !sameSize(p.Size, size) {
		return p, f.resize(c, p, size) // the upgrade is the next call's
	}
	return p, f.upgrade(c, p, spec.Version)
}

// upgrade starts a pool's kubelets one minor toward want, never past the
// control plane, as an operation of its own with an id the caller can
// record. The same upgrade asked again while it runs is that upgrade.
func (f *Fake) upgrade(c *ClusterRecord, p *NodePoolRecord, want string) error {
	have := poolVersion(c, p)
	next, err := providers.NextPoolVersion("", p.Name, have, want, c.Version)
	if err != nil || next == "" {
		return err
	}
	if p.Op != nil {
		if p.Op.Kind == "upgrade" && p.Op.Target == next {
			return nil
		}
		return providers.Errorf("", providers.Conflict, providers.None, "node pool %s: a %s is in progress", p.Name, p.Op.Kind)
	}
	p.Version, p.Status = have, providers.NodePoolUpdating
	p.Op = f.newOp("upgrade", f.cfg.Steps.Update)
	p.Op.Target, p.Op.ID = next, f.nextID("upgrade", c.ID+"/"+p.Name+"/"+next)
	p.Operation = p.Op.ID
	f.settlePool(c, p)
	return nil
}

// resize changes a pool's size in place, as an operation of its own.
func (f *Fake) resize(c *ClusterRecord, p *NodePoolRecord, size providers.Size) error {
	if sameSize(p.Size, size) {
		return nil
	}
	if p.Op != nil {
		return providers.Errorf("", providers.Conflict, providers.None, "node pool %s: a %s is in progress", p.Name, p.Op.Kind)
	}
	p.Size = size
	p.Status = providers.NodePoolUpdating
	p.Op = f.newOp("update", f.cfg.Steps.Update)
	f.settlePool(c, p)
	return nil
}

// GetNodePool reads a node pool; each read moves its operation one step.
func (f *Fake) GetNodePool(ctx context.Context, acct providers.Account, cluster providers.ClusterRef, name string) (providers.NodePool, error) {
	a, finish, err := f.call(ctx, "GetNodePool", &acct)
	if err != nil {
		return providers.NodePool{}, err
	}
	// Runs after the unlock: the pools' Nodes follow what this saw.
	defer f.syncNodesQuiet(ctx)
	if err := f.lockFor(ctx, "GetNodePool"); err != nil {
		return providers.NodePool{}, err
	}
	defer f.unlock()
	var view providers.NodePool
	c, err := f.mustFind(a, cluster)
	if err == nil {
		p := c.NodePools[name]
		if p != nil {
			observe(p.Op)
		}
		if p != nil && f.settlePool(c, p) {
			view = poolView(p)
		} else {
			err = providers.NotFoundf("", "node pool %s not found in cluster %s", name, cluster)
		}
	}
	if perr := f.persist(); perr != nil {
		return providers.NodePool{}, perr
	}
	return view, finish(err)
}

// changeable is the node pool a change in place is asked of: NotFound when
// there is none, Conflict while it is being deleted.
func changeable(c *ClusterRecord, cluster providers.ClusterRef, name string) (*NodePoolRecord, error) {
	p := c.NodePools[name]
	if p == nil {
		return nil, providers.NotFoundf("", "node pool %s not found in cluster %s", name, cluster)
	}
	if p.Status == providers.NodePoolDeleting {
		return nil, providers.Errorf("", providers.Conflict, providers.None, "node pool %s is being deleted", name)
	}
	return p, nil
}

// ResizeNodePool changes a pool's size in place.
func (f *Fake) ResizeNodePool(ctx context.Context, acct providers.Account, cluster providers.ClusterRef, name string, size providers.Size) (providers.NodePool, error) {
	a, fx, finish, err := f.callFault(ctx, "ResizeNodePool", &acct)
	if err != nil {
		return providers.NodePool{}, err
	}
	if err := f.lockFor(ctx, "ResizeNodePool"); err != nil {
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
	if err := f.resize(c, p, normalSize(size)); err != nil {
		return providers.NodePool{}, finish(err)
	}
	v := poolView(p)
	f.after(fx, c, name, false)
	if err := f.persist(); err != nil {
		return providers.NodePool{}, err
	}
	return v, finish(nil)
}

// ListNodePools lists a cluster's pools by name; each listed pool's
// operation moves one step. With listLag it answers the pools as they were
// that long ago (none for a cluster newer than that, the last ones for a
// cluster gone since).
func (f *Fake) ListNodePools(ctx context.Context, acct providers.Account, cluster providers.ClusterRef) ([]providers.NodePool, error) {
	a, finish, err := f.call(ctx, "ListNodePools", &acct)
	if err != nil {
		return nil, err
	}
	// Runs after the unlock: the pools' Nodes follow what this saw.
	defer f.syncNodesQuiet(ctx)
	if err := f.lockFor(ctx, "ListNodePools"); err != nil {
		return nil, err
	}
	defer f.unlock()
	c, err := f.findSettled(a, cluster)
	if err != nil {
		return nil, finish(err)
	}
	out := []providers.NodePool{}
	if c != nil {
		for _, name := range sortedKeys(c.NodePools) {
			p := c.NodePools[name]
			observe(p.Op)
			if f.settlePool(c, p) {
				out = append(out, poolView(p))
			}
		}
	}
	if err := f.persist(); err != nil {
		return nil, err
	}
	if f.cfg.ListLag > 0 {
		// The pools' operations moved on what they are now; the answer is
		// what the listing showed listLag ago.
		if pools, ok := f.laggedPools(a, cluster, c); ok {
			return pools, finish(nil)
		}
	}
	if c == nil {
		return nil, finish(providers.NotFoundf("", "cluster %s not found", cluster))
	}
	return out, finish(nil)
}

// DeleteNodePool starts deleting a pool.
func (f *Fake) DeleteNodePool(ctx context.Context, acct providers.Account, cluster providers.ClusterRef, name string) (providers.NodePool, error) {
	a, fx, finish, err := f.callFault(ctx, "DeleteNodePool", &acct)
	if err != nil {
		f.vanishNow(fx, a, cluster, name)
		return providers.NodePool{}, err
	}
	if err := f.lockFor(ctx, "DeleteNodePool"); err != nil {
		return providers.NodePool{}, err
	}
	defer f.unlock()
	c, err := f.mustFind(a, cluster)
	if err != nil {
		return providers.NodePool{}, finish(err)
	}
	p := c.NodePools[name]
	if p == nil {
		return providers.NodePool{}, finish(providers.NotFoundf("", "node pool %s not found in cluster %s", name, cluster))
	}
	if p.Status != providers.NodePoolDeleting {
		p.Status = providers.NodePoolDeleting
		p.Op = f.newOp("delete", f.cfg.Steps.Delete)
	}
	v := poolView(p)
	f.after(fx, c, name, true)
	f.settlePool(c, p)
	if err := f.persist(); err != nil {
		return providers.NodePool{}, err
	}
	return v, finish(nil)
}
