package policy

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/plan"
)

// acctPool is a pool of the account test and what it owns: an owner quota,
// an offer, a flavor and a sandbox template. gpus and ttl vary the flavor
// and the template between the fleet and the proposal (an update); extra
// adds a second flavor, quota resource, offer and template (creates).
type acctPool struct {
	name, account, substrate string
	gpus, ttl                int
	extra                    bool
	model                    string
}

func (p acctPool) pool() string {
	model := p.model
	if model == "" {
		model = "L4"
	}
	s := fmt.Sprintf(`{"name":%q,"site":"lab","class":"metal-host","gpuModel":%q`, p.name, model)
	if p.account != "" {
		s += fmt.Sprintf(`,"providerAccount":%q`, p.account)
	}
	if p.substrate != "" {
		s += fmt.Sprintf(`,"policy":{"substrate":{"kind":"kubernetes","account":%q,"cluster":{"create":{"location":"fake-east"}},"flavors":[{"name":"l4","machineType":"fake-l4x1","nodes":1}]}}`, p.substrate)
	}
	quota := fmt.Sprintf(`"gpu":%d`, p.gpus+3)
	offers := fmt.Sprintf(`{"tenant":"acme","quota":{"gpu":1},"priority":%d}`, p.gpus)
	if p.extra {
		quota += `,"cpu":16`
		offers += `,{"tenant":"beta","quota":{"gpu":1},"priority":1}`
	}
	return s + `,"ownerQuota":{` + quota + `},"offers":[` + offers + `]}`
}

func (p acctPool) owned() (flavors, templates []string) {
	flavors = []string{fmt.Sprintf(`{"pool":%q,"name":"f","vcpu":4,"memoryGiB":16,"diskGiB":100,"gpus":%d}`, p.name, p.gpus)}
	templates = []string{fmt.Sprintf(`{"name":"t-%s","pool":%q,"flavor":"f","imageId":"ubuntu","network":"private","defaultTtlSeconds":%d}`, p.name, p.name, p.ttl)}
	if p.extra {
		flavors = append(flavors, fmt.Sprintf(`{"pool":%q,"name":"g","vcpu":4,"memoryGiB":16,"diskGiB":100,"gpus":1}`, p.name))
		templates = append(templates, fmt.Sprintf(`{"name":"u-%s","pool":%q,"flavor":"f","imageId":"ubuntu","network":"private"}`, p.name, p.name))
	}
	return flavors, templates
}

// acctDoc is a document of the accounts sim and prod holding pools in
// full, and flavors and templates of orphans: pools the document leaves
// out (a pool still stored when not pruning).
func acctDoc(pools []acctPool, orphans []acctPool) string {
	var ps, fs, ts []string
	for _, p := range pools {
		ps = append(ps, p.pool())
		f, tt := p.owned()
		fs, ts = append(fs, f...), append(ts, tt...)
	}
	for _, p := range orphans {
		f, tt := p.owned()
		fs, ts = append(fs, f...), append(ts, tt...)
	}
	return `{"version":1,"sites":[{"name":"lab","kind":"shared","region":"local"}],
"providerAccounts":[{"name":"sim","provider":"fake","config":{}},{"name":"prod","provider":"fake","config":{}}],
"pools":[` + strings.Join(ps, ",") + `],"flavors":[` + strings.Join(fs, ",") + `],"sandboxTemplates":[` + strings.Join(ts, ",") + `]}`
}

// The account rules of the test: prod skips a change whose account is
// unknown, fenced (the default) is evaluated on it; the message is
// change.account.
const acctPolicy = `rules:
  - {name: prod, match: {accounts: [prod], unknownAccount: skip}, expression: "true", action: warn, message: "change.account"}
  - {name: fenced, match: {accounts: [prod]}, expression: "true", action: warn, message: "change.account"}
`

// TestAccountOfEveryChange: every change's account is resolved, whatever
// its kind, its type and where the account is read from: the document
// (providerAccount, or the substrate's account), the stored object (a
// delete), the stored pool by name (a pool the document leaves out), a
// substrate recorded in the state; one that cannot be known is matched by
// an accounts rule unless it says unknownAccount: skip. Each row names the
// pool the changes belong to, and the test checks every change of the plan
// and that the rows cover each kind and change type.
func TestAccountOfEveryChange(t *testing.T) {
	prodPA := acctPool{name: "pa", account: "prod", gpus: 1, ttl: 60}
	prodSub := acctPool{name: "ps", substrate: "prod", gpus: 1, ttl: 60}
	simPA := acctPool{name: "po", account: "sim", gpus: 1, ttl: 60}
	bare := acctPool{name: "pn", gpus: 1, ttl: 60}
	grown := func(p acctPool) acctPool { p.gpus, p.ttl, p.extra, p.model = 2, 120, true, "H100"; return p }
	cases := []struct {
		name           string
		fleet, next    string
		prune          bool
		substrates     func(snap *inventory.Snapshot) map[string]string
		want           map[string]string // pool -> prod, sim, none, unknown
		wantKindsTypes []string
	}{
		{
			name:  "document: creates and updates",
			fleet: acctDoc([]acctPool{prodPA, prodSub, simPA, bare}, nil),
			next:  acctDoc([]acctPool{grown(prodPA), grown(prodSub), grown(simPA), grown(bare)}, nil),
			want:  map[string]string{"pa": "prod", "ps": "prod", "po": "sim", "pn": "none"},
		},
		{
			name:  "document: a new fleet",
			fleet: acctDoc(nil, nil),
			next:  acctDoc([]acctPool{prodPA, prodSub, simPA, bare}, nil),
			want:  map[string]string{"pa": "prod", "ps": "prod", "po": "sim", "pn": "none"},
		},
		{
			name:  "stored objects: deletes by a prune",
			fleet: acctDoc([]acctPool{grown(prodPA), grown(prodSub), grown(simPA), grown(bare)}, nil),
			next:  acctDoc(nil, nil),
			prune: true,
			want:  map[string]string{"pa": "prod", "ps": "prod", "po": "sim", "pn": "none"},
		},
		{
			name:  "stored objects: deletes of what a pool owns",
			fleet: acctDoc([]acctPool{grown(prodPA), grown(prodSub), grown(simPA), grown(bare)}, nil),
			next:  acctDoc([]acctPool{prodPA, prodSub, simPA, bare}, nil),
			prune: true,
			want:  map[string]string{"pa": "prod", "ps": "prod", "po": "sim", "pn": "none"},
		},
		{
			name:  "stored pool by name: the pool left out, not pruning",
			fleet: acctDoc([]acctPool{prodPA, prodSub, simPA, bare}, nil),
			next:  acctDoc(nil, []acctPool{grown(prodPA), grown(prodSub), grown(simPA), grown(bare)}),
			want:  map[string]string{"pa": "prod", "ps": "prod", "po": "sim", "pn": "none"},
		},
		{
			name:  "substrate recorded in the state",
			fleet: acctDoc([]acctPool{bare}, nil),
			next:  acctDoc(nil, []acctPool{grown(bare)}),
			substrates: func(snap *inventory.Snapshot) map[string]string {
				p, _ := snap.ByName(inventory.Pool, "pn")
				return map[string]string{p.ID: "prod"}
			},
			want: map[string]string{"pn": "prod"},
		},
		{
			name:  "unknown: a pool neither in the document nor stored",
			fleet: acctDoc(nil, nil),
			next:  acctDoc(nil, []acctPool{prodPA}),
			want:  map[string]string{"pa": "unknown"},
		},
	}
	pol, err := Load([]byte(acctPolicy))
	if err != nil {
		t.Fatal(err)
	}
	covered := map[string]bool{}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			snap := FleetOf(document(t, c.fleet), "root")
			doc := document(t, c.next)
			p := plan.Make(doc, snap, plan.Options{Tenant: "root", Prune: c.prune})
			in := Input{Doc: doc, Snap: snap, Plan: p, Tenant: "root"}
			if c.substrates != nil {
				in.Substrates = c.substrates(snap)
			}
			rep := pol.Evaluate(in)
			got := map[string]string{} // "type kind name" -> class
			msg := map[string]string{}
			for _, h := range rep.Rules[1].Matched {
				got[string(h.Type)+" "+string(h.Kind)+" "+h.Name] = "unknown"
			}
			for _, h := range rep.Rules[0].Matched {
				k := string(h.Type) + " " + string(h.Kind) + " " + h.Name
				got[k], msg[k] = "prod", h.Message
			}
			checked := 0
			for _, ch := range p.Changes {
				if ch.Action == plan.Unchanged {
					continue
				}
				pool := ownerPool(ch.Kind, ch.Name)
				want, ok := c.want[pool]
				if !ok {
					continue
				}
				k := string(ch.Action) + " " + string(ch.Kind) + " " + ch.Name
				class := got[k]
				if class == "" {
					class = "sim or none" // matched by neither prod rule
				}
				wantClass := want
				if want == "sim" || want == "none" {
					wantClass = "sim or none"
				}
				if class != wantClass {
					t.Errorf("%s: account %s, want %s", k, class, want)
				}
				if want == "prod" && msg[k] != "prod" {
					t.Errorf("%s: change.account %q, want prod", k, msg[k])
				}
				covered[string(ch.Kind)+" "+string(ch.Action)] = true
				checked++
			}
			if checked == 0 {
				t.Fatalf("no change checked; plan:\n%s", planText(p))
			}
		})
	}
	// The rows cover every kind a pool owns in every change type it has.
	var missing []string
	for _, kt := range []string{
		"pool create", "pool update", "pool delete",
		"ownerQuota create", "ownerQuota update",
		"offer create", "offer update", "offer delete",
		"flavor create", "flavor update", "flavor delete",
		"sandboxTemplate create", "sandboxTemplate update", "sandboxTemplate delete",
	} {
		if !covered[kt] {
			missing = append(missing, kt)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("no row covers %v", missing)
	}
}

// ownerPool is the pool a change belongs to, from its name.
func ownerPool(k inventory.Kind, name string) string {
	switch k {
	case inventory.Pool:
		return name
	case inventory.SandboxTemplate:
		_, p, _ := strings.Cut(name, "-")
		return p
	}
	return poolOfName(k, name)
}

// A providerAccount is its own account, a site has none: the two kinds no
// pool owns.
func TestAccountOfAccountsAndSites(t *testing.T) {
	pol, err := Load([]byte(acctPolicy))
	if err != nil {
		t.Fatal(err)
	}
	fleetDoc := `{"version":1,"sites":[{"name":"old","kind":"shared","region":"local"}],"providerAccounts":[{"name":"prod","provider":"fake","config":{"a":1}},{"name":"gone","provider":"fake","config":{}}]}`
	nextDoc := `{"version":1,"sites":[{"name":"old","kind":"shared","region":"local"},{"name":"lab","kind":"shared","region":"local"}],"providerAccounts":[{"name":"prod","provider":"fake","config":{"a":2}},{"name":"sim","provider":"fake","config":{}}]}`
	snap := FleetOf(document(t, fleetDoc), "root")
	doc := document(t, nextDoc)
	p := plan.Make(doc, snap, plan.Options{Tenant: "root", Prune: true})
	rep := pol.Evaluate(Input{Doc: doc, Snap: snap, Plan: p, Tenant: "root"})
	if got, want := hits(rep.Rules[0]), "update providerAccount prod"; got != want {
		t.Errorf("prod matched %q, want %q", got, want)
	}
	if got, want := hits(rep.Rules[1]), "update providerAccount prod"; got != want {
		t.Errorf("fenced matched %q, want %q (a site has no account; it is known)", got, want)
	}
}

// An update that moves a pool's objects between accounts is of both: a
// rule on either account sees it.
func TestAccountOfBothSides(t *testing.T) {
	pol, err := Load([]byte("rules:\n  - {name: sim, match: {accounts: [sim]}, expression: \"true\", action: warn, message: \"change.account\"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	// The flavor f of pool pa (prod) is stored with pool id of a pool po
	// (sim) in the snapshot; the document moves it to pa.
	fleetDoc := acctDoc([]acctPool{{name: "pa", account: "prod", gpus: 1, ttl: 60}, {name: "po", account: "sim", gpus: 1, ttl: 60}}, nil)
	snap := FleetOf(document(t, fleetDoc), "root")
	po, _ := snap.ByName(inventory.Pool, "po")
	f, _ := snap.ByName(inventory.Flavor, "pa/f")
	var objs []inventory.Object
	for _, o := range snap.All() {
		if o.ID == f.ID {
			o.Spec = map[string]any{"pool": po.ID, "name": "f", "vcpu": int64(4), "memoryGiB": int64(16), "diskGiB": int64(100), "gpus": int64(1)}
		}
		objs = append(objs, o)
	}
	snap = inventory.NewSnapshot(objs)
	nextDoc := acctDoc([]acctPool{{name: "pa", account: "prod", gpus: 2, ttl: 60}, {name: "po", account: "sim", gpus: 1, ttl: 60}}, nil)
	doc := document(t, nextDoc)
	p := plan.Make(doc, snap, plan.Options{Tenant: "root"})
	rep := pol.Evaluate(Input{Doc: doc, Snap: snap, Plan: p, Tenant: "root"})
	found := false
	for _, h := range rep.Rules[0].Matched {
		if h.Name == "pa/f" {
			found = true
			if h.Message != "prod" {
				t.Errorf("change.account %q, want the document's prod", h.Message)
			}
		}
	}
	if !found {
		t.Fatalf("a rule on sim does not see pa/f, stored in sim's pool: %s\n%s", hits(rep.Rules[0]), planText(p))
	}
}

func planText(p *plan.Plan) string {
	var b strings.Builder
	_ = p.WriteText(&b, false)
	return b.String()
}

// TestPoolSeesWhatItOwns: a plan that changes only a pool's owner quota
// and offers judges the pool as an update of those fields, so a rule on
// pools sees them; the note says so.
func TestPoolSeesWhatItOwns(t *testing.T) {
	rep := judged(t, `rules:
  - name: pool-quota
    match: {kinds: [pool], changes: [update]}
    expression: "change.after.ownerQuota.gpu > 8 && change.fields == ['offers', 'ownerQuota'] && change.note != ''"
    action: warn
    message: "change.note"
`)
	v := rep.Rules[0]
	if got := hits(v); got != "update pool gpu" {
		t.Fatalf("matched %q, want the pool gpu whose quota and offers change", got)
	}
	if v.Matched[0].Message != "its offers and ownerQuota change (the pool itself does not)" {
		t.Errorf("note %q", v.Matched[0].Message)
	}
}

// TestAccountOfAPoolOnEitherSide: an object on a pool is of every account
// the pool has in the document and as stored. Found from outside: with
// prune off, a pool whose substrate (on prod) the document leaves out keeps
// it, so a flavor created on it runs on prod; and a pool the document moves
// onto prod carries its unchanged flavors there, which a flavor rule must see.
func TestAccountOfAPoolOnEitherSide(t *testing.T) {
	pol, err := Load([]byte(`rules:
  - {name: prod-flavors, match: {kinds: [flavor], changes: [create, update], accounts: [prod], unknownAccount: skip}, expression: "true", action: warn, message: "change.type + ' ' + change.account + ' ' + change.note"}
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name        string
		fleet, next []acctPool
		want        string
	}{
		{name: "the substrate left out of the document, a flavor added",
			fleet: []acctPool{{name: "kp", substrate: "prod", gpus: 1, ttl: 60}},
			next:  []acctPool{{name: "kp", gpus: 1, ttl: 60, extra: true}},
			want:  "kp/g: create prod "},
		{name: "a pool of no account moved onto prod, its flavor unchanged",
			fleet: []acctPool{{name: "free", gpus: 4, ttl: 60}},
			next:  []acctPool{{name: "free", substrate: "prod", gpus: 4, ttl: 60}},
			want:  "free/f: update prod its pool free moves to account prod (the object itself does not change)"},
		{name: "a pool that stays on prod: its unchanged flavor is not judged",
			fleet: []acctPool{{name: "kp", substrate: "prod", gpus: 1, ttl: 60}},
			next:  []acctPool{{name: "kp", substrate: "prod", gpus: 1, ttl: 90}},
			want:  ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap := FleetOf(document(t, acctDoc(tc.fleet, nil)), "root")
			doc := document(t, acctDoc(tc.next, nil))
			p := plan.Make(doc, snap, plan.Options{Tenant: "root"})
			rep := pol.Evaluate(Input{Doc: doc, Snap: snap, Plan: p, Tenant: "root"})
			var got []string
			for _, h := range rep.Rules[0].Matched {
				got = append(got, h.Name+": "+h.Message)
			}
			if strings.Join(got, "\n") != tc.want {
				t.Errorf("matched %q, want %q\n%s", got, tc.want, planText(p))
			}
		})
	}
}
