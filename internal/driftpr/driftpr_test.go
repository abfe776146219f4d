package driftpr_test

import (
	"bytes"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/apply"
	"github.com/fleet-agent/fleet-agent/internal/driftpr"
	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/state/statetest"
)

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := "testdata/" + name
	if os.Getenv("UPDATE_GOLDEN") != "" {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs from its golden:\n%s", name, got)
	}
}

// drifted applies the file, runs the edits and returns what Write made.
// fixedEdit reports whether an edit sets a field a plan never lets change.
func fixedEdit(e apply.Edit) bool {
	for f := range e.Set {
		if slices.Contains(plan.FixedFields(e.Kind), f) {
			return true
		}
	}
	return false
}

func drifted(t *testing.T, edits ...apply.Edit) (*driftpr.Rewrite, []byte) {
	t.Helper()
	file, err := os.ReadFile("testdata/fleet.before.json")
	if err != nil {
		t.Fatal(err)
	}
	doc, errs := fleet.Validate("fleet.json", file)
	if errs != nil {
		t.Fatal(errs)
	}
	s := statetest.Open(t)
	if _, err := apply.Apply(t.Context(), s, doc, apply.Options{}); err != nil {
		t.Fatal(err)
	}
	for _, e := range edits {
		if fixedEdit(e) {
			// edit refuses a field a plan never lets change, but a state
			// file from an agent before may hold one: written directly.
			statetest.SetSpec(t, s, e.Kind, e.Name, e.Set)
			continue
		}
		if err := apply.ApplyEdit(s, e); err != nil {
			t.Fatal(err)
		}
	}
	snap, err := s.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	p := plan.Make(doc, snap, plan.Options{})
	liveDoc, err := plan.Export(snap)
	if err != nil {
		t.Fatal(err)
	}
	liveBytes, _ := plan.Pretty(liveDoc)
	var rows []state.AuditRow
	if err := s.View(func(tx *state.Tx) (err error) { rows, err = tx.Audit(); return }); err != nil {
		t.Fatal(err)
	}
	rw, err := driftpr.Write(file, p, snap, liveBytes, rows, "root")
	if err != nil {
		t.Fatal(err)
	}
	// Planning the rewritten file against the fleet must be empty: merging
	// it keeps the fleet as it is.
	kept, errs := fleet.Validate("fleet.json", rw.File)
	if errs != nil {
		t.Fatalf("the rewritten file is invalid: %v\n%s", errs, rw.File)
	}
	if again := plan.Make(kept, snap, plan.Options{}); len(rw.Unwritten) == 0 && !again.Empty() {
		t.Fatalf("the rewritten file still drifts: %v", again.TextLines(false))
	}
	return rw, file
}

func TestEditTouchesOnlyTheEditedValue(t *testing.T) {
	rw, before := drifted(t, apply.Edit{Kind: inventory.Flavor, Name: "gpu-fra/h100x1", Set: map[string]any{"vcpu": 24}, Who: "ops@box (uid 1000)"})
	golden(t, "fleet.vcpu.json", rw.File)
	if rw.Changed != rw.Drifted || rw.Drifted != 2 {
		t.Fatalf("changed %d bytes, drifted %d: want both 2 (16 -> 24)", rw.Changed, rw.Drifted)
	}
	if len(rw.Fields) != 1 || rw.Fields[0].Pointer != "/flavors/0/vcpu" || rw.Fields[0].Before != "16" || rw.Fields[0].After != "24" {
		t.Fatalf("fields: %+v", rw.Fields)
	}
	if !strings.HasPrefix(rw.Fields[0].Source, "`edit` by ops@box (uid 1000) at ") {
		t.Fatalf("source: %q", rw.Fields[0].Source)
	}
	// Only one line differs.
	bl, al := strings.Split(string(before), "\n"), strings.Split(string(rw.File), "\n")
	diff := 0
	for i := range bl {
		if bl[i] != al[i] {
			diff++
		}
	}
	if len(bl) != len(al) || diff != 1 {
		t.Fatalf("%d lines differ", diff)
	}
}

func TestNestedFieldRewritesTheLeafAlone(t *testing.T) {
	rw, _ := drifted(t, apply.Edit{Kind: inventory.Pool, Name: "gpu-fra", Set: map[string]any{"policy": map[string]any{"disruptionBudget": 0.25, "maxNodes": 5}}, Who: "ops@box (uid 1000)"})
	golden(t, "fleet.maxNodes.json", rw.File)
	if len(rw.Fields) != 1 || rw.Fields[0].Field != "policy.maxNodes" || rw.Fields[0].Pointer != "/pools/0/policy/maxNodes" {
		t.Fatalf("fields: %+v", rw.Fields)
	}
	if rw.Changed != rw.Drifted {
		t.Fatalf("changed %d bytes, drifted %d", rw.Changed, rw.Drifted)
	}
	body := driftpr.Body(rw, driftpr.Choices{Branch: "main", DriftHash: "sha256:abc", Marker: "<!-- m -->"})
	for _, want := range []string{"policy.maxNodes", "`2.0`", "`5`", "ops@box (uid 1000)", "Merge to keep", "drift.revertOnClose` is off"} {
		if !strings.Contains(body, want) {
			t.Errorf("body lacks %q:\n%s", want, body)
		}
	}
}

func TestUnwrittenDriftIsListed(t *testing.T) {
	rw, before := drifted(t, apply.Edit{Kind: inventory.Flavor, Name: "gpu-fra/h100x1", Delete: true, Who: "ops@box (uid 1000)"})
	if !bytes.Equal(rw.File, before) || len(rw.Unwritten) != 1 || !strings.Contains(rw.Unwritten[0].Reason, "no longer does") {
		t.Fatalf("unwritten: %+v", rw.Unwritten)
	}
	body := driftpr.Body(rw, driftpr.Choices{Branch: "main", RevertOnClose: true})
	if !strings.Contains(body, "Not written into the document") || !strings.Contains(body, "Close to revert") {
		t.Fatalf("body:\n%s", body)
	}
}

// A blocked change is never written, even an update whose value the file
// could hold: it is listed as blocked, with the plan's reason.
func TestBlockedDriftIsListedNotWritten(t *testing.T) {
	rw, _ := drifted(t,
		apply.Edit{Kind: inventory.Pool, Name: "gpu-fra", Set: map[string]any{"sharing": "timeslice"}, Who: "ops@box (uid 1000)"},
		apply.Edit{Kind: inventory.Flavor, Name: "gpu-fra/h100x1", Set: map[string]any{"vcpu": 24}, Who: "ops@box (uid 1000)"})
	if bytes.Contains(rw.File, []byte(`"timeslice"`)) {
		t.Fatalf("the blocked change was written:\n%s", rw.File)
	}
	if len(rw.Fields) != 1 || rw.Fields[0].Field != "vcpu" {
		t.Fatalf("fields: %+v", rw.Fields)
	}
	if len(rw.Unwritten) != 1 || !rw.Unwritten[0].Blocked || rw.Unwritten[0].Name != "gpu-fra" ||
		!strings.Contains(rw.Unwritten[0].Reason, "sharing cannot change once created") {
		t.Fatalf("unwritten: %+v", rw.Unwritten)
	}
	body := driftpr.Body(rw, driftpr.Choices{Branch: "main"})
	if !strings.Contains(body, "blocked") || !strings.Contains(body, "sharing cannot change once created") {
		t.Fatalf("body:\n%s", body)
	}
}

// A pool's policy removed by hand is removed from the file as one member
// (with its separator), not emptied member by member: `"policy": {  }`
// would plan as a change again.
func TestRemovedPolicyRemovesTheMember(t *testing.T) {
	rw, file := drifted(t, apply.Edit{Kind: inventory.Pool, Name: "gpu-fra", Set: map[string]any{"policy": nil}, Who: "ops@box"})
	want := strings.Replace(string(file), `,
	  "policy": { "disruptionBudget": 0.25,
	              "maxNodes" :  2.0 }`, "", 1)
	if string(rw.File) != want {
		t.Fatalf("the rewritten file:\n%s", rw.File)
	}
	if len(rw.Fields) != 1 || rw.Fields[0].Field != "policy" || rw.Fields[0].After != "" {
		t.Fatalf("fields: %+v", rw.Fields)
	}
}
