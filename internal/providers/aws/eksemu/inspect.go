package eksemu

import (
	"maps"
	"slices"
)

// What a test reads of the emulator's own state, to assert what exists at
// the "provider" rather than what the adapter says exists. Reading settles
// what is due on the clock but counts as no observation, so an assertion
// never moves an operation on.

// ClusterState is a cluster as the emulator holds it.
type ClusterState struct {
	Name, Arn, Status, Version string
	AuthenticationMode         string
	SubnetIDs                  []string
	Tags                       map[string]string
	// AccessEntries are the principals with an access entry.
	AccessEntries []string
}

// NodegroupState is a managed node group as the emulator holds it.
type NodegroupState struct {
	Name, Arn, Status string
	InstanceTypes     []string
	AmiType           string
	CapacityType      string
	// DiskSize is 0 when the group was made without one.
	DiskSize               int
	Subnets                []string
	NodeRole               string
	MinSize, MaxSize, Size int
	Labels, Tags           map[string]string
	// Issues are the codes of its health issues.
	Issues []string
}

// ClusterNames lists every cluster of the account, sorted.
func (e *Emulator) ClusterNames() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, n := range sortedKeys(e.clusters) {
		if e.settle(e.clusters[n]) {
			out = append(out, n)
		}
	}
	return out
}

// Cluster reads a cluster, false when it does not exist.
func (e *Emulator) Cluster(name string) (ClusterState, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.clusters[name]
	if c == nil || !e.settle(c) {
		return ClusterState{}, false
	}
	return ClusterState{
		Name: c.name, Arn: c.arn, Status: c.status, Version: c.version, AuthenticationMode: c.authMode,
		SubnetIDs: slices.Clone(c.vpc.SubnetIDs), Tags: maps.Clone(c.tags), AccessEntries: sortedKeys(c.entries),
	}, true
}

// Nodegroup reads a node group of a cluster, false when either does not
// exist.
func (e *Emulator) Nodegroup(cluster, name string) (NodegroupState, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.clusters[cluster]
	if c == nil || !e.settle(c) {
		return NodegroupState{}, false
	}
	ng := c.nodegroups[name]
	if ng == nil {
		return NodegroupState{}, false
	}
	s := NodegroupState{
		Name: ng.name, Arn: ng.arn, Status: ng.status, InstanceTypes: slices.Clone(ng.instanceTypes),
		AmiType: ng.amiType, CapacityType: ng.capacityType, Subnets: slices.Clone(ng.subnets), NodeRole: ng.nodeRole,
		MinSize: ng.min, MaxSize: ng.max, Size: ng.desire, Labels: maps.Clone(ng.labels), Tags: maps.Clone(ng.tags),
	}
	if ng.diskSize != nil {
		s.DiskSize = *ng.diskSize
	}
	for _, i := range ng.issues {
		if code, ok := i["code"].(string); ok {
			s.Issues = append(s.Issues, code)
		}
	}
	return s, true
}
