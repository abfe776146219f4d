package apply

import (
	"fmt"
	"slices"
	"strings"
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

// references are the fields of an edit that name another object, and its
// kind: the stored value is that object's id, and an edit may give its id
// or its name.
var references = map[inventory.Kind]map[string]inventory.Kind{
	inventory.Pool: {"site": inventory.Site, "providerAccount": inventory.ProviderAccount},
}

// resolveRef turns the value of a reference field into the id of an
// object of the fleet: an id as it is, a name into its id. Anything else
// is refused, with the nearest name when it looks like a typo; stored, it
// would leave a fleet whose export names nothing.
func resolveRef(snap *inventory.Snapshot, kind inventory.Kind, field string, v any) (any, error) {
	if v == nil {
		return nil, nil
	}
	s, ok := v.(string)
	if !ok {
		return nil, refusal.New(refusal.InvalidInput, "%s must name a %s (its name or id), got %s", field, kind, canon.MustMarshal(v))
	}
	if o, ok := snap.ByID(s); ok && o.Kind == kind {
		return o.ID, nil
	}
	if o, ok := snap.ByName(kind, s); ok {
		return o.ID, nil
	}
	var names []string
	for _, o := range snap.Objects(kind) {
		names = append(names, o.Name)
	}
	msg := fmt.Sprintf("%s %q: no %s of that name or id in the fleet", field, s, kind)
	if best := fleet.Closest(s, names); best != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", best)
	}
	if len(names) > 0 {
		msg += "; the fleet's: " + strings.Join(names, ", ")
	}
	return nil, refusal.New(refusal.InvalidInput, "%s", msg)
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
			if kind, ok := references[e.Kind][f]; ok {
				if v, err = resolveRef(snap, kind, f, v); err != nil {
					return err
				}
			}
			if v == nil && inventory.EmptyWhenLeftOut(e.Kind, f) {
				// The document cannot say "none" here, only {}: stored
				// as absent, no document would ever plan without a call.
				v = map[string]any{}
			}
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
