package aws

import (
	"strings"
	"testing"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	asgtypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
)

// TestGroupsRevision: the revision moves with what tells a node group
// changed (its size and bounds, a group made or gone, an instance replaced
// or leaving service, a new launch template version) and not with what
// does not (the order AWS answers in, an instance's health), and a
// cluster without groups still has one, so that a group made later moves
// it.
func TestGroupsRevision(t *testing.T) {
	group := func(name string, desired int32, instances ...string) asgtypes.AutoScalingGroup {
		g := asgtypes.AutoScalingGroup{
			AutoScalingGroupName: sdkaws.String(name), MinSize: sdkaws.Int32(0), MaxSize: sdkaws.Int32(10), DesiredCapacity: sdkaws.Int32(desired),
			AvailabilityZones: []string{"us-east-1b", "us-east-1a"}, VPCZoneIdentifier: sdkaws.String("subnet-a,subnet-b"),
			LaunchTemplate: &asgtypes.LaunchTemplateSpecification{LaunchTemplateId: sdkaws.String("lt-1"), Version: sdkaws.String("1")},
			Tags:           []asgtypes.TagDescription{{Key: sdkaws.String(clusterTag), Value: sdkaws.String("c1")}, {Key: sdkaws.String("eks:nodegroup-name"), Value: sdkaws.String(name)}},
		}
		for _, id := range instances {
			g.Instances = append(g.Instances, asgtypes.Instance{InstanceId: sdkaws.String(id), LifecycleState: asgtypes.LifecycleStateInService, HealthStatus: sdkaws.String("Healthy")})
		}
		return g
	}
	base := func() []asgtypes.AutoScalingGroup {
		return []asgtypes.AutoScalingGroup{group("eks-a", 2, "i-1", "i-2"), group("eks-b", 1, "i-3")}
	}
	was := groupsRevision(base())
	if !strings.HasPrefix(was, "asg:") {
		t.Fatalf("revision %q", was)
	}
	if empty := groupsRevision(nil); empty == "" || empty == was {
		t.Errorf("a cluster without groups: %q", empty)
	}
	same := map[string]func(gs []asgtypes.AutoScalingGroup) []asgtypes.AutoScalingGroup{
		"the groups in another order": func(gs []asgtypes.AutoScalingGroup) []asgtypes.AutoScalingGroup {
			return []asgtypes.AutoScalingGroup{gs[1], gs[0]}
		},
		"the instances in another order": func(gs []asgtypes.AutoScalingGroup) []asgtypes.AutoScalingGroup {
			gs[0].Instances[0], gs[0].Instances[1] = gs[0].Instances[1], gs[0].Instances[0]
			return gs
		},
		"an instance's health": func(gs []asgtypes.AutoScalingGroup) []asgtypes.AutoScalingGroup {
			gs[0].Instances[0].HealthStatus = sdkaws.String("Unhealthy")
			return gs
		},
		"the zones in another order": func(gs []asgtypes.AutoScalingGroup) []asgtypes.AutoScalingGroup {
			gs[0].AvailabilityZones = []string{"us-east-1a", "us-east-1b"}
			return gs
		},
	}
	for name, change := range same {
		if got := groupsRevision(change(base())); got != was {
			t.Errorf("%s moved the revision", name)
		}
	}
	moves := map[string]func(gs []asgtypes.AutoScalingGroup) []asgtypes.AutoScalingGroup{
		"a resize": func(gs []asgtypes.AutoScalingGroup) []asgtypes.AutoScalingGroup {
			gs[0].DesiredCapacity = sdkaws.Int32(3)
			return gs
		},
		"new bounds": func(gs []asgtypes.AutoScalingGroup) []asgtypes.AutoScalingGroup {
			gs[1].MaxSize = sdkaws.Int32(4)
			return gs
		},
		"a group gone": func(gs []asgtypes.AutoScalingGroup) []asgtypes.AutoScalingGroup { return gs[:1] },
		"a group made": func(gs []asgtypes.AutoScalingGroup) []asgtypes.AutoScalingGroup {
			return append(gs, group("eks-c", 0))
		},
		"an instance replaced": func(gs []asgtypes.AutoScalingGroup) []asgtypes.AutoScalingGroup {
			gs[1].Instances[0].InstanceId = sdkaws.String("i-4")
			return gs
		},
		"an instance leaving service": func(gs []asgtypes.AutoScalingGroup) []asgtypes.AutoScalingGroup {
			gs[0].Instances[1].LifecycleState = asgtypes.LifecycleStateTerminating
			return gs
		},
		"a new launch template version": func(gs []asgtypes.AutoScalingGroup) []asgtypes.AutoScalingGroup {
			gs[0].LaunchTemplate.Version = sdkaws.String("2")
			return gs
		},
		"a group being deleted": func(gs []asgtypes.AutoScalingGroup) []asgtypes.AutoScalingGroup {
			gs[1].Status = sdkaws.String("Delete in progress")
			return gs
		},
	}
	for name, change := range moves {
		if got := groupsRevision(change(base())); got == was {
			t.Errorf("%s did not move the revision", name)
		}
	}
}
