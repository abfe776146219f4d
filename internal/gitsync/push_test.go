package gitsync

import (
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

func TestPushBranchWritesOnlyTheFileAndDeletes(t *testing.T) {
	e := newEnv(t)
	tip := e.commit(t, "first", map[string]string{"deploy/fleet.json": "{ \"version\":1 }\n", "README": "hi\n"})
	e.work.Push(t, "HEAD:refs/heads/main")
	r := e.open(t)
	mustPoll(t, r)
	c, err := r.CommitFile(tip, "deploy/fleet.json", []byte("{ \"version\":2 }\n"), "drift", Person{Name: "fleet-agent", Email: "fleet-agent@localhost"}, epoch)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.PushBranch(t.Context(), "fleet-agent/drift-abc", c); err != nil {
		t.Fatal(err)
	}
	if got := e.remo.Rev(t, "refs/heads/fleet-agent/drift-abc"); got != c {
		t.Fatalf("remote branch at %s, want %s", got, c)
	}
	if got := e.remo.Git(t, "diff", "--stat", tip, c); !strings.Contains(got, "deploy/fleet.json") || strings.Contains(got, "README") {
		t.Fatalf("diff: %s", got)
	}
	if got := e.remo.Git(t, "show", c+":deploy/fleet.json"); got != "{ \"version\":2 }" {
		t.Fatalf("file at the branch: %q", got)
	}
	if got := e.remo.Rev(t, "refs/heads/main"); got != tip {
		t.Fatalf("main moved to %s", got)
	}
	// Deleting twice is fine: the second finds it gone.
	for range 2 {
		if err := r.PushBranch(t.Context(), "fleet-agent/drift-abc", ""); err != nil {
			t.Fatal(err)
		}
	}
	if out := e.remo.Git(t, "for-each-ref", "refs/heads/fleet-agent"); out != "" {
		t.Fatalf("branch not deleted: %s", out)
	}
}

func TestPushNeverWritesTheFollowedBranch(t *testing.T) {
	e := newEnv(t)
	tip := e.commit(t, "first", map[string]string{"fleet.json": "{}\n"})
	e.work.Push(t, "HEAD:refs/heads/main")
	r := e.open(t)
	mustPoll(t, r)
	before := e.srv.Counts().ReceivePack
	for _, b := range []string{"main", "fleet-agent/../main", "other", ""} {
		if err := r.PushBranch(t.Context(), b, tip); !refusal.Is(err, refusal.InvalidInput) {
			t.Fatalf("push to %q: %v", b, err)
		}
	}
	if e.srv.Counts().ReceivePack != before {
		t.Fatal("a refused push reached the server")
	}
}

func TestCanPushTellsReadOnlyApart(t *testing.T) {
	e := newEnv(t)
	e.commit(t, "first", map[string]string{"fleet.json": "{}\n"})
	e.work.Push(t, "HEAD:refs/heads/main")
	r := e.open(t)
	if err := r.CanPush(t.Context()); err != nil {
		t.Fatalf("a writable remote: %v", err)
	}
	e.srv.ReadOnly(true)
	err := r.CanPush(t.Context())
	wantErr(t, err, ErrAuth, refusal.InvalidState)
	if !strings.Contains(err.Error(), "contents: write") || strings.Contains(err.Error(), e.srv.Password) {
		t.Fatalf("advice: %v", err)
	}
}
