package forge

import (
	"context"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/google/go-github/v62/github"

	"github.com/fleet-agent/fleet-agent/internal/refs"
)

// The status context suffixes; the full context is PREFIX/SUFFIX.
const (
	ContextPlan  = "plan"
	ContextApply = "apply"
	ContextDrift = "drift"
)

// The states GitHub accepts for a commit status.
const (
	StatePending = "pending"
	StateSuccess = "success"
	StateFailure = "failure"
	StateError   = "error"
)

// MaxDescriptionLength is GitHub's limit on a status description, in code
// points.
const MaxDescriptionLength = 140

// Status is a commit status to set.
type Status struct {
	// Context is the suffix: ContextPlan, ContextApply or ContextDrift (or any
	// other word); the status context prefix is put before it.
	Context     string
	State       string
	Description string
	// TargetURL is optional.
	TargetURL string
}

// Context returns the full status context for a suffix.
func (g *GitHub) Context(suffix string) string { return g.prefix + "/" + suffix }

// CutDescription makes s fit a status description: valid UTF-8, at most
// MaxDescriptionLength code points, cut at a code point and ended with "…"
// when something was cut.
func CutDescription(s string) string { return cutCodePoints(s, MaxDescriptionLength, "…") }

// cutCodePoints makes s valid UTF-8 of at most limit code points: when it is
// longer, it is cut at a code point and ends with tail (counted in limit).
func cutCodePoints(s string, limit int, tail string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if utf8.RuneCountInString(s) <= limit {
		return s
	}
	keep, n := limit-utf8.RuneCountInString(tail), 0
	for i := range s {
		if n == keep {
			return s[:i] + tail
		}
		n++
	}
	return s
}

// statusMemory remembers the last status posted per commit and context, so
// that an identical one is not posted again. Contexts are compared as GitHub
// compares them, without case (statusKey). It keeps the most recent entries
// only: old commits are not posted to again.
type statusMemory struct {
	mu    sync.Mutex
	last  map[string]Status
	order []string
}

const statusMemorySize = 4096

func (m *statusMemory) init() { m.last = map[string]Status{} }

func (m *statusMemory) same(key string, s Status) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	old, ok := m.last[key]
	return ok && old == foldStatus(s)
}

// statusKey is the memory's key of a commit and a full context.
func statusKey(sha, fullContext string) string {
	return sha + "\x00" + foldContext(fullContext)
}

// foldContext is a status context as GitHub compares it: "This field is
// case-insensitive" (the REST description of POST statuses/{sha}).
func foldContext(c string) string { return strings.ToLower(c) }

func foldStatus(s Status) Status {
	s.Context = foldContext(s.Context)
	return s
}

func (m *statusMemory) put(key string, s Status) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.last[key]; !ok {
		m.order = append(m.order, key)
		if len(m.order) > statusMemorySize {
			delete(m.last, m.order[0])
			m.order = m.order[1:]
		}
	}
	m.last[key] = foldStatus(s)
}

// SetStatus sets a commit status on sha. The description is cut to 140 code
// points here. A status identical to the last one this process posted for the
// same commit and context is not posted again; posted says whether a request
// was made.
func (g *GitHub) SetStatus(ctx context.Context, sha string, s Status) (posted bool, err error) {
	full := g.Context(s.Context)
	op := "set status " + full + " on " + refs.Short(sha)
	switch s.State {
	case StatePending, StateSuccess, StateFailure, StateError:
	default:
		return false, invalid(op, "state %q is not one of pending, success, failure, error", s.State)
	}
	if s.Context == "" || sha == "" {
		return false, invalid(op, "a status needs a commit and a context")
	}
	s.Description = CutDescription(s.Description)
	key := statusKey(sha, full)
	if g.statuses.same(key, s) {
		return false, nil
	}
	rs := &github.RepoStatus{State: github.String(s.State), Context: github.String(full)}
	if s.Description != "" {
		rs.Description = github.String(s.Description)
	}
	if s.TargetURL != "" {
		rs.TargetURL = github.String(s.TargetURL)
	}
	_, err = g.call(ctx, op, func(ctx context.Context) (*github.Response, error) {
		_, resp, err := g.client.Repositories.CreateStatus(ctx, g.owner, g.repo, sha, rs)
		return resp, err
	})
	if err != nil {
		return false, err
	}
	g.statuses.put(key, s)
	return true, nil
}
