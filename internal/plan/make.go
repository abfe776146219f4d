package plan

import (
	"fmt"
	"slices"
	"strings"

	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/providers"
)

// Options shape a plan.
type Options struct {
	// Tenant owns the fleet (config tenant, default root): ids derive from
	// it and its pools are never offered to it.
	Tenant string
	// Prune deletes what the document leaves out.
	Prune bool
	// Facts are the live verdicts (Gather); nil plans offline.
	Facts *Facts
	// MaxTeardowns is how many substrates the plan may tear down (config
	// apply.maxTeardowns; 0 none); nil is DefaultMaxTeardowns.
	MaxTeardowns *int
}

// Call groups, in the order calls run (reference "Calls run in dependency
// order").
const (
	gAccounts = iota
	gSites
	gPoolCreates
	gPoolUpdatesAndQuotas
	gOffers
	gFlavors
	gTemplates
	gTemplateDeletes
	gFlavorDeletes
	gUnoffers
	gPoolArchives
	gAccountDeletes
)

// rule says what a kind may change.
type rule struct {
	kind      inventory.Kind
	create    string
	update    string
	delete    string // "" when never deleted
	updatable []string
	fixed     []string
	group     int // group of its creates and updates
	delGroup  int
}

var rules = map[inventory.Kind]rule{
	inventory.ProviderAccount: {kind: inventory.ProviderAccount, create: "providerAccounts.create", update: "providerAccounts.update", delete: "providerAccounts.delete",
		updatable: []string{"config"}, fixed: []string{"provider"}, group: gAccounts, delGroup: gAccountDeletes},
	inventory.Site: {kind: inventory.Site, create: "sites.create", fixed: []string{"iamRegion", "kind", "region"}, group: gSites},
	inventory.Pool: {kind: inventory.Pool, create: "pools.create", update: "pools.update", delete: "pools.archive",
		updatable: []string{"gpuModel", "policy"}, fixed: []string{"agent", "class", "providerAccount", "sharing", "site"}, group: gPoolCreates, delGroup: gPoolArchives},
	inventory.OwnerQuota: {kind: inventory.OwnerQuota, create: "quotas.set", update: "quotas.set", updatable: []string{"max"}, group: gPoolUpdatesAndQuotas},
	inventory.Offer: {kind: inventory.Offer, create: "pools.offer", update: "pools.offer", delete: "pools.unoffer",
		updatable: []string{"includeDescendants", "priority", "quota"}, group: gOffers, delGroup: gUnoffers},
	inventory.Flavor: {kind: inventory.Flavor, create: "flavors.create", update: "flavors.update", delete: "flavors.delete",
		updatable: []string{"diskGiB", "gpus", "memoryGiB", "offerId", "placement", "vcpu"}, group: gFlavors, delGroup: gFlavorDeletes},
	inventory.SandboxTemplate: {kind: inventory.SandboxTemplate, create: "sandboxTemplates.create", update: "sandboxTemplates.update", delete: "sandboxTemplates.delete",
		updatable: []string{"defaultTtlSeconds", "env", "flavor", "imageId", "maxTtlSeconds", "network", "userData", "volumes", "warm"},
		fixed:     []string{"pool", "runtime"}, group: gTemplates, delGroup: gTemplateDeletes},
}

// FixedFields are the fields of a kind that never change once created: a
// plan refuses a change of one, so an edit must not make one either.
func FixedFields(k inventory.Kind) []string { return slices.Clone(rules[k].fixed) }

type entry struct {
	change Change
	call   *Call
}

type planner struct {
	doc   *fleet.Document
	snap  *inventory.Snapshot
	opts  Options
	out   []entry
	seen  map[inventory.Kind]map[string]bool // document objects, by fleet name
	pools map[string]*fleet.Pool             // document pools by name
	sites map[string]bool
	accts map[string]*fleet.ProviderAccount

	storedFlavors map[string]string // pool id + "/" + flavor name -> fleet name
	unmade        map[string]bool   // document pools whose create is blocked
	docFlavors    map[string]bool   // pool id + "/" + flavor name of the document's flavors
}

// Make plans doc against snap. It never fails: what cannot be done is a
// blocked change with its reason.
func Make(doc *fleet.Document, snap *inventory.Snapshot, opts Options) *Plan {
	if opts.Tenant == "" {
		opts.Tenant = "root"
	}
	if snap == nil {
		snap = inventory.NewSnapshot(nil)
	}
	p := &planner{doc: doc, snap: snap, opts: opts, seen: map[inventory.Kind]map[string]bool{}, unmade: map[string]bool{},
		pools: map[string]*fleet.Pool{}, sites: map[string]bool{}, accts: map[string]*fleet.ProviderAccount{}}
	for _, k := range inventory.Kinds {
		p.seen[k] = map[string]bool{}
	}
	for i := range doc.Pools {
		p.pools[doc.Pools[i].Name] = &doc.Pools[i]
	}
	for _, s := range doc.Sites {
		p.sites[s.Name] = true
	}
	for i := range doc.ProviderAccounts {
		p.accts[doc.ProviderAccounts[i].Name] = &doc.ProviderAccounts[i]
	}
	p.accounts()
	p.sitesPlan()
	p.poolsPlan()
	p.flavors()
	p.templates()
	p.prune()
	p.guardTeardowns()
	return p.finish()
}

// idOf returns the id of an object: the stored one's, else the derived one.
func (p *planner) idOf(k inventory.Kind, name string) string {
	if o, ok := p.snap.ByName(k, name); ok {
		return o.ID
	}
	return inventory.ID(p.opts.Tenant, k, name)
}

func (p *planner) siteID(name string) (string, bool) {
	if p.sites[name] {
		return p.idOf(inventory.Site, name), true
	}
	if o, ok := p.snap.ByName(inventory.Site, name); ok {
		return o.ID, true
	}
	return "", false
}

func (p *planner) accountID(name string) (string, bool) {
	if _, ok := p.accts[name]; ok {
		return p.idOf(inventory.ProviderAccount, name), true
	}
	if o, ok := p.snap.ByName(inventory.ProviderAccount, name); ok {
		return o.ID, true
	}
	return "", false
}

func (p *planner) accountProvider(name string) string {
	if a, ok := p.accts[name]; ok {
		return a.Provider
	}
	if o, ok := p.snap.ByName(inventory.ProviderAccount, name); ok {
		s, _ := o.Spec["provider"].(string)
		return s
	}
	return ""
}

// poolID resolves a pool reference: a pool of the document, a live pool of
// the fleet by name, or (for templates) by id. Archived pools, and with
// prune live pools the document leaves out, do not count: the reason says
// why, and the id, when the pool exists, still comes back so that the
// blocked change compares against the right pool.
func (p *planner) poolID(ref string, byID bool) (string, string) {
	if _, ok := p.pools[ref]; ok {
		if o, ok := p.snap.ByName(inventory.Pool, ref); ok && o.Archived {
			return o.ID, fmt.Sprintf("pool %q is archived", ref)
		}
		if p.unmade[ref] {
			// What hangs off a pool that cannot be created cannot be made
			// either; counting it as a create would overstate the plan.
			return p.idOf(inventory.Pool, ref), fmt.Sprintf("pool %q cannot be created (blocked)", ref)
		}
		return p.idOf(inventory.Pool, ref), ""
	}
	// A live pool the document leaves out is archived by a plan with
	// prune: what still uses it would be blocked by the next plan.
	pruned := func(o inventory.Object) string {
		if p.opts.Prune && p.pools[o.Name] == nil {
			return fmt.Sprintf("pool %q is left out of the document, so prune archives it; list it or remove what uses it", o.Name)
		}
		return ""
	}
	if o, ok := p.snap.ByName(inventory.Pool, ref); ok {
		if o.Archived {
			return o.ID, fmt.Sprintf("pool %q is archived", ref)
		}
		if why := pruned(o); why != "" {
			return o.ID, why
		}
		return o.ID, ""
	}
	if byID {
		if o, ok := p.snap.ByID(ref); ok && o.Kind == inventory.Pool && !o.Archived {
			if why := pruned(o); why != "" {
				return o.ID, why
			}
			return o.ID, ""
		}
	}
	return "", fmt.Sprintf("unknown pool %q", ref)
}

// compare plans one document object against its stored version.
func (p *planner) compare(k inventory.Kind, name, order string, want map[string]any, blocked []string, group int) *entry {
	r := rules[k]
	p.seen[k][name] = true
	e := entry{change: Change{Kind: k, Name: name, counted: true, group: group, order: order}}
	existing, exists := p.snap.ByName(k, name)
	if exists && k == inventory.Pool && existing.Archived {
		blocked = append(blocked, "archived; choose a new name")
	}
	id := p.idOf(k, name)
	if !exists || (k == inventory.Pool && existing.Archived) {
		e.change.Action = Create
		params := map[string]any{"id": id}
		for f, v := range want {
			params[f] = v
		}
		e.call = &Call{Method: r.create, Params: params, kind: k, name: name}
	} else {
		var changed, fixed []string
		// A field the document leaves out means its default, and a field
		// without one means none (document.md), so a stored value the
		// document does not list (a hand edit) is a difference too.
		keys := map[string]bool{}
		for f := range want {
			keys[f] = true
		}
		for f := range existing.Spec {
			keys[f] = true
		}
		for f := range keys {
			if equal(want[f], existing.Spec[f]) {
				continue
			}
			switch {
			case slices.Contains(r.fixed, f):
				fixed = append(fixed, f)
			case slices.Contains(r.updatable, f):
				changed = append(changed, f)
			}
		}
		slices.Sort(changed)
		slices.Sort(fixed)
		switch {
		case len(fixed) > 0:
			e.change.Action = Update
			e.change.Fields = slices.Sorted(slices.Values(append(changed, fixed...)))
			blocked = append(blocked, fmt.Sprintf("%s cannot change once created; create a new %s under another name instead", strings.Join(fixed, ", "), k))
		case len(changed) > 0:
			e.change.Action = Update
			e.change.Fields = changed
			params := map[string]any{"id": id}
			for _, f := range changed {
				params[f] = want[f]
			}
			e.call = &Call{Method: r.update, Params: params, kind: k, name: name}
		default:
			e.change.Action = Unchanged
		}
	}
	if len(blocked) > 0 {
		e.change.Blocked = strings.Join(blocked, "; ")
		e.call = nil
	}
	p.out = append(p.out, e)
	return &p.out[len(p.out)-1]
}

// note attaches notes to a change. "not checked live" on an object that
// does not change is noise and is dropped; other notes (the substrate
// kept) matter even then.
func (p *planner) note(e *entry, notes []string) {
	if e.change.Action == Unchanged && e.change.Blocked == "" {
		notes = slices.DeleteFunc(slices.Clone(notes), func(s string) bool { return s == NoteNotChecked })
	}
	e.change.addNotes(notes...)
}

func (p *planner) verdict(v Verdict, ok bool) (blocked, notes []string) {
	if !ok || v.Offline {
		notes = append(notes, NoteNotChecked)
	}
	return append(blocked, v.Blocked...), append(notes, v.Notes...)
}

func (p *planner) facts() *Facts {
	if p.opts.Facts == nil {
		return &Facts{}
	}
	return p.opts.Facts
}

func (p *planner) accounts() {
	for i := range p.doc.ProviderAccounts {
		a := &p.doc.ProviderAccounts[i]
		v, ok := p.facts().Accounts[a.Name]
		blocked, notes := p.verdict(v, ok)
		e := p.compare(inventory.ProviderAccount, a.Name, a.Name, accountSpec(a), nil, gAccounts)
		// Live verdicts block only what would change.
		if len(blocked) > 0 && e.change.Action != Unchanged {
			p.block(e, blocked...)
		}
		p.note(e, notes)
	}
}

func (p *planner) block(e *entry, reasons ...string) {
	if e.change.Blocked != "" {
		reasons = append([]string{e.change.Blocked}, reasons...)
	}
	e.change.Blocked = strings.Join(reasons, "; ")
	e.call = nil
}

func (p *planner) sitesPlan() {
	for i := range p.doc.Sites {
		s := &p.doc.Sites[i]
		p.compare(inventory.Site, s.Name, s.Name, siteSpec(s), nil, gSites)
	}
}

func (p *planner) poolsPlan() {
	// account + adopted id -> pool. A stored pool that keeps its cluster
	// holds the claim, so a new pool that adopts the same cluster is the
	// one blocked, whatever the names' order.
	claims := map[string]string{}
	for _, o := range p.snap.Objects(inventory.Pool) {
		key := adoptKey(o.Spec["policy"])
		if o.Archived || key == "" {
			continue
		}
		if dp := p.pools[o.Name]; dp != nil {
			sub := dp.Substrate()
			kept := sub == nil && !p.opts.Prune
			if !kept && (sub == nil || sub.Account+"\x00"+sub.Cluster.Adopt != key) {
				continue
			}
		}
		claims[key] = o.Name
	}
	names := make([]string, 0, len(p.pools))
	for n := range p.pools {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, name := range names {
		pool := p.pools[name]
		var blocked, notes []string
		siteID, ok := p.siteID(pool.Site)
		if !ok {
			blocked = append(blocked, fmt.Sprintf("unknown site %q", pool.Site))
		}
		var accountID string
		if pool.ProviderAccount != "" {
			if accountID, ok = p.accountID(pool.ProviderAccount); !ok {
				blocked = append(blocked, fmt.Sprintf("unknown provider account %q", pool.ProviderAccount))
			}
		}
		want := poolSpec(pool, siteID, accountID)
		existing, exists := p.snap.ByName(inventory.Pool, name)
		stored, _ := existing.Spec["policy"].(map[string]any)
		if sub := pool.Substrate(); sub != nil {
			provider := p.accountProvider(sub.Account)
			switch {
			case provider == "":
				blocked = append(blocked, fmt.Sprintf("unknown provider account %q (policy.substrate.account)", sub.Account))
			case !providers.Known(provider):
				blocked = append(blocked, fmt.Sprintf("substrate account %q is an account of provider %s; a Kubernetes substrate needs an account of one of the providers %s", sub.Account, provider, strings.Join(providers.KnownIDs, ", ")))
			}
			if exists && !existing.Archived {
				if old, ok := stored["substrate"].(map[string]any); ok && !sameIdentity(old, substrateValue(sub)) {
					blocked = append(blocked, "the substrate's account and cluster (location, private nodes or adopted id) cannot change; create a new pool instead")
				}
				vv := p.clusterVersion(sub, existing, stored)
				blocked = append(blocked, vv.blocked...)
				notes = append(notes, vv.notes...)
				if vv.pinned {
					unpin(want)
				}
			}
			if key := adoptKey(want["policy"]); key != "" {
				if other, taken := claims[key]; taken && other != name {
					blocked = append(blocked, fmt.Sprintf("cluster %q of account %q is already claimed by pool %q; one cluster backs one pool", sub.Cluster.Adopt, sub.Account, other))
				} else {
					claims[key] = name
				}
			}
			v, ok := p.facts().Substrates[name]
			b, n := p.verdict(v, ok)
			blocked = append(blocked, b...)
			notes = append(notes, n...)
		} else if exists && !existing.Archived && !p.opts.Prune {
			if old, ok := stored["substrate"]; ok {
				// Without prune a pool keeps its substrate: the
				// comparison leaves it out.
				pol := want["policy"].(map[string]any)
				pol["substrate"] = old
				notes = append(notes, "substrate kept: removing it needs prune")
			}
		}
		e := p.compare(inventory.Pool, name, name, want, nil, gPoolCreates)
		if e.change.Action == Update {
			e.change.group, e.change.order = gPoolUpdatesAndQuotas, name+"\x00"
		}
		if e.change.Action != Unchanged && len(blocked) > 0 {
			p.block(e, blocked...)
		} else if e.change.Action == Unchanged && len(blocked) > 0 && !onlyLive(blocked, p.facts().Substrates[name]) {
			p.block(e, blocked...)
		}
		if sub := pool.Substrate(); sub != nil && e.change.Action != Unchanged {
			notes = append(notes, p.versionNotes(name, sub, existing.ID, exists, e.change.Action)...)
			if n := windowsChange(stored, sub); exists && n != "" {
				notes = append(notes, n)
				if windowsOf(sub) == nil {
					// Taken out in the same change as steps that would
					// have waited: those start at once, and say so.
					for _, w := range disruptive(stored, want["policy"].(map[string]any), sub) {
						notes = append(notes, w+" starts at once (no maintenance window any more)")
					}
				}
			}
		}
		p.note(e, notes)
		if e.change.Action == Create && e.change.Blocked != "" {
			p.unmade[name] = true
		}
		if sub := pool.Substrate(); sub != nil && e.change.Action == Update && e.change.Blocked == "" && exists {
			if windows := windowsOf(sub); windows != nil {
				if waits := disruptive(stored, want["policy"].(map[string]any), sub); len(waits) > 0 {
					e.change.Window = &Window{Windows: windows, Waits: waits}
				}
			}
			p.hops(name, sub, existing, stored)
		}
		p.quotas(pool)
		p.offers(pool)
	}
}

// onlyLive reports whether every reason came from the live verdict: those
// block only what would change.
func onlyLive(blocked []string, v Verdict) bool {
	for _, b := range blocked {
		if !slices.Contains(v.Blocked, b) {
			return false
		}
	}
	return true
}

func adoptKey(policy any) string {
	pol, _ := policy.(map[string]any)
	sub, _ := pol["substrate"].(map[string]any)
	cl, _ := sub["cluster"].(map[string]any)
	id, _ := cl["adopt"].(string)
	acc, _ := sub["account"].(string)
	if id == "" {
		return ""
	}
	return acc + "\x00" + id
}

// sameIdentity compares a substrate's identity: its account and cluster.
func sameIdentity(a, b map[string]any) bool {
	return equal(a["account"], b["account"]) && equal(withoutVersion(a["cluster"]), withoutVersion(b["cluster"]))
}

func (p *planner) quotas(pool *fleet.Pool) {
	// A pool of the document resolves to its own id; the only reason
	// there is an archived pool of that name, which takes no quota.
	poolID, why := p.poolID(pool.Name, false)
	if poolID == "" {
		poolID = p.idOf(inventory.Pool, pool.Name)
	}
	var blocked []string
	if why != "" {
		blocked = append(blocked, why)
	}
	for _, res := range inventory.SortedKeys(pool.OwnerQuota) {
		name := inventory.OwnerQuotaName(pool.Name, res)
		p.compare(inventory.OwnerQuota, name, pool.Name+"\x01"+res, quotaSpec(poolID, res, pool.OwnerQuota[res]), blocked, gPoolUpdatesAndQuotas)
	}
}

func (p *planner) offers(pool *fleet.Pool) {
	poolID := p.idOf(inventory.Pool, pool.Name)
	_, why := p.poolID(pool.Name, false)
	for i := range pool.Offers {
		o := &pool.Offers[i]
		var blocked []string
		if why != "" {
			blocked = append(blocked, why)
		}
		if o.Tenant == p.opts.Tenant {
			blocked = append(blocked, fmt.Sprintf("a pool is never offered to its owner tenant %q; set ownerQuota instead", p.opts.Tenant))
		}
		name := inventory.OfferName(pool.Name, o.Tenant)
		p.compare(inventory.Offer, name, name, offerSpec(poolID, o), blocked, gOffers)
	}
}

func (p *planner) flavors() {
	for i := range p.doc.Flavors {
		f := &p.doc.Flavors[i]
		var blocked []string
		poolID, why := p.poolID(f.Pool, false)
		if why != "" {
			blocked = append(blocked, why)
		}
		name := inventory.FlavorName(f.Pool, f.Name)
		if poolID != "" {
			if p.docFlavors == nil {
				p.docFlavors = map[string]bool{}
			}
			p.docFlavors[poolID+"/"+f.Name] = true
		}
		p.compare(inventory.Flavor, name, name, flavorSpec(poolID, f), blocked, gFlavors)
	}
}

// flavorExists reports whether the pool (as the template writes it, with
// its id) has the flavor: in the document, or in the fleet unless prune is
// about to delete it.
func (p *planner) flavorExists(pool, poolID, name string) bool {
	// A flavor of the document, whether the template names its pool as
	// the flavor does or by the pool's id.
	if p.seen[inventory.Flavor][inventory.FlavorName(pool, name)] || p.docFlavors[poolID+"/"+name] {
		return true
	}
	if p.storedFlavors == nil {
		p.storedFlavors = map[string]string{}
		for _, o := range p.snap.Objects(inventory.Flavor) {
			pid, _ := o.Spec["pool"].(string)
			n, _ := o.Spec["name"].(string)
			p.storedFlavors[pid+"/"+n] = o.Name
		}
	}
	stored, ok := p.storedFlavors[poolID+"/"+name]
	return ok && (!p.opts.Prune || p.seen[inventory.Flavor][stored])
}

func (p *planner) templates() {
	for i := range p.doc.SandboxTemplates {
		t := &p.doc.SandboxTemplates[i]
		var blocked []string
		poolID, why := p.poolID(t.Pool, true)
		if why != "" {
			blocked = append(blocked, why)
		} else if !p.flavorExists(t.Pool, poolID, t.Flavor) {
			blocked = append(blocked, fmt.Sprintf("unknown flavor %q in pool %q", t.Flavor, t.Pool))
		}
		p.compare(inventory.SandboxTemplate, t.Name, t.Name, templateSpec(poolID, t), blocked, gTemplates)
	}
}

// prune plans what the document leaves out: deletes with prune, nothing
// without (those objects count nowhere).
func (p *planner) prune() {
	if !p.opts.Prune {
		return
	}
	archived := map[string]bool{} // pool ids archived by this plan or before
	for _, o := range p.snap.Objects(inventory.Pool) {
		if o.Archived || !p.seen[inventory.Pool][o.Name] {
			archived[o.ID] = true
		}
	}
	// Accounts still in use by a pool that stays.
	inUse := map[string]string{}
	use := func(acct, pool string) {
		if acct != "" && inUse[acct] == "" {
			inUse[acct] = pool
		}
	}
	for _, pool := range p.doc.Pools {
		use(pool.ProviderAccount, pool.Name)
		if s := pool.Substrate(); s != nil {
			use(s.Account, pool.Name)
		}
	}
	for _, kind := range []inventory.Kind{inventory.SandboxTemplate, inventory.Flavor, inventory.Offer, inventory.Pool, inventory.OwnerQuota, inventory.ProviderAccount} {
		r := rules[kind]
		for _, o := range p.snap.Objects(kind) {
			if p.seen[kind][o.Name] || (kind == inventory.Pool && o.Archived) {
				continue
			}
			// What belongs to a pool archived earlier (and the owner
			// quotas of a pool archived now) stays with it: the export
			// leaves it out, so prune leaves it alone.
			if pool, _ := o.Spec["pool"].(string); pool != "" && archived[pool] && (kind == inventory.OwnerQuota || isArchivedBefore(p.snap, pool)) {
				continue
			}
			e := entry{change: Change{Kind: kind, Name: o.Name, Action: Delete, group: r.delGroup, order: o.Name}}
			switch kind {
			case inventory.OwnerQuota:
				e.change.Action = Unchanged
				e.change.group = gPoolUpdatesAndQuotas
				// With its pool, after the pool's update, by resource.
				poolID, _ := o.Spec["pool"].(string)
				if pool, ok := p.snap.ByID(poolID); ok {
					res, _ := o.Spec["resource"].(string)
					e.change.order = pool.Name + "\x01" + res
				}
				e.change.addNotes("owner quotas are never deleted; set 0 to stop")
				p.out = append(p.out, e)
				continue
			case inventory.ProviderAccount:
				if user := inUse[o.Name]; user != "" {
					e.change.Blocked = fmt.Sprintf("still used by pool %q; remove or change that pool first", user)
					p.out = append(p.out, e)
					continue
				}
			}
			e.call = &Call{Method: r.delete, Params: map[string]any{"id": o.ID}, kind: kind, name: o.Name}
			p.out = append(p.out, e)
		}
	}
}

func isArchivedBefore(snap *inventory.Snapshot, poolID string) bool {
	o, ok := snap.ByID(poolID)
	return ok && o.Archived
}

func (p *planner) finish() *Plan {
	p.noteRenames()
	slices.SortStableFunc(p.out, func(a, b entry) int {
		if a.change.group != b.change.group {
			return a.change.group - b.change.group
		}
		return strings.Compare(a.change.order, b.change.order)
	})
	pl := &Plan{Changes: make([]Change, 0, len(p.out)), Calls: []Call{}, opts: p.opts}
	for _, e := range p.out {
		c := e.change
		pl.Changes = append(pl.Changes, c)
		switch {
		case c.Blocked != "":
			pl.Summary.Blocked++
		case c.Action == Delete:
			pl.Summary.Delete++
		case !c.counted:
		case c.Action == Create:
			pl.Summary.Create++
		case c.Action == Update:
			pl.Summary.Update++
		default:
			pl.Summary.Unchanged++
		}
		if e.call != nil && c.Blocked == "" {
			pl.Calls = append(pl.Calls, *e.call)
		}
	}
	pl.PlanHash = hashCalls(pl.Calls)
	pl.held = p.held()
	return pl
}

// held is what the fleet holds where it differs from the document: the
// stored values of an update's fields, the whole object a delete removes.
// The calls set the document's values back, so they are the same for two
// hand edits of one field to different values; this tells those apart.
func (p *planner) held() []any {
	var out []any
	for _, e := range p.out {
		c := e.change
		if c.Action != Update && c.Action != Delete {
			continue
		}
		o, ok := p.snap.ByName(c.Kind, c.Name)
		if !ok {
			continue
		}
		vals := map[string]any{}
		if c.Action == Delete {
			vals = o.Spec
		}
		for _, f := range c.Fields {
			vals[f] = o.Spec[f]
		}
		out = append(out, []any{string(c.Kind), c.Name, vals})
	}
	return out
}

// noteRenames marks a delete and a create of the same kind whose specs agree
// but for the name. The document has no way to say "rename", so a rename is
// planned as the two changes; a policy rule on updates never sees it, and the
// note tells the reviewer and the rule's author what happened. A create that
// matches more than one delete is left unmarked: which one it replaces is a
// guess.
func (p *planner) noteRenames() {
	deletes := map[inventory.Kind][]int{}
	for i := range p.out {
		c := &p.out[i].change
		if c.Action == Delete && c.Blocked == "" && p.out[i].call != nil {
			deletes[c.Kind] = append(deletes[c.Kind], i)
		}
	}
	if len(deletes) == 0 {
		return
	}
	taken := map[int]bool{}
	for i := range p.out {
		e := &p.out[i]
		if e.change.Action != Create || e.change.Blocked != "" || e.call == nil {
			continue
		}
		match := -1
		for _, d := range deletes[e.change.Kind] {
			old, ok := p.snap.ByName(p.out[d].change.Kind, p.out[d].change.Name)
			if taken[d] || !ok || !sameButName(old.Spec, e.call.Params) {
				continue
			}
			if match >= 0 {
				match = -1
				break
			}
			match = d
		}
		if match < 0 {
			continue
		}
		taken[match] = true
		old := &p.out[match].change
		e.change.addNotes(fmt.Sprintf("a rename of %s %s: planned as its delete and this create, so rules on updates do not see it", old.Kind, old.Name))
		old.addNotes(fmt.Sprintf("renamed to %s: planned as this delete and a create, so rules on updates do not see it", e.change.Name))
	}
}

// sameButName: the stored spec and a create's parameters hold the same
// values, leaving out the id and the name.
func sameButName(stored, params map[string]any) bool {
	keys := map[string]bool{}
	for k := range stored {
		keys[k] = true
	}
	for k := range params {
		keys[k] = true
	}
	for k := range keys {
		if k == "id" || k == "name" {
			continue
		}
		if !equal(stored[k], params[k]) {
			return false
		}
	}
	return true
}
