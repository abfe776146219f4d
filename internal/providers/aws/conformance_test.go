package aws_test

import (
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/providers/aws/eksemu"
	"github.com/fleet-agent/fleet-agent/internal/providers/conformance"
)

func TestConformance(t *testing.T) {
	variants := []struct {
		name    string
		emu     eksemu.Options
		advance func(h *harness) func()
	}{
		{name: "observed"},
		{name: "synchronous", emu: eksemu.Options{Steps: &eksemu.Steps{}}},
		{
			// Operations that reads alone would take 1000 steps to finish:
			// only the clock, moved by Advance, gets them there.
			name: "clockDriven",
			emu:  eksemu.Options{Steps: &eksemu.Steps{Cluster: 1000, Nodegroup: 1000, Update: 1000, Delete: 1000}, StepEvery: time.Second},
			advance: func(h *harness) func() {
				return func() { h.clk.Advance(250 * time.Second) }
			},
		},
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			conformance.Run(t, func(t *testing.T) conformance.Subject {
				// Two older minors than the emulator's default set, for the
				// skew case (a node group at 1.31 under 1.34, then 1.35).
				emu := v.emu
				emu.Versions = []string{"1.31", "1.32", "1.33", "1.34", "1.35"}
				emu.DefaultVersion = "1.34"
				h := newHarness(t, harnessOpts{emu: emu})
				h.seedTheirs()
				s := conformance.Subject{
					UpgradeIDs:    true,
					Provider:      h.adapter,
					Account:       h.acct,
					SecondAccount: &h.team,
					Location:      "us-east-1",
					Version:       "1.34",
					UpgradeTo:     "1.35",
					OldVersion:    "1.33",
					SkewVersions:  []string{"1.31", "1.32", "1.33", "1.34", "1.35"},
					NodePool:      providers.NodePoolSpec{Shape: providers.Shape{MachineType: "m7i.large"}, Size: providers.Size{NodeCount: 1}},
					GPUNodePool: providers.NodePoolSpec{
						Shape: providers.Shape{MachineType: "g6.xlarge", Accelerators: &providers.Accelerators{Type: "nvidia-l4", Count: 1}},
						Size:  providers.Size{NodeCount: 1},
					},
					Accepts:   h.accepts,
					Options:   conformance.Options{ZeroNodes: true, Spot: true},
					Adoptable: "us-east-1/theirs",
					Now:       h.clk.Now,
					NodeProviderIDs: func(c providers.ClusterRef, pool string) ([]string, error) {
						return h.emu.NodeProviderIDs(c.Name, pool)
					},
				}
				if v.advance != nil {
					s.Advance = v.advance(h)
				}
				return s
			})
		})
	}
}
