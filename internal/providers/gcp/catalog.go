package gcp

import (
	"context"
	"errors"
	"maps"
	"path"
	"slices"
	"strings"

	compute "google.golang.org/api/compute/v1"

	"github.com/fleet-agent/fleet-agent/internal/providers"
)

// Verify fetches a token for the account and reads its project's server
// config: the credentials work and the identity reaches GKE in the project.
func (a *Adapter) Verify(ctx context.Context, acct providers.Account) error {
	const op = "Verify"
	s, err := a.open(ctx, op, acct)
	if err != nil {
		return err
	}
	loc := a.cfg.DefaultLocation
	if len(s.cfg.Zones) > 0 {
		loc = regionOfZone(s.cfg.Zones[0])
	}
	if _, err := s.ctr.Projects.Locations.GetServerConfig(s.parent(loc)).Context(ctx).Do(); err != nil {
		err = classify(op, err, read)
		if providers.ClassOf(err) == providers.NotFound {
			return providers.NotFoundf(op, "project %s is not known to GKE (or the API is not enabled there): %v", s.cfg.ProjectID, err)
		}
		return err
	}
	return nil
}

// Rules are GKE's (reference "Provider differences"): a cluster in a region
// or a zone, node pools pinned to zones with a disk size, nodes per zone,
// zero nodes and Spot allowed.
func (a *Adapter) Rules(ctx context.Context, acct providers.Account) (providers.Rules, error) {
	if _, err := parseAccount("Rules", acct); err != nil {
		return providers.Rules{}, err
	}
	return providers.Rules{
		ClusterLocations: []providers.LocationKind{providers.Region, providers.Zone},
		NodePoolZones:    true,
		DiskSize:         true,
		NodesPerZone:     true,
		ZeroNodes:        true,
		Spot:             true,
	}, nil
}

// Locations lists the project's regions and zones from compute, sorted,
// regions first. An account with zones is limited to them and their
// regions: those are where it puts nodes.
func (a *Adapter) Locations(ctx context.Context, acct providers.Account) ([]providers.Location, error) {
	const op = "Locations"
	s, err := a.open(ctx, op, acct)
	if err != nil {
		return nil, err
	}
	var regions, zones []providers.Location
	err = s.cmp.Regions.List(s.cfg.ProjectID).Pages(ctx, func(l *compute.RegionList) error {
		for _, r := range l.Items {
			if r.Status == "DOWN" {
				continue
			}
			var zs []string
			for _, u := range r.Zones {
				z := path.Base(u)
				if len(s.cfg.Zones) == 0 || slices.Contains(s.cfg.Zones, z) {
					zs = append(zs, z)
				}
			}
			if len(s.cfg.Zones) > 0 && len(zs) == 0 {
				continue
			}
			slices.Sort(zs)
			regions = append(regions, providers.Location{Name: r.Name, Kind: providers.Region, Zones: zs})
			for _, z := range zs {
				zones = append(zones, providers.Location{Name: z, Kind: providers.Zone, Region: r.Name})
			}
		}
		return nil
	})
	if err != nil {
		return nil, classify(op, err, read)
	}
	for _, z := range s.cfg.Zones {
		if !slices.ContainsFunc(zones, func(l providers.Location) bool { return l.Name == z }) {
			return nil, providers.Invalidf(op, "accountConfig", "provider account %q: zone %s does not exist in project %s", acct.Name, z, s.cfg.ProjectID)
		}
	}
	byName := func(x, y providers.Location) int { return strings.Compare(x.Name, y.Name) }
	slices.SortFunc(regions, byName)
	slices.SortFunc(zones, byName)
	return append(regions, zones...), nil
}

// defaultZones are a cluster's node zones at a location: the zone itself;
// for a region, the account's zones there, else the region's first three
// (GKE's default spread, GKE's documentation). EnsureCluster sets them
// explicitly, so MachineType checks the zones the node pools will use.
func (s *session) defaultZones(ctx context.Context, location string) ([]string, error) {
	if zoneRE().MatchString(location) {
		return []string{location}, nil
	}
	if zs := s.cfg.zonesIn(location); len(zs) > 0 {
		slices.Sort(zs)
		return zs, nil
	}
	r, err := s.cmp.Regions.Get(s.cfg.ProjectID, location).Context(ctx).Do()
	if err != nil {
		return nil, classify(s.op, err, read)
	}
	var zs []string
	for _, u := range r.Zones {
		zs = append(zs, path.Base(u))
	}
	slices.Sort(zs)
	return zs[:min(3, len(zs))], nil
}

// MachineType describes a machine type at a zone, or at a region in every
// zone its clusters put nodes in by default; missing in any of them is
// ErrNotFound. Accelerators are the machine type's built-in GPUs (A2, A3,
// G2): GPUs attached to an N1 machine are not its own; an N1 type lists
// those it can be given in every one of the zones in Attachable.
func (a *Adapter) MachineType(ctx context.Context, acct providers.Account, location, name string) (providers.MachineType, error) {
	const op = "MachineType"
	s, err := a.open(ctx, op, acct)
	if err != nil {
		return providers.MachineType{}, err
	}
	if !zoneRE().MatchString(location) && !regionRE().MatchString(location) {
		return providers.MachineType{}, providers.NotFoundf(op, "location %q is not a region or zone", location)
	}
	zones, err := s.defaultZones(ctx, location)
	if err != nil {
		if errors.Is(err, providers.ErrNotFound) {
			return providers.MachineType{}, providers.NotFoundf(op, "region %s does not exist in project %s", location, s.cfg.ProjectID)
		}
		return providers.MachineType{}, err
	}
	var mt *compute.MachineType
	var missing []string
	for _, z := range zones {
		m, err := s.cmp.MachineTypes.Get(s.cfg.ProjectID, z, name).Context(ctx).Do()
		err = classify(op, err, read)
		switch {
		case errors.Is(err, providers.ErrNotFound):
			missing = append(missing, z)
		case err != nil:
			return providers.MachineType{}, err
		case mt == nil:
			mt = m
		}
	}
	if len(missing) > 0 {
		return providers.MachineType{}, providers.NotFoundf(op, "machine type %s does not exist in %s", name, strings.Join(missing, ", "))
	}
	out := providers.MachineType{Name: mt.Name, Location: location, VCPU: int(mt.GuestCpus), MemoryGiB: int(mt.MemoryMb / 1024)}
	if acc := builtIn(mt); acc != nil {
		out.Accelerators = acc
	} else if takesAttached(mt.Name) {
		if out.Attachable, err = s.attachable(ctx, zones); err != nil {
			return providers.MachineType{}, err
		}
	}
	return out, nil
}

// n1GPUs are the GPUs Compute Engine attaches to N1 machine types, the
// only ones that take GPUs they are not built with (Google's "GPU
// platforms" page: T4, V100, P100, P4, the P4/P100/T4 virtual workstation
// editions; K80 is retired). Newer GPUs come only built into their own
// machine types (A2, A3, G2, ...), though acceleratorTypes lists them too.
var n1GPUs = map[string]bool{
	"nvidia-tesla-t4": true, "nvidia-tesla-v100": true, "nvidia-tesla-p100": true, "nvidia-tesla-p4": true,
	"nvidia-tesla-t4-vws": true, "nvidia-tesla-p100-vws": true, "nvidia-tesla-p4-vws": true,
}

func takesAttached(machineType string) bool { return strings.HasPrefix(machineType, "n1-") }

// attachable lists the GPUs an N1 machine can be given in every one of the
// zones, each with the most a machine takes there (acceleratorTypes'
// maximumCardsPerInstance), sorted by type.
func (s *session) attachable(ctx context.Context, zones []string) ([]providers.Accelerators, error) {
	var most map[string]int
	for _, z := range zones {
		here := map[string]int{}
		err := s.cmp.AcceleratorTypes.List(s.cfg.ProjectID, z).Pages(ctx, func(l *compute.AcceleratorTypeList) error {
			for _, a := range l.Items {
				// A deprecated type is still offered; an obsolete one not.
				if n1GPUs[a.Name] && (a.Deprecated == nil || a.Deprecated.State == "DEPRECATED" || a.Deprecated.State == "") {
					here[a.Name] = int(a.MaximumCardsPerInstance)
				}
			}
			return nil
		})
		if err != nil {
			return nil, classify(s.op, err, read)
		}
		if most == nil {
			most = here
			continue
		}
		for name, n := range most {
			if h, ok := here[name]; ok {
				most[name] = min(n, h)
			} else {
				delete(most, name)
			}
		}
	}
	var out []providers.Accelerators
	for _, name := range slices.Sorted(maps.Keys(most)) {
		out = append(out, providers.Accelerators{Type: name, Count: most[name]})
	}
	return out, nil
}

// builtIn is a machine type's own GPUs, or nil.
func builtIn(mt *compute.MachineType) *providers.Accelerators {
	for _, a := range mt.Accelerators {
		if a.GuestAcceleratorCount > 0 {
			return &providers.Accelerators{Type: a.GuestAcceleratorType, Count: int(a.GuestAcceleratorCount)}
		}
	}
	return nil
}

// Versions reads GKE's server config at a location: the control plane
// versions a cluster there may be created at or upgraded to, as minors,
// and the default a cluster created without one gets.
func (a *Adapter) Versions(ctx context.Context, acct providers.Account, location string) (providers.KubernetesVersions, error) {
	const op = "Versions"
	s, err := a.open(ctx, op, acct)
	if err != nil {
		return providers.KubernetesVersions{}, err
	}
	if !zoneRE().MatchString(location) && !regionRE().MatchString(location) {
		return providers.KubernetesVersions{}, providers.NotFoundf(op, "location %q is not a region or zone", location)
	}
	sc, err := s.ctr.Projects.Locations.GetServerConfig(s.parent(location)).Context(ctx).Do()
	if err != nil {
		return providers.KubernetesVersions{}, classify(op, err, read)
	}
	return providers.KubernetesVersions{Offered: providers.Minors(sc.ValidMasterVersions), Default: providers.MinorOf(sc.DefaultClusterVersion)}, nil
}
