package outbox

import (
	"slices"

	"github.com/fleet-agent/fleet-agent/internal/annotation"
	"strconv"
	"strings"

	"github.com/fleet-agent/fleet-agent/internal/refs"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

// Kind says what a post is.
type Kind string

// The kinds of post (the same words as the agent's).
const (
	// KindStatus is a commit status: only the newest per commit and
	// context is delivered.
	KindStatus Kind = "status"
	// KindSticky is the one comment per pull request and marker, edited in
	// place: only the newest body per pull request and marker is delivered.
	KindSticky Kind = "sticky"
	// KindOnce is a comment created once and never edited (results,
	// drift); its marker is unique per result. Of two with the same pull
	// request and marker, the first wins.
	KindOnce Kind = "once"
	// KindCheck is a check run (GitHub App only): one per commit and
	// context, like a status, and coalesced like one: only the newest is
	// delivered. Its annotations go in batches GitHub takes (50 a request);
	// the Sender makes a repeated send after a crash or a lost answer a
	// no-op or a resumption, never a second run with the same content.
	KindCheck Kind = "check"
)

// Annotation is a line annotation of a check run.
type Annotation = annotation.Annotation

// Post is one post to GitHub.
type Post struct {
	Kind Kind `json:"kind"`
	// Status fields.
	SHA string `json:"sha,omitempty"`
	// Context is the context as the Sender takes it: for the forge, the
	// suffix (plan, apply, drift) that it puts the status context prefix
	// before.
	Context     string `json:"context,omitempty"`
	State       string `json:"state,omitempty"` // pending, success, failure, error
	Description string `json:"description,omitempty"`
	TargetURL   string `json:"targetURL,omitempty"`
	// Comment fields.
	PR     int    `json:"pr,omitempty"`
	Marker string `json:"marker,omitempty"` // the full hidden marker
	Body   string `json:"body,omitempty"`
	// Check run fields: SHA, Context and State as a status (the state is
	// the status state the conclusion stands for), Description its title,
	// Body its markdown summary, and these annotations.
	Annotations []Annotation `json:"annotations,omitempty"`
}

// Check is a check run post on sha for context (the suffix, like a status):
// state is the status state (pending, success, failure, error) the run
// stands for, title a line, summary markdown.
func Check(sha, context, state, title, summary string, annotations []Annotation) Post {
	return Post{Kind: KindCheck, SHA: sha, Context: context, State: state, Description: title, Body: summary, Annotations: annotations}
}

// equal reports whether two posts have the same content.
func (p Post) equal(q Post) bool {
	return p.Kind == q.Kind && p.SHA == q.SHA && p.Context == q.Context && p.State == q.State &&
		p.Description == q.Description && p.TargetURL == q.TargetURL && p.PR == q.PR && p.Marker == q.Marker &&
		p.Body == q.Body && slices.Equal(p.Annotations, q.Annotations)
}

// Status is a commit status post.
func Status(sha, context, state, description, targetURL string) Post {
	return Post{Kind: KindStatus, SHA: sha, Context: context, State: state, Description: description, TargetURL: targetURL}
}

// Sticky is a post of the one comment holding marker on pull request pr.
func Sticky(pr int, marker, body string) Post {
	return Post{Kind: KindSticky, PR: pr, Marker: marker, Body: body}
}

// Once is a comment posted once on pull request pr, found again by marker.
func Once(pr int, marker, body string) Post {
	return Post{Kind: KindOnce, PR: pr, Marker: marker, Body: body}
}

// Validate refuses a post that could never be delivered. The finer checks
// (description length, body length, marker shape) are the Sender's: it
// answers them with a non-retryable error and the post is dropped.
func (p Post) Validate() error {
	switch p.Kind {
	case KindStatus, KindCheck:
		if p.SHA == "" || p.Context == "" {
			return refusal.New(refusal.Internal, "outbox: a %s needs a commit and a context", p.Kind)
		}
		if p.Kind == KindCheck && strings.TrimSpace(p.Body) == "" {
			return refusal.New(refusal.Internal, "outbox: a check run needs a summary")
		}
		switch p.State {
		case "pending", "success", "failure", "error":
		default:
			return refusal.New(refusal.Internal, "outbox: status state %q is not one of pending, success, failure, error", p.State)
		}
	case KindSticky, KindOnce:
		if p.PR <= 0 || p.Marker == "" || strings.TrimSpace(p.Body) == "" {
			return refusal.New(refusal.Internal, "outbox: a comment needs a pull request, a marker and a body")
		}
	default:
		return refusal.New(refusal.Internal, "outbox: unknown post kind %q", p.Kind)
	}
	return nil
}

// Key is the coalescing key: posts with the same key are one post. Status
// contexts are case-insensitive on GitHub ("plan" and "Plan" are one status
// context), so the key folds their case.
func (p Post) Key() string {
	switch p.Kind {
	case KindStatus:
		return "status\x00" + p.SHA + "\x00" + strings.ToLower(p.Context)
	case KindCheck:
		return "check\x00" + p.SHA + "\x00" + strings.ToLower(p.Context)
	default:
		return string(p.Kind) + "\x00" + strconv.Itoa(p.PR) + "\x00" + p.Marker
	}
}

// String names the post for logs, without its body.
func (p Post) String() string {
	switch p.Kind {
	case KindStatus:
		return "status " + p.Context + "=" + p.State + " on " + refs.Short(p.SHA)
	case KindCheck:
		return "check run " + p.Context + "=" + p.State + " on " + refs.Short(p.SHA) + " with " + strconv.Itoa(len(p.Annotations)) + " annotation(s)"
	default:
		return string(p.Kind) + " comment " + p.Marker + " on #" + strconv.Itoa(p.PR)
	}
}

// errNoChecks is the drop of a check post by a Sender that cannot post
// check runs: the same request would meet the same refusal.
var errNoChecks = noChecks{}

type noChecks struct{}

func (noChecks) Error() string {
	return "outbox: the sender cannot post check runs (they need GitHub App credentials)"
}
func (noChecks) ClassName() string { return classForbidden }
