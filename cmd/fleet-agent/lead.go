package main

import (
	"context"
	"net/http"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleet-agent/fleet-agent/internal/backoff"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

// lead runs terms of leadership until ctx ends: it campaigns, runs term
// while this agent leads, and when the leadership is lost (its lease
// lapsed: the process was paused, or cut off from etcd) it ends the term
// and stands by again. Every write of a term is fenced by etcd, and every
// provider call and post asks the store first (state.Store.Fenced), so a
// term that runs on after its leadership ended changes nothing.
func (a *app) lead(ctx context.Context, store *state.Store, log zerolog.Logger, term func(context.Context) error) error {
	failures := 0 // campaigns failed in a row
	for ctx.Err() == nil {
		leader, _ := store.Leader(ctx)
		log.Info().Str("agent", store.Name()).Str("leader", leader).Msg("standing by: campaigning for the leadership")
		l, err := store.Lead(ctx)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			failures++
			wait := backoff.Wait(failures, time.Second, 30*time.Second, nil)
			log.Error().Err(err).Dur("retryIn", wait).Msg("cannot campaign for the leadership")
			select {
			case <-ctx.Done():
			case <-time.After(wait):
			}
			continue
		}
		failures = 0
		log.Info().Str("agent", store.Name()).Int64("term", l.Term()).Msg("leading")
		// The term travels with every side effect made in it: each is
		// refused once this term ended, even if this agent leads again.
		tctx, end := context.WithCancel(state.WithTerm(ctx, l))
		go func() {
			select {
			case <-l.Lost():
				log.Warn().Str("why", l.Why()).Msg("lost the leadership: stopping the loop, the outbox and the reconciler, then standing by")
				end()
			case <-tctx.Done():
			}
		}()
		if err := term(tctx); err != nil && ctx.Err() == nil && tctx.Err() == nil {
			end()
			rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = l.Resign(rctx)
			cancel()
			return err
		}
		end()
		if ctx.Err() != nil {
			// A clean stop gives the leadership up at once, so that a
			// standby takes over now rather than after the lease.
			rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = l.Resign(rctx)
			cancel()
		}
	}
	return nil
}

// leaderOnly serves h on the leader only; a standby answers 503 naming the
// leader, which is the one to send to.
func leaderOnly(store *state.Store, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if store.Leading() {
			h.ServeHTTP(w, r)
			return
		}
		leader, _ := store.Leader(r.Context())
		w.Header().Set("Retry-After", "5")
		http.Error(w, "this agent stands by; the leader is "+leader, http.StatusServiceUnavailable)
	})
}
