package plan

import (
	"crypto/sha256"
	"encoding/base32"
	"slices"
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/inventory"
)

// orderState is the fleet before orderDoc; orderDoc touches every group.
const orderState = `{"version":1,
 "sites":[{"name":"fra","kind":"shared","region":"eu"}],
 "providerAccounts":[{"name":"cloud","provider":"hetzner-cloud","config":{"location":"fsn1"}},{"name":"old-acct","provider":"fake"}],
 "pools":[
  {"name":"vps","site":"fra","class":"vps-host","gpuModel":"L40S","ownerQuota":{"gpu":8,"vcpu":64},
   "offers":[{"tenant":"acme","priority":1},{"tenant":"gone-tenant"}]},
  {"name":"b-pool","site":"fra","class":"metal-host","ownerQuota":{"gpu":1}},
  {"name":"old-pool","site":"fra","class":"metal-host","offers":[{"tenant":"x"}]},
  {"name":"burst","site":"fra","class":"provider","providerAccount":"cloud"}],
 "flavors":[{"pool":"vps","name":"small","vcpu":2,"memoryGiB":4,"diskGiB":40},{"pool":"vps","name":"gone","vcpu":1,"memoryGiB":1,"diskGiB":1},
  {"pool":"old-pool","name":"f","vcpu":1,"memoryGiB":1,"diskGiB":1}],
 "sandboxTemplates":[{"name":"py","pool":"vps","flavor":"small","imageId":"ubuntu"},{"name":"gone-tpl","pool":"vps","flavor":"gone","imageId":"x"}]}`

const orderDoc = `{"version":1,
 "sandboxTemplates":[{"name":"py","pool":"vps","flavor":"small","imageId":"debian"},{"name":"new-tpl","pool":"c-new","flavor":"g","imageId":"x"}],
 "flavors":[{"pool":"vps","name":"small","vcpu":4,"memoryGiB":4,"diskGiB":40},{"pool":"vps","name":"new","vcpu":1,"memoryGiB":1,"diskGiB":1},
  {"pool":"c-new","name":"g","vcpu":1,"memoryGiB":1,"diskGiB":1},{"pool":"b-pool","name":"f","vcpu":1,"memoryGiB":1,"diskGiB":1}],
 "pools":[
  {"name":"z-new","site":"ber","class":"metal-host","ownerQuota":{"gpu":2}},
  {"name":"vps","site":"fra","class":"vps-host","gpuModel":"H100","ownerQuota":{"vcpu":64,"mem":128,"gpu":16},
   "offers":[{"tenant":"globex"},{"tenant":"acme","priority":2}]},
  {"name":"c-new","site":"ams","class":"metal-host","ownerQuota":{"gpu":1},"offers":[{"tenant":"acme"}]},
  {"name":"burst","site":"fra","class":"provider","providerAccount":"cloud"},
  {"name":"b-pool","site":"fra","class":"metal-host","policy":{"p":1},"ownerQuota":{"gpu":3}}],
 "sites":[{"name":"fra","kind":"shared","region":"eu"},{"name":"ber","kind":"shared","region":"eu"},{"name":"ams","kind":"shared","region":"eu"}],
 "providerAccounts":[{"name":"new-acct","provider":"zeta"},{"name":"cloud","provider":"hetzner-cloud","config":{"location":"nbg1"}},{"name":"a-acct","provider":"fake"}]}`

func TestCallOrder(t *testing.T) {
	objs := applied(t, docOf(t, parseJSON(t, orderState)), Options{})
	p := Make(docOf(t, parseJSON(t, orderDoc)), inventory.NewSnapshot(objs), Options{Prune: true})
	want := []string{
		// provider account creates and updates
		"providerAccounts.create a-acct",
		"providerAccounts.update cloud",
		"providerAccounts.create new-acct",
		// site creates
		"sites.create ams",
		"sites.create ber",
		// pool creates
		"pools.create c-new",
		"pools.create z-new",
		// pool updates and quotas, pool by pool
		"pools.update b-pool",
		"quotas.set b-pool:gpu",
		"quotas.set c-new:gpu",
		"pools.update vps",
		"quotas.set vps:gpu",
		"quotas.set vps:mem",
		"quotas.set z-new:gpu",
		// offers
		"pools.offer c-new -> acme",
		"pools.offer vps -> acme",
		"pools.offer vps -> globex",
		// flavor creates and updates
		"flavors.create b-pool/f",
		"flavors.create c-new/g",
		"flavors.create vps/new",
		"flavors.update vps/small",
		// template creates and updates
		"sandboxTemplates.create new-tpl",
		"sandboxTemplates.update py",
		// template deletes, flavor deletes, unoffers, pool archives,
		// provider account deletes
		"sandboxTemplates.delete gone-tpl",
		"flavors.delete old-pool/f",
		"flavors.delete vps/gone",
		"pools.unoffer old-pool -> x",
		"pools.unoffer vps -> gone-tenant",
		"pools.archive old-pool",
		"providerAccounts.delete old-acct",
	}
	if got := methods(p); !slices.Equal(got, want) {
		t.Errorf("calls:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if p.Blocked() {
		t.Fatalf("blocked:\n%s", text(p, false))
	}
	// The changes stand where their calls are, the unchanged in between.
	var lines []string
	for _, c := range p.Changes {
		if c.Action != Unchanged {
			lines = append(lines, c.Line())
		}
	}
	wantLines := []string{
		"+ providerAccount a-acct", "~ providerAccount cloud (config)", "+ providerAccount new-acct",
		"+ site ams", "+ site ber", "+ pool c-new", "+ pool z-new",
		"~ pool b-pool (policy)", "~ ownerQuota b-pool:gpu (max)", "+ ownerQuota c-new:gpu", "~ pool vps (gpuModel)",
		"~ ownerQuota vps:gpu (max)", "+ ownerQuota vps:mem", "+ ownerQuota z-new:gpu",
		"+ offer c-new -> acme", "~ offer vps -> acme (priority)", "+ offer vps -> globex",
		"+ flavor b-pool/f", "+ flavor c-new/g", "+ flavor vps/new", "~ flavor vps/small (vcpu)",
		"+ sandboxTemplate new-tpl", "~ sandboxTemplate py (imageId)",
		"- sandboxTemplate gone-tpl", "- flavor old-pool/f", "- flavor vps/gone",
		"- offer old-pool -> x", "- offer vps -> gone-tenant", "- pool old-pool", "- providerAccount old-acct",
	}
	if !slices.Equal(lines, wantLines) {
		t.Errorf("changes:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(wantLines, "\n"))
	}
	// Params carry derived ids and references as ids.
	byLine := map[string]Call{}
	for _, c := range p.Calls {
		byLine[c.Method+" "+c.Name()] = c
	}
	for line, params := range map[string]map[string]any{
		"pools.create c-new":   {"id": id(inventory.Pool, "c-new"), "name": "c-new", "site": id(inventory.Site, "ams"), "class": "metal-host", "policy": map[string]any{}},
		"quotas.set c-new:gpu": {"id": id(inventory.OwnerQuota, "c-new:gpu"), "pool": id(inventory.Pool, "c-new"), "resource": "gpu", "max": int64(1)},
		"quotas.set vps:gpu":   {"id": id(inventory.OwnerQuota, "vps:gpu"), "max": int64(16)},
		"pools.offer c-new -> acme": {"id": id(inventory.Offer, "c-new -> acme"), "pool": id(inventory.Pool, "c-new"), "tenant": "acme",
			"quota": map[string]any{}, "includeDescendants": false, "priority": int64(0)},
		"flavors.create c-new/g": {"id": id(inventory.Flavor, "c-new/g"), "pool": id(inventory.Pool, "c-new"), "name": "g",
			"vcpu": int64(1), "memoryGiB": int64(1), "diskGiB": int64(1), "gpus": int64(0)},
		"sandboxTemplates.create new-tpl": {"id": id(inventory.SandboxTemplate, "new-tpl"), "name": "new-tpl", "pool": id(inventory.Pool, "c-new"),
			"flavor": "g", "imageId": "x", "network": "egress"},
		"pools.archive old-pool":           {"id": id(inventory.Pool, "old-pool")},
		"providerAccounts.delete old-acct": {"id": id(inventory.ProviderAccount, "old-acct")},
	} {
		c, ok := byLine[line]
		if !ok {
			t.Errorf("no call %s", line)
			continue
		}
		if !inventory.Equal(c.Params, params) {
			t.Errorf("%s params %s, want %s", line, c.CallLine(), canonString(params))
		}
		if c.ID() != params["id"] {
			t.Errorf("%s ID() = %q", line, c.ID())
		}
	}
}

// Owner quotas stand with their pool, even when a pool's name is a prefix
// of another's and sorts before it only because of the separator.
func TestPoolByPool(t *testing.T) {
	state := `{"version":1,"sites":[{"name":"s","kind":"shared","region":"eu"}],"pools":[
	  {"name":"a","site":"s","class":"metal-host","ownerQuota":{"x":1,"y":1}},
	  {"name":"a-b","site":"s","class":"metal-host","ownerQuota":{"x":1}},
	  {"name":"a.b","site":"s","class":"metal-host","ownerQuota":{"x":1}}]}`
	doc := `{"version":1,"sites":[{"name":"s","kind":"shared","region":"eu"}],"pools":[
	  {"name":"a.b","site":"s","class":"metal-host","gpuModel":"G","ownerQuota":{"x":2}},
	  {"name":"a-b","site":"s","class":"metal-host","gpuModel":"G","ownerQuota":{"x":2}},
	  {"name":"a","site":"s","class":"metal-host","gpuModel":"G","ownerQuota":{"x":2}}]}`
	objs := applied(t, docOf(t, parseJSON(t, state)), Options{})
	p := Make(docOf(t, parseJSON(t, doc)), inventory.NewSnapshot(objs), Options{Prune: true})
	want := `~ pool a (gpuModel)
~ ownerQuota a:x (max)
= ownerQuota a:y
  note: owner quotas are never deleted; set 0 to stop
~ pool a-b (gpuModel)
~ ownerQuota a-b:x (max)
~ pool a.b (gpuModel)
~ ownerQuota a.b:x (max)
` + counts(0, 6, 0, 1)
	if got := text(p, false); got != want {
		t.Errorf("plan:\n%s\nwant:\n%s", got, want)
	}
}

func TestDerivedID(t *testing.T) {
	sum := sha256.Sum256([]byte("fleet:root:pool:vps-fra"))
	want := "pool_" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(sum[:]))[:26]
	if got := inventory.ID("root", inventory.Pool, "vps-fra"); got != want {
		t.Fatalf("ID = %s, want %s", got, want)
	}
	doc := mustDoc(t, "../../testdata/documents/valid/fleet-config.json")
	p := Make(doc, nil, Options{})
	var seen int
	for _, c := range p.Calls {
		if c.Method == "pools.create" && c.Name() == "vps-fra" {
			seen++
			if c.ID() != want {
				t.Errorf("pools.create vps-fra id %s, want %s", c.ID(), want)
			}
		}
		if c.Method == "quotas.set" || c.Method == "pools.offer" || (c.Method == "flavors.create" && c.Name() == "vps-fra/g1.small") {
			seen++
			if c.Params["pool"] != want {
				t.Errorf("%s %s pool %v, want %s", c.Method, c.Name(), c.Params["pool"], want)
			}
		}
	}
	if seen != 4 {
		t.Errorf("saw %d calls about vps-fra, want 4", seen)
	}
	// Another tenant derives other ids.
	other := Make(doc, nil, Options{Tenant: "acme"})
	if other.Calls[0].ID() == p.Calls[0].ID() || other.Calls[0].ID() != inventory.ID("acme", other.Calls[0].Kind(), other.Calls[0].Name()) {
		t.Errorf("tenant acme: id %s", other.Calls[0].ID())
	}
}
