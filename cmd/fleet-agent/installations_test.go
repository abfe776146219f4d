package main

import (
	"github.com/fleet-agent/fleet-agent/internal/localapi"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/providers/fake"
	"github.com/fleet-agent/fleet-agent/internal/substrate/crashtest"
)

// TestTwoInstallationsShareAnAccount: prod and staging, two agents as
// separate processes, each with its own state file and repository, the
// same tenant and pool name, and one fake account file they use at once.
// Each gets its own cluster; each one's sweep (at every start) and prune
// leave the other's running; a prune of the second leaves nothing of its
// own and the first's cluster as it was.
func TestTwoInstallationsShareAnAccount(t *testing.T) {
	shared := filepath.Join(t.TempDir(), "account.json")
	prod, staging := newTrialWorldSharing(t, shared), newTrialWorldSharing(t, shared)
	step := crashtest.Step{Pools: []crashtest.Pool{{Name: "gpu", Flavors: []crashtest.Flavor{{Name: "h100", MachineType: "fake-h100x8", Nodes: 1}}}}}

	a := prod.start()
	prodHead := prod.push(step, 0)
	a, _ = prod.waitConverged(a, step, prodHead, "prod")
	b := staging.start()
	b, _ = staging.waitConverged(b, step, staging.push(step, 0), "staging")
	// Each agent's sweep runs at its start: prod's sees staging's cluster.
	a.stop(t)
	a = prod.start()
	a, _ = prod.waitConverged(a, step, prodHead, "prod after a restart")
	waitLog(t, a, "a cluster of another fleet-agent installation")

	prodInst, stagingInst := installationOf(t, prod), installationOf(t, staging)
	if prodInst == stagingInst {
		t.Fatalf("two state files share the installation %s", prodInst)
	}
	byInst := clustersByInstallation(t, shared)
	if len(byInst[prodInst]) != 1 || len(byInst[stagingInst]) != 1 || len(byInst) != 2 {
		t.Fatalf("clusters by installation: %v; want one each of %s and %s", byInst, prodInst, stagingInst)
	}
	if byInst[prodInst][0] == byInst[stagingInst][0] {
		t.Fatalf("both installations named their cluster %s", byInst[prodInst][0])
	}

	// Staging prunes its pool: its cluster goes, prod's stays.
	left := crashtest.Step{Pools: []crashtest.Pool{{Name: "gpu", Left: true}}, Prune: true}
	b, _ = staging.waitConverged(b, left, staging.push(left, 1), "staging's prune")
	// And prod's sweep once more, after staging's teardown.
	a.stop(t)
	a = prod.start()
	a, _ = prod.waitConverged(a, step, prodHead, "prod after staging's prune")
	waitLog(t, a, "substrate sweep: done")
	a.stop(t)
	b.stop(t)

	byInst = clustersByInstallation(t, shared)
	if len(byInst[stagingInst]) != 0 {
		t.Errorf("staging's prune left %v", byInst[stagingInst])
	}
	if len(byInst[prodInst]) != 1 {
		t.Errorf("prod's clusters after staging's prune: %v", byInst[prodInst])
	}
	for _, w := range []struct {
		world *trialWorld
		last  crashtest.Step
	}{{prod, step}, {staging, left}} {
		if f := w.world.check(w.last); !f.OK() {
			t.Errorf("%s: %+v", w.world.dir, f.Problems)
		}
	}
}

// waitLog waits until the child's log holds text (its sweep runs at its
// start, a moment after the socket answers).
func waitLog(t *testing.T, c *child, text string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(c.logs(), text) {
		if time.Now().After(deadline) {
			t.Fatalf("the agent never logged %q:\n%s", text, c.logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// newTrialWorldSharing is a trial world whose fake account is the file
// shared.
func newTrialWorldSharing(t *testing.T, shared string) *trialWorld {
	w := newTrialWorld(t)
	data, err := os.ReadFile(w.config)
	if err != nil {
		t.Fatal(err)
	}
	cfg := string(data)
	writeFile(t, filepath.Dir(w.config), filepath.Base(w.config), strings.ReplaceAll(cfg, w.fake, shared))
	w.fake = shared
	return w
}

// installationOf asks a running agent its installation, as status shows it.
func installationOf(t *testing.T, w *trialWorld) string {
	t.Helper()
	var st localapi.StatusView
	if err := localapi.NewClient(w.socket).Do(t.Context(), "GET", "/v1/status", nil, &st); err != nil {
		t.Fatal(err)
	}
	if st.Installation == "" {
		t.Fatal("status shows no installation")
	}
	return st.Installation
}

// clustersByInstallation reads the shared account's clusters (not being
// deleted) by the installation label they carry.
func clustersByInstallation(t *testing.T, path string) map[string][]string {
	t.Helper()
	f, err := fake.New(crashtest.FakeConfig(path), crashtest.DefaultSecrets)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, c := range f.Snapshot().Clusters {
		if c.Seeded || c.Status == providers.ClusterDeleting {
			continue
		}
		inst := c.Labels[providers.LabelInstallation]
		out[inst] = append(out[inst], c.Name)
	}
	return out
}
