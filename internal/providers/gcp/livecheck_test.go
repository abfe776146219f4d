package gcp_test

import (
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/livecheck"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/providers/gcp/gkeemu"
)

// TestLiveCheck: the reference's GKE pool (a3-highgpu-8g with 8 x
// nvidia-h100-80gb in us-central1) passes the plan's live checks through
// this adapter, as do T4s attached to an N1 type; a wrong count, a machine
// type that does not exist there, GPUs an N1 machine cannot be given (or
// not that many) and a missing adopted cluster are blocked with their
// reason.
func TestLiveCheck(t *testing.T) {
	v := newEnv(t, envOpts{zones: []string{"us-central1-a"}})
	if _, err := v.emu.Seed(gkeemu.SeedCluster{Location: "us-central1", Name: "theirs", Pools: []gkeemu.SeedPool{{Name: "default-pool", MachineType: "e2-standard-4", NodeCount: 1}}}); err != nil {
		t.Fatal(err)
	}
	acc := plan.Account{Name: v.acct.Name, Provider: v.acct.Provider, Config: v.acct.Config}
	nodes := int64(2)
	flavor := func(machine, gpu string, count int64) fleet.SubstrateFlavor {
		return fleet.SubstrateFlavor{Name: "h100", MachineType: machine, Nodes: &nodes, GPUs: &fleet.GPUs{Type: gpu, Count: count}}
	}
	create := fleet.Cluster{Create: &fleet.ClusterCreate{Location: "us-central1"}}
	cases := []struct {
		name    string
		cluster fleet.Cluster
		flavor  fleet.SubstrateFlavor
		blocked string // "" when it passes
	}{
		{"the reference's pool", create, flavor("a3-highgpu-8g", "nvidia-h100-80gb", 8), ""},
		{"a wrong count", create, flavor("a3-highgpu-8g", "nvidia-h100-80gb", 4), "has 8 x nvidia-h100-80gb, not 4 x nvidia-h100-80gb"},
		{"a wrong accelerator", create, flavor("a3-highgpu-8g", "nvidia-l4", 8), "has 8 x nvidia-h100-80gb, not 8 x nvidia-l4"},
		{"a machine type not offered", create, flavor("a3-highgpu-9g", "nvidia-h100-80gb", 8), "machine type a3-highgpu-9g does not exist in us-central1"},
		{"T4s attached to an N1 type", create, flavor("n1-standard-8", "nvidia-tesla-t4", 2), ""},
		{"more T4s than an N1 machine takes", create, flavor("n1-standard-8", "nvidia-tesla-t4", 8), "machine type n1-standard-8 takes at most 4 x nvidia-tesla-t4 in us-central1, not 8"},
		{"an L4 attached to an N1 type", create, flavor("n1-standard-8", "nvidia-l4", 1), "machine type n1-standard-8 takes nvidia-tesla-t4 attached in us-central1, not nvidia-l4"},
		{"GPUs on an E2 type", create, flavor("e2-standard-4", "nvidia-tesla-t4", 1), "machine type e2-standard-4 has no GPUs, not 1 x nvidia-tesla-t4"},
		{"a zone of the region", fleet.Cluster{Create: &fleet.ClusterCreate{Location: "us-central1-a"}}, flavor("a3-highgpu-8g", "nvidia-h100-80gb", 8), ""},
		{"a location elsewhere", fleet.Cluster{Create: &fleet.ClusterCreate{Location: "europe-west4"}}, flavor("a3-highgpu-8g", "nvidia-h100-80gb", 8), `cluster location "europe-west4" does not exist`},
		{"an adopted cluster", fleet.Cluster{Adopt: "us-central1/theirs"}, flavor("a3-highgpu-8g", "nvidia-h100-80gb", 8), ""},
		{"a missing adopted cluster", fleet.Cluster{Adopt: "us-central1/nope"}, flavor("a3-highgpu-8g", "nvidia-h100-80gb", 8), "cluster us-central1/nope not found"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			checker := livecheck.New(livecheck.Options{Adapters: map[string]livecheck.Adapter{"gcp": v.ad}})
			sub := &fleet.Substrate{Kind: "kubernetes", Account: acc.Name, Cluster: c.cluster, Flavors: []fleet.SubstrateFlavor{c.flavor}}
			verdict, err := checker.CheckSubstrate(t.Context(), "gpu-fleet", sub, acc)
			if err != nil {
				t.Fatalf("CheckSubstrate: %v", err)
			}
			if verdict.Offline {
				t.Fatal("checked offline")
			}
			joined := strings.Join(verdict.Blocked, "\n")
			switch {
			case c.blocked == "" && len(verdict.Blocked) > 0:
				t.Errorf("blocked: %s", joined)
			case c.blocked != "" && !strings.Contains(joined, c.blocked):
				t.Errorf("want blocked with %q, got %q", c.blocked, joined)
			}
		})
	}
}
