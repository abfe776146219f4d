package forge

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"sync"

	"github.com/google/go-github/v62/github"

	"github.com/fleet-agent/fleet-agent/internal/annotation"
	"github.com/fleet-agent/fleet-agent/internal/refs"
)

// MaxAnnotationsPerRequest is GitHub's limit: "The Checks API limits the
// number of annotations to a maximum of 50 per API request"; the rest go in
// updates, which append.
const MaxAnnotationsPerRequest = 50

// MaxCheckSummary is GitHub's limit on a check run's output summary, in
// characters.
const MaxCheckSummary = 65535

// CheckRun is a check run to set: one per commit and context, like a status.
// The Checks API takes only GitHub App credentials; with a user token GitHub
// answers 403 (class forbidden), and the agent posts statuses alone then.
type CheckRun struct {
	// Context is the suffix (plan, apply, drift); the name of the run is
	// the full status context.
	Context string
	// State is the status state the run stands for: pending is a run in
	// progress; success, failure and error complete it (error as failure:
	// the Checks API has no error conclusion, and a plan that could not be
	// made must not pass a required check).
	State       string
	Title       string
	Summary     string
	Annotations []annotation.Annotation
}

func (c CheckRun) conclusion() (status, conclusion string) {
	switch c.State {
	case StatePending:
		return "in_progress", ""
	case StateSuccess:
		return "completed", "success"
	default:
		return "completed", "failure"
	}
}

// externalID names a run's content: a run sent again with the same content
// (after a crash or a lost answer) is found by it and not made twice.
func (c CheckRun) externalID() string {
	b, _ := json.Marshal(c) // plain strings and numbers
	h := sha256.Sum256(b)
	return "fleet-agent:" + hex.EncodeToString(h[:12])
}

// checkMemory remembers, per commit and context, the newest run this
// process made: its id, content and how many annotations are on it.
type checkMemory struct {
	mu   sync.Mutex
	runs map[string]madeRun
}

type madeRun struct {
	id    int64
	ext   string
	count int
}

func (m *checkMemory) get(key string) (madeRun, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.runs[key]
	return r, ok
}

func (m *checkMemory) put(key string, r madeRun) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.runs == nil || len(m.runs) >= statusMemorySize {
		// Old commits are not posted to again; start afresh rather than
		// keep an order.
		m.runs = map[string]madeRun{}
	}
	m.runs[key] = r
}

// SetCheckRun makes run the newest check run of its context on sha. The
// first request creates it with up to 50 annotations; updates add the rest
// 50 at a time. Sent again with the same content it finds the run (in its
// memory, or after a restart on GitHub by name and external id) and only
// adds the annotations not yet on it; with other content it makes a new run,
// which GitHub shows in place of the old one.
func (g *GitHub) SetCheckRun(ctx context.Context, sha string, run CheckRun) error {
	name := g.Context(run.Context)
	op := "set check run " + name + " on " + refs.Short(sha)
	switch run.State {
	case StatePending, StateSuccess, StateFailure, StateError:
	default:
		return invalid(op, "state %q is not one of pending, success, failure, error", run.State)
	}
	if sha == "" || run.Context == "" || run.Title == "" || run.Summary == "" {
		return invalid(op, "a check run needs a commit, a context, a title and a summary")
	}
	key := statusKey(sha, name)
	ext := run.externalID()
	run.Summary = cutSummary(run.Summary)
	made, ok := g.checks.get(key)
	switch {
	case ok && made.ext != ext:
		made = madeRun{}
	case ok && made.count < len(run.Annotations):
		// A send of this content stopped short; its last update may have
		// reached GitHub with the answer lost. Count what is on the run.
		got, err := g.getCheckRun(ctx, op, made.id)
		if err != nil {
			return err
		}
		made.count = got.GetOutput().GetAnnotationsCount()
	case !ok:
		found, err := g.findCheckRun(ctx, op, sha, name, ext)
		if err != nil {
			return err
		}
		made = found
	}
	all := run.Annotations
	status, conclusion := run.conclusion()
	output := func(from int) *github.CheckRunOutput {
		to := min(from+MaxAnnotationsPerRequest, len(all))
		out := &github.CheckRunOutput{Title: github.String(run.Title), Summary: github.String(run.Summary)}
		for _, a := range all[from:to] {
			out.Annotations = append(out.Annotations, toGitHub(a))
		}
		return out
	}
	if made.id == 0 {
		opts := github.CreateCheckRunOptions{Name: name, HeadSHA: sha, ExternalID: github.String(ext),
			Status: github.String(status), Output: output(0)}
		if conclusion != "" {
			opts.Conclusion = github.String(conclusion)
		}
		var created *github.CheckRun
		_, err := g.call(ctx, op, func(ctx context.Context) (*github.Response, error) {
			var resp *github.Response
			var err error
			created, resp, err = g.client.Checks.CreateCheckRun(ctx, g.owner, g.repo, opts)
			return resp, err
		})
		if err != nil {
			return err
		}
		made = madeRun{id: created.GetID(), ext: ext, count: len(output(0).Annotations)}
		g.checks.put(key, made)
	}
	for made.count < len(all) {
		out := output(made.count)
		_, err := g.call(ctx, op, func(ctx context.Context) (*github.Response, error) {
			_, resp, err := g.client.Checks.UpdateCheckRun(ctx, g.owner, g.repo, made.id, github.UpdateCheckRunOptions{Name: name, Output: out})
			return resp, err
		})
		if err != nil {
			return err
		}
		made.count += len(out.Annotations)
		g.checks.put(key, made)
	}
	return nil
}

// findCheckRun finds, after a restart, the run a send before it may have
// made: the newest run of name on sha, if it carries ext.
func (g *GitHub) findCheckRun(ctx context.Context, op, sha, name, ext string) (madeRun, error) {
	var list *github.ListCheckRunsResults
	_, err := g.call(ctx, op, func(ctx context.Context) (*github.Response, error) {
		var resp *github.Response
		var err error
		list, resp, err = g.client.Checks.ListCheckRunsForRef(ctx, g.owner, g.repo, sha,
			&github.ListCheckRunsOptions{CheckName: github.String(name), Filter: github.String("latest")})
		return resp, err
	})
	if err != nil {
		return madeRun{}, err
	}
	// Only the newest run counts: an older run with this content is not
	// what GitHub shows.
	if len(list.CheckRuns) > 0 {
		if r := list.CheckRuns[0]; r.GetExternalID() == ext {
			return madeRun{id: r.GetID(), ext: ext, count: r.GetOutput().GetAnnotationsCount()}, nil
		}
	}
	return madeRun{}, nil
}

func (g *GitHub) getCheckRun(ctx context.Context, op string, id int64) (*github.CheckRun, error) {
	var run *github.CheckRun
	_, err := g.call(ctx, op, func(ctx context.Context) (*github.Response, error) {
		var resp *github.Response
		var err error
		run, resp, err = g.client.Checks.GetCheckRun(ctx, g.owner, g.repo, id)
		return resp, err
	})
	return run, err
}

// cutSummary makes s fit a check run's summary. The agent's summaries are
// comments, already cut below it; this is the last guard, so that a summary
// that does not fit is cut with a note rather than refused by GitHub.
func cutSummary(s string) string {
	return cutCodePoints(s, MaxCheckSummary, "\n\n_(cut to fit a check run)_\n")
}

func toGitHub(a annotation.Annotation) *github.CheckRunAnnotation {
	out := &github.CheckRunAnnotation{Path: github.String(a.Path), StartLine: github.Int(a.Line), EndLine: github.Int(a.Line),
		AnnotationLevel: github.String(a.Level), Message: github.String(a.Message)}
	if a.Column > 0 {
		out.StartColumn, out.EndColumn = github.Int(a.Column), github.Int(a.Column)
	}
	if a.Title != "" {
		out.Title = github.String(a.Title)
	}
	return out
}

// SetCheckRun is (*GitHub).SetCheckRun for the outbox (its CheckSender).
func (p *Poster) SetCheckRun(ctx context.Context, sha, context, state, title, summary string, annotations []annotation.Annotation) error {
	return p.g.SetCheckRun(ctx, sha, CheckRun{Context: context, State: state, Title: title, Summary: summary, Annotations: annotations})
}
