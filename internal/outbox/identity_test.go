package outbox_test

import (
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/outbox"
)

// Markers pre-posted by someone else neither take the plan comment nor stop
// the result: the agent's posts are delivered as its own.
func TestForeignMarkersDoNotStopPosts(t *testing.T) {
	e := newEnv(t)
	e.repo.AddComment(1, "mallory", body(plan, "fake plan"))
	e.repo.AddComment(1, "mallory", body(result, "fake result"))
	e.add(t, outbox.Sticky(1, plan, "plan"), outbox.Once(1, result, "applied"))
	e.flush(t)
	equal(t, "comments", e.comments(1), []string{
		body(plan, "fake plan") + " (0)", body(result, "fake result") + " (0)",
		body(plan, "plan") + " (0)", body(result, "applied") + " (0)",
	})
	for _, c := range e.repo.Comments(1)[2:] {
		if c.User != "fleet-bot" {
			t.Errorf("comment %+v", c)
		}
	}
	if s := e.ob.Stats(); s.Delivered != 2 || s.Dropped != 0 {
		t.Errorf("stats %+v", s)
	}
}

// When GitHub cannot say who the agent is, the post waits and is retried; it
// is not dropped, and nothing is posted meanwhile.
func TestIdentityLookupFailureHolds(t *testing.T) {
	e := newEnv(t)
	e.repo.AddComment(1, "mallory", body(result, "fake result"))
	e.emu.Fail5xxNext(1)
	e.add(t, outbox.Once(1, result, "applied"))
	h := e.held(t)
	if !strings.Contains(h.Reason, "GET /user") {
		t.Errorf("held for %q", h.Reason)
	}
	if n := len(e.repo.Comments(1)); n != 1 {
		t.Fatalf("%d comments while the identity is unknown", n)
	}
	e.clk.Advance(h.Until.Sub(e.clk.Now()))
	e.flush(t)
	equal(t, "comments", e.comments(1), []string{body(result, "fake result") + " (0)", body(result, "applied") + " (0)"})
}
