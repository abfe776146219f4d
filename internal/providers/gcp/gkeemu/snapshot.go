package gkeemu

import (
	"maps"
	"slices"
)

// Snapshot is the emulator's truth at one moment: every cluster with its
// node pools as the emulator holds them, the managed instance groups that
// hold the nodes, and the operations still running. Tests read it to say
// what exists without going through the API the adapter under test uses,
// so a wrong answer of the API cannot hide a wrong state.
type Snapshot struct {
	Clusters []ClusterState
	Groups   []GroupState
	// Running are the operations not DONE, by name.
	Running []string
}

// ClusterState is one cluster.
type ClusterState struct {
	Project, Location, Name string
	// ID is the opaque id GKE gives the cluster; SelfLink its URL.
	ID, SelfLink string
	Status       string
	Locations    []string
	// Labels are the resource labels as stored (GCP label keys).
	Labels       map[string]string
	PrivateNodes bool
	// Endpoint is "" until the API is up.
	Endpoint string
	Version  string
	Pools    []PoolState
}

// PoolState is one node pool.
type PoolState struct {
	Name, Status string
	MachineType  string
	DiskGB       int
	Spot         bool
	Preemptible  bool
	Accelerators []Accelerator
	// Labels are the Kubernetes node labels; ResourceLabels the GCP labels
	// of its machines.
	Labels, ResourceLabels map[string]string
	Locations              []string
	InitialNodeCount       int
	// Autoscaling is nil when off; per zone.
	Autoscaling *Bounds
	// Nodes is each zone's target size, from the pool's instance groups.
	Nodes map[string]int
}

// Accelerator is a node pool's GPUs as stored.
type Accelerator struct {
	Type   string
	Count  int
	Driver string
}

// Bounds are autoscaling bounds per zone.
type Bounds struct{ Min, Max int }

// GroupState is one managed instance group.
type GroupState struct {
	Zone, Name string
	Target     int
	Stable     bool
}

// Snapshot returns the emulator's truth, sorted (clusters by project,
// location and name; pools in creation order, as GKE lists them; groups by
// zone and name). It observes nothing: no operation moves.
func (e *Emulator) Snapshot() Snapshot {
	e.mu.Lock()
	defer e.mu.Unlock()
	var s Snapshot
	for _, k := range slices.Sorted(maps.Keys(e.clusters)) {
		c := e.clusters[k]
		cs := ClusterState{
			Project: c.project.ID, Location: c.location, Name: c.name, ID: c.id, SelfLink: e.clusterSelfLink(c),
			Status: c.status, Locations: slices.Clone(c.locations), Labels: maps.Clone(c.labels),
			PrivateNodes: c.privateNodes, Endpoint: c.endpoint, Version: c.masterVersion,
		}
		for _, p := range c.pools {
			ps := PoolState{
				Name: p.name, Status: p.status, MachineType: p.cfg.machineType, DiskGB: p.cfg.diskGB,
				Spot: p.cfg.spot, Preemptible: p.cfg.preemptible,
				Labels: maps.Clone(p.cfg.labels), ResourceLabels: maps.Clone(p.cfg.resourceLabels),
				Locations: slices.Clone(p.locations), InitialNodeCount: p.initialCount, Nodes: map[string]int{},
			}
			for _, a := range p.cfg.accelerators {
				ps.Accelerators = append(ps.Accelerators, Accelerator{Type: a.Type, Count: int(a.Count), Driver: a.Driver})
			}
			if as := p.autoscaling; as != nil && as.enabled {
				ps.Autoscaling = &Bounds{Min: as.min, Max: as.max}
			}
			for _, mk := range p.migs {
				if m := e.migs[mk]; m != nil {
					ps.Nodes[m.zone] = m.target
				}
			}
			cs.Pools = append(cs.Pools, ps)
		}
		s.Clusters = append(s.Clusters, cs)
	}
	for _, k := range slices.Sorted(maps.Keys(e.migs)) {
		m := e.migs[k]
		s.Groups = append(s.Groups, GroupState{Zone: m.zone, Name: m.name, Target: m.target, Stable: m.stable})
	}
	for _, name := range e.opOrder {
		if op := e.ops[name]; op.status != "DONE" {
			s.Running = append(s.Running, name)
		}
	}
	return s
}

// Cluster finds a cluster of the snapshot by location and name.
func (s Snapshot) Cluster(location, name string) (ClusterState, bool) {
	for _, c := range s.Clusters {
		if c.Location == location && c.Name == name {
			return c, true
		}
	}
	return ClusterState{}, false
}

// Pool finds a node pool of a cluster by name.
func (c ClusterState) Pool(name string) (PoolState, bool) {
	for _, p := range c.Pools {
		if p.Name == name {
			return p, true
		}
	}
	return PoolState{}, false
}
