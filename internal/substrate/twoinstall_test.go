package substrate_test

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/substrate"
	"github.com/fleet-agent/fleet-agent/internal/substrate/crashtest"
)

var (
	twoTrials = flag.Int("campaign.two.trials", 60, "trials of the two-installation crash campaign")
	twoSeed   = flag.Uint64("campaign.two.seed", 0, "run the one two-installation trial of this seed (printed by a failure)")
)

// twoBase is the first two-installation trial's seed.
const twoBase = 20261203

// stagingInstallation is the second reconciler's installation id in the
// two-installation campaign: its own state file, the same account.
const stagingInstallation = "57a9000000000000000000000000cafe"

// TestTwoInstallationsCrashCampaign: two installations (prod and staging:
// each its own state file and reconciler, one fake account shared through
// the fake's locked state file, the same tenant and pool names) apply the
// same scenario; in every step both crash, each at its own drawn point,
// their passes interleaved, and restart over their files. Each must end
// with no duplicate, nothing leaked, its records agreeing with the
// provider, no unfinished operation and a sweep that finds nothing of its
// own to say; and what the other made is the other's to check, so each
// check holding for both says neither touched the other's clusters.
func TestTwoInstallationsCrashCampaign(t *testing.T) {
	scenarios := crashtest.Scenarios()
	points := calibrate(t, scenarios).points
	seeds := []uint64{}
	if *twoSeed != 0 {
		seeds = append(seeds, *twoSeed)
	} else {
		for i := range *twoTrials {
			seeds = append(seeds, twoBase+uint64(i))
		}
	}
	var mu sync.Mutex
	crashes, failed := 0, 0
	inParallel(t, len(seeds), func(i int) {
		seed := seeds[i]
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			n := twoTrial(t, seed, scenarios, points)
			mu.Lock()
			crashes += n
			if t.Failed() {
				failed++
			}
			mu.Unlock()
		})
	})
	t.Logf("two-installation crash campaign: %d trials, %d crashes (both installations), %d failed", len(seeds), crashes, failed)
	if len(seeds) >= 40 && crashes < len(seeds) {
		t.Errorf("only %d crashes in %d trials", crashes, len(seeds))
	}
}

func twoTrial(t *testing.T, seed uint64, scenarios []crashtest.Scenario, points map[string][]int64) int {
	rng := rand.New(rand.NewPCG(seed, seed^0x2a2a2a2a))
	s := scenarios[rng.IntN(len(scenarios))]
	fail := func(format string, args ...any) {
		t.Errorf("seed %d (scenario %s): %s; replay with -run 'TestTwoInstallationsCrashCampaign' -args -campaign.two.seed %d", seed, s.Name, fmt.Sprintf(format, args...), seed)
	}
	type side struct {
		name string
		e    *env
		c    *crasher
	}
	prodCrash, stagingCrash := &crasher{}, &crasher{}
	prod, _ := scenarioEnv(t, s, func(o *substrate.Options) { substrate.SetCrashAt(o, prodCrash.at) })
	staging, _ := scenarioEnv(t, s, func(o *substrate.Options) { substrate.SetCrashAt(o, stagingCrash.at) })
	staging.crash()
	// A state file of its own made under the other id (an installation id
	// is fixed when its file is made).
	staging.installation = stagingInstallation
	staging.statePath = filepath.Join(t.TempDir(), "staging.db")
	staging.fakeCfg.StatePath = prod.fakeCfg.StatePath // one account
	staging.clock = prod.clock
	staging.start()
	sides := []side{{"prod", prod, prodCrash}, {"staging", staging, stagingCrash}}
	converge := func(what string) bool {
		for range 60 {
			done := true
			for _, sd := range sides {
				if err := sd.e.rec.ReconcileOnce(t.Context()); err != nil {
					fail("%s: %s: pass: %v", what, sd.name, err)
					return false
				}
				done = done && sd.e.converged()
			}
			if done {
				return true
			}
			prod.clock.Advance(10 * time.Second)
		}
		fail("%s: not converged:\nprod:\n%s\nstaging:\n%s", what, prod.describe(), staging.describe())
		return false
	}
	for _, st := range s.Setup {
		for _, sd := range sides {
			sd.e.applyStep(st)
		}
		if !converge("setup") {
			return 0
		}
	}
	crashes := 0
	var where []string
	for si, st := range s.Steps {
		prod.tamper(st) // one account: the hand edit meets both
		if rng.IntN(2) == 0 {
			ft := campaignFaults[rng.IntN(len(campaignFaults))]
			ft.Method = campaignMethods[rng.IntN(len(campaignMethods))]
			if err := prod.fake.InjectFault(ft); err != nil {
				t.Fatal(err)
			}
			where = append(where, "fault:"+ft.Method)
		}
		for _, sd := range sides {
			sd.e.applyStep(st)
			sd.c.arm(1 + rng.Int64N(max(points[s.Name][si], 1)))
		}
		crashed := make([]bool, len(sides))
		for i := 0; i < 40 && !(crashed[0] && crashed[1]); i++ {
			if st.Rush && i > 0 {
				break
			}
			// Their passes interleave: one pass of each in turn, the first
			// drawn per round.
			first := rng.IntN(2)
			for j := range sides {
				k := (first + j) % 2
				sd := sides[k]
				if crashed[k] {
					if err := sd.e.rec.ReconcileOnce(t.Context()); err != nil {
						fail("%s: pass after its crash: %v", sd.name, err)
						return crashes
					}
					continue
				}
				err := sd.e.rec.ReconcileOnce(t.Context())
				switch {
				case substrate.IsCrashed(err):
					crashed[k] = true
					crashes++
					where = append(where, sd.name+":"+sd.c.where.Load().(string))
					sd.c.arm(0)
					sd.e.restart()
				case err != nil:
					fail("%s: pass: %v", sd.name, err)
					return crashes
				case sd.e.converged():
					crashed[k] = true // nothing left to crash in
					sd.c.arm(0)
				}
			}
			prod.clock.Advance(time.Duration(rng.IntN(20)) * time.Second)
		}
		for _, sd := range sides {
			sd.c.arm(0)
		}
		if st.Rush {
			continue
		}
		if !converge(fmt.Sprintf("step %d after crashes at %v", si, where)) {
			return crashes
		}
	}
	last := s.Steps[len(s.Steps)-1]
	for _, sd := range sides {
		f := crashtest.Check(sd.e.fake.Snapshot(), last, sd.e.records(), sd.e.owner())
		if !f.OK() {
			fail("%s after crashes at %v: %v\n%s", sd.name, where, f.Problems, sd.e.describe())
		}
		if open := sd.e.openOps(); len(open) > 0 {
			fail("%s after crashes at %v: the journal holds unfinished operations: %v", sd.name, where, open)
		}
		rep, err := sd.e.rec.Sweep(t.Context())
		if err != nil || rep.Adopted+rep.Orphans+rep.Reported+rep.Ghosts+rep.NodePoolOrphans+rep.Errors != 0 {
			fail("%s after crashes at %v: the sweep found %+v (%v)", sd.name, where, rep, err)
		}
	}
	// Both made their own clusters under their own names: as many of each
	// installation as the last step wants, none of them shared.
	truth := prod.fake.Snapshot()
	count := map[string]int{}
	for _, c := range truth.Clusters {
		if !c.Seeded {
			count[c.Labels["fleet-agent.dev/installation"]]++
		}
	}
	if count[prod.owner()] != count[staging.owner()] {
		fail("after crashes at %v: prod has %d clusters, staging %d (%s)", where, count[prod.owner()], count[staging.owner()], strings.Join(where, " "))
	}
	return crashes
}
