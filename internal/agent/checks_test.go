package agent

import (
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/annotation"
	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/outbox"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/state/statetest"
)

func TestPlanCheckCapsAnnotationsWithANote(t *testing.T) {
	st := outbox.Status("abc", "plan", "failure", "invalid", "")
	cm := outbox.Sticky(1, "<!-- m -->", "the comment")
	anns := make([]annotation.Annotation, MaxAnnotations+7)
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

func TestQueueVerdict(t *testing.T) {
	a := &Agent{cfg: Config{Branch: "main"}, store: statetest.Open(t)}
	queued := "refs/heads/gh-readonly-queue/main/pr-7-abc"
	put := func(commit string, rv Reviewed) {
		t.Helper()
		if err := a.store.Update(func(tx *state.Tx) error { return tx.Put(spaceReviewed, commit, rv) }); err != nil {
			t.Fatal(err)
		}
	}
	put("q-ok", Reviewed{Head: "q-ok", PlanHash: "h1", PR: 7, Ref: queued, Valid: true})
	put("q-blocked", Reviewed{Head: "q-blocked", PlanHash: "h1", PR: 7, Ref: queued, Valid: false})
	put("pr-head", Reviewed{Head: "pr-head", PlanHash: "h1", PR: 7, Ref: "refs/pull/7/head", Valid: true})
	put("other-queue", Reviewed{Head: "other-queue", PlanHash: "h1", PR: 7, Ref: "refs/heads/gh-readonly-queue/release/pr-7-abc", Valid: true})
	cases := []struct {
		commit, hash string
		found        bool
		kind         verdictKind
		says         string
	}{
		{"q-ok", "h1", true, goOn, ""},
		{"q-ok", "h2", true, refuse, "the plan changed since the merge queue planned"},
		{"q-blocked", "h1", true, refuse, "was blocked"},
		{"pr-head", "h1", false, goOn, ""},     // a pull request head: its own rule decides
		{"other-queue", "h1", false, goOn, ""}, // another branch's queue is no review of this one
		{"unknown", "h1", false, goOn, ""},
	}
	for _, c := range cases {
		cand := &candidate{commit: c.commit, plan: planned{Plan: &plan.Plan{PlanHash: c.hash}}}
		v, found := a.queueVerdict(cand)
		if found != c.found || (found && (v.kind != c.kind || !strings.Contains(v.reason, c.says))) {
			t.Errorf("%s with %s: found %v, %+v", c.commit, c.hash, found, v)
		}
	}
}
