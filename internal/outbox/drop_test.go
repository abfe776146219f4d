package outbox_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/fleet-agent/fleet-agent/internal/outbox"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

// drain flushes until the queue is empty, advancing the clock over every
// hold; it returns the holds it met.
func (e *env) drain(t *testing.T) []*outbox.HeldError {
	t.Helper()
	var holds []*outbox.HeldError
	for {
		err := e.ob.Flush(t.Context())
		if err == nil {
			return holds
		}
		var h *outbox.HeldError
		if !errors.As(err, &h) {
			t.Fatalf("flush: %v", err)
		}
		holds = append(holds, h)
		if len(holds) > 200 {
			t.Fatalf("still held after %d holds: %v", len(holds), err)
		}
		e.clk.Advance(h.Until.Sub(e.clk.Now()))
	}
}

func drops(e *env) map[string]uint64 {
	out := map[string]uint64{}
	for _, d := range e.ob.Drops() {
		out[d.Kind+"/"+d.Reason] = d.Count
	}
	return out
}

// GitHub answers a bot that posts fast with 422 "was submitted too quickly":
// the comment waits and is posted, it is not dropped as a poison post.
func TestSubmittedTooQuicklyIsRetried(t *testing.T) {
	e := newEnv(t)
	e.emu.SubmittedTooQuicklyNext(2)
	e.add(t, outbox.Status(sha(1), "plan", "success", "plan: 1 to add", ""), outbox.Sticky(1, plan, "plan"))
	holds := e.drain(t)
	if len(holds) != 2 || !strings.Contains(holds[0].Reason, "content_limited") {
		t.Fatalf("holds %+v, want two content limits", holds)
	}
	if w := holds[0].Until.Sub(epoch); w < time.Minute {
		t.Errorf("first hold %v, want GitHub's minute at least", w)
	}
	equal(t, "comments", e.comments(1), []string{body(plan, "plan") + " (0)"})
	equal(t, "statuses", e.states(sha(1)), []string{"fleet-agent/plan=success:plan: 1 to add"})
	if s := e.ob.Stats(); s.Dropped != 0 || s.Delivered != 2 {
		t.Errorf("stats %+v", s)
	}
}

// A content limit that does not lift is not retried forever: after
// ContentLimitAttempts tries (about an hour and ten minutes) the comment is
// dropped, and the status queued with it tells the reviewer so.
func TestContentLimitThatDoesNotLiftIsDroppedWithANote(t *testing.T) {
	e := newEnv(t)
	e.emu.SubmittedTooQuicklyNext(1 << 20)
	e.add(t, outbox.Status(sha(1), "plan", "success", "plan: 3 to add, 1 to change", "https://ci/9"), outbox.Sticky(1, plan, "plan"))
	start := e.clk.Now()
	holds := e.drain(t)
	if len(holds) != outbox.DefaultContentLimitAttempts-1 {
		t.Errorf("%d holds, want %d tries", len(holds), outbox.DefaultContentLimitAttempts)
	}
	if took := e.clk.Now().Sub(start); took < time.Hour || took > 2*time.Hour {
		t.Errorf("dropped after %v of retries, want about an hour (GitHub's hourly content limit)", took)
	}
	if len(e.repo.Comments(1)) != 0 {
		t.Fatal("a comment was made")
	}
	st := e.repo.Statuses(sha(1))
	if len(st) != 2 {
		t.Fatalf("statuses %v, want the plan and the note", e.states(sha(1)))
	}
	note := st[1]
	if note.Context != "fleet-agent/plan" || note.State != "success" || note.TargetURL != "https://ci/9" ||
		!strings.Contains(note.Description, "comment not posted") || !strings.Contains(note.Description, "log") ||
		!strings.Contains(note.Description, "plan: 3 to add") {
		t.Errorf("note %+v: want the plan's state and target, saying the comment is missing and where to look", note)
	}
	if got := drops(e); got["sticky/content_limited"] != 1 || len(got) != 1 {
		t.Errorf("drops %v", got)
	}
	logs := e.logs.String()
	if !strings.Contains(logs, "dropped a post") || !strings.Contains(logs, "content_limited") || !strings.Contains(logs, "sticky comment") {
		t.Errorf("no error line for the drop:\n%s", logs)
	}
}

// A 422 about the content itself is not retried: dropped at once, with the
// log line, the metric and the note.
func TestContentRefusedIsDroppedAtOnceWithANote(t *testing.T) {
	cases := []struct {
		name    string
		comment outbox.Post
		kind    string
	}{
		{"sticky over the limit", outbox.Sticky(1, plan, strings.Repeat("x", 70000)), "sticky"},
		{"once-comment over the limit", outbox.Once(1, result, strings.Repeat("y", 70000)), "once"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			e.add(t, outbox.Status(sha(2), "apply", "success", "applied 4 call(s)", ""), c.comment)
			e.flush(t)
			equal(t, "statuses", e.states(sha(2)), []string{
				"fleet-agent/apply=success:applied 4 call(s)",
				"fleet-agent/apply=success:" + e.repo.Statuses(sha(2))[1].Description,
			})
			note := e.repo.Statuses(sha(2))[1].Description
			if !strings.HasPrefix(note, "comment not posted") || !strings.Contains(note, "applied 4 call(s)") {
				t.Errorf("note %q", note)
			}
			if got := drops(e); got[c.kind+"/validation"] != 1 {
				t.Errorf("drops %v", got)
			}
			if s := e.ob.Stats(); s.Dropped != 1 || s.Delivered != 2 {
				t.Errorf("stats %+v", s)
			}
		})
	}
}

// The note keeps the newest state of its status: one delivered since the
// comment was queued is the one the note repeats; one queued behind the
// comment is amended in place.
func TestNoteKeepsTheNewestStatus(t *testing.T) {
	t.Run("delivered since the comment was queued", func(t *testing.T) {
		e := newEnv(t)
		poison := outbox.Sticky(1, plan, strings.Repeat("x", 70000))
		e.add(t, outbox.Status(sha(1), "plan", "pending", "planning", ""), poison)
		e.add(t, outbox.Status(sha(3), "plan", "success", "other", ""), outbox.Status(sha(1), "plan", "success", "plan: 2 to add", ""))
		// The second sha(1) status takes the first's place, ahead of the
		// comment: it is delivered before the comment is dropped.
		e.flush(t)
		got := e.states(sha(1))
		if len(got) != 2 || got[0] != "fleet-agent/plan=success:plan: 2 to add" || !strings.HasPrefix(got[1], "fleet-agent/plan=success:comment not posted") {
			t.Errorf("statuses %q", got)
		}
	})
	t.Run("amended in the queue", func(t *testing.T) {
		e := newEnv(t)
		e.emu.SubmittedTooQuicklyNext(1 << 20)
		e.add(t, outbox.Status(sha(1), "plan", "pending", "planning", ""), outbox.Sticky(1, plan, "plan"))
		if err := e.ob.Flush(t.Context()); !errors.Is(err, outbox.ErrHeld) {
			t.Fatal(err)
		}
		// Queued behind the held comment.
		e.add(t, outbox.Status(sha(1), "plan", "failure", "blocked", ""))
		e.drain(t)
		got := e.states(sha(1))
		if len(got) != 2 || got[0] != "fleet-agent/plan=pending:planning" || !strings.HasPrefix(got[1], "fleet-agent/plan=failure:comment not posted") ||
			!strings.HasSuffix(got[1], "blocked") {
			t.Errorf("statuses %q: want the queued failure, amended", got)
		}
	})
}

// Statuses dropped are logged and counted; they bring no further status.
// A comment queued with no status is dropped with its line and metric.
func TestDropsWithoutANote(t *testing.T) {
	e := newEnv(t)
	e.add(t, outbox.Status(sha(99), "plan", "success", "ok", ""))
	e.add(t, outbox.Once(99, result, "applied"))
	e.flush(t)
	if got := drops(e); got["status/validation"] != 1 || got["once/not_found"] != 1 || len(got) != 2 {
		t.Errorf("drops %v", got)
	}
	var each []string
	e.ob.EachDrop(func(kind, reason string, n uint64) { each = append(each, fmt.Sprint(kind, "/", reason, "=", n)) })
	equal(t, "EachDrop", each, []string{"once/not_found=1", "status/validation=1"})
	if n := len(e.posts()); n != 1 {
		t.Errorf("posts %q, want the refused status alone (the once-comment is refused on reading)", e.posts())
	}
	if logs := e.logs.String(); strings.Count(logs, "dropped a post") != 2 || !strings.Contains(logs, "no status") {
		t.Errorf("logs:\n%s", logs)
	}
}

// The note fits GitHub's 140 code points, note first.
func TestNoteIsCut(t *testing.T) {
	e := newEnv(t)
	long := strings.Repeat("é", 300)
	e.add(t, outbox.Status(sha(1), "drift", "failure", long, ""), outbox.Once(1, result, strings.Repeat("z", 70000)))
	e.flush(t)
	st := e.repo.Statuses(sha(1))
	if len(st) != 2 {
		t.Fatalf("statuses %v", e.states(sha(1)))
	}
	d := st[1].Description
	if n := utf8.RuneCountInString(d); n > 140 || !strings.HasPrefix(d, "comment not posted") || !strings.HasSuffix(d, "…") {
		t.Errorf("note of %d code points: %q", n, d)
	}
}

// GitHub compares status contexts without case: posts for "plan" and "Plan"
// on one commit are one status, the newest delivered.
func TestStatusKeyIgnoresCase(t *testing.T) {
	e := newEnv(t)
	e.add(t, outbox.Status(sha(1), "plan", "pending", "planning", ""), outbox.Status(sha(1), "Plan", "success", "planned", ""))
	e.depth(t, 1)
	e.flush(t)
	equal(t, "statuses", e.states(sha(1)), []string{"fleet-agent/Plan=success:planned"})
}

// The pairing of a comment with its status holds only inside one
// transaction: a comment queued alone has none, even right after a status.
func TestPairingIsPerTransaction(t *testing.T) {
	e := newEnv(t)
	if err := e.store.Update(func(tx *state.Tx) error {
		return e.ob.Enqueue(tx, outbox.Status(sha(1), "plan", "success", "ok", ""))
	}); err != nil {
		t.Fatal(err)
	}
	if err := e.store.Update(func(tx *state.Tx) error {
		return e.ob.Enqueue(tx, outbox.Sticky(1, plan, strings.Repeat("x", 70000)))
	}); err != nil {
		t.Fatal(err)
	}
	e.flush(t)
	equal(t, "statuses", e.states(sha(1)), []string{"fleet-agent/plan=success:ok"})
	if got := drops(e); got["sticky/validation"] != 1 {
		t.Errorf("drops %v", got)
	}
}

// The pairing is kept in the state file: a restart between queueing and the
// drop still notes it.
func TestPairingSurvivesARestart(t *testing.T) {
	e := newEnv(t)
	e.add(t, outbox.Status(sha(1), "apply", "failure", "not applied: CONFIG_DRIFT", ""), outbox.Once(99, result, "refused"))
	e.emu.SetOutage(true)
	e.held(t)
	e.restart(t)
	e.emu.SetOutage(false)
	e.drain(t)
	got := e.states(sha(1))
	if len(got) != 2 || !strings.HasPrefix(got[1], "fleet-agent/apply=failure:comment not posted (the pull request was not found)") {
		t.Errorf("statuses %q", got)
	}
	if d := drops(e); d["once/not_found"] != 1 {
		t.Errorf("drops %v", d)
	}
}
