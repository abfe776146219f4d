package agent

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"

	"github.com/fleet-agent/fleet-agent/internal/events"
	"github.com/fleet-agent/fleet-agent/internal/localapi"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

// Events queues the agent's events (events.webhooks) inside the caller's
// transaction: an event is queued with the state change it tells of, or not
// at all. *webhooks.Queue satisfies it.
type Events interface {
	Enqueue(tx *state.Tx, e events.Event) error
}

// event queues one event when webhooks are configured. The id is random and
// queued with the event, so that every send of it (a retry, a resend after a
// restart) carries the same id.
func (a *Agent) event(tx *state.Tx, typ, subject, summary string, data map[string]any) error {
	if a.events == nil {
		return nil
	}
	var id [16]byte
	_, _ = rand.Read(id[:])
	return a.events.Enqueue(tx, events.Event{
		ID: hex.EncodeToString(id[:]), Type: typ, Source: "urn:fleet-agent:" + a.cfg.Tenant, Subject: subject,
		Time: a.clock.Now().UTC(), Summary: summary, Data: data,
	})
}

// applyEvent is the event an apply status stands for: applied for success,
// refused for failure or error; a pending status is no event.
func (a *Agent) applyEvent(tx *state.Tx, commit, st, desc string) error {
	typ := ""
	switch st {
	case "success":
		typ = events.Applied
	case "failure", "error":
		typ = events.Refused
	default:
		return nil
	}
	return a.event(tx, typ, "commit/"+commit, desc, map[string]any{"commit": commit, "branch": a.cfg.Branch})
}

// proposalEvent is the event a drift proposal's change of state stands for.
func (a *Agent) proposalEvent(tx *state.Tx, prev string, rec *localapi.DriftProposal) error {
	data := map[string]any{"branch": rec.Branch, "state": rec.State, "driftHash": rec.DriftHash, "fields": rec.Fields}
	if rec.PR > 0 {
		data["pullRequest"] = rec.PR
	}
	switch {
	case rec.State == proposalOpen && prev != proposalOpen:
		return a.event(tx, events.DriftPROpened, "branch/"+rec.Branch, "drift proposal opened on "+rec.Branch+prNote(rec.PR), data)
	case rec.State != proposalOpen && prev == proposalOpen:
		return a.event(tx, events.DriftPRClosed, "branch/"+rec.Branch, "drift proposal "+rec.State+" ("+rec.Branch+prNote(rec.PR)+")", data)
	}
	return nil
}

func prNote(pr int) string {
	if pr <= 0 {
		return ""
	}
	return ", pull request #" + strconv.Itoa(pr)
}
