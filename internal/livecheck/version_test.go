package livecheck_test

import (
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/providers/fake"
)

func versioned(version string) obj {
	c := create("fake-east")
	if version != "" {
		c["create"].(obj)["version"] = version
	}
	return c
}

// TestVersionCheckedLive: a plan checks a created cluster's version
// against the versions the account offers, naming them when it does not
// offer the one asked; left out, the plan shows the provider's default on
// the pool's create. A version the cluster already runs that the provider
// stopped offering is a note, and the pool's other changes go through.
func TestVersionCheckedLive(t *testing.T) {
	w := newWorld(t, func(c *fake.Config) { c.Versions, c.DefaultVersion = []string{"1.33", "1.34", "1.35"}, "1.34" })
	accounts := []obj{fakeAccount("k8s", "secret://fake-token")}
	for _, tc := range []struct{ version, blocked, note string }{
		{"1.35", "", ""},
		{"1.31", "version 1.31 is not offered for clusters in fake-east at account k8s; it offers: 1.33, 1.34, 1.35", ""},
		{"", "", "no version named: the cluster gets the provider's default, 1.34 today; export then writes it into the document"},
	} {
		doc := document(t, accounts, pool("gpu", "k8s", versioned(tc.version), h100()))
		p, err := planWith(t, doc, nil, w.checker())
		if err != nil {
			t.Fatal(err)
		}
		c := change(t, p, inventory.Pool, "gpu")
		if tc.blocked == "" && c.Blocked != "" || !strings.Contains(c.Blocked, tc.blocked) {
			t.Errorf("version %q: blocked %q, want %q", tc.version, c.Blocked, tc.blocked)
		}
		if !strings.Contains(c.Note, tc.note) {
			t.Errorf("version %q: note %q, want %q", tc.version, c.Note, tc.note)
		}
	}

	// The fleet runs gpu at 1.32, which the account no longer offers; the
	// document pins it and adds a node.
	pinned := document(t, accounts, pool("gpu", "k8s", versioned("1.32"), h100()))
	snap := inventory.NewSnapshot(fleetObjects(t, pinned))
	gpuID := inventory.ID("root", inventory.Pool, "gpu")
	snap.WithClusterVersions(map[string]string{gpuID: "1.32.9"})
	grown := h100()
	grown["nodes"] = 2
	doc := document(t, accounts, pool("gpu", "k8s", versioned("1.32"), grown))
	p, err := planWith(t, doc, snap, w.checker().WithFleet(snap))
	if err != nil {
		t.Fatal(err)
	}
	c := change(t, p, inventory.Pool, "gpu")
	if c.Blocked != "" || c.Action != plan.Update {
		t.Fatalf("a pool running a version no longer offered: %s %q\n%s", c.Action, c.Blocked, text(t, p))
	}
	if want := "version 1.32 is no longer offered for clusters in fake-east at account k8s (it offers: 1.33, 1.34, 1.35): upgrade before its end of support"; !strings.Contains(c.Note, want) {
		t.Errorf("note %q, want %q", c.Note, want)
	}
}

// fleetObjects is the fleet an apply of doc makes from nothing.
func fleetObjects(t *testing.T, doc *fleet.Document) []inventory.Object {
	t.Helper()
	p := plan.Make(doc, nil, plan.Options{})
	var objs []inventory.Object
	for _, c := range p.Calls {
		spec := map[string]any{}
		for k, v := range c.Params {
			if k != "id" {
				spec[k] = v
			}
		}
		objs = append(objs, inventory.Object{Kind: c.Kind(), ID: c.ID(), Name: c.Name(), Spec: spec})
	}
	return objs
}
