package agent

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/fleet-agent/fleet-agent/internal/apply"
	"github.com/fleet-agent/fleet-agent/internal/events"
	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/outbox"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

// appliedPR remembers which pull request the applied commit came from, so
// drift is reported where the change was reviewed.
type appliedPR struct {
	Commit string `json:"commit"`
	PR     int    `json:"pr"`
}

const keyAppliedPR = "applied-pr"
const reportedConverged = ""

// maybeDrift runs a drift check when drift.every has passed since the last.
func (a *Agent) maybeDrift(ctx context.Context) {
	if a.cfg.DriftEvery <= 0 {
		return
	}
	a.mu.Lock()
	due := a.lastDrift.IsZero() || !a.clock.Now().Before(a.lastDrift.Add(a.cfg.DriftEvery))
	a.mu.Unlock()
	if !due {
		return
	}
	if err := a.DriftCheck(ctx); err != nil {
		a.log.Warn().Err(err).Msg("drift check failed")
	}
}

// DriftCheck plans the applied document again (with live checks) and
// records the result. A non-empty call list or a blocked plan is drift,
// reported once per distinct drift; its clearing is reported once too.
func (a *Agent) DriftCheck(ctx context.Context) error {
	a.mu.Lock()
	a.lastDrift = a.clock.Now()
	a.mu.Unlock()
	var ap *state.Applied
	var prev *state.Drift
	var from appliedPR
	err := a.store.View(func(tx *state.Tx) error {
		var err error
		if ap, err = tx.Applied(); err != nil {
			return err
		}
		if prev, err = tx.Drift(); err != nil {
			return err
		}
		_, err = tx.Get(spaceAgent, keyAppliedPR, &from)
		return err
	})
	if err != nil || ap == nil {
		return err
	}
	if from.Commit != ap.Commit {
		from = appliedPR{}
	}
	now := a.clock.Now().UnixMilli()
	reported := ""
	if prev != nil {
		reported = prev.Reported
	}
	doc, errs := fleet.Validate("applied", ap.Document)
	if errs != nil {
		return a.recordDriftError(now, reported, "the applied document no longer validates: "+errs.Error())
	}
	made, err := a.makePlan(ctx, doc, planHow{prune: &ap.Prune})
	if err != nil {
		// An unreachable provider is an error of the check, not a new drift.
		a.metrics.Drift(false, err)
		return a.recordDriftError(now, reported, refusal.Text(err))
	}
	p := made.Plan
	drifted := !p.Empty() || p.Blocked()
	a.metrics.Drift(drifted, nil)
	if drifted && a.cfg.Heal && !p.Blocked() {
		err := a.heal(ctx, ap, doc, made)
		if err == nil {
			return nil
		}
		// A heal that cannot run leaves the drift: report it as without heal.
		a.log.Error().Err(err).Str("commit", ap.Commit).Msg("cannot heal the drift; it is reported")
	}
	changes, _ := json.Marshal(p.Doing())
	summary, _ := json.Marshal(p.Summary)
	rec := &state.Drift{Changes: changes, Summary: summary, Blocked: p.Blocked(), PlanHash: p.PlanHash, DriftHash: p.DriftHash(), CheckedAt: now, Reported: reported}
	var posts []outbox.Post
	evType, evSummary := "", ""
	switch {
	case drifted && reported != rec.DriftHash:
		rec.Reported = rec.DriftHash
		evType, evSummary = events.Drifted, "the fleet drifted from the applied document: "+p.Summary.Counts()
		a.log.Warn().Str("commit", ap.Commit).Str("driftHash", rec.DriftHash).Int("calls", len(p.Calls)).Bool("blocked", p.Blocked()).
			Msg("the fleet drifted from the applied document: " + strings.Join(p.TextLines(false), " | "))
		if ap.Commit != "" { // an apply from the command line has no commit
			posts = append(posts, outbox.Status(ap.Commit, "drift", "failure", "drifted: "+p.Summary.Counts(), ""))
		}
		if from.PR > 0 {
			posts = append(posts, outbox.Once(from.PR, a.Marker(commentDrift, rec.DriftHash), a.driftBody(ap.Commit, rec.DriftHash, p)))
		}
	case !drifted && reported != reportedConverged:
		rec.Reported = reportedConverged
		evType, evSummary = events.Converged, "the fleet matches the applied document again"
		a.log.Info().Str("commit", ap.Commit).Msg("the fleet matches the applied document again")
		if ap.Commit != "" {
			posts = append(posts, outbox.Status(ap.Commit, "drift", "success", "no drift: the fleet matches the applied document", ""))
		}
		if from.PR > 0 {
			marker := a.Marker(commentConverged, reported)
			posts = append(posts, outbox.Once(from.PR, marker, a.convergedBody(marker, ap.Commit)))
		}
	}
	err = a.store.Update(func(tx *state.Tx) error {
		// The applied record carries when drift was last checked.
		cur, err := tx.Applied()
		if err != nil || cur == nil || cur.Commit != ap.Commit || cur.AppliedAt != ap.AppliedAt {
			return err // an apply happened meanwhile: this check is stale
		}
		cur.CheckedAt = now
		if err := tx.SetApplied(*cur); err != nil {
			return err
		}
		if err := tx.SetDrift(rec); err != nil {
			return err
		}
		if evType != "" {
			data := map[string]any{"commit": ap.Commit, "driftHash": rec.DriftHash, "blocked": rec.Blocked}
			if err := a.event(tx, evType, "fleet/"+a.cfg.Tenant, evSummary, data); err != nil {
				return err
			}
		}
		return a.enqueue(tx, posts...)
	})
	if err != nil {
		return err
	}
	return a.proposeDrift(ctx, ap, doc, made, drifted)
}

func (a *Agent) recordDriftError(now int64, reported, msg string) error {
	return a.store.Update(func(tx *state.Tx) error {
		prev, err := tx.Drift()
		if err != nil {
			return err
		}
		rec := &state.Drift{Error: msg, CheckedAt: now, Reported: reported, Changes: json.RawMessage("[]"), Summary: json.RawMessage("{}")}
		if prev != nil {
			// Keep what the last good check found; only say it failed.
			rec.Changes, rec.Summary, rec.Blocked, rec.PlanHash, rec.DriftHash = prev.Changes, prev.Summary, prev.Blocked, prev.PlanHash, prev.DriftHash
		}
		return tx.SetDrift(rec)
	})
}

// heal re-applies the applied document (drift.heal), audited as a heal.
func (a *Agent) heal(ctx context.Context, ap *state.Applied, doc *fleet.Document, p planned) error {
	a.applyMu.Lock()
	defer a.applyMu.Unlock()
	start := a.clock.Now()
	res, err := apply.Apply(ctx, a.store, doc, apply.Options{Tenant: a.cfg.Tenant, Prune: ap.Prune, MaxTeardowns: a.maxTeardowns(), PlanHash: p.PlanHash,
		AppliedBy: "agent (heal)", Commit: ap.Commit, Live: p.checks, Now: a.clock.Now,
		InTx: func(tx *state.Tx, healed *plan.Plan) error {
			return tx.AppendAudit(state.AuditRow{At: a.clock.Now().UnixMilli(), Who: "agent", Action: "heal", PlanHash: healed.PlanHash, Commit: ap.Commit, Calls: len(healed.Calls)})
		}})
	if err != nil {
		a.metrics.Apply(triggerHeal, resultFailed, a.clock.Now().Sub(start))
		return err
	}
	a.metrics.Apply(triggerHeal, resultApplied, a.clock.Now().Sub(start))
	a.wakeSubstrates()
	a.log.Warn().Str("commit", ap.Commit).Int("calls", res.Applied).Msg("healed drift by re-applying the applied document")
	return nil
}
