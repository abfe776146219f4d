package providers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

// Class says what kind of failure a provider reported. It is a string so
// that the journal can record it as it is.
type Class string

// The classes. Unknown is what an error that carries no class is taken to
// be: the call may or may not have reached the provider.
const (
	// Invalid: the request can never succeed as written (a machine type that
	// does not exist, a shape change, nodes: 0 where it is not allowed).
	Invalid Class = "invalid"
	// NotFound: the object named does not exist (any more).
	NotFound Class = "notFound"
	// Conflict: the object is busy (an operation in progress) or was changed
	// under us. Reading it back and trying again later can succeed.
	Conflict Class = "conflict"
	// Throttled: the provider asked us to slow down; RetryAfter says how long
	// when it said so.
	Throttled Class = "throttled"
	// Unavailable: the provider could not be reached or failed on its side.
	Unavailable Class = "unavailable"
	// Terminal: the provider refuses and will keep refusing until a person
	// acts (permission, refused credentials, quota, a missing secret).
	Terminal Class = "terminal"
	// Unknown: an error without a class, treated as retryable and as having
	// maybe happened.
	Unknown Class = "unknown"
)

// SideEffect says whether the provider may have acted on a failed call.
type SideEffect string

// The side effects. The zero value of an Error's field reads as Maybe, since
// claiming None without knowing would let the journal create twice.
const (
	// None: nothing happened; the call can be repeated as it is.
	None SideEffect = "none"
	// Maybe: the outcome is not known; read the provider back before acting.
	Maybe SideEffect = "maybe"
	// Done: the provider acted although the call reports a failure.
	Done SideEffect = "done"
)

// Error is a failure reported by an adapter.
type Error struct {
	// Op is the method that failed, for messages ("EnsureCluster").
	Op         string
	Class      Class
	SideEffect SideEffect
	// RetryAfter is how long the provider asked us to wait; 0 when it did not
	// say.
	RetryAfter time.Duration
	// Reason is a short camelCase word a consumer may branch on or show
	// ("shapeChange", "modeChange", "zeroNodes", "spotUnsupported",
	// "credentialsRefused", "quota", "devicePluginOn").
	Reason string
	// Message is for a person. It never holds a secret value.
	Message string
	// Offered are the names the provider offers where a lookup by name
	// found nothing (the machine types of a location), when it lists them
	// at no extra cost: a plan shows them beside the name it did not find.
	Offered []string
	// Err is the cause, kept for errors.Is/As.
	Err error
}

func (e *Error) Error() string {
	msg := e.Message
	if msg == "" && e.Err != nil {
		msg = e.Err.Error()
	}
	if msg == "" {
		msg = string(e.classOrUnknown())
	}
	if e.Op != "" {
		return e.Op + ": " + msg
	}
	return msg
}

// Unwrap exposes the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrNotFound) hold for every NotFound error, not
// only the sentinel, so that adapters can say which object is missing.
func (e *Error) Is(target error) bool {
	return target == ErrNotFound && e.Class == NotFound
}

func (e *Error) classOrUnknown() Class {
	if e.Class == "" {
		return Unknown
	}
	return e.Class
}

// ErrNotFound is what a read of a missing object returns (possibly wrapped,
// possibly as another *Error of class NotFound). A missing object is never a
// zero value.
var ErrNotFound error = &Error{Class: NotFound, SideEffect: None, Message: "not found"}

// Errorf makes an Error of a class and side effect with a formatted message.
func Errorf(op string, class Class, side SideEffect, format string, args ...any) *Error {
	return &Error{Op: op, Class: class, SideEffect: side, Message: fmt.Sprintf(format, args...)}
}

// NotFoundf makes a NotFound error (side effect None) naming what is missing.
func NotFoundf(op, format string, args ...any) *Error {
	return Errorf(op, NotFound, None, format, args...)
}

// Invalidf makes an Invalid error (side effect None) with a reason.
func Invalidf(op, reason, format string, args ...any) *Error {
	e := Errorf(op, Invalid, None, format, args...)
	e.Reason = reason
	return e
}

// ClassOf returns the class of the first *Error in err's chain. A cancelled
// or timed out context and any error without a class are Unknown; nil is "".
func ClassOf(err error) Class {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.classOrUnknown()
	}
	return Unknown
}

// SideEffectOf returns whether the failed call may have acted. An error that
// does not say is Maybe. nil means the call succeeded, so its effect is Done.
func SideEffectOf(err error) SideEffect {
	if err == nil {
		return Done
	}
	var e *Error
	if errors.As(err, &e) && e.SideEffect != "" {
		return e.SideEffect
	}
	return Maybe
}

// RetryAfterOf returns the wait the provider asked for, or 0.
func RetryAfterOf(err error) time.Duration {
	var e *Error
	if errors.As(err, &e) {
		return e.RetryAfter
	}
	return 0
}

// ReasonOf returns the reason of the first *Error in err's chain, or "".
func ReasonOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ""
}

// Retryable reports whether the journal may make the call again later
// without a person acting. It says nothing about whether to read back first:
// that is SideEffectOf's job.
func Retryable(err error) bool {
	switch ClassOf(err) {
	case Conflict, Throttled, Unavailable, Unknown:
		return true
	}
	return false
}

// Cancelled reports whether err comes from our own context rather than the
// provider; the journal then stops without counting an attempt.
func Cancelled(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// Code maps a provider error to the refusal code the surface shows
// (docs/commands.md). A live check that fails because the request
// cannot work (Invalid, NotFound) blocks the plan; a call the provider will
// not make until someone acts (Terminal) or an object that is busy or
// claimed (Conflict) is INVALID_STATE; an unreachable, throttled or silent
// provider is UNAVAILABLE. nil maps to "".
func Code(err error) refusal.Code {
	switch ClassOf(err) {
	case "":
		return ""
	case Invalid, NotFound:
		return refusal.PlanBlocked
	case Conflict, Terminal:
		return refusal.InvalidState
	default:
		return refusal.Unavailable
	}
}

// Refusal wraps a provider error as a refusal with the code of Code and a
// message that says what to do; err's text is appended. err must not be
// nil (a nil err gives a nil *refusal.Error, which is a non-nil error).
func Refusal(err error, format string, args ...any) *refusal.Error {
	if err == nil {
		return nil
	}
	return refusal.Wrap(Code(err), err, format, args...)
}
