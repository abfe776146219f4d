package digitalocean_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/providers/conformance"
	"github.com/fleet-agent/fleet-agent/internal/providers/digitalocean/doemu"
)

// TestConformance runs every conformance case against the emulator, with
// DOKS's options: no fixed pool of 0 nodes, and Spot as the account says.
func TestConformance(t *testing.T) {
	spotAcct := account("spot-k8s", map[string]any{"token": "secret://ops/do-token", "allowSpot": true, "previews": true})
	off := false
	variants := []struct {
		name    string
		opts    doemu.Options
		acct    providers.Account
		spot    bool
		advance bool // the clock, not reads, moves operations
	}{
		{name: "default", acct: acct},
		{name: "spotPreview", acct: spotAcct, spot: true},
		{
			// Operations that reads alone would take 1000 steps to finish.
			name: "clockDriven", acct: acct, advance: true,
			opts: doemu.Options{Steps: doemu.Steps{Cluster: 1000, Node: 1000, Upgrade: 1000, Delete: 1000, Drain: 1000}, StepEvery: time.Second},
		},
		{
			// The other answers where DigitalOcean's behaviour is open: the
			// description's "deleting" state (which godo cannot parse),
			// duplicate names taken, one cluster per page, no Retry-After.
			name: "otherAnswers", acct: acct,
			opts: doemu.Options{DeletingState: "deleting", AllowDuplicateNames: true, MaxPerPage: 1, NoRetryAfter: true},
		},
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			conformance.Run(t, func(t *testing.T) conformance.Subject {
				opts := v.opts
				opts.Accounts = []doemu.Account{
					{Token: apiToken, Team: "team-a", Email: "ops@example.com", Previews: v.spot},
					{Token: otherToken, Team: "team-a", Email: "ci@example.com"},
				}
				w := newWorld(t, opts, "")
				theirs := w.emu.Seed(doemu.SeedCluster{
					Team: "team-a", Name: "theirs", Region: "tor1", Version: "1.34.2-do.1", Tags: []string{"production"},
					NvidiaPlugin: &off, AmdPlugin: &off,
					Pools: []doemu.SeedPool{{Name: "default", Size: "s-4vcpu-8gb", Count: 2}},
				})
				second := account("other-k8s", map[string]any{"token": "secret://ops/do-other"})
				s := conformance.Subject{
					Provider:      w.ad,
					Account:       v.acct,
					SecondAccount: &second,
					Location:      "tor1",
					Version:       "1.34",
					UpgradeTo:     "1.35",
					OldVersion:    "1.33",
					// No SkewVersions: a DOKS node pool has no version of
					// its own (its nodes follow the cluster's), so no
					// kubelet is ever left behind it.
					NodePool: providers.NodePoolSpec{Shape: providers.Shape{MachineType: "s-2vcpu-4gb"}, Size: providers.Size{NodeCount: 1}},
					GPUNodePool: providers.NodePoolSpec{
						Shape: providers.Shape{MachineType: "gpu-h100x8-640gb", Accelerators: &providers.Accelerators{Type: "nvidia-h100", Count: 8}},
						Size:  providers.Size{NodeCount: 2},
					},
					Accepts:        func(c providers.Credential) bool { return w.emu.Accepts(c.Endpoint, c.Token) },
					Options:        conformance.Options{ZeroNodes: false, Spot: v.spot},
					Adoptable:      theirs,
					MissingAdoptID: "4f1c2b7e-0000-4000-8000-00000000dead",
					Now:            w.clk.Now,
					NodeProviderIDs: func(ref providers.ClusterRef, pool string) ([]string, error) {
						for _, c := range w.emu.Clusters() {
							if c.ID != ref.ID {
								continue
							}
							for _, p := range c.Pools {
								if p.Name == pool && !p.Deleting {
									var out []string
									for _, d := range p.DropletIDs {
										out = append(out, "digitalocean://"+d)
									}
									return out, nil
								}
							}
						}
						return nil, fmt.Errorf("no node pool %s in cluster %s", pool, ref)
					},
				}
				if v.advance {
					s.Advance = func() { w.clk.Advance(250 * time.Second) }
				}
				return s
			})
		})
	}
}
