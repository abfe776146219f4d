package doemu_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/digitalocean/godo"

	"github.com/fleet-agent/fleet-agent/internal/providers/digitalocean/doemu"
)

// upgradeWorld runs every operation on the clock: a minute per node or
// drain, two for the control plane.
func upgradeWorld(t *testing.T) *world {
	return newWorld(t, doemu.Options{Steps: doemu.Steps{Cluster: 60, Node: 60, Upgrade: 120, Delete: 60, Drain: 60}, StepEvery: time.Second}, wireAll)
}

// runningAt creates a cluster on a release with pools of three nodes and
// moves the clock until it runs.
func (w *world) runningAt(t *testing.T, name, version string, surge bool, pools ...string) *godo.KubernetesCluster {
	t.Helper()
	req := basicCreate(name)
	req.VersionSlug, req.SurgeUpgrade, req.NodePools = version, surge, nil
	for _, p := range pools {
		req.NodePools = append(req.NodePools, &godo.KubernetesNodePoolCreateRequest{Name: p, Size: "s-2vcpu-4gb", Count: 3})
	}
	c, _, err := w.do.Kubernetes.Create(t.Context(), req)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	w.clk.Advance(2 * time.Minute)
	got, _, err := w.do.Kubernetes.Get(t.Context(), c.ID)
	if err != nil || got.Status.State != godo.KubernetesClusterStatusRunning {
		t.Fatalf("after two minutes: %v %+v", err, got)
	}
	return got
}

func nodeIDs(c *godo.KubernetesCluster) []string {
	var ids []string
	for _, p := range c.NodePools {
		for _, n := range p.Nodes {
			ids = append(ids, n.ID)
		}
	}
	return ids
}

// TestUpgradeOneMinorAndBusy: a cluster is offered the next minor only; a
// jump of two is 422, a second upgrade while one runs 409.
func TestUpgradeOneMinorAndBusy(t *testing.T) {
	w := upgradeWorld(t)
	ctx := t.Context()
	c := w.runningAt(t, "fa-minor", "1.33", false, "a")
	ups, _, err := w.do.Kubernetes.GetUpgrades(ctx, c.ID)
	if err != nil || len(ups) != 1 || ups[0].Slug != "1.34.2-do.1" {
		t.Fatalf("upgrades of 1.33: %v %+v, want the next minor only", err, ups)
	}
	_, err = w.do.Kubernetes.Upgrade(ctx, c.ID, &godo.KubernetesClusterUpgradeRequest{VersionSlug: "1.35.1-do.0"})
	if status(err) != 422 || !strings.Contains(err.Error(), "is not an available upgrade for this cluster (it runs 1.33.6-do.0)") {
		t.Errorf("a jump of two minors: %v", err)
	}
	if _, err := w.do.Kubernetes.Upgrade(ctx, c.ID, &godo.KubernetesClusterUpgradeRequest{VersionSlug: "1.33.6-do.0"}); status(err) != 422 {
		t.Errorf("the release it runs: %v", err)
	}
	if resp, err := w.do.Kubernetes.Upgrade(ctx, c.ID, &godo.KubernetesClusterUpgradeRequest{VersionSlug: "1.34.2-do.1"}); err != nil || resp.StatusCode != 202 {
		t.Fatalf("Upgrade: %v", err)
	}
	if _, err := w.do.Kubernetes.Upgrade(ctx, c.ID, &godo.KubernetesClusterUpgradeRequest{VersionSlug: "1.34.2-do.1"}); status(err) != 409 {
		t.Errorf("an upgrade while upgrading: %v", err)
	}
	if _, _, err := w.do.Kubernetes.UpdateNodePool(ctx, c.ID, c.NodePools[0].ID, &godo.KubernetesNodePoolUpdateRequest{Count: godo.PtrTo(4)}); status(err) != 409 {
		t.Errorf("a node pool change while upgrading: %v", err)
	}
}

// TestUpgradeReplacesNodesPoolByPool: after the control plane, every
// node of every pool is replaced on the clock, one at a time per pool
// without surge and up to the pool at once with it; the cluster's message
// counts the nodes replaced, and it runs again only when all are.
func TestUpgradeReplacesNodesPoolByPool(t *testing.T) {
	for _, surge := range []bool{false, true} {
		t.Run(map[bool]string{false: "one at a time", true: "surge"}[surge], func(t *testing.T) {
			w := upgradeWorld(t)
			ctx := t.Context()
			c := w.runningAt(t, "fa-roll", "1.33", surge, "a", "b")
			before := nodeIDs(c)
			if _, err := w.do.Kubernetes.Upgrade(ctx, c.ID, &godo.KubernetesClusterUpgradeRequest{VersionSlug: "1.34.2-do.1"}); err != nil {
				t.Fatal(err)
			}
			mostDraining, messages := 0, map[string]bool{}
			var got *godo.KubernetesCluster
			// The control plane takes 2 minutes and each pool at most 3
			// waves of a minute: 6 minutes of reads every 10 s suffice twice over.
			for range 72 {
				w.clk.Advance(10 * time.Second)
				var err error
				got, _, err = w.do.Kubernetes.Get(ctx, c.ID)
				if err != nil {
					t.Fatal(err)
				}
				messages[got.Status.Message] = true
				for _, p := range got.NodePools {
					draining := 0
					for _, n := range p.Nodes {
						if n.Status.State == "draining" {
							draining++
						}
					}
					mostDraining = max(mostDraining, draining)
				}
				if got.Status.State == godo.KubernetesClusterStatusRunning {
					break
				}
				if got.Status.State != godo.KubernetesClusterStatusUpgrading {
					t.Fatalf("during the upgrade: %+v", got.Status)
				}
			}
			if got.Status.State != godo.KubernetesClusterStatusRunning || got.VersionSlug != "1.34.2-do.1" {
				t.Fatalf("after 12 minutes: %+v %s", got.Status, got.VersionSlug)
			}
			after := nodeIDs(got)
			if len(after) != 6 || slices.ContainsFunc(after, func(id string) bool { return slices.Contains(before, id) }) {
				t.Errorf("nodes before %v, after %v: want six new ones", before, after)
			}
			if want := map[bool]int{false: 1, true: 3}[surge]; mostDraining != want {
				t.Errorf("at most %d nodes of a pool drained at once, want %d", mostDraining, want)
			}
			// The pools roll side by side: one node each per wave without
			// surge, the whole pool with it.
			want := map[bool][]string{false: {"0", "2", "4"}, true: {"0"}}[surge]
			for _, n := range want {
				if !messages["upgrading node pools: "+n+" of 6 nodes replaced"] {
					t.Errorf("progress messages %v, want %v of 6", messages, want)
				}
			}
		})
	}
}
