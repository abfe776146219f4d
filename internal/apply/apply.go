// Package apply is the apply: it plans a document, checks every call
// without writing anything, then runs all of them in one bbolt transaction
// after planning again inside it. Either every call lands, with its audit
// row and the applied record, or none does.
package apply

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/canon"
	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/refs"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

// Options of one apply.
type Options struct {
	Tenant string
	Prune  bool
	// MaxTeardowns is how many substrates the apply may tear down
	// (apply.maxTeardowns); nil is plan.DefaultMaxTeardowns.
	MaxTeardowns *int
	// PlanHash, when set, is the reviewed plan: the apply refuses with
	// CONFIG_DRIFT unless the plan made now has it, and an empty plan then
	// records the document as the drift baseline.
	PlanHash string
	// AgainIsNothing makes a PlanHash that the applied record already holds,
	// for this very document, a success with nothing to change
	// (Result.AlreadyApplied) instead of CONFIG_DRIFT: the command line's
	// `apply --plan-hash` run twice. The agent leaves it off: a tip it
	// applies must be recorded with its commit.
	AgainIsNothing bool
	// AppliedBy and Commit go into the audit log and the applied record.
	AppliedBy string
	Commit    string
	// Live answers the plan's live checks and decides each call before the
	// write (plan.Checks: the checks of this one plan); nil plans offline
	// and decides nothing.
	Live plan.Checks
	// Now stamps the records.
	Now func() time.Time
	// AfterCall, when set, runs inside the write transaction after each
	// call. Tests use it to kill the process mid-apply; nil in production.
	AfterCall func(i int)
	// InTx, when set, runs inside the write transaction after every call
	// and record: what it writes (the agent's result posts) lands with the
	// apply or not at all.
	InTx func(tx *state.Tx, p *plan.Plan) error
}

// Result is what an apply did.
type Result struct {
	Plan *plan.Plan
	// Applied is the number of calls that ran.
	Applied int
	// Recorded reports whether the document was recorded as applied.
	Recorded bool
	// AlreadyApplied reports that the reviewed plan (Options.PlanHash) is
	// the one the applied record holds, for this very document: the apply
	// ran before, so nothing is left to change and nothing was written.
	AlreadyApplied bool
}

// Apply plans doc against the store and applies it. A blocked plan is
// PLAN_BLOCKED, a plan that is not the reviewed one CONFIG_DRIFT, a call
// that cannot be made INVALID_STATE; in every refusal nothing is written.
func Apply(ctx context.Context, store *state.Store, doc *fleet.Document, opts Options) (*Result, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Tenant == "" {
		opts.Tenant = "root"
	}
	snap, gen, err := store.SnapshotAt()
	if err != nil {
		return nil, err
	}
	var live plan.Live
	if opts.Live != nil {
		live = opts.Live
	}
	p, err := plan.For(ctx, doc, snap, live, plan.Options{Tenant: opts.Tenant, Prune: opts.Prune, MaxTeardowns: opts.MaxTeardowns})
	if err != nil {
		return nil, err
	}
	res := &Result{Plan: p}
	if p.Blocked() {
		return res, Blocked(p)
	}
	if opts.AgainIsNothing && opts.PlanHash != "" && p.PlanHash != opts.PlanHash && p.Empty() {
		// Running the same apply again (a script retried, a person pasting
		// the printed command twice) is not drift: the reviewed plan was
		// applied, to this document, and the fleet still matches it.
		var done bool
		err := store.View(func(tx *state.Tx) error {
			a, err := tx.Applied()
			done = err == nil && a != nil && a.PlanHash == opts.PlanHash && bytes.Equal(a.Document, doc.Canonical())
			return err
		})
		if err != nil {
			return res, err
		}
		if done {
			res.AlreadyApplied = true
			return res, nil
		}
	}
	if err := plan.CheckReviewedHash(opts.PlanHash, p.PlanHash); err != nil {
		return res, err
	}
	if opts.PlanHash != "" && p.PlanHash != opts.PlanHash {
		return res, refusal.New(refusal.ConfigDrift,
			"the plan is no longer the reviewed one (reviewed %s, now %s): the fleet or the document moved since that plan was printed; plan again and review the new plan (a hash not copied from this document's plan reads the same: copy it from the planHash line)", refs.Short(opts.PlanHash), refs.Short(p.PlanHash))
	}
	if p.Empty() && opts.PlanHash == "" {
		return res, nil // nothing to change, nothing recorded
	}
	if opts.Live != nil {
		for i, c := range p.Calls {
			if err := opts.Live.CheckCall(ctx, c); err != nil {
				code := refusal.InvalidState
				if refusal.CodeOf(err) == refusal.Unavailable {
					code = refusal.Unavailable
				}
				return res, refusal.Wrap(code, err, "call %d of %d (%s %s) cannot be made; nothing was applied", i+1, len(p.Calls), c.Method, c.ID())
			}
		}
	}
	now := opts.Now().UnixMilli()
	err = store.Update(func(tx *state.Tx) error {
		// Plan again inside the transaction. Make is a pure function of its
		// inputs, so when no object changed since the snapshot (same
		// generation) the plan is the same one and is not recomputed.
		if tx.Generation() != gen {
			snap, err := tx.Snapshot()
			if err != nil {
				return err
			}
			again := plan.Again(p, doc, snap)
			if again.PlanHash != p.PlanHash || again.Blocked() {
				return refusal.New(refusal.ConfigDrift, "the fleet changed while the apply was checking its calls; nothing was applied; plan again")
			}
		}
		for i, c := range p.Calls {
			if err := run(tx, c); err != nil {
				return refusal.Wrap(refusal.Internal, err, "call %d (%s %s) failed; nothing was applied", i+1, c.Method, c.ID())
			}
			params, _ := canon.Marshal(c.Params)
			if err := tx.AppendAudit(state.AuditRow{At: now, Who: opts.AppliedBy, Action: "call", Method: c.Method,
				Params: params, PlanHash: p.PlanHash, Commit: opts.Commit}); err != nil {
				return err
			}
			if opts.AfterCall != nil {
				opts.AfterCall(i)
			}
		}
		if err := recordSubstrates(tx, p, opts.Tenant, opts.Commit, now); err != nil {
			return err
		}
		if err := tx.AppendAudit(state.AuditRow{At: now, Who: opts.AppliedBy, Action: "apply", PlanHash: p.PlanHash,
			Commit: opts.Commit, Calls: len(p.Calls)}); err != nil {
			return err
		}
		if err := tx.SetApplied(state.Applied{Document: doc.Canonical(), PlanHash: p.PlanHash, Commit: opts.Commit,
			Prune: opts.Prune, AppliedBy: opts.AppliedBy, AppliedAt: now}); err != nil {
			return err
		}
		// Applying again resets the drift.
		if err := tx.SetDrift(nil); err != nil {
			return err
		}
		if opts.InTx != nil {
			return opts.InTx(tx, p)
		}
		return nil
	})
	if err != nil {
		if refusal.CodeOf(err) == refusal.Internal && !isRefusal(err) {
			err = refusal.Wrap(refusal.Internal, err, "the apply could not be written; nothing was applied")
		}
		return res, err
	}
	res.Applied = len(p.Calls)
	res.Recorded = true
	return res, nil
}

func isRefusal(err error) bool {
	var r *refusal.Error
	return errors.As(err, &r)
}

// Blocked is the PLAN_BLOCKED refusal of a plan, naming what is blocked.
func Blocked(p *plan.Plan) error {
	var parts []string
	for _, c := range p.Changes {
		if c.Blocked != "" {
			parts = append(parts, fmt.Sprintf("%s %s: %s", c.Kind, c.Name, c.Blocked))
		}
	}
	more := ""
	if len(parts) > 3 {
		more = fmt.Sprintf("; and %d more", len(parts)-3)
		parts = parts[:3]
	}
	return refusal.New(refusal.PlanBlocked, "%d change(s) blocked (%s%s); fix the document", p.Summary.Blocked, strings.Join(parts, "; "), more)
}

// run executes one call on the store, as the owning module's method would.
func run(tx *state.Tx, c plan.Call) error {
	kind, id := c.Kind(), c.ID()
	_, op, _ := strings.Cut(c.Method, ".")
	spec := make(map[string]any, len(c.Params))
	for k, v := range c.Params {
		if k != "id" {
			spec[k] = inventory.CloneValue(v)
		}
	}
	existing, exists, err := tx.GetObject(kind, id)
	if err != nil {
		return err
	}
	switch op {
	case "create":
		if exists {
			return fmt.Errorf("%s %s exists already", kind, id)
		}
		return tx.PutObject(inventory.Object{Kind: kind, ID: id, Spec: spec}, c.Name())
	case "set", "offer": // upserts: quotas.set, pools.offer
		if !exists {
			return tx.PutObject(inventory.Object{Kind: kind, ID: id, Spec: spec}, c.Name())
		}
		fallthrough
	case "update":
		if !exists {
			return fmt.Errorf("%s %s does not exist", kind, id)
		}
		for k, v := range spec {
			if v == nil {
				delete(existing.Spec, k)
			} else {
				existing.Spec[k] = v
			}
		}
		return tx.PutObject(existing, "")
	case "archive":
		if !exists {
			return fmt.Errorf("%s %s does not exist", kind, id)
		}
		existing.Archived = true
		return tx.PutObject(existing, "")
	case "delete", "unoffer":
		return tx.DeleteObject(kind, id, c.Name())
	}
	return fmt.Errorf("unknown method %s", c.Method)
}
