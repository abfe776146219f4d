package gitsync

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/testutil/gitserver"
)

// waitAsync runs w.Wait in a goroutine and returns a channel closed when
// it returns.
func waitAsync(t *testing.T, w *Waiter) <-chan struct{} {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := w.Wait(t.Context()); err != nil {
			t.Errorf("Wait: %v", err)
		}
	}()
	return done
}

func isDone(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestWaiterIntervalJitterAndWake(t *testing.T) {
	e := newEnv(t)
	r := e.open(t)
	const interval = time.Minute
	w, err := r.NewWaiter(interval)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	// The jitter only ever takes off: never due before 90% of the
	// interval, always due at 100%.
	for i := range 20 {
		done := waitAsync(t, w)
		eventually(t, "Wait to start its timer", func() bool { return e.clk.Waiters() == 1 })
		e.clk.Advance(interval*9/10 - time.Nanosecond)
		if e.clk.Waiters() != 1 || isDone(done) {
			t.Fatalf("round %d: Wait returned before 90%% of the interval", i)
		}
		e.clk.Advance(interval/10 + time.Nanosecond)
		eventually(t, "Wait to return at the interval", func() bool { return isDone(done) })
	}

	// A wake ends a wait at once; wakes made while nobody waits are kept,
	// and coalesce into one.
	done := waitAsync(t, w)
	eventually(t, "Wait to start", func() bool { return e.clk.Waiters() >= 1 })
	w.Wake()
	eventually(t, "Wake to end the wait", func() bool { return isDone(done) })
	w.Wake()
	w.Wake()
	if err := w.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	done = waitAsync(t, w)
	// Timers of waits ended by a wake stay on the fake clock: the two
	// before and this one.
	eventually(t, "Wait to start", func() bool { return e.clk.Waiters() == 3 })
	if isDone(done) {
		t.Fatal("two wakes ended two waits; they should coalesce")
	}
	w.Wake()
	<-done
}

func TestWaiterHonoursBackoff(t *testing.T) {
	e := newEnv(t)
	e.commit(t, "x", map[string]string{"fleet.json": "{}"})
	e.work.Push(t, "main")
	e.cfg.BackoffMin = 30 * time.Second
	r := e.open(t)
	e.srv.Down()
	if _, err := r.Poll(t.Context()); err == nil {
		t.Fatal("poll of a down server worked")
	}
	w, err := r.NewWaiter(time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.Wake() // a webhook during the outage does not shorten the backoff
	done := waitAsync(t, w)
	eventually(t, "Wait to start", func() bool { return e.clk.Waiters() == 1 })
	e.clk.Advance(30*time.Second - time.Nanosecond)
	if isDone(done) || e.clk.Waiters() != 1 {
		t.Fatal("Wait returned before the backoff ended")
	}
	e.clk.Advance(time.Nanosecond)
	eventually(t, "Wait to return when the backoff ends", func() bool { return isDone(done) })
}

func TestLocalRemoteWokenByFsnotify(t *testing.T) {
	for _, tc := range []struct {
		name string
		url  func(dir string) string
	}{
		{"path", func(dir string) string { return dir }},
		{"file URL", func(dir string) string { return "file://" + dir }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bare := gitserver.NewBare(t, filepath.Join(t.TempDir(), "fleet.git"))
			work := bare.Clone(t)
			work.Write(t, "fleet.json", `{"v":1}`)
			work.CommitAll(t, "first")
			work.Push(t, "main")

			clk := clock.NewFake(epoch)
			r, err := Open(Config{URL: tc.url(bare.Dir), Dir: t.TempDir(), Clock: clk, Want: Patterns("refs/heads/*")})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			mustPoll(t, r)
			w, err := r.NewWaiter(time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()

			// A push to the local remote ends the wait although the clock
			// never moves.
			done := waitAsync(t, w)
			eventually(t, "Wait to start", func() bool { return clk.Waiters() == 1 })
			work.Write(t, "fleet.json", `{"v":2}`)
			c2 := work.CommitAll(t, "second")
			work.Push(t, "main")
			eventually(t, "fsnotify to wake the waiter", func() bool { return isDone(done) })
			if s := mustPoll(t, r); s.Tip != c2 {
				t.Fatalf("tip after wake = %s, want %s", s.Tip, c2)
			}

			// So does a new branch in a new directory (refs/heads/team/x).
			for isDone(w.wake) {
			}
			done = waitAsync(t, w)
			eventually(t, "Wait to start", func() bool { return clk.Waiters() == 2 })
			work.Git(t, "checkout", "--quiet", "-b", "team/x")
			p := work.CommitAll(t, "proposal")
			work.Push(t, "team/x")
			eventually(t, "fsnotify to see a branch in a new directory", func() bool { return isDone(done) })
			if s := mustPoll(t, r); s.Heads["refs/heads/team/x"] != p {
				t.Fatalf("heads = %v", s.Heads)
			}
		})
	}
}
