package clients

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/providers/aws/eksemu"
)

// TestAWSCLIAutoScaling reads the Auto Scaling groups behind managed node
// groups with the CLI, once per CLI found: filtered on the tag EKS puts on
// them, paged with NextToken, and following a resize made through EKS and
// one made on the group itself.
func TestAWSCLIAutoScaling(t *testing.T) {
	for _, c := range findCLIs(t) {
		t.Run(fmt.Sprintf("v%d", c.major), func(t *testing.T) {
			s := newSession(t, c)
			for _, sc := range []eksemu.SeedCluster{
				{Name: "c1", Nodegroups: []eksemu.SeedNodegroup{{Name: "ng1", InstanceType: "t3.medium", Desired: 2}, {Name: "ng2", InstanceType: "t3.medium", Desired: 1}}},
				{Name: "c2", Nodegroups: []eksemu.SeedNodegroup{{Name: "other", InstanceType: "t3.medium", Desired: 1}}},
			} {
				if _, err := s.emu.Seed(sc); err != nil {
					t.Fatal(err)
				}
			}
			groups := func(args ...string) []map[string]any {
				t.Helper()
				out := s.ok(append([]string{"autoscaling", "describe-auto-scaling-groups"}, args...)...)
				var gs []map[string]any
				if err := json.Unmarshal([]byte(str(out, "AutoScalingGroups")), &gs); err != nil {
					t.Fatalf("AutoScalingGroups: %v: %v", err, out)
				}
				return gs
			}
			tag := func(g map[string]any, key string) string {
				tags, _ := g["Tags"].([]any)
				for _, x := range tags {
					if m, _ := x.(map[string]any); str(m, "Key") == key {
						return str(m, "Value")
					}
				}
				return ""
			}
			byGroup := func(gs []map[string]any) map[string]map[string]any {
				out := map[string]map[string]any{}
				for _, g := range gs {
					out[tag(g, "eks:nodegroup-name")] = g
				}
				return out
			}

			c1 := groups("--filters", "Name=tag:eks:cluster-name,Values=c1")
			got := byGroup(c1)
			if len(c1) != 2 || got["ng1"] == nil || got["ng2"] == nil {
				t.Fatalf("the groups of c1: %v", c1)
			}
			s.want("ng1 desired", str(got["ng1"], "DesiredCapacity"), "2")
			s.want("ng1 instances", fmt.Sprint(len(got["ng1"]["Instances"].([]any))), "2")
			s.want("ng1 cluster tag", tag(got["ng1"], "eks:cluster-name"), "c1")
			if !strings.HasPrefix(str(got["ng1"], "AutoScalingGroupName"), "eks-ng1-") {
				t.Errorf("ng1's group is named %q", str(got["ng1"], "AutoScalingGroupName"))
			}
			s.want("c2 alone", fmt.Sprint(slices.Collect(func(yield func(string) bool) {
				for _, g := range groups("--filters", "Name=tag:eks:cluster-name,Values=c2") {
					yield(tag(g, "eks:nodegroup-name"))
				}
			})), "[other]")
			s.want("no such cluster", fmt.Sprint(len(groups("--filters", "Name=tag:eks:cluster-name,Values=nope"))), "0")
			s.want("both clusters by tag key", fmt.Sprint(len(groups("--filters", "Name=tag-key,Values=eks:cluster-name"))), "3")

			// Pages of one: the CLI follows NextToken to the end.
			before := s.emu.Count("DescribeAutoScalingGroups")
			s.want("paged", fmt.Sprint(len(groups("--filters", "Name=tag-key,Values=eks:cluster-name", "--page-size", "1"))), "3")
			s.want("pages asked", fmt.Sprint(s.emu.Count("DescribeAutoScalingGroups")-before), "3")

			s.fails("ValidationError", "DescribeAutoScalingGroups", "Filter name nope is not valid",
				"autoscaling", "describe-auto-scaling-groups", "--filters", "Name=nope,Values=x")

			// A resize through EKS shows in the group.
			s.ok("eks", "update-nodegroup-config", "--cluster-name", "c1", "--nodegroup-name", "ng1", "--scaling-config", "minSize=1,maxSize=4,desiredSize=3")
			s.want("after EKS's resize", str(byGroup(groups("--filters", "Name=tag:eks:cluster-name,Values=c1"))["ng1"], "DesiredCapacity"), "3")

			// A resize on the group shows in the node group.
			s.ok("eks", "wait", "nodegroup-active", "--cluster-name", "c1", "--nodegroup-name", "ng1")
			if err := s.emu.UpdateAutoScalingGroup("c1", "ng1", 1, 4, 4); err != nil {
				t.Fatal(err)
			}
			s.want("group after its own resize", str(byGroup(groups("--filters", "Name=tag:eks:cluster-name,Values=c1"))["ng1"], "DesiredCapacity"), "4")
			s.want("node group after its group's resize", str(s.ok("eks", "describe-nodegroup", "--cluster-name", "c1", "--nodegroup-name", "ng1"), "nodegroup", "scalingConfig", "desiredSize"), "4")
			if err := s.emu.UpdateAutoScalingGroup("c1", "ng1", 1, 4, 5); err == nil {
				t.Error("a desired capacity above the group's maximum was taken")
			}
		})
	}
}

// TestAWSCLITerminatesInstances takes chosen instances out of a node
// group's Auto Scaling group with the CLI, once per CLI found: refused while
// the group is at its minimum, then taken with the desired capacity lowered
// (the node group's desiredSize follows), refused for an instance of no
// group, and replaced when the capacity is kept.
func TestAWSCLITerminatesInstances(t *testing.T) {
	for _, c := range findCLIs(t) {
		t.Run(fmt.Sprintf("v%d", c.major), func(t *testing.T) {
			s := newSession(t, c)
			if _, err := s.emu.Seed(eksemu.SeedCluster{Name: "c1", Nodegroups: []eksemu.SeedNodegroup{
				{Name: "ng1", InstanceType: "t3.medium", Desired: 3}, {Name: "ng2", InstanceType: "t3.medium", Desired: 1}}}); err != nil {
				t.Fatal(err)
			}
			ids := func() []string {
				t.Helper()
				pids, err := s.emu.NodeProviderIDs("c1", "ng1")
				if err != nil {
					t.Fatal(err)
				}
				var out []string
				for _, p := range pids {
					out = append(out, p[strings.LastIndex(p, "/")+1:])
				}
				return out
			}
			group := func() map[string]any {
				t.Helper()
				out := s.ok("autoscaling", "describe-auto-scaling-groups", "--filters", "Name=tag:eks:nodegroup-name,Values=ng1")
				var gs []map[string]any
				if err := json.Unmarshal([]byte(str(out, "AutoScalingGroups")), &gs); err != nil || len(gs) != 1 {
					t.Fatalf("the group of ng1: %v: %v", err, out)
				}
				return gs[0]
			}
			instanceIDs := func(g map[string]any) []string {
				var out []string
				for _, x := range g["Instances"].([]any) {
					out = append(out, str(x.(map[string]any), "InstanceId"))
				}
				slices.Sort(out)
				return out
			}
			before := ids()
			if len(before) != 3 {
				t.Fatalf("ng1 has instances %v", before)
			}
			s.want("the CLI sees the emulator's instances", fmt.Sprint(instanceIDs(group())), fmt.Sprint(slices.Sorted(slices.Values(before))))

			s.fails("ValidationError", "TerminateInstanceInAutoScalingGroup", "Currently, desiredSize equals minSize (3).",
				"autoscaling", "terminate-instance-in-auto-scaling-group", "--instance-id", before[1], "--should-decrement-desired-capacity")
			s.want("a refusal takes nothing", fmt.Sprint(len(ids())), "3")

			s.ok("eks", "update-nodegroup-config", "--cluster-name", "c1", "--nodegroup-name", "ng1", "--scaling-config", "minSize=1,maxSize=3,desiredSize=3")
			s.ok("eks", "wait", "nodegroup-active", "--cluster-name", "c1", "--nodegroup-name", "ng1")
			out := s.ok("autoscaling", "terminate-instance-in-auto-scaling-group", "--instance-id", before[1], "--should-decrement-desired-capacity")
			s.want("activity status", str(out, "Activity", "StatusCode"), "InProgress")
			s.want("activity description", str(out, "Activity", "Description"), "Terminating EC2 instance: "+before[1])
			g := group()
			s.want("desired capacity", str(g, "DesiredCapacity"), "2")
			s.want("instances left", fmt.Sprint(instanceIDs(g)), fmt.Sprint(slices.Sorted(slices.Values([]string{before[0], before[2]}))))
			s.want("node group desiredSize", str(s.ok("eks", "describe-nodegroup", "--cluster-name", "c1", "--nodegroup-name", "ng1"), "nodegroup", "scalingConfig", "desiredSize"), "2")

			s.fails("ValidationError", "TerminateInstanceInAutoScalingGroup", "Instance Id not found - No managed instance found for instance ID: "+before[1],
				"autoscaling", "terminate-instance-in-auto-scaling-group", "--instance-id", before[1], "--should-decrement-desired-capacity")
			s.fails("ValidationError", "TerminateInstanceInAutoScalingGroup", "Instance Id not found",
				"autoscaling", "terminate-instance-in-auto-scaling-group", "--instance-id", "i-0123456789abcdef0", "--should-decrement-desired-capacity")

			// Without the decrement the group launches a replacement.
			s.ok("autoscaling", "terminate-instance-in-auto-scaling-group", "--instance-id", before[0], "--no-should-decrement-desired-capacity")
			g = group()
			s.want("desired kept", str(g, "DesiredCapacity"), "2")
			left := instanceIDs(g)
			if len(left) != 2 || slices.Contains(left, before[0]) || !slices.Contains(left, before[2]) || slices.Contains(left, before[1]) {
				t.Errorf("after a replacement the group has %v (was %v)", left, before)
			}
			other, err := s.emu.NodeProviderIDs("c1", "ng2")
			if err != nil || len(other) != 1 {
				t.Errorf("ng2 was touched: %v %v", other, err)
			}
		})
	}
}
