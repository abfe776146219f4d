package fake_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/providers/conformance"
	"github.com/fleet-agent/fleet-agent/internal/providers/fake"
)

func TestConformance(t *testing.T) {
	type variant struct {
		name    string
		mutate  func(*fake.Config)
		advance func(*clock.Fake, *fake.Fake) func()
		opts    conformance.Options
		// without are cases that cannot hold under the variant's options by
		// their nature (see below); every other case runs unchanged.
		without []string
	}
	variants := []variant{
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
	// With a name that cannot be used twice, the cases that ensure an
	// existing cluster again (to see it converge, upgrade, or refuse a mode
	// change as Invalid) meet what those clouds answer: another cluster,
	// or a Conflict. That is the option, not a defect; TestNames holds it.
	twice := []string{"CreateIdempotent", "ModeNeverChangesInPlace", "UpgradeInPlace", "UpgradeOneMinorPerStep", "KubeletsAtMostThreeMinorsBehind"}
	variants = append(variants,
		variant{
			// Lists lag 3s behind; the clock moves 250s a step, so every case
			// that waits sees the lists catch up, as a caller that polls does.
			name: "listLag",
			mutate: func(c *fake.Config) {
				c.Steps = fake.Steps{Cluster: 1000, NodePool: 1000, Update: 1000, Delete: 1000}
				c.StepEvery = time.Second
				c.ListLag = 3 * time.Second
			},
			advance: func(clk *clock.Fake, _ *fake.Fake) func() {
				return func() { clk.Advance(250 * time.Second) }
			},
			opts: conformance.Options{ZeroNodes: true, Spot: true},
		},
		variant{name: "namesConflict", mutate: func(c *fake.Config) { c.Names = fake.NamesConflict }, opts: conformance.Options{ZeroNodes: true, Spot: true}, without: twice},
		variant{name: "namesDuplicate", mutate: func(c *fake.Config) { c.Names = fake.NamesDuplicate }, opts: conformance.Options{ZeroNodes: true, Spot: true}, without: twice},
	)
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			run := conformance.Run
			if len(v.without) > 0 {
				run = func(t *testing.T, newSubject func(t *testing.T) conformance.Subject) {
					for _, c := range conformance.Cases() {
						if slices.Contains(v.without, c.Name) {
							continue
						}
						t.Run(c.Name, func(t *testing.T) {
							s := newSubject(t)
							subjectDefaults(&s)
							c.Run(t, &s)
						})
					}
				}
			}
			run(t, func(t *testing.T) conformance.Subject {
				clk := clock.NewFake(epoch)
				cfg := config(t)
				// Two older minors than the default set, for the skew case
				// (a pool at 1.31 under a control plane at 1.34, then 1.35).
				cfg.Versions = []string{"1.31", "1.32", "1.33", "1.34", "1.35"}
				if v.mutate != nil {
					v.mutate(&cfg)
				}
				f := open(t, cfg, clk)
				second := account("other-k8s", "team-b", "secret://other-token")
				s := conformance.Subject{
					UpgradeIDs:    true,
					Provider:      f,
					Account:       acct,
					SecondAccount: &second,
					Location:      "fake-east",
					Version:       "1.34",
					UpgradeTo:     "1.35",
					OldVersion:    "1.33",
					SkewVersions:  []string{"1.31", "1.32", "1.33", "1.34", "1.35"},
					NodePool:      providers.NodePoolSpec{Shape: providers.Shape{MachineType: "fake-cpu-4"}, Size: providers.Size{NodeCount: 1}},
					GPUNodePool: providers.NodePoolSpec{
						Shape: providers.Shape{MachineType: "fake-h100x8", Accelerators: &providers.Accelerators{Type: "nvidia-h100", Count: 8}},
						Size:  providers.Size{NodeCount: 2},
					},
					Accepts:   f.Accepts,
					Options:   v.opts,
					Adoptable: "fake-east/theirs",
					Now:       clk.Now,
					NodeProviderIDs: func(ref providers.ClusterRef, pool string) ([]string, error) {
						for _, c := range f.Snapshot().Clusters {
							if c.Name == ref.Name && c.Location == ref.Location {
								if np := c.NodePools[pool]; np != nil {
									return np.ProviderIDs(c.Name), nil
								}
								return nil, nil
							}
						}
						return nil, fmt.Errorf("no cluster %s", ref.Name)
					},
				}
				if v.advance != nil {
					s.Advance = v.advance(clk, f)
				}
				return s
			})
		})
	}
}

// subjectDefaults fills what conformance.Run's own defaults would for a
// subject of this file (the fake's pools already have a node), for the
// variants that run a subset of the cases.
func subjectDefaults(s *conformance.Subject) {
	if s.MissingAdoptID == "" {
		s.MissingAdoptID = s.Location + "/fa-conf-missing"
	}
	if s.PoolID == "" {
		s.PoolID = "pool_conformanceconformanceabcd"
	}
	if s.MaxPolls == 0 {
		s.MaxPolls = 100
	}
}
