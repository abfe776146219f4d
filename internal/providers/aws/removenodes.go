package aws

import (
	"context"
	"strings"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	asgtypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"

	"github.com/fleet-agent/fleet-agent/internal/providers"
)

var _ providers.NodeRemover = (*Adapter)(nil)

// RemoveNodes takes the chosen instances out of the node group's Auto
// Scaling group with TerminateInstanceInAutoScalingGroup, lowering its
// desired capacity by each (EKS reads the group's size back into the node
// group). Every providerID is checked against the cluster's groups before
// any call: one of another group, or not an AWS instance, is Invalid; one of
// no group is taken as already gone. The count that stays must be size (per
// zone, times the group's zones), or the call is Invalid. When the group's
// minimum would block the decrement it is lowered first through EKS
// (UpdateNodegroupConfig, the maximum and desired size kept); a fixed
// group's maximum follows at its next resize.
func (a *Adapter) RemoveNodes(ctx context.Context, acct providers.Account, cluster providers.ClusterRef, pool string, providerIDs []string, size providers.Size) (providers.NodePool, error) {
	s, cname, err := a.openCluster(ctx, "RemoveNodes", acct, cluster)
	if err != nil {
		return providers.NodePool{}, err
	}
	if err := checkSize(s.op, size); err != nil {
		return providers.NodePool{}, err
	}
	ids := make([]string, 0, len(providerIDs))
	for _, p := range providerIDs {
		id, ok := instanceOf(p)
		if !ok {
			return providers.NodePool{}, providers.Invalidf(s.op, "providerID", "%q is not an EC2 instance's providerID (aws:///<zone>/<instance id>)", p)
		}
		ids = append(ids, id)
	}
	ng, err := s.describeNodegroup(ctx, cname, pool)
	if err != nil {
		return providers.NodePool{}, err
	}
	if ng.Status == ekstypes.NodegroupStatusDeleting {
		return providers.NodePool{}, providers.Errorf(s.op, providers.Conflict, providers.None, "node group %s is being deleted", pool)
	}
	if s.asg == nil {
		return providers.NodePool{}, providers.Errorf(s.op, providers.Invalid, providers.None,
			"endpoints: other AWS endpoints are overridden and autoscaling is not; set providers.aws.endpoints.autoscaling so chosen nodes can be removed")
	}
	var own string
	if ng.Resources != nil && len(ng.Resources.AutoScalingGroups) > 0 {
		own = sdkaws.ToString(ng.Resources.AutoScalingGroups[0].Name)
	}
	if own == "" {
		return providers.NodePool{}, providers.Errorf(s.op, providers.Unavailable, providers.None, "node group %s has no Auto Scaling group yet; try again when it is active", pool)
	}
	groupOf := map[string]string{} // instance id -> group name
	var desired int32
	p := autoscaling.NewDescribeAutoScalingGroupsPaginator(s.asg, &autoscaling.DescribeAutoScalingGroupsInput{
		Filters: []asgtypes.Filter{{Name: sdkaws.String("tag:" + clusterTag), Values: []string{cname}}}, MaxRecords: sdkaws.Int32(groupsPerPage),
	})
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			return providers.NodePool{}, s.fail("DescribeAutoScalingGroups", false, err)
		}
		for _, g := range out.AutoScalingGroups {
			name := sdkaws.ToString(g.AutoScalingGroupName)
			if name == own {
				desired = sdkaws.ToInt32(g.DesiredCapacity)
			}
			for _, in := range g.Instances {
				groupOf[sdkaws.ToString(in.InstanceId)] = name
			}
		}
	}
	var take []string
	for i, id := range ids {
		switch g := groupOf[id]; {
		case g == own:
			take = append(take, id)
		case g != "":
			return providers.NodePool{}, providers.Invalidf(s.op, "providerID", "%s is a node of another node group (Auto Scaling group %s), not of %s", providerIDs[i], g, pool)
		}
	}
	view, err := s.poolView(ctx, ng)
	if err != nil {
		return providers.NodePool{}, err
	}
	zones, err := s.zonesOf(ctx, ng.Subnets)
	if err != nil {
		return providers.NodePool{}, err
	}
	target := int32(size.NodeCount) * int32(max(len(zones), 1))
	if desired-int32(len(take)) != target {
		return providers.NodePool{}, providers.Invalidf(s.op, "size", "node group %s has %d nodes; removing %d of them leaves %d, not the %d asked for (%d per zone over %d zones)",
			pool, desired, len(take), desired-int32(len(take)), target, size.NodeCount, len(zones))
	}
	if len(take) == 0 {
		return view, nil
	}
	if sc := currentScaling(ng); sc.min > target {
		_, err := s.eks.UpdateNodegroupConfig(ctx, &eks.UpdateNodegroupConfigInput{
			ClusterName: sdkaws.String(cname), NodegroupName: sdkaws.String(pool),
			ScalingConfig: &ekstypes.NodegroupScalingConfig{MinSize: sdkaws.Int32(target), MaxSize: sdkaws.Int32(sc.max), DesiredSize: sdkaws.Int32(sc.desired)},
		})
		if err != nil {
			return providers.NodePool{}, s.fail("UpdateNodegroupConfig", true, err)
		}
	}
	for _, id := range take {
		_, err := s.asg.TerminateInstanceInAutoScalingGroup(ctx, &autoscaling.TerminateInstanceInAutoScalingGroupInput{
			InstanceId: sdkaws.String(id), ShouldDecrementDesiredCapacity: sdkaws.Bool(true),
		})
		if err != nil {
			return providers.NodePool{}, s.fail("TerminateInstanceInAutoScalingGroup", true, err)
		}
	}
	ng, err = s.describeNodegroup(ctx, cname, pool)
	if err != nil {
		return providers.NodePool{}, err
	}
	return s.poolView(ctx, ng)
}

// instanceOf is the instance id of an EC2 Node's providerID,
// `aws:///<zone>/<instance id>`.
func instanceOf(providerID string) (string, bool) {
	rest, ok := strings.CutPrefix(providerID, "aws:///")
	if !ok {
		return "", false
	}
	zone, id, ok := strings.Cut(rest, "/")
	if !ok || zone == "" || !strings.HasPrefix(id, "i-") || len(id) > 19 || strings.Contains(id, "/") {
		return "", false
	}
	return id, true
}
