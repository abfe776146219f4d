package maintenance

import (
	"strings"
	"testing"
	"time"
)

func mustParse(t *testing.T, specs ...Spec) Schedule {
	t.Helper()
	s, ps := Parse(specs)
	if len(ps) > 0 {
		t.Fatalf("problems: %+v", ps)
	}
	return s
}

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// TestSchedule: whether a window is open at an instant, until when, and
// when the next opens; across midnight, joined windows, and both clock
// changes of a zone with summer time (Europe/Berlin: 2026-03-29 02:00 CET
// skips to 03:00 CEST; 2026-10-25 03:00 CEST falls back to 02:00 CET).
func TestSchedule(t *testing.T) {
	weekend := Spec{Days: []string{"sat", "sun"}, Start: "02:00", Duration: "4h", TimeZone: "UTC"}
	cases := []struct {
		name  string
		specs []Spec
		now   string
		open  bool
		until string // "" when closed
		next  string
	}{
		{"inside", []Spec{weekend}, "2026-12-05T03:00:00Z", true, "2026-12-05T06:00:00Z", "2026-12-05T03:00:00Z"},
		{"a minute before", []Spec{weekend}, "2026-12-05T01:59:00Z", false, "", "2026-12-05T02:00:00Z"},
		{"at the start", []Spec{weekend}, "2026-12-05T02:00:00Z", true, "2026-12-05T06:00:00Z", "2026-12-05T02:00:00Z"},
		{"at the end", []Spec{weekend}, "2026-12-05T06:00:00Z", false, "", "2026-12-06T02:00:00Z"},
		{"midweek", []Spec{weekend}, "2026-12-07T10:00:00Z", false, "", "2026-12-12T02:00:00Z"},
		{"zone omitted is UTC", []Spec{{Days: []string{"mon"}, Start: "09:30", Duration: "1h"}}, "2026-12-07T09:45:00Z", true, "2026-12-07T10:30:00Z", "2026-12-07T09:45:00Z"},
		{"across midnight", []Spec{{Days: []string{"fri"}, Start: "22:00", Duration: "4h"}}, "2026-12-05T01:00:00Z", true, "2026-12-05T02:00:00Z", "2026-12-05T01:00:00Z"},
		{"joined windows", []Spec{weekend, {Days: []string{"sat"}, Start: "05:00", Duration: "2h"}}, "2026-12-05T03:00:00Z", true, "2026-12-05T07:00:00Z", "2026-12-05T03:00:00Z"},
		{"a zone's offset", []Spec{{Days: []string{"sun"}, Start: "02:30", Duration: "1h", TimeZone: "Europe/Berlin"}}, "2026-11-01T01:00:00Z", false, "", "2026-11-01T01:30:00Z"},
		{"skipped start: at the jump", []Spec{{Days: []string{"sun"}, Start: "02:30", Duration: "2h", TimeZone: "Europe/Berlin"}}, "2026-03-29T00:59:00Z", false, "", "2026-03-29T01:00:00Z"},
		{"skipped start: open from the jump", []Spec{{Days: []string{"sun"}, Start: "02:30", Duration: "2h", TimeZone: "Europe/Berlin"}}, "2026-03-29T01:00:00Z", true, "2026-03-29T03:00:00Z", "2026-03-29T01:00:00Z"},
		{"start shown twice: the first", []Spec{{Days: []string{"sun"}, Start: "02:30", Duration: "1h", TimeZone: "Europe/Berlin"}}, "2026-10-25T00:45:00Z", true, "2026-10-25T01:30:00Z", "2026-10-25T00:45:00Z"},
		{"elapsed time across the change", []Spec{{Days: []string{"sun"}, Start: "01:00", Duration: "4h", TimeZone: "Europe/Berlin"}}, "2026-10-25T03:30:00Z", false, "", "2026-11-01T00:00:00Z"},
		{"always open joins a week ahead", []Spec{{Days: []string{"mon"}, Start: "00:00", Duration: "168h"}}, "2026-12-09T00:00:00Z", true, "2026-12-21T00:00:00Z", "2026-12-09T00:00:00Z"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := mustParse(t, c.specs...)
			now := at(c.now)
			open, until := s.Open(now)
			if open != c.open {
				t.Fatalf("open %v, want %v", open, c.open)
			}
			if c.open && !until.Equal(at(c.until)) {
				t.Errorf("until %s, want %s", until.UTC().Format(time.RFC3339), c.until)
			}
			if next := s.Next(now); !next.Equal(at(c.next)) {
				t.Errorf("next %s, want %s", next.UTC().Format(time.RFC3339), c.next)
			}
		})
	}
	if open, until := Schedule(nil).Open(at("2026-12-05T03:00:00Z")); !open || !until.IsZero() {
		t.Errorf("no windows: open %v until %v, want always open", open, until)
	}
	if next := Schedule(nil).Next(at("2026-12-05T03:00:00Z")); !next.IsZero() {
		t.Errorf("no windows: next %v", next)
	}
}

// TestParseProblems: each field that cannot be read is named with what is
// allowed; a good window next to it still reads.
func TestParseProblems(t *testing.T) {
	good := Spec{Days: []string{"sat"}, Start: "02:00", Duration: "4h"}
	cases := []struct {
		spec        Spec
		field, want string
	}{
		{Spec{Days: []string{"Sat"}, Start: "02:00", Duration: "4h"}, "days", `"Sat" is not a day; days are sun, mon, tue, wed, thu, fri, sat`},
		{Spec{Days: []string{"sat", "sat"}, Start: "02:00", Duration: "4h"}, "days", `"sat" is repeated`},
		{Spec{Start: "02:00", Duration: "4h"}, "days", "at least one day"},
		{Spec{Days: []string{"sat"}, Start: "24:00", Duration: "4h"}, "start", "HH:MM, 24-hour"},
		{Spec{Days: []string{"sat"}, Start: "2:00", Duration: "4h"}, "start", "HH:MM"},
		{Spec{Days: []string{"sat"}, Start: "+1:00", Duration: "4h"}, "start", "HH:MM"},
		{Spec{Days: []string{"sat"}, Start: "02:00", Duration: "10m"}, "duration", "a window lasts from 30m to 168h"},
		{Spec{Days: []string{"sat"}, Start: "02:00", Duration: "200h"}, "duration", "out of range"},
		{Spec{Days: []string{"sat"}, Start: "02:00", Duration: "4"}, "duration", "30m, 4h or 2h30m"},
		{Spec{Days: []string{"sat"}, Start: "02:00", Duration: "4h", TimeZone: "Mars/Olympus"}, "timeZone", "IANA"},
		{Spec{Days: []string{"sat"}, Start: "02:00", Duration: "4h", TimeZone: "Local"}, "timeZone", "IANA"},
		{Spec{Days: []string{"sat"}, Start: "02:00", Duration: "4h", TimeZone: "../../etc/passwd"}, "timeZone", "IANA"},
		{Spec{Days: []string{"sat"}, Start: "02:00", Duration: "4h", TimeZone: "right/UTC"}, "timeZone", "IANA"},
		{Spec{Days: []string{"sat"}, Start: "02:00", Duration: "4h", TimeZone: "posixrules"}, "timeZone", "IANA"},
		{Spec{Days: []string{"sat"}, Start: "02:00", Duration: "4h", TimeZone: "Factory"}, "timeZone", "IANA"},
		{Spec{Days: []string{"sat"}, Start: "02:00", Duration: "4h", TimeZone: "posix/Europe/Berlin"}, "timeZone", "IANA"},
	}
	for _, c := range cases {
		s, ps := Parse([]Spec{good, c.spec})
		if len(ps) != 1 || ps[0].Index != 1 || ps[0].Field != c.field || !strings.Contains(ps[0].Message, c.want) {
			t.Errorf("%+v: problems %+v, want one in %s saying %q", c.spec, ps, c.field, c.want)
		}
		if len(s) != 1 {
			t.Errorf("%+v: %d windows read, want the good one", c.spec, len(s))
		}
	}
}

func TestDescribe(t *testing.T) {
	s := mustParse(t, Spec{Days: []string{"sat", "sun"}, Start: "02:00", Duration: "4h30m", TimeZone: "Europe/Berlin"})
	if got, want := s[0].Describe(), "sat, sun 02:00 for 4h30m (Europe/Berlin)"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
}

// FuzzParse: any window text reads or is refused with problems, never a
// panic; a window that reads answers Open and Next, and Next is never
// before now nor more than eight days ahead.
func FuzzParse(f *testing.F) {
	f.Add("sat", "02:00", "4h", "UTC", int64(1796515200))
	f.Add("sun", "02:30", "2h", "Europe/Berlin", int64(1774746000))
	f.Add("mon", "23:59", "168h", "Pacific/Chatham", int64(0))
	f.Fuzz(func(t *testing.T, day, start, dur, zone string, unix int64) {
		s, ps := Parse([]Spec{{Days: []string{day}, Start: start, Duration: dur, TimeZone: zone}})
		if len(ps) > 0 {
			return
		}
		now := time.Unix(unix%(1<<34), 0)
		s.Open(now)
		next := s.Next(now)
		if next.Before(now) || next.Sub(now) > 8*24*time.Hour {
			t.Fatalf("next %v from %v", next, now)
		}
	})
}
