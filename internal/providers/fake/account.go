package fake

import (
	"context"
	"crypto/subtle"
	"slices"
	"sort"
	"strings"

	"github.com/fleet-agent/fleet-agent/internal/providers"
)

// accountConfig is the `config` of a fake provider account. Unknown keys are
// refused, so that a typo in a test document shows.
//
//	{ "token": "secret://fake-token", "project": "team-a" }
//
// project scopes the clusters an account creates and finds by name
// (default "default"); seeded clusters are adoptable from any project.
type accountConfig struct {
	Token   string `json:"token,omitempty"`
	Project string `json:"project,omitempty"`
}

type account struct {
	Name    string
	Project string
}

// authorize checks an account as a real provider would on every call: its
// config must decode and its token must resolve, now, to the expected value.
func (f *Fake) authorize(ctx context.Context, method string, acct providers.Account) (account, error) {
	if acct.Provider != "" && acct.Provider != providers.FakeID {
		return account{}, providers.Invalidf(method, "wrongProvider", "provider account %q is for %q, not fake", acct.Name, acct.Provider)
	}
	var cfg accountConfig
	if err := providers.DecodeAccountConfig(acct, &cfg); err != nil {
		return account{}, opErr(method, err)
	}
	a := account{Name: acct.Name, Project: cfg.Project}
	if a.Project == "" {
		a.Project = "default"
	}
	var presented string
	if cfg.Token != "" {
		v, err := f.resolve(ctx, cfg.Token)
		if err != nil {
			return account{}, &providers.Error{Op: method, Class: providers.Terminal, SideEffect: providers.None, Reason: "secretMissing", Message: "provider account " + quote(acct.Name) + ": its token reference does not resolve", Err: err}
		}
		presented = v
	}
	if f.cfg.Token == "" {
		return a, nil
	}
	want, err := f.resolve(ctx, f.cfg.Token)
	if err != nil {
		return account{}, &providers.Error{Op: method, Class: providers.Terminal, SideEffect: providers.None, Reason: "secretMissing", Message: "providers.fake.token does not resolve", Err: err}
	}
	if cfg.Token == "" || subtle.ConstantTimeCompare([]byte(presented), []byte(want)) != 1 {
		return account{}, &providers.Error{Op: method, Class: providers.Terminal, SideEffect: providers.None, Reason: "credentialsRefused", Message: "provider account " + quote(acct.Name) + ": credentials refused"}
	}
	return a, nil
}

func (f *Fake) resolve(ctx context.Context, ref string) (string, error) {
	if f.secrets == nil {
		return "", providers.Errorf("", providers.Terminal, providers.None, "no secret resolver")
	}
	return f.secrets.Resolve(ctx, ref)
}

func quote(s string) string { return `"` + s + `"` }

// Verify checks the account's credentials.
func (f *Fake) Verify(ctx context.Context, acct providers.Account) error {
	_, finish, err := f.call(ctx, "Verify", &acct)
	if err != nil {
		return err
	}
	return finish(nil)
}

// Locations lists the regions, then the zones, each sorted by name.
func (f *Fake) Locations(ctx context.Context, acct providers.Account) ([]providers.Location, error) {
	_, finish, err := f.call(ctx, "Locations", &acct)
	if err != nil {
		return nil, err
	}
	var regions, zones []providers.Location
	for _, l := range f.cfg.Locations {
		regions = append(regions, providers.Location{Name: l.Name, Kind: providers.Region, Zones: slices.Clone(l.Zones)})
		for _, z := range l.Zones {
			zones = append(zones, providers.Location{Name: z, Kind: providers.Zone, Region: l.Name})
		}
	}
	byName := func(a, b providers.Location) int { return strings.Compare(a.Name, b.Name) }
	slices.SortFunc(regions, byName)
	slices.SortFunc(zones, byName)
	return append(regions, zones...), finish(nil)
}

// MachineType describes a machine type at a region or zone.
func (f *Fake) MachineType(ctx context.Context, acct providers.Account, location, name string) (providers.MachineType, error) {
	_, finish, err := f.call(ctx, "MachineType", &acct)
	if err != nil {
		return providers.MachineType{}, err
	}
	region := f.cfg.region(location)
	if region == "" {
		return providers.MachineType{}, finish(providers.NotFoundf("", "location %q does not exist", location))
	}
	m, ok := f.cfg.machineType(region, name)
	if !ok {
		e := providers.NotFoundf("", "machine type %q does not exist in %s", name, location)
		e.Offered = f.cfg.machineTypesIn(region)
		return providers.MachineType{}, finish(e)
	}
	return describe(m, location), finish(nil)
}

// Versions lists the versions of the fake's config: the same at every
// location it has.
func (f *Fake) Versions(ctx context.Context, acct providers.Account, location string) (providers.KubernetesVersions, error) {
	_, finish, err := f.call(ctx, "Versions", &acct)
	if err != nil {
		return providers.KubernetesVersions{}, err
	}
	if f.cfg.region(location) == "" {
		return providers.KubernetesVersions{}, finish(providers.NotFoundf("", "location %q does not exist", location))
	}
	return providers.KubernetesVersions{Offered: slices.Clone(f.cfg.Versions), Default: f.cfg.DefaultVersion}, finish(nil)
}

func describe(m MachineTypeConfig, location string) providers.MachineType {
	mt := providers.MachineType{Name: m.Name, Location: location, VCPU: m.VCPU, MemoryGiB: m.MemoryGiB}
	if m.GPUs != nil {
		mt.Accelerators = &providers.Accelerators{Type: m.GPUs.Type, Count: m.GPUs.Count}
	}
	for _, g := range m.Attachable {
		mt.Attachable = append(mt.Attachable, providers.Accelerators{Type: g.Type, Count: g.Count})
	}
	return mt
}

// Rules are the fake's: regions (and zones with zonalClusters), zones and
// disk per node pool, NodeCount as the total, zeroNodes and spot as set.
func (f *Fake) Rules(ctx context.Context, acct providers.Account) (providers.Rules, error) {
	_, finish, err := f.call(ctx, "Rules", &acct)
	if err != nil {
		return providers.Rules{}, err
	}
	return f.rules(), finish(nil)
}

func (f *Fake) rules() providers.Rules {
	r := providers.Rules{
		ClusterLocations: []providers.LocationKind{providers.Region},
		NodePoolZones:    true,
		DiskSize:         true,
		ZeroNodes:        f.cfg.ZeroNodes,
		Spot:             f.cfg.Spot,
	}
	if f.cfg.ZonalClusters {
		r.ClusterLocations = append(r.ClusterLocations, providers.Zone)
	}
	return r
}

func sortedKeys[M ~map[string]V, V any](m M) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
