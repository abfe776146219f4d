package substrate_test

import (
	"strings"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/substrate/crashtest"
)

// versionStep is one pool of one flavor on a created cluster.
var versionStep = crashtest.Step{Pools: []crashtest.Pool{{Name: "gpu", Flavors: []crashtest.Flavor{{Name: "h100", MachineType: "fake-gpu-1", Nodes: 1}}}}}

// TestCreateAsksForTheDocumentsVersion: a cluster created with a version
// runs it, not the provider's default (the fake's is 1.34).
func TestCreateAsksForTheDocumentsVersion(t *testing.T) {
	e := newEnv(t, nil)
	doc := strings.Replace(crashtest.Document(versionStep), `{"create":{"location":"fake-east"}}`, `{"create":{"location":"fake-east","version":"1.33"}}`, 1)
	if !strings.Contains(doc, `"version":"1.33"`) {
		t.Fatal("the document names no version: the test is not testing")
	}
	e.apply(doc, false)
	e.converge(10*time.Second, 30)
	if v := e.status("gpu").Cluster.Version; v != "1.33" {
		t.Fatalf("the cluster runs %q, want 1.33", v)
	}
}

// TestUnnamedVersionIsPinnedByExport: created without a version, the
// cluster runs the provider's default; export writes its minor, and the
// export planned against the same state changes nothing.
func TestUnnamedVersionIsPinnedByExport(t *testing.T) {
	e := newEnv(t, nil)
	e.applyStep(versionStep)
	e.converge(10*time.Second, 30)
	if v := e.status("gpu").Cluster.Version; v != "1.34" {
		t.Fatalf("the cluster runs %q, want the fake's default 1.34", v)
	}
	snap, err := e.store.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	d, err := plan.Export(snap)
	if err != nil {
		t.Fatal(err)
	}
	var sub *fleet.Substrate
	for i := range d.Pools {
		if d.Pools[i].Name == "gpu" {
			sub = d.Pools[i].Substrate()
		}
	}
	if sub == nil || sub.Cluster.Create == nil || sub.Cluster.Create.Version != "1.34" {
		t.Fatalf("export wrote %+v, want version 1.34", sub)
	}
	p := plan.Make(d, snap, plan.Options{Prune: true})
	if len(p.Calls) != 0 || p.Summary.Blocked != 0 || p.Summary.Update != 0 {
		t.Fatalf("the export planned against its state:\n%s", strings.Join(p.TextLines(true), "\n"))
	}
	// The pinned document names one minor below: a downgrade, blocked.
	older := *d
	d2, errs := fleet.Validate("older", []byte(strings.Replace(string(older.Canonical()), `"version":"1.34"`, `"version":"1.33"`, 1)))
	if errs != nil {
		t.Fatal(errs.Text())
	}
	if p := plan.Make(d2, snap, plan.Options{Prune: true}); p.Summary.Blocked != 1 || len(p.Calls) != 0 {
		t.Fatalf("a downgrade of the running cluster:\n%s", strings.Join(p.TextLines(true), "\n"))
	}
}
