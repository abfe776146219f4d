package gitsync

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

func TestFirstSyncNewCommitIdleAndRestart(t *testing.T) {
	e := newEnv(t)
	c1 := e.commit(t, "first", map[string]string{"fleet.json": `{"version":1}`})
	e.work.Push(t, "main")

	r := e.open(t)
	if got := r.Last().Tip; got != "" {
		t.Fatalf("tip before the first poll = %q, want none", got)
	}
	s := mustPoll(t, r)
	if s.Tip != c1 || s.Branch != "refs/heads/main" || !s.Fetched {
		t.Fatalf("first sync: %+v, want tip %s fetched", s, c1)
	}
	if ch := changesOf(s)["refs/heads/main"]; ch.Kind != Added || ch.New != c1 {
		t.Fatalf("first sync changes = %+v, want main added", s.Changes)
	}
	if got, err := r.ReadFile(c1, "fleet.json"); err != nil || string(got) != `{"version":1}` {
		t.Fatalf("ReadFile = %q, %v", got, err)
	}
	info, err := r.Commit(c1)
	if err != nil || info.Message != "first\n" || info.Author.Name != "Test Author" || info.Committer.Email != "committer@example.com" || info.Author.When.Unix() != 1767225660 || info.Signed {
		t.Fatalf("Commit = %+v, %v", info, err)
	}

	// Nothing moved: one ref advertisement, no object negotiation.
	e.srv.Reset()
	s = mustPoll(t, r)
	if c := e.srv.Counts(); c.InfoRefs != 1 || c.UploadPack != 0 {
		t.Fatalf("idle poll made %+v, want 1 info/refs and 0 upload-pack", c)
	}
	if len(s.Changes) != 0 || s.Fetched || s.Tip != c1 {
		t.Fatalf("idle poll: %+v, want no change", s)
	}

	c2 := e.commit(t, "second", map[string]string{"fleet.json": `{"version":1,"sites":[]}`})
	e.work.Push(t, "main")
	e.srv.Reset()
	s = mustPoll(t, r)
	ch := changesOf(s)["refs/heads/main"]
	if s.Tip != c2 || ch.Kind != Moved || ch.Old != c1 || ch.New != c2 || !ch.FastForward || len(s.Changes) != 1 {
		t.Fatalf("after a new commit: %+v", s)
	}
	if c := e.srv.Counts(); c.UploadPack != 1 {
		t.Fatalf("new commit fetched with %d upload-pack requests, want 1", c.UploadPack)
	}
	if err := r.CheckForward(c1, c2); err != nil {
		t.Fatalf("CheckForward(c1, c2) = %v", err)
	}

	// A restart keeps the copy: the last refs are known without the network
	// and the first poll fetches nothing.
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	r2 := e.open(t)
	if got := r2.Last().Tip; got != c2 {
		t.Fatalf("tip after restart = %q, want %s", got, c2)
	}
	e.srv.Reset()
	s = mustPoll(t, r2)
	if c := e.srv.Counts(); c.UploadPack != 0 || len(s.Changes) != 0 {
		t.Fatalf("poll after restart: %+v changes, %+v requests; want nothing", s.Changes, c)
	}
}

func TestPullRequestRefsAppearMoveAndGo(t *testing.T) {
	e := newEnv(t)
	base := e.commit(t, "base", map[string]string{"fleet.json": `{"version":1}`})
	e.work.Push(t, "main")
	e.work.Git(t, "checkout", "--quiet", "-b", "feature")
	h1 := e.commit(t, "propose", map[string]string{"fleet.json": `{"version":1,"pools":[]}`})
	e.work.Push(t, "feature")
	e.remo.UpdateRef(t, "refs/pull/1/head", h1)

	e.cfg.Want = Patterns("refs/pull/*/head")
	r := e.open(t)
	s := mustPoll(t, r)
	if s.Heads["refs/pull/1/head"] != h1 || len(s.Heads) != 1 {
		t.Fatalf("heads = %v, want only refs/pull/1/head at %s (refs/heads/feature is not wanted)", s.Heads, h1)
	}
	if got, err := r.MergeBase(h1, s.Tip); err != nil || got != base {
		t.Fatalf("MergeBase = %q, %v; want %s", got, err, base)
	}
	if got, err := r.ReadFile(h1, "fleet.json"); err != nil || !strings.Contains(string(got), "pools") {
		t.Fatalf("ReadFile(head) = %q, %v", got, err)
	}

	// The head moves.
	h2 := e.commit(t, "fix", map[string]string{"fleet.json": `{"version":1,"pools":[{}]}`})
	e.work.Push(t, "feature")
	e.remo.UpdateRef(t, "refs/pull/1/head", h2)
	s = mustPoll(t, r)
	if ch := changesOf(s)["refs/pull/1/head"]; ch.Kind != Moved || ch.Old != h1 || ch.New != h2 || !ch.FastForward || len(s.Changes) != 1 {
		t.Fatalf("moved head: %+v", s.Changes)
	}

	// A second pull request on a commit the copy already has: no fetch.
	e.remo.UpdateRef(t, "refs/pull/2/head", base)
	e.srv.Reset()
	s = mustPoll(t, r)
	if ch := changesOf(s)["refs/pull/2/head"]; ch.Kind != Added || ch.New != base {
		t.Fatalf("second head: %+v", s.Changes)
	}
	if c := e.srv.Counts(); c.UploadPack != 0 || s.Fetched {
		t.Fatalf("a head on a known commit made %d upload-pack requests", c.UploadPack)
	}

	// Pull request 1 is closed: GitHub deletes nothing, the caller stops
	// wanting it. Pull request 2's ref disappears.
	r.SetWant(Patterns("refs/pull/2/head"))
	e.remo.DeleteRef(t, "refs/pull/2/head")
	s = mustPoll(t, r)
	got := changesOf(s)
	if got["refs/pull/1/head"].Kind != Removed || got["refs/pull/2/head"].Kind != Removed || len(s.Heads) != 0 {
		t.Fatalf("closed and deleted heads: changes %+v, heads %v", s.Changes, s.Heads)
	}
	if _, err := os.Stat(filepath.Join(e.cfg.Dir, "refs", "pull")); !os.IsNotExist(err) {
		t.Fatalf("refs/pull is still in the local copy (%v); dropped refs must leave nothing", err)
	}
	packed, _ := os.ReadFile(filepath.Join(e.cfg.Dir, "packed-refs"))
	if strings.Contains(string(packed), "refs/pull/") {
		t.Fatalf("packed-refs still lists pull refs:\n%s", packed)
	}
	// And a restart does not bring them back.
	_ = r.Close()
	if heads := e.open(t).Last().Heads; len(heads) != 0 {
		t.Fatalf("heads after restart = %v", heads)
	}
}

func TestForcePushIsARewind(t *testing.T) {
	e := newEnv(t)
	a := e.commit(t, "a", map[string]string{"fleet.json": `{"version":1}`})
	b := e.commit(t, "b", map[string]string{"fleet.json": `{"version":1,"x":1}`})
	e.work.Push(t, "main")
	r := e.open(t)
	mustPoll(t, r)
	if err := r.CheckForward(a, b); err != nil {
		t.Fatalf("CheckForward(a, b) = %v", err)
	}

	e.work.Git(t, "reset", "--quiet", "--hard", a)
	c := e.commit(t, "rewritten", map[string]string{"fleet.json": `{"version":1,"y":2}`})
	e.work.Push(t, "+main")
	s := mustPoll(t, r)
	ch := changesOf(s)["refs/heads/main"]
	if s.Tip != c || ch.Kind != Moved || ch.Old != b || ch.FastForward {
		t.Fatalf("after force-push: tip %s, change %+v; want a move that is not a fast-forward", s.Tip, ch)
	}
	wantErr(t, r.CheckForward(b, c), ErrRewind, refusal.InvalidState)
	if ok, err := r.Descends(c, a); err != nil || !ok {
		t.Fatalf("Descends(c, a) = %v, %v", ok, err)
	}
	if ok, err := r.Descends(a, c); err != nil || ok {
		t.Fatalf("Descends(a, c) = %v, %v", ok, err)
	}
	// The document at the rewritten tip reads fine; applying it is the
	// caller's refusal to make.
	if got, err := r.ReadFile(c, "fleet.json"); err != nil || !strings.Contains(string(got), `"y"`) {
		t.Fatalf("ReadFile(c) = %q, %v", got, err)
	}
}

func TestDeletedBranches(t *testing.T) {
	e := newEnv(t)
	c1 := e.commit(t, "base", map[string]string{"fleet.json": `{}`})
	e.work.Push(t, "main")
	e.work.Git(t, "checkout", "--quiet", "-b", "proposal/one")
	p := e.commit(t, "proposal", map[string]string{"fleet.json": `{"p":1}`})
	e.work.Push(t, "proposal/one")
	e.cfg.Want = Patterns("refs/heads/*")
	r := e.open(t)
	s := mustPoll(t, r)
	if s.Heads["refs/heads/proposal/one"] != p || len(s.Heads) != 1 {
		t.Fatalf("proposals = %v, want refs/heads/proposal/one (and not main)", s.Heads)
	}

	e.work.Git(t, "push", "--quiet", "origin", "--delete", "proposal/one")
	s = mustPoll(t, r)
	if ch := changesOf(s)["refs/heads/proposal/one"]; ch.Kind != Removed || ch.Old != p || len(s.Heads) != 0 {
		t.Fatalf("deleted proposal: %+v", s.Changes)
	}

	// Deleting the followed branch is reported, and the last tip is kept.
	e.remo.DeleteRef(t, "refs/heads/main")
	_, err := r.Poll(t.Context())
	wantErr(t, err, ErrBranchMissing, refusal.InvalidState)
	if got := r.Last().Tip; got != c1 {
		t.Fatalf("tip after the branch went = %q, want the last known %s", got, c1)
	}
	if h := r.Health(); !h.RetryAt.IsZero() {
		t.Fatalf("a missing branch is not a failing remote, but polling backs off until %v", h.RetryAt)
	}
}

func TestReadFileRefusals(t *testing.T) {
	e := newEnv(t)
	e.work.Write(t, "ok.json", strings.Repeat("a", 100))
	e.work.Write(t, "big.json", strings.Repeat("a", 101))
	e.work.Write(t, "dir.json/inner", "x")
	if err := os.Symlink("ok.json", filepath.Join(e.work.Dir, "link.json")); err != nil {
		t.Fatal(err)
	}
	c := e.work.CommitAll(t, "files")
	e.work.Push(t, "main")
	e.cfg.MaxFileBytes = 100
	r := e.open(t)
	mustPoll(t, r)

	if got, err := r.ReadFile(c, "ok.json"); err != nil || len(got) != 100 {
		t.Fatalf("a file of exactly the limit: %d bytes, %v", len(got), err)
	}
	for _, tc := range []struct {
		path     string
		sentinel error
		code     refusal.Code
	}{
		{"missing.json", ErrFileMissing, refusal.InvalidInput},
		{"nodir/fleet.json", ErrFileMissing, refusal.InvalidInput},
		{"big.json", ErrFileTooLarge, refusal.InvalidInput},
		{"dir.json", ErrNotAFile, refusal.InvalidInput},
		{"link.json", ErrNotAFile, refusal.InvalidInput},
		{"../fleet.json", ErrConfig, refusal.InvalidInput},
	} {
		t.Run(tc.path, func(t *testing.T) {
			_, err := r.ReadFile(c, tc.path)
			wantErr(t, err, tc.sentinel, tc.code)
			if tc.sentinel != ErrConfig && !strings.Contains(err.Error(), c) {
				t.Fatalf("error %q does not name the commit", err)
			}
		})
	}
	_, err := r.ReadFile(strings.Repeat("ab", 20), "ok.json")
	wantErr(t, err, ErrUnknownCommit, refusal.InvalidState)
	if full, err := r.Resolve(c[:8]); err != nil || full != c {
		t.Fatalf("Resolve(%s) = %q, %v", c[:8], full, err)
	}
}

func TestCredentialsRefused(t *testing.T) {
	e := newEnv(t)
	e.commit(t, "base", map[string]string{"fleet.json": `{}`})
	e.work.Push(t, "main")

	e.store[tokenRef] = "wrong"
	r := e.open(t)
	_, err := r.Poll(t.Context())
	wantErr(t, err, ErrAuth, refusal.InvalidState)
	if e.srv.Counts().Unauthorized == 0 {
		t.Fatal("the server saw no refused request: the test did not reach it")
	}
	if strings.Contains(err.Error(), "wrong") {
		t.Fatalf("the error repeats the secret: %q", err)
	}

	e2 := newEnv(t)
	e2.cfg.Auth = Auth{Username: "x-access-token", Password: "secret://missing"}
	r2 := e2.open(t)
	_, err = r2.Poll(t.Context())
	wantErr(t, err, ErrSecret, refusal.InvalidState)

	e3 := newEnv(t)
	e3.cfg.URL = e3.srv.URL() + "/nope.git"
	_, err = e3.open(t).Poll(t.Context())
	wantErr(t, err, ErrNotFound, refusal.InvalidState)
}

func TestServerDownBacksOffAndKeepsLastState(t *testing.T) {
	e := newEnv(t)
	c1 := e.commit(t, "base", map[string]string{"fleet.json": `{"v":1}`})
	e.work.Push(t, "main")
	e.cfg.BackoffMin, e.cfg.BackoffMax = 5*time.Second, 12*time.Second
	r := e.open(t)
	mustPoll(t, r)

	e.srv.Down()
	_, err := r.Poll(t.Context())
	wantErr(t, err, ErrUnreachable, refusal.Unavailable)
	h := r.Health()
	if h.Failures != 1 || !h.RetryAt.Equal(epoch.Add(5*time.Second)) || h.LastSuccess != epoch {
		t.Fatalf("health after one failure = %+v", h)
	}
	// The last good state stays readable.
	if r.Last().Tip != c1 {
		t.Fatalf("last tip lost: %+v", r.Last())
	}
	if got, err := r.ReadFile(c1, "fleet.json"); err != nil || string(got) != `{"v":1}` {
		t.Fatalf("ReadFile while down = %q, %v", got, err)
	}

	// Within the backoff nothing is sent.
	e.srv.Up(t)
	e.srv.Reset()
	_, err = r.Poll(t.Context())
	wantErr(t, err, ErrBackoff, refusal.Unavailable)
	if c := e.srv.Counts(); c.InfoRefs != 0 {
		t.Fatalf("polled during backoff: %+v", c)
	}
	e.srv.Down()

	// Doubling, capped.
	for i, want := range []time.Duration{10 * time.Second, 12 * time.Second, 12 * time.Second} {
		e.clk.Advance(r.Health().RetryAt.Sub(e.clk.Now()))
		if _, err := r.Poll(t.Context()); !errorsIs(err, ErrUnreachable) {
			t.Fatalf("failure %d: %v", i+2, err)
		}
		if got := r.Health().RetryAt.Sub(e.clk.Now()); got != want {
			t.Fatalf("backoff after failure %d = %v, want %v", i+2, got, want)
		}
	}

	// Back up, with a commit made meanwhile.
	c2 := e.commit(t, "meanwhile", map[string]string{"fleet.json": `{"v":2}`})
	e.work.Push(t, "main")
	e.srv.Up(t)
	e.clk.Advance(12 * time.Second)
	s := mustPoll(t, r)
	if s.Tip != c2 || changesOf(s)["refs/heads/main"].Old != c1 {
		t.Fatalf("after recovery: %+v", s)
	}
	if h := r.Health(); h.Failures != 0 || !h.RetryAt.IsZero() || h.LastError != nil || !h.LastSuccess.Equal(e.clk.Now()) {
		t.Fatalf("health after recovery = %+v", h)
	}
}

func TestHangingServerTimesOut(t *testing.T) {
	e := newEnv(t)
	e.commit(t, "base", map[string]string{"fleet.json": `{}`})
	e.work.Push(t, "main")
	e.cfg.ListTimeout = 300 * time.Millisecond
	r := e.open(t)
	e.srv.Hang(true)
	defer e.srv.Hang(false)
	start := time.Now()
	_, err := r.Poll(t.Context())
	wantErr(t, err, ErrTimeout, refusal.Unavailable)
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the deadline of 300ms took %v", d)
	}
}

func TestConfigRefusals(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"no url", Config{Dir: dir}},
		{"no dir", Config{URL: "https://example.com/x.git"}},
		{"ssh without knownHosts", Config{Dir: dir, URL: "git@example.com:acme/fleet.git", Auth: Auth{SSHKey: "secret://k"}, Secrets: mapResolver{}}},
		{"ssh without key", Config{Dir: dir, URL: "ssh://git@example.com/acme/fleet.git", Auth: Auth{KnownHosts: "/k"}}},
		{"token without resolver", Config{Dir: dir, URL: "https://example.com/x.git", Auth: Auth{Token: "env://T"}}},
		{"password without user", Config{Dir: dir, URL: "https://example.com/x.git", Auth: Auth{Password: "env://T"}, Secrets: mapResolver{}}},
		{"branch as ref", Config{Dir: dir, URL: "https://example.com/x.git", Branch: "refs/heads/main"}},
		{"unknown scheme", Config{Dir: dir, URL: "ftp://example.com/x.git"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Open(tc.cfg)
			wantErr(t, err, ErrConfig, refusal.InvalidInput)
		})
	}
}

func TestKindCodes(t *testing.T) {
	for k, want := range map[Kind]refusal.Code{
		KindUnreachable: refusal.Unavailable, KindTimeout: refusal.Unavailable, KindBackoff: refusal.Unavailable,
		KindAuth: refusal.InvalidState, KindNotFound: refusal.InvalidState, KindHostKey: refusal.InvalidState,
		KindRewind: refusal.InvalidState, KindUnsigned: refusal.InvalidState, KindUnknownKey: refusal.InvalidState,
		KindBadSignature: refusal.InvalidState, KindFileMissing: refusal.InvalidInput, KindNotAFile: refusal.InvalidInput,
		KindFileTooLarge: refusal.InvalidInput, KindConfig: refusal.InvalidInput, KindLocal: refusal.Internal,
	} {
		if got := k.Code(); got != want {
			t.Errorf("%s maps to %s, want %s", k, got, want)
		}
	}
}

func TestRepackDropsWhatNoRefReaches(t *testing.T) {
	e := newEnv(t)
	e.commit(t, "base", map[string]string{"fleet.json": `{}`})
	e.work.Push(t, "main")
	e.cfg.Want = Patterns("refs/pull/*/head")
	e.cfg.MaxPacks = 3
	r := e.open(t)
	mustPoll(t, r)

	pr := func(n, content string) string {
		e.work.Git(t, "checkout", "--quiet", "-B", "pr"+n, "main")
		h := e.commit(t, "pr "+n, map[string]string{"fleet.json": content})
		e.work.Push(t, "+pr"+n)
		e.remo.UpdateRef(t, "refs/pull/"+n+"/head", h)
		return h
	}
	closed := pr("1", `{"closed":true}`)
	pinned := pr("2", `{"pinned":true}`)
	mustPoll(t, r)
	if n, _ := r.Packs(); n != 2 {
		t.Fatalf("packs = %d, want 2 (one per fetch)", n)
	}
	if err := r.Pin("applied", pinned); err != nil {
		t.Fatal(err)
	}
	e.remo.DeleteRef(t, "refs/pull/1/head")
	e.remo.DeleteRef(t, "refs/pull/2/head")
	open := pr("3", `{"open":true}`)
	mustPoll(t, r) // third pack: repack

	if n, _ := r.Packs(); n != 1 {
		t.Fatalf("packs after reaching MaxPacks = %d, want 1", n)
	}
	_, err := r.Commit(closed)
	wantErr(t, err, ErrUnknownCommit, refusal.InvalidState)
	for _, h := range []string{pinned, open, r.Last().Tip} {
		if _, err := r.ReadFile(h, "fleet.json"); err != nil {
			t.Fatalf("a kept commit %s lost its document: %v", h, err)
		}
	}
	if err := r.Unpin("applied"); err != nil {
		t.Fatal(err)
	}
}

func errorsIs(err, target error) bool { return errors.Is(err, target) }
