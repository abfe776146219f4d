package outbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/forge"
	"github.com/fleet-agent/fleet-agent/internal/forge/githubemu"
	"github.com/fleet-agent/fleet-agent/internal/outbox"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/state/statetest"
)

var epoch = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

const token = "ghp_outbox_test_token"

// tokens is the forge's Resolver: the token is read at each request, so a
// test can rotate it.
type tokens struct {
	mu    sync.Mutex
	value string
}

func (r *tokens) Resolve(context.Context, string) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.value, nil
}

func (r *tokens) set(v string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.value = v
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// env is a state file, the GitHub emulator, a real forge client on a fake
// clock, and an outbox over them. restart builds all but the emulator again.
type env struct {
	clk   *clock.Fake
	emu   *githubemu.Server
	repo  *githubemu.Repo
	tok   *tokens
	path  string
	logs  *syncBuffer
	opts  outbox.Options
	wrap  func(outbox.Sender) outbox.Sender
	trans http.RoundTripper

	store *state.Store
	gh    *forge.GitHub
	ob    *outbox.Outbox
}

func sha(i int) string { return fmt.Sprintf("%040x", i) }

func newEnv(t *testing.T) *env {
	t.Helper()
	clk := clock.NewFake(epoch)
	e := &env{clk: clk, emu: githubemu.New(t, githubemu.Options{Clock: clk}), tok: &tokens{value: token},
		path: filepath.Join(t.TempDir(), "fleet.db"), logs: &syncBuffer{}}
	e.emu.AddToken(token, "fleet-bot")
	e.repo = e.emu.Repo("acme/fleet")
	for i := 1; i <= 3; i++ {
		e.repo.OpenPR(githubemu.PR{HeadSHA: sha(i)})
	}
	for i := 1; i <= 9; i++ {
		e.repo.AddCommit(sha(i))
	}
	// No spacing between sends: these tests drain the queue with Flush on
	// a clock that moves only when told to. spacing_test.go keeps it.
	e.opts = outbox.Options{Clock: clk, Log: zerolog.New(e.logs).Level(zerolog.DebugLevel), MinSpacing: outbox.NoSpacing}
	e.open(t)
	return e
}

// open opens the state file and builds a new forge and outbox: nothing in
// memory survives from before.
func (e *env) open(t *testing.T) {
	t.Helper()
	e.store = statetest.OpenAt(t, e.path)
	g, err := forge.New(forge.Config{Repository: "acme/fleet", APIURL: e.emu.URL(), Token: "env://GITHUB_TOKEN",
		Resolver: e.tok, Clock: e.clk, Transport: e.trans})
	if err != nil {
		t.Fatal(err)
	}
	e.gh = g
	var s outbox.Sender = g.Poster()
	if e.wrap != nil {
		s = e.wrap(s)
	}
	e.ob = outbox.New(e.store, s, e.opts)
}

// restart closes the state file as a stopped process would and opens it
// again with a new forge and outbox.
func (e *env) restart(t *testing.T) {
	t.Helper()
	if err := e.store.Close(); err != nil {
		t.Fatal(err)
	}
	e.open(t)
}

func (e *env) add(t *testing.T, posts ...outbox.Post) {
	t.Helper()
	if err := e.ob.Add(posts...); err != nil {
		t.Fatal(err)
	}
}

func (e *env) flush(t *testing.T) {
	t.Helper()
	if err := e.ob.Flush(t.Context()); err != nil {
		t.Fatalf("flush: %v", err)
	}
	e.depth(t, 0)
}

// held flushes and wants the queue held.
func (e *env) held(t *testing.T) *outbox.HeldError {
	t.Helper()
	err := e.ob.Flush(t.Context())
	var h *outbox.HeldError
	if !errors.As(err, &h) || !errors.Is(err, outbox.ErrHeld) {
		t.Fatalf("flush: want the queue held, got %v", err)
	}
	return h
}

func (e *env) depth(t *testing.T, want int) {
	t.Helper()
	n, err := e.ob.Depth()
	if err != nil {
		t.Fatal(err)
	}
	if n != want {
		t.Fatalf("depth %d, want %d", n, want)
	}
}

func (e *env) queued(t *testing.T) []outbox.Entry {
	t.Helper()
	var q []outbox.Entry
	if err := e.store.View(func(tx *state.Tx) error {
		var err error
		q, err = outbox.Queued(tx)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return q
}

// posts are the requests that change something (not GETs), as
// "METHOD path" lines.
func (e *env) posts() []string {
	var out []string
	for _, r := range e.emu.Requests() {
		if r.Method != http.MethodGet {
			out = append(out, r.Method+" "+r.Path)
		}
	}
	return out
}

func statusPath(s string) string { return "POST /repos/acme/fleet/statuses/" + s }

func commentPath(pr int) string { return fmt.Sprintf("POST /repos/acme/fleet/issues/%d/comments", pr) }

// states is the list of "context=state:description" set on a commit, oldest
// first.
func (e *env) states(s string) []string {
	var out []string
	for _, st := range e.repo.Statuses(s) {
		out = append(out, st.Context+"="+st.State+":"+st.Description)
	}
	return out
}

// comments is the list of "body (edits)" on a pull request, oldest first.
func (e *env) comments(pr int) []string {
	var out []string
	for _, c := range e.repo.Comments(pr) {
		out = append(out, fmt.Sprintf("%s (%d)", c.Body, c.Edits))
	}
	return out
}

func equal(t *testing.T, what string, got, want []string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("%s:\n got %q\nwant %q", what, got, want)
	}
}

// eventually polls cond in real time: for Run, which works in its own
// goroutine.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
