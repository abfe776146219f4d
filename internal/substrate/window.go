package substrate

// A gate of the node pools step: a step that takes running Nodes away (a
// node pool made smaller, the node pool of a removed flavor deleted) starts
// only inside the substrate's maintenance windows, when it has any.

import (
	"fmt"
	"strings"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/maintenance"
)

// schedule is the substrate's windows; none is always open. The document's
// validation refused windows that do not read, so none is dropped here.
func schedule(m *fleet.Maintenance) maintenance.Schedule {
	if m == nil {
		return nil
	}
	specs := make([]maintenance.Spec, len(m.Windows))
	for i, w := range m.Windows {
		specs[i] = maintenance.Spec{Days: w.Days, Start: w.Start, Duration: w.Duration, TimeZone: w.TimeZone}
	}
	s, _ := maintenance.Parse(specs)
	return s
}

// outsideWindow reports whether a disruptive step must wait for the next
// maintenance window, and then says so (OutsideWindow, with when the next
// window opens) and looks again then. A step already in flight is never
// held: only one not yet started waits.
func (p *step) outsideWindow(what string) bool {
	s := schedule(p.want.Spec.Maintenance)
	now := p.r.clock.Now()
	if open, _ := s.Open(now); open {
		return false
	}
	next := s.Next(now)
	windows := make([]string, len(s))
	for i, w := range s {
		windows[i] = w.Describe()
	}
	p.wait(ReasonOutsideWindow, fmt.Sprintf("%s waits for a maintenance window (%s); the next opens at %s",
		what, strings.Join(windows, "; "), next.UTC().Format(time.RFC3339)), next)
	return true
}
