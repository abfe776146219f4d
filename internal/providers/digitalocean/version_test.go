package digitalocean_test

import (
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/livecheck"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/providers/digitalocean/doemu"
)

// TestLiveCheckOfVersions: a created cluster's version is checked against
// DOKS's options through the adapter's HTTP client, every exchange held to
// DigitalOcean's OpenAPI description: an offered minor passes, one DOKS
// does not offer is blocked with the offered ones, a cluster without one
// is told DOKS's default (the newest); an adopted cluster's version is
// read and handed to the plan.
func TestLiveCheckOfVersions(t *testing.T) {
	w := newWorld(t, doemu.Options{}, "")
	theirs := w.emu.Seed(doemu.SeedCluster{Team: "team-a", Name: "theirs", Region: "tor1", Pools: []doemu.SeedPool{{Name: "default", Size: "s-2vcpu-4gb", Count: 1}}})
	acc := plan.Account{Name: acct.Name, Provider: acct.Provider, Config: acct.Config}
	one := int64(1)
	check := func(t *testing.T, cluster fleet.Cluster) plan.Verdict {
		t.Helper()
		sub := &fleet.Substrate{Kind: "kubernetes", Account: acc.Name, Cluster: cluster,
			Flavors: []fleet.SubstrateFlavor{{Name: "cpu", MachineType: "s-2vcpu-4gb", Nodes: &one}}}
		v, err := livecheck.New(livecheck.Options{Adapters: map[string]livecheck.Adapter{"digitalocean": w.ad}, Secrets: store}).CheckSubstrate(t.Context(), "gpu-fleet", sub, acc)
		if err != nil {
			t.Fatalf("CheckSubstrate: %v", err)
		}
		if v.Offline {
			t.Fatal("checked offline")
		}
		return v
	}
	for _, version := range []string{"1.33", "1.34", "1.35"} {
		if v := check(t, fleet.Cluster{Create: &fleet.ClusterCreate{Location: "tor1", Version: version}}); len(v.Blocked) > 0 {
			t.Errorf("%s blocked: %s", version, v.Blocked)
		}
	}
	v := check(t, fleet.Cluster{Create: &fleet.ClusterCreate{Location: "tor1", Version: "1.30"}})
	if want := "version 1.30 is not offered for clusters in tor1 at account " + acc.Name + "; it offers: 1.33, 1.34, 1.35"; !strings.Contains(strings.Join(v.Blocked, "\n"), want) {
		t.Errorf("blocked %q, want %q", v.Blocked, want)
	}
	if v := check(t, fleet.Cluster{Create: &fleet.ClusterCreate{Location: "tor1"}}); v.DefaultVersion != "1.35" || len(v.Blocked) > 0 {
		t.Errorf("without a version: default %q, blocked %q; want 1.35 and none", v.DefaultVersion, v.Blocked)
	}
	if v := check(t, fleet.Cluster{Adopt: theirs}); !strings.HasPrefix(v.ClusterVersion, "1.") || !strings.Contains(v.ClusterVersion, "-do.") {
		t.Errorf("the adopted cluster's version was not read (blocked %q)", v.Blocked)
	}
}
