// Package events is what the agent tells people's systems: one event
// (applied, refused, drifted, converged, a substrate ready or in error, a
// drift proposal opened or closed) rendered as a CloudEvents 1.0 JSON
// request or a Slack incoming-webhook message, and signed with HMAC-SHA256
// so that a receiver can tell the agent's requests from anyone else's.
//
// It renders and signs; delivering (durably, with retries) is the caller's.
package events

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

// The event types, as a webhook's `events` list names them.
const (
	Applied          = "applied"
	Refused          = "refused"
	Drifted          = "drifted"
	Converged        = "converged"
	SubstrateReady   = "substrate.ready"
	SubstrateError   = "substrate.error"
	DriftPROpened    = "drift.pr.opened"
	DriftPRClosed    = "drift.pr.closed"
	typePrefix       = "dev.fleet-agent."
	SignatureHeader  = "X-Fleet-Agent-Signature"
	formatCloud      = "cloudevents"
	formatSlack      = "slack"
	contentTypeCloud = "application/cloudevents+json"
)

// Types lists every event type.
var Types = []string{Applied, Refused, Drifted, Converged, SubstrateReady, SubstrateError, DriftPROpened, DriftPRClosed}

// Event is one thing that happened. Subject names what it is about (a
// commit, a substrate, a branch): deliveries are coalesced per subject.
type Event struct {
	ID      string         `json:"id"`
	Type    string         `json:"type"`
	Source  string         `json:"source"`
	Subject string         `json:"subject"`
	Time    time.Time      `json:"time"`
	Summary string         `json:"summary"`
	Data    map[string]any `json:"data,omitempty"`
}

// Check refuses an unknown type or format in a webhook's configuration.
func Check(format string, types []string) error {
	if format != "" && format != formatCloud && format != formatSlack {
		return refusal.New(refusal.InvalidInput, "events.webhooks[].format must be cloudevents or slack, not %q", format)
	}
	for _, t := range types {
		if !slices.Contains(Types, t) {
			return refusal.New(refusal.InvalidInput, "events.webhooks[].events: unknown event %q; known: %s", t, strings.Join(Types, ", "))
		}
	}
	return nil
}

// Request is what a delivery sends.
type Request struct {
	ContentType string
	Body        []byte
	Header      http.Header
}

// Render makes the request body for a format ("" is cloudevents) and signs
// it with secret (the resolved value; never kept).
func Render(e Event, format, secret string) (Request, error) {
	var body []byte
	var err error
	ct := "application/json"
	switch format {
	case "", formatCloud:
		ct = contentTypeCloud
		body, err = json.Marshal(map[string]any{
			"specversion":     "1.0",
			"id":              e.ID,
			"type":            typePrefix + e.Type,
			"source":          e.Source,
			"subject":         e.Subject,
			"time":            e.Time.UTC().Format(time.RFC3339Nano),
			"datacontenttype": "application/json",
			"data":            withSummary(e),
		})
	case formatSlack:
		body, err = json.Marshal(map[string]any{"text": fmt.Sprintf("fleet-agent %s: %s (%s)", e.Type, e.Summary, e.Subject)})
	default:
		return Request{}, Check(format, nil)
	}
	if err != nil {
		return Request{}, refusal.Wrap(refusal.Internal, err, "cannot render the event")
	}
	h := http.Header{}
	h.Set("Content-Type", ct)
	h.Set(SignatureHeader, Sign(body, secret))
	return Request{ContentType: ct, Body: body, Header: h}, nil
}

func withSummary(e Event) map[string]any {
	d := map[string]any{"summary": e.Summary}
	for k, v := range e.Data {
		d[k] = v
	}
	return d
}

// Sign is the signature header's value: sha256= and the hex HMAC-SHA256 of
// the body under the secret.
func Sign(body []byte, secret string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// Verify is what a receiver does: compare the signature in constant time.
func Verify(body []byte, secret, header string) bool {
	return hmac.Equal([]byte(Sign(body, secret)), []byte(header))
}
