package plan

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/inventory"
)

// baseDoc holds every kind: 2 accounts, 1 site, 3 pools (one with a
// substrate), 2 owner quotas, 1 offer, 1 flavor, 1 template = 11 objects.
const baseDoc = `{"version":1,
 "sites":[{"name":"fra","kind":"shared","region":"eu-central","iamRegion":"eu"}],
 "providerAccounts":[
   {"name":"cloud","provider":"hetzner-cloud","config":{"token":"secret://hetzner","location":"fsn1"}},
   {"name":"k8s","provider":"fake","config":{"token":"secret://fake"}}],
 "pools":[
   {"name":"vps","site":"fra","class":"vps-host","gpuModel":"L40S","sharing":"mig","agent":"bcd","policy":{"budget":0.1},
    "ownerQuota":{"gpu":8,"vcpu":64},"offers":[{"tenant":"acme","quota":{"gpu":2},"priority":5}]},
   {"name":"burst","site":"fra","class":"provider","providerAccount":"cloud"},
   {"name":"kube","site":"fra","class":"metal-host","policy":{"substrate":{"kind":"kubernetes","account":"k8s",
    "cluster":{"create":{"location":"fra1"}},"flavors":[{"name":"n1","machineType":"m1"}]}}}],
 "flavors":[{"pool":"vps","name":"small","vcpu":2,"memoryGiB":4,"diskGiB":40,"gpus":1,"offerId":"o1","placement":{"pinned":true}}],
 "sandboxTemplates":[{"name":"py","pool":"vps","flavor":"small","imageId":"ubuntu","runtime":"kata","userData":"#cloud-config",
   "defaultTtlSeconds":60,"maxTtlSeconds":120,"warm":{"min":1,"max":2},"env":{"A":"secret://root/a"},"network":"private",
   "volumes":[{"volume":"v","mountPath":"/v"}]}]}`

// Paths into baseDoc.
const (
	pVps    = "pools/0"
	pBurst  = "pools/1"
	pKube   = "pools/2"
	pSub    = "pools/2/policy/substrate"
	pOffer  = "pools/0/offers/0"
	pFlavor = "flavors/0"
	pTpl    = "sandboxTemplates/0"
)

func counts(c, u, d, n int, blocked ...int) string {
	s := fmt.Sprintf("%d to create, %d to update, %d to delete, %d unchanged.", c, u, d, n)
	if len(blocked) > 0 {
		s += fmt.Sprintf("\n%d blocked.", blocked[0])
	}
	return s
}

const notChecked = "  note: not checked live"

type kindCase struct {
	name string
	// doc edits baseDoc; state edits the objects an apply of baseDoc made
	// (empty: start from nothing).
	doc   func(t testing.TB, d jdoc)
	state func(t testing.TB, objs []inventory.Object) []inventory.Object
	empty bool
	opts  Options
	// want is the text rendering without calls.
	want string
	// calls are the call lines, with «kind name» standing for the id of
	// that object; methods are "method name" when the params do not matter.
	calls   []string
	methods []string
}

var idRef = regexp.MustCompile(`«(\w+) ([^»]+)»`)

func expandIDs(s string) string {
	return idRef.ReplaceAllStringFunc(s, func(m string) string {
		sub := idRef.FindStringSubmatch(m)
		return id(inventory.Kind(sub[1]), sub[2])
	})
}

func runKindCases(t *testing.T, cases []kindCase) {
	t.Helper()
	baseObjs := applied(t, docOf(t, parseJSON(t, baseDoc)), Options{})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := parseJSON(t, baseDoc)
			if tc.doc != nil {
				tc.doc(t, d)
			}
			doc := docOf(t, d)
			var objs []inventory.Object
			if !tc.empty {
				objs = cloneObjects(baseObjs)
			}
			if tc.state != nil {
				objs = tc.state(t, objs)
			}
			p := Make(doc, inventory.NewSnapshot(objs), tc.opts)
			if got := text(p, false); got != tc.want {
				t.Errorf("plan:\n%s\nwant:\n%s", got, tc.want)
			}
			if tc.calls != nil || tc.methods == nil {
				var got []string
				for _, c := range p.Calls {
					got = append(got, c.CallLine())
				}
				var want []string
				for _, c := range tc.calls {
					want = append(want, expandIDs(c))
				}
				if !slices.Equal(got, want) {
					t.Errorf("calls:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
				}
			}
			if tc.methods != nil && !slices.Equal(methods(p), tc.methods) {
				t.Errorf("methods:\n%s\nwant:\n%s", strings.Join(methods(p), "\n"), strings.Join(tc.methods, "\n"))
			}
			checkSummary(t, p)
			// A plan that is not blocked converges: applying it makes
			// the next plan empty.
			if !p.Blocked() {
				next := Make(doc, inventory.NewSnapshot(applyCalls(t, cloneObjects(objs), p.Calls)), tc.opts)
				if !next.Empty() || next.Blocked() {
					t.Errorf("plan after apply not empty:\n%s", text(next, true))
				}
			}
		})
	}
}

// checkSummary recounts the changes by the documented rules.
func checkSummary(t testing.TB, p *Plan) {
	t.Helper()
	var s Summary
	for _, c := range p.Changes {
		switch {
		case c.Blocked != "":
			s.Blocked++
		case c.Action == Create:
			s.Create++
		case c.Action == Update:
			s.Update++
		case c.Action == Delete:
			s.Delete++
		case c.Action == Unchanged && c.counted:
			s.Unchanged++
		}
	}
	if s != p.Summary {
		t.Errorf("summary %+v, changes say %+v", p.Summary, s)
	}
	if p.PlanHash != hashCalls(p.Calls) {
		t.Errorf("planHash is not the hash of the calls")
	}
	if p.Blocked() != (s.Blocked > 0) {
		t.Errorf("Blocked() = %v with %d blocked", p.Blocked(), s.Blocked)
	}
}

func TestCreate(t *testing.T) {
	runKindCases(t, []kindCase{
		{name: "everything", empty: true, want: `+ providerAccount cloud
` + notChecked + `
+ providerAccount k8s
` + notChecked + `
+ site fra
+ pool burst
+ pool kube
` + notChecked + `
+ pool vps
+ ownerQuota vps:gpu
+ ownerQuota vps:vcpu
+ offer vps -> acme
+ flavor vps/small
+ sandboxTemplate py
` + counts(11, 0, 0, 0),
			calls: []string{
				`providerAccounts.create {"config":{"location":"fsn1","token":"secret://hetzner"},"id":"«providerAccount cloud»","name":"cloud","provider":"hetzner-cloud"}`,
				`providerAccounts.create {"config":{"token":"secret://fake"},"id":"«providerAccount k8s»","name":"k8s","provider":"fake"}`,
				`sites.create {"iamRegion":"eu","id":"«site fra»","kind":"shared","name":"fra","region":"eu-central"}`,
				`pools.create {"class":"provider","id":"«pool burst»","name":"burst","policy":{},"providerAccount":"«providerAccount cloud»","site":"«site fra»"}`,
				`pools.create {"class":"metal-host","id":"«pool kube»","name":"kube","policy":{"substrate":{"account":"k8s","cluster":{"create":{"location":"fra1"}},"flavors":[{"machineType":"m1","name":"n1"}],"kind":"kubernetes"}},"site":"«site fra»"}`,
				`pools.create {"agent":"bcd","class":"vps-host","gpuModel":"L40S","id":"«pool vps»","name":"vps","policy":{"budget":0.1},"sharing":"mig","site":"«site fra»"}`,
				`quotas.set {"id":"«ownerQuota vps:gpu»","max":8,"pool":"«pool vps»","resource":"gpu"}`,
				`quotas.set {"id":"«ownerQuota vps:vcpu»","max":64,"pool":"«pool vps»","resource":"vcpu"}`,
				`pools.offer {"id":"«offer vps -> acme»","includeDescendants":false,"pool":"«pool vps»","priority":5,"quota":{"gpu":2},"tenant":"acme"}`,
				`flavors.create {"diskGiB":40,"gpus":1,"id":"«flavor vps/small»","memoryGiB":4,"name":"small","offerId":"o1","placement":{"pinned":true},"pool":"«pool vps»","vcpu":2}`,
				`sandboxTemplates.create {"defaultTtlSeconds":60,"env":{"A":"secret://root/a"},"flavor":"small","id":"«sandboxTemplate py»","imageId":"ubuntu","maxTtlSeconds":120,"name":"py","network":"private","pool":"«pool vps»","runtime":"kata","userData":"#cloud-config","volumes":[{"mountPath":"/v","volume":"v"}],"warm":{"max":2,"min":1}}`,
			}},
		{name: "providerAccount", state: dropState(inventory.ProviderAccount, "k8s"),
			want: "+ providerAccount k8s\n" + notChecked + "\n" + counts(1, 0, 0, 10), methods: []string{"providerAccounts.create k8s"}},
		{name: "site", state: dropState(inventory.Site, "fra"),
			want: "+ site fra\n" + counts(1, 0, 0, 10), methods: []string{"sites.create fra"}},
		{name: "pool", state: dropState(inventory.Pool, "burst"),
			want: "+ pool burst\n" + counts(1, 0, 0, 10), methods: []string{"pools.create burst"}},
		{name: "ownerQuota", state: dropState(inventory.OwnerQuota, "vps:vcpu"),
			want: "+ ownerQuota vps:vcpu\n" + counts(1, 0, 0, 10), methods: []string{"quotas.set vps:vcpu"}},
		{name: "offer", state: dropState(inventory.Offer, "vps -> acme"),
			want: "+ offer vps -> acme\n" + counts(1, 0, 0, 10), methods: []string{"pools.offer vps -> acme"}},
		{name: "flavor", state: dropState(inventory.Flavor, "vps/small"),
			want: "+ flavor vps/small\n" + counts(1, 0, 0, 10), methods: []string{"flavors.create vps/small"}},
		{name: "sandboxTemplate", state: dropState(inventory.SandboxTemplate, "py"),
			want: "+ sandboxTemplate py\n" + counts(1, 0, 0, 10), methods: []string{"sandboxTemplates.create py"}},
		{name: "pool with its owner quota and offer", state: func(t testing.TB, objs []inventory.Object) []inventory.Object {
			objs = drop(objs, inventory.Pool, "vps")
			objs = drop(objs, inventory.OwnerQuota, "vps:gpu")
			objs = drop(objs, inventory.OwnerQuota, "vps:vcpu")
			return drop(objs, inventory.Offer, "vps -> acme")
		}, want: "+ pool vps\n+ ownerQuota vps:gpu\n+ ownerQuota vps:vcpu\n+ offer vps -> acme\n" + counts(4, 0, 0, 7),
			methods: []string{"pools.create vps", "quotas.set vps:gpu", "quotas.set vps:vcpu", "pools.offer vps -> acme"}},
	})
}

func dropState(k inventory.Kind, name string) func(testing.TB, []inventory.Object) []inventory.Object {
	return func(t testing.TB, objs []inventory.Object) []inventory.Object {
		find(t, objs, k, name)
		return drop(objs, k, name)
	}
}

func edit(steps ...func(t testing.TB, d jdoc)) func(t testing.TB, d jdoc) {
	return func(t testing.TB, d jdoc) {
		for _, s := range steps {
			s(t, d)
		}
	}
}

func setTo(path string, v any) func(testing.TB, jdoc) {
	return func(t testing.TB, d jdoc) { set(t, d, path, v) }
}

func delAt(path string) func(testing.TB, jdoc) {
	return func(t testing.TB, d jdoc) { del(t, d, path) }
}

func addTo(path string, v any) func(testing.TB, jdoc) {
	return func(t testing.TB, d jdoc) { add(t, d, path, v) }
}

func obj(s string) map[string]any {
	var m map[string]any
	if err := jsonUnmarshalNumber(s, &m); err != nil {
		panic(err)
	}
	return m
}

func TestUpdate(t *testing.T) {
	upd := func(kind, name, fields string) string {
		return fmt.Sprintf("~ %s %s (%s)\n", kind, name, fields) + counts(0, 1, 0, 10)
	}
	runKindCases(t, []kindCase{
		{name: "unchanged", want: counts(0, 0, 0, 11), calls: []string{}},
		{name: "providerAccount config", doc: setTo("providerAccounts/0/config/location", "nbg1"),
			want:  "~ providerAccount cloud (config)\n" + notChecked + "\n" + counts(0, 1, 0, 10),
			calls: []string{`providerAccounts.update {"config":{"location":"nbg1","token":"secret://hetzner"},"id":"«providerAccount cloud»"}`}},
		{name: "providerAccount config omitted is {}", doc: delAt("providerAccounts/0/config"),
			want:  "~ providerAccount cloud (config)\n" + notChecked + "\n" + counts(0, 1, 0, 10),
			calls: []string{`providerAccounts.update {"config":{},"id":"«providerAccount cloud»"}`}},
		{name: "pool gpuModel", doc: setTo(pVps+"/gpuModel", "H100"), want: upd("pool", "vps", "gpuModel"),
			calls: []string{`pools.update {"gpuModel":"H100","id":"«pool vps»"}`}},
		{name: "pool gpuModel omitted", doc: delAt(pVps + "/gpuModel"), want: upd("pool", "vps", "gpuModel"),
			calls: []string{`pools.update {"gpuModel":null,"id":"«pool vps»"}`}},
		{name: "pool policy", doc: setTo(pVps+"/policy/budget", 0.2), want: upd("pool", "vps", "policy"),
			calls: []string{`pools.update {"id":"«pool vps»","policy":{"budget":0.2}}`}},
		{name: "pool policy omitted is {}", doc: delAt(pVps + "/policy"), want: upd("pool", "vps", "policy"),
			calls: []string{`pools.update {"id":"«pool vps»","policy":{}}`}},
		{name: "pool gpuModel and policy", doc: edit(setTo(pVps+"/policy", obj(`{"budget":0.1,"z":[1,2.5,"x"]}`)), setTo(pVps+"/gpuModel", "B200")),
			want:  upd("pool", "vps", "gpuModel, policy"),
			calls: []string{`pools.update {"gpuModel":"B200","id":"«pool vps»","policy":{"budget":0.1,"z":[1,2.5,"x"]}}`}},
		{name: "pool policy same number spelled otherwise", doc: setTo(pVps+"/policy", obj(`{"budget":1e-1}`)), want: counts(0, 0, 0, 11), calls: []string{}},
		{name: "ownerQuota max", doc: setTo(pVps+"/ownerQuota/gpu", 16), want: upd("ownerQuota", "vps:gpu", "max"),
			calls: []string{`quotas.set {"id":"«ownerQuota vps:gpu»","max":16}`}},
		{name: "ownerQuota set 0", doc: setTo(pVps+"/ownerQuota/gpu", 0), want: upd("ownerQuota", "vps:gpu", "max"),
			calls: []string{`quotas.set {"id":"«ownerQuota vps:gpu»","max":0}`}},
		{name: "offer includeDescendants", doc: setTo(pOffer+"/includeDescendants", true), want: upd("offer", "vps -> acme", "includeDescendants"),
			calls: []string{`pools.offer {"id":"«offer vps -> acme»","includeDescendants":true}`}},
		{name: "offer priority", doc: setTo(pOffer+"/priority", -7), want: upd("offer", "vps -> acme", "priority"),
			calls: []string{`pools.offer {"id":"«offer vps -> acme»","priority":-7}`}},
		{name: "offer priority omitted is 0", doc: delAt(pOffer + "/priority"), want: upd("offer", "vps -> acme", "priority"),
			calls: []string{`pools.offer {"id":"«offer vps -> acme»","priority":0}`}},
		{name: "offer quota", doc: setTo(pOffer+"/quota/vcpu", 4), want: upd("offer", "vps -> acme", "quota"),
			calls: []string{`pools.offer {"id":"«offer vps -> acme»","quota":{"gpu":2,"vcpu":4}}`}},
		{name: "offer quota omitted is {}", doc: delAt(pOffer + "/quota"), want: upd("offer", "vps -> acme", "quota"),
			calls: []string{`pools.offer {"id":"«offer vps -> acme»","quota":{}}`}},
		{name: "offer every field", doc: edit(setTo(pOffer+"/quota/gpu", 3), setTo(pOffer+"/priority", 1), setTo(pOffer+"/includeDescendants", true)),
			want:  upd("offer", "vps -> acme", "includeDescendants, priority, quota"),
			calls: []string{`pools.offer {"id":"«offer vps -> acme»","includeDescendants":true,"priority":1,"quota":{"gpu":3}}`}},
		{name: "flavor diskGiB", doc: setTo(pFlavor+"/diskGiB", 80), want: upd("flavor", "vps/small", "diskGiB"),
			calls: []string{`flavors.update {"diskGiB":80,"id":"«flavor vps/small»"}`}},
		{name: "flavor gpus", doc: setTo(pFlavor+"/gpus", 2), want: upd("flavor", "vps/small", "gpus"),
			calls: []string{`flavors.update {"gpus":2,"id":"«flavor vps/small»"}`}},
		{name: "flavor gpus omitted is 0", doc: delAt(pFlavor + "/gpus"), want: upd("flavor", "vps/small", "gpus"),
			calls: []string{`flavors.update {"gpus":0,"id":"«flavor vps/small»"}`}},
		{name: "flavor memoryGiB", doc: setTo(pFlavor+"/memoryGiB", 8), want: upd("flavor", "vps/small", "memoryGiB"),
			calls: []string{`flavors.update {"id":"«flavor vps/small»","memoryGiB":8}`}},
		{name: "flavor offerId", doc: setTo(pFlavor+"/offerId", "o2"), want: upd("flavor", "vps/small", "offerId"),
			calls: []string{`flavors.update {"id":"«flavor vps/small»","offerId":"o2"}`}},
		{name: "flavor offerId omitted", doc: delAt(pFlavor + "/offerId"), want: upd("flavor", "vps/small", "offerId"),
			calls: []string{`flavors.update {"id":"«flavor vps/small»","offerId":null}`}},
		{name: "flavor placement", doc: setTo(pFlavor+"/placement", obj(`{"pinned":true,"hugepages":"2Mi"}`)), want: upd("flavor", "vps/small", "placement"),
			calls: []string{`flavors.update {"id":"«flavor vps/small»","placement":{"hugepages":"2Mi","pinned":true}}`}},
		{name: "flavor placement false flags are none", doc: setTo(pFlavor+"/placement", obj(`{"pinned":false}`)), want: upd("flavor", "vps/small", "placement"),
			calls: []string{`flavors.update {"id":"«flavor vps/small»","placement":null}`}},
		{name: "flavor placement compared by value", doc: setTo(pFlavor+"/placement", obj(`{"numaAffine":false,"pinned":true}`)), want: counts(0, 0, 0, 11), calls: []string{}},
		{name: "flavor vcpu", doc: setTo(pFlavor+"/vcpu", 4), want: upd("flavor", "vps/small", "vcpu"),
			calls: []string{`flavors.update {"id":"«flavor vps/small»","vcpu":4}`}},
		{name: "flavor every field", doc: edit(setTo(pFlavor+"/vcpu", 4), setTo(pFlavor+"/memoryGiB", 8), setTo(pFlavor+"/diskGiB", 80),
			setTo(pFlavor+"/gpus", 0), setTo(pFlavor+"/offerId", "o9"), delAt(pFlavor+"/placement")),
			want:  upd("flavor", "vps/small", "diskGiB, gpus, memoryGiB, offerId, placement, vcpu"),
			calls: []string{`flavors.update {"diskGiB":80,"gpus":0,"id":"«flavor vps/small»","memoryGiB":8,"offerId":"o9","placement":null,"vcpu":4}`}},
		{name: "template defaultTtlSeconds", doc: setTo(pTpl+"/defaultTtlSeconds", 90), want: upd("sandboxTemplate", "py", "defaultTtlSeconds"),
			calls: []string{`sandboxTemplates.update {"defaultTtlSeconds":90,"id":"«sandboxTemplate py»"}`}},
		{name: "template env", doc: setTo(pTpl+"/env", obj(`{"B":"secret://root/b"}`)), want: upd("sandboxTemplate", "py", "env"),
			calls: []string{`sandboxTemplates.update {"env":{"B":"secret://root/b"},"id":"«sandboxTemplate py»"}`}},
		{name: "template env emptied", doc: setTo(pTpl+"/env", obj(`{}`)), want: upd("sandboxTemplate", "py", "env"),
			calls: []string{`sandboxTemplates.update {"env":{},"id":"«sandboxTemplate py»"}`}},
		{name: "template flavor", doc: edit(addTo("flavors", obj(`{"pool":"vps","name":"big","vcpu":8,"memoryGiB":16,"diskGiB":80}`)), setTo(pTpl+"/flavor", "big")),
			want:    "+ flavor vps/big\n~ sandboxTemplate py (flavor)\n" + counts(1, 1, 0, 10),
			methods: []string{"flavors.create vps/big", "sandboxTemplates.update py"}},
		{name: "template imageId", doc: setTo(pTpl+"/imageId", "debian"), want: upd("sandboxTemplate", "py", "imageId"),
			calls: []string{`sandboxTemplates.update {"id":"«sandboxTemplate py»","imageId":"debian"}`}},
		{name: "template maxTtlSeconds", doc: setTo(pTpl+"/maxTtlSeconds", 600), want: upd("sandboxTemplate", "py", "maxTtlSeconds"),
			calls: []string{`sandboxTemplates.update {"id":"«sandboxTemplate py»","maxTtlSeconds":600}`}},
		{name: "template network", doc: setTo(pTpl+"/network", "none"), want: upd("sandboxTemplate", "py", "network"),
			calls: []string{`sandboxTemplates.update {"id":"«sandboxTemplate py»","network":"none"}`}},
		{name: "template network omitted is egress", doc: delAt(pTpl + "/network"), want: upd("sandboxTemplate", "py", "network"),
			calls: []string{`sandboxTemplates.update {"id":"«sandboxTemplate py»","network":"egress"}`}},
		{name: "template userData", doc: setTo(pTpl+"/userData", "secret://root/ud"), want: upd("sandboxTemplate", "py", "userData"),
			calls: []string{`sandboxTemplates.update {"id":"«sandboxTemplate py»","userData":"secret://root/ud"}`}},
		{name: "template volumes order", doc: addTo(pTpl+"/volumes", obj(`{"volume":"w","mountPath":"/w","readOnly":true}`)), want: upd("sandboxTemplate", "py", "volumes"),
			calls: []string{`sandboxTemplates.update {"id":"«sandboxTemplate py»","volumes":[{"mountPath":"/v","volume":"v"},{"mountPath":"/w","readOnly":true,"volume":"w"}]}`}},
		{name: "template warm", doc: delAt(pTpl + "/warm/max"), want: upd("sandboxTemplate", "py", "warm"),
			calls: []string{`sandboxTemplates.update {"id":"«sandboxTemplate py»","warm":{"min":1}}`}},
		{name: "template every field", doc: edit(setTo(pTpl+"/defaultTtlSeconds", 61), setTo(pTpl+"/maxTtlSeconds", 121), setTo(pTpl+"/env", obj(`{}`)),
			setTo(pTpl+"/imageId", "i2"), setTo(pTpl+"/network", "egress"), setTo(pTpl+"/userData", "u2"), setTo(pTpl+"/volumes", []any{}),
			setTo(pTpl+"/warm", obj(`{"min":0}`)), addTo("flavors", obj(`{"pool":"vps","name":"big","vcpu":8,"memoryGiB":16,"diskGiB":80}`)), setTo(pTpl+"/flavor", "big")),
			want:    "+ flavor vps/big\n~ sandboxTemplate py (defaultTtlSeconds, env, flavor, imageId, maxTtlSeconds, network, userData, volumes, warm)\n" + counts(1, 1, 0, 10),
			methods: []string{"flavors.create vps/big", "sandboxTemplates.update py"}},
		{name: "template fields left out are none", doc: edit(delAt(pTpl+"/userData"), delAt(pTpl+"/defaultTtlSeconds"),
			delAt(pTpl+"/maxTtlSeconds"), delAt(pTpl+"/warm"), delAt(pTpl+"/env"), delAt(pTpl+"/volumes")),
			want:  upd("sandboxTemplate", "py", "defaultTtlSeconds, env, maxTtlSeconds, userData, volumes, warm"),
			calls: []string{`sandboxTemplates.update {"defaultTtlSeconds":null,"env":null,"id":"«sandboxTemplate py»","maxTtlSeconds":null,"userData":null,"volumes":null,"warm":null}`}},
		{name: "template runtime left out is a change of runtime", doc: delAt(pTpl + "/runtime"),
			want: "! sandboxTemplate py (runtime): runtime cannot change once created; create a new sandboxTemplate under another name instead\n" + counts(0, 0, 0, 10, 1), calls: []string{}},
		{name: "template server-filled field is not drift", state: func(t testing.TB, objs []inventory.Object) []inventory.Object {
			o := find(t, objs, inventory.SandboxTemplate, "py")
			o.Spec["cpuShares"] = int64(512)
			delete(o.Spec, "userData")
			return objs
		}, doc: delAt(pTpl + "/userData"), want: counts(0, 0, 0, 11), calls: []string{}},
	})
}

func TestDelete(t *testing.T) {
	prune := Options{Prune: true}
	runKindCases(t, []kindCase{
		{name: "providerAccount with prune", opts: prune, doc: edit(delAt(pKube), delAt("providerAccounts/1")),
			want:  "- pool kube\n- providerAccount k8s\n" + counts(0, 0, 2, 9),
			calls: []string{`pools.archive {"id":"«pool kube»"}`, `providerAccounts.delete {"id":"«providerAccount k8s»"}`}},
		{name: "providerAccount without prune", doc: edit(delAt(pKube), delAt("providerAccounts/1")), want: counts(0, 0, 0, 9), calls: []string{}},
		{name: "site never deleted", opts: prune, doc: delAt("sites"), want: counts(0, 0, 0, 10), calls: []string{}},
		{name: "pool with prune archives, its flavors deleted, its offers unoffered", opts: prune,
			doc:  edit(delAt(pTpl), delAt(pFlavor), delAt(pVps)),
			want: "- sandboxTemplate py\n- flavor vps/small\n- offer vps -> acme\n- pool vps\n" + counts(0, 0, 4, 5),
			calls: []string{`sandboxTemplates.delete {"id":"«sandboxTemplate py»"}`, `flavors.delete {"id":"«flavor vps/small»"}`,
				`pools.unoffer {"id":"«offer vps -> acme»"}`, `pools.archive {"id":"«pool vps»"}`}},
		{name: "pool without prune", doc: delAt(pBurst), want: counts(0, 0, 0, 10), calls: []string{}},
		{name: "pool with prune", opts: prune, doc: delAt(pBurst), want: "- pool burst\n" + counts(0, 0, 1, 10),
			calls: []string{`pools.archive {"id":"«pool burst»"}`}},
		{name: "ownerQuota with prune is never deleted", opts: prune, doc: delAt(pVps + "/ownerQuota/vcpu"),
			want: "= ownerQuota vps:vcpu\n  note: owner quotas are never deleted; set 0 to stop\n" + counts(0, 0, 0, 10), calls: []string{}},
		{name: "ownerQuota without prune", doc: delAt(pVps + "/ownerQuota"), want: counts(0, 0, 0, 9), calls: []string{}},
		{name: "offer with prune", opts: prune, doc: delAt(pOffer), want: "- offer vps -> acme\n" + counts(0, 0, 1, 10),
			calls: []string{`pools.unoffer {"id":"«offer vps -> acme»"}`}},
		{name: "offer without prune", doc: delAt(pOffer), want: counts(0, 0, 0, 10), calls: []string{}},
		{name: "flavor with prune", opts: prune, doc: edit(delAt(pTpl), delAt(pFlavor)),
			want:  "- sandboxTemplate py\n- flavor vps/small\n" + counts(0, 0, 2, 9),
			calls: []string{`sandboxTemplates.delete {"id":"«sandboxTemplate py»"}`, `flavors.delete {"id":"«flavor vps/small»"}`}},
		{name: "flavor without prune", doc: edit(delAt(pTpl), delAt(pFlavor)), want: counts(0, 0, 0, 9), calls: []string{}},
		{name: "template with prune", opts: prune, doc: delAt(pTpl), want: "- sandboxTemplate py\n" + counts(0, 0, 1, 10),
			calls: []string{`sandboxTemplates.delete {"id":"«sandboxTemplate py»"}`}},
		{name: "template without prune", doc: delAt(pTpl), want: counts(0, 0, 0, 10), calls: []string{}},
		{name: "a renamed template is noted as a rename on both changes", opts: prune, doc: setTo(pTpl+"/name", "py2"),
			want: "+ sandboxTemplate py2\n  note: a rename of sandboxTemplate py: planned as its delete and this create, so rules on updates do not see it\n" +
				"- sandboxTemplate py\n  note: renamed to py2: planned as this delete and a create, so rules on updates do not see it\n" + counts(1, 0, 1, 10),
			methods: []string{"sandboxTemplates.create py2", "sandboxTemplates.delete py"}},
		{name: "a delete and a create that differ beyond the name are no rename", opts: prune,
			doc:     edit(setTo(pTpl+"/name", "py2"), setTo(pTpl+"/maxTtlSeconds", 240)),
			want:    "+ sandboxTemplate py2\n- sandboxTemplate py\n" + counts(1, 0, 1, 10),
			methods: []string{"sandboxTemplates.create py2", "sandboxTemplates.delete py"}},
		{name: "empty document with prune", opts: prune, doc: func(t testing.TB, d jdoc) {
			for _, k := range []string{"sites", "providerAccounts", "pools", "flavors", "sandboxTemplates"} {
				delete(d, k)
			}
		}, want: "- sandboxTemplate py\n- flavor vps/small\n- offer vps -> acme\n- pool burst\n- pool kube\n- pool vps\n- providerAccount cloud\n- providerAccount k8s\n" + counts(0, 0, 8, 0),
			methods: []string{"sandboxTemplates.delete py", "flavors.delete vps/small", "pools.unoffer vps -> acme", "pools.archive burst",
				"pools.archive kube", "pools.archive vps", "providerAccounts.delete cloud", "providerAccounts.delete k8s"}},
		{name: "archived pool is not archived again", opts: prune, doc: delAt(pBurst), state: func(t testing.TB, objs []inventory.Object) []inventory.Object {
			find(t, objs, inventory.Pool, "burst").Archived = true
			return objs
		}, want: counts(0, 0, 0, 10), calls: []string{}},
	})
}

func TestBlocked(t *testing.T) {
	prune := Options{Prune: true}
	fixed := func(kind, name, fields, fixed string) string {
		return fmt.Sprintf("! %s %s (%s): %s cannot change once created; create a new %s under another name instead", kind, name, fields, fixed, kind)
	}
	newPool := func(extra string) func(testing.TB, jdoc) {
		return addTo("pools", obj(`{"name":"new","site":"fra","class":"metal-host"`+extra+`}`))
	}
	sub := func(account, cluster string) string {
		return `,"policy":{"substrate":{"kind":"kubernetes","account":"` + account + `","cluster":` + cluster + `,"flavors":[{"name":"n1","machineType":"m1"}]}}`
	}
	adoptC1 := func(t testing.TB, objs []inventory.Object) []inventory.Object {
		pol := find(t, objs, inventory.Pool, "kube").Spec["policy"].(map[string]any)
		pol["substrate"].(map[string]any)["cluster"] = map[string]any{"adopt": "c-1"}
		return objs
	}
	identity := "the substrate's account and cluster (location, private nodes or adopted id) cannot change; create a new pool instead"
	archived := func(name string) func(testing.TB, []inventory.Object) []inventory.Object {
		return func(t testing.TB, objs []inventory.Object) []inventory.Object {
			find(t, objs, inventory.Pool, name).Archived = true
			return objs
		}
	}
	runKindCases(t, []kindCase{
		// Fields that never change.
		{name: "pool site", doc: edit(addTo("sites", obj(`{"name":"ber","kind":"shared","region":"eu-central"}`)), setTo(pVps+"/site", "ber")),
			want: "+ site ber\n" + fixed("pool", "vps", "site", "site") + "\n" + counts(1, 0, 0, 10, 1), methods: []string{"sites.create ber"}},
		{name: "pool class", doc: setTo(pVps+"/class", "metal-host"), want: fixed("pool", "vps", "class", "class") + "\n" + counts(0, 0, 0, 10, 1), calls: []string{}},
		{name: "pool sharing", doc: setTo(pVps+"/sharing", "mps"), want: fixed("pool", "vps", "sharing", "sharing") + "\n" + counts(0, 0, 0, 10, 1), calls: []string{}},
		{name: "pool sharing omitted", doc: delAt(pVps + "/sharing"), want: fixed("pool", "vps", "sharing", "sharing") + "\n" + counts(0, 0, 0, 10, 1), calls: []string{}},
		{name: "pool agent", doc: setTo(pVps+"/agent", "none"), want: fixed("pool", "vps", "agent", "agent") + "\n" + counts(0, 0, 0, 10, 1), calls: []string{}},
		{name: "pool agent omitted", doc: delAt(pVps + "/agent"), want: fixed("pool", "vps", "agent", "agent") + "\n" + counts(0, 0, 0, 10, 1), calls: []string{}},
		{name: "pool providerAccount", doc: setTo(pBurst+"/providerAccount", "k8s"),
			want: fixed("pool", "burst", "providerAccount", "providerAccount") + "\n" + counts(0, 0, 0, 10, 1), calls: []string{}},
		{name: "pool fixed and updatable fields", doc: edit(setTo(pVps+"/class", "metal-host"), setTo(pVps+"/gpuModel", "X1"), setTo(pVps+"/agent", "none")),
			want: fixed("pool", "vps", "agent, class, gpuModel", "agent, class") + "\n" + counts(0, 0, 0, 10, 1), calls: []string{}},
		{name: "site kind", doc: setTo("sites/0/kind", "custom"), want: fixed("site", "fra", "kind", "kind") + "\n" + counts(0, 0, 0, 10, 1), calls: []string{}},
		{name: "site region", doc: setTo("sites/0/region", "eu-west"), want: fixed("site", "fra", "region", "region") + "\n" + counts(0, 0, 0, 10, 1), calls: []string{}},
		{name: "site iamRegion", doc: setTo("sites/0/iamRegion", "us"), want: fixed("site", "fra", "iamRegion", "iamRegion") + "\n" + counts(0, 0, 0, 10, 1), calls: []string{}},
		{name: "site iamRegion omitted", doc: delAt("sites/0/iamRegion"), want: fixed("site", "fra", "iamRegion", "iamRegion") + "\n" + counts(0, 0, 0, 10, 1), calls: []string{}},
		{name: "providerAccount provider", doc: setTo("providerAccounts/0/provider", "aws"),
			want: fixed("providerAccount", "cloud", "provider", "provider") + "\n" + notChecked + "\n" + counts(0, 0, 0, 10, 1), calls: []string{}},
		{name: "providerAccount provider and config", doc: edit(setTo("providerAccounts/0/provider", "aws"), setTo("providerAccounts/0/config", obj(`{}`))),
			want: fixed("providerAccount", "cloud", "config, provider", "provider") + "\n" + notChecked + "\n" + counts(0, 0, 0, 10, 1), calls: []string{}},
		{name: "template pool", doc: edit(addTo("flavors", obj(`{"pool":"burst","name":"small","vcpu":2,"memoryGiB":4,"diskGiB":40}`)), setTo(pTpl+"/pool", "burst")),
			want:    "+ flavor burst/small\n" + fixed("sandboxTemplate", "py", "pool", "pool") + "\n" + counts(1, 0, 0, 10, 1),
			methods: []string{"flavors.create burst/small"}},
		{name: "template runtime", doc: setTo(pTpl+"/runtime", "runc"),
			want: fixed("sandboxTemplate", "py", "runtime", "runtime") + "\n" + counts(0, 0, 0, 10, 1), calls: []string{}},

		// Unknown references.
		{name: "unknown site", doc: addTo("pools", obj(`{"name":"new","site":"nowhere","class":"vps-host"}`)),
			want: `! pool new: unknown site "nowhere"` + "\n" + counts(0, 0, 0, 11, 1), calls: []string{}},
		{name: "what hangs off a pool that cannot be created", doc: edit(
			addTo("pools", obj(`{"name":"new","site":"nowhere","class":"vps-host","ownerQuota":{"gpu":1},"offers":[{"tenant":"zeta"}]}`)),
			addTo("flavors", obj(`{"pool":"new","name":"f","vcpu":1,"memoryGiB":1,"diskGiB":1}`))),
			want: `! pool new: unknown site "nowhere"` + "\n" + `! ownerQuota new:gpu: pool "new" cannot be created (blocked)` + "\n" +
				`! offer new -> zeta: pool "new" cannot be created (blocked)` + "\n" + `! flavor new/f: pool "new" cannot be created (blocked)` + "\n" +
				counts(0, 0, 0, 11, 4), calls: []string{}},
		{name: "unknown site of a stored pool", doc: setTo(pVps+"/site", "nowhere"),
			want: fixed("pool", "vps", "site", "site") + `; unknown site "nowhere"` + "\n" + counts(0, 0, 0, 10, 1), calls: []string{}},
		{name: "unknown provider account", doc: newPool(`,"providerAccount":"ghost"`),
			want: `! pool new: unknown provider account "ghost"` + "\n" + counts(0, 0, 0, 11, 1), calls: []string{}},
		{name: "unknown pool of a flavor", doc: addTo("flavors", obj(`{"pool":"ghost","name":"f","vcpu":1,"memoryGiB":1,"diskGiB":1}`)),
			want: `! flavor ghost/f: unknown pool "ghost"` + "\n" + counts(0, 0, 0, 11, 1), calls: []string{}},
		{name: "unknown pool of a template", doc: addTo("sandboxTemplates", obj(`{"name":"t","pool":"ghost","flavor":"small","imageId":"i"}`)),
			want: `! sandboxTemplate t: unknown pool "ghost"` + "\n" + counts(0, 0, 0, 11, 1), calls: []string{}},
		{name: "unknown pool id of a template", doc: addTo("sandboxTemplates", obj(`{"name":"t","pool":"pool_nosuch","flavor":"small","imageId":"i"}`)),
			want: `! sandboxTemplate t: unknown pool "pool_nosuch"` + "\n" + counts(0, 0, 0, 11, 1), calls: []string{}},
		{name: "unknown flavor of a template", doc: setTo(pTpl+"/flavor", "nope"),
			want: `! sandboxTemplate py (flavor): unknown flavor "nope" in pool "vps"` + "\n" + counts(0, 0, 0, 10, 1), calls: []string{}},
		{name: "flavor of another pool", doc: edit(addTo("flavors", obj(`{"pool":"burst","name":"big","vcpu":1,"memoryGiB":1,"diskGiB":1}`)), setTo(pTpl+"/flavor", "big")),
			want: "+ flavor burst/big\n" + `! sandboxTemplate py (flavor): unknown flavor "big" in pool "vps"` + "\n" + counts(1, 0, 0, 10, 1), methods: []string{"flavors.create burst/big"}},
		{name: "flavor pruned under a template", opts: prune, doc: delAt(pFlavor),
			want:    `! sandboxTemplate py: unknown flavor "small" in pool "vps"` + "\n- flavor vps/small\n" + counts(0, 0, 1, 9, 1),
			methods: []string{"flavors.delete vps/small"}},
		{name: "stored flavor kept without prune", doc: delAt(pFlavor), want: counts(0, 0, 0, 10), calls: []string{}},

		{name: "flavor and template of a pool prune archives", opts: prune, doc: delAt(pVps),
			want: `! flavor vps/small: pool "vps" is left out of the document, so prune archives it; list it or remove what uses it` + "\n" +
				`! sandboxTemplate py: pool "vps" is left out of the document, so prune archives it; list it or remove what uses it` + "\n" +
				"- offer vps -> acme\n- pool vps\n" + counts(0, 0, 2, 5, 2), methods: []string{"pools.unoffer vps -> acme", "pools.archive vps"}},
		{name: "template by id of a pool prune archives", opts: prune, doc: edit(delAt(pVps), delAt(pFlavor), setTo(pTpl+"/pool", id(inventory.Pool, "vps"))),
			want: `! sandboxTemplate py: pool "vps" is left out of the document, so prune archives it; list it or remove what uses it` + "\n" +
				"- flavor vps/small\n- offer vps -> acme\n- pool vps\n" + counts(0, 0, 3, 5, 1),
			methods: []string{"flavors.delete vps/small", "pools.unoffer vps -> acme", "pools.archive vps"}},
		{name: "flavor of a pool the document leaves out, without prune", doc: delAt(pVps), want: counts(0, 0, 0, 7), calls: []string{}},

		// Owner tenant.
		{name: "offer to the owner tenant", doc: addTo(pVps+"/offers", obj(`{"tenant":"root"}`)),
			want: `! offer vps -> root: a pool is never offered to its owner tenant "root"; set ownerQuota instead` + "\n" + counts(0, 0, 0, 11, 1), calls: []string{}},
		{name: "offer to the configured owner tenant", opts: Options{Tenant: "acme"},
			want: `! offer vps -> acme: a pool is never offered to its owner tenant "acme"; set ownerQuota instead` + "\n" + counts(0, 0, 0, 10, 1), calls: []string{}},
		{name: "offer to root is fine for another owner", opts: Options{Tenant: "acme"}, doc: edit(delAt(pOffer), addTo(pVps+"/offers", obj(`{"tenant":"root"}`))),
			want: "+ offer vps -> root\n" + counts(1, 0, 0, 10), calls: []string{
				`pools.offer {"id":"` + inventory.ID("acme", inventory.Offer, "vps -> root") + `","includeDescendants":false,"pool":"«pool vps»","priority":0,"quota":{},"tenant":"root"}`}},

		// Archived names.
		{name: "pool re-created under an archived name", state: archived("burst"),
			want: "! pool burst: archived; choose a new name\n" + counts(0, 0, 0, 10, 1), calls: []string{}},
		{name: "flavor of an archived pool", state: archived("vps"), doc: edit(delAt(pVps), delAt(pTpl)),
			want: `! flavor vps/small: pool "vps" is archived` + "\n" + counts(0, 0, 0, 5, 1), calls: []string{}},
		{name: "owner quota and offer of an archived pool", state: archived("vps"), doc: edit(delAt(pTpl), delAt(pFlavor),
			setTo(pVps+"/ownerQuota/gpu", 99), addTo(pVps+"/offers", obj(`{"tenant":"zeta"}`))),
			want: "! pool vps: archived; choose a new name\n" +
				`! ownerQuota vps:gpu (max): pool "vps" is archived` + "\n" + `! ownerQuota vps:vcpu: pool "vps" is archived` + "\n" +
				`! offer vps -> acme: pool "vps" is archived` + "\n" + `! offer vps -> zeta: pool "vps" is archived` + "\n" + counts(0, 0, 0, 5, 5),
			calls: []string{}},

		// Provider account deletes.
		{name: "account delete while a pool uses it", opts: prune, doc: delAt("providerAccounts/0"),
			want: `! providerAccount cloud: still used by pool "burst"; remove or change that pool first` + "\n" + counts(0, 0, 0, 10, 1), calls: []string{}},
		{name: "account delete while a substrate uses it", opts: prune, doc: delAt("providerAccounts/1"),
			want: `! providerAccount k8s: still used by pool "kube"; remove or change that pool first` + "\n" + counts(0, 0, 0, 10, 1), calls: []string{}},
		{name: "account delete once its pool goes", opts: prune, doc: edit(delAt("providerAccounts/0"), delAt(pBurst)),
			want: "- pool burst\n- providerAccount cloud\n" + counts(0, 0, 2, 9), methods: []string{"pools.archive burst", "providerAccounts.delete cloud"}},

		// Substrates.
		{name: "substrate kept without prune", doc: delAt(pSub),
			want: "= pool kube\n  note: substrate kept: removing it needs prune\n" + counts(0, 0, 0, 11), calls: []string{}},
		{name: "substrate kept while the policy changes", doc: setTo(pKube+"/policy", obj(`{"x":1}`)),
			want:  "~ pool kube (policy)\n  note: substrate kept: removing it needs prune\n" + counts(0, 1, 0, 10),
			calls: []string{`pools.update {"id":"«pool kube»","policy":{"substrate":{"account":"k8s","cluster":{"create":{"location":"fra1"}},"flavors":[{"machineType":"m1","name":"n1"}],"kind":"kubernetes"},"x":1}}`}},
		{name: "substrate removed with prune", opts: prune, doc: delAt(pSub),
			want: "~ pool kube (policy)\n" + counts(0, 1, 0, 10), calls: []string{`pools.update {"id":"«pool kube»","policy":{}}`}},
		{name: "substrate sizes change in place", doc: edit(setTo(pSub+"/flavors/0/nodes", 3), setTo(pSub+"/flavors/0/machineType", "m2")),
			want:  "~ pool kube (policy)\n" + notChecked + "\n" + counts(0, 1, 0, 10),
			calls: []string{`pools.update {"id":"«pool kube»","policy":{"substrate":{"account":"k8s","cluster":{"create":{"location":"fra1"}},"flavors":[{"machineType":"m2","name":"n1","nodes":3}],"kind":"kubernetes"}}}`}},
		{name: "substrate account", doc: edit(addTo("providerAccounts", obj(`{"name":"k8s2","provider":"gcp"}`)), setTo(pSub+"/account", "k8s2")),
			want: "+ providerAccount k8s2\n" + notChecked + "\n! pool kube (policy): " + identity + "\n" + notChecked + "\n" + counts(1, 0, 0, 10, 1), methods: []string{"providerAccounts.create k8s2"}},
		{name: "substrate location", doc: setTo(pSub+"/cluster/create/location", "fra2"),
			want: "! pool kube (policy): " + identity + "\n" + notChecked + "\n" + counts(0, 0, 0, 10, 1), calls: []string{}},
		{name: "substrate privateNodes", doc: setTo(pSub+"/cluster/create/privateNodes", true),
			want: "! pool kube (policy): " + identity + "\n" + notChecked + "\n" + counts(0, 0, 0, 10, 1), calls: []string{}},
		{name: "substrate privateNodes false is the default", doc: setTo(pSub+"/cluster/create/privateNodes", false), want: counts(0, 0, 0, 11), calls: []string{}},
		{name: "substrate create to adopt", doc: setTo(pSub+"/cluster", obj(`{"adopt":"c-1"}`)),
			want: "! pool kube (policy): " + identity + "\n" + notChecked + "\n" + counts(0, 0, 0, 10, 1), calls: []string{}},
		{name: "substrate adopted id", state: func(t testing.TB, objs []inventory.Object) []inventory.Object {
			pol := find(t, objs, inventory.Pool, "kube").Spec["policy"].(map[string]any)
			pol["substrate"].(map[string]any)["cluster"] = map[string]any{"adopt": "c-1"}
			return objs
		}, doc: setTo(pSub+"/cluster", obj(`{"adopt":"c-2"}`)),
			want: "! pool kube (policy): " + identity + "\n" + notChecked + "\n" + counts(0, 0, 0, 10, 1), calls: []string{}},
		{name: "substrate of a non-Kubernetes provider", doc: newPool(sub("cloud", `{"create":{"location":"x"}}`)),
			want: `! pool new: substrate account "cloud" is an account of provider hetzner-cloud; a Kubernetes substrate needs an account of one of the providers aws, digitalocean, fake, gcp` + "\n" + notChecked + "\n" + counts(0, 0, 0, 11, 1), calls: []string{}},
		{name: "substrate of an unknown account", doc: newPool(sub("ghost", `{"create":{"location":"x"}}`)),
			want: `! pool new: unknown provider account "ghost" (policy.substrate.account)` + "\n" + notChecked + "\n" + counts(0, 0, 0, 11, 1), calls: []string{}},
		{name: "two pools adopt one cluster", doc: edit(newPool(sub("k8s", `{"adopt":"c-1"}`)),
			addTo("pools", obj(`{"name":"new2","site":"fra","class":"metal-host"`+sub("k8s", `{"adopt":"c-1"}`)+`}`))),
			want:    "+ pool new\n" + notChecked + "\n" + `! pool new2: cluster "c-1" of account "k8s" is already claimed by pool "new"; one cluster backs one pool` + "\n" + notChecked + "\n" + counts(1, 0, 0, 11, 1),
			methods: []string{"pools.create new"}},
		{name: "one cluster id under two accounts", doc: edit(addTo("providerAccounts", obj(`{"name":"k8s2","provider":"aws"}`)), newPool(sub("k8s", `{"adopt":"c-1"}`)),
			addTo("pools", obj(`{"name":"new2","site":"fra","class":"metal-host"`+sub("k8s2", `{"adopt":"c-1"}`)+`}`))),
			want:    "+ providerAccount k8s2\n" + notChecked + "\n+ pool new\n" + notChecked + "\n+ pool new2\n" + notChecked + "\n" + counts(3, 0, 0, 11),
			methods: []string{"providerAccounts.create k8s2", "pools.create new", "pools.create new2"}},
		{name: "the pool that holds a cluster keeps it", state: adoptC1, doc: edit(setTo(pSub+"/cluster", obj(`{"adopt":"c-1"}`)),
			addTo("pools", obj(`{"name":"adopter","site":"fra","class":"metal-host"`+sub("k8s", `{"adopt":"c-1"}`)+`}`))),
			want: `! pool adopter: cluster "c-1" of account "k8s" is already claimed by pool "kube"; one cluster backs one pool` + "\n" + notChecked + "\n" + counts(0, 0, 0, 11, 1), calls: []string{}},
		{name: "a pool adopts the cluster of a pool the document leaves out", state: func(t testing.TB, objs []inventory.Object) []inventory.Object {
			pol := find(t, objs, inventory.Pool, "kube").Spec["policy"].(map[string]any)
			pol["substrate"].(map[string]any)["cluster"] = map[string]any{"adopt": "c-1"}
			return objs
		}, doc: edit(delAt(pKube), newPool(sub("k8s", `{"adopt":"c-1"}`))),
			want: `! pool new: cluster "c-1" of account "k8s" is already claimed by pool "kube"; one cluster backs one pool` + "\n" + notChecked + "\n" + counts(0, 0, 0, 10, 1), calls: []string{}},
	})
}

// Objects fleet did not create are named by their id and matched by name.
func TestSeededObjects(t *testing.T) {
	seeded := func(t testing.TB, objs []inventory.Object) []inventory.Object {
		return append(objs,
			inventory.Object{Kind: inventory.Site, ID: "site_ext", Name: "site_ext", Spec: map[string]any{"kind": "dedicated", "region": "us-east"}},
			inventory.Object{Kind: inventory.ProviderAccount, ID: "pacc_ext", Name: "pacc_ext", Spec: map[string]any{"provider": "aws", "config": map[string]any{}}},
			inventory.Object{Kind: inventory.Pool, ID: "pool_external", Name: "pool_external",
				Spec: map[string]any{"site": "site_ext", "class": "provider", "providerAccount": "pacc_ext", "policy": map[string]any{}}},
		)
	}
	seededPool := `{"name":"pool_external","site":"site_ext","class":"provider","providerAccount":"pacc_ext"}`
	runKindCases(t, []kindCase{
		{name: "unchanged", state: seeded, doc: edit(addTo("sites", obj(`{"name":"site_ext","kind":"dedicated","region":"us-east"}`)),
			addTo("providerAccounts", obj(`{"name":"pacc_ext","provider":"aws"}`)), addTo("pools", obj(seededPool))),
			want: counts(0, 0, 0, 14), calls: []string{}},
		{name: "referenced but not listed", state: seeded, doc: edit(addTo("pools", obj(`{"name":"new","site":"site_ext","class":"provider","providerAccount":"pacc_ext"}`)),
			addTo("flavors", obj(`{"pool":"pool_external","name":"f","vcpu":1,"memoryGiB":1,"diskGiB":1}`)),
			addTo("sandboxTemplates", obj(`{"name":"t","pool":"pool_external","flavor":"f","imageId":"i"}`))),
			want: "+ pool new\n+ flavor pool_external/f\n+ sandboxTemplate t\n" + counts(3, 0, 0, 11),
			calls: []string{
				`pools.create {"class":"provider","id":"«pool new»","name":"new","policy":{},"providerAccount":"pacc_ext","site":"site_ext"}`,
				`flavors.create {"diskGiB":1,"gpus":0,"id":"«flavor pool_external/f»","memoryGiB":1,"name":"f","pool":"pool_external","vcpu":1}`,
				`sandboxTemplates.create {"flavor":"f","id":"«sandboxTemplate t»","imageId":"i","name":"t","network":"egress","pool":"pool_external"}`,
			}},
		{name: "updated by its id", state: seeded, doc: edit(addTo("pools", obj(`{"name":"pool_external","site":"site_ext","class":"provider","providerAccount":"pacc_ext","gpuModel":"A100"}`))),
			want: "~ pool pool_external (gpuModel)\n" + counts(0, 1, 0, 11), calls: []string{`pools.update {"gpuModel":"A100","id":"pool_external"}`}},
		{name: "a new name is a new object", state: seeded, doc: addTo("pools", obj(`{"name":"external","site":"site_ext","class":"provider","providerAccount":"pacc_ext"}`)),
			want: "+ pool external\n" + counts(1, 0, 0, 11), methods: []string{"pools.create external"}},
		{name: "pruned by name", state: seeded, opts: Options{Prune: true},
			want: "- pool pool_external\n- providerAccount pacc_ext\n" + counts(0, 0, 2, 11), calls: []string{`pools.archive {"id":"pool_external"}`, `providerAccounts.delete {"id":"pacc_ext"}`}},
		{name: "template by pool id, its flavor new in the document", doc: edit(addTo("flavors", obj(`{"pool":"vps","name":"big","vcpu":8,"memoryGiB":16,"diskGiB":80}`)),
			addTo("sandboxTemplates", obj(`{"name":"t","pool":"`+id(inventory.Pool, "vps")+`","flavor":"big","imageId":"i"}`))),
			want:    "+ flavor vps/big\n+ sandboxTemplate t\n" + counts(2, 0, 0, 11),
			methods: []string{"flavors.create vps/big", "sandboxTemplates.create t"}},
		{name: "template by pool id", doc: addTo("sandboxTemplates", obj(`{"name":"t","pool":"`+id(inventory.Pool, "vps")+`","flavor":"small","imageId":"i"}`)),
			want:  "+ sandboxTemplate t\n" + counts(1, 0, 0, 11),
			calls: []string{`sandboxTemplates.create {"flavor":"small","id":"«sandboxTemplate t»","imageId":"i","name":"t","network":"egress","pool":"«pool vps»"}`}},
	})
}
