package doctor

import (
	"strings"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/agent"
	"github.com/fleet-agent/fleet-agent/internal/webhooks"
)

func TestDriftProposalAndWebhooks(t *testing.T) {
	now := time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)
	held := now.Add(time.Minute)
	var r Report
	CheckFleet(&r, Fleet{
		DriftProposal: &agent.DriftProposal{State: "open", Branch: "fleet-agent/drift-1a2b", PR: 12, Fields: 1, OpenedAt: now.Add(-90 * time.Minute).UnixMilli()},
		Webhooks: []webhooks.Status{
			{ID: "wh-1", Receiver: "https://a.example.com", Queued: 2, HeldUntil: &held, LastError: "HTTP 500"},
			{ID: "wh-2", Receiver: "env://SLACK_URL", Dropped: 1},
			{ID: "wh-3", Receiver: "https://ok.example.com", Delivered: 9},
		},
	}, now)
	codes := strings.Join(r.Codes(), " ")
	if codes != "fleet-ok drift-proposal-open webhook-failing webhook-dropped" {
		t.Fatalf("codes = %q", codes)
	}
	if f := r.Findings[1]; !strings.Contains(f.Found, "pull request #12 (branch fleet-agent/drift-1a2b), open for 1h30m0s") || f.Severity != Note {
		t.Fatalf("drift proposal finding = %+v", f)
	}
	if r.NeedsPerson() {
		t.Fatal("notes made the report fail")
	}
	// A proposal that ended is no finding.
	var r2 Report
	CheckFleet(&r2, Fleet{DriftProposal: &agent.DriftProposal{State: "merged", Branch: "fleet-agent/drift-1a2b"}}, now)
	if c := strings.Join(r2.Codes(), " "); c != "fleet-ok" {
		t.Fatalf("codes after merge = %q", c)
	}
}
