package plan

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/testutil/golden"
)

// windowed is baseDoc's kube substrate with two flavors (n1 of three
// nodes; a100 of one, replaced blue/green), a created cluster at version,
// and, when windows is true, two maintenance windows.
func windowed(t testing.TB, version string, windows bool) jdoc {
	d := withVersion(t, version)
	set(t, d, pSub+"/flavors/0/nodes", 3)
	add(t, d, pSub+"/flavors", obj(`{"name":"a100","machineType":"m2","nodes":1,"replace":"blueGreen"}`))
	if windows {
		set(t, d, pSub+"/maintenance", obj(`{"windows":[{"days":["sat","sun"],"start":"02:00","duration":"4h","timeZone":"Europe/Berlin"},{"days":["wed"],"start":"22:30","duration":"90m"}]}`))
	}
	return d
}

// The windows as the plan writes them: as the document wrote them, the
// zone UTC when left out.
var windowsWritten = []string{"sat, sun 02:00 for 4h (Europe/Berlin)", "wed 22:30 for 90m (UTC)"}

// TestPlanSaysWhenADisruptiveStepMayStart: on a substrate with maintenance
// windows, each change with a step that takes running Nodes away (an
// upgrade hop, a flavor's node pool removed, a shrink, a blue/green
// replacement) says it starts in a window, naming the windows as written
// (never an instant, so the plan stays free of the clock) and, on the
// pool's change, which steps wait. An upgrade hop waits for its control
// plane's part only: its node pools follow at once. Without windows, a step that gives
// nothing back (a grow), one that cannot start (a shape change without
// blue/green, which the substrate reports as an error) and a blocked change
// say nothing.
func TestPlanSaysWhenADisruptiveStepMayStart(t *testing.T) {
	cases := []struct {
		name    string
		edit    func(d jdoc)
		windows bool
		running string
		applied string   // the version applied ("1.33" when empty)
		waits   []string // the kube pool's steps that wait (nil: no window)
		hops    int      // hops that carry the window (control plane hops)
		golden  bool
	}{
		{name: "window-steps", windows: true, golden: true, edit: func(d jdoc) {
			set(t, d, pSub+"/flavors/0/nodes", 1)
			set(t, d, pSub+"/flavors/1/machineType", "m3")
			add(t, d, pSub+"/flavors", obj(`{"name":"l4","machineType":"m4","nodes":2}`))
		}, waits: []string{"the shrink of flavor n1 (3 nodes -> 1 node)", "the blue/green replacement of flavor a100 (its old node pool drained, then deleted)"}},
		{name: "a flavor removed", windows: true, edit: func(d jdoc) { del(t, d, pSub+"/flavors/1") },
			waits: []string{"the drain and delete of flavor a100's node pool"}},
		{name: "autoscaling below the nodes", windows: true, edit: func(d jdoc) {
			del(t, d, pSub+"/flavors/0/nodes")
			set(t, d, pSub+"/flavors/0/autoscaling", obj(`{"minNodes":1,"maxNodes":2}`))
		}, waits: []string{"the shrink of flavor n1 (3 nodes -> 1 to 2 nodes, autoscaled)"}},
		{name: "autoscaling that keeps the nodes", windows: true, edit: func(d jdoc) {
			del(t, d, pSub+"/flavors/0/nodes")
			set(t, d, pSub+"/flavors/0/autoscaling", obj(`{"minNodes":1,"maxNodes":5}`))
		}},
		{name: "a grow", windows: true, edit: func(d jdoc) { set(t, d, pSub+"/flavors/0/nodes", 5) }},
		{name: "a shape change without blue/green", windows: true, edit: func(d jdoc) { set(t, d, pSub+"/flavors/0/machineType", "m9") }},
		{name: "the windows alone", windows: true, edit: func(d jdoc) {}},
		{name: "no windows", edit: func(d jdoc) {
			set(t, d, pSub+"/flavors/0/nodes", 1)
			del(t, d, pSub+"/flavors/1")
		}},
		{name: "window-hops", windows: true, golden: true, applied: "1.32", running: "1.32.2-fake.1", edit: func(d jdoc) {
			set(t, d, pCreate+"/version", "1.34")
		}, hops: 2},
		{name: "hops without windows", running: "1.33.2-fake.1", edit: func(d jdoc) {
			set(t, d, pCreate+"/version", "1.34")
		}},
		{name: "a blocked change", windows: true, edit: func(d jdoc) {
			set(t, d, pSub+"/flavors/0/nodes", 1)
			set(t, d, pCreate+"/location", "fra2")
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// The fleet was applied with the same windows, so only the
			// edit differs.
			applied := tc.applied
			if applied == "" {
				applied = "1.33"
			}
			objs := fleetOf(t, windowed(t, applied, tc.windows))
			d := windowed(t, applied, tc.windows)
			tc.edit(d)
			p := Make(docOf(t, d), running(objs, tc.running), Options{Prune: true})
			var kube *Change
			hops := 0
			for i, c := range p.Changes {
				if c.Kind == inventory.Pool && c.Name == "kube" {
					kube = &p.Changes[i]
				}
				if c.Action != Upgrade {
					continue
				}
				// A hop starts with its control plane; its node pools
				// follow at once, whatever the windows say.
				if c.Hop.Part == HopNodePool && c.Window != nil {
					t.Errorf("node pool hop %s carries a window", c.Name)
				}
				if c.Window != nil {
					hops++
					if !slices.Equal(c.Window.Windows, windowsWritten) || c.Window.Waits != nil {
						t.Errorf("hop %s: window %+v", c.Name, c.Window)
					}
				}
			}
			if kube == nil {
				t.Fatal("no kube change")
			}
			if hops != tc.hops {
				t.Errorf("%d hops carry a window, want %d\n%s", hops, tc.hops, text(p, false))
			}
			switch {
			case tc.waits == nil && kube.Window != nil:
				t.Errorf("kube carries a window %+v\n%s", kube.Window, text(p, false))
			case tc.waits != nil && kube.Window == nil:
				t.Errorf("kube carries no window\n%s", text(p, false))
			case tc.waits != nil:
				if !slices.Equal(kube.Window.Waits, tc.waits) || !slices.Equal(kube.Window.Windows, windowsWritten) {
					t.Errorf("window\n got %+v\nwant waits %q", kube.Window, tc.waits)
				}
				for _, w := range tc.waits {
					if want := "  note: " + w + " starts in a maintenance window: " + strings.Join(windowsWritten, "; "); !slices.Contains(p.TextLines(false), want) {
						t.Errorf("no line %q in\n%s", want, text(p, false))
					}
				}
			}
			if tc.hops > 0 {
				if want := "  note: starts in a maintenance window: " + strings.Join(windowsWritten, "; "); !strings.Contains(text(p, false), want) {
					t.Errorf("no line %q in\n%s", want, text(p, false))
				}
			}
			// The window rides in JSON: a plan read back (as the command
			// line reads the agent's) renders the same lines.
			var js bytes.Buffer
			if err := p.WriteJSON(&js); err != nil {
				t.Fatal(err)
			}
			var back Plan
			if err := json.Unmarshal(js.Bytes(), &back); err != nil {
				t.Fatal(err)
			}
			if got, want := windowLines(&back), windowLines(p); !slices.Equal(got, want) {
				t.Errorf("read back from JSON, the window lines are\n%q\nwant\n%q", got, want)
			}
			if !tc.golden {
				return
			}
			var txt bytes.Buffer
			if err := p.WriteText(&txt, true); err != nil {
				t.Fatal(err)
			}
			golden.Check(t, filepath.Join(goldenDir, tc.name+".txt"), txt.Bytes())
			golden.Check(t, filepath.Join(goldenDir, tc.name+".json"), js.Bytes())
			golden.Check(t, filepath.Join(goldenDir, tc.name+".md"), []byte(p.Markdown(mdOptions)))
			checkJSON(t, p, js.Bytes())
		})
	}
}

func windowLines(p *Plan) []string {
	var out []string
	for _, l := range p.TextLines(false) {
		if strings.Contains(l, "maintenance window") {
			out = append(out, l)
		}
	}
	return out
}

// TestWindowsKeepThePlanHash: the windows a change waits for are what the
// document says, so the same document against the same fleet has the
// same planHash and the same bytes whatever the windows say and whenever
// it is planned; a window moved changes the pool's call (its policy), and
// nothing else.
func TestWindowsKeepThePlanHash(t *testing.T) {
	objs := fleetOf(t, windowed(t, "1.33", true))
	shrink := func(start string) *Plan {
		d := windowed(t, "1.33", true)
		set(t, d, pSub+"/flavors/0/nodes", 1)
		set(t, d, pSub+"/maintenance/windows/1/start", start)
		return Make(docOf(t, d), running(objs, ""), Options{Prune: true})
	}
	a, b := shrink("22:30"), shrink("22:30")
	if a.PlanHash != b.PlanHash || text(a, true) != text(b, true) {
		t.Fatalf("the same document planned twice differs:\n%s\n%s", text(a, true), text(b, true))
	}
	c := shrink("23:00")
	if c.PlanHash == a.PlanHash {
		t.Error("moved windows kept the hash: the pool's call must carry them")
	}
	if !strings.Contains(text(c, false), "wed 23:00 for 90m (UTC)") {
		t.Errorf("the moved window is not shown:\n%s", text(c, false))
	}
}

// BenchmarkWindowNotes: what reading the disruptive steps adds to a plan of
// a substrate with 32 flavors, every one shrunk: with windows (the notes
// made) against the same plan without.
func BenchmarkWindowNotes(b *testing.B) {
	for _, windows := range []bool{false, true} {
		name := "without windows"
		if windows {
			name = "with windows"
		}
		b.Run(name, func(b *testing.B) {
			make := func(nodes int) jdoc {
				d := windowed(b, "1.33", windows)
				del(b, d, pSub+"/flavors/1")
				del(b, d, pSub+"/flavors/0")
				for i := range 32 {
					add(b, d, pSub+"/flavors", obj(fmt.Sprintf(`{"name":"f%d","machineType":"m1","nodes":%d}`, i, nodes)))
				}
				return d
			}
			objs := fleetOf(b, make(3))
			doc := docOf(b, make(1))
			snap := running(objs, "")
			if p := Make(doc, snap, Options{Prune: true}); windows != (len(windowLines(p)) == 32) {
				b.Fatalf("%d window lines", len(windowLines(p)))
			}
			for b.Loop() {
				Make(doc, snap, Options{Prune: true})
			}
		})
	}
}

// TestWindowChangesSayWhatTheyRelease: a change of the windows alone, or
// blue/green asked of a flavor, can start what waits already (a shrink, a
// removed flavor's drain, a shape change left in error): the plan says so,
// since it cannot see which steps wait (status does). Adding windows where
// there were none releases nothing and says nothing.
func TestWindowChangesSayWhatTheyRelease(t *testing.T) {
	noteLines := func(p *Plan) []string {
		var out []string
		for _, l := range p.TextLines(false) {
			if strings.Contains(l, "waits for") || strings.Contains(l, "maintenance window") || strings.Contains(l, "starts at once") {
				out = append(out, l)
			}
		}
		return out
	}
	for _, c := range []struct {
		name    string
		before  bool // the applied document has windows
		edit    func(d jdoc)
		want    string // in a note line ("" : no such line)
		without bool   // the change has no window note at all
	}{
		{name: "windows moved", before: true, edit: func(d jdoc) { set(t, d, pSub+"/maintenance/windows/1/start", "03:00") },
			want: "the maintenance windows change: a step that waits for one (status names it) starts in the new windows: sat, sun 02:00 for 4h (Europe/Berlin); wed 03:00 for 90m (UTC)"},
		{name: "windows taken out", before: true, edit: func(d jdoc) { del(t, d, pSub+"/maintenance") },
			want: "the maintenance windows are taken out: a step that waits for one (status names it) starts at once"},
		{name: "windows taken out with a shrink", before: true, edit: func(d jdoc) {
			del(t, d, pSub+"/maintenance")
			set(t, d, pSub+"/flavors/0/nodes", 1)
		}, want: "the shrink of flavor n1 (3 nodes -> 1 node) starts at once (no maintenance window any more)"},
		{name: "windows added", before: false, edit: func(d jdoc) {
			set(t, d, pSub+"/maintenance", obj(`{"windows":[{"days":["mon"],"start":"03:00","duration":"1h"}]}`))
		}, without: true},
		{name: "blue/green asked", before: true, edit: func(d jdoc) { set(t, d, pSub+"/flavors/0/replace", "blueGreen") },
			want: "flavor n1 asks for blue/green: if its node pool's shape differs from the document (a shape change left in error), the replacement starts in a maintenance window"},
	} {
		t.Run(c.name, func(t *testing.T) {
			objs := fleetOf(t, windowed(t, "1.33", c.before))
			d := windowed(t, "1.33", c.before)
			c.edit(d)
			p := Make(docOf(t, d), running(objs, ""), Options{Prune: true})
			lines := strings.Join(noteLines(p), "\n")
			if c.without {
				if lines != "" {
					t.Fatalf("notes %q, want none", lines)
				}
				return
			}
			if !strings.Contains(lines, c.want) {
				t.Fatalf("notes:\n%s\nwant one holding %q\n%s", lines, c.want, text(p, false))
			}
		})
	}
}
