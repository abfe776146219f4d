package outbox_test

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/outbox"
)

func checkPost(i int, state string, n int) outbox.Post {
	var anns []outbox.Annotation
	for j := range n {
		anns = append(anns, outbox.Annotation{Path: "fleet.json", Line: j + 1, Level: "failure", Message: fmt.Sprint(j)})
	}
	return outbox.Check(sha(i), "plan", state, "title "+state, "summary "+state, anns)
}

// Check runs coalesce like statuses (the newest per commit and context) and
// are delivered once, their annotations in batches, across a restart.
func TestCheckRunsCoalesceAndAreDeliveredOnce(t *testing.T) {
	e := newEnv(t)
	e.emu.AddInstallationToken(token, "fleet-agent")
	e.add(t, checkPost(1, "pending", 0), checkPost(1, "failure", 70), checkPost(2, "success", 0))
	e.depth(t, 2)
	e.flush(t)
	runs := e.repo.CheckRuns(sha(1))
	if len(runs) != 1 || runs[0].Conclusion != "failure" || len(runs[0].Annotations) != 70 || runs[0].Requests != 2 {
		t.Fatalf("runs on 1: %+v", runs)
	}
	// The same post after a restart creates nothing.
	e.restart(t)
	e.add(t, checkPost(1, "failure", 70))
	e.flush(t)
	if runs := e.repo.CheckRuns(sha(1)); len(runs) != 1 {
		t.Errorf("%d runs after the same post again", len(runs))
	}
}

// With a user token GitHub refuses check runs: the post is dropped, counted,
// and the queue goes on.
func TestCheckRunWithAUserTokenIsDropped(t *testing.T) {
	e := newEnv(t)
	// Queued as the agent queues them: the status first, in one
	// transaction. The check run's drop does not rewrite the status.
	e.add(t, outbox.Status(sha(1), "plan", "success", "ok", ""), checkPost(1, "success", 0))
	e.flush(t)
	if got := drops(e); got["check/forbidden"] != 1 {
		t.Errorf("drops %v", got)
	}
	statuses := e.repo.Statuses(sha(1))
	if len(statuses) != 1 || statuses[0].Description != "ok" {
		t.Errorf("statuses %+v", statuses)
	}
}

// equal must see every field of a post: coalescing relies on it to tell a
// new version from the same one.
func TestPostEqualSeesEveryField(t *testing.T) {
	base := checkPost(1, "failure", 2)
	v := reflect.ValueOf(&base).Elem()
	for i := range v.NumField() {
		changed := base
		f := reflect.ValueOf(&changed).Elem().Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString(f.String() + "x")
		case reflect.Int:
			f.SetInt(f.Int() + 1)
		case reflect.Slice:
			f.Set(reflect.ValueOf(append(append([]outbox.Annotation(nil), base.Annotations...), outbox.Annotation{Line: 9})))
		default:
			t.Fatalf("field %s of kind %s: teach equal and this test about it", v.Type().Field(i).Name, f.Kind())
		}
		if outbox.PostsEqual(base, changed) {
			t.Errorf("a change of %s is not seen", v.Type().Field(i).Name)
		}
	}
	if !outbox.PostsEqual(base, checkPost(1, "failure", 2)) {
		t.Error("equal posts differ")
	}
}
