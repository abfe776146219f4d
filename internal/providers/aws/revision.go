package aws

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	asgtypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"

	"github.com/fleet-agent/fleet-agent/internal/providers"
)

// The discovery sweep's cheap change check on EKS.
//
// An EKS cluster says nothing of its node groups and ListNodegroups gives
// names only, so without help the sweep would describe every node group of
// every substrate. EKS runs each managed node group as an EC2 Auto Scaling
// group tagged eks:cluster-name and eks:nodegroup-name, and one
// DescribeAutoScalingGroups filtered on eks:cluster-name (a page per 100
// groups) answers every group of the account's clusters: its bounds and
// desired capacity, its instances and their lifecycle, its launch template
// version. A cluster's revision is a digest of its groups, so it moves when
// a node group is made, deleted or resized (through EKS or on the group
// itself, as the cluster autoscaler does), when its instances come and go,
// and when EKS rolls a new launch template.
//
// What the groups do not show: a node group's labels and taints, and its
// health as EKS reports it. A label or taint changed by hand through EKS
// (UpdateNodegroupConfig) without a new launch template is seen by the
// sweep's daily full read only.

// clusterTag is the tag EKS puts on a managed node group's Auto Scaling
// group, naming its cluster.
const clusterTag = "eks:cluster-name"

// groupsPerPage is DescribeAutoScalingGroups' largest page; namesPerFilter
// keeps one filter's values well inside what the service takes.
const (
	groupsPerPage  = 100
	namesPerFilter = 100
)

// groupRevisions gives each named cluster the revision of its node groups'
// Auto Scaling groups. It returns nil when the groups cannot be read (no
// Auto Scaling endpoint for an install that overrides AWS's, a refusal, a
// failure): the sweep then reads the node groups, as without a revision.
// The error says why, for those who ask (Advise).
func (s *session) groupRevisions(ctx context.Context, clusters []string) (map[string]string, error) {
	if len(clusters) == 0 {
		return map[string]string{}, nil
	}
	if s.asg == nil {
		return nil, providers.Errorf(s.op, providers.Invalid, providers.None,
			"endpoints: other AWS endpoints are overridden and autoscaling is not; set providers.aws.endpoints.autoscaling so the sweep can read the node groups' Auto Scaling groups")
	}
	groups := map[string][]asgtypes.AutoScalingGroup{}
	for chunk := range slices.Chunk(clusters, namesPerFilter) {
		p := autoscaling.NewDescribeAutoScalingGroupsPaginator(s.asg, &autoscaling.DescribeAutoScalingGroupsInput{
			Filters:    []asgtypes.Filter{{Name: sdkaws.String("tag:" + clusterTag), Values: chunk}},
			MaxRecords: sdkaws.Int32(groupsPerPage),
		})
		for p.HasMorePages() {
			out, err := p.NextPage(ctx)
			if err != nil {
				return nil, s.fail("DescribeAutoScalingGroups", false, err)
			}
			for _, g := range out.AutoScalingGroups {
				if c := tagValue(g.Tags, clusterTag); c != "" {
					groups[c] = append(groups[c], g)
				}
			}
		}
	}
	revs := make(map[string]string, len(clusters))
	for _, c := range clusters {
		revs[c] = groupsRevision(groups[c])
	}
	return revs, nil
}

func tagValue(tags []asgtypes.TagDescription, key string) string {
	for _, t := range tags {
		if sdkaws.ToString(t.Key) == key {
			return sdkaws.ToString(t.Value)
		}
	}
	return ""
}

// groupsRevision is the digest of what a cluster's Auto Scaling groups say
// of its node groups. Instance health is left out: it flaps, and the node
// pool read does not show it.
func groupsRevision(groups []asgtypes.AutoScalingGroup) string {
	type instance struct{ ID, State string }
	type group struct {
		Name, Status, Subnets string
		Min, Max, Desired     int32
		Zones, Tags, Template []string
		Instances             []instance
	}
	template := func(lt *asgtypes.LaunchTemplateSpecification) []string {
		if lt == nil {
			return nil
		}
		return []string{sdkaws.ToString(lt.LaunchTemplateId), sdkaws.ToString(lt.LaunchTemplateName), sdkaws.ToString(lt.Version)}
	}
	out := make([]group, 0, len(groups))
	for _, g := range groups {
		v := group{Name: sdkaws.ToString(g.AutoScalingGroupName), Status: sdkaws.ToString(g.Status), Subnets: sdkaws.ToString(g.VPCZoneIdentifier),
			Min: sdkaws.ToInt32(g.MinSize), Max: sdkaws.ToInt32(g.MaxSize), Desired: sdkaws.ToInt32(g.DesiredCapacity),
			Zones: slices.Sorted(slices.Values(g.AvailabilityZones)), Template: template(g.LaunchTemplate)}
		if m := g.MixedInstancesPolicy; m != nil && m.LaunchTemplate != nil {
			v.Template = append(v.Template, template(m.LaunchTemplate.LaunchTemplateSpecification)...)
		}
		for _, t := range g.Tags {
			v.Tags = append(v.Tags, sdkaws.ToString(t.Key)+"="+sdkaws.ToString(t.Value))
		}
		slices.Sort(v.Tags)
		for _, i := range g.Instances {
			v.Instances = append(v.Instances, instance{ID: sdkaws.ToString(i.InstanceId), State: string(i.LifecycleState)})
		}
		slices.SortFunc(v.Instances, func(x, y instance) int { return strings.Compare(x.ID, y.ID) })
		out = append(out, v)
	}
	slices.SortFunc(out, func(x, y group) int { return strings.Compare(x.Name, y.Name) })
	data, err := json.Marshal(out)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(data)
	return "asg:" + hex.EncodeToString(sum[:8])
}

// Advise says what keeps the account's sweep from its cheap change check:
// the Auto Scaling groups not readable (autoscaling:DescribeAutoScalingGroups
// refused, no Auto Scaling endpoint for an install that overrides AWS's,
// or the listing failing). Nothing to say is nil. The sweep goes on
// either way, reading every node group of each substrate at each sweep.
func (a *Adapter) Advise(ctx context.Context, acct providers.Account) []string {
	s, err := a.open(ctx, "Advise", acct)
	if err != nil {
		return nil // Verify says what is wrong with the account itself
	}
	const cost = "so the sweep reads every node group of each substrate at every sweep (a DescribeNodegroup per node group) instead of one listing of the account"
	if s.asg == nil {
		return []string{"account " + quote(acct.Name) + ": providers.aws.endpoints overrides AWS's endpoints but names no autoscaling endpoint, " + cost + "; set endpoints.autoscaling"}
	}
	_, err = s.asg.DescribeAutoScalingGroups(ctx, &autoscaling.DescribeAutoScalingGroupsInput{
		Filters:    []asgtypes.Filter{{Name: sdkaws.String("tag-key"), Values: []string{clusterTag}}},
		MaxRecords: sdkaws.Int32(1),
	})
	if err == nil {
		return nil
	}
	err = s.fail("DescribeAutoScalingGroups", false, err)
	if providers.ReasonOf(err) == "permission" {
		return []string{"account " + quote(acct.Name) + ": its principal may not call autoscaling:DescribeAutoScalingGroups, " + cost + "; grant it that permission (read-only)"}
	}
	return []string{"account " + quote(acct.Name) + ": the node groups' Auto Scaling groups cannot be listed (" + err.Error() + "), " + cost + " while this lasts"}
}
