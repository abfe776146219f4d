package outbox

import (
	"errors"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/forge"
)

// The error policy per class, on the forge's own errors: the outbox knows
// the classes by their words only, so this ties the words to the forge.
func TestPolicyPerForgeClass(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	o := New(nil, nil, Options{})
	type want struct {
		drop      bool
		hold      time.Duration // from now
		maybeDone bool
	}
	// c is a case: class, the Until hint from now, this failure's number,
	// the credential and content-limit failures before it, and the verdict.
	type c struct {
		class    forge.Class
		until    time.Duration
		attempts int
		auth     int
		limit    int
		want     want
	}
	cases := []c{
		{forge.ClassRateLimited, 40 * time.Minute, 1, 0, 0, want{hold: 40 * time.Minute}},
		{forge.ClassSecondaryRateLimited, 90 * time.Second, 1, 0, 0, want{hold: 90 * time.Second}},
		{forge.ClassSecondaryRateLimited, 1 * time.Second, 4, 0, 0, want{hold: 16 * time.Second}},
		{forge.ClassServer, 30 * time.Second, 1, 0, 0, want{hold: 30 * time.Second, maybeDone: true}},
		{forge.ClassServer, 30 * time.Second, 7, 0, 0, want{hold: 128 * time.Second, maybeDone: true}},
		{forge.ClassNetwork, 30 * time.Second, 20, 0, 0, want{hold: 5 * time.Minute, maybeDone: true}},
		{forge.ClassUnauthorized, 0, 1, 0, 0, want{hold: 2 * time.Second}},
		{forge.ClassUnauthorized, 0, 8, 7, 0, want{hold: 256 * time.Second}},
		{forge.ClassUnauthorized, 0, DefaultAuthAttempts - 1, DefaultAuthAttempts - 2, 0, want{hold: 5 * time.Minute}},
		{forge.ClassUnauthorized, 0, DefaultAuthAttempts, DefaultAuthAttempts - 1, 0, want{drop: true}},
		// After a long outage, one 401 is one credential failure.
		{forge.ClassUnauthorized, 0, 30, 0, 0, want{hold: 5 * time.Minute}},
		{forge.ClassCredentials, 0, 2, 1, 0, want{hold: 4 * time.Second}},
		{forge.ClassForbidden, 0, 1, 0, 0, want{drop: true}},
		{forge.ClassNotFound, 0, 1, 0, 0, want{drop: true}},
		{forge.ClassValidation, 0, 1, 0, 0, want{drop: true}},
		{forge.ClassUnexpected, 0, 1, 0, 0, want{drop: true}},
		// GitHub's content limit: a minute, then the backoff, never
		// maybe done; dropped at the last attempt only.
		{forge.ClassContentLimited, time.Minute, 1, 0, 0, want{hold: time.Minute}},
		{forge.ClassContentLimited, time.Minute, 9, 0, 8, want{hold: 5 * time.Minute}},
		{forge.ClassContentLimited, time.Minute, 30, 0, DefaultContentLimitAttempts - 2, want{hold: 5 * time.Minute}},
		{forge.ClassContentLimited, time.Minute, 30, 0, DefaultContentLimitAttempts - 1, want{drop: true}},
	}
	for _, c := range cases {
		fe := &forge.Error{Class: c.class, Op: "test"}
		if c.until != 0 {
			fe.Until = now.Add(c.until)
		}
		v := o.judge(fe, c.attempts, c.auth, c.limit, now)
		got := want{drop: v.drop, maybeDone: v.maybeDone}
		if !v.drop {
			got.hold = v.until.Sub(now)
		}
		if got != c.want {
			t.Errorf("%s, failure %d (%d of the credential): %+v, want %+v", c.class, c.attempts, c.auth, got, c.want)
		}
	}
	// An error that says nothing of itself is retried, and maybe done.
	if v := o.judge(errors.New("boom"), 1, 0, 0, now); v.drop || !v.maybeDone || v.until != now.Add(2*time.Second) {
		t.Errorf("unknown error: %+v", v)
	}
}
