package gitsync

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/testutil/gitserver"
)

// mapResolver is the test's secret store.
type mapResolver map[string]string

func (m mapResolver) Resolve(_ context.Context, ref string) (string, error) {
	v, ok := m[ref]
	if !ok {
		return "", errors.New("no secret " + ref)
	}
	return v, nil
}

const tokenRef = "secret://git-token"

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// env is one remote with a working copy to make commits and a config that
// points gitsync at it over http.
type env struct {
	srv   *gitserver.Server
	remo  *gitserver.Repo
	work  *gitserver.Work
	clk   *clock.Fake
	cfg   Config
	store mapResolver
}

func newEnv(t *testing.T) *env {
	t.Helper()
	srv := gitserver.Start(t)
	remo := srv.NewRepo(t, "fleet")
	e := &env{srv: srv, remo: remo, work: remo.Clone(t), clk: clock.NewFake(epoch)}
	e.store = mapResolver{tokenRef: srv.Password}
	e.cfg = Config{
		URL:     remo.URL,
		Auth:    Auth{Token: tokenRef},
		Secrets: e.store,
		Dir:     t.TempDir(),
		Clock:   e.clk,
	}
	return e
}

// commit writes files and commits them on the working copy's current
// branch; it does not push.
func (e *env) commit(t *testing.T, msg string, files map[string]string) string {
	t.Helper()
	for p, c := range files {
		e.work.Write(t, p, c)
	}
	return e.work.CommitAll(t, msg)
}

func (e *env) open(t *testing.T) *Repo {
	t.Helper()
	r, err := Open(e.cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

func mustPoll(t *testing.T, r *Repo) Snapshot {
	t.Helper()
	s, err := r.Poll(t.Context())
	if err != nil {
		t.Fatalf("Poll: %v", err)
	}
	return s
}

// wantErr checks that err is of kind k with the refusal code k maps onto.
func wantErr(t *testing.T, err error, sentinel error, code refusal.Code) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %v", sentinel)
	}
	if !errors.Is(err, sentinel) {
		t.Fatalf("error %q is not %v", err, sentinel)
	}
	if got := refusal.CodeOf(err); got != code {
		t.Fatalf("error %q has code %s, want %s", err, got, code)
	}
}

func changesOf(s Snapshot) map[string]Change {
	m := map[string]Change{}
	for _, c := range s.Changes {
		m[c.Ref] = c
	}
	return m
}

// eventually polls cond with a real deadline; only for what the injected
// clock cannot drive (fsnotify, goroutines reaching a select).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
