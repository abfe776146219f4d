package main

import (
	"fmt"
	"io"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleet-agent/fleet-agent/internal/config"
	"github.com/fleet-agent/fleet-agent/internal/localapi"
	"github.com/fleet-agent/fleet-agent/internal/secrets"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/webhooks"
)

// hooksOf is events.webhooks as the webhooks package takes it.
func hooksOf(cfg *config.Config) []webhooks.Hook {
	var out []webhooks.Hook
	for _, w := range cfg.Events.Webhooks {
		out = append(out, webhooks.Hook{URL: w.URL, Secret: w.Secret, Events: w.Events, Format: w.Format})
	}
	return out
}

// eventDelivery is the running agent's events: the queue the agent and the
// reconciler write to and the deliverer that empties it; both nil without
// events.webhooks.
func eventDelivery(store *state.Store, cfg *config.Config, resolver *secrets.Resolver, log zerolog.Logger) (*webhooks.Queue, *webhooks.Deliverer) {
	hooks := hooksOf(cfg)
	if len(hooks) == 0 {
		return nil, nil
	}
	d := &webhooks.Deliverer{Store: store, Hooks: hooks, Secrets: resolver, Redact: resolver.Redactor().Redact,
		Log: log.With().Str("room", "events").Logger()}
	return &webhooks.Queue{Hooks: hooks, Deliverer: d, Source: "urn:fleet-agent:" + cfg.Tenant, Redact: resolver.Redactor().Redact}, d
}

// webhooksText is the webhooks' part of `status` in text.
func webhooksText(w io.Writer, list []webhooks.Status) {
	for _, h := range list {
		fmt.Fprintf(w, "webhook %s (%s, %s): %d delivered, %d failed (%d dropped), %d queued", h.Receiver, h.ID, h.Format, h.Delivered, h.Failed, h.Dropped, h.Queued)
		if h.HeldUntil != nil {
			fmt.Fprintf(w, ", retrying at %s after %s", h.HeldUntil.UTC().Format(time.RFC3339), h.LastError)
		}
		fmt.Fprintln(w)
		if n := len(h.Recent); n > 0 {
			d := h.Recent[n-1]
			fmt.Fprintf(w, "  last delivered: %s %s (%s) at %s, HTTP %d\n", d.Type, d.Subject, d.ID, d.At.UTC().Format(time.RFC3339), d.Code)
		}
		if n := len(h.Failures); n > 0 {
			d := h.Failures[n-1]
			what := "will be retried"
			if d.Dropped {
				what = "dropped"
			}
			fmt.Fprintf(w, "  last failure: %s %s (%s) at %s: %s, %s\n", d.Type, d.Subject, d.ID, d.At.UTC().Format(time.RFC3339), d.Error, what)
		}
	}
}

// driftProposalOf is the status's drift proposal, nil when none.
func driftProposalOf(v localapi.StatusView) *localapi.DriftProposal {
	if v.Drift == nil {
		return nil
	}
	return v.Drift.Proposal
}
