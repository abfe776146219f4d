package clients

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/providers/gcp/gkeemu"
	"github.com/fleet-agent/fleet-agent/internal/providers/gcp/gkeemu/wirecheck"
)

// TestGcloudDeleteInstances holds the emulator's instance groups to gcloud's
// own "compute instance-groups managed delete-instances": the named machine
// leaves, the group's target falls by one, the others keep their names, and
// a machine outside the group is refused.
func TestGcloudDeleteInstances(t *testing.T) {
	emu, err := gkeemu.Start(gkeemu.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(emu.Close)
	wirecheck.Register(t, emu)
	key, err := emu.AddServiceAccount(account, project)
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(t.TempDir(), "key.json")
	if err := os.WriteFile(keyFile, key, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := emu.Seed(gkeemu.SeedCluster{Project: project, Location: zone, Name: "shrink",
		Pools: []gkeemu.SeedPool{{Name: "work", MachineType: "e2-standard-4", NodeCount: 3}}}); err != nil {
		t.Fatal(err)
	}
	before := emu.NodeProviderIDs(project, zone, "shrink", "work")
	if len(before) != 3 {
		t.Fatalf("seeded pool has %d machines, want 3: %v", len(before), before)
	}
	var group string
	for _, g := range emu.Snapshot().Groups {
		if g.Zone == zone {
			group = g.Name
		}
	}
	if group == "" {
		t.Fatal("the seeded pool has no instance group in " + zone)
	}
	g := newGcloud(t, emu)
	g.env = append(g.env, "CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE="+emu.ComputeEndpoint())
	if _, errs, code := g.run("auth", "activate-service-account", "--key-file", keyFile); code != 0 {
		t.Fatalf("activate: exit %d\n%s", code, errs)
	}
	victim := before[1][strings.LastIndex(before[1], "/")+1:]
	out, errs, code := g.run("compute", "instance-groups", "managed", "delete-instances", group, "--instances="+victim, "--zone="+zone)
	if code != 0 {
		for _, x := range emu.Exchanges() {
			t.Logf("%s %s?%s -> %d %s", x.Method, x.Path, x.Query, x.Status, x.MethodID)
		}
		t.Fatalf("delete-instances: exit %d\n%s\n%s", code, out, errs)
	}
	after := emu.NodeProviderIDs(project, zone, "shrink", "work")
	want := slices.Delete(slices.Clone(before), 1, 2)
	if !slices.Equal(after, want) {
		t.Fatalf("machines after deleting %s: %v, want %v", victim, after, want)
	}
	for _, gs := range emu.Snapshot().Groups {
		if gs.Name == group && gs.Target != 2 {
			t.Errorf("targetSize after delete-instances: %d, want 2", gs.Target)
		}
	}
	for _, cs := range emu.Snapshot().Clusters {
		for _, ps := range cs.Pools {
			if ps.Name == "work" && ps.Nodes[zone] != 2 {
				t.Errorf("the pool's nodes in %s after delete-instances: %d, want 2", zone, ps.Nodes[zone])
			}
		}
	}
	g.fails([]string{"compute", "instance-groups", "managed", "delete-instances", group, "--instances=no-such-vm", "--zone=" + zone},
		"is not a member of the instance group manager")
	if got := emu.NodeProviderIDs(project, zone, "shrink", "work"); !slices.Equal(got, want) {
		t.Fatalf("a refused delete changed the group: %v, want %v", got, want)
	}
}
