package digitalocean

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/digitalocean/godo"

	"github.com/fleet-agent/fleet-agent/internal/providers"
)

// mapErr gives a godo error its class and side effect.
//
// godo does not read the error body's `id`, so the class comes from the
// HTTP status. A write that got no answer may have happened (Maybe); a read
// never acts (None). An answer that came back 2xx but could not be read
// means the write happened (Done).
func (a *Adapter) mapErr(op, method, path string, err error) error {
	if err == nil {
		return nil
	}
	write := method != http.MethodGet
	unanswered := providers.None
	if write {
		unanswered = providers.Maybe
	}
	var er *godo.ErrorResponse
	if errors.As(err, &er) && er.Response != nil {
		return a.fromStatus(op, method, path, er, write)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return &providers.Error{Op: op, Class: providers.Unknown, SideEffect: unanswered,
			Message: fmt.Sprintf("%s %s: cancelled or timed out before DigitalOcean answered", method, path), Err: err}
	}
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	if errors.As(err, &syn) || errors.As(err, &typ) {
		side := providers.None
		if write {
			side = providers.Done
		}
		return &providers.Error{Op: op, Class: providers.Unknown, SideEffect: side,
			Message: fmt.Sprintf("%s %s: DigitalOcean answered in a form this adapter cannot read: %v", method, path, err), Err: err}
	}
	return &providers.Error{Op: op, Class: providers.Unknown, SideEffect: unanswered,
		Message: fmt.Sprintf("%s %s: no answer from DigitalOcean: %v", method, path, err), Err: err}
}

func (a *Adapter) fromStatus(op, method, path string, er *godo.ErrorResponse, write bool) error {
	code := er.Response.StatusCode
	e := &providers.Error{Op: op, SideEffect: providers.None, Err: er}
	said := er.Message
	if said == "" {
		said = http.StatusText(code)
	}
	e.Message = fmt.Sprintf("%s %s: DigitalOcean answered %d: %s", method, path, code, said)
	if er.RequestID != "" {
		e.Message += " (request " + er.RequestID + ")"
	}
	lower := strings.ToLower(said)
	switch {
	case code == http.StatusUnauthorized:
		e.Class, e.Reason = providers.Terminal, "credentialsRefused"
		e.Message += "; the account's token is refused: replace the secret"
	case code == http.StatusForbidden:
		e.Class, e.Reason = providers.Terminal, "forbidden"
		e.Message += "; give the account's token the scopes it needs (kubernetes, sizes, account; read and write)"
	case code == http.StatusNotFound:
		e.Class = providers.NotFound
	case code == http.StatusConflict:
		e.Class = providers.Conflict
	case code == http.StatusTooManyRequests:
		e.Class, e.RetryAfter = providers.Throttled, a.retryAfter(er.Response.Header)
	case code == http.StatusUnprocessableEntity && strings.Contains(lower, "limit") && (strings.Contains(lower, "droplet") || strings.Contains(lower, "exceed")):
		// Guess: DigitalOcean documents no quota error; a 422 naming the
		// droplet limit (or a limit exceeded) is taken as one.
		e.Class, e.Reason = providers.Terminal, "quota"
	case code == http.StatusUnprocessableEntity && (strings.Contains(lower, "capacity") || strings.Contains(lower, "out of stock")):
		// Guess: a 422 about capacity is a stockout, which passes; the
		// journal tries again later.
		e.Class, e.Reason = providers.Unavailable, "stockout"
	case code == http.StatusBadRequest || code == http.StatusUnprocessableEntity:
		e.Class = providers.Invalid
	case code >= 500:
		e.Class = providers.Unavailable
		if write {
			e.SideEffect = providers.Maybe
		}
	default:
		e.Class = providers.Unknown
		if write {
			e.SideEffect = providers.Maybe
		}
	}
	return e
}

// retryAfter is the wait a 429 asks for: its Retry-After (seconds or a
// date), else the RateLimit-Reset epoch (DigitalOcean's documented header;
// whether it sends Retry-After is not documented), else 0 (not said).
func (a *Adapter) retryAfter(h http.Header) time.Duration {
	now := a.clock.Now()
	if v := strings.TrimSpace(h.Get("Retry-After")); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n >= 0 {
			return time.Duration(n) * time.Second
		}
		if t, err := http.ParseTime(v); err == nil && t.After(now) {
			return t.Sub(now)
		}
	}
	if v := h.Get("RateLimit-Reset"); v != "" && h.Get("RateLimit-Remaining") == "0" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			if d := time.Unix(n, 0).Sub(now); d > 0 {
				return d.Round(time.Second)
			}
		}
	}
	return 0
}
