package gcp_test

import (
	"slices"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/providers/gcp/gkeemu"
)

// TestRemoveNodesRefusesBeforeAnyDelete: a count left in a zone other than
// the size asked, a machine in a zone the pool is not in, and one in the
// pool's zone not named after its group are each refused as Invalid
// with nothing deleted; the right call then removes exactly that machine.
func TestRemoveNodesRefusesBeforeAnyDelete(t *testing.T) {
	v := newEnv(t, envOpts{})
	const zone = "us-central1-a"
	if _, err := v.emu.Seed(gkeemu.SeedCluster{Location: zone, Name: "shrink",
		Pools: []gkeemu.SeedPool{{Name: "work", MachineType: "e2-standard-4", NodeCount: 3}}}); err != nil {
		t.Fatal(err)
	}
	ref := providers.ClusterRef{Location: zone, Name: "shrink"}
	before := v.emu.NodeProviderIDs(project, zone, "shrink", "work")
	if len(before) != 3 {
		t.Fatalf("seeded machines: %v", before)
	}
	for what, c := range map[string]struct {
		ids  []string
		size int
	}{
		"a count that is not the size": {before[:1], 1},
		"another zone":                 {[]string{before[0], "gce://" + project + "/us-central1-b/" + before[0][len("gce://"+project+"/"+zone+"/"):]}, 1},
		"a machine of no group":        {[]string{"gce://" + project + "/" + zone + "/some-vm"}, 3},
		"not a GCE providerID":         {[]string{"aws:///us-east-1a/i-0123"}, 3},
	} {
		_, err := v.ad.RemoveNodes(t.Context(), v.acct, ref, "work", c.ids, providers.Size{NodeCount: c.size})
		if providers.ClassOf(err) != providers.Invalid || providers.SideEffectOf(err) != providers.None {
			t.Errorf("%s: want Invalid with no side effect, got %v (%q, %q)", what, err, providers.ClassOf(err), providers.SideEffectOf(err))
		}
		if got := v.emu.NodeProviderIDs(project, zone, "shrink", "work"); !slices.Equal(got, before) {
			t.Fatalf("%s: a refused call removed machines: %v, was %v", what, got, before)
		}
	}
	p, err := v.ad.RemoveNodes(t.Context(), v.acct, ref, "work", before[1:2], providers.Size{NodeCount: 2})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{before[0], before[2]}; !slices.Equal(v.emu.NodeProviderIDs(project, zone, "shrink", "work"), want) || p.NodeCount != 2 {
		t.Fatalf("after removing %s: machines %v, pool %+v; want %v and 2", before[1], v.emu.NodeProviderIDs(project, zone, "shrink", "work"), p.Size, want)
	}
}
