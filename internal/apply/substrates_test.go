package apply_test

import (
	"bufio"
	"context"
	"encoding/json"
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

// k8sDoc is a document with one Kubernetes-backed pool per entry of pools
// (name -> flavors JSON, "" for a pool without a substrate).
func k8sDoc(account string, pools map[string]string) string {
	var b strings.Builder
	b.WriteString(`{"version":1,"sites":[{"name":"k8s","kind":"shared","region":"fake-east"}]`)
	if account != "" {
		fmt.Fprintf(&b, `,"providerAccounts":[{"name":%q,"provider":"fake","config":{"token":"secret://fake-token"}}]`, account)
	}
	b.WriteString(`,"pools":[`)
	first := true
	for _, name := range inventory.SortedKeys(pools) {
		if !first {
			b.WriteString(",")
		}
		first = false
		policy := `{}`
		if fl := pools[name]; fl != "" {
			policy = fmt.Sprintf(`{"substrate":{"kind":"kubernetes","account":%q,"cluster":{"create":{"location":"fake-east"}},"flavors":%s}}`, account, fl)
		}
		fmt.Fprintf(&b, `{"name":%q,"site":"k8s","class":"metal-host","gpuModel":"H100","policy":%s}`, name, policy)
	}
	b.WriteString(`]}`)
	return b.String()
}

func want(t *testing.T, s *state.Store, pool string) *state.SubstrateWant {
	t.Helper()
	var w *state.SubstrateWant
	if err := s.View(func(tx *state.Tx) (err error) {
		w, err = tx.SubstrateWant(inventory.ID("root", inventory.Pool, pool))
		return
	}); err != nil {
		t.Fatal(err)
	}
	return w
}

const (
	oneFlavor  = `[{"name":"h100","machineType":"fake-h100x8","nodes":1}]`
	twoNodes   = `[{"name":"h100","machineType":"fake-h100x8","nodes":2}]`
	twoFlavors = `[{"name":"h100","machineType":"fake-h100x8","nodes":2},{"name":"l4","machineType":"fake-l4x1","nodes":1}]`
)

// TestApplyRecordsSubstrates walks one pool through every change apply
// records: create, resize, add a flavor, an unrelated pool change, removal
// without and with prune, adding it again, and archiving the pool with its
// account pruned in the same apply.
func TestApplyRecordsSubstrates(t *testing.T) {
	s := statetest.Open(t)
	step := func(text string, prune bool) *apply.Result {
		t.Helper()
		res, err := apply.Apply(t.Context(), s, doc(t, text), apply.Options{Prune: prune, Now: fixed, Commit: "c"})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	check := func(what string, gen uint64, present bool, reason state.TeardownReason, flavors int) {
		t.Helper()
		w := want(t, s, "gpu")
		if w == nil || w.Generation != gen || w.Present != present || w.Teardown != reason || len(w.Spec.Flavors) != flavors {
			t.Fatalf("%s: record %+v", what, w)
		}
		if w.Pool != "gpu" || w.Account != "k8s" || w.Tenant != "root" || w.AccountCopy == nil || w.AccountCopy.Provider != "fake" ||
			!strings.Contains(string(w.AccountCopy.Config), "secret://fake-token") {
			t.Fatalf("%s: identity or account copy %+v %+v", what, w, w.AccountCopy)
		}
	}
	step(k8sDoc("k8s", map[string]string{"gpu": oneFlavor, "cpu": ""}), false)
	check("create", 1, true, "", 1)
	if w := want(t, s, "cpu"); w != nil {
		t.Fatalf("a pool without a substrate was recorded: %+v", w)
	}
	step(k8sDoc("k8s", map[string]string{"gpu": twoNodes, "cpu": ""}), false)
	check("resize", 2, true, "", 1)
	if n := want(t, s, "gpu").Spec.Flavors[0].Nodes; n == nil || *n != 2 {
		t.Fatalf("resize not recorded: %v", n)
	}
	step(k8sDoc("k8s", map[string]string{"gpu": twoFlavors, "cpu": ""}), false)
	check("add a flavor", 3, true, "", 2)
	// A change of the pool that leaves its substrate alone keeps the record.
	res := step(strings.Replace(k8sDoc("k8s", map[string]string{"gpu": twoFlavors, "cpu": ""}), `"gpuModel":"H100","policy":{"substrate"`, `"gpuModel":"A100","policy":{"substrate"`, 1), false)
	if res.Applied != 1 {
		t.Fatalf("the unrelated change made %d calls", res.Applied)
	}
	check("unrelated change", 3, true, "", 2)
	// Without prune a pool whose policy lacks substrate keeps it, even in
	// an apply that updates the pool (its gpuModel goes back to H100).
	without := k8sDoc("k8s", map[string]string{"gpu": "", "cpu": ""})
	res, err := apply.Apply(t.Context(), s, doc(t, without), apply.Options{Now: fixed})
	if err != nil || res.Applied != 1 {
		t.Fatalf("applied %d calls: %v", res.Applied, err)
	}
	check("removed without prune", 3, true, "", 2)
	// With prune it is torn down.
	step(without, true)
	check("removed with prune", 4, false, state.TeardownRemoved, 2)
	step(k8sDoc("k8s", map[string]string{"gpu": oneFlavor, "cpu": ""}), false)
	check("added again", 5, true, "", 1)
	// The pool left out with prune is archived; its account goes in the
	// same apply, and the record keeps the copy a teardown needs.
	step(`{"version":1,"sites":[{"name":"k8s","kind":"shared","region":"fake-east"}],"pools":[{"name":"cpu","site":"k8s","class":"metal-host","gpuModel":"H100","policy":{}}]}`, true)
	check("archived", 6, false, state.TeardownArchived, 1)
	snap, _ := s.Snapshot()
	if _, ok := snap.ByName(inventory.ProviderAccount, "k8s"); ok {
		t.Fatal("the account was not pruned: the copy is not tested")
	}
}

// TestRecordingIsInTheApplyTransaction: a refused apply records nothing,
// and a recording that fails rolls the whole apply back.
func TestRecordingIsInTheApplyTransaction(t *testing.T) {
	s := statetest.Open(t)
	blocked := strings.Replace(k8sDoc("k8s", map[string]string{"gpu": oneFlavor}), `"account":"k8s"`, `"account":"nope"`, 1)
	if _, err := apply.Apply(t.Context(), s, doc(t, blocked), apply.Options{}); err == nil {
		t.Fatal("a substrate naming an unknown account was applied")
	}
	if w := want(t, s, "gpu"); w != nil {
		t.Fatalf("a refused apply recorded %+v", w)
	}
	// A write in the same transaction failing after the recording undoes it.
	_, err := apply.Apply(t.Context(), s, doc(t, k8sDoc("k8s", map[string]string{"gpu": oneFlavor})), apply.Options{
		InTx: func(*state.Tx, *plan.Plan) error { return fmt.Errorf("boom") }})
	if err == nil || want(t, s, "gpu") != nil {
		t.Fatalf("rolled back apply: %v, record %+v", err, want(t, s, "gpu"))
	}
}

// TestKillDuringSubstrateApply kills a child in the apply's transaction after
// the recording: the state file holds neither the pool nor its record.
func TestKillDuringSubstrateApply(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fleet.db")
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "FLEET_APPLY_SUBSTRATE_CHILD="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	killed := false
	for sc.Scan() {
		if strings.Contains(sc.Text(), "RECORDED") {
			_ = cmd.Process.Signal(syscall.SIGKILL)
			killed = true
			break
		}
	}
	_ = cmd.Wait()
	if !killed {
		t.Fatal("the child never reached the recording")
	}
	s := statetest.OpenAt(t, path)
	if w := want(t, s, "gpu"); w != nil {
		t.Fatalf("a killed apply left a record: %+v", w)
	}
	if snap, _ := s.Snapshot(); snap.Len() != 0 {
		t.Fatalf("a killed apply left %d objects", snap.Len())
	}
}

// The child of TestKillDuringSubstrateApply runs from init, before the tests.
func init() {
	path := os.Getenv("FLEET_APPLY_SUBSTRATE_CHILD")
	if path == "" {
		return
	}
	s, err := state.Open(path, state.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	d, errs := fleet.Validate("child", []byte(k8sDoc("k8s", map[string]string{"gpu": oneFlavor})))
	if errs != nil {
		fmt.Fprintln(os.Stderr, errs.Text())
		os.Exit(1)
	}
	_, err = apply.Apply(context.Background(), s, d, apply.Options{InTx: func(tx *state.Tx, _ *plan.Plan) error {
		if w, _ := tx.SubstrateWant(inventory.ID("root", inventory.Pool, "gpu")); w != nil {
			fmt.Println("RECORDED")
			time.Sleep(time.Minute) // killed here, the record written in the open transaction
		}
		return nil
	}})
	fmt.Fprintln(os.Stderr, "child: apply returned", err)
	os.Exit(1)
}

// TestTeardownsNeedTwoSteps: a protected substrate, as recorded, and more
// teardowns than apply.maxTeardowns allows are PLAN_BLOCKED and write
// nothing; protect false applied on its own lets the next apply tear down.
func TestTeardownsNeedTwoSteps(t *testing.T) {
	s := statetest.Open(t)
	both := k8sDoc("k8s", map[string]string{"a": oneFlavor, "b": oneFlavor})
	protectA := strings.Replace(both, `"flavors":`, `"protect":true,"flavors":`, 1)
	onlyB := k8sDoc("k8s", map[string]string{"b": oneFlavor})
	onlyB = strings.Replace(onlyB, `"pools":[`, `"pools":[{"name":"other","site":"k8s","class":"metal-host","policy":{}},`, 1)
	none := k8sDoc("k8s", map[string]string{"other": ""})
	step := func(text string, opts apply.Options) error {
		t.Helper()
		opts.Prune, opts.Now, opts.Commit = true, fixed, "c"
		_, err := apply.Apply(t.Context(), s, doc(t, text), opts)
		return err
	}
	// what is everything a refused apply must leave as it was.
	type what struct {
		gen     uint64
		audit   int
		applied string
		a, b    state.SubstrateWant
	}
	now := func() what {
		t.Helper()
		var w what
		if err := s.View(func(tx *state.Tx) error { w.gen = tx.Generation(); return nil }); err != nil {
			t.Fatal(err)
		}
		w.audit, w.applied = len(audit(t, s)), applied(t, s).PlanHash
		w.a, w.b = *want(t, s, "a"), *want(t, s, "b")
		return w
	}
	blocked := func(text string, opts apply.Options, says string) {
		t.Helper()
		before := now()
		err := step(text, opts)
		if refusal.CodeOf(err) != refusal.PlanBlocked || !strings.Contains(err.Error(), says) {
			t.Fatalf("got %v, want PLAN_BLOCKED saying %q", err, says)
		}
		if after := now(); !reflect.DeepEqual(after, before) {
			t.Fatalf("a blocked apply wrote:\nbefore %+v\nafter  %+v", before, after)
		}
	}

	if err := step(both, apply.Options{}); err != nil {
		t.Fatal(err)
	}
	gen := want(t, s, "a").Generation
	if err := step(protectA, apply.Options{}); err != nil {
		t.Fatal(err)
	}
	if a, b := want(t, s, "a"), want(t, s, "b"); !a.Spec.Protect || b.Spec.Protect || !a.Present {
		t.Fatalf("protect recorded: a %v, b %v", a.Spec.Protect, b.Spec.Protect)
	}
	// protect asks nothing of the provider: no new generation for it.
	if a := want(t, s, "a"); a.Generation != gen {
		t.Errorf("protect true moved the generation from %d to %d", gen, a.Generation)
	}
	blocked(onlyB, apply.Options{}, `"protect": false first`)
	blocked(none, apply.Options{MaxTeardowns: ptr(2)}, `"protect": false first`)

	if err := step(both, apply.Options{}); err != nil {
		t.Fatalf("protect false is an ordinary change: %v", err)
	}
	if a := want(t, s, "a"); a.Spec.Protect || !a.Present || a.Generation != gen {
		t.Fatalf("after protect false: protect %v, present %v, generation %d (was %d)", a.Spec.Protect, a.Present, a.Generation, gen)
	}
	blocked(none, apply.Options{}, "the plan tears down 2 substrates and apply.maxTeardowns allows 1")
	blocked(onlyB, apply.Options{MaxTeardowns: ptr(0)}, "apply.maxTeardowns is 0")

	if err := step(none, apply.Options{MaxTeardowns: ptr(2)}); err != nil {
		t.Fatal(err)
	}
	for _, pool := range []string{"a", "b"} {
		if w := want(t, s, pool); w.Present || w.Teardown != state.TeardownArchived {
			t.Errorf("%s: present %v, teardown %q; want archived", pool, w.Present, w.Teardown)
		}
	}
}

func ptr(n int) *int { return &n }

// TestMaintenanceIsRecordedWithoutANewGeneration: the maintenance windows
// ask nothing of the provider: written, changed and taken out, they are
// recorded as the document says, and the substrate's generation (what its
// operations are keyed by) stays; a change beside them that asks something
// of the provider moves it.
func TestMaintenanceIsRecordedWithoutANewGeneration(t *testing.T) {
	s := statetest.Open(t)
	plain := k8sDoc("k8s", map[string]string{"a": oneFlavor})
	with := func(window string) string {
		return strings.Replace(plain, `"flavors":`, `"maintenance":{"windows":[`+window+`]},"flavors":`, 1)
	}
	step := func(text string) {
		t.Helper()
		if _, err := apply.Apply(t.Context(), s, doc(t, text), apply.Options{Now: fixed, Commit: "c"}); err != nil {
			t.Fatal(err)
		}
	}
	step(plain)
	gen := want(t, s, "a").Generation
	for _, c := range []struct{ name, text, start string }{
		{"written", with(`{"days":["sat"],"start":"02:00","duration":"4h"}`), "02:00"},
		{"changed", with(`{"days":["sun"],"start":"03:30","duration":"2h","timeZone":"Europe/Berlin"}`), "03:30"},
		{"taken out", plain, ""},
	} {
		step(c.text)
		a := want(t, s, "a")
		got := ""
		if a.Spec.Maintenance != nil {
			got = a.Spec.Maintenance.Windows[0].Start
		}
		if got != c.start || a.Generation != gen || !a.Present {
			t.Fatalf("%s: recorded start %q (want %q), generation %d (was %d), present %v", c.name, got, c.start, a.Generation, gen, a.Present)
		}
	}
	step(strings.Replace(with(`{"days":["sat"],"start":"02:00","duration":"4h"}`), `"nodes":1`, `"nodes":2`, 1))
	if a := want(t, s, "a"); a.Generation == gen || a.Spec.Maintenance == nil {
		t.Fatalf("a size change beside the windows: generation %d (was %d), windows %v", a.Generation, gen, a.Spec.Maintenance)
	}
}

// TestDrainIsRecordedWithoutANewGeneration: the drain settings, of the
// substrate and of a flavor, ask nothing of the provider: they are recorded
// as the document says (then in its normal form) without a new generation.
func TestDrainIsRecordedWithoutANewGeneration(t *testing.T) {
	s := statetest.Open(t)
	plain := k8sDoc("k8s", map[string]string{"a": oneFlavor})
	step := func(text string) {
		t.Helper()
		if _, err := apply.Apply(t.Context(), s, doc(t, text), apply.Options{Now: fixed, Commit: "c"}); err != nil {
			t.Fatal(err)
		}
	}
	step(plain)
	gen := want(t, s, "a").Generation
	for _, c := range []struct{ name, text, sub, flavor string }{
		{"substrate's", strings.Replace(plain, `"flavors":`, `"drain":{"timeout":"1h"},"flavors":`, 1), "1h wait", ""},
		{"flavor's", strings.Replace(plain, `"nodes":1`, `"nodes":1,"drain":{"timeout":"30m","then":"force"}`, 1), "", "30m force"},
		{"taken out", plain, "", ""},
	} {
		step(c.text)
		a := want(t, s, "a")
		say := func(d *fleet.Drain) string {
			if d == nil {
				return ""
			}
			return d.Timeout + " " + d.Then
		}
		if say(a.Spec.Drain) != c.sub || say(a.Spec.Flavors[0].Drain) != c.flavor || a.Generation != gen {
			t.Fatalf("%s: recorded %q and %q (want %q and %q), generation %d (was %d)", c.name,
				say(a.Spec.Drain), say(a.Spec.Flavors[0].Drain), c.sub, c.flavor, a.Generation, gen)
		}
	}
}

// TestDisruptionBudgetIsRecorded: the pool's disruptionBudget, which a
// drain keeps within, is recorded beside the substrate and follows the
// document (validation refuses anything but a share from 0 to 1).
func TestDisruptionBudgetIsRecorded(t *testing.T) {
	s := statetest.Open(t)
	plain := k8sDoc("k8s", map[string]string{"a": oneFlavor})
	for _, c := range []struct {
		policy string
		want   string
	}{{`"disruptionBudget":0.25,`, "0.25"}, {`"disruptionBudget":1,`, "1"}, {`"disruptionBudget":0,`, "0"}, {``, "none"}} {
		text := strings.Replace(plain, `"substrate":`, c.policy+`"substrate":`, 1)
		if !strings.Contains(text, c.policy) {
			t.Fatalf("the test document has no policy to add %s to", c.policy)
		}
		if _, err := apply.Apply(t.Context(), s, doc(t, text), apply.Options{Now: fixed, Commit: "c"}); err != nil {
			t.Fatal(err)
		}
		got := "none"
		if b := want(t, s, "a").DisruptionBudget; b != nil {
			got = strconv.FormatFloat(*b, 'g', -1, 64)
		}
		if got != c.want {
			t.Fatalf("policy %s: recorded budget %s, want %s", c.policy, got, c.want)
		}
	}
}

// TestEditKeepsTheSubstrateRules: a break-glass edit cannot do to a
// substrate what a reviewed plan guards: change a created cluster's
// version, take protect out of a recorded protected substrate, take the
// substrate out of a pool's policy, change its account or cluster, or delete
// a pool that has one. Each
// refusal is INVALID_STATE with what to do instead, changes nothing in the
// fleet and is audited; the edits that stay allowed still go through.
func TestEditKeepsTheSubstrateRules(t *testing.T) {
	s := statetest.Open(t)
	text := k8sDoc("k8s", map[string]string{"a": oneFlavor, "b": oneFlavor, "plain": ""})
	text = strings.Replace(text, `"create":{"location":"fake-east"}},"flavors":`, `"create":{"location":"fake-east","version":"1.33"}},"protect":true,"flavors":`, 1)
	if _, err := apply.Apply(t.Context(), s, doc(t, text), apply.Options{Now: fixed, Commit: "c"}); err != nil {
		t.Fatal(err)
	}
	if a := want(t, s, "a"); !a.Spec.Protect || a.Spec.Cluster.Create.Version != "1.33" {
		t.Fatalf("the fixture: a is recorded %+v", a.Spec)
	}
	policy := func(protect, version string) map[string]any {
		t.Helper()
		cr := `{"location":"fake-east"}`
		if version != "" {
			cr = fmt.Sprintf(`{"location":"fake-east","version":%q}`, version)
		}
		var m map[string]any
		js := fmt.Sprintf(`{"substrate":{"kind":"kubernetes","account":"k8s","cluster":{"create":%s},%s"flavors":%s}}`, cr, protect, oneFlavor)
		if err := json.Unmarshal([]byte(js), &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	const on = `"protect":true,`
	// moved is a policy with its substrate's account, or its created
	// cluster's location, set to v.
	moved := func(p map[string]any, field, v string) map[string]any {
		sub := p["substrate"].(map[string]any)
		if field == "account" {
			sub["account"] = v
		} else {
			sub["cluster"].(map[string]any)["create"].(map[string]any)[field] = v
		}
		return p
	}
	fleetNow := func() string {
		t.Helper()
		snap, err := s.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		d, err := plan.Export(snap)
		if err != nil {
			t.Fatalf("the fleet no longer exports: %v", err)
		}
		out, _ := json.Marshal(d)
		return string(out)
	}
	for _, c := range []struct {
		name string
		edit apply.Edit
		says string
	}{
		{"a version the account may not offer", apply.Edit{Kind: inventory.Pool, Name: "a", Set: map[string]any{"policy": policy(on, "1.99")}}, "an upgrade goes through a reviewed plan"},
		{"a version taken out", apply.Edit{Kind: inventory.Pool, Name: "a", Set: map[string]any{"policy": policy(on, "")}}, "an upgrade goes through a reviewed plan"},
		{"a version where none was pinned", apply.Edit{Kind: inventory.Pool, Name: "b", Set: map[string]any{"policy": policy("", "1.34")}}, "an upgrade goes through a reviewed plan"},
		{"protect taken out", apply.Edit{Kind: inventory.Pool, Name: "a", Set: map[string]any{"policy": policy("", "1.33")}}, `apply "protect": false`},
		{"protect false", apply.Edit{Kind: inventory.Pool, Name: "a", Set: map[string]any{"policy": policy(`"protect":false,`, "1.33")}}, `apply "protect": false`},
		{"another account", apply.Edit{Kind: inventory.Pool, Name: "b", Set: map[string]any{"policy": moved(policy("", ""), "account", "other")}}, "a substrate's account and cluster cannot change"},
		{"another location", apply.Edit{Kind: inventory.Pool, Name: "b", Set: map[string]any{"policy": moved(policy("", ""), "location", "fake-west")}}, "a substrate's account and cluster cannot change"},
		{"the substrate taken out", apply.Edit{Kind: inventory.Pool, Name: "b", Set: map[string]any{"policy": map[string]any{}}}, "tears a substrate down only through the document"},
		{"the policy removed", apply.Edit{Kind: inventory.Pool, Name: "b", Set: map[string]any{"policy": nil}}, "tears a substrate down only through the document"},
		{"a protected pool deleted", apply.Edit{Kind: inventory.Pool, Name: "a", Delete: true}, "tears a substrate down only through the document"},
		{"a pool with a substrate deleted", apply.Edit{Kind: inventory.Pool, Name: "b", Delete: true}, "tears a substrate down only through the document"},
		{"a size changed", apply.Edit{Kind: inventory.Pool, Name: "b", Set: map[string]any{"policy": func() map[string]any {
			p := policy("", "")
			p["substrate"].(map[string]any)["flavors"].([]any)[0].(map[string]any)["nodes"] = float64(2)
			return p
		}()}}, "an edit does not reach the reconciler"},
		{"the disruption budget changed", apply.Edit{Kind: inventory.Pool, Name: "b", Set: map[string]any{"policy": func() map[string]any {
			p := policy("", "")
			p["disruptionBudget"] = 0.5
			return p
		}()}}, "an edit does not reach the reconciler"},
		{"a substrate added", apply.Edit{Kind: inventory.Pool, Name: "plain", Set: map[string]any{"policy": policy("", "")}}, "a substrate is made only through the document"},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.edit.Who, c.edit.Now = "ops@box", fixed
			before, rows := fleetNow(), len(audit(t, s))
			wantA, wantB := *want(t, s, "a"), *want(t, s, "b")
			err := apply.ApplyEdit(s, c.edit)
			if refusal.CodeOf(err) != refusal.InvalidState || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("got %v, want INVALID_STATE saying %q", err, c.says)
			}
			if fleetNow() != before || !reflect.DeepEqual(*want(t, s, "a"), wantA) || !reflect.DeepEqual(*want(t, s, "b"), wantB) {
				t.Fatal("a refused edit changed the fleet")
			}
			got := audit(t, s)
			if len(got) != rows+1 {
				t.Fatalf("%d audit rows after the refusal, want %d", len(got), rows+1)
			}
			if last := got[len(got)-1]; last.Action != "edit-refused" || last.Who != "ops@box" || !strings.Contains(last.Method, "pool.") || !strings.Contains(string(last.Params), c.edit.Name) {
				t.Fatalf("the refusal's audit row: %+v", last)
			}
		})
	}
	// What stays break glass: a pool's other fields, a size, protect put
	// on, and a pool without a substrate deleted.
	for _, e := range []apply.Edit{
		{Kind: inventory.Pool, Name: "a", Set: map[string]any{"gpuModel": "L4"}},
		{Kind: inventory.Pool, Name: "b", Set: map[string]any{"policy": policy(on, "")}},
		{Kind: inventory.Pool, Name: "plain", Delete: true},
	} {
		e.Who, e.Now = "ops@box", fixed
		if err := apply.ApplyEdit(s, e); err != nil {
			t.Fatalf("%s %s %+v: %v", e.Kind, e.Name, e.Set, err)
		}
		if last := audit(t, s); last[len(last)-1].Action != "edit" {
			t.Fatalf("%s %s: audited as %+v", e.Kind, e.Name, last[len(last)-1])
		}
	}
}

// TestEditLeavesAFleetTheDocumentTakesBack: an edit the document could not
// undo by being applied again is refused, audited, and changes nothing: a
// field a plan never lets change (a provider account's provider, which a
// substrate's plan then blocks on for good), and the delete of an object
// another names (the substrate's account; the pools' site), which would
// leave an export naming nothing.
func TestEditLeavesAFleetTheDocumentTakesBack(t *testing.T) {
	s := statetest.Open(t)
	if _, err := apply.Apply(t.Context(), s, doc(t, k8sDoc("k8s", map[string]string{"a": oneFlavor})), apply.Options{Now: fixed, Commit: "c"}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		edit apply.Edit
		says string
	}{
		{apply.Edit{Kind: inventory.ProviderAccount, Name: "k8s", Set: map[string]any{"provider": "gcp"}}, "provider never changes once created"},
		{apply.Edit{Kind: inventory.ProviderAccount, Name: "k8s", Delete: true}, "is named by pool a's substrate"},
		{apply.Edit{Kind: inventory.Site, Name: "k8s", Delete: true}, "is named by pool a"},
		{apply.Edit{Kind: inventory.Site, Name: "k8s", Set: map[string]any{"region": "fake-west"}}, "region never changes once created"},
	} {
		c.edit.Who, c.edit.Now = "ops@box", fixed
		snap, _ := s.Snapshot()
		before, _ := plan.Export(snap)
		rows := len(audit(t, s))
		err := apply.ApplyEdit(s, c.edit)
		if refusal.CodeOf(err) != refusal.InvalidState || !strings.Contains(err.Error(), c.says) {
			t.Fatalf("%s %s %+v delete=%v: got %v, want INVALID_STATE saying %q", c.edit.Kind, c.edit.Name, c.edit.Set, c.edit.Delete, err, c.says)
		}
		snap, _ = s.Snapshot()
		after, err := plan.Export(snap)
		if err != nil || !reflect.DeepEqual(before, after) {
			t.Fatalf("a refused edit changed the fleet (%v)", err)
		}
		if got := audit(t, s); len(got) != rows+1 || got[len(got)-1].Action != "edit-refused" {
			t.Fatalf("the refusal is not audited: %+v", got[len(got)-1])
		}
	}
	// The account's config stays break glass (a plan updates it too).
	e := apply.Edit{Kind: inventory.ProviderAccount, Name: "k8s", Set: map[string]any{"config": map[string]any{"token": "secret://rotated"}}, Who: "ops@box", Now: fixed}
	if err := apply.ApplyEdit(s, e); err != nil {
		t.Fatal(err)
	}
}
