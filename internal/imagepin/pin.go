// Package imagepin is the node daemon's image as the DaemonSet names it:
// the configured reference pinned to the digest its tag named at the
// registry, why it is not pinned when it cannot be, and the record that
// keeps a pin across restarts (docs/substrates.md, "Pin by digest").
// Asking the registry is a function it is given (internal/imageref).
package imagepin

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/rs/zerolog"

	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/textline"
)

// Reasons an image is not pinned, as status and doctor show them.
const (
	// ReasonUnreachable: no answer from the registry (address, network,
	// TLS, or the deadline).
	ReasonUnreachable = "registryUnreachable"
	// ReasonRefused: the registry answered with an error (a credential it
	// wants, a tag it does not have).
	ReasonRefused = "registryRefused"
	// ReasonBadAnswer: the registry answered, but not with a digest.
	ReasonBadAnswer = "registryBadAnswer"
	// ReasonOff: substrate.nodeDaemon.resolveDigest is false.
	ReasonOff = "resolveOff"
)

// Error is a resolution that failed: the reason code, and the refusal that
// says what to fix.
type Error struct {
	Reason string
	Err    *refusal.Error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// RetryAfter is how long a tag that could not be resolved is applied as it
// is before the registry is asked again: a registry that is down is not
// asked at every pass of every pool.
const RetryAfter = 10 * time.Minute

// HasDigest reports whether ref already names a digest (name@sha256:...).
func HasDigest(ref string) bool { return strings.Contains(ref, "@") }

// Pin is what the DaemonSet runs, and why.
type Pin struct {
	// Ref is the image as configured.
	Ref string `json:"ref"`
	// Image is what the DaemonSet names: name:tag@sha256:... when pinned,
	// else Ref.
	Image string `json:"image"`
	// Pinned says Image names a digest.
	Pinned bool `json:"pinned"`
	// Reason is why it is not pinned (Reason* codes), or, pinned from the
	// record, why the registry was not asked; "" when pinned otherwise.
	Reason string `json:"reason,omitempty"`
	// Detail says what failed and what to fix; never a credential.
	Detail string `json:"detail,omitempty"`
	// Source is where a pin came from: "config" (the digest was
	// configured), "registry" (asked now), "record" (the digest recorded
	// at an earlier resolution, kept while the registry cannot be asked;
	// Reason and Detail then say why).
	Source string `json:"source,omitempty"`
	// At is when the registry was last asked (Unix ms); 0: never.
	At int64 `json:"at,omitempty"`
}

// Records keep the last pin across restarts, so that a restart while the
// registry is down keeps the digest the DaemonSet runs, and a tag that
// moved is seen as a move.
type Records interface {
	LastPin(ctx context.Context) (*Pin, error)
	RecordPin(ctx context.Context, pin Pin) error
}

// Pinner resolves the configured image once per process (a config load:
// substrate.nodeDaemon takes a restart) and keeps the answer. A failure is
// asked again no sooner than RetryAfter.
type Pinner struct {
	Ref      string
	Resolve  func(ctx context.Context, ref string) (string, error)
	Records  Records // nil: nothing is kept across restarts
	Off      bool    // resolveDigest: false
	Clock    clock.Clock
	Log      zerolog.Logger
	mu       sync.Mutex
	pin      *Pin
	failedAt time.Time
	// logged is the reason last logged, so that a registry that stays down
	// is logged once, not at every retry.
	logged string
}

// Image is what the DaemonSet names now. The first call (and, while the
// registry fails, one call per RetryAfter) asks the registry with ctx; the
// others answer from memory.
func (p *Pinner) Image(ctx context.Context) Pin {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	switch {
	case p.pin != nil && (p.pin.Pinned && p.pin.Source != "record" || p.pin.Reason == ReasonOff):
		return *p.pin
	case p.pin != nil && !p.failedAt.IsZero() && now.Sub(p.failedAt) < RetryAfter:
		return *p.pin
	}
	p.pin = p.resolve(ctx, now)
	return *p.pin
}

// Current is the last answer without asking anyone (nil before the first).
func (p *Pinner) Current() *Pin {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pin == nil {
		return nil
	}
	c := *p.pin
	return &c
}

func (p *Pinner) now() time.Time {
	if p.Clock == nil {
		return time.Now()
	}
	return p.Clock.Now()
}

// resolve is one decision: configured digest, off, asked, or (asking
// failed) the record's digest for the same ref, or the tag as it is.
func (p *Pinner) resolve(ctx context.Context, now time.Time) *Pin {
	switch {
	case HasDigest(p.Ref):
		pin := &Pin{Ref: p.Ref, Image: p.Ref, Pinned: true, Source: "config"}
		p.record(ctx, *pin)
		return pin
	case p.Off:
		p.Log.Warn().Str("image", p.Ref).Str("reason", ReasonOff).
			Msg("substrate.nodeDaemon.resolveDigest is false: the DaemonSet names the tag, and Nodes may run different images under it")
		pin := &Pin{Ref: p.Ref, Image: p.Ref, Reason: ReasonOff,
			Detail: "substrate.nodeDaemon.resolveDigest is false; the tag is applied as configured"}
		p.record(ctx, *pin)
		return pin
	}
	last := p.last(ctx)
	got, err := p.Resolve(ctx, p.Ref)
	if err == nil {
		pin := &Pin{Ref: p.Ref, Image: got, Pinned: true, Source: "registry", At: now.UnixMilli()}
		ev := p.Log.Info()
		msg := "the node daemon's image is pinned by digest"
		if last != nil && last.Ref == p.Ref && last.Pinned && last.Image != got {
			ev = p.Log.Warn().Str("was", last.Image)
			msg = "the node daemon's tag moved to a new digest: the DaemonSet rolls to it"
		}
		ev.Str("image", got).Msg(msg)
		p.record(ctx, *pin)
		return pin
	}
	if errors.Is(ctx.Err(), context.Canceled) {
		// The caller gave up (the agent stops, a term ended): that is no
		// answer of the registry's, so nothing is logged or kept, and the
		// next call asks.
		if last != nil && last.Ref == p.Ref && last.Pinned {
			kept := *last
			kept.Source = "record"
			return &kept
		}
		return &Pin{Ref: p.Ref, Image: p.Ref, Reason: ReasonUnreachable, Detail: "not asked: " + err.Error()}
	}
	p.failedAt = now
	reason, detail := ReasonBadAnswer, clean(err.Error())
	var ie *Error
	if errors.As(err, &ie) {
		reason = ie.Reason
	}
	quiet := reason == p.logged
	p.logged = reason
	if last != nil && last.Ref == p.Ref && last.Pinned {
		// Status and doctor read the record: it says what this ask found
		// (the recorded digest kept, and why), not the earlier answer.
		kept := *last
		kept.Source, kept.Reason, kept.Detail, kept.At = "record", reason, detail, now.UnixMilli()
		p.record(ctx, kept)
		if quiet {
			return &kept
		}
		p.Log.Warn().Str("image", last.Image).Str("reason", reason).Str("error", detail).
			Msg("the registry could not be asked; the DaemonSet keeps the digest recorded for this tag")
		return &kept
	}
	pin := &Pin{Ref: p.Ref, Image: p.Ref, Reason: reason, Detail: detail, At: now.UnixMilli()}
	p.record(ctx, *pin)
	if quiet {
		return pin
	}
	p.Log.Warn().Str("image", p.Ref).Str("reason", reason).Str("error", detail).
		Msg("the node daemon's image is not pinned: the DaemonSet names the tag as configured")
	return pin
}

func (p *Pinner) last(ctx context.Context) *Pin {
	if p.Records == nil {
		return nil
	}
	last, err := p.Records.LastPin(ctx)
	if err != nil {
		p.Log.Warn().Err(err).Msg("reading the recorded pin of the node daemon's image")
		return nil
	}
	return last
}

func (p *Pinner) record(ctx context.Context, pin Pin) {
	if p.Records == nil {
		return
	}
	if err := p.Records.RecordPin(ctx, pin); err != nil {
		p.Log.Warn().Err(err).Msg("recording the pin of the node daemon's image; a restart asks the registry again")
	}
}

// MaxDetail bounds the detail status, doctor and the log show: it may carry
// the registry's own words, which are not ours to print at any length.
const MaxDetail = 400

// clean keeps a detail one line of plain text (a registry's words may
// carry a terminal's escape sequences), cut at MaxDetail.
func clean(s string) string {
	s = textline.Plain(s)
	if len(s) > MaxDetail {
		cut := MaxDetail
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "..."
	}
	return s
}
