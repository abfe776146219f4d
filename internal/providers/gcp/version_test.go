package gcp_test

import (
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/livecheck"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/providers/gcp/gkeemu"
)

// TestLiveCheckOfVersions: a created cluster's version is checked against
// GKE's server config at its location, through the real container client:
// an offered minor passes, one GKE does not offer is blocked with the
// offered ones, a cluster without one is told GKE's default; an adopted
// cluster's version is read and handed to the plan.
func TestLiveCheckOfVersions(t *testing.T) {
	v := newEnv(t, envOpts{zones: []string{"us-central1-a"}})
	if _, err := v.emu.Seed(gkeemu.SeedCluster{Location: "us-central1", Name: "theirs", Pools: []gkeemu.SeedPool{{Name: "default-pool", MachineType: "e2-standard-4", NodeCount: 1}}}); err != nil {
		t.Fatal(err)
	}
	acc := plan.Account{Name: v.acct.Name, Provider: v.acct.Provider, Config: v.acct.Config}
	nodes := int64(1)
	check := func(t *testing.T, cluster fleet.Cluster) plan.Verdict {
		t.Helper()
		sub := &fleet.Substrate{Kind: "kubernetes", Account: acc.Name, Cluster: cluster,
			Flavors: []fleet.SubstrateFlavor{{Name: "cpu", MachineType: "e2-standard-4", Nodes: &nodes}}}
		verdict, err := livecheck.New(livecheck.Options{Adapters: map[string]livecheck.Adapter{"gcp": v.ad}}).CheckSubstrate(t.Context(), "gpu-fleet", sub, acc)
		if err != nil {
			t.Fatalf("CheckSubstrate: %v", err)
		}
		if verdict.Offline {
			t.Fatal("checked offline")
		}
		return verdict
	}
	for _, version := range []string{"1.33", "1.34", "1.35"} {
		if vd := check(t, fleet.Cluster{Create: &fleet.ClusterCreate{Location: "us-central1", Version: version}}); len(vd.Blocked) > 0 {
			t.Errorf("%s blocked: %s", version, vd.Blocked)
		}
	}
	vd := check(t, fleet.Cluster{Create: &fleet.ClusterCreate{Location: "us-central1-a", Version: "1.31"}})
	if want := "version 1.31 is not offered for clusters in us-central1-a at account " + acc.Name + "; it offers: 1.33, 1.34, 1.35"; !strings.Contains(strings.Join(vd.Blocked, "\n"), want) {
		t.Errorf("blocked %q, want %q", vd.Blocked, want)
	}
	if vd := check(t, fleet.Cluster{Create: &fleet.ClusterCreate{Location: "us-central1"}}); vd.DefaultVersion != "1.34" || len(vd.Blocked) > 0 {
		t.Errorf("without a version: default %q, blocked %q; want 1.34 and none", vd.DefaultVersion, vd.Blocked)
	}
	if vd := check(t, fleet.Cluster{Adopt: "us-central1/theirs"}); !strings.HasPrefix(vd.ClusterVersion, "1.34.") {
		t.Errorf("the adopted cluster runs %q, want GKE's default 1.34.x", vd.ClusterVersion)
	}
}
