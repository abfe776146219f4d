package eksemu_test

import (
	"testing"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"

	"github.com/fleet-agent/fleet-agent/internal/providers/aws/eksemu"
)

// The read operations the AWS CLI calls around a create: ListAddons,
// DescribeAddonVersions and EC2 DescribeAvailabilityZones.
func TestAddonsAndZones(t *testing.T) {
	c := start(t, eksemu.Options{})
	if _, err := c.createCluster(t, "c1", "", ekstypes.AuthenticationModeApi); err != nil {
		t.Fatal(err)
	}
	list, err := c.eks.ListAddons(t.Context(), &eks.ListAddonsInput{ClusterName: sdkaws.String("c1")})
	if err != nil || list.Addons == nil || len(list.Addons) != 0 {
		t.Fatalf("ListAddons: %v %v", list, err)
	}
	if _, err := c.eks.ListAddons(t.Context(), &eks.ListAddonsInput{ClusterName: sdkaws.String("nope")}); code(err) != "ResourceNotFoundException" {
		t.Errorf("ListAddons of a missing cluster: %v", err)
	}
	cases := []struct {
		name  string
		in    eks.DescribeAddonVersionsInput
		names []string
		code  string
	}{
		{"all", eks.DescribeAddonVersionsInput{}, []string{"coredns", "kube-proxy", "vpc-cni"}, ""},
		{"one", eks.DescribeAddonVersionsInput{AddonName: sdkaws.String("vpc-cni"), KubernetesVersion: sdkaws.String("1.34")}, []string{"vpc-cni"}, ""},
		{"unknown add-on", eks.DescribeAddonVersionsInput{AddonName: sdkaws.String("nope")}, nil, ""},
		{"bad version", eks.DescribeAddonVersionsInput{KubernetesVersion: sdkaws.String("1.2")}, nil, "InvalidParameterException"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := c.eks.DescribeAddonVersions(t.Context(), &tc.in)
			if code(err) != tc.code {
				t.Fatalf("error %v, want %q", err, tc.code)
			}
			if err != nil {
				return
			}
			var got []string
			for _, a := range out.Addons {
				got = append(got, *a.AddonName)
				if len(a.AddonVersions) == 0 || len(a.AddonVersions[0].Compatibilities) == 0 {
					t.Errorf("%s has no versions", *a.AddonName)
				}
			}
			if len(got) != len(tc.names) || (len(got) > 0 && got[0] != tc.names[0]) {
				t.Errorf("add-ons %v, want %v", got, tc.names)
			}
		})
	}
	zones, err := c.ec2.DescribeAvailabilityZones(t.Context(), &ec2.DescribeAvailabilityZonesInput{})
	if err != nil || len(zones.AvailabilityZones) != 3 {
		t.Fatalf("DescribeAvailabilityZones: %v %v", zones, err)
	}
	z := zones.AvailabilityZones[0]
	if *z.ZoneName != "us-east-1a" || *z.ZoneId != "use1-az1" || z.State != "available" || *z.RegionName != "us-east-1" {
		t.Errorf("zone %s %s %s %s", *z.ZoneName, *z.ZoneId, z.State, *z.RegionName)
	}
	one, err := c.ec2.DescribeAvailabilityZones(t.Context(), &ec2.DescribeAvailabilityZonesInput{ZoneNames: []string{"us-east-1b"}})
	if err != nil || len(one.AvailabilityZones) != 1 || *one.AvailabilityZones[0].ZoneId != "use1-az2" {
		t.Errorf("one zone: %v %v", one, err)
	}
	if _, err := c.ec2.DescribeAvailabilityZones(t.Context(), &ec2.DescribeAvailabilityZonesInput{ZoneNames: []string{"us-east-1z"}}); code(err) != "InvalidParameterValue" {
		t.Errorf("a missing zone: %v", err)
	}
}
