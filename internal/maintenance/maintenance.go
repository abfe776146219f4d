// Package maintenance is a substrate's maintenance windows
// (policy.substrate.maintenance): recurring stretches of time, each starting
// on some days of the week at a wall-clock time in a time zone and lasting a
// duration, inside which a disruptive step may start. It answers two
// questions of an instant: is a window open (and until when), and when does
// the next one open.
//
// Wall-clock rules, written down because time zones make them matter: a
// window starts at its start time as the zone's clocks show it on each of
// its days. On the day the clocks skip the start time (spring forward) it
// starts when the clocks show it again after the jump, the first instant
// that day at or after the start as written; on the day they show it twice
// (fall back) it starts at the first. The duration is elapsed time, so a
// four-hour window across a clock change still lasts four hours. A window
// may run past midnight and into the next window; overlapping windows are
// one stretch.
package maintenance

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	// The zone database is in the binary: a box without tzdata (the node
	// daemon's image has none) still reads every zone. Where the box has
	// its own, Go reads that first.
	_ "time/tzdata"
)

// Limits of a window, checked by Parse.
const (
	MinDuration = 30 * time.Minute
	MaxDuration = 7 * 24 * time.Hour
)

// Window is one recurring window.
type Window struct {
	// Days are the days it starts on.
	Days []time.Weekday
	// Start is the wall-clock time it starts at, as an offset from
	// midnight (hours and minutes).
	Start time.Duration
	// Duration is how long it lasts (elapsed time).
	Duration time.Duration
	// Zone is the time zone of Days and Start.
	Zone *time.Location
}

// Schedule is a substrate's windows; an empty one is always open (no
// windows: disruptive steps start at once).
type Schedule []Window

// Spec is a window as the document writes it.
type Spec struct {
	Days     []string `json:"days"`
	Start    string   `json:"start"`
	Duration string   `json:"duration"`
	TimeZone string   `json:"timeZone,omitempty"`
}

var dayNames = []string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}

// Parse turns the document's windows into a Schedule. Each problem is
// returned with the field it is in (days, start, duration, timeZone) and
// what is allowed, for the document's validation to place.
func Parse(specs []Spec) (Schedule, []Problem) {
	var out Schedule
	var problems []Problem
	for i, s := range specs {
		w, ps := parseOne(s)
		for _, p := range ps {
			p.Index = i
			problems = append(problems, p)
		}
		if len(ps) == 0 {
			out = append(out, w)
		}
	}
	return out, problems
}

// Problem is one field of one window that cannot be read.
type Problem struct {
	Index   int
	Field   string
	Message string
	// Form is true for a problem of the text's form (not a day, not HH:MM,
	// not a duration), which a schema says too; false for one of meaning
	// (a day repeated, a duration out of range, a zone that does not
	// exist).
	Form bool
}

func parseOne(s Spec) (Window, []Problem) {
	var w Window
	var ps []Problem
	bad := func(field, format string, args ...any) {
		ps = append(ps, Problem{Field: field, Message: fmt.Sprintf(format, args...)})
	}
	form := func(field, format string, args ...any) {
		bad(field, format, args...)
		ps[len(ps)-1].Form = true
	}
	for _, d := range s.Days {
		i := slices.Index(dayNames, d)
		switch {
		case i < 0:
			form("days", "%q is not a day; days are %s", d, strings.Join(dayNames, ", "))
		case slices.Contains(w.Days, time.Weekday(i)):
			bad("days", "%q is repeated", d)
		default:
			w.Days = append(w.Days, time.Weekday(i))
		}
	}
	if len(s.Days) == 0 {
		form("days", "a window starts on at least one day (%s)", strings.Join(dayNames, ", "))
	}
	if start, ok := clock(s.Start); ok {
		w.Start = start
	} else {
		form("start", "%q is not a time of day; write HH:MM, 24-hour (00:00 to 23:59)", s.Start)
	}
	d, err := time.ParseDuration(s.Duration)
	switch {
	case err != nil:
		form("duration", "%q is not a duration; write it as 30m, 4h or 2h30m", s.Duration)
	case d < MinDuration || d > MaxDuration:
		bad("duration", "%s is out of range: a window lasts from %s to %s", s.Duration, short(MinDuration), short(MaxDuration))
	default:
		w.Duration = d
	}
	zone := s.TimeZone
	if zone == "" {
		zone = "UTC"
	}
	if loc, err := loadZone(zone); err == nil {
		w.Zone = loc
	} else {
		bad("timeZone", "%q is not a time zone of the IANA database (for example UTC, Europe/Berlin, America/New_York)", zone)
	}
	return w, ps
}

// loadZone is time.LoadLocation, refusing the names it takes that are not
// zones: "Local" (the ops box's own zone, which a reviewer cannot see) and
// paths.
func loadZone(name string) (*time.Location, error) {
	if name != "UTC" && !zoneName.MatchString(name) {
		return nil, fmt.Errorf("not a zone name")
	}
	return time.LoadLocation(name)
}

// zoneName is the form of a zone of the IANA database's main tables: an
// area and a location (Europe/Berlin, America/Argentina/Salta), each part
// starting with a capital. It leaves out what LoadLocation also takes from
// a box's files that is not a zone a reviewer can read the same anywhere:
// "Local", paths, "posixrules", "Factory", the right/ and posix/ copies.
var zoneName = regexp.MustCompile(`^[A-Z][A-Za-z_+-]*(/[A-Z][A-Za-z0-9_+-]*){1,2}$`)

// clock reads HH:MM.
func clock(s string) (time.Duration, bool) {
	h, m, ok := strings.Cut(s, ":")
	if !ok || len(h) != 2 || len(m) != 2 {
		return 0, false
	}
	hh, err1 := strconv.Atoi(h)
	mm, err2 := strconv.Atoi(m)
	if err1 != nil || err2 != nil || hh < 0 || hh > 23 || mm < 0 || mm > 59 || h[0] == '+' || m[0] == '+' {
		return 0, false
	}
	return time.Duration(hh)*time.Hour + time.Duration(mm)*time.Minute, true
}

// short writes a duration without its zero parts (4h, not 4h0m0s).
func short(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// startOn is when w starts on the given date in its zone: when the clocks
// show Start; on a day they skip it, the instant they jump past it; on a
// day they show it twice, the first time.
func (w Window) startOn(year int, month time.Month, day int) time.Time {
	h, m := int(w.Start/time.Hour), int(w.Start%time.Hour/time.Minute)
	want := h*60 + m
	t := time.Date(year, month, day, h, m, 0, 0, w.Zone)
	if t.Hour()*60+t.Minute() != want || t.Day() != day {
		// Skipped: time.Date gave the written time in one of the two
		// offsets. The start is the first second whose wall clock that
		// day is at or after the written time (or that is the next day).
		reached := func(sec int64) bool {
			l := time.Unix(sec, 0).In(w.Zone)
			ly, lm, ld := l.Date()
			if c := compareDates(ly, lm, ld, year, month, day); c != 0 {
				return c > 0
			}
			return l.Hour()*60+l.Minute() >= want
		}
		lo, hi := t.Add(-4*time.Hour).Unix(), t.Add(4*time.Hour).Unix()
		for hi-lo > 1 {
			mid := lo + (hi-lo)/2
			if reached(mid) {
				hi = mid
			} else {
				lo = mid
			}
		}
		return time.Unix(hi, 0).In(w.Zone)
	}
	// Shown twice: time.Date may give the second; the first is the jump
	// (an hour, or half an hour in a few zones) before, with the same wall
	// clock.
	for _, back := range []time.Duration{time.Hour, 30 * time.Minute} {
		if e := t.Add(-back); e.Hour() == t.Hour() && e.Minute() == t.Minute() && e.Day() == t.Day() {
			return e
		}
	}
	return t
}

func compareDates(y1 int, m1 time.Month, d1, y2 int, m2 time.Month, d2 int) int {
	switch {
	case y1 != y2:
		return y1 - y2
	case m1 != m2:
		return int(m1 - m2)
	}
	return d1 - d2
}

// starts calls f with each start of w from the day before from's date (in
// the zone) onward, for days days, in order.
func (w Window) starts(from time.Time, days int, f func(time.Time) bool) {
	local := from.In(w.Zone)
	// A window lasts at most seven days: one that began eight days ago
	// has ended.
	y, m, d := local.Date()
	for i := -8; i <= days; i++ {
		day := time.Date(y, m, d+i, 12, 0, 0, 0, w.Zone)
		if !slices.Contains(w.Days, day.Weekday()) {
			continue
		}
		if !f(w.startOn(day.Year(), day.Month(), day.Day())) {
			return
		}
	}
}

// Open reports whether a window is open at now and, when it is, until when
// the windows stay open without a gap (overlapping windows join).
func (s Schedule) Open(now time.Time) (bool, time.Time) {
	if len(s) == 0 {
		return true, time.Time{}
	}
	var until time.Time
	open := false
	for {
		extended := false
		at := now
		if open {
			at = until
		}
		for _, w := range s {
			w.starts(at, 1, func(start time.Time) bool {
				end := start.Add(w.Duration)
				if !start.After(at) && end.After(at) && end.After(until) {
					until, open, extended = end, true, true
				}
				return true
			})
		}
		// Windows that always join (seven days, every week) would
		// extend for ever: a week ahead is as far as anyone asks.
		if !extended || until.Sub(now) > 8*24*time.Hour {
			return open, until
		}
	}
}

// Next is when the next window opens at or after now: now itself when one
// is open, the zero time for an empty schedule (nothing waits).
func (s Schedule) Next(now time.Time) time.Time {
	if len(s) == 0 {
		return time.Time{}
	}
	if open, _ := s.Open(now); open {
		return now
	}
	var next time.Time
	for _, w := range s {
		w.starts(now, 8, func(start time.Time) bool {
			if start.After(now) {
				if next.IsZero() || start.Before(next) {
					next = start
				}
				return false
			}
			return true
		})
	}
	return next
}

// Describe says a window as a person reads it: "sat, sun 02:00 for 4h
// (UTC)".
func (w Window) Describe() string {
	days := make([]string, len(w.Days))
	for i, d := range w.Days {
		days[i] = dayNames[d]
	}
	return fmt.Sprintf("%s %02d:%02d for %s (%s)", strings.Join(days, ", "), int(w.Start/time.Hour), int(w.Start%time.Hour/time.Minute), short(w.Duration), w.Zone)
}
