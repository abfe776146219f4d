package outbox_test

import (
	"context"
	"errors"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/outbox"
)

func TestKillBetweenPostAndRecord(t *testing.T) {
	cases := []struct {
		name string
		post outbox.Post
		// after is queued after the restart, before delivery resumes.
		after     *outbox.Post
		wantPosts int
		check     func(t *testing.T, e *env)
	}{
		{
			name: "status: checked on GitHub, not posted again",
			post: outbox.Status(sha(1), "apply", "success", "applied", "https://ci/1"),
			check: func(t *testing.T, e *env) {
				equal(t, "statuses", e.states(sha(1)), []string{"fleet-agent/apply=success:applied"})
			},
		},
		{
			name:      "status replaced after the restart: the new one is posted",
			post:      outbox.Status(sha(1), "apply", "pending", "applying", ""),
			after:     &outbox.Post{Kind: outbox.KindStatus, SHA: sha(1), Context: "apply", State: "success", Description: "applied"},
			wantPosts: 1,
			check: func(t *testing.T, e *env) {
				equal(t, "statuses", e.states(sha(1)), []string{"fleet-agent/apply=pending:applying", "fleet-agent/apply=success:applied"})
			},
		},
		{
			name: "sticky comment: found by marker, not edited",
			post: outbox.Sticky(1, plan, "plan"),
			check: func(t *testing.T, e *env) {
				equal(t, "comments", e.comments(1), []string{body(plan, "plan") + " (0)"})
			},
		},
		{
			name: "once-comment: found by marker, not posted again",
			post: outbox.Once(1, result, "applied"),
			check: func(t *testing.T, e *env) {
				equal(t, "comments", e.comments(1), []string{body(result, "applied") + " (0)"})
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			outbox.SetAfterSend(e.ob, func(outbox.Post) bool { return true })
			e.add(t, c.post)
			if err := e.ob.Flush(t.Context()); !errors.Is(err, outbox.ErrCrashed) {
				t.Fatalf("flush: %v", err)
			}
			if q := e.queued(t); len(q) != 1 || !q[0].InFlight {
				t.Fatalf("after the kill the post must be queued and in flight: %+v", q)
			}
			if len(e.posts()) != 1 {
				t.Fatalf("GitHub took %v", e.posts())
			}
			e.restart(t)
			e.emu.ResetLog()
			if c.after != nil {
				e.add(t, *c.after)
			}
			e.flush(t)
			if got := e.posts(); len(got) != c.wantPosts {
				t.Errorf("posts after the restart: %v, want %d", got, c.wantPosts)
			}
			c.check(t, e)
		})
	}
}

// loseAnswers lets GitHub act on a request and then drops its answer, as a
// connection reset after the request went out would.
type loseAnswers struct {
	base http.RoundTripper
	mu   sync.Mutex
	lose func(*http.Request) bool
	lost int
}

func (l *loseAnswers) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := l.base.RoundTrip(r)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err == nil && l.lose != nil && l.lose(r) {
		l.lose = nil
		l.lost++
		resp.Body.Close()
		return nil, errors.New("read: connection reset by peer")
	}
	return resp, err
}

func TestLostAnswerIsVerifiedNotGuessed(t *testing.T) {
	cases := []struct {
		name  string
		post  outbox.Post
		check func(t *testing.T, e *env)
	}{
		{
			name: "status",
			post: outbox.Status(sha(2), "plan", "failure", "blocked", ""),
			check: func(t *testing.T, e *env) {
				equal(t, "statuses", e.states(sha(2)), []string{"fleet-agent/plan=failure:blocked"})
			},
		},
		{
			name: "sticky comment",
			post: outbox.Sticky(2, plan, "plan"),
			check: func(t *testing.T, e *env) {
				equal(t, "comments", e.comments(2), []string{body(plan, "plan") + " (0)"})
			},
		},
		{
			name: "once-comment",
			post: outbox.Once(2, result, "applied"),
			check: func(t *testing.T, e *env) {
				equal(t, "comments", e.comments(2), []string{body(result, "applied") + " (0)"})
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			lose := &loseAnswers{base: http.DefaultTransport, lose: func(r *http.Request) bool { return r.Method == http.MethodPost }}
			e.trans = lose
			e.restart(t)
			e.add(t, c.post)
			h := e.held(t)
			if lose.lost != 1 || !strings.Contains(h.Reason, "network") {
				t.Fatalf("lost %d answers, held: %v", lose.lost, h)
			}
			if q := e.queued(t); len(q) != 1 || !q[0].InFlight {
				t.Fatalf("a lost answer leaves the post in flight: %+v", q)
			}
			e.clk.Advance(h.Until.Sub(e.clk.Now()))
			e.flush(t)
			if got := e.posts(); len(got) != 1 {
				t.Errorf("posts %v, want the one whose answer was lost", got)
			}
			c.check(t, e)
		})
	}
}

// replacing is a Sender that queues a newer version of a status while the
// older one is being sent, as the agent may at any moment.
type replacing struct {
	outbox.Sender
	once  sync.Once
	newer func()
}

func (r *replacing) SetStatus(ctx context.Context, sha, context, state, description, targetURL string) error {
	err := r.Sender.SetStatus(ctx, sha, context, state, description, targetURL)
	r.once.Do(r.newer)
	return err
}

func TestReplacedWhileSending(t *testing.T) {
	e := newEnv(t)
	e.wrap = func(s outbox.Sender) outbox.Sender {
		return &replacing{Sender: s, newer: func() {
			if err := e.ob.Add(outbox.Status(sha(1), "apply", "success", "applied", "")); err != nil {
				t.Error(err)
			}
		}}
	}
	e.restart(t)
	e.add(t, outbox.Status(sha(1), "apply", "pending", "applying", ""), outbox.Status(sha(2), "plan", "success", "ok", ""))
	e.flush(t)
	equal(t, "statuses", e.states(sha(1)), []string{"fleet-agent/apply=pending:applying", "fleet-agent/apply=success:applied"})
	// The newer version went next, in the replaced entry's place.
	equal(t, "posts", e.posts(), []string{statusPath(sha(1)), statusPath(sha(1)), statusPath(sha(2))})
}

func TestRunWakesOnEnqueueAndHonoursHolds(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- e.ob.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	depth := func(n int) func() bool {
		return func() bool { d, err := e.ob.Depth(); return err == nil && d == n }
	}

	// Woken by the commit: the clock never moves.
	e.add(t, outbox.Status(sha(1), "plan", "success", "ok", ""))
	eventually(t, "delivery on wake", depth(0))
	equal(t, "statuses", e.states(sha(1)), []string{"fleet-agent/plan=success:ok"})

	// Held by the rate limit: waking does not send.
	e.emu.SetRateBudget(0)
	reset := e.emu.RateReset()
	e.add(t, outbox.Status(sha(2), "plan", "success", "two", ""))
	eventually(t, "the hold", func() bool { return e.ob.Stats().HeldUntil.Equal(reset) })
	sent := len(e.emu.Requests())
	e.add(t, outbox.Status(sha(3), "plan", "success", "three", ""))
	e.clk.Advance(30 * time.Minute)
	time.Sleep(20 * time.Millisecond)
	if n := len(e.emu.Requests()); n != sent {
		t.Fatalf("%d requests while held, want %d", n, sent)
	}
	e.clk.Advance(reset.Sub(e.clk.Now()))
	eventually(t, "delivery after the reset", depth(0))
	equal(t, "statuses 2", e.states(sha(2)), []string{"fleet-agent/plan=success:two"})
	equal(t, "statuses 3", e.states(sha(3)), []string{"fleet-agent/plan=success:three"})
	got := e.posts()
	equal(t, "order", got[len(got)-2:], []string{statusPath(sha(2)), statusPath(sha(3))})
}

// The agent uses the outbox and must never reach go-github: the outbox
// declares its Sender and does not import the forge.
func TestOutboxDoesNotImportTheForge(t *testing.T) {
	out, err := exec.CommandContext(t.Context(), "go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatal(err)
	}
	for dep := range strings.FieldsSeq(string(out)) {
		if strings.Contains(dep, "go-github") || strings.HasSuffix(dep, "/internal/forge") {
			t.Errorf("internal/outbox depends on %s", dep)
		}
	}
}
