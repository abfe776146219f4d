package fake_test

import (
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/providers/conformance"
	"github.com/fleet-agent/fleet-agent/internal/providers/fake"
)

func TestConformance(t *testing.T) {
	variants := []struct {
		name    string
		mutate  func(*fake.Config)
		advance func(*clock.Fake, *fake.Fake) func()
		opts    conformance.Options
	}{
		{name: "default", opts: conformance.Options{ZeroNodes: true, Spot: true}},
		{name: "noZeroNodesNoSpot", mutate: func(c *fake.Config) { c.ZeroNodes, c.Spot = false, false }},
		{name: "synchronous", mutate: func(c *fake.Config) { c.Steps = fake.Steps{} }, opts: conformance.Options{ZeroNodes: true, Spot: true}},
		{
			// Operations that reads alone would take 1000 steps to finish:
			// only the clock, moved by Advance, gets them there.
			name: "clockDriven",
			mutate: func(c *fake.Config) {
				c.Steps = fake.Steps{Cluster: 1000, NodePool: 1000, Update: 1000, Delete: 1000}
				c.StepEvery = time.Second
			},
			advance: func(clk *clock.Fake, _ *fake.Fake) func() {
				return func() { clk.Advance(250 * time.Second) }
			},
			opts: conformance.Options{ZeroNodes: true, Spot: true},
		},
		{
			name:    "advancedByHand",
			mutate:  func(c *fake.Config) { c.Steps = fake.Steps{Cluster: 40, NodePool: 40, Update: 40, Delete: 40} },
			advance: func(_ *clock.Fake, f *fake.Fake) func() { return func() { _ = f.Advance() } },
			opts:    conformance.Options{ZeroNodes: true, Spot: true},
		},
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			conformance.Run(t, func(t *testing.T) conformance.Subject {
				clk := clock.NewFake(epoch)
				cfg := config(t)
				if v.mutate != nil {
					v.mutate(&cfg)
				}
				f := open(t, cfg, clk)
				second := account("other-k8s", "team-b", "secret://other-token")
				s := conformance.Subject{
					Provider:      f,
					Account:       acct,
					SecondAccount: &second,
					Location:      "fake-east",
					Version:       "1.34",
					UpgradeTo:     "1.35",
					NodePool:      providers.NodePoolSpec{Shape: providers.Shape{MachineType: "fake-cpu-4"}, Size: providers.Size{NodeCount: 1}},
					GPUNodePool: providers.NodePoolSpec{
						Shape: providers.Shape{MachineType: "fake-h100x8", Accelerators: &providers.Accelerators{Type: "nvidia-h100", Count: 8}},
						Size:  providers.Size{NodeCount: 2},
					},
					Accepts:   f.Accepts,
					Options:   v.opts,
					Adoptable: "fake-east/theirs",
					Now:       clk.Now,
				}
				if v.advance != nil {
					s.Advance = v.advance(clk, f)
				}
				return s
			})
		})
	}
}
