// Package refusal is the error vocabulary of fleet-agent's surface: every
// refusal a user sees carries one of the documented codes, a message a person
// can act on and, for documents, a JSON Pointer. Packages below the command
// line return *refusal.Error (or wrap one) so that the binary can map it to
// an exit status and a stderr line without guessing.
package refusal

import (
	"errors"
	"fmt"
)

// Code is one of the documented refusal codes (docs/commands.md).
type Code string

// The refusal codes (docs/commands.md). Nothing else is ever printed as a code.
const (
	InvalidInput Code = "INVALID_INPUT"
	PlanBlocked  Code = "PLAN_BLOCKED"
	InvalidState Code = "INVALID_STATE"
	ConfigDrift  Code = "CONFIG_DRIFT"
	FleetDrifted Code = "FLEET_DRIFTED"
	Unavailable  Code = "UNAVAILABLE"
	Internal     Code = "INTERNAL"
)

// Error is a refusal: a code, a message for a person, and optionally the
// JSON Pointer of the offending value and the error underneath.
type Error struct {
	Code    Code
	Message string
	// Path is a JSON Pointer into a document, when the refusal is about one.
	Path string
	// Err is the cause, kept for errors.Is/As; it is never printed on its own
	// because causes from libraries may carry values we do not control.
	Err error
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// Unwrap exposes the cause.
func (e *Error) Unwrap() error { return e.Err }

// New makes a refusal with a formatted message.
func New(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Wrap makes a refusal that keeps err as its cause. The message should say
// what to do; err's text is appended after a colon.
func Wrap(code Code, err error, format string, args ...any) *Error {
	msg := fmt.Sprintf(format, args...)
	if err != nil {
		msg += ": " + err.Error()
	}
	return &Error{Code: code, Message: msg, Err: err}
}

// CodeOf returns the code of the first refusal in err's chain, or Internal
// when err is not nil and carries none, or "" for nil.
func CodeOf(err error) Code {
	if err == nil {
		return ""
	}
	var r *Error
	if errors.As(err, &r) {
		return r.Code
	}
	return Internal
}

// Is reports whether err carries the given code.
func Is(err error, code Code) bool { return err != nil && CodeOf(err) == code }

// Text is err as a person reads it in a status, a log line or a report:
// `CODE: message` for a refusal, the error's own text otherwise.
func Text(err error) string {
	var r *Error
	if errors.As(err, &r) {
		return string(r.Code) + ": " + r.Message
	}
	return err.Error()
}

// Message is err's message without its code: a refusal's own message, the
// error's text otherwise (where the code travels beside it, as in the local
// API's answer).
func Message(err error) string {
	var r *Error
	if errors.As(err, &r) {
		return r.Message
	}
	return err.Error()
}
