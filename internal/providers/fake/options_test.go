package fake_test

import (
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/providers/fake"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

// TestDoneWithoutObject: the fault makes a create act and answer success
// with an empty object, count times; a read by name finds what was made.
func TestDoneWithoutObject(t *testing.T) {
	ref := providers.ClusterRef{Location: "fake-east", Name: "c"}
	cases := []struct {
		method string
		// create calls the method once and returns the answer's name and
		// id; made reads back what it made.
		create func(t *testing.T, f *fake.Fake) (name, id string, err error)
		made   func(t *testing.T, f *fake.Fake) error
	}{
		{
			method: "EnsureCluster",
			create: func(t *testing.T, f *fake.Fake) (string, string, error) {
				c, err := f.EnsureCluster(t.Context(), acct, clusterSpec("c"))
				return c.Ref.Name, c.Ref.ID, err
			},
			made: func(t *testing.T, f *fake.Fake) error { _, err := f.GetCluster(t.Context(), acct, ref); return err },
		},
		{
			method: "EnsureNodePool",
			create: func(t *testing.T, f *fake.Fake) (string, string, error) {
				spec := lagPool
				spec.Name = "p"
				p, err := f.EnsureNodePool(t.Context(), acct, ref, spec)
				return p.Name, p.ID, err
			},
			made: func(t *testing.T, f *fake.Fake) error {
				_, err := f.GetNodePool(t.Context(), acct, ref, "p")
				return err
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.method, func(t *testing.T) {
			cfg := config(t)
			cfg.Steps = fake.Steps{}
			f := open(t, cfg, clock.NewFake(epoch))
			if tc.method == "EnsureNodePool" {
				ensure(t, f, "c")
			}
			if err := f.AnswerWithoutObject(tc.method, 2); err != nil {
				t.Fatal(err)
			}
			for i := range 2 {
				name, id, err := tc.create(t, f)
				if err != nil || name != "" || id != "" {
					t.Errorf("call %d with the fault armed: name %q, id %q, %v; want success with an empty object", i+1, name, id, err)
				}
			}
			if err := tc.made(t, f); err != nil {
				t.Errorf("the call did not act: read back: %v", err)
			}
			name, id, err := tc.create(t, f)
			if err != nil || name == "" || id == "" {
				t.Errorf("after the fault's two calls: name %q, id %q, %v; want the object", name, id, err)
			}
		})
	}
}

// TestOptionsFromConfig: names, listLag and doneWithoutObject decode
// strictly from the config block, and values that cannot be are refused.
func TestOptionsFromConfig(t *testing.T) {
	reg := providers.NewRegistry()
	if err := reg.Register(providers.FakeID, fake.Factory(fake.WithClock(clock.NewFake(epoch)))); err != nil {
		t.Fatal(err)
	}
	openText := func(text string) (*fake.Fake, error) {
		var n yaml.Node
		if err := yaml.Unmarshal([]byte(text), &n); err != nil {
			t.Fatal(err)
		}
		k, err := reg.Open(providers.FakeID, &n, nil)
		if err != nil {
			return nil, err
		}
		return k.(*fake.Fake), nil
	}
	good := []struct {
		text    string
		names   fake.Names
		lag     time.Duration
		nFaults int
	}{
		{text: "spot: true\n", names: fake.NamesConverge},
		{text: "names: duplicate\nlistLag: 3s\n", names: fake.NamesDuplicate, lag: 3 * time.Second},
		{text: "names: conflict\n", names: fake.NamesConflict},
		{text: "faults: [{ method: EnsureCluster, doneWithoutObject: true }, { method: EnsureNodePool, doneWithoutObject: true, latency: 1s }]\n", names: fake.NamesConverge, nFaults: 2},
	}
	for _, g := range good {
		f, err := openText(g.text)
		if err != nil {
			t.Errorf("%q: %v", g.text, err)
			continue
		}
		cfg := f.Config()
		if cfg.Names != g.names || cfg.ListLag != g.lag || len(f.Snapshot().Faults) != g.nFaults {
			t.Errorf("%q: names %q, listLag %s, %d faults; want %q, %s, %d", g.text, cfg.Names, cfg.ListLag, len(f.Snapshot().Faults), g.names, g.lag, g.nFaults)
		}
	}
	bad := []struct{ text, want string }{
		{"names: unique\n", `names: "unique" is not converge, duplicate or conflict`},
		{"listLag: -1s\n", "listLag: must not be negative"},
		{"listLag: soon\n", "line 1"},
		{"namez: duplicate\n", `unknown key "namez"`},
		{"faults: [{ method: GetCluster, doneWithoutObject: true }]\n", "doneWithoutObject is for method EnsureCluster or EnsureNodePool"},
		{"faults: [{ doneWithoutObject: true }]\n", "doneWithoutObject is for method EnsureCluster or EnsureNodePool"},
		{"faults: [{ method: EnsureCluster, doneWithoutObject: true, class: unavailable }]\n", "takes no class and no drop"},
		{"faults: [{ method: EnsureCluster, doneWithoutObject: true, drop: true }]\n", "takes no class and no drop"},
	}
	for _, b := range bad {
		_, err := openText(b.text)
		if err == nil || !strings.Contains(err.Error(), b.want) || refusal.CodeOf(err) != refusal.InvalidInput {
			t.Errorf("%q: %v, want INVALID_INPUT with %q", b.text, err, b.want)
		}
	}
}
