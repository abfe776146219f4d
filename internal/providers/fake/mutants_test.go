package fake_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/providers/conformance"
)

// mutant is the fake with one behaviour broken, to show that the
// conformance case meant to catch it does.
type mutant struct {
	*fakeProvider
	kind string
	n    int
}

// mutants maps each broken behaviour to the case that must catch it.
var mutants = map[string]string{
	"notIdempotent":       "CreateIdempotent",
	"noGlobalID":          "CreateIdempotent",
	"modeInPlace":         "ModeNeverChangesInPlace",
	"upgradeIgnored":      "UpgradeInPlace",
	"noLabels":            "LabelledGPUNodePool",
	"spotIgnored":         "SpotNodePool",
	"resizeIgnored":       "ResizeInPlace",
	"shapeInPlace":        "ShapeNeverChangesInPlace",
	"zeroValue":           "MissingIsNotFound",
	"acceptsForged":       "Credentials",
	"deleteNotIdempotent": "DeleteTwice",
	"hidesTheirPools":     "AdoptAndExtend",
	"rulesLie":            "ZeroNodes",
	"listsNothing":        "ListByLabel",
	"diskIgnored":         "DiskAndZonesAsRulesSay",
	"deleteWedged":        "DeleteWithNodePools",
	"zoneAsRegion":        "ClusterLocationKinds",
	"deleteTakesSiblings": "ReplaceNodePoolBeside",
}

func (m *mutant) ListClusters(ctx context.Context, a providers.Account, key string) ([]providers.Cluster, error) {
	all, err := m.fakeProvider.ListClusters(ctx, a, key)
	if m.kind == "listsNothing" {
		return nil, err
	}
	return all, err
}

func (m *mutant) EnsureCluster(ctx context.Context, a providers.Account, spec providers.ClusterSpec) (providers.Cluster, error) {
	switch m.kind {
	case "notIdempotent":
		m.n++
		spec.Name += "-" + strconv.Itoa(m.n)
	case "upgradeIgnored":
		spec.Version = ""
	case "zoneAsRegion":
		// Puts a cluster asked for in a zone in its region instead.
		spec.Location = strings.TrimSuffix(strings.TrimSuffix(spec.Location, "-a"), "-b")
	}
	c, err := m.fakeProvider.EnsureCluster(ctx, a, spec)
	if m.kind == "modeInPlace" && providers.ReasonOf(err) == "modeChange" {
		return m.GetCluster(ctx, a, providers.ClusterRef{Location: spec.Location, Name: spec.Name})
	}
	return c, err
}

func (m *mutant) GetCluster(ctx context.Context, a providers.Account, ref providers.ClusterRef) (providers.Cluster, error) {
	c, err := m.fakeProvider.GetCluster(ctx, a, ref)
	switch {
	case m.kind == "zeroValue" && errors.Is(err, providers.ErrNotFound):
		return providers.Cluster{}, nil
	case m.kind == "noGlobalID":
		c.Outputs.GlobalID = ""
	}
	return c, err
}

func (m *mutant) DeleteCluster(ctx context.Context, a providers.Account, ref providers.ClusterRef) (providers.Cluster, error) {
	if m.kind == "deleteNotIdempotent" {
		// Snapshot, not GetCluster: a read would move the delete on.
		if c := m.Snapshot().Clusters[ref.ID]; c != nil && c.Status == providers.ClusterDeleting {
			return providers.Cluster{}, providers.Errorf("DeleteCluster", providers.Conflict, providers.None, "already deleting")
		}
	}
	if m.kind == "deleteWedged" {
		// Refuses while pools remain, and never deletes them.
		if pools, err := m.fakeProvider.ListNodePools(ctx, a, ref); err == nil && len(pools) > 0 {
			return providers.Cluster{}, providers.Errorf("DeleteCluster", providers.Conflict, providers.None, "node pools remain")
		}
	}
	return m.fakeProvider.DeleteCluster(ctx, a, ref)
}

func (m *mutant) EnsureNodePool(ctx context.Context, a providers.Account, ref providers.ClusterRef, spec providers.NodePoolSpec) (providers.NodePool, error) {
	switch m.kind {
	case "noLabels":
		spec.Labels = nil
	case "spotIgnored":
		spec.Spot = false
	case "diskIgnored":
		spec.DiskGiB = 0
	}
	p, err := m.fakeProvider.EnsureNodePool(ctx, a, ref, spec)
	if m.kind == "shapeInPlace" && providers.ReasonOf(err) == "shapeChange" {
		return m.GetNodePool(ctx, a, ref, spec.Name)
	}
	return p, err
}

func (m *mutant) DeleteNodePool(ctx context.Context, a providers.Account, ref providers.ClusterRef, name string) (providers.NodePool, error) {
	if m.kind == "deleteTakesSiblings" {
		// Deletes the cluster's other node pools with the one asked for.
		if pools, err := m.fakeProvider.ListNodePools(ctx, a, ref); err == nil {
			for _, p := range pools {
				if p.Name != name {
					_, _ = m.fakeProvider.DeleteNodePool(ctx, a, ref, p.Name)
				}
			}
		}
	}
	return m.fakeProvider.DeleteNodePool(ctx, a, ref, name)
}

func (m *mutant) ResizeNodePool(ctx context.Context, a providers.Account, ref providers.ClusterRef, name string, size providers.Size) (providers.NodePool, error) {
	if m.kind == "resizeIgnored" {
		return m.GetNodePool(ctx, a, ref, name)
	}
	return m.fakeProvider.ResizeNodePool(ctx, a, ref, name, size)
}

func (m *mutant) ListNodePools(ctx context.Context, a providers.Account, ref providers.ClusterRef) ([]providers.NodePool, error) {
	pools, err := m.fakeProvider.ListNodePools(ctx, a, ref)
	if m.kind == "hidesTheirPools" {
		var ours []providers.NodePool
		for _, p := range pools {
			if p.Labels[providers.LabelSubstratePool] != "" {
				ours = append(ours, p)
			}
		}
		return ours, err
	}
	return pools, err
}

func (m *mutant) Accepts(c providers.Credential) bool {
	return m.kind == "acceptsForged" || m.fakeProvider.Accepts(c)
}

const mutantEnv = "FLEET_AGENT_CONFORMANCE_MUTANT"

// TestConformanceMutant runs the cases against one mutant; it is run in a
// child process by TestConformanceCatchesMutants, which expects it to fail.
func TestConformanceMutant(t *testing.T) {
	kind := os.Getenv(mutantEnv)
	if kind == "" {
		t.Skip("run by TestConformanceCatchesMutants")
	}
	conformance.Run(t, func(t *testing.T) conformance.Subject {
		clk := clock.NewFake(epoch)
		f := open(t, config(t), clk)
		m := &mutant{fakeProvider: f, kind: kind}
		opts := conformance.Options{ZeroNodes: true, Spot: true}
		if kind == "rulesLie" {
			opts.ZeroNodes = false // the fake takes 0 nodes; the subject says it refuses them
		}
		return conformance.Subject{
			Provider: m, Account: acct, Location: "fake-east", UpgradeTo: "1.35",
			NodePool: providers.NodePoolSpec{Shape: providers.Shape{MachineType: "fake-cpu-4"}, Size: providers.Size{NodeCount: 1}},
			GPUNodePool: providers.NodePoolSpec{
				Shape: providers.Shape{MachineType: "fake-l4x1", Accelerators: &providers.Accelerators{Type: "nvidia-l4", Count: 1}},
				Size:  providers.Size{NodeCount: 1},
			},
			Accepts: m.Accepts, Options: opts, Adoptable: "fake-east/theirs", Now: clk.Now, MaxPolls: 20,
		}
	})
}

// TestConformanceCatchesMutants shows that each case can fail: every
// mutant of the fake fails the case written for its behaviour.
func TestConformanceCatchesMutants(t *testing.T) {
	if os.Getenv(mutantEnv) != "" {
		t.Skip("inside a mutant run")
	}
	for kind, wantCase := range mutants {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestConformanceMutant$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), mutantEnv+"="+kind)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("mutant %s passed conformance", kind)
			}
			if !strings.Contains(string(out), "--- FAIL: TestConformanceMutant/"+wantCase+" ") {
				t.Errorf("mutant %s: case %s did not fail:\n%s", kind, wantCase, out)
			}
		})
	}
}
