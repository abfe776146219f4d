package plan

import (
	"bytes"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/testutil/golden"
)

const pCreate = pSub + "/cluster/create"

// running is a snapshot of objs whose kube cluster last ran version ("" none).
func running(objs []inventory.Object, version string) *inventory.Snapshot {
	snap := inventory.NewSnapshot(cloneObjects(objs))
	if version == "" {
		return snap
	}
	return snap.WithClusterVersions(map[string]string{id(inventory.Pool, "kube"): version})
}

// withVersion is baseDoc with the kube cluster's version set ("" left out).
func withVersion(t testing.TB, version string) jdoc {
	d := parseJSON(t, baseDoc)
	if version != "" {
		set(t, d, pCreate+"/version", version)
	}
	return d
}

// TestClusterVersionPlans: the plan's verdicts on a created cluster's
// version, each against a fleet applied with a recorded version (or none)
// whose cluster runs a version (or was never seen).
func TestClusterVersionPlans(t *testing.T) {
	cases := []struct {
		name              string
		recorded, running string // what was applied, what runs
		document          string // the document's version
		calls             []string
		blocked, note     string // words the kube change must carry ("" none)
		golden            bool
	}{
		{name: "version-pinned", running: "1.34.2-fake.1", document: "1.34", golden: true},
		{name: "pinned, running as the provider spells it with a v", running: "v1.34.0", document: "1.34"},
		{name: "version-upgrade", running: "1.33.5-fake.1", document: "1.34", calls: []string{"pools.update kube"}, golden: true},
		{name: "upgrade over a recorded version", recorded: "1.33", running: "1.33.5", document: "1.34", calls: []string{"pools.update kube"}},
		{name: "version named, never seen running", document: "1.34", calls: []string{"pools.update kube"}},
		{name: "version-downgrade", running: "1.34.1-fake.1", document: "1.33", blocked: "version 1.33 is below 1.34, the version the cluster runs: Kubernetes clusters are never downgraded", golden: true},
		{name: "below the recorded version", recorded: "1.34", document: "1.33", blocked: "version 1.33 is below 1.34, the version last applied", note: ""},
		{name: "below the recorded version, running older", recorded: "1.34", running: "1.34.0", document: "1.10", blocked: "never downgraded"},
		{name: "minors compare as numbers", running: "1.9.3", document: "1.10", calls: []string{"pools.update kube"}},
		{name: "version-outgrown", recorded: "1.33", running: "1.34.1-fake.1", document: "1.33", note: `the cluster runs 1.34.1-fake.1, newer than version 1.33 (its provider upgraded it): write "version": "1.34" to say so`, golden: true},
		{name: "unpinned", recorded: "1.33", running: "1.33.2", document: "", calls: []string{"pools.update kube"}, note: "version 1.33 no longer pinned"},
		{name: "nothing named, nothing recorded", running: "1.33.2", document: ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			objs := fleetOf(t, withVersion(t, tc.recorded))
			p := Make(docOf(t, withVersion(t, tc.document)), running(objs, tc.running), Options{Prune: true})
			if got := methods(p); !slices.Equal(got, tc.calls) {
				t.Errorf("calls %q, want %q\n%s", got, tc.calls, text(p, true))
			}
			var kube Change
			for _, c := range p.Changes {
				if c.Kind == inventory.Pool && c.Name == "kube" {
					kube = c
				}
			}
			if tc.blocked == "" && kube.Blocked != "" || !strings.Contains(kube.Blocked, tc.blocked) {
				t.Errorf("blocked %q, want %q", kube.Blocked, tc.blocked)
			}
			if tc.blocked != "" && p.Summary.Blocked != 1 {
				t.Errorf("%d blocked, want 1", p.Summary.Blocked)
			}
			note := strings.Join(slices.DeleteFunc(slices.Clone(kube.NoteLines()), func(s string) bool { return s == NoteNotChecked }), "; ")
			if tc.note == "" && note != "" || !strings.Contains(note, tc.note) {
				t.Errorf("note %q, want %q", note, tc.note)
			}
			if len(tc.calls) == 0 && tc.blocked == "" && kube.Action != Unchanged {
				t.Errorf("kube is %s, want unchanged", kube.Action)
			}
			if !tc.golden {
				return
			}
			var js, txt bytes.Buffer
			if err := p.WriteJSON(&js); err != nil {
				t.Fatal(err)
			}
			if err := p.WriteText(&txt, true); err != nil {
				t.Fatal(err)
			}
			golden.Check(t, filepath.Join(goldenDir, tc.name+".txt"), txt.Bytes())
			golden.Check(t, filepath.Join(goldenDir, tc.name+".json"), js.Bytes())
			checkJSON(t, p, js.Bytes())
		})
	}
}

// TestExportPinsTheRunningVersion: a cluster created without a version
// runs the provider's default; export writes its minor, and the export
// planned against the same fleet changes nothing. A recorded version is
// exported as applied, and a cluster never seen running exports none.
func TestExportPinsTheRunningVersion(t *testing.T) {
	objs := fleetOf(t, withVersion(t, ""))
	snap := running(objs, "1.34.2-gke.1200")
	d, err := Export(snap)
	if err != nil {
		t.Fatal(err)
	}
	sub := d.Pools[slices.IndexFunc(d.Pools, func(p fleet.Pool) bool { return p.Name == "kube" })].Substrate()
	if got := sub.Cluster.Create.Version; got != "1.34" {
		t.Fatalf("exported version %q, want 1.34", got)
	}
	p := Make(d, snap, Options{Prune: true})
	if len(p.Calls) != 0 || p.Summary.Blocked != 0 || p.Summary.Create+p.Summary.Update+p.Summary.Delete != 0 {
		t.Errorf("the export planned against its fleet is not empty:\n%s", text(p, true))
	}
	// The same fleet unseen: nothing to pin, and nothing invented.
	d, err = Export(running(objs, ""))
	if err != nil {
		t.Fatal(err)
	}
	if v := d.Pools[slices.IndexFunc(d.Pools, func(p fleet.Pool) bool { return p.Name == "kube" })].Substrate().Cluster.Create.Version; v != "" {
		t.Errorf("a cluster never seen exported version %q", v)
	}
	// Recorded 1.33, the provider moved it to 1.34: exported as applied.
	objs = fleetOf(t, withVersion(t, "1.33"))
	d, err = Export(running(objs, "1.34.0"))
	if err != nil {
		t.Fatal(err)
	}
	if v := d.Pools[slices.IndexFunc(d.Pools, func(p fleet.Pool) bool { return p.Name == "kube" })].Substrate().Cluster.Create.Version; v != "1.33" {
		t.Errorf("a recorded version exported as %q, want 1.33", v)
	}
}

// TestVersionIsNoPartOfTheIdentity: a changed version is an update, never
// the "account and cluster cannot change" block; a changed location still
// is.
func TestVersionIsNoPartOfTheIdentity(t *testing.T) {
	objs := fleetOf(t, withVersion(t, "1.33"))
	d := withVersion(t, "1.35")
	p := Make(docOf(t, d), running(objs, "1.33.1"), Options{})
	if p.Summary.Blocked != 0 || !slices.Equal(methods(p), []string{"pools.update kube"}) {
		t.Errorf("a version change:\n%s", text(p, true))
	}
	set(t, d, pCreate+"/location", "fra2")
	p = Make(docOf(t, d), running(objs, "1.33.1"), Options{})
	if p.Summary.Blocked != 1 {
		t.Errorf("a location change with a version change not blocked:\n%s", text(p, true))
	}
}

// TestAdoptedClusterVersionShown: a change of a pool that adopts its
// cluster shows the version the cluster runs (as the live check read it,
// else as last seen); an unchanged one says nothing.
func TestAdoptedClusterVersionShown(t *testing.T) {
	d := parseJSON(t, baseDoc)
	set(t, d, pSub+"/cluster", obj(`{"adopt":"fra1/theirs"}`))
	objs := fleetOf(t, d)
	const words = "the adopted cluster runs Kubernetes 1.33.4-gke.7; fleet-agent never changes an adopted cluster's version"
	kube := func(p *Plan) Change {
		for _, c := range p.Changes {
			if c.Kind == inventory.Pool && c.Name == "kube" {
				return c
			}
		}
		t.Fatal("no kube change")
		return Change{}
	}
	if c := kube(Make(docOf(t, d), running(objs, "1.33.4-gke.7"), Options{})); c.Note != "" {
		t.Errorf("an unchanged adopted pool carries %q", c.Note)
	}
	set(t, d, pSub+"/flavors/0/nodes", 3)
	if c := kube(Make(docOf(t, d), running(objs, "1.33.4-gke.7"), Options{})); !strings.Contains(c.Note, words) {
		t.Errorf("changed adopted pool's note %q lacks %q", c.Note, words)
	}
	live := &Facts{Substrates: map[string]Verdict{"kube": {ClusterVersion: "1.33.4-gke.7"}}}
	fresh := parseJSON(t, baseDoc)
	set(t, fresh, pSub+"/cluster", obj(`{"adopt":"fra1/theirs"}`))
	if c := kube(Make(docOf(t, fresh), nil, Options{Facts: live})); c.Action != Create || !strings.Contains(c.Note, words) {
		t.Errorf("adopting pool's note %q lacks %q", c.Note, words)
	}
}
