package outbox_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/outbox"
)

// stamped is a Sender that notes when, on the fake clock, each send began.
type stamped struct {
	outbox.Sender
	e  *env
	mu sync.Mutex
	at []time.Time
}

func (s *stamped) note() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.at = append(s.at, s.e.clk.Now())
}

func (s *stamped) times() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.at...)
}

func (s *stamped) SetStatus(ctx context.Context, sha, context, state, description, targetURL string) error {
	s.note()
	return s.Sender.SetStatus(ctx, sha, context, state, description, targetURL)
}

func (s *stamped) UpsertComment(ctx context.Context, pr int, marker, body string) error {
	s.note()
	return s.Sender.UpsertComment(ctx, pr, marker, body)
}

func (s *stamped) AddCommentOnce(ctx context.Context, pr int, marker, body string) error {
	s.note()
	return s.Sender.AddCommentOnce(ctx, pr, marker, body)
}

// spacedEnv is an env with the default spacing and a stamping Sender.
func spacedEnv(t *testing.T) (*env, *stamped) {
	t.Helper()
	e := newEnv(t)
	e.opts.MinSpacing = 0 // the default
	st := &stamped{e: e}
	e.wrap = func(s outbox.Sender) outbox.Sender { st.Sender = s; return st }
	e.restart(t)
	return e, st
}

// tenPosts are ten posts of ten keys, as a queue after an outage holds.
func tenPosts() []outbox.Post {
	var posts []outbox.Post
	for i := 1; i <= 8; i++ {
		posts = append(posts, outbox.Status(sha(i), "plan", "success", "ok", ""))
	}
	return append(posts, outbox.Sticky(1, plan, "plan"), outbox.Once(2, result, "applied"))
}

// drive advances the fake clock in small steps whenever someone waits on
// it, until done says so.
func drive(t *testing.T, e *env, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatal("timed out draining the queue")
		}
		if e.clk.Waiters() > 0 {
			e.clk.Advance(100 * time.Millisecond)
			continue
		}
		time.Sleep(time.Millisecond)
	}
}

func checkSpacing(t *testing.T, at []time.Time, n int) {
	t.Helper()
	if len(at) != n {
		t.Fatalf("%d sends, want %d", len(at), n)
	}
	for i := 1; i < len(at); i++ {
		if gap := at[i].Sub(at[i-1]); gap < outbox.DefaultMinSpacing {
			t.Errorf("send %d came %v after the one before, want at least %v", i, gap, outbox.DefaultMinSpacing)
		}
	}
	if took := at[len(at)-1].Sub(at[0]); took < time.Duration(n-1)*outbox.DefaultMinSpacing {
		t.Errorf("%d sends took %v on the clock, want at least %v", n, took, time.Duration(n-1)*outbox.DefaultMinSpacing)
	}
}

// Draining a long queue keeps GitHub's second between writes: Run waits on
// the clock, and being woken does not cut the wait short.
func TestRunSpacesSends(t *testing.T) {
	e, st := spacedEnv(t)
	e.add(t, tenPosts()...)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- e.ob.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	// The first goes at once; the second waits, woken or not.
	eventually(t, "the first send", func() bool { return len(st.times()) >= 1 })
	eventually(t, "Run to wait", func() bool { return e.clk.Waiters() > 0 })
	e.ob.Wake()
	e.add(t, outbox.Status(sha(9), "plan", "success", "late", ""))
	time.Sleep(20 * time.Millisecond)
	if n := len(st.times()); n != 1 {
		t.Fatalf("%d sends without the clock moving, want 1", n)
	}
	e.clk.Advance(outbox.DefaultMinSpacing - time.Millisecond)
	time.Sleep(20 * time.Millisecond)
	if n := len(st.times()); n != 1 {
		t.Fatalf("%d sends before the spacing passed, want 1", n)
	}
	drive(t, e, func() bool { return e.ob.Stats().Delivered == 11 })
	e.depth(t, 0)
	checkSpacing(t, st.times(), 11)
	if s := e.ob.Stats(); s.Delivered != 11 || s.Failures != 0 || !s.HeldUntil.IsZero() {
		t.Errorf("stats %+v", s)
	}
}

// Flush keeps the spacing too: it waits for it on the clock (it is no hold,
// which Flush reports instead of waiting for), and stops when ctx ends.
func TestFlushSpacesSends(t *testing.T) {
	e, st := spacedEnv(t)
	e.add(t, tenPosts()...)
	done := make(chan error, 1)
	go func() { done <- e.ob.Flush(t.Context()) }()
	var err error
	drive(t, e, func() bool {
		select {
		case err = <-done:
			return true
		default:
			return false
		}
	})
	if err != nil {
		t.Fatalf("flush: %v", err)
	}
	e.depth(t, 0)
	checkSpacing(t, st.times(), 10)

	// A deadline that ends in the wait: what was sent is delivered, the
	// rest stays queued, nothing in flight.
	e.add(t, outbox.Status(sha(1), "apply", "success", "a", ""), outbox.Status(sha(2), "apply", "success", "b", ""))
	e.clk.Advance(outbox.DefaultMinSpacing)
	ctx, cancel := context.WithCancel(t.Context())
	go func() { done <- e.ob.Flush(ctx) }()
	eventually(t, "Flush to wait", func() bool { return e.clk.Waiters() > 0 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("flush with a cancelled ctx: %v", err)
	}
	if q := e.queued(t); len(q) != 1 || q[0].InFlight || q[0].Post.SHA != sha(2) {
		t.Errorf("queue %+v", q)
	}
	if n := len(st.times()); n != 11 {
		t.Errorf("%d sends, want 11", n)
	}
}
