package fake

import (
	"fmt"
	"slices"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/providers"
)

// Config is the fake's block of the agent config (`providers.fake`). Every
// key is optional; DefaultConfig gives the defaults.
//
//	providers:
//	  fake:
//	    statePath: /var/lib/fleet-agent/fake.json  # [none: state in memory only]
//	    steps: { cluster: 3, nodePool: 2, update: 1, delete: 1 }
//	    stepEvery: 0s         # [0: only observations advance operations]
//	    versions: ["1.33", "1.34", "1.35"]
//	    defaultVersion: "1.34"
//	    locations: [{ name: fake-east, zones: [fake-east-a, fake-east-b] }, ...]
//	    zonalClusters: false  # [false]: a cluster may be put in a zone too
//	    machineTypes: [{ name: fake-h100x8, vcpu: 208, memoryGiB: 1872,
//	                     gpus: { type: nvidia-h100, count: 8 }, locations: [] },
//	                   { name: fake-n1-8, attachable: [{ type: nvidia-t4, count: 4 }] }, ...]
//	    zeroNodes: true       # [true]: a fixed-size pool may have 0 nodes
//	    spot: true            # [true]: Spot node pools exist
//	    token: secret://fake-token  # [none]: accounts' token must resolve to the same value
//	    adoptable: [{ name: theirs, location: fake-east, version: "1.34",
//	                  nodePools: [{ name: default, machineType: fake-cpu-4, nodeCount: 2 }] }]
//	    faults: [{ method: EnsureCluster, count: 1, class: unavailable, sideEffect: done },
//	             { method: EnsureNodePool, doneWithoutObject: true }]
//	    names: converge       # [converge] | duplicate (DOKS) | conflict (GKE, EKS)
//	    listLag: 0s           # [0]: lists answer the account as it was this long ago
//
// adoptable clusters are added to the state when it has none of that
// location and name; faults only when the state file is new, so that a
// restart does not fire them again.
//
// names says what a second create of a name in the account's project does:
// converge converges the cluster that has it; duplicate (DOKS, which never
// looks) makes another cluster of the name with a new id, after which a
// read by name without an id finds two and answers a Conflict naming both;
// conflict (GKE, EKS) refuses with a Conflict, reason "alreadyExists", and
// a read by name still finds the first. Node pool names stay converging
// under every value (the clouds key pools by name within a cluster).
//
// listLag makes ListClusters and ListNodePools eventually consistent: they
// answer the account as it was listLag ago on the fake's clock, so a
// cluster made less than listLag ago is not listed yet and one gone less
// than listLag ago still is. GetCluster, GetNodePool and the other reads by
// name or id are current. The fake keeps what it listed of each cluster and
// when (State.History), pruned to what the window needs and at most
// maxHistory entries per cluster; every user of one state file should set
// the same listLag.
//
// A fault with doneWithoutObject makes EnsureCluster or EnsureNodePool do
// its work and answer success with an empty object (no id, no name), as a
// 2xx whose body the client cannot read. after: N lets N calls through
// before the fault fires; lost makes a failing fault do nothing whatever
// its side effect (a request that never arrived); vanish removes the
// call's object right after it (a create the provider dropped, an object
// someone else deleted); workFails makes the call's work fail at the
// provider (status error; a delete leaves its object running).
type Config struct {
	// StatePath is the JSON file the fake keeps its provider-side truth in,
	// so that it survives a restart of the agent. Empty keeps it in memory.
	// It is one cloud account: several fakes (agents, processes) may share
	// it, each call reading and writing it under the exclusive lock of
	// `<statePath>.lock`.
	StatePath string `yaml:"statePath"`
	Steps     Steps  `yaml:"steps"`
	// StepEvery, when set, also advances an operation one step per interval
	// of the injected clock since it was accepted.
	StepEvery time.Duration `yaml:"stepEvery"`
	// ClockOnly (tests only, with StepEvery): reads no longer move an
	// operation on, so that it takes its steps on the clock alone, as a
	// service does, whoever looks at it.
	ClockOnly      bool                `yaml:"-"`
	Versions       []string            `yaml:"versions"`
	DefaultVersion string              `yaml:"defaultVersion"`
	Locations      []LocationConfig    `yaml:"locations"`
	ZonalClusters  bool                `yaml:"zonalClusters"`
	MachineTypes   []MachineTypeConfig `yaml:"machineTypes"`
	ZeroNodes      bool                `yaml:"zeroNodes"`
	Spot           bool                `yaml:"spot"`
	// Token is a secret reference. When set, every call's account must carry
	// a `token` reference that resolves to the same value, or the call is
	// refused (Terminal, "credentialsRefused").
	Token     string        `yaml:"token"`
	Adoptable []SeedCluster `yaml:"adoptable"`
	Faults    []Fault       `yaml:"faults"`
	// Kube backs the clusters by a real API server (KubeConfig); nil: the
	// clusters have no API.
	Kube *KubeConfig `yaml:"kube"`
	// Names is what a create meets when its name is taken in the account's
	// project: converge it (NamesConverge, the default), make another
	// cluster of that name (NamesDuplicate) or refuse (NamesConflict).
	Names Names `yaml:"names"`
	// ListLag makes ListClusters and ListNodePools answer the account as it
	// was that long ago on the injected clock, as an eventually consistent
	// list does; reads by name are current. 0: lists are current.
	ListLag time.Duration `yaml:"listLag"`
}

// Names is how an account treats a second create of a name.
type Names string

// The ways. Each is one cloud's.
const (
	// NamesConverge: EnsureCluster of a name in use converges that cluster
	// (what the adapters make of every cloud when they can see the name).
	NamesConverge Names = "converge"
	// NamesDuplicate: like DOKS, a create never looks, so a second create
	// of a name in use makes a second cluster with a new id; a read by name
	// then finds two and answers a Conflict naming both ids.
	NamesDuplicate Names = "duplicate"
	// NamesConflict: like GKE and EKS, a create of a name in use is refused
	// with a Conflict (reason "alreadyExists"); a read by name finds the
	// cluster that holds it.
	NamesConflict Names = "conflict"
)

// Steps are how many observations (GetCluster, GetNodePool, ListNodePools,
// ReadAdoptable, or Fake.Advance) an operation takes to finish. 0 finishes it
// within the call that started it.
type Steps struct {
	Cluster  int `yaml:"cluster"`
	NodePool int `yaml:"nodePool"`
	Update   int `yaml:"update"`
	Delete   int `yaml:"delete"`
}

// LocationConfig is a region and its zones.
type LocationConfig struct {
	Name  string   `yaml:"name"`
	Zones []string `yaml:"zones"`
}

// MachineTypeConfig is one machine type of the catalogue.
type MachineTypeConfig struct {
	Name      string     `yaml:"name"`
	VCPU      int        `yaml:"vcpu"`
	MemoryGiB int        `yaml:"memoryGiB"`
	GPUs      *GPUConfig `yaml:"gpus"`
	// Attachable are GPUs a machine type without its own takes, each with
	// the most one machine takes.
	Attachable []GPUConfig `yaml:"attachable"`
	// Locations are the regions it exists in; empty is every region.
	Locations []string `yaml:"locations"`
}

// GPUConfig is the accelerators of a machine type.
type GPUConfig struct {
	Type  string `yaml:"type"`
	Count int    `yaml:"count"`
}

// SeedCluster is a cluster someone else made, there to be adopted. Its
// adopt id is `<location>/<name>` (or its ID), from any account.
type SeedCluster struct {
	Name         string         `yaml:"name"`
	Location     string         `yaml:"location"`
	Version      string         `yaml:"version"`
	PrivateNodes bool           `yaml:"privateNodes"`
	NodePools    []SeedNodePool `yaml:"nodePools"`
}

// SeedNodePool is a node pool of a seeded cluster: the owner's own.
type SeedNodePool struct {
	Name        string            `yaml:"name"`
	MachineType string            `yaml:"machineType"`
	NodeCount   int               `yaml:"nodeCount"`
	Labels      map[string]string `yaml:"labels"`
}

// DefaultConfig is the fake as it is without a config block: two regions,
// a CPU, an L4 and an H100 machine type, zeroNodes and Spot allowed.
func DefaultConfig() Config {
	return Config{
		Steps:          Steps{Cluster: 3, NodePool: 2, Update: 1, Delete: 1},
		Versions:       []string{"1.33", "1.34", "1.35"},
		DefaultVersion: "1.34",
		Locations: []LocationConfig{
			{Name: "fake-east", Zones: []string{"fake-east-a", "fake-east-b", "fake-east-c"}},
			{Name: "fake-west", Zones: []string{"fake-west-a"}},
		},
		MachineTypes: []MachineTypeConfig{
			{Name: "fake-cpu-4", VCPU: 4, MemoryGiB: 16},
			{Name: "fake-cpu-8", VCPU: 8, MemoryGiB: 32},
			{Name: "fake-l4x1", VCPU: 8, MemoryGiB: 32, GPUs: &GPUConfig{Type: "nvidia-l4", Count: 1}},
			{Name: "fake-h100x8", VCPU: 208, MemoryGiB: 1872, GPUs: &GPUConfig{Type: "nvidia-h100", Count: 8}, Locations: []string{"fake-east"}},
		},
		ZeroNodes: true,
		Spot:      true,
		Names:     NamesConverge,
	}
}

// methods are the calls a fault may name.
var methods = []string{
	"Verify", "Locations", "MachineType", "Rules",
	"EnsureCluster", "GetCluster", "DeleteCluster", "ReadAdoptable", "ListClusters",
	"EnsureNodePool", "GetNodePool", "ResizeNodePool", "ListNodePools", "DeleteNodePool", "RemoveNodes",
	"Credentials", "RevokeAccess",
}

var classes = []providers.Class{providers.Invalid, providers.NotFound, providers.Conflict, providers.Throttled, providers.Unavailable, providers.Terminal, providers.Unknown}

func (c *Config) validate() error {
	if c.Steps.Cluster < 0 || c.Steps.NodePool < 0 || c.Steps.Update < 0 || c.Steps.Delete < 0 {
		return fmt.Errorf("steps: counts must not be negative")
	}
	if c.StepEvery < 0 {
		return fmt.Errorf("stepEvery: must not be negative")
	}
	switch c.Names {
	case "":
		c.Names = NamesConverge
	case NamesConverge, NamesDuplicate, NamesConflict:
	default:
		return fmt.Errorf("names: %q is not %s, %s or %s", c.Names, NamesConverge, NamesDuplicate, NamesConflict)
	}
	if c.ListLag < 0 {
		return fmt.Errorf("listLag: must not be negative")
	}
	if len(c.Versions) == 0 {
		return fmt.Errorf("versions: at least one is needed")
	}
	if c.DefaultVersion == "" {
		c.DefaultVersion = c.Versions[len(c.Versions)-1]
	}
	if !slices.Contains(c.Versions, c.DefaultVersion) {
		return fmt.Errorf("defaultVersion %q is not one of versions", c.DefaultVersion)
	}
	if len(c.Locations) == 0 {
		return fmt.Errorf("locations: at least one is needed")
	}
	seen := map[string]bool{}
	for _, l := range c.Locations {
		for _, n := range append([]string{l.Name}, l.Zones...) {
			if n == "" || seen[n] {
				return fmt.Errorf("locations: %q is empty or repeated", n)
			}
			seen[n] = true
		}
	}
	types := map[string]bool{}
	for _, m := range c.MachineTypes {
		if m.Name == "" || types[m.Name] {
			return fmt.Errorf("machineTypes: %q is empty or repeated", m.Name)
		}
		types[m.Name] = true
		if m.GPUs != nil && (m.GPUs.Type == "" || m.GPUs.Count < 1) {
			return fmt.Errorf("machineTypes: %s: gpus needs a type and a count of at least 1", m.Name)
		}
		for _, g := range m.Attachable {
			if m.GPUs != nil || g.Type == "" || g.Count < 1 {
				return fmt.Errorf("machineTypes: %s: attachable GPUs need a type and a most of at least 1, on a machine type without gpus of its own", m.Name)
			}
		}
		for _, l := range m.Locations {
			if !slices.ContainsFunc(c.Locations, func(x LocationConfig) bool { return x.Name == l }) {
				return fmt.Errorf("machineTypes: %s: unknown region %q", m.Name, l)
			}
		}
	}
	for _, s := range c.Adoptable {
		if s.Name == "" || c.region(s.Location) == "" {
			return fmt.Errorf("adoptable: %q needs a name and a known location", s.Name)
		}
		if s.Version != "" && !slices.Contains(c.Versions, s.Version) {
			return fmt.Errorf("adoptable: %s: unknown version %q", s.Name, s.Version)
		}
		for _, p := range s.NodePools {
			if p.Name == "" || !types[p.MachineType] {
				return fmt.Errorf("adoptable: %s: node pool %q needs a name and a known machine type", s.Name, p.Name)
			}
		}
	}
	for _, f := range c.Faults {
		if err := f.validate(); err != nil {
			return fmt.Errorf("faults: %w", err)
		}
	}
	return nil
}

// region returns the region a location is or lies in, or "".
func (c *Config) region(loc string) string {
	for _, l := range c.Locations {
		if l.Name == loc || slices.Contains(l.Zones, loc) {
			return l.Name
		}
	}
	return ""
}

func (c *Config) zonesOf(region string) []string {
	for _, l := range c.Locations {
		if l.Name == region {
			return slices.Clone(l.Zones)
		}
	}
	return nil
}

// machineTypesIn names the machine types offered in region, sorted.
func (c *Config) machineTypesIn(region string) []string {
	var names []string
	for _, m := range c.MachineTypes {
		if len(m.Locations) == 0 || slices.Contains(m.Locations, region) {
			names = append(names, m.Name)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

func (c *Config) machineType(region, name string) (MachineTypeConfig, bool) {
	for _, m := range c.MachineTypes {
		if m.Name == name && (len(m.Locations) == 0 || slices.Contains(m.Locations, region)) {
			return m, true
		}
	}
	return MachineTypeConfig{}, false
}
