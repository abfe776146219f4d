package plan

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/fleet-agent/fleet-agent/internal/canon"
	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/schema"
)

// Export turns the fleet back into a document: every live object, by name,
// references by name (or by id for objects fleet did not create). Archived
// pools and what hangs off them are left out. Planning the export with
// prune against the same fleet is empty.
func Export(snap *inventory.Snapshot) (*fleet.Document, error) {
	nameOf := func(id string) string {
		if o, ok := snap.ByID(id); ok {
			return o.Name
		}
		return id
	}
	archived := func(poolID string) bool {
		o, ok := snap.ByID(poolID)
		return ok && o.Archived
	}
	// Build the document as JSON in its own shape and validate it: the
	// export is then exactly what a user could commit, in normal form.
	doc := map[string]any{"version": int64(1)}
	var accounts, sites, pools, flavors, templates []any
	for _, o := range snap.Objects(inventory.ProviderAccount) {
		m := copySpec(o.Spec, "name")
		m["name"] = o.Name
		accounts = append(accounts, m)
	}
	for _, o := range snap.Objects(inventory.Site) {
		m := copySpec(o.Spec, "name")
		m["name"] = o.Name
		sites = append(sites, m)
	}
	quotas := map[string]map[string]any{}
	for _, o := range snap.Objects(inventory.OwnerQuota) {
		pool, _ := o.Spec["pool"].(string)
		res, _ := o.Spec["resource"].(string)
		if quotas[pool] == nil {
			quotas[pool] = map[string]any{}
		}
		quotas[pool][res] = o.Spec["max"]
	}
	offers := map[string][]any{}
	for _, o := range snap.Objects(inventory.Offer) {
		pool, _ := o.Spec["pool"].(string)
		offers[pool] = append(offers[pool], copySpec(o.Spec, "pool"))
	}
	for _, o := range snap.Objects(inventory.Pool) {
		if o.Archived {
			continue
		}
		m := copySpec(o.Spec, "name")
		m["name"] = o.Name
		if s, ok := m["site"].(string); ok {
			m["site"] = nameOf(s)
		}
		if a, ok := m["providerAccount"].(string); ok {
			m["providerAccount"] = nameOf(a)
		}
		pin(m, snap.ClusterVersion(o.ID))
		if q := quotas[o.ID]; q != nil {
			m["ownerQuota"] = q
		}
		if offs := offers[o.ID]; len(offs) > 0 {
			m["offers"] = offs
		}
		pools = append(pools, m)
	}
	for _, o := range snap.Objects(inventory.Flavor) {
		pool, _ := o.Spec["pool"].(string)
		if archived(pool) {
			continue
		}
		m := copySpec(o.Spec)
		m["pool"] = nameOf(pool)
		if m["name"] == nil {
			_, short, _ := strings.Cut(o.Name, "/")
			m["name"] = short
		}
		flavors = append(flavors, m)
	}
	for _, o := range snap.Objects(inventory.SandboxTemplate) {
		if pool, _ := o.Spec["pool"].(string); archived(pool) {
			continue
		}
		m := copySpec(o.Spec, "name")
		m["name"] = o.Name
		if p, ok := m["pool"].(string); ok {
			m["pool"] = nameOf(p)
		}
		templates = append(templates, m)
	}
	for k, v := range map[string][]any{"providerAccounts": accounts, "sites": sites, "pools": pools, "flavors": flavors, "sandboxTemplates": templates} {
		if len(v) > 0 {
			doc[k] = v
		}
	}
	if err := fitsADocument(doc, pools); err != nil {
		return nil, err
	}
	data, err := canon.Marshal(doc)
	if err != nil {
		return nil, err
	}
	d, errs := fleet.Validate("export", data)
	if errs != nil {
		return nil, errs.Refusal()
	}
	return d, nil
}

// pin writes the minor a created cluster runs into a pool's exported
// policy when the applied document named none: the provider's choice at
// create becomes the document's, so the cluster's version changes only
// when a reviewed document says so. A recorded version is kept as it was
// applied, even when the cluster has since moved past it.
func pin(pool map[string]any, running string) {
	m, ok := fleet.MinorOf(running)
	if !ok {
		return
	}
	pol, _ := pool["policy"].(map[string]any)
	sub, _ := pol["substrate"].(map[string]any)
	cl, _ := sub["cluster"].(map[string]any)
	cr, ok := cl["create"].(map[string]any)
	if !ok {
		return
	}
	if _, has := cr["version"]; !has {
		cr["version"] = m.String()
	}
}

// fitsADocument refuses a fleet no document can describe: a list longer
// than the schema lets a document have (applies without prune add up: two
// documents of 600 flavors leave 1,200). Said with the count, the limit and
// the ways out, before the schema's own message (which names neither).
func fitsADocument(doc map[string]any, pools []any) error {
	limits := listLimits()
	for _, k := range []string{"providerAccounts", "sites", "pools", "flavors", "sandboxTemplates"} {
		if l, ok := doc[k].([]any); ok && limits[k] > 0 && len(l) > limits[k] {
			return tooMany(fmt.Sprintf("%d %s", len(l), k), limits[k], "")
		}
	}
	for _, p := range pools {
		m := p.(map[string]any)
		if l, ok := m["offers"].([]any); ok && limits["offers"] > 0 && len(l) > limits["offers"] {
			return tooMany(fmt.Sprintf("%d offers on pool %v", len(l), m["name"]), limits["offers"], " of a pool")
		}
	}
	return nil
}

func tooMany(what string, limit int, of string) error {
	return refusal.New(refusal.InvalidInput, "the fleet holds %s; a document lists at most %d%s, so no document can describe this fleet and export writes none. Delete what no document lists (apply a document with --prune, or apply.prune: true), or keep a copy of the fleet with fleet-agent state copy", what, limit, of)
}

// listLimits are the schema's maxItems of the document's lists (and of a
// pool's offers), read once from the embedded schema.
var listLimits = sync.OnceValue(func() map[string]int {
	var s struct {
		Properties map[string]struct {
			MaxItems int `json:"maxItems"`
		} `json:"properties"`
		Defs map[string]struct {
			Properties map[string]struct {
				MaxItems int `json:"maxItems"`
			} `json:"properties"`
		} `json:"$defs"`
	}
	out := map[string]int{}
	if json.Unmarshal(schema.JSON, &s) != nil {
		return out
	}
	for k, p := range s.Properties {
		out[k] = p.MaxItems
	}
	out["offers"] = s.Defs["pool"].Properties["offers"].MaxItems
	return out
})

func copySpec(spec map[string]any, drop ...string) map[string]any {
	m := inventory.CloneValue(spec).(map[string]any)
	for _, k := range drop {
		delete(m, k)
	}
	return m
}

// Pretty renders a document for people and for commits: indented JSON in a
// stable order (fields in the document's order, lists sorted by name, map
// keys sorted). Canonical bytes are for hashing and comparing only.
func Pretty(d *fleet.Document) ([]byte, error) {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(d); err != nil {
		return nil, err
	}
	return []byte(b.String()), nil
}
