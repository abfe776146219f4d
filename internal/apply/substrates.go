package apply

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/fleet-agent/fleet-agent/internal/canon"
	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

// recordSubstrates records, inside the apply's transaction and after its
// calls ran, what the apply changed about Kubernetes substrates: for each
// pool the plan created or updated with a policy.substrate, the spec (with
// a new generation when it changed); for a pool archived, or whose substrate
// was removed (the plan only removes it with prune: without, it keeps the
// stored one), the teardown. The reconciler reads these records; it never
// reads the plan. Each call is judged by the pool object as the calls left
// it, so the record says what the fleet now holds.
func recordSubstrates(tx *state.Tx, p *plan.Plan, tenant, commit string, now int64) error {
	for _, c := range p.Calls {
		if c.Kind() != inventory.Pool {
			continue
		}
		if err := recordSubstrate(tx, tenant, commit, now, c.ID(), c.Name()); err != nil {
			return fmt.Errorf("recording the substrate of pool %s: %w", c.Name(), err)
		}
	}
	return nil
}

func recordSubstrate(tx *state.Tx, tenant, commit string, now int64, poolID, name string) error {
	obj, ok, err := tx.GetObject(inventory.Pool, poolID)
	if err != nil || !ok {
		return err
	}
	old, err := tx.SubstrateWant(poolID)
	if err != nil {
		return err
	}
	sub, err := substrateOf(obj)
	if err != nil {
		return err
	}
	var next state.SubstrateWant
	if old != nil {
		next = *old
	}
	switch {
	case obj.Archived || sub == nil:
		// A teardown: of the record apply wrote, or (an archive of a pool
		// whose substrate was applied before anything recorded substrates)
		// of the spec the object still holds.
		switch {
		case old != nil && !old.Present:
			return nil // torn down already
		case old == nil && sub == nil:
			return nil // never had one
		case old == nil:
			next = state.SubstrateWant{PoolID: poolID, Spec: *sub, Account: sub.Account}
		}
		next.Present, next.Teardown = false, state.TeardownRemoved
		if obj.Archived {
			next.Teardown = state.TeardownArchived
		}
		next.Generation++
	case old == nil || !old.Present || !sameSpec(asked(old.Spec), asked(*sub)):
		next.PoolID, next.Spec, next.Account = poolID, *sub, sub.Account
		next.Present, next.Teardown = true, ""
		next.Generation++
	default:
		// protect, the maintenance windows and the drains ask nothing of the
		// provider: they are recorded for the plans and the reconciler to
		// read, without a new generation that would supersede an
		// operation in flight or make a converged substrate look busy.
		next.Spec.Protect, next.Spec.Maintenance, next.Spec.Drain = sub.Protect, sub.Maintenance, sub.Drain
		// asked found the flavors the same but for their drains.
		next.Spec.Flavors = sub.Flavors
	}
	next.Pool, next.Tenant = name, tenant
	next.DisruptionBudget = disruptionBudget(obj)
	if err := refreshAccount(tx, tenant, &next); err != nil {
		return err
	}
	if old != nil && same(*old, next) {
		return nil // the pool changed, not its substrate
	}
	next.Commit, next.RecordedAt = commit, now
	return tx.PutSubstrateWant(next)
}

// substrateOf reads policy.substrate from a stored pool, or nil.
func substrateOf(obj inventory.Object) (*fleet.Substrate, error) {
	pol, _ := obj.Spec["policy"].(map[string]any)
	raw, ok := pol["substrate"]
	if !ok || raw == nil {
		return nil, nil
	}
	data, err := canon.Marshal(raw)
	if err != nil {
		return nil, err
	}
	var s fleet.Substrate
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("policy.substrate is not a substrate: %w", err)
	}
	return &s, nil
}

// disruptionBudget is the pool's policy.disruptionBudget when it is a
// number (the policy is free-form: anything else is no budget).
func disruptionBudget(obj inventory.Object) *float64 {
	pol, _ := obj.Spec["policy"].(map[string]any)
	switch v := pol["disruptionBudget"].(type) {
	case float64:
		return &v
	case int64:
		f := float64(v)
		return &f
	case json.Number:
		if f, err := v.Float64(); err == nil {
			return &f
		}
	}
	return nil
}

func sameSpec(a, b fleet.Substrate) bool { return same(a, b) }

// asked is what of a substrate's spec asks something of the provider:
// all but protect, the maintenance windows and the drain settings.
func asked(s fleet.Substrate) fleet.Substrate {
	s.Protect, s.Maintenance, s.Drain = false, nil, nil
	s.Flavors = slices.Clone(s.Flavors)
	for i := range s.Flavors {
		s.Flavors[i].Drain = nil
	}
	return s
}

func same(a, b any) bool { return bytes.Equal(canon.MustMarshal(a), canon.MustMarshal(b)) }

// refreshAccount copies the substrate's provider account as the fleet now
// holds it; when the account is gone (pruned by this very apply) the copy
// taken before stays, so a teardown can still reach the provider.
func refreshAccount(tx *state.Tx, tenant string, w *state.SubstrateWant) error {
	o, ok, err := tx.GetObject(inventory.ProviderAccount, inventory.ID(tenant, inventory.ProviderAccount, w.Account))
	if err != nil || !ok {
		return err
	}
	provider, _ := o.Spec["provider"].(string)
	cfg, err := canon.Marshal(o.Spec["config"])
	if err != nil {
		return err
	}
	w.AccountCopy = &state.AccountCopy{Provider: provider, Config: cfg}
	return nil
}
