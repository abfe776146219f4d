package plan

import (
	"fmt"
	"slices"
	"strings"

	"github.com/fleet-agent/fleet-agent/internal/fleet"
)

// Window says when a change's disruptive steps may start: inside one of its
// substrate's maintenance windows. The windows are written as the document
// writes them, never as the instant the next one opens: a plan is a pure
// function of the document and the fleet, so the same inputs render the
// same bytes tomorrow; status says the instant, from the clock.
type Window struct {
	// Windows are the substrate's windows, as written: "sat, sun 02:00 for
	// 4h (Europe/Berlin)", the zone UTC when the document leaves it out.
	Windows []string `json:"windows"`
	// Waits are the steps of a pool's change that wait for a window; an
	// upgrade hop has none, being the step itself.
	Waits []string `json:"waits,omitempty"`
}

// WindowLines are the change's window as note lines: one per step that
// waits, or one for a hop.
func (c Change) WindowLines() []string {
	if c.Window == nil {
		return nil
	}
	when := "starts in a maintenance window: " + strings.Join(c.Window.Windows, "; ")
	if len(c.Window.Waits) == 0 {
		return []string{when}
	}
	out := make([]string, len(c.Window.Waits))
	for i, w := range c.Window.Waits {
		out[i] = w + " " + when
	}
	return out
}

// windowsOf is a substrate's windows as written, nil when it has none.
func windowsOf(sub *fleet.Substrate) []string {
	if sub == nil || sub.Maintenance == nil || len(sub.Maintenance.Windows) == 0 {
		return nil
	}
	out := make([]string, len(sub.Maintenance.Windows))
	for i, w := range sub.Maintenance.Windows {
		zone := w.TimeZone
		if zone == "" {
			zone = "UTC"
		}
		out[i] = fmt.Sprintf("%s %s for %s (%s)", strings.Join(w.Days, ", "), w.Start, w.Duration, zone)
	}
	return out
}

// What of a pool's update waits for a window: the steps that take running
// Nodes away, as the substrate's node pools step decides them, read from
// the flavors as applied (the stored substrate) against the document's:
//
//	flavor as applied    in the document                       the step
//	present              absent                                its node pool drained, then deleted
//	present              shape changed, replace "blueGreen"    the old node pool drained, then deleted
//	present              shape changed, no blue/green          none starts (the substrate reports an error)
//	present              upper bound of nodes lower            a shrink
//
// A shape is the machine type, GPUs, zones, disk and spot; the upper bound
// is nodes, or autoscaling's maxNodes (1 when neither is written, the
// least every provider takes). A grow, a new flavor, labels and the
// cluster itself never wait.
var shapeFields = []string{"machineType", "gpus", "zones", "diskGiB", "spot"}

// disruptive lists the steps of a pool's update that wait for a window,
// flavors in the document's order, removed ones after; stored and wanted
// are the pool's policy as applied and as the plan compares it.
func disruptive(stored, wanted map[string]any, sub *fleet.Substrate) []string {
	old, _ := stored["substrate"].(map[string]any)
	if old == nil {
		return nil
	}
	before := map[string]map[string]any{}
	var order []string
	for _, f := range asList(old["flavors"]) {
		m, _ := f.(map[string]any)
		name, _ := m["name"].(string)
		if m == nil || name == "" {
			continue
		}
		before[name] = m
		order = append(order, name)
	}
	var steps []string
	seen := map[string]bool{}
	ws, _ := wanted["substrate"].(map[string]any)
	wantFlavors := asList(ws["flavors"])
	if len(wantFlavors) != len(sub.Flavors) {
		return nil // not the spec of this substrate: nothing to read
	}
	for i, f := range sub.Flavors {
		seen[f.Name] = true
		was, ok := before[f.Name]
		if !ok {
			continue
		}
		now, _ := wantFlavors[i].(map[string]any)
		reshaped := false
		for _, k := range shapeFields {
			if !equal(was[k], now[k]) {
				reshaped = true
			}
		}
		switch {
		case !reshaped && f.Replace == fleet.ReplaceBlueGreen && was["replace"] != fleet.ReplaceBlueGreen:
			// Asked now of a flavor whose shape may have changed before
			// (the substrate in error since): the replacement starts.
			steps = append(steps, fmt.Sprintf("flavor %s asks for blue/green: if its node pool's shape differs from the document (a shape change left in error), the replacement", f.Name))
		case reshaped && f.Replace == fleet.ReplaceBlueGreen:
			steps = append(steps, fmt.Sprintf("the blue/green replacement of flavor %s (its old node pool drained, then deleted)", f.Name))
		case reshaped:
			// The node pool cannot take it in place: nothing starts.
		case upperBound(now) < upperBound(was):
			steps = append(steps, fmt.Sprintf("the shrink of flavor %s (%s -> %s)", f.Name, sizeText(was), sizeText(now)))
		}
	}
	for _, name := range order {
		if !seen[name] {
			steps = append(steps, fmt.Sprintf("the drain and delete of flavor %s's node pool", name))
		}
	}
	return steps
}

// windowsChange is the note of a change of a substrate's windows ("" for
// none): windows moved or taken out can start what waits for one already
// (a step of an earlier change), which the plan cannot see and status
// names. Windows added where there were none release nothing.
func windowsChange(stored map[string]any, sub *fleet.Substrate) string {
	old, _ := stored["substrate"].(map[string]any)
	mt, _ := old["maintenance"].(map[string]any)
	var was []string
	for _, w := range asList(mt["windows"]) {
		m, _ := w.(map[string]any)
		var days []string
		for _, d := range asList(m["days"]) {
			s, _ := d.(string)
			days = append(days, s)
		}
		start, _ := m["start"].(string)
		dur, _ := m["duration"].(string)
		zone, _ := m["timeZone"].(string)
		if zone == "" {
			zone = "UTC"
		}
		was = append(was, fmt.Sprintf("%s %s for %s (%s)", strings.Join(days, ", "), start, dur, zone))
	}
	now := windowsOf(sub)
	switch {
	case len(was) == 0 || slices.Equal(was, now):
		return ""
	case len(now) == 0:
		return "the maintenance windows are taken out: a step that waits for one (status names it) starts at once"
	}
	return "the maintenance windows change: a step that waits for one (status names it) starts in the new windows: " + strings.Join(now, "; ")
}

func asList(v any) []any { l, _ := v.([]any); return l }

// upperBound is the most Nodes a flavor's node pool may hold.
func upperBound(f map[string]any) int64 {
	if a, ok := f["autoscaling"].(map[string]any); ok {
		return number(a["maxNodes"])
	}
	if n, ok := f["nodes"]; ok {
		return number(n)
	}
	return 1
}

// sizeText is a flavor's size as a reviewer reads it.
func sizeText(f map[string]any) string {
	if a, ok := f["autoscaling"].(map[string]any); ok {
		return fmt.Sprintf("%d to %d nodes, autoscaled", number(a["minNodes"]), number(a["maxNodes"]))
	}
	n := upperBound(f)
	if n == 1 {
		return "1 node"
	}
	return fmt.Sprintf("%d nodes", n)
}

// number reads a normalised count (an integer, or a float64 read back from
// JSON).
func number(v any) int64 {
	switch n := v.(type) {
	case int64:
		return n
	case float64:
		return int64(n)
	case int:
		return int64(n)
	}
	return 0
}
