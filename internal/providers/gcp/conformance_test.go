package gcp_test

import (
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/providers/conformance"
	"github.com/fleet-agent/fleet-agent/internal/providers/gcp"
	"github.com/fleet-agent/fleet-agent/internal/providers/gcp/gkeemu"
)

// TestConformance runs every conformance case against the emulator, in
// variants that move operations differently and that take the other
// answer to each of the emulator's guesses.
func TestConformance(t *testing.T) {
	variants := []struct {
		name     string
		emu      func(*gkeemu.Options)
		cfg      func(*gcp.Config)
		location string
		zones    []string
		clock    bool // operations move on the clock, which Advance moves
	}{
		{name: "regional", location: "us-central1"},
		{name: "zonal", location: "us-central1-a", zones: []string{"us-central1-a"}},
		{name: "regionalWithoutAccountZones", location: "us-central1", zones: []string{}},
		{name: "synchronous", location: "us-central1", emu: func(o *gkeemu.Options) { o.Steps = gkeemu.Synchronous }},
		{
			name: "otherGuesses", location: "us-central1",
			emu: func(o *gkeemu.Options) {
				o.Guesses = gkeemu.Guesses{HonourAssertionExpiry: true, InitialCountTracksResize: true, PoolRunningDuringOps: true}
			},
		},
		{
			// Operations that observations alone would take 1000 steps to
			// finish: only the clock gets them there, for the conformance
			// cases (Advance) and for the adapter's own waits.
			name: "clockDriven", location: "us-central1", clock: true,
			emu: func(o *gkeemu.Options) {
				o.Steps = gkeemu.Steps{Cluster: 1000, NodePool: 1000, Update: 1000, Delete: 1000}
				o.StepEvery = time.Second
			},
			cfg: func(c *gcp.Config) { c.OperationWait = gcp.OperationWait{Every: 5 * time.Second, Polls: 300} },
		},
	}
	for _, vr := range variants {
		t.Run(vr.name, func(t *testing.T) {
			conformance.Run(t, func(t *testing.T) conformance.Subject {
				// Two older minors than the emulator's default set, for the
				// skew case (a node pool at 1.31 under 1.34, then 1.35).
				emu := func(o *gkeemu.Options) {
					o.Versions = append(o.Versions, "1.32.9-gke.1100000", "1.31.12-gke.1200000")
					if vr.emu != nil {
						vr.emu(o)
					}
				}
				v := newEnv(t, envOpts{emu: emu, cfg: vr.cfg, zones: vr.zones})
				if _, err := v.emu.Seed(gkeemu.SeedCluster{Location: vr.location, Name: "theirs",
					Pools: []gkeemu.SeedPool{{Name: "default-pool", MachineType: "e2-standard-4", NodeCount: 2}}}); err != nil {
					t.Fatal(err)
				}
				otherKey, err := v.emu.AddServiceAccount("second@fa-emu-project.iam.gserviceaccount.com", project)
				if err != nil {
					t.Fatal(err)
				}
				v.secrets.set("secret://second-key", string(otherKey))
				second := account("second", project, vr.zones, "secret://second-key")
				s := conformance.Subject{
					UpgradeIDs:    true,
					Provider:      v.ad,
					Account:       v.acct,
					SecondAccount: &second,
					Location:      vr.location,
					Version:       "1.34",
					UpgradeTo:     "1.35",
					OldVersion:    "1.33",
					SkewVersions:  []string{"1.31", "1.32", "1.33", "1.34", "1.35"},
					NodePool:      providers.NodePoolSpec{Shape: providers.Shape{MachineType: "e2-standard-4"}, Size: providers.Size{NodeCount: 1}},
					GPUNodePool: providers.NodePoolSpec{
						Shape: providers.Shape{MachineType: "a3-highgpu-8g", Accelerators: &providers.Accelerators{Type: "nvidia-h100-80gb", Count: 8}},
						Size:  providers.Size{NodeCount: 1},
					},
					Accepts:   v.accepts(t),
					Options:   conformance.Options{ZeroNodes: true, Spot: true},
					Adoptable: vr.location + "/theirs",
					Now:       v.clk.Now,
					NodeProviderIDs: func(c providers.ClusterRef, pool string) ([]string, error) {
						return v.emu.NodeProviderIDs(project, c.Location, c.Name, pool), nil
					},
				}
				if vr.clock {
					autoAdvance(t, v.clk, 5*time.Second)
					s.Advance = func() { v.clk.Advance(250 * time.Second) }
				}
				return s
			})
		})
	}
}
