package events

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

const canary = "CANARY-webhook-secret-91a2"

func TestCloudEventIsSignedAndCarriesNoSecret(t *testing.T) {
	e := Event{ID: "ev-1", Type: DriftPROpened, Source: "fleet-agent/acme", Subject: "fleet-agent/drift-abc", Time: time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC), Summary: "drift proposal opened", Data: map[string]any{"pr": 7}}
	req, err := Render(e, "", canary)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(req.Body, &got); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{"specversion": "1.0", "id": "ev-1", "type": "dev.fleet-agent.drift.pr.opened", "source": "fleet-agent/acme", "subject": "fleet-agent/drift-abc", "time": "2026-11-01T09:00:00Z"} {
		if got[k] != want {
			t.Errorf("%s = %v, want %v", k, got[k], want)
		}
	}
	if req.ContentType != "application/cloudevents+json" || !Verify(req.Body, canary, req.Header.Get(SignatureHeader)) {
		t.Fatalf("content type %s, signature %s", req.ContentType, req.Header.Get(SignatureHeader))
	}
	if Verify(req.Body, canary+"x", req.Header.Get(SignatureHeader)) || Verify(append(req.Body, ' '), canary, req.Header.Get(SignatureHeader)) {
		t.Fatal("a wrong secret or a changed body verifies")
	}
	if strings.Contains(string(req.Body), canary) || strings.Contains(req.Header.Get(SignatureHeader), canary) {
		t.Fatal("the secret is in the request")
	}
}

func TestSlackFormatAndChecks(t *testing.T) {
	req, err := Render(Event{Type: Drifted, Subject: "abc123", Summary: "1 to update"}, "slack", "s")
	if err != nil {
		t.Fatal(err)
	}
	if string(req.Body) != `{"text":"fleet-agent drifted: 1 to update (abc123)"}` {
		t.Fatalf("slack body %s", req.Body)
	}
	if Check("xml", nil) == nil || Check("", []string{"applied", "exploded"}) == nil || Check("slack", Types) != nil {
		t.Fatal("checks")
	}
	if _, err := Render(Event{}, "xml", "s"); err == nil {
		t.Fatal("an unknown format rendered")
	}
}
