package agent

import (
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/annotate"
	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/outbox"
)

func TestPlanCheckCapsAnnotationsWithANote(t *testing.T) {
	st := outbox.Status("abc", "plan", "failure", "invalid", "")
	cm := outbox.Sticky(1, "<!-- m -->", "the comment")
	anns := make([]annotate.Annotation, MaxAnnotations+7)
	p := planCheck(st, cm, anns)
	if len(p.Annotations) != MaxAnnotations || !strings.Contains(p.Body, "7 more annotation(s) not shown") || !strings.HasPrefix(p.Body, "the comment") {
		t.Errorf("%d annotations, summary %q", len(p.Annotations), p.Body)
	}
	if p := planCheck(st, cm, anns[:3]); len(p.Annotations) != 3 || p.Body != "the comment" {
		t.Errorf("uncut: %d, %q", len(p.Annotations), p.Body)
	}
}

func TestObjectPointer(t *testing.T) {
	doc, errs := fleet.Validate("f", []byte(`{"version":1,
	"sites":[{"name":"s","kind":"shared","region":"r"}],
	"pools":[{"name":"a","site":"s","class":"vps-host"},{"name":"b","site":"s","class":"vps-host","ownerQuota":{"gpu":2},"offers":[{"tenant":"t"}]}],
	"flavors":[{"pool":"b","name":"f","vcpu":1,"memoryGiB":1,"diskGiB":1}]}`))
	if errs != nil {
		t.Fatal(errs.Text())
	}
	cases := []struct {
		kind inventory.Kind
		name string
		want string
	}{
		{inventory.Site, "s", "/sites/0"},
		{inventory.Pool, "b", "/pools/1"},
		{inventory.Flavor, inventory.FlavorName("b", "f"), "/flavors/0"},
		{inventory.Offer, inventory.OfferName("b", "t"), "/pools/1/offers/0"},
		{inventory.OwnerQuota, inventory.OwnerQuotaName("b", "gpu"), "/pools/1/ownerQuota/gpu"},
		{inventory.Pool, "gone", ""}, // a delete: no object in the document
	}
	for _, c := range cases {
		got, ok := objectPointer(doc, c.kind, c.name)
		if got != c.want || ok != (c.want != "") {
			t.Errorf("%s %s: %q %v, want %q", c.kind, c.name, got, ok, c.want)
		}
	}
}
