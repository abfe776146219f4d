package outbox_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/outbox"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

const (
	plan   = "<!-- fleet-agent:plan -->"
	result = "<!-- fleet-agent:result-1 -->"
)

func body(marker, text string) string { return marker + "\n" + text }

func TestCoalescing(t *testing.T) {
	cases := []struct {
		name string
		// before is delivered first; then posts are queued together.
		before []outbox.Post
		posts  []outbox.Post
		depth  int
		check  func(t *testing.T, e *env)
	}{
		{
			name: "three statuses for one commit and context: one post, the last",
			posts: []outbox.Post{
				outbox.Status(sha(1), "apply", "pending", "applying", ""),
				outbox.Status(sha(1), "apply", "failure", "not applied", ""),
				outbox.Status(sha(1), "apply", "success", "applied 3 calls", "https://ci/1"),
			},
			depth: 1,
			check: func(t *testing.T, e *env) {
				equal(t, "statuses", e.states(sha(1)), []string{"fleet-agent/apply=success:applied 3 calls"})
				equal(t, "posts", e.posts(), []string{statusPath(sha(1))})
				if st := e.repo.Statuses(sha(1)); st[0].TargetURL != "https://ci/1" {
					t.Errorf("target URL %q", st[0].TargetURL)
				}
			},
		},
		{
			name: "other contexts and commits are other posts",
			posts: []outbox.Post{
				outbox.Status(sha(1), "plan", "success", "plan", ""),
				outbox.Status(sha(1), "apply", "pending", "apply", ""),
				outbox.Status(sha(2), "plan", "failure", "plan 2", ""),
			},
			depth: 3,
			check: func(t *testing.T, e *env) {
				equal(t, "statuses 1", e.states(sha(1)), []string{"fleet-agent/plan=success:plan", "fleet-agent/apply=pending:apply"})
				equal(t, "statuses 2", e.states(sha(2)), []string{"fleet-agent/plan=failure:plan 2"})
			},
		},
		{
			name:   "two bodies for one comment: one edit with the last body",
			before: []outbox.Post{outbox.Sticky(1, plan, "v1")},
			posts:  []outbox.Post{outbox.Sticky(1, plan, "v2"), outbox.Sticky(1, plan, "v3")},
			depth:  1,
			check: func(t *testing.T, e *env) {
				equal(t, "comments", e.comments(1), []string{body(plan, "v3") + " (1)"})
				equal(t, "posts", e.posts(), []string{"PATCH /repos/acme/fleet/issues/comments/" + commentID(e, 1)})
			},
		},
		{
			name:  "two bodies for a new comment: created once with the last",
			posts: []outbox.Post{outbox.Sticky(2, plan, "a"), outbox.Sticky(2, plan, "b")},
			depth: 1,
			check: func(t *testing.T, e *env) {
				equal(t, "comments", e.comments(2), []string{body(plan, "b") + " (0)"})
			},
		},
		{
			name:  "once-comments with one marker: the first wins",
			posts: []outbox.Post{outbox.Once(1, result, "first"), outbox.Once(1, result, "second")},
			depth: 1,
			check: func(t *testing.T, e *env) {
				equal(t, "comments", e.comments(1), []string{body(result, "first") + " (0)"})
			},
		},
		{
			name: "a sticky and a once-comment with one marker are not coalesced",
			posts: []outbox.Post{outbox.Sticky(1, result, "sticky"), outbox.Once(1, result, "once"),
				outbox.Sticky(3, plan, "other pr")},
			depth: 3,
			check: func(t *testing.T, e *env) {
				// The once-comment finds the sticky one by its marker.
				equal(t, "comments", e.comments(1), []string{body(result, "sticky") + " (0)"})
				equal(t, "comments 3", e.comments(3), []string{body(plan, "other pr") + " (0)"})
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			e.add(t, c.before...)
			e.flush(t)
			e.emu.ResetLog()
			e.add(t, c.posts...)
			e.depth(t, c.depth)
			e.flush(t)
			c.check(t, e)
			if s := e.ob.Stats(); s.Delivered != uint64(len(c.before)+c.depth) || s.Dropped != 0 {
				t.Errorf("stats %+v", s)
			}
		})
	}
}

func commentID(e *env, pr int) string {
	cs := e.repo.Comments(pr)
	if len(cs) == 0 {
		return "none"
	}
	return strconv.FormatInt(cs[0].ID, 10)
}

func TestOrderKeepsPlaceOfReplaced(t *testing.T) {
	e := newEnv(t)
	e.add(t,
		outbox.Status(sha(1), "apply", "pending", "applying", ""),
		outbox.Sticky(1, plan, "plan v1"),
		outbox.Status(sha(2), "plan", "success", "ok", ""),
		outbox.Once(1, result, "applied"),
		outbox.Status(sha(3), "drift", "success", "converged", ""),
	)
	// Replacements keep their place: the apply status stays first, the
	// plan comment stays before the result comment.
	e.add(t,
		outbox.Status(sha(1), "apply", "success", "applied", ""),
		outbox.Sticky(1, plan, "plan v2"),
	)
	var got []string
	for _, q := range e.queued(t) {
		got = append(got, q.Post.String())
	}
	equal(t, "queue", got, []string{
		"status apply=success on " + sha(1)[:12],
		"sticky comment " + plan + " on #1",
		"status plan=success on " + sha(2)[:12],
		"once comment " + result + " on #1",
		"status drift=success on " + sha(3)[:12],
	})
	e.flush(t)
	equal(t, "posts in order", e.posts(), []string{
		statusPath(sha(1)), commentPath(1), statusPath(sha(2)), commentPath(1), statusPath(sha(3)),
	})
	equal(t, "comments", e.comments(1), []string{body(plan, "plan v2") + " (0)", body(result, "applied") + " (0)"})
	equal(t, "apply status", e.states(sha(1)), []string{"fleet-agent/apply=success:applied"})
}

func TestEnqueueValidatesAndJoinsTheCallersTransaction(t *testing.T) {
	e := newEnv(t)
	bad := []outbox.Post{
		{Kind: "tweet", Body: "x"},
		outbox.Status("", "plan", "success", "", ""),
		outbox.Status(sha(1), "", "success", "", ""),
		outbox.Status(sha(1), "plan", "done", "", ""),
		outbox.Sticky(0, plan, "x"),
		outbox.Sticky(1, "", "x"),
		outbox.Once(1, result, "  "),
	}
	for _, p := range bad {
		err := e.ob.Add(p)
		if err == nil || refusal.CodeOf(err) != refusal.Internal {
			t.Errorf("%+v: want a refusal, got %v", p, err)
		}
	}
	// A transaction that fails takes its posts with it.
	boom := errors.New("the plan could not be recorded")
	err := e.store.Update(func(tx *state.Tx) error {
		if err := e.ob.Enqueue(tx, outbox.Status(sha(1), "plan", "success", "", "")); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatal(err)
	}
	e.depth(t, 0)
	// The package's Enqueue works in any write transaction.
	if err := e.store.Update(func(tx *state.Tx) error {
		return outbox.Enqueue(tx, outbox.Status(sha(1), "plan", "success", "", ""))
	}); err != nil {
		t.Fatal(err)
	}
	e.depth(t, 1)
	e.flush(t)
	equal(t, "statuses", e.states(sha(1)), []string{"fleet-agent/plan=success:"})
}

func TestOutageThenBack(t *testing.T) {
	e := newEnv(t)
	e.add(t,
		outbox.Status(sha(1), "apply", "pending", "applying", ""),
		outbox.Sticky(1, plan, "plan v1"),
		outbox.Once(1, result, "applied"),
	)
	e.emu.SetOutage(true)
	start := e.clk.Now()
	var lastWait time.Duration
	var lastUntil time.Time
	for poll := range 60 {
		h := e.held(t)
		wait := h.Until.Sub(e.clk.Now())
		if wait > 5*time.Minute || wait < 0 {
			t.Fatalf("poll %d: held for %v, want at most the 5 min cap", poll, wait)
		}
		if !h.Until.Equal(lastUntil) { // a new try failed just now
			if wait < lastWait {
				t.Errorf("poll %d: backoff went down from %v to %v", poll, lastWait, wait)
			}
			lastWait, lastUntil = wait, h.Until
		}
		switch poll {
		case 10:
			e.add(t, outbox.Status(sha(1), "apply", "success", "applied", ""), outbox.Sticky(1, plan, "plan v2"))
		case 20:
			e.add(t, outbox.Sticky(1, plan, "plan v3"), outbox.Once(1, result, "applied again"))
		}
		e.clk.Advance(time.Minute)
	}
	if lastWait != 5*time.Minute {
		t.Errorf("after an hour down the backoff is %v, want the 5 min cap", lastWait)
	}
	// Polled every minute for an hour, it tried far fewer times: the
	// backoff grows (30 s retry hints, then 2 s doubling to 5 min).
	tries := len(e.emu.Requests())
	if tries < 5 || tries > 25 {
		t.Errorf("%d requests during %v of outage", tries, e.clk.Now().Sub(start))
	}
	if q := e.queued(t); len(q) != 3 || !q[0].InFlight || q[0].Attempts == 0 || q[1].InFlight {
		t.Errorf("queue during the outage: %+v", q)
	}
	if s := e.ob.Stats(); s.Failures == 0 || !strings.Contains(s.LastError, "network") || s.Delivered != 0 {
		t.Errorf("stats %+v", s)
	}

	e.emu.SetOutage(false)
	e.clk.Advance(5 * time.Minute)
	e.flush(t)
	equal(t, "statuses", e.states(sha(1)), []string{"fleet-agent/apply=success:applied"})
	equal(t, "comments", e.comments(1), []string{body(plan, "plan v3") + " (0)", body(result, "applied") + " (0)"})
	if s := e.ob.Stats(); s.Delivered != 3 || !s.HeldUntil.IsZero() || s.LastDelivery != e.clk.Now() {
		t.Errorf("stats %+v", s)
	}
}

func TestPrimaryRateLimit(t *testing.T) {
	e := newEnv(t)
	e.emu.SetRateBudget(0)
	reset := e.emu.RateReset()
	e.add(t, outbox.Status(sha(1), "plan", "success", "ok", ""), outbox.Sticky(1, plan, "plan"))
	h := e.held(t)
	if !h.Until.Equal(reset) || !strings.Contains(h.Reason, "rate_limited") {
		t.Fatalf("held until %v (%s), want the reset %v", h.Until, h.Reason, reset)
	}
	if n := len(e.emu.Requests()); n != 1 {
		t.Fatalf("%d requests, want the one that learnt the limit", n)
	}
	// Until the reset nothing is sent, not even a post queued later.
	for e.clk.Now().Add(10 * time.Minute).Before(reset) {
		e.clk.Advance(10 * time.Minute)
		e.add(t, outbox.Status(sha(2), "plan", "success", "later", ""))
		if h := e.held(t); !h.Until.Equal(reset) {
			t.Fatalf("held until %v, want %v", h.Until, reset)
		}
	}
	e.clk.Advance(reset.Sub(e.clk.Now()) - time.Second)
	e.held(t)
	if n := len(e.emu.Requests()); n != 1 {
		t.Fatalf("%d requests before the reset, want 1", n)
	}
	e.clk.Advance(time.Second)
	e.flush(t)
	equal(t, "posts", e.posts()[1:], []string{statusPath(sha(1)), commentPath(1), statusPath(sha(2))})
}

func TestSecondaryLimitRetryAfter(t *testing.T) {
	e := newEnv(t)
	e.emu.SecondaryLimitNext(1, 90*time.Second)
	e.add(t, outbox.Status(sha(1), "plan", "success", "ok", ""))
	h := e.held(t)
	if want := epoch.Add(90 * time.Second); !h.Until.Equal(want) {
		t.Fatalf("held until %v, want Retry-After's %v", h.Until, want)
	}
	e.clk.Advance(89 * time.Second)
	e.held(t)
	if n := len(e.emu.Requests()); n != 1 {
		t.Fatalf("%d requests before Retry-After passed", n)
	}
	e.clk.Advance(time.Second)
	e.flush(t)
	equal(t, "statuses", e.states(sha(1)), []string{"fleet-agent/plan=success:ok"})
}

func TestServerErrorsBackOff(t *testing.T) {
	e := newEnv(t)
	e.emu.Fail5xxNext(2)
	e.add(t, outbox.Sticky(1, plan, "plan"))
	h := e.held(t)
	if want := epoch.Add(30 * time.Second); !h.Until.Equal(want) {
		t.Errorf("held until %v, want the forge's 30 s hint", h.Until)
	}
	e.clk.Advance(30 * time.Second)
	e.held(t)
	e.clk.Advance(30 * time.Second)
	e.flush(t)
	equal(t, "comments", e.comments(1), []string{body(plan, "plan") + " (0)"})
}

func TestPoisonPostsAreDropped(t *testing.T) {
	cases := []struct {
		name   string
		poison outbox.Post
		class  string
	}{
		{"status on a commit GitHub does not know (422)", outbox.Status(sha(99), "plan", "success", "ok", ""), "validation"},
		{"sticky comment on a pull request that is gone (404)", outbox.Sticky(99, plan, "plan"), "not_found"},
		{"once-comment on a pull request that is gone (404)", outbox.Once(99, result, "applied"), "not_found"},
		{"body over GitHub's limit (refused before sending)", outbox.Sticky(1, plan, strings.Repeat("x", 70000)), "validation"},
		{"marker that is not a marker", outbox.Once(1, "result", "applied"), "validation"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			e.add(t, c.poison, outbox.Status(sha(1), "plan", "success", "after the poison", ""))
			e.flush(t)
			equal(t, "statuses", e.states(sha(1)), []string{"fleet-agent/plan=success:after the poison"})
			if s := e.ob.Stats(); s.Dropped != 1 || s.Delivered != 1 || !strings.Contains(s.LastError, c.class) {
				t.Errorf("stats %+v", s)
			}
			logs := e.logs.String()
			if !strings.Contains(logs, "dropped a post") || !strings.Contains(logs, c.class) ||
				!strings.Contains(logs, c.poison.String()) {
				t.Errorf("no error line naming the post and the reason:\n%s", logs)
			}
		})
	}
}

func TestUnauthorized(t *testing.T) {
	cases := []struct {
		name string
		// rotateAfter: the token is fixed after this many failures; 0
		// never.
		rotateAfter int
		delivered   bool
	}{
		{"a rotated token: retried, then delivered", 3, true},
		{"a token that stays wrong: dropped after the attempts", 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			e.tok.set("ghp_wrong")
			e.add(t, outbox.Status(sha(1), "plan", "success", "ok", ""))
			failures := 0
			for {
				err := e.ob.Flush(t.Context())
				if err == nil {
					break
				}
				var h *outbox.HeldError
				if !errors.As(err, &h) || !strings.Contains(h.Reason, "unauthorized") {
					t.Fatalf("flush: %v", err)
				}
				failures++
				if failures > 3*outbox.DefaultAuthAttempts {
					t.Fatalf("still held after %d failures: %v", failures, err)
				}
				if failures == c.rotateAfter {
					e.emu.AddToken("ghp_rotated", "fleet-bot")
					e.tok.set("ghp_rotated")
				}
				e.clk.Advance(h.Until.Sub(e.clk.Now()))
			}
			e.depth(t, 0)
			s := e.ob.Stats()
			if c.delivered {
				equal(t, "statuses", e.states(sha(1)), []string{"fleet-agent/plan=success:ok"})
				if failures != 3 || s.Delivered != 1 {
					t.Errorf("%d failures, stats %+v", failures, s)
				}
				return
			}
			if len(e.repo.Statuses(sha(1))) != 0 || s.Dropped != 1 {
				t.Errorf("statuses %v, stats %+v", e.states(sha(1)), s)
			}
			if n := len(e.emu.Requests()); n != outbox.DefaultAuthAttempts || failures != outbox.DefaultAuthAttempts-1 {
				t.Errorf("%d requests and %d holds, want %d tries", n, failures, outbox.DefaultAuthAttempts)
			}
			// 2 s doubling to the 5 min cap, between the tries: about an hour.
			if waited := e.clk.Now().Sub(epoch); waited != 510*time.Second+11*5*time.Minute {
				t.Errorf("waited %v", waited)
			}
		})
	}
}

func TestRestartResumes(t *testing.T) {
	e := newEnv(t)
	e.add(t,
		outbox.Status(sha(1), "apply", "pending", "applying", ""),
		outbox.Sticky(1, plan, "plan"),
		outbox.Once(1, result, "applied"),
	)
	e.emu.SetOutage(true)
	h := e.held(t)
	e.restart(t)
	e.emu.SetOutage(false)
	e.emu.ResetLog()
	// The hold survives the restart.
	if h2 := e.held(t); !h2.Until.Equal(h.Until) {
		t.Errorf("held until %v after the restart, want %v", h2.Until, h.Until)
	}
	if n := len(e.emu.Requests()); n != 0 {
		t.Errorf("%d requests during the hold", n)
	}
	e.add(t, outbox.Status(sha(1), "apply", "success", "applied", ""))
	e.clk.Advance(h.Until.Sub(e.clk.Now()))
	e.flush(t)
	equal(t, "statuses", e.states(sha(1)), []string{"fleet-agent/apply=success:applied"})
	equal(t, "comments", e.comments(1), []string{body(plan, "plan") + " (0)", body(result, "applied") + " (0)"})
}

func TestIdleOutboxMakesNoRequests(t *testing.T) {
	e := newEnv(t)
	e.opts.Idle = time.Minute
	e.restart(t)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- e.ob.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	for range 30 {
		eventually(t, "Run to wait on the clock", func() bool { return e.clk.Waiters() > 0 })
		e.clk.Advance(time.Minute)
	}
	if err := e.ob.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if r := e.emu.Requests(); len(r) != 0 {
		t.Errorf("an idle outbox made %d requests: %+v", len(r), r)
	}
	if s := e.ob.Stats(); s != (outbox.Stats{}) {
		t.Errorf("stats %+v", s)
	}
}

// TestOldestKeepsItsQueuedTime: the page's "oldest waiting" is the time a
// post took its place in the queue, which coalescing does not reset (the
// reader waits since the first version).
func TestOldestKeepsItsQueuedTime(t *testing.T) {
	e := newEnv(t)
	oldest := func() (outbox.Entry, bool) {
		t.Helper()
		var q outbox.Entry
		var ok bool
		if err := e.store.View(func(tx *state.Tx) (err error) { q, ok, err = outbox.Oldest(tx); return }); err != nil {
			t.Fatal(err)
		}
		return q, ok
	}
	if _, ok := oldest(); ok {
		t.Fatal("an empty queue has an oldest post")
	}
	e.add(t, outbox.Sticky(1, plan, "plan v1"))
	e.clk.Advance(5 * time.Minute)
	e.add(t, outbox.Status(sha(1), "plan", "success", "ok", ""), outbox.Sticky(1, plan, "plan v2"))
	q, ok := oldest()
	if !ok || !q.QueuedAt.Equal(epoch) || !strings.Contains(q.Post.Body, "plan v2") {
		t.Fatalf("oldest = %+v %v, want plan v2 queued at %v", q, ok, epoch)
	}
	e.flush(t)
	if q, ok := oldest(); ok {
		t.Fatalf("a flushed queue still has %+v", q)
	}
}
