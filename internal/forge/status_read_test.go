package forge_test

import (
	"fmt"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/forge"
	"github.com/fleet-agent/fleet-agent/internal/forge/githubemu"
)

func TestLatestStatusAndPoster(t *testing.T) {
	e := newEnv(t, githubemu.Options{})
	ctx := t.Context()
	e.repo.AddCommit(sha(1))
	p := e.forge.Poster()

	if _, found, err := e.forge.LatestStatus(ctx, sha(1), forge.ContextApply); err != nil || found {
		t.Fatalf("no status yet: found %v, %v", found, err)
	}
	// 150 statuses of another context, then ours, then 120 more of the
	// other: the newest of ours is on the second page.
	for i := range 150 {
		if err := p.SetStatus(ctx, sha(1), forge.ContextPlan, forge.StateSuccess, fmt.Sprint("plan ", i), ""); err != nil {
			t.Fatal(err)
		}
	}
	long := ""
	for range 200 {
		long += "é"
	}
	if err := p.SetStatus(ctx, sha(1), forge.ContextApply, forge.StatePending, "applying", ""); err != nil {
		t.Fatal(err)
	}
	if err := p.SetStatus(ctx, sha(1), forge.ContextApply, forge.StateSuccess, long, "https://ci/1"); err != nil {
		t.Fatal(err)
	}
	for i := range 120 {
		if err := p.SetStatus(ctx, sha(1), forge.ContextPlan, forge.StateSuccess, fmt.Sprint("again ", i), ""); err != nil {
			t.Fatal(err)
		}
	}
	got, found, err := e.forge.LatestStatus(ctx, sha(1), forge.ContextApply)
	want := forge.Status{Context: forge.ContextApply, State: forge.StateSuccess, Description: forge.CutDescription(long), TargetURL: "https://ci/1"}
	if err != nil || !found || got != want {
		t.Fatalf("latest = %+v %v %v, want %+v", got, found, err, want)
	}

	cases := []struct {
		name                string
		state, desc, target string
		want                bool
	}{
		{"identical (the description as it was cut)", forge.StateSuccess, long, "https://ci/1", true},
		{"an older one", forge.StatePending, "applying", "", false},
		{"another target", forge.StateSuccess, long, "", false},
	}
	for _, c := range cases {
		is, err := p.StatusIsLatest(ctx, sha(1), forge.ContextApply, c.state, c.desc, c.target)
		if err != nil || is != c.want {
			t.Errorf("%s: %v %v, want %v", c.name, is, err, c.want)
		}
	}

	// A status found as latest is remembered: setting it is free.
	e2 := e.restart(t).Poster()
	if is, err := e2.StatusIsLatest(ctx, sha(1), forge.ContextApply, forge.StateSuccess, long, "https://ci/1"); err != nil || !is {
		t.Fatal(is, err)
	}
	e.emu.ResetLog()
	if err := e2.SetStatus(ctx, sha(1), forge.ContextApply, forge.StateSuccess, long, "https://ci/1"); err != nil {
		t.Fatal(err)
	}
	if n := len(e.emu.Requests()); n != 0 {
		t.Errorf("%d requests for a status known to be the latest", n)
	}

	// Errors keep their class, and ClassName says it.
	_, _, err = e.forge.LatestStatus(ctx, sha(99), forge.ContextApply)
	if fe := classOf(t, err); fe.Class != forge.ClassValidation || fe.ClassName() != "validation" {
		t.Errorf("unknown commit: %v", err)
	}
	e.emu.SetOutage(true)
	_, err = p.StatusIsLatest(ctx, sha(1), forge.ContextApply, forge.StateSuccess, "x", "")
	if fe := classOf(t, err); fe.ClassName() != "network" || !fe.Retryable() {
		t.Errorf("outage: %v", err)
	}
}
