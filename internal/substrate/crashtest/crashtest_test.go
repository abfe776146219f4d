package crashtest_test

import (
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/providers/fake"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/substrate/crashtest"
)

// TestCheckFindsWhatIsWrong: the campaign's verdict can fail; a twin, a
// leaked node pool, a missing node pool and a record that disagrees are
// each found.
func TestCheckFindsWhatIsWrong(t *testing.T) {
	f, err := fake.New(crashtest.FakeConfig(filepath.Join(t.TempDir(), "fake.json")), crashtest.DefaultSecrets)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range crashtest.Scenarios() {
		if _, errs := fleet.Validate(s.Name, []byte(crashtest.Document(s.Steps[0]))); errs != nil {
			t.Fatalf("%s: %s", s.Name, errs.Text())
		}
	}
	pool := crashtest.Pool{Name: "gpu", Flavors: []crashtest.Flavor{{Name: "h100", MachineType: "fake-h100x8", Nodes: 1}}}
	step := crashtest.Step{Pools: []crashtest.Pool{pool}}
	acct := providers.Account{Name: crashtest.Account, Provider: "fake", Config: []byte(`{"token":"secret://fake-token","project":"fleet"}`)}
	label := map[string]string{providers.LabelSubstratePool: pool.ID()}
	c, err := f.EnsureCluster(t.Context(), acct, providers.ClusterSpec{Name: "fa-gpu-x", Location: "fake-east", Labels: label, ClientToken: "t1"})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		_ = f.Advance()
	}
	got := crashtest.Check(f.Snapshot(), step, nil, "")
	if got.Disagreements != 2 || !strings.Contains(strings.Join(got.Problems, "|"), "node pool fa-") {
		t.Fatalf("a missing node pool and record: %+v", got)
	}
	if _, err := f.EnsureNodePool(t.Context(), acct, c.Ref, providers.NodePoolSpec{Name: providers.NodePoolName(pool.ID(), "old"),
		Shape: providers.Shape{MachineType: "fake-cpu-4"}, Size: providers.Size{NodeCount: 1}, Labels: label}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		_ = f.Advance()
	}
	rec := state.SubstrateRecord{Want: state.SubstrateWant{PoolID: pool.ID(), Generation: 2},
		Seen: &state.SubstrateSeen{State: state.SubstrateReady, ObservedGeneration: 1}}
	got = crashtest.Check(f.Snapshot(), step, []state.SubstrateRecord{rec}, "")
	if got.Leaks != 1 || got.Disagreements < 3 {
		t.Fatalf("a leaked node pool, a stale record: %+v", got)
	}
	if _, err := f.EnsureCluster(t.Context(), acct, providers.ClusterSpec{Name: "fa-gpu-twin", Location: "fake-east", Labels: label, ClientToken: "t2"}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		_ = f.Advance()
	}
	if got = crashtest.Check(f.Snapshot(), step, nil, ""); got.Duplicates != 1 {
		t.Fatalf("a twin: %+v", got)
	}
	// Torn down: every cluster of the pool is a leak.
	pool.Left = true
	got = crashtest.Check(f.Snapshot(), crashtest.Step{Pools: []crashtest.Pool{pool}}, nil, "")
	if got.Leaks != 2 {
		t.Fatalf("%+v", got)
	}
}

// TestFakeBlock: the YAML block opens the same fake as FakeConfig.
func TestFakeBlock(t *testing.T) {
	var node yaml.Node
	path := filepath.Join(t.TempDir(), "fake.json")
	if err := yaml.Unmarshal([]byte(crashtest.FakeBlock(path)), &node); err != nil {
		t.Fatal(err)
	}
	f, err := fake.Open(node.Content[0].Content[1], crashtest.DefaultSecrets)
	if err != nil {
		t.Fatal(err)
	}
	want := crashtest.FakeConfig(path)
	got := f.Config()
	if got.StatePath != want.StatePath || got.Token != want.Token || got.Steps != want.Steps || len(got.Adoptable) != 1 ||
		got.Adoptable[0].NodePools[0].Name != crashtest.OwnerPool {
		t.Fatalf("got %+v", got)
	}
}

// TestCheckFindsABlueGreenTwin: a blue/green flavor with its old and its
// new generation both left is a duplicate; its new generation alone, of
// the wanted shape, is a pass; of another shape, a disagreement.
func TestCheckFindsABlueGreenTwin(t *testing.T) {
	f, err := fake.New(crashtest.FakeConfig(filepath.Join(t.TempDir(), "fake.json")), crashtest.DefaultSecrets)
	if err != nil {
		t.Fatal(err)
	}
	pool := crashtest.Pool{Name: "gpu", Flavors: []crashtest.Flavor{{Name: "h100", MachineType: "fake-cpu-8", Nodes: 1, Replace: true}}}
	step := crashtest.Step{Pools: []crashtest.Pool{pool}}
	acct := providers.Account{Name: crashtest.Account, Provider: "fake", Config: []byte(`{"token":"secret://fake-token","project":"fleet"}`)}
	o := providers.Owner{PoolID: pool.ID(), Legacy: true}
	label := o.PoolLabels(false)
	c, err := f.EnsureCluster(t.Context(), acct, providers.ClusterSpec{Name: "fa-gpu-x", Location: "fake-east", Labels: label, ClientToken: "t1"})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		_ = f.Advance()
	}
	makePool := func(name, machineType string) {
		if _, err := f.EnsureNodePool(t.Context(), acct, c.Ref, providers.NodePoolSpec{Name: name,
			Shape: providers.Shape{MachineType: machineType}, Size: providers.Size{NodeCount: 1}, Labels: label}); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			_ = f.Advance()
		}
	}
	g2 := o.NodePoolName(fleet.GenerationName("h100", 2))
	makePool(g2, "fake-cpu-8")
	if got := crashtest.Check(f.Snapshot(), step, nil, ""); got.Duplicates+got.Leaks != 0 || strings.Contains(strings.Join(got.Problems, "|"), "node pool fa-") {
		t.Fatalf("the new generation alone: %+v", got)
	}
	makePool(o.NodePoolName("h100"), "fake-h100x8")
	if got := crashtest.Check(f.Snapshot(), step, nil, ""); got.Duplicates != 1 {
		t.Fatalf("the old generation left beside the new: %+v", got)
	}
	pool.Flavors[0].MachineType = "fake-l4x1"
	if got := crashtest.Check(f.Snapshot(), crashtest.Step{Pools: []crashtest.Pool{pool}}, nil, ""); got.Disagreements < 2 {
		t.Fatalf("both generations of another shape: %+v", got)
	}
}
