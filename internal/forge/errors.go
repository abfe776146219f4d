package forge

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-github/v62/github"

	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

// Class says what kind of failure an Error is, and so what to do about it.
type Class string

// The classes. Rate limits, server errors and network failures pass with
// time; the others need a person or a different request.
const (
	// ClassUnauthorized: 401, the token or the app's key is wrong, expired or
	// revoked. Fix the credential.
	ClassUnauthorized Class = "unauthorized"
	// ClassForbidden: 403 that is not a rate limit; the credential lacks a
	// permission (statuses: write, issues: write, pull requests: read).
	ClassForbidden Class = "forbidden"
	// ClassNotFound: 404, the repository, pull request or comment does not
	// exist or the credential cannot see it.
	ClassNotFound Class = "not_found"
	// ClassValidation: a 422 about what was sent (a body too long, an
	// unknown commit, a status over the cap of its context), or a request
	// refused here before sending; the same request will fail again.
	ClassValidation Class = "validation"
	// ClassContentLimited: a 422 to a comment that is not about the
	// comment: GitHub's limit on creating content ("was submitted too
	// quickly", "the endpoint has been spammed"). The same request
	// succeeds later: wait a minute, or Retry-After.
	ClassContentLimited Class = "content_limited"
	// ClassRateLimited: the primary rate limit is spent until its reset.
	ClassRateLimited Class = "rate_limited"
	// ClassSecondaryRateLimited: a secondary limit; wait for Retry-After.
	ClassSecondaryRateLimited Class = "secondary_rate_limited"
	// ClassServer: GitHub answered 5xx.
	ClassServer Class = "server"
	// ClassNetwork: no answer (connection refused, reset, timeout).
	ClassNetwork Class = "network"
	// ClassCredentials: a secret reference did not resolve, or the app key
	// does not parse. Fix the secret.
	ClassCredentials Class = "credentials"
	// ClassUnexpected: any other answer (400, 409, ...).
	ClassUnexpected Class = "unexpected"
)

// DefaultRetryDelay is how long to wait after a server error or a network
// failure that did not say how long, and after a secondary rate limit without
// Retry-After (GitHub asks for at least a minute there).
const (
	DefaultRetryDelay          = 30 * time.Second
	DefaultSecondaryRetryDelay = time.Minute
)

// Error is a failed GitHub operation. Its text names the operation, the class
// and what to do; it never holds a secret.
type Error struct {
	Class Class
	// Op is what was being done ("set status fleet-agent/plan on 1a2b3c4").
	Op string
	// Status is the HTTP status, 0 when there was no answer.
	Status int
	// Message is GitHub's message, or ours for failures before sending.
	Message string
	// Until is the earliest moment a retry can succeed, for the classes that
	// pass with time; zero otherwise.
	Until time.Time
	// Err is the cause, kept for errors.Is/As.
	Err error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("github: ")
	b.WriteString(e.Op)
	b.WriteString(": ")
	b.WriteString(string(e.Class))
	if e.Status != 0 {
		fmt.Fprintf(&b, " (HTTP %d)", e.Status)
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	b.WriteString("; ")
	b.WriteString(e.advice())
	return b.String()
}

func (e *Error) advice() string {
	switch e.Class {
	case ClassUnauthorized:
		return "check the token or the app's private key"
	case ClassForbidden:
		return "grant the credential statuses: write, issues: write and pull requests: read"
	case ClassNotFound:
		return "check github.repository and that the credential can see it"
	case ClassValidation:
		return "GitHub will refuse this request again as it is"
	case ClassContentLimited:
		return "GitHub limits how fast content is created; retry after " + e.Until.UTC().Format(time.RFC3339)
	case ClassRateLimited, ClassSecondaryRateLimited:
		return "retry after " + e.Until.UTC().Format(time.RFC3339)
	case ClassServer, ClassNetwork:
		return "retry later"
	case ClassCredentials:
		return "check the secret reference and its value"
	}
	return "not retried"
}

// Unwrap exposes the cause.
func (e *Error) Unwrap() error { return e.Err }

// Retryable reports whether the same request can succeed later without anyone
// changing anything.
func (e *Error) Retryable() bool {
	switch e.Class {
	case ClassRateLimited, ClassSecondaryRateLimited, ClassContentLimited, ClassServer, ClassNetwork:
		return true
	}
	return false
}

// RetryAt is when to try again, given the time now: never before Until. It is
// the zero time for errors that time does not fix.
func (e *Error) RetryAt(now time.Time) time.Time {
	if !e.Retryable() {
		return time.Time{}
	}
	if e.Until.After(now) {
		return e.Until
	}
	return now
}

// Code is the documented refusal code for this failure: GitHub unreachable or
// limited is UNAVAILABLE; a call that cannot be made is INVALID_STATE.
func (e *Error) Code() refusal.Code {
	if e.Retryable() {
		return refusal.Unavailable
	}
	return refusal.InvalidState
}

// As lets refusal.CodeOf see the refusal code of a forge error.
func (e *Error) As(target any) bool {
	if r, ok := target.(**refusal.Error); ok {
		*r = &refusal.Error{Code: e.Code(), Message: e.Error(), Err: e}
		return true
	}
	return false
}

// classify turns what go-github returned into an *Error.
func (g *GitHub) classify(ctx context.Context, op string, resp *github.Response, err error) *Error {
	now := g.clock.Now()
	var fe *Error
	if errors.As(err, &fe) {
		// Raised below go-github: resolving a secret or minting an
		// installation token.
		c := *fe
		c.Op = op
		c.Message = fe.Op + ": " + fe.Message
		return &c
	}
	if resp == nil || resp.Response == nil {
		if ctx.Err() != nil {
			return &Error{Class: ClassNetwork, Op: op, Message: "cancelled", Until: now, Err: ctx.Err()}
		}
		return &Error{Class: ClassNetwork, Op: op, Message: "no answer from GitHub", Until: now.Add(DefaultRetryDelay), Err: err}
	}
	return classifyResponse(op, now, resp.Response, githubMessage(err), err)
}

// githubMessage is the "message" of GitHub's error body, with the details of
// a validation failure.
func githubMessage(err error) string {
	var rl *github.RateLimitError
	if errors.As(err, &rl) {
		return rl.Message
	}
	var ab *github.AbuseRateLimitError
	if errors.As(err, &ab) {
		return ab.Message
	}
	var er *github.ErrorResponse
	if errors.As(err, &er) {
		msg := er.Message
		for _, d := range er.Errors {
			detail := d.Message
			if detail == "" {
				detail = strings.TrimSpace(d.Code + " " + d.Field)
			}
			if detail != "" {
				msg += "; " + detail
			}
		}
		return msg
	}
	return ""
}

func classifyResponse(op string, now time.Time, resp *http.Response, msg string, err error) *Error {
	e := &Error{Op: op, Status: resp.StatusCode, Message: msg, Err: err}
	h := resp.Header
	retryAfter, hasRetryAfter := parseRetryAfter(movedHeader(h, hdrRetryAfter), now)
	switch s := resp.StatusCode; {
	case s == http.StatusUnauthorized:
		e.Class = ClassUnauthorized
	case (s == http.StatusForbidden || s == http.StatusTooManyRequests) && h.Get(hdrRemaining) == "0":
		e.Class = ClassRateLimited
		e.Until = now.Add(DefaultSecondaryRetryDelay)
		if sec, perr := strconv.ParseInt(movedHeader(h, hdrReset), 10, 64); perr == nil {
			e.Until = time.Unix(sec, 0)
		}
		if hasRetryAfter && retryAfter.After(e.Until) {
			e.Until = retryAfter
		}
	case (s == http.StatusForbidden || s == http.StatusTooManyRequests) && hasRetryAfter:
		e.Class, e.Until = ClassSecondaryRateLimited, retryAfter
	case s == http.StatusTooManyRequests || (s == http.StatusForbidden && strings.Contains(strings.ToLower(msg), "secondary rate limit")) || isAbuse(err):
		e.Class, e.Until = ClassSecondaryRateLimited, now.Add(DefaultSecondaryRetryDelay)
	case s == http.StatusForbidden:
		e.Class = ClassForbidden
	case s == http.StatusNotFound:
		e.Class = ClassNotFound
	case s == http.StatusUnprocessableEntity && isWrite(resp) && !aboutContent(err):
		e.Class, e.Until = ClassContentLimited, now.Add(DefaultSecondaryRetryDelay)
		if hasRetryAfter {
			e.Until = retryAfter
		}
	case s == http.StatusUnprocessableEntity:
		e.Class = ClassValidation
	case s >= 500:
		e.Class, e.Until = ClassServer, now.Add(DefaultRetryDelay)
		if hasRetryAfter {
			e.Until = retryAfter
		}
		if e.Message == "" {
			e.Message = http.StatusText(s)
		}
	default:
		e.Class = ClassUnexpected
	}
	return e
}

// isWrite reports whether the request made or changed something: only
// those meet GitHub's limit on content, reads answer 422 for what they ask.
func isWrite(resp *http.Response) bool {
	return resp.Request != nil && resp.Request.Method != http.MethodGet && resp.Request.Method != http.MethodHead
}

// aboutContent reports whether a 422 is about what the request sent, so that
// sending it again cannot succeed. GitHub documents the 422 of creating a
// comment as "Validation failed, or the endpoint has been spammed" and tells
// the two apart only in words: both come as an error on field "data", code
// "unprocessable", with the reason in the message ("Body is too long
// (maximum is 65536 characters)", "was submitted too quickly"). So a 422 is
// about the content when an error names a field the request sends (body;
// state, description, context, target_url for a status), or its message
// speaks of the body or the status cap, or GitHub does not know the commit;
// anything else (too quickly, spammed, a node it could not resolve, no
// details at all) is taken for the limit. The word lists are a guess from
// answers seen in the wild; a 422 they misjudge as a limit is retried a
// bounded number of times by the outbox, not forever.
func aboutContent(err error) bool {
	var er *github.ErrorResponse
	if !errors.As(err, &er) {
		return false
	}
	msg := strings.ToLower(er.Message)
	if strings.Contains(msg, "no commit found") {
		return true
	}
	for _, d := range er.Errors {
		switch strings.ToLower(d.Field) {
		case "body", "state", "description", "context", "target_url", "sha":
			return true
		}
		m := strings.ToLower(d.Message)
		if strings.HasPrefix(m, "body ") || strings.Contains(m, "maximum number of statuses") || strings.Contains(m, "no commit found") {
			return true
		}
	}
	return false
}

// isAbuse reports whether go-github recognised a secondary limit by its
// documentation_url ("#abuse-rate-limits" on GitHub Enterprise Server and
// before the rename, "secondary-rate-limits" now), whatever the message.
func isAbuse(err error) bool {
	var ab *github.AbuseRateLimitError
	return errors.As(err, &ab)
}

// parseRetryAfter reads Retry-After as seconds or as an HTTP date.
func parseRetryAfter(v string, now time.Time) (time.Time, bool) {
	if v == "" {
		return time.Time{}, false
	}
	if s, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && s >= 0 {
		return now.Add(time.Duration(s) * time.Second), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return t, true
	}
	return time.Time{}, false
}

// invalid is a refusal made here, before anything is sent.
func invalid(op, format string, args ...any) *Error {
	return &Error{Class: ClassValidation, Op: op, Message: fmt.Sprintf(format, args...)}
}
