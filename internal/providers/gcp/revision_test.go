package gcp

import (
	"testing"

	container "google.golang.org/api/container/v1"
)

// TestOpCluster: an operation's targetLink names its cluster whether GKE
// writes a region or a zone, a project id or number, a cluster or one of
// its node pools; a link to no cluster names none.
func TestOpCluster(t *testing.T) {
	for link, want := range map[string]string{
		"https://container.googleapis.com/v1/projects/123/locations/us-central1/clusters/c1":                     "us-central1/c1",
		"https://container.googleapis.com/v1/projects/123/locations/us-central1/clusters/c1/nodePools/gpu":       "us-central1/c1",
		"https://container.googleapis.com/v1/projects/p1/zones/us-central1-a/clusters/c2/nodePools/default-pool": "us-central1-a/c2",
		"https://container.googleapis.com/v1/projects/p1/zones/us-central1-a/clusters/clusters":                  "us-central1-a/clusters",
		"https://container.googleapis.com/v1/projects/123/locations/us-central1":                                 "",
		"": "",
	} {
		if got := opCluster(link); got != want {
			t.Errorf("opCluster(%q) = %q, want %q", link, got, want)
		}
	}
}

// TestPoolsRevision: the revision moves with what a pool listing would show
// and with an operation on the cluster started or finished, and not with
// the order GKE answers in.
func TestPoolsRevision(t *testing.T) {
	pool := func(name string, initial int64, labels map[string]string) *container.NodePool {
		return &container.NodePool{Name: name, Status: "RUNNING", Etag: "e1", InitialNodeCount: initial,
			Config: &container.NodeConfig{MachineType: "g2-standard-8", Labels: labels}}
	}
	op := func(name, status string) *container.Operation {
		return &container.Operation{Name: name, Status: status}
	}
	base := poolsRevision(&container.Cluster{NodePools: []*container.NodePool{pool("a", 1, nil), pool("b", 1, nil)}},
		[]*container.Operation{op("o1", "DONE"), op("o2", "DONE")})
	if base == "" {
		t.Fatal("no revision")
	}
	same := poolsRevision(&container.Cluster{NodePools: []*container.NodePool{pool("b", 1, nil), pool("a", 1, nil)}},
		[]*container.Operation{op("o2", "DONE"), op("o1", "DONE")})
	if same != base {
		t.Errorf("the order of the answer moved the revision")
	}
	for what, c := range map[string]struct {
		pools []*container.NodePool
		ops   []*container.Operation
	}{
		"a resize (a new operation)":      {[]*container.NodePool{pool("a", 1, nil), pool("b", 1, nil)}, []*container.Operation{op("o1", "DONE"), op("o2", "DONE"), op("o3", "RUNNING")}},
		"an operation finished":           {[]*container.NodePool{pool("a", 1, nil), pool("b", 1, nil)}, []*container.Operation{op("o1", "DONE"), op("o2", "RUNNING")}},
		"a pool gone":                     {[]*container.NodePool{pool("a", 1, nil)}, []*container.Operation{op("o1", "DONE"), op("o2", "DONE")}},
		"labels set":                      {[]*container.NodePool{pool("a", 1, map[string]string{"x": "y"}), pool("b", 1, nil)}, []*container.Operation{op("o1", "DONE"), op("o2", "DONE")}},
		"initialNodeCount after a resize": {[]*container.NodePool{pool("a", 2, nil), pool("b", 1, nil)}, []*container.Operation{op("o1", "DONE"), op("o2", "DONE")}},
	} {
		if got := poolsRevision(&container.Cluster{NodePools: c.pools}, c.ops); got == base {
			t.Errorf("%s: the revision did not move", what)
		}
	}
}
