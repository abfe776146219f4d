package aws

import (
	"context"
	"slices"
	"strings"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"
	"github.com/aws/aws-sdk-go-v2/service/sts"

	"github.com/fleet-agent/fleet-agent/internal/providers"
)

// Verify checks the account's keys with STS GetCallerIdentity (after
// assuming roleArn when set), and that its subnets exist, span two zones
// and cover the zones it lists.
func (a *Adapter) Verify(ctx context.Context, acct providers.Account) error {
	s, err := a.open(ctx, "Verify", acct)
	if err != nil {
		return err
	}
	if _, err := s.sts.GetCallerIdentity(ctx, &sts.GetCallerIdentityInput{}); err != nil {
		e := s.fail("GetCallerIdentity", false, err)
		if pe, ok := e.(*providers.Error); ok && pe.Class == providers.Terminal && pe.Reason == "" {
			pe.Reason = "credentialsRefused"
		}
		return e
	}
	if len(s.cfg.EKSSubnetIDs) == 0 {
		return nil
	}
	zoneOf, err := s.subnetZones(ctx, s.cfg.EKSSubnetIDs)
	if err != nil {
		return err
	}
	var zones []string
	for _, id := range s.cfg.EKSSubnetIDs {
		if !slices.Contains(zones, zoneOf[id]) {
			zones = append(zones, zoneOf[id])
		}
	}
	slices.Sort(zones)
	if len(zones) < 2 {
		return providers.Invalidf("Verify", "subnets", "provider account %q: eksSubnetIds are all in %s; EKS needs subnets in at least two zones", acct.Name, strings.Join(zones, ", "))
	}
	for _, z := range s.cfg.Zones {
		if !slices.Contains(zones, z) {
			return providers.Invalidf("Verify", "zone", "provider account %q: zone %s has no subnet among eksSubnetIds (their zones: %s)", acct.Name, z, strings.Join(zones, ", "))
		}
	}
	return nil
}

// Locations is the account's region with its zones (those of its subnets,
// within the zones it lists), then each zone.
func (a *Adapter) Locations(ctx context.Context, acct providers.Account) ([]providers.Location, error) {
	s, err := a.open(ctx, "Locations", acct)
	if err != nil {
		return nil, err
	}
	zones, err := s.accountZones(ctx)
	if err != nil {
		return nil, err
	}
	out := []providers.Location{{Name: s.cfg.Region, Kind: providers.Region, Zones: zones}}
	for _, z := range zones {
		out = append(out, providers.Location{Name: z, Kind: providers.Zone, Region: s.cfg.Region})
	}
	return out, nil
}

// Rules are EKS's (reference "Provider differences"): regional clusters;
// node groups pinned to zones through their subnets, with a disk size, Spot
// capacity, zero nodes, and `nodes` per zone.
func (a *Adapter) Rules(ctx context.Context, acct providers.Account) (providers.Rules, error) {
	var cfg accountConfig
	if err := providers.DecodeAccountConfig(acct, &cfg); err != nil {
		return providers.Rules{}, named("Rules", err)
	}
	if err := cfg.check(acct); err != nil {
		return providers.Rules{}, named("Rules", err)
	}
	return providers.Rules{
		ClusterLocations: []providers.LocationKind{providers.Region},
		NodePoolZones:    true,
		DiskSize:         true,
		NodesPerZone:     true,
		ZeroNodes:        true,
		Spot:             true,
	}, nil
}

// instanceInfo is what never changes about an instance type.
type instanceInfo struct {
	name      string
	vcpu      int
	memoryMiB int64
	arm       bool
	nvidia    bool
	gpus      *providers.Accelerators
}

// instanceType describes a type, from the cache or EC2. A type EC2 does not
// know in the region is NotFound.
func (s *session) instanceType(ctx context.Context, name string) (*instanceInfo, error) {
	key := s.cacheKey("type:" + name)
	s.a.mu.Lock()
	info := s.a.types[key]
	s.a.mu.Unlock()
	if info != nil {
		return info, nil
	}
	out, err := s.ec2.DescribeInstanceTypes(ctx, &ec2.DescribeInstanceTypesInput{InstanceTypes: []ec2types.InstanceType{ec2types.InstanceType(name)}})
	if err != nil {
		return nil, s.fail("DescribeInstanceTypes", false, err)
	}
	i := slices.IndexFunc(out.InstanceTypes, func(t ec2types.InstanceTypeInfo) bool { return string(t.InstanceType) == name })
	if i < 0 {
		return nil, providers.NotFoundf(s.op, "machine type %s does not exist in %s", name, s.cfg.Region)
	}
	info = describeType(out.InstanceTypes[i])
	s.a.mu.Lock()
	s.a.types[key] = info
	s.a.mu.Unlock()
	return info, nil
}

// describeType reads EC2's answer. The accelerator type is the
// manufacturer and the model as EC2 names them, lower-cased: NVIDIA H100 is
// `nvidia-h100`, NVIDIA L4 `nvidia-l4`. Several GPU models on one type (none
// exist today) count as the first.
func describeType(t ec2types.InstanceTypeInfo) *instanceInfo {
	info := &instanceInfo{name: string(t.InstanceType)}
	if t.VCpuInfo != nil {
		info.vcpu = int(sdkaws.ToInt32(t.VCpuInfo.DefaultVCpus))
	}
	if t.MemoryInfo != nil {
		info.memoryMiB = sdkaws.ToInt64(t.MemoryInfo.SizeInMiB)
	}
	if t.ProcessorInfo != nil {
		info.arm = slices.Contains(t.ProcessorInfo.SupportedArchitectures, ec2types.ArchitectureTypeArm64)
	}
	if t.GpuInfo != nil && len(t.GpuInfo.Gpus) > 0 {
		first := t.GpuInfo.Gpus[0]
		kind := strings.ToLower(sdkaws.ToString(first.Manufacturer) + "-" + sdkaws.ToString(first.Name))
		n := 0
		for _, g := range t.GpuInfo.Gpus {
			if strings.ToLower(sdkaws.ToString(g.Manufacturer)+"-"+sdkaws.ToString(g.Name)) == kind {
				n += int(sdkaws.ToInt32(g.Count))
			}
		}
		info.gpus = &providers.Accelerators{Type: strings.ReplaceAll(kind, " ", "-"), Count: n}
		info.nvidia = strings.EqualFold(sdkaws.ToString(first.Manufacturer), "NVIDIA")
	}
	return info
}

// MachineType describes an instance type in the account's region, or in
// one of its zones when it is offered there.
func (a *Adapter) MachineType(ctx context.Context, acct providers.Account, location, name string) (providers.MachineType, error) {
	s, err := a.open(ctx, "MachineType", acct)
	if err != nil {
		return providers.MachineType{}, err
	}
	zone := ""
	if location != s.cfg.Region {
		zones, err := s.accountZones(ctx)
		if err != nil {
			return providers.MachineType{}, err
		}
		if !slices.Contains(zones, location) {
			return providers.MachineType{}, providers.NotFoundf("MachineType", "location %s is neither region %s of account %q nor one of its zones (%s)", location, s.cfg.Region, acct.Name, strings.Join(zones, ", "))
		}
		zone = location
	}
	info, err := s.instanceType(ctx, name)
	if err != nil {
		return providers.MachineType{}, err
	}
	if zone != "" {
		out, err := s.ec2.DescribeInstanceTypeOfferings(ctx, &ec2.DescribeInstanceTypeOfferingsInput{
			LocationType: ec2types.LocationTypeAvailabilityZone,
			Filters: []ec2types.Filter{
				{Name: sdkaws.String("instance-type"), Values: []string{name}},
				{Name: sdkaws.String("location"), Values: []string{zone}},
			},
		})
		if err != nil {
			return providers.MachineType{}, s.fail("DescribeInstanceTypeOfferings", false, err)
		}
		if len(out.InstanceTypeOfferings) == 0 {
			return providers.MachineType{}, providers.NotFoundf("MachineType", "machine type %s is not offered in zone %s", name, zone)
		}
	}
	mt := providers.MachineType{Name: name, Location: location, VCPU: info.vcpu, MemoryGiB: int(info.memoryMiB / 1024)}
	if info.gpus != nil {
		g := *info.gpus
		mt.Accelerators = &g
	}
	return mt, nil
}

// Versions lists the Kubernetes versions EKS offers for a cluster in the
// account's region (DescribeClusterVersions, every page), those in
// standard or extended support, and the default one.
func (a *Adapter) Versions(ctx context.Context, acct providers.Account, location string) (providers.KubernetesVersions, error) {
	s, err := a.open(ctx, "Versions", acct)
	if err != nil {
		return providers.KubernetesVersions{}, err
	}
	if location != s.cfg.Region {
		return providers.KubernetesVersions{}, providers.NotFoundf("Versions", "location %s is not region %s of account %q: EKS clusters go in the account's region", location, s.cfg.Region, acct.Name)
	}
	var out providers.KubernetesVersions
	var all []string
	p := eks.NewDescribeClusterVersionsPaginator(s.eks, &eks.DescribeClusterVersionsInput{ClusterType: sdkaws.String("eks")})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return providers.KubernetesVersions{}, s.fail("DescribeClusterVersions", false, err)
		}
		for _, v := range page.ClusterVersions {
			if v.VersionStatus == ekstypes.VersionStatusUnsupported {
				continue
			}
			all = append(all, sdkaws.ToString(v.ClusterVersion))
			if v.DefaultVersion {
				out.Default = providers.MinorOf(sdkaws.ToString(v.ClusterVersion))
			}
		}
	}
	out.Offered = providers.Minors(all)
	return out, nil
}
