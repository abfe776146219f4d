package forge_test

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/fleet-agent/fleet-agent/internal/annotation"
	"github.com/fleet-agent/fleet-agent/internal/forge"
	"github.com/fleet-agent/fleet-agent/internal/forge/githubemu"
)

func manyAnnotations(n int) []annotation.Annotation {
	out := make([]annotation.Annotation, n)
	for i := range out {
		out[i] = annotation.Annotation{Path: "fleet.json", Line: i + 1, Column: 3, Level: "failure", Message: fmt.Sprintf("error %d", i)}
	}
	return out
}

// appEnv is an env whose token is an installation token, as an App's is.
func appEnv(t *testing.T) *env {
	t.Helper()
	e := newEnv(t, githubemu.Options{})
	e.emu.AddInstallationToken(canary, "fleet-agent")
	e.repo.AddCommit(sha(1))
	return e
}

func checkRequests(e *env) (creates, updates, lists int) {
	for _, r := range e.emu.Requests() {
		switch {
		case r.Method == "POST" && r.Path == "/repos/acme/fleet/check-runs":
			creates++
		case r.Method == "PATCH":
			updates++
		case r.Method == "GET" && r.Path == "/repos/acme/fleet/commits/"+sha(1)+"/check-runs":
			lists++
		}
	}
	return
}

func TestCheckRunAnnotationsGoInBatchesOf50(t *testing.T) {
	e := appEnv(t)
	run := forge.CheckRun{Context: forge.ContextPlan, State: forge.StateFailure, Title: "invalid document", Summary: "120 errors", Annotations: manyAnnotations(120)}
	if err := e.forge.SetCheckRun(t.Context(), sha(1), run); err != nil {
		t.Fatal(err)
	}
	runs := e.repo.CheckRuns(sha(1))
	if len(runs) != 1 || len(runs[0].Annotations) != 120 || runs[0].Name != "fleet-agent/plan" || runs[0].Conclusion != "failure" {
		t.Fatalf("runs %+v", runs)
	}
	if a := runs[0].Annotations[119]; a.StartLine != 120 || a.StartColumn != 3 || a.EndColumn != 3 || a.Message != "error 119" {
		t.Errorf("last annotation %+v", a)
	}
	// A list first (nothing in memory), one create with 50, two updates.
	if c, u, l := checkRequests(e); c != 1 || u != 2 || l != 1 {
		t.Errorf("creates %d updates %d lists %d", c, u, l)
	}

	// The same content again: nothing sent, from memory.
	e.emu.ResetLog()
	if err := e.forge.SetCheckRun(t.Context(), sha(1), run); err != nil {
		t.Fatal(err)
	}
	if n := len(e.emu.Requests()); n != 0 {
		t.Errorf("%d requests for a run already made", n)
	}
	// After a restart: one list finds it by its external id.
	e.restart(t)
	if err := e.forge.SetCheckRun(t.Context(), sha(1), run); err != nil {
		t.Fatal(err)
	}
	if c, u, l := checkRequests(e); c != 0 || u != 0 || l != 1 {
		t.Errorf("after a restart: creates %d updates %d lists %d", c, u, l)
	}
	// New content: a new run, which GitHub shows in place of the old.
	run.State, run.Title, run.Annotations = forge.StateSuccess, "3 to create", nil
	if err := e.forge.SetCheckRun(t.Context(), sha(1), run); err != nil {
		t.Fatal(err)
	}
	if runs := e.repo.CheckRuns(sha(1)); len(runs) != 2 || runs[1].Conclusion != "success" || len(runs[1].Annotations) != 0 {
		t.Errorf("runs %+v", runs)
	}
}

// loseAnswer passes requests on but loses the answer of the first that
// lose picks: GitHub acted, the forge does not know it.
type loseAnswer struct {
	base http.RoundTripper
	lose func(*http.Request) bool
	done bool
}

func (l *loseAnswer) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := l.base.RoundTrip(r)
	if err == nil && !l.done && l.lose(r) {
		l.done = true
		resp.Body.Close()
		return nil, errors.New("connection reset (test)")
	}
	return resp, err
}

// A send whose create or update reached GitHub with the answer lost is
// resumed by the next send of the same content: one run, every annotation
// once.
func TestCheckRunResumesAfterALostAnswer(t *testing.T) {
	for _, method := range []string{"POST", "PATCH"} {
		t.Run(method, func(t *testing.T) {
			e := appEnv(t)
			e.cfg.Transport = &loseAnswer{base: http.DefaultTransport, lose: func(r *http.Request) bool { return r.Method == method }}
			e.restart(t)
			run := forge.CheckRun{Context: forge.ContextPlan, State: forge.StateFailure, Title: "t", Summary: "s", Annotations: manyAnnotations(120)}
			if err := e.forge.SetCheckRun(t.Context(), sha(1), run); err == nil {
				t.Fatal("the lost answer went unnoticed")
			}
			if err := e.forge.SetCheckRun(t.Context(), sha(1), run); err != nil {
				t.Fatal(err)
			}
			runs := e.repo.CheckRuns(sha(1))
			if len(runs) != 1 || len(runs[0].Annotations) != 120 {
				t.Fatalf("%d runs, the first with %d annotations; want 1 with 120", len(runs), len(runs[0].Annotations))
			}
			for i, a := range runs[0].Annotations {
				if a.StartLine != i+1 {
					t.Fatalf("annotation %d on line %d: repeated or lost", i, a.StartLine)
				}
			}
		})
	}
}

func TestCheckRunWithAUserTokenIsForbidden(t *testing.T) {
	e := newEnv(t, githubemu.Options{})
	e.repo.AddCommit(sha(1))
	err := e.forge.SetCheckRun(t.Context(), sha(1), forge.CheckRun{Context: forge.ContextPlan, State: forge.StateSuccess, Title: "t", Summary: "s"})
	if fe := classOf(t, err); fe.Class != forge.ClassForbidden {
		t.Errorf("class %s", fe.Class)
	}
}

func TestCheckRunSummaryIsCutToFit(t *testing.T) {
	e := appEnv(t)
	long := strings.Repeat("é", forge.MaxCheckSummary+10)
	if err := e.forge.SetCheckRun(t.Context(), sha(1), forge.CheckRun{Context: forge.ContextPlan, State: forge.StateSuccess, Title: "t", Summary: long}); err != nil {
		t.Fatal(err)
	}
	runs := e.repo.CheckRuns(sha(1))
	if len(runs) != 1 || utf8.RuneCountInString(runs[0].Summary) != forge.MaxCheckSummary || !strings.HasSuffix(runs[0].Summary, "_(cut to fit a check run)_\n") {
		t.Errorf("summary of %d code points", utf8.RuneCountInString(runs[0].Summary))
	}
}
