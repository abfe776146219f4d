package gcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/api/googleapi"

	"github.com/fleet-agent/fleet-agent/internal/providers"
)

// effect is what an unknown outcome of a call may have done: a read cannot
// have acted (None); a mutation whose answer was lost may have (Maybe).
type effect = providers.SideEffect

const (
	read   = providers.None
	mutate = providers.Maybe
)

// classify turns an SDK error into a providers.Error (GKE's documentation).
// The Go client's gRPC-style code is derived from the HTTP status alone
// (409 reads Aborted, FAILED_PRECONDITION reads InvalidArgument), so the
// class comes from the HTTP status, errors[].reason and the body's status.
func classify(op string, err error, unknown effect) error {
	if err == nil {
		return nil
	}
	var pe *providers.Error
	if errors.As(err, &pe) {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return &providers.Error{Op: op, Class: providers.Unknown, SideEffect: unknown, Message: "the call ended before GKE answered", Err: cause(err)}
	}
	var g *googleapi.Error
	if !errors.As(err, &g) {
		// No answer: a reset connection, a timeout. A read can be repeated;
		// a mutation may have happened.
		class := providers.Unknown
		if unknown == read {
			class = providers.Unavailable
		}
		return &providers.Error{Op: op, Class: class, SideEffect: unknown, Message: "no answer from GKE: " + transportText(err)}
	}
	status, reasons := bodyStatus(g)
	msg := fmt.Sprintf("GKE answered %d %s: %s", g.Code, status, g.Message)
	e := &providers.Error{Op: op, SideEffect: providers.None, Message: msg, Err: g}
	reason := ""
	if len(reasons) > 0 {
		reason = reasons[0]
	}
	switch {
	case g.Code == http.StatusTooManyRequests || reason == "rateLimitExceeded" || reason == "userRateLimitExceeded":
		e.Class, e.Reason, e.RetryAfter = providers.Throttled, "throttled", retryAfter(g)
	case g.Code == http.StatusBadRequest && (status == "FAILED_PRECONDITION" || reason == "failedPrecondition"):
		// Another operation runs on the cluster: wait and try again.
		e.Class, e.Reason = providers.Conflict, "busy"
	case g.Code == http.StatusBadRequest:
		e.Class, e.Reason = providers.Invalid, "invalidArgument"
	case g.Code == http.StatusUnauthorized:
		e.Class, e.Reason = providers.Terminal, "credentialsRefused"
		e.Message += "; check the account's service account key"
	case g.Code == http.StatusForbidden && strings.Contains(strings.ToLower(g.Message), "quota"):
		e.Class, e.Reason = providers.Terminal, "quota"
		e.Message += "; raise the quota or ask for less"
	case g.Code == http.StatusForbidden:
		e.Class, e.Reason = providers.Terminal, "permissionDenied"
		e.Message += "; the account's identity needs roles/container.admin and roles/compute.viewer on the project"
	case g.Code == http.StatusNotFound:
		e.Class = providers.NotFound
	case g.Code == http.StatusConflict && (status == "ALREADY_EXISTS" || reason == "alreadyExists"):
		e.Class, e.Reason = providers.Conflict, "alreadyExists"
	case g.Code == http.StatusConflict || g.Code == http.StatusPreconditionFailed:
		// ABORTED (an etag or fingerprint that moved): read again, retry.
		e.Class, e.Reason = providers.Conflict, "changed"
	case g.Code >= 500:
		// The service failed on its side; a mutation may still have acted.
		e.Class, e.SideEffect = providers.Unavailable, unknown
	case g.Code >= 400:
		e.Class, e.Reason = providers.Invalid, "invalidArgument"
	default:
		e.Class, e.SideEffect = providers.Unknown, unknown
	}
	return e
}

// bodyStatus reads the google.rpc status name and errors[].reason from an
// error's body, which the Go client keeps raw.
func bodyStatus(g *googleapi.Error) (string, []string) {
	var b struct {
		Error struct {
			Status string `json:"status"`
		} `json:"error"`
	}
	_ = json.Unmarshal([]byte(g.Body), &b)
	var reasons []string
	for _, it := range g.Errors {
		reasons = append(reasons, it.Reason)
	}
	return b.Error.Status, reasons
}

// retryAfter is the wait a 429 asked for: the Retry-After header, else a
// google.rpc.RetryInfo in details; 0 when it said nothing. Google documents
// neither for GKE, so both are read.
func retryAfter(g *googleapi.Error) time.Duration {
	if d := retryAfterHeader(g.Header); d > 0 {
		return d
	}
	for _, d := range g.Details {
		m, ok := d.(map[string]any)
		if !ok || m["@type"] != "type.googleapis.com/google.rpc.RetryInfo" {
			continue
		}
		if s, ok := m["retryDelay"].(string); ok {
			if v, err := time.ParseDuration(s); err == nil && v > 0 {
				return v
			}
		}
	}
	return 0
}

func retryAfterHeader(h http.Header) time.Duration {
	v := h.Get("Retry-After")
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(v); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := time.Until(t); d > 0 {
			return d
		}
	}
	return 0
}

// transportText is the last part of a transport error ("EOF",
// "connection refused"): what went wrong, without the request line before it.
func transportText(err error) string {
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 {
		return s[i+2:]
	}
	return s
}

// opError classes an operation that ended DONE with an error: GKE took the
// request and it failed while running (a stockout, a quota found late). The
// request was accepted, so something may have changed.
func opError(op, what string, code int64, message string) error {
	e := &providers.Error{Op: op, SideEffect: providers.Done, Message: fmt.Sprintf("GKE operation %s failed: %s", what, message)}
	lower := strings.ToLower(message)
	switch {
	case strings.Contains(message, "GCE_STOCKOUT") || strings.Contains(lower, "resources available"):
		e.Class, e.Reason = providers.Terminal, "stockout"
	case strings.Contains(lower, "quota"):
		e.Class, e.Reason = providers.Terminal, "quota"
	case code == 1 || code == 9 || code == 10: // CANCELLED, FAILED_PRECONDITION, ABORTED
		e.Class, e.Reason = providers.Conflict, "busy"
	case code == 3 || code == 5 || code == 11: // INVALID_ARGUMENT, NOT_FOUND, OUT_OF_RANGE
		e.Class, e.Reason = providers.Invalid, "invalidArgument"
	case code == 7 || code == 16: // PERMISSION_DENIED, UNAUTHENTICATED
		e.Class, e.Reason = providers.Terminal, "permissionDenied"
	case code == 8: // RESOURCE_EXHAUSTED
		e.Class, e.Reason = providers.Terminal, "quota"
	default:
		e.Class = providers.Unavailable
	}
	return e
}
