package gkeemu

import (
	"fmt"
	"maps"
)

// SeedCluster is a cluster made outside the adapter (by its owner, in the
// console), running, with node pools of its own: what an adopt id names.
type SeedCluster struct {
	Project  string // default: the first project
	Location string
	Name     string
	Labels   map[string]string
	Private  bool
	Pools    []SeedPool
}

// SeedPool is one of a seeded cluster's own node pools.
type SeedPool struct {
	Name        string
	MachineType string
	NodeCount   int
	Labels      map[string]string
}

// Seed adds a running cluster made by someone else. It returns its path
// (projects/p/locations/l/clusters/c).
func (e *Emulator) Seed(s SeedCluster) (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	project := &e.opts.Projects[0]
	for i := range e.opts.Projects {
		if e.opts.Projects[i].ID == s.Project {
			project = &e.opts.Projects[i]
		}
	}
	region := e.regionOf(s.Location)
	if region == "" || !nameRE.MatchString(s.Name) {
		return "", fmt.Errorf("gkeemu: seed %q needs a known location and a valid name", s.Name)
	}
	key := clusterKey(project.ID, s.Location, s.Name)
	if e.clusters[key] != nil {
		return e.clusters[key].path(), nil
	}
	regional := e.isRegion(s.Location)
	locations := []string{s.Location}
	if regional {
		zs := e.zonesOf(region)
		locations = zs[:min(3, len(zs))]
	}
	cl := &cluster{
		project: project, location: s.Location, regional: regional, name: s.Name,
		id:      hash8("seed/"+key) + hash8("seed/"+key+"/b") + hash8("seed/"+key+"/c"),
		created: e.now(), status: "RUNNING", locations: locations,
		initialVersion: e.opts.DefaultVersion, masterVersion: e.opts.DefaultVersion, nodeVersion: e.opts.DefaultVersion,
		labels: maps.Clone(s.Labels), privateNodes: s.Private,
	}
	cl.fingerprint = fingerprintOf(cl.labels)
	cl.endpoint = e.endpointFor(cl)
	for _, sp := range s.Pools {
		p, aerr := e.newPool(cl, &reqNodePool{Name: sp.Name, InitialNodeCount: flexInt(sp.NodeCount),
			Config: &reqNodeConfig{MachineType: sp.MachineType, Labels: sp.Labels}}, "node_pool")
		if aerr != nil {
			return "", fmt.Errorf("gkeemu: seed %s: %s", s.Name, aerr.message)
		}
		p.status = "RUNNING"
		cl.pools = append(cl.pools, p)
		e.makeMIGs(cl, p, sp.NodeCount)
		e.settleMIGs(p)
	}
	e.clusters[key] = cl
	return cl.path(), nil
}
