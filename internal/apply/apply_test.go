package apply_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/apply"
	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/state/statetest"
)

func doc(t testing.TB, text string) *fleet.Document {
	t.Helper()
	d, errs := fleet.Validate("test", []byte(text))
	if errs != nil {
		t.Fatal(errs.Text())
	}
	return d
}

func docFile(t testing.TB, name string) *fleet.Document {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("../../testdata/documents/valid", name))
	if err != nil {
		t.Fatal(err)
	}
	d, errs := fleet.Validate(name, data)
	if errs != nil {
		t.Fatal(errs.Text())
	}
	return d
}

var fixed = func() time.Time { return time.UnixMilli(1790251200000) }

func audit(t testing.TB, s *state.Store) []state.AuditRow {
	t.Helper()
	var rows []state.AuditRow
	if err := s.View(func(tx *state.Tx) (err error) { rows, err = tx.Audit(); return }); err != nil {
		t.Fatal(err)
	}
	return rows
}

func applied(t testing.TB, s *state.Store) *state.Applied {
	t.Helper()
	var a *state.Applied
	if err := s.View(func(tx *state.Tx) (err error) { a, err = tx.Applied(); return }); err != nil {
		t.Fatal(err)
	}
	return a
}

func TestApplyThenPlanIsEmptyWithAudit(t *testing.T) {
	s := statetest.Open(t)
	d := docFile(t, "everything.json")
	res, err := apply.Apply(t.Context(), s, d, apply.Options{AppliedBy: "ops@box", Commit: "c1", Now: fixed})
	if err != nil {
		t.Fatal(err)
	}
	if res.Applied != 15 || !res.Recorded {
		t.Fatalf("applied %d recorded %v", res.Applied, res.Recorded)
	}
	rows := audit(t, s)
	if len(rows) != 16 || rows[15].Action != "apply" || rows[15].Calls != 15 || rows[0].Who != "ops@box" || rows[0].Commit != "c1" {
		t.Fatalf("audit: %d rows, last %+v", len(rows), rows[len(rows)-1])
	}
	a := applied(t, s)
	if a == nil || a.PlanHash != res.Plan.PlanHash || a.AppliedAt != 1790251200000 || string(a.Document) != string(d.Canonical()) {
		t.Fatalf("applied record %+v", a)
	}
	snap, _ := s.Snapshot()
	again := plan.Make(d, snap, plan.Options{})
	if !again.Empty() || again.Summary.Unchanged != 15 {
		t.Fatalf("plan after apply:\n%s", strings.Join(again.TextLines(true), "\n"))
	}
	// Apply again without a plan hash: nothing to change, nothing recorded.
	res, err = apply.Apply(t.Context(), s, d, apply.Options{AppliedBy: "ops@box", Now: fixed})
	if err != nil || res.Applied != 0 || res.Recorded || len(audit(t, s)) != 16 {
		t.Fatalf("empty apply: %+v %v", res, err)
	}
	// With the plan hash, the unchanged document becomes the baseline.
	res, err = apply.Apply(t.Context(), s, d, apply.Options{AppliedBy: "agent", PlanHash: again.PlanHash, Commit: "c2", Now: fixed})
	if err != nil || !res.Recorded || applied(t, s).Commit != "c2" || len(audit(t, s)) != 17 {
		t.Fatalf("empty apply with hash: %+v %v", res, err)
	}
}

func TestRefusalsWriteNothing(t *testing.T) {
	base := `{"version":1,"sites":[{"name":"fra","kind":"shared","region":"eu"}],"pools":[{"name":"p","site":"fra","class":"vps-host"}]}`
	cases := []struct {
		name string
		doc  string
		opts apply.Options
		code refusal.Code
	}{
		{"blocked", `{"version":1,"pools":[{"name":"p","site":"nowhere","class":"vps-host"}]}`, apply.Options{}, refusal.PlanBlocked},
		{"stale plan hash", base, apply.Options{PlanHash: strings.Repeat("0", 64)}, refusal.ConfigDrift},
		{"a call that cannot be made", base, apply.Options{Live: refuse{method: "pools.create"}}, refusal.InvalidState},
		{"provider unreachable during checks", base, apply.Options{Live: refuse{method: "unavailable"}}, refusal.Unavailable},
		{"the fleet moves between check and write", base, apply.Options{}, refusal.ConfigDrift},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := statetest.Open(t)
			if c.name == "the fleet moves between check and write" {
				c.opts.Live = mover{s: s}
			}
			_, err := apply.Apply(t.Context(), s, doc(t, c.doc), c.opts)
			if refusal.CodeOf(err) != c.code {
				t.Fatalf("got %v, want %s", err, c.code)
			}
			snap, _ := s.Snapshot()
			moved := 0
			if c.name == "the fleet moves between check and write" {
				moved = 1 // the object the mover wrote
			}
			if snap.Len() != moved || len(audit(t, s)) != 0 || applied(t, s) != nil {
				t.Fatalf("something was written: %d objects", snap.Len())
			}
		})
	}
}

// TestFleetMovedButPlanSame: a write between check and apply that does not
// change the plan (an unrelated object) lets the apply through, planned again.
func TestFleetMovedButPlanSame(t *testing.T) {
	s := statetest.Open(t)
	d := doc(t, `{"version":1,"sites":[{"name":"fra","kind":"shared","region":"eu"}]}`)
	res, err := apply.Apply(t.Context(), s, d, apply.Options{Live: unrelated{s: s}})
	if err != nil || res.Applied != 1 {
		t.Fatalf("%+v %v", res, err)
	}
}

type unrelated struct {
	plan.Offline
	s *state.Store
}

func (u unrelated) CheckCall(context.Context, plan.Call) error {
	return u.s.Update(func(tx *state.Tx) error {
		return tx.PutObject(inventory.Object{Kind: inventory.Site, ID: "site_elsewhere", Spec: map[string]any{"kind": "shared"}}, "")
	})
}

type refuse struct {
	plan.Offline
	method string
}

func (r refuse) CheckCall(_ context.Context, c plan.Call) error {
	if r.method == "unavailable" {
		return refusal.New(refusal.Unavailable, "provider down")
	}
	if c.Method == r.method {
		return errors.New("permission denied")
	}
	return nil
}

// mover changes the fleet while the apply checks its calls.
type mover struct {
	plan.Offline
	s *state.Store
}

func (m mover) CheckCall(context.Context, plan.Call) error {
	return m.s.Update(func(tx *state.Tx) error {
		return tx.PutObject(inventory.Object{Kind: inventory.Site, ID: inventory.ID("root", inventory.Site, "fra"),
			Spec: map[string]any{"name": "fra", "kind": "dedicated", "region": "eu"}}, "fra")
	})
}

func TestPruneDeletesAndArchives(t *testing.T) {
	s := statetest.Open(t)
	full := docFile(t, "everything.json")
	if _, err := apply.Apply(t.Context(), s, full, apply.Options{}); err != nil {
		t.Fatal(err)
	}
	small := doc(t, `{"version":1,"sites":[{"name":"fra","kind":"shared","region":"eu-central","iamRegion":"eu-central"}]}`)
	res, err := apply.Apply(t.Context(), s, small, apply.Options{Prune: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Plan.Summary.Delete == 0 {
		t.Fatal("nothing deleted")
	}
	snap, _ := s.Snapshot()
	for _, o := range snap.Objects(inventory.Pool) {
		if !o.Archived {
			t.Errorf("pool %s not archived", o.Name)
		}
	}
	if len(snap.Objects(inventory.Flavor))+len(snap.Objects(inventory.Offer))+len(snap.Objects(inventory.SandboxTemplate))+len(snap.Objects(inventory.ProviderAccount)) != 0 {
		t.Error("prune left deletable objects")
	}
	if p := plan.Make(small, snap, plan.Options{Prune: true}); !p.Empty() {
		t.Fatalf("not converged:\n%s", strings.Join(p.TextLines(true), "\n"))
	}
	// Re-creating an archived pool's name is blocked.
	_, err = apply.Apply(t.Context(), s, full, apply.Options{})
	if !refusal.Is(err, refusal.PlanBlocked) || !strings.Contains(err.Error(), "archived; choose a new name") {
		t.Fatalf("got %v", err)
	}
}

// TestKillDuringApply kills a child process in the middle of the apply's
// transaction: the state holds the old fleet, never a mix; a run left to
// finish holds the new one.
func TestKillDuringApply(t *testing.T) {
	for _, kill := range []bool{true, false} {
		t.Run(fmt.Sprintf("kill=%v", kill), func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "fleet.db")
			// The old fleet: one site.
			s, err := state.Open(path, state.Options{})
			if err != nil {
				t.Fatal(err)
			}
			old := doc(t, `{"version":1,"sites":[{"name":"old","kind":"shared","region":"eu"}]}`)
			if _, err := apply.Apply(t.Context(), s, old, apply.Options{}); err != nil {
				t.Fatal(err)
			}
			s.Close()
			cmd := exec.CommandContext(t.Context(), os.Args[0])
			cmd.Env = append(os.Environ(), "FLEET_APPLY_CHILD="+path, "FLEET_APPLY_STOP="+strconv.FormatBool(kill))
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if strings.Contains(sc.Text(), "MID-APPLY") && kill {
					_ = cmd.Process.Signal(syscall.SIGKILL)
					break
				}
			}
			_ = cmd.Wait()
			s2 := statetest.OpenAt(t, path)
			snap, err := s2.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			_, hasOld := snap.ByName(inventory.Site, "old")
			n := len(snap.Objects(inventory.Site))
			if kill && (n != 1 || !hasOld) {
				t.Fatalf("after a kill: %d sites (old present %v); want the old fleet", n, hasOld)
			}
			if !kill && n != 501 {
				t.Fatalf("after a full apply: %d sites, want 501", n)
			}
		})
	}
}

// TestMain runs the child of TestKillDuringApply when asked to.
func TestMain(m *testing.M) {
	if path := os.Getenv("FLEET_APPLY_CHILD"); path != "" {
		if err := applyChild(path, os.Getenv("FLEET_APPLY_STOP") == "true"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// applyChild applies 500 new sites, pausing (to be killed) half way
// through the write transaction when stop is set.
func applyChild(path string, stop bool) error {
	s, err := state.Open(path, state.Options{})
	if err != nil {
		return err
	}
	defer s.Close()
	var b strings.Builder
	b.WriteString(`{"version":1,"sites":[{"name":"old","kind":"shared","region":"eu"}`)
	for i := range 500 {
		fmt.Fprintf(&b, `,{"name":"s%d","kind":"shared","region":"eu"}`, i)
	}
	b.WriteString(`]}`)
	d, errs := fleet.Validate("child", []byte(b.String()))
	if errs != nil {
		return errs
	}
	_, err = apply.Apply(context.Background(), s, d, apply.Options{AfterCall: func(i int) {
		if i == 250 && stop {
			fmt.Println("MID-APPLY")
			time.Sleep(time.Minute) // killed here, half the calls written in the open transaction
		}
	}})
	return err
}

func TestEditKeepsSecretsReferences(t *testing.T) {
	s := statetest.Open(t)
	d := docFile(t, "everything.json")
	if _, err := apply.Apply(t.Context(), s, d, apply.Options{}); err != nil {
		t.Fatal(err)
	}
	const canary = "CANARY-edit-7c1d"
	cases := []apply.Edit{
		{Kind: inventory.ProviderAccount, Name: "demo", Set: map[string]any{"config": map[string]any{"token": canary}}},
		{Kind: inventory.ProviderAccount, Name: "demo", Set: map[string]any{"config": map[string]any{"nested": map[string]any{"apiKey": canary}}}},
		{Kind: inventory.SandboxTemplate, Name: "py-gpu", Set: map[string]any{"env": map[string]any{"HF_TOKEN": canary}}},
		{Kind: inventory.SandboxTemplate, Name: "py-gpu", Set: map[string]any{"userData": "secret://" + canary}},
	}
	for _, e := range cases {
		e.Who = "ops@box"
		err := apply.ApplyEdit(s, e)
		if !refusal.Is(err, refusal.InvalidInput) || strings.Contains(err.Error(), canary) {
			t.Fatalf("%+v: %v", e.Set, err)
		}
	}
	// A reference is fine.
	ok := apply.Edit{Kind: inventory.ProviderAccount, Name: "demo", Set: map[string]any{"config": map[string]any{"token": "secret://rotated"}}, Who: "ops@box"}
	if err := apply.ApplyEdit(s, ok); err != nil {
		t.Fatal(err)
	}
	if rows := audit(t, s); rows[len(rows)-1].Action != "edit" || strings.Contains(string(rows[len(rows)-1].Params), canary) {
		t.Fatalf("audit %+v", rows[len(rows)-1])
	}
}

func TestEditMustLeaveAValidFleet(t *testing.T) {
	s := statetest.Open(t)
	if _, err := apply.Apply(t.Context(), s, docFile(t, "everything.json"), apply.Options{}); err != nil {
		t.Fatal(err)
	}
	for _, e := range []apply.Edit{
		{Kind: inventory.OwnerQuota, Name: "gpu-fra:gpu", Set: map[string]any{"max": -1}},
		{Kind: inventory.Pool, Name: "gpu-fra", Set: map[string]any{"gpuModel": 42}},
	} {
		e.Who = "ops@box"
		before := len(audit(t, s))
		if err := apply.ApplyEdit(s, e); !refusal.Is(err, refusal.InvalidInput) {
			t.Fatalf("%+v: %v", e.Set, err)
		}
		if len(audit(t, s)) != before {
			t.Fatal("a refused edit was audited")
		}
	}
	snap, _ := s.Snapshot()
	if _, err := plan.Export(snap); err != nil {
		t.Fatalf("the fleet no longer exports: %v", err)
	}
}

// TestEditResolvesReferences: a reference an edit gives is read as the id
// of an object of the fleet, given by name or by id; one to nothing is
// refused with the nearest name. A pool's site never changes once created
// (a plan refuses it), so the same site given either way changes nothing,
// and another is refused as a plan would refuse it; nothing is changed.
func TestEditResolvesReferences(t *testing.T) {
	s := statetest.Open(t)
	if _, err := apply.Apply(t.Context(), s, docFile(t, "everything.json"), apply.Options{}); err != nil {
		t.Fatal(err)
	}
	exported := func() string {
		snap, err := s.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		d, err := plan.Export(snap)
		if err != nil {
			t.Fatalf("the fleet no longer exports: %v", err)
		}
		for _, p := range d.Pools {
			if p.Name == "gpu-fra" {
				return p.Site
			}
		}
		t.Fatal("no pool gpu-fra")
		return ""
	}
	for _, by := range []string{"fra", inventory.ID("root", inventory.Site, "fra")} {
		if err := apply.ApplyEdit(s, apply.Edit{Kind: inventory.Pool, Name: "gpu-fra", Set: map[string]any{"site": by}, Who: "ops@box"}); err != nil {
			t.Fatalf("site=%s: %v", by, err)
		}
		if got := exported(); got != "fra" {
			t.Fatalf("site=%s: exported as %q", by, got)
		}
	}
	if err := apply.ApplyEdit(s, apply.Edit{Kind: inventory.Pool, Name: "gpu-fra", Set: map[string]any{"site": "tor"}, Who: "ops@box"}); !refusal.Is(err, refusal.InvalidState) || !strings.Contains(err.Error(), "site never changes once created") {
		t.Fatalf("another site: %v", err)
	}
	before := len(audit(t, s))
	err := apply.ApplyEdit(s, apply.Edit{Kind: inventory.Pool, Name: "gpu-fra", Set: map[string]any{"site": "fr"}, Who: "ops@box"})
	if !refusal.Is(err, refusal.InvalidInput) || !strings.Contains(err.Error(), `did you mean "fra"?`) {
		t.Fatalf("a site of nothing: %v", err)
	}
	if err := apply.ApplyEdit(s, apply.Edit{Kind: inventory.Pool, Name: "gpu-fra", Set: map[string]any{"site": inventory.ID("root", inventory.Pool, "burst")}, Who: "ops@box"}); !refusal.Is(err, refusal.InvalidInput) {
		t.Fatalf("a pool's id as a site: %v", err)
	}
	if len(audit(t, s)) != before || exported() != "fra" {
		t.Fatal("a refused edit changed the fleet")
	}
}

// TestEditKeepsTemplatesToTheirFlavors: a sandbox template names a flavor
// of its pool by name: deleting that flavor, or pointing the template at
// a flavor its pool does not have, would leave an export naming nothing;
// both are refused and audited, and nothing changes.
func TestEditKeepsTemplatesToTheirFlavors(t *testing.T) {
	s := statetest.Open(t)
	if _, err := apply.Apply(t.Context(), s, docFile(t, "everything.json"), apply.Options{}); err != nil {
		t.Fatal(err)
	}
	snap, _ := s.Snapshot()
	var tmpl, flavor inventory.Object
	for _, o := range snap.Objects(inventory.SandboxTemplate) {
		tmpl = o
		break
	}
	for _, f := range snap.Objects(inventory.Flavor) {
		if f.Spec["pool"] == tmpl.Spec["pool"] && (f.Spec["name"] == tmpl.Spec["flavor"] || strings.HasSuffix(f.Name, "/"+tmpl.Spec["flavor"].(string))) {
			flavor = f
		}
	}
	if tmpl.Name == "" || flavor.Name == "" {
		t.Fatalf("the fixture: template %+v, its flavor %+v", tmpl, flavor)
	}
	before, _ := plan.Export(snap)
	for _, e := range []apply.Edit{
		{Kind: inventory.Flavor, Name: flavor.Name, Delete: true},
		{Kind: inventory.SandboxTemplate, Name: tmpl.Name, Set: map[string]any{"flavor": "nope"}},
	} {
		e.Who = "ops@box"
		rows := len(audit(t, s))
		if err := apply.ApplyEdit(s, e); refusal.CodeOf(err) != refusal.InvalidState {
			t.Fatalf("%s %s %+v delete=%v: %v, want INVALID_STATE", e.Kind, e.Name, e.Set, e.Delete, err)
		}
		snap, _ := s.Snapshot()
		if after, _ := plan.Export(snap); !reflect.DeepEqual(before, after) || len(audit(t, s)) != rows+1 {
			t.Fatal("a refused edit changed the fleet, or was not audited")
		}
	}
}
