package apply

import (
	"bytes"
	"fmt"
	"maps"
	"reflect"
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
	// refused is an edit the substrate rules turned down: its audit row is
	// written, so the transaction commits, and the refusal is returned
	// after.
	var refused error
	err := store.Update(func(tx *state.Tx) error {
		snap, err := tx.Snapshot()
		if err != nil {
			return err
		}
		o, ok := snap.ByName(e.Kind, e.Name)
		if !ok {
			return refusal.New(refusal.InvalidState, "no %s named %q in the fleet", e.Kind, e.Name)
		}
		row := state.AuditRow{At: e.Now().UnixMilli(), Who: e.Who, Action: "edit"}
		row.Method = string(e.Kind) + ".update (edit)"
		if e.Delete {
			row.Method = string(e.Kind) + ".delete (edit)"
		}
		why, err := substrateRules(tx, o, e)
		if err != nil {
			return err
		}
		if why == "" {
			why, err = fleetRules(snap, o, e)
			if err != nil {
				return err
			}
		}
		if why != "" {
			row.Action = "edit-refused"
			row.Params = canon.MustMarshal(map[string]any{"id": o.ID, "name": o.Name, "refused": why})
			refused = refusal.New(refusal.InvalidState, "%s", why)
			return tx.AppendAudit(row)
		}
		if e.Delete {
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
	if err != nil {
		return err
	}
	return refused
}

// An edit is break glass for a pool's fields, never for its substrate:
// what a reviewed plan guards about a substrate (docs/substrates.md) an
// edit cannot bend, since an edit is not judged by the policy, not
// recorded for the reconciler, and would leave the plan's guards reading a
// fleet the operator bent. substrateRules takes these rows in order, on
// the pool as the fleet holds it; the first that matches refuses:
//
//	edit                                                  refused because
//	--delete of a pool with a substrate                   a teardown goes through the document (protect, apply.maxTeardowns)
//	policy without policy.substrate                       the same
//	protect taken out of a protected substrate            protect comes off through the document, in its own change
//	its account or cluster changed (but the version)      a substrate's identity never changes: a new pool is made instead
//	a created cluster's version changed (set or removed)  an upgrade goes through a reviewed plan, hop by hop
//	anything else of it, or the pool's disruptionBudget   an edit does not reach the reconciler (only protect may turn on)
//	a substrate added to a pool without one               the same: nothing would be made, and drift would not see it
//
// A substrate counts when the stored pool's policy has one or the
// reconciler's record is present; protected when either says so (the two
// agree after an apply; where they do not, the stricter holds).
func substrateRules(tx *state.Tx, o inventory.Object, e Edit) (string, error) {
	if o.Kind != inventory.Pool {
		return "", nil
	}
	rec, err := tx.SubstrateWant(o.ID)
	if err != nil {
		return "", err
	}
	old := poolSubstrate(o.Spec["policy"])
	has := old != nil && !o.Archived || rec != nil && rec.Present
	if !has {
		if pol, set := e.Set["policy"]; set && poolSubstrate(inventory.Normalize(pol)) != nil {
			return fmt.Sprintf("pool %s: a substrate is made only through the document (an edit is not recorded for the reconciler, so nothing would be made and drift would not see it): add policy.substrate to the document; nothing was changed", o.Name), nil
		}
		return "", nil
	}
	protected, _ := old["protect"].(bool)
	protected = protected || rec != nil && rec.Present && rec.Spec.Protect
	teardown := fmt.Sprintf("pool %s has a Kubernetes substrate, and fleet-agent tears a substrate down only through the document, where protect and apply.maxTeardowns guard the teardown: take the pool (with prune) or its policy.substrate out of the document (a protected one after applying \"protect\": false); nothing was changed", o.Name)
	if e.Delete {
		return teardown, nil
	}
	pol, set := e.Set["policy"]
	if !set {
		return "", nil
	}
	sub := poolSubstrate(inventory.Normalize(pol))
	if sub == nil {
		return teardown, nil
	}
	if keeps, _ := sub["protect"].(bool); protected && !keeps {
		return fmt.Sprintf("pool %s's substrate is protected as applied, and an edit cannot take protect out: apply \"protect\": false through the document, in its own reviewed change; nothing was changed", o.Name), nil
	}
	idWas, ok1 := identity(old)
	idNow, ok2 := identity(sub)
	if !ok1 || !ok2 || !bytes.Equal(idWas, idNow) {
		return fmt.Sprintf("pool %s: a substrate's account and cluster cannot change, by an edit as by a plan (the cluster is the one the substrate made or adopted): make a new pool for another account or cluster, through the document; nothing was changed", o.Name), nil
	}
	if was, created := createdVersion(old); created {
		if now, _ := createdVersion(sub); now != was {
			return fmt.Sprintf("pool %s's created cluster has version %s as applied, and an edit cannot change a created cluster's version (asked: %s): an upgrade goes through a reviewed plan, which checks the version against what the account offers and shows each hop; write policy.substrate.cluster.create.version in the document; nothing was changed", o.Name, orNone(was), orNone(now)), nil
		}
	}
	oldPol, _ := o.Spec["policy"].(map[string]any)
	newPol, _ := inventory.Normalize(pol).(map[string]any)
	if !reflect.DeepEqual(withoutProtect(old), withoutProtect(sub)) || !reflect.DeepEqual(oldPol["disruptionBudget"], newPol["disruptionBudget"]) {
		return fmt.Sprintf("pool %s: an edit does not reach the reconciler, so a substrate's flavors, sizes, windows, drains or the pool's disruptionBudget changed by one would never reach the cluster while the substrate said it converged: change them in the document; only \"protect\": true may be set by an edit; nothing was changed", o.Name), nil
	}
	return "", nil
}

// withoutProtect is a substrate's spec without protect, which an edit may
// turn on.
func withoutProtect(sub map[string]any) map[string]any {
	out := maps.Clone(sub)
	delete(out, "protect")
	return out
}

// fleetRules refuse an edit that would leave a fleet the document cannot
// take back by being applied again: a field that never changes once
// created changed (a plan refuses that change, so every later plan would be
// blocked), or an object deleted that another still names (its export
// would name nothing).
func fleetRules(snap *inventory.Snapshot, o inventory.Object, e Edit) (string, error) {
	if e.Delete {
		if user := usedBy(snap, o); user != "" {
			return fmt.Sprintf("%s %s is named by %s: deleting it would leave a fleet whose export names nothing; change or delete that first, through the document; nothing was changed", o.Kind, o.Name, user), nil
		}
		return "", nil
	}
	if v, ok := e.Set["flavor"]; ok && o.Kind == inventory.SandboxTemplate && !flavorIn(snap, o.Spec["pool"], inventory.Normalize(v)) {
		return fmt.Sprintf("%s %s: its pool has no flavor %v: a template names a flavor of its pool, or its export would name nothing; nothing was changed", o.Kind, o.Name, inventory.Normalize(v)), nil
	}
	for _, f := range slices.Sorted(maps.Keys(e.Set)) {
		if !slices.Contains(plan.FixedFields(o.Kind), f) {
			continue
		}
		v := e.Set[f]
		if kind, ok := references[o.Kind][f]; ok {
			var err error
			if v, err = resolveRef(snap, kind, f, v); err != nil {
				return "", err
			}
		}
		if !reflect.DeepEqual(inventory.Normalize(v), o.Spec[f]) {
			return fmt.Sprintf("%s %s: %s never changes once created, by an edit as by a plan (a plan would refuse every later document): make a new %s under another name, through the document; nothing was changed", o.Kind, o.Name, f, o.Kind), nil
		}
	}
	return "", nil
}

// usedBy names the first object of the fleet (not archived) that names o:
// its id anywhere in its spec, or, for a provider account, its name as a
// substrate's account; "" when none does.
func usedBy(snap *inventory.Snapshot, o inventory.Object) string {
	for _, other := range snap.All() {
		if other.ID == o.ID || other.Archived {
			continue
		}
		if names(other.Spec, o.ID) {
			return fmt.Sprintf("%s %s", other.Kind, other.Name)
		}
		if o.Kind == inventory.Flavor && other.Kind == inventory.SandboxTemplate && other.Spec["pool"] == o.Spec["pool"] && other.Spec["flavor"] == flavorName(o) {
			return fmt.Sprintf("%s %s", other.Kind, other.Name)
		}
		if o.Kind == inventory.ProviderAccount && other.Kind == inventory.Pool {
			if s := poolSubstrate(other.Spec["policy"]); s != nil && s["account"] == o.Name {
				return fmt.Sprintf("pool %s's substrate", other.Name)
			}
		}
	}
	return ""
}

// flavorName is a flavor's name within its pool (a template names it so).
func flavorName(o inventory.Object) string {
	if n, ok := o.Spec["name"].(string); ok {
		return n
	}
	_, short, _ := strings.Cut(o.Name, "/")
	return short
}

// flavorIn reports whether the fleet holds a flavor named name in pool.
func flavorIn(snap *inventory.Snapshot, pool any, name any) bool {
	for _, f := range snap.Objects(inventory.Flavor) {
		if !f.Archived && f.Spec["pool"] == pool && flavorName(f) == name {
			return true
		}
	}
	return false
}

// names reports whether v holds the string id anywhere.
func names(v any, id string) bool {
	switch x := v.(type) {
	case string:
		return x == id
	case map[string]any:
		for _, e := range x {
			if names(e, id) {
				return true
			}
		}
	case []any:
		for _, e := range x {
			if names(e, id) {
				return true
			}
		}
	}
	return false
}

// identity is a substrate's account and cluster, its created cluster's
// version left out (the version changes in place, and has its own row), as
// canonical bytes; ok is false for one that does not encode (stored values
// always do; the edit is refused if not).
func identity(sub map[string]any) (_ []byte, ok bool) {
	cluster := map[string]any{}
	if cl, ok := sub["cluster"].(map[string]any); ok {
		for k, v := range cl {
			cluster[k] = v
		}
		if cr, ok := cl["create"].(map[string]any); ok {
			c := map[string]any{}
			for k, v := range cr {
				if k != "version" {
					c[k] = v
				}
			}
			cluster["create"] = c
		}
	}
	b, err := canon.Marshal(map[string]any{"account": sub["account"], "cluster": cluster})
	return b, err == nil
}

// poolSubstrate is policy.substrate of a stored (normalised) policy, or nil.
func poolSubstrate(policy any) map[string]any {
	pol, _ := policy.(map[string]any)
	sub, _ := pol["substrate"].(map[string]any)
	return sub
}

// createdVersion is the version of a substrate's created cluster ("" when
// none is named); created is false for an adopted cluster.
func createdVersion(sub map[string]any) (version string, created bool) {
	cl, _ := sub["cluster"].(map[string]any)
	cr, ok := cl["create"].(map[string]any)
	if !ok {
		return "", false
	}
	v, _ := cr["version"].(string)
	return v, true
}

func orNone(v string) string {
	if v == "" {
		return "none named"
	}
	return v
}
