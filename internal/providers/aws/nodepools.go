package aws

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"

	"github.com/fleet-agent/fleet-agent/internal/providers"
)

// A flavor's node pool is one managed node group. Its `nodes` is per zone
// (reference "Provider differences"): EKS's desiredSize is the total of the
// group's Auto Scaling group across its subnets, so the adapter multiplies
// by the number of zones of the group's subnets, and divides when reading.
//
// Whether a group is of fixed size or autoscaled is kept in the tag
// fleet-agent.dev/size: a fixed group of 0 nodes must still have maxSize 1,
// which the scaling numbers alone cannot tell from autoscaling 0..1. A
// group without the tag (the owner's, on an adopted cluster) is fixed when
// minSize equals maxSize.
const (
	tagSize        = "fleet-agent.dev/size"
	sizeFixed      = "fixed"
	sizeAutoscaled = "autoscaled"
	// defaultDiskGiB is EKS's disk size when a node group names none.
	defaultDiskGiB = 20
)

var nodegroupStatus = map[ekstypes.NodegroupStatus]providers.NodePoolStatus{
	ekstypes.NodegroupStatusCreating: providers.NodePoolProvisioning,
	ekstypes.NodegroupStatusActive:   providers.NodePoolRunning,
	ekstypes.NodegroupStatusUpdating: providers.NodePoolUpdating,
	ekstypes.NodegroupStatusDeleting: providers.NodePoolDeleting,
	// A group that failed to be made or deleted, or that runs short of the
	// nodes it wants (a stockout: DEGRADED until a scale-out succeeds), is
	// an error with EKS's health issues as the message.
	ekstypes.NodegroupStatusCreateFailed: providers.NodePoolError,
	ekstypes.NodegroupStatusDeleteFailed: providers.NodePoolError,
	ekstypes.NodegroupStatusDegraded:     providers.NodePoolError,
}

func checkSize(op string, s providers.Size) error {
	if s.NodeCount < 0 || s.NodeCount > 1000 {
		return providers.Invalidf(op, "size", "nodeCount %d is not between 0 and 1000", s.NodeCount)
	}
	if as := s.Autoscaling; as != nil && (as.MinNodes < 0 || as.MaxNodes < 1 || as.MinNodes > as.MaxNodes || as.MaxNodes > 1000) {
		return providers.Invalidf(op, "autoscaling", "autoscaling needs 0 <= minNodes <= maxNodes and 1 <= maxNodes <= 1000")
	}
	return nil
}

// scaling is a node group's scaling config and size tag.
type scaling struct {
	min, max, desired int32
	tag               string
}

// scalingFor turns a size per zone into EKS's totals over z zones.
// current is the group's desiredSize now (-1 for a new group): under
// autoscaling the count is the autoscaler's, so an existing group keeps it
// within the new bounds unless explicit says the count is wanted too.
func scalingFor(size providers.Size, z int, current int32, explicit bool) scaling {
	n := int32(size.NodeCount) * int32(z)
	as := size.Autoscaling
	if as == nil {
		return scaling{min: n, max: max(n, 1), desired: n, tag: sizeFixed}
	}
	lo, hi := int32(as.MinNodes)*int32(z), int32(as.MaxNodes)*int32(z)
	d := n
	if current >= 0 && !explicit {
		d = current
	}
	return scaling{min: lo, max: hi, desired: min(max(d, lo), hi), tag: sizeAutoscaled}
}

func currentScaling(ng *ekstypes.Nodegroup) scaling {
	sc := scaling{tag: ng.Tags[tagSize]}
	if c := ng.ScalingConfig; c != nil {
		sc.min, sc.max, sc.desired = sdkaws.ToInt32(c.MinSize), sdkaws.ToInt32(c.MaxSize), sdkaws.ToInt32(c.DesiredSize)
	}
	if sc.tag == "" {
		sc.tag = sizeAutoscaled
		if sc.min == sc.max || (sc.min == 0 && sc.desired == 0 && sc.max == 1) {
			sc.tag = sizeFixed
		}
	}
	return sc
}

func perZone(n int32, z int) int {
	if z <= 1 {
		return int(n)
	}
	return int((n + int32(z) - 1) / int32(z))
}

func (sc scaling) size(z int) providers.Size {
	out := providers.Size{NodeCount: perZone(sc.desired, z)}
	if sc.tag == sizeAutoscaled {
		out.Autoscaling = &providers.Autoscaling{MinNodes: perZone(sc.min, z), MaxNodes: perZone(sc.max, z)}
	}
	return out
}

// zonesOf are the sorted zones of a node group's subnets.
func (s *session) zonesOf(ctx context.Context, subnets []string) ([]string, error) {
	zoneOf, err := s.subnetZones(ctx, subnets)
	if err != nil {
		return nil, err
	}
	var zones []string
	for _, id := range subnets {
		if z := zoneOf[id]; !slices.Contains(zones, z) {
			zones = append(zones, z)
		}
	}
	slices.Sort(zones)
	return zones, nil
}

// poolSubnets are the account's subnets in the zones asked for (every
// zone of the account when none).
func (s *session) poolSubnets(ctx context.Context, zones []string) ([]string, []string, error) {
	all, err := s.nodeSubnets(ctx)
	if err != nil {
		return nil, nil, err
	}
	var ids, got []string
	for _, sn := range all {
		if len(zones) == 0 || slices.Contains(zones, sn.zone) {
			ids = append(ids, sn.id)
			if !slices.Contains(got, sn.zone) {
				got = append(got, sn.zone)
			}
		}
	}
	for _, z := range zones {
		if !slices.Contains(got, z) {
			have, _ := s.accountZones(ctx)
			return nil, nil, providers.Invalidf(s.op, "zone", "zone %s has no subnet among the account's eksSubnetIds (its zones: %s)", z, strings.Join(have, ", "))
		}
	}
	slices.Sort(got)
	if len(ids) == 0 {
		return nil, nil, providers.Invalidf(s.op, "subnets", "the account has no subnet for nodes (eksSubnetIds, zones)")
	}
	return ids, got, nil
}

func (s *session) describeNodegroup(ctx context.Context, cluster, name string) (*ekstypes.Nodegroup, error) {
	out, err := s.eks.DescribeNodegroup(ctx, &eks.DescribeNodegroupInput{ClusterName: sdkaws.String(cluster), NodegroupName: sdkaws.String(name)})
	if err != nil {
		return nil, s.fail("DescribeNodegroup", false, err)
	}
	return out.Nodegroup, nil
}

// poolView reads a node group as a node pool. The zones of its subnets and
// its instance type's GPUs come from the caches, so a read is one call once
// they are warm.
func (s *session) poolView(ctx context.Context, ng *ekstypes.Nodegroup) (providers.NodePool, error) {
	zones, err := s.zonesOf(ctx, ng.Subnets)
	if err != nil {
		return providers.NodePool{}, err
	}
	sc := currentScaling(ng)
	p := providers.NodePool{
		Name: sdkaws.ToString(ng.NodegroupName), ID: sdkaws.ToString(ng.NodegroupArn),
		Shape: providers.Shape{
			Spot: ng.CapacityType == ekstypes.CapacityTypesSpot, DiskGiB: int(sdkaws.ToInt32(ng.DiskSize)), Zones: zones,
		},
		Size:    sc.size(max(len(zones), 1)),
		Labels:  maps.Clone(ng.Labels),
		Status:  nodegroupStatus[ng.Status],
		Version: sdkaws.ToString(ng.Version),
	}
	if len(ng.InstanceTypes) > 0 {
		p.MachineType = ng.InstanceTypes[0]
		if info, err := s.instanceType(ctx, p.MachineType); err == nil && info.gpus != nil {
			g := *info.gpus
			p.Accelerators = &g
		} else if err != nil && !errors.Is(err, providers.ErrNotFound) {
			return providers.NodePool{}, err
		}
	}
	if p.Status == "" {
		p.Status = providers.NodePoolError
		p.Message = "EKS reports status " + string(ng.Status)
	}
	if ng.Health != nil && len(ng.Health.Issues) > 0 {
		var parts []string
		for _, i := range ng.Health.Issues {
			parts = append(parts, string(i.Code)+": "+sdkaws.ToString(i.Message))
		}
		p.Message = strings.Join(parts, "; ")
	}
	return p, nil
}

// amiType picks the AMI EKS needs for an instance type: NVIDIA drivers on a
// type with NVIDIA GPUs, the right architecture.
func amiType(info *instanceInfo) ekstypes.AMITypes {
	switch {
	case info.nvidia && info.arm:
		return ekstypes.AMITypesAl2023Arm64Nvidia
	case info.nvidia:
		return ekstypes.AMITypesAl2023X8664Nvidia
	case info.arm:
		return ekstypes.AMITypesAl2023Arm64Standard
	}
	return ekstypes.AMITypesAl2023X8664Standard
}

// EnsureNodePool creates a flavor's node group, or converges the one of
// that name: size and labels in place, anything of its shape refused.
func (a *Adapter) EnsureNodePool(ctx context.Context, acct providers.Account, cluster providers.ClusterRef, spec providers.NodePoolSpec) (providers.NodePool, error) {
	s, cname, err := a.openCluster(ctx, "EnsureNodePool", acct, cluster)
	if err != nil {
		return providers.NodePool{}, err
	}
	if err := s.cfg.needs(acct, false, true, true); err != nil {
		return providers.NodePool{}, named(s.op, err)
	}
	if err := checkSize(s.op, spec.Size); err != nil {
		return providers.NodePool{}, err
	}
	ng, err := s.describeNodegroup(ctx, cname, spec.Name)
	if errors.Is(err, providers.ErrNotFound) {
		p, cerr := s.createNodegroup(ctx, cname, spec)
		if providers.ClassOf(cerr) != providers.Conflict {
			return p, cerr
		}
		// Made meanwhile (a lost answer), or the cluster is busy: converge
		// the group if it is there, else say the cluster is busy.
		if ng, err = s.describeNodegroup(ctx, cname, spec.Name); errors.Is(err, providers.ErrNotFound) {
			return providers.NodePool{}, cerr
		}
	}
	if err != nil {
		return providers.NodePool{}, err
	}
	return s.convergePool(ctx, cname, ng, spec)
}

func (s *session) createNodegroup(ctx context.Context, cname string, spec providers.NodePoolSpec) (providers.NodePool, error) {
	info, err := s.instanceType(ctx, spec.MachineType)
	if errors.Is(err, providers.ErrNotFound) {
		return providers.NodePool{}, providers.Invalidf(s.op, "machineType", "machine type %s does not exist in %s", spec.MachineType, s.cfg.Region)
	}
	if err != nil {
		return providers.NodePool{}, err
	}
	if want := spec.Accelerators; want != nil && (info.gpus == nil || *info.gpus != *want) {
		return providers.NodePool{}, providers.Invalidf(s.op, "accelerators", "machine type %s has %s, not %d x %s", spec.MachineType, gpuText(info.gpus), want.Count, want.Type)
	}
	subnets, zones, err := s.poolSubnets(ctx, spec.Zones)
	if err != nil {
		return providers.NodePool{}, err
	}
	disk := spec.DiskGiB
	if disk == 0 {
		disk = defaultDiskGiB
	}
	sc := scalingFor(spec.Size, len(zones), -1, true)
	tags := maps.Clone(spec.Labels)
	if tags == nil {
		tags = map[string]string{}
	}
	tags[tagSize] = sc.tag
	capacity := ekstypes.CapacityTypesOnDemand
	if spec.Spot {
		capacity = ekstypes.CapacityTypesSpot
	}
	out, err := s.eks.CreateNodegroup(ctx, &eks.CreateNodegroupInput{
		ClusterName:   sdkaws.String(cname),
		NodegroupName: sdkaws.String(spec.Name),
		NodeRole:      sdkaws.String(s.cfg.EKSNodeRoleArn),
		Subnets:       subnets,
		InstanceTypes: []string{spec.MachineType},
		AmiType:       amiType(info),
		CapacityType:  capacity,
		DiskSize:      sdkaws.Int32(int32(disk)),
		Labels:        spec.Labels,
		Tags:          tags,
		ScalingConfig: &ekstypes.NodegroupScalingConfig{MinSize: sdkaws.Int32(sc.min), MaxSize: sdkaws.Int32(sc.max), DesiredSize: sdkaws.Int32(sc.desired)},
		ClientRequestToken: sdkaws.String(token("nodegroup", spec.ClientToken, s.cfg.Region, cname, spec.Name,
			spec.MachineType, strconv.FormatBool(spec.Spot), strconv.Itoa(disk), strings.Join(zones, ","))),
	})
	if err != nil {
		return providers.NodePool{}, s.fail("CreateNodegroup", true, err)
	}
	return s.poolView(ctx, out.Nodegroup)
}

func gpuText(a *providers.Accelerators) string {
	if a == nil {
		return "no GPUs"
	}
	return fmt.Sprintf("%d x %s", a.Count, a.Type)
}

// convergePool refuses a shape change and makes the size and label
// changes in place.
func (s *session) convergePool(ctx context.Context, cname string, ng *ekstypes.Nodegroup, spec providers.NodePoolSpec) (providers.NodePool, error) {
	view, err := s.poolView(ctx, ng)
	if err != nil {
		return providers.NodePool{}, err
	}
	if ng.Status == ekstypes.NodegroupStatusDeleting {
		return providers.NodePool{}, providers.Errorf(s.op, providers.Conflict, providers.None, "node group %s is being deleted; wait until it is gone", spec.Name)
	}
	_, wantZones, err := s.poolSubnets(ctx, spec.Zones)
	if err != nil {
		return providers.NodePool{}, err
	}
	disk := spec.DiskGiB
	if disk == 0 {
		disk = defaultDiskGiB
	}
	var changed []string
	if len(ng.InstanceTypes) != 1 || ng.InstanceTypes[0] != spec.MachineType {
		changed = append(changed, "machine type "+strings.Join(ng.InstanceTypes, ",")+" -> "+spec.MachineType)
	}
	if view.Spot != spec.Spot {
		changed = append(changed, fmt.Sprintf("spot %v -> %v", view.Spot, spec.Spot))
	}
	if view.DiskGiB != disk {
		changed = append(changed, fmt.Sprintf("disk %d -> %d GiB", view.DiskGiB, disk))
	}
	if !slices.Equal(view.Zones, wantZones) {
		changed = append(changed, "zones "+strings.Join(view.Zones, ",")+" -> "+strings.Join(wantZones, ","))
	}
	if len(changed) > 0 {
		return providers.NodePool{}, providers.Invalidf(s.op, "shapeChange", "node group %s: %s; machine type, Spot, disk and zones never change in place: make a new node pool", spec.Name, strings.Join(changed, "; "))
	}
	p, err := s.reconfigure(ctx, cname, ng, view, spec.Size, false, spec.Labels, spec.ClientToken)
	if err != nil || p.Status != view.Status {
		return p, err // a config update went out: the upgrade is the next call's
	}
	return s.upgradeNodegroup(ctx, cname, ng, p, spec)
}

// upgradeNodegroup raises a node group's Kubernetes version toward
// spec.Version with one UpdateNodegroupVersion. EKS moves a node group only
// to its cluster's version, in one update however far behind the group
// is, so the control plane leads and the kubelets never pass it. A group
// already UPDATING is left to finish (the next call goes on), so an
// upgrade is never sent twice; the token names the step and the version it
// starts from, so a repeat after a lost answer is the same request.
func (s *session) upgradeNodegroup(ctx context.Context, cname string, ng *ekstypes.Nodegroup, view providers.NodePool, spec providers.NodePoolSpec) (providers.NodePool, error) {
	have := sdkaws.ToString(ng.Version)
	if spec.Version == "" || have == spec.Version {
		return view, nil
	}
	c, err := s.describeCluster(ctx, cname)
	if err != nil {
		return providers.NodePool{}, err
	}
	cp := sdkaws.ToString(c.Version)
	next, err := providers.NextPoolVersion(s.op, spec.Name, have, spec.Version, cp)
	if err != nil || next == "" {
		return view, err
	}
	if next != cp {
		if cmp, _, _ := nextMinor(cp, spec.Version); cmp > 0 {
			return providers.NodePool{}, providers.Invalidf(s.op, "version", "node group %s runs %s and its cluster %s; EKS moves a node group only to its cluster's version, so %s cannot be reached in place: make a new node pool", spec.Name, have, cp, spec.Version)
		}
		next = cp
	}
	switch ng.Status {
	case ekstypes.NodegroupStatusUpdating:
		return view, nil
	case ekstypes.NodegroupStatusActive, ekstypes.NodegroupStatusDegraded:
	default:
		return providers.NodePool{}, providers.Errorf(s.op, providers.Conflict, providers.None, "node group %s is %s; it is upgraded once ACTIVE", spec.Name, ng.Status)
	}
	out, err := s.eks.UpdateNodegroupVersion(ctx, &eks.UpdateNodegroupVersionInput{
		ClusterName: sdkaws.String(cname), NodegroupName: ng.NodegroupName, Version: sdkaws.String(next),
		ClientRequestToken: sdkaws.String(token("nodegroup-version", spec.ClientToken, view.ID, have, next)),
	})
	if err != nil {
		return providers.NodePool{}, s.fail("UpdateNodegroupVersion", true, err)
	}
	view.Status = providers.NodePoolUpdating
	view.Message = fmt.Sprintf("upgrading from %s to %s", have, next)
	if out.Update != nil {
		view.Operation = sdkaws.ToString(out.Update.Id)
	}
	return view, nil
}

// reconfigure makes one UpdateNodegroupConfig (and a TagResource when the
// group goes between fixed and autoscaled) for what differs: the scaling
// config, and the labels when labels is not nil.
func (s *session) reconfigure(ctx context.Context, cname string, ng *ekstypes.Nodegroup, view providers.NodePool, size providers.Size, explicit bool, labels map[string]string, journalToken string) (providers.NodePool, error) {
	z := max(len(view.Zones), 1)
	cur := currentScaling(ng)
	want := scalingFor(size, z, cur.desired, explicit)
	in := &eks.UpdateNodegroupConfigInput{ClusterName: sdkaws.String(cname), NodegroupName: ng.NodegroupName}
	if want.min != cur.min || want.max != cur.max || want.desired != cur.desired {
		in.ScalingConfig = &ekstypes.NodegroupScalingConfig{MinSize: sdkaws.Int32(want.min), MaxSize: sdkaws.Int32(want.max), DesiredSize: sdkaws.Int32(want.desired)}
	}
	if labels != nil {
		add, remove := map[string]string{}, []string{}
		for k, v := range labels {
			if w, ok := ng.Labels[k]; !ok || w != v {
				add[k] = v
			}
		}
		for k := range ng.Labels {
			if _, ok := labels[k]; !ok {
				remove = append(remove, k)
			}
		}
		slices.Sort(remove)
		if len(add) > 0 || len(remove) > 0 {
			in.Labels = &ekstypes.UpdateLabelsPayload{}
			if len(add) > 0 {
				in.Labels.AddOrUpdateLabels = add
			}
			if len(remove) > 0 {
				in.Labels.RemoveLabels = remove
			}
		}
	}
	retag := want.tag != ng.Tags[tagSize] && (ng.Tags[tagSize] != "" || want.tag != cur.tag)
	if in.ScalingConfig == nil && in.Labels == nil && !retag {
		return view, nil
	}
	if ng.Status != ekstypes.NodegroupStatusActive && ng.Status != ekstypes.NodegroupStatusDegraded {
		return providers.NodePool{}, providers.Errorf(s.op, providers.Conflict, providers.None, "node group %s is %s; it changes once ACTIVE", view.Name, ng.Status)
	}
	if retag {
		if _, err := s.eks.TagResource(ctx, &eks.TagResourceInput{ResourceArn: ng.NodegroupArn, Tags: map[string]string{tagSize: want.tag}}); err != nil {
			return providers.NodePool{}, s.fail("TagResource", true, err)
		}
	}
	if in.ScalingConfig != nil || in.Labels != nil {
		// The token names the change and the state it starts from, so a
		// repeat of this step sends the same token and a later change
		// another.
		in.ClientRequestToken = sdkaws.String(token("nodegroup-config", journalToken, view.ID,
			strconv.FormatInt(sdkaws.ToTime(ng.ModifiedAt).UnixNano(), 10), fmt.Sprint(want), fmt.Sprint(labels)))
		if _, err := s.eks.UpdateNodegroupConfig(ctx, in); err != nil {
			return providers.NodePool{}, s.fail("UpdateNodegroupConfig", true, err)
		}
		view.Status = providers.NodePoolUpdating
	}
	view.Size = scaling{min: want.min, max: want.max, desired: want.desired, tag: want.tag}.size(z)
	if labels != nil {
		view.Labels = maps.Clone(labels)
	}
	return view, nil
}

// GetNodePool reads one node group.
func (a *Adapter) GetNodePool(ctx context.Context, acct providers.Account, cluster providers.ClusterRef, name string) (providers.NodePool, error) {
	s, cname, err := a.openCluster(ctx, "GetNodePool", acct, cluster)
	if err != nil {
		return providers.NodePool{}, err
	}
	ng, err := s.describeNodegroup(ctx, cname, name)
	if err != nil {
		return providers.NodePool{}, err
	}
	return s.poolView(ctx, ng)
}

// ResizeNodePool sets a node group's size in place (the count too under
// autoscaling: a resize asks for it).
func (a *Adapter) ResizeNodePool(ctx context.Context, acct providers.Account, cluster providers.ClusterRef, name string, size providers.Size) (providers.NodePool, error) {
	s, cname, err := a.openCluster(ctx, "ResizeNodePool", acct, cluster)
	if err != nil {
		return providers.NodePool{}, err
	}
	if err := checkSize(s.op, size); err != nil {
		return providers.NodePool{}, err
	}
	ng, err := s.describeNodegroup(ctx, cname, name)
	if err != nil {
		return providers.NodePool{}, err
	}
	if ng.Status == ekstypes.NodegroupStatusDeleting {
		return providers.NodePool{}, providers.Errorf(s.op, providers.Conflict, providers.None, "node group %s is being deleted", name)
	}
	view, err := s.poolView(ctx, ng)
	if err != nil {
		return providers.NodePool{}, err
	}
	return s.reconfigure(ctx, cname, ng, view, size, true, nil, "resize")
}

func (s *session) nodegroupNames(ctx context.Context, cname string) ([]string, error) {
	var names []string
	p := eks.NewListNodegroupsPaginator(s.eks, &eks.ListNodegroupsInput{ClusterName: sdkaws.String(cname), MaxResults: sdkaws.Int32(100)})
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			return nil, s.fail("ListNodegroups", false, err)
		}
		names = append(names, out.Nodegroups...)
	}
	slices.Sort(names)
	return names, nil
}

// ListNodePools lists every node group of the cluster, ours and the
// owner's, by name.
func (a *Adapter) ListNodePools(ctx context.Context, acct providers.Account, cluster providers.ClusterRef) ([]providers.NodePool, error) {
	s, cname, err := a.openCluster(ctx, "ListNodePools", acct, cluster)
	if err != nil {
		return nil, err
	}
	names, err := s.nodegroupNames(ctx, cname)
	if err != nil {
		return nil, err
	}
	out := []providers.NodePool{}
	for _, n := range names {
		ng, err := s.describeNodegroup(ctx, cname, n)
		if errors.Is(err, providers.ErrNotFound) {
			continue // gone since it was listed
		}
		if err != nil {
			return nil, err
		}
		p, err := s.poolView(ctx, ng)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// DeleteNodePool starts deleting a node group; one being deleted already
// is returned as it is.
func (a *Adapter) DeleteNodePool(ctx context.Context, acct providers.Account, cluster providers.ClusterRef, name string) (providers.NodePool, error) {
	s, cname, err := a.openCluster(ctx, "DeleteNodePool", acct, cluster)
	if err != nil {
		return providers.NodePool{}, err
	}
	out, err := s.eks.DeleteNodegroup(ctx, &eks.DeleteNodegroupInput{ClusterName: sdkaws.String(cname), NodegroupName: sdkaws.String(name)})
	if err == nil {
		return s.poolView(ctx, out.Nodegroup)
	}
	err = s.fail("DeleteNodegroup", true, err)
	if providers.ClassOf(err) != providers.Conflict {
		return providers.NodePool{}, err
	}
	ng, derr := s.describeNodegroup(ctx, cname, name)
	if derr != nil {
		return providers.NodePool{}, derr
	}
	if ng.Status == ekstypes.NodegroupStatusDeleting {
		return s.poolView(ctx, ng)
	}
	return providers.NodePool{}, err
}
