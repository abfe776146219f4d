package apply

import (
	"slices"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/canon"
	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

// editable are the fields a break-glass edit may set, per kind: the
// document's fields (references hold ids, as stored).
var editable = map[inventory.Kind][]string{
	inventory.ProviderAccount: {"config", "provider"},
	inventory.Site:            {"iamRegion", "kind", "region"},
	inventory.Pool:            {"agent", "class", "gpuModel", "policy", "providerAccount", "sharing", "site"},
	inventory.OwnerQuota:      {"max"},
	inventory.Offer:           {"includeDescendants", "priority", "quota"},
	inventory.Flavor:          {"diskGiB", "gpus", "memoryGiB", "offerId", "placement", "vcpu"},
	inventory.SandboxTemplate: {"defaultTtlSeconds", "env", "flavor", "imageId", "maxTtlSeconds", "network", "runtime", "userData", "volumes", "warm"},
}

// Edit is one break-glass change to one object, outside the document, as
// an operator must during an incident. Drift exists to catch it.
type Edit struct {
	Kind inventory.Kind
	Name string
	// Set maps fields to new values (JSON null removes the field).
	Set map[string]any
	// Delete removes the object instead.
	Delete bool
	Who    string
	Now    func() time.Time
}

// ApplyEdit makes an edit in one transaction, with an audit row naming the
// operator.
func ApplyEdit(store *state.Store, e Edit) error {
	if !e.Kind.Valid() {
		return refusal.New(refusal.InvalidInput, "unknown kind %q; one of %v", e.Kind, inventory.Kinds)
	}
	if e.Now == nil {
		e.Now = time.Now
	}
	if !e.Delete && len(e.Set) == 0 {
		return refusal.New(refusal.InvalidInput, "nothing to change: give FIELD=JSON pairs, or --delete")
	}
	for f, v := range e.Set {
		if !slices.Contains(editable[e.Kind], f) {
			return refusal.New(refusal.InvalidInput, "%s has no field %q an edit may set; fields: %v", e.Kind, f, editable[e.Kind])
		}
		// Secrets stay references, in the state and the audit log alike.
		if err := fleet.CheckSecrets(string(e.Kind), f, inventory.Normalize(v)); err != nil {
			return err
		}
	}
	return store.Update(func(tx *state.Tx) error {
		snap, err := tx.Snapshot()
		if err != nil {
			return err
		}
		o, ok := snap.ByName(e.Kind, e.Name)
		if !ok {
			return refusal.New(refusal.InvalidState, "no %s named %q in the fleet", e.Kind, e.Name)
		}
		row := state.AuditRow{At: e.Now().UnixMilli(), Who: e.Who, Action: "edit"}
		if e.Delete {
			row.Method = string(e.Kind) + ".delete (edit)"
			row.Params = canon.MustMarshal(map[string]any{"id": o.ID, "name": o.Name})
			if err := tx.DeleteObject(o.Kind, o.ID, o.Name); err != nil {
				return err
			}
			return tx.AppendAudit(row)
		}
		name := ""
		if o.Name != o.ID {
			name = o.Name
		}
		params := map[string]any{"id": o.ID}
		for f, v := range e.Set {
			params[f] = v
			if v == nil {
				delete(o.Spec, f)
			} else {
				o.Spec[f] = inventory.Normalize(v)
			}
		}
		row.Method = string(e.Kind) + ".update (edit)"
		row.Params, err = canon.Marshal(params)
		if err != nil {
			return refusal.Wrap(refusal.InvalidInput, err, "a value cannot be stored")
		}
		if err := tx.PutObject(o, name); err != nil {
			return err
		}
		// A break-glass edit may bend the fleet, but it must leave one
		// that is still a valid document: export, status and every later
		// plan depend on it.
		after, err := tx.Snapshot()
		if err != nil {
			return err
		}
		if _, err := plan.Export(after); err != nil {
			return refusal.Wrap(refusal.InvalidInput, err, "this edit would leave a fleet that is not a valid document (nothing was changed)")
		}
		return tx.AppendAudit(row)
	})
}
