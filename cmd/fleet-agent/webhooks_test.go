package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/localapi"
	"github.com/fleet-agent/fleet-agent/internal/webhooks"
)

// status prints each webhook with its counts, its last delivery and its
// last failure, and the drift proposal.
func TestStatusShowsWebhooksAndTheDriftProposal(t *testing.T) {
	at := time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)
	held := at.Add(time.Minute)
	v := localapi.StatusView{TenantID: "root", Proposals: []localapi.Proposal{},
		Drift: &localapi.DriftView{Proposal: &localapi.DriftProposal{State: "open", Branch: "fleet-agent/drift-1a2b", PR: 12, Fields: 1}},
		Webhooks: []webhooks.Status{{ID: "wh-1", Receiver: "https://a.example.com", Format: "cloudevents", Delivered: 3, Failed: 1, Queued: 2,
			HeldUntil: &held, LastError: "HTTP 500",
			Recent:   []webhooks.Delivery{{ID: "e1", Type: "applied", Subject: "commit/abc", At: at, Code: 202}},
			Failures: []webhooks.Delivery{{ID: "e2", Type: "drifted", Subject: "fleet/root", At: at, Code: 500, Error: "HTTP 500"}}}}}
	var out bytes.Buffer
	(&app{stdout: &out}).statusText(v)
	for _, want := range []string{
		"drift proposal: branch fleet-agent/drift-1a2b, pull request #12, open (1 value(s) written, 0 the document cannot hold)\n",
		"webhook https://a.example.com (wh-1, cloudevents): 3 delivered, 1 failed (0 dropped), 2 queued, retrying at 2026-12-06T03:01:00Z after HTTP 500\n",
		"  last delivered: applied commit/abc (e1) at 2026-12-06T03:00:00Z, HTTP 202\n",
		"  last failure: drifted fleet/root (e2) at 2026-12-06T03:00:00Z: HTTP 500, will be retried\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status text lacks %q:\n%s", want, out.String())
		}
	}
}
