package plan

import (
	"fmt"
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

// flavorsDoc is a pool and n flavors named prefix-0... on it.
func flavorsDoc(t *testing.T, prefix string, n int) *fleet.Document {
	t.Helper()
	var b strings.Builder
	b.WriteString(`{"version":1,"sites":[{"name":"s","kind":"shared","region":"r"}],"pools":[{"name":"p","site":"s","class":"metal-host","policy":{}}],"flavors":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"pool":"p","name":"%s-%d","vcpu":1,"memoryGiB":1,"diskGiB":1,"gpus":0}`, prefix, i)
	}
	b.WriteString("]}")
	doc, errs := fleet.Validate("fleet.json", []byte(b.String()))
	if errs != nil {
		t.Fatal(errs.Text())
	}
	return doc
}

// TestExportOfAFleetNoDocumentHolds: two documents of 600 flavors each,
// applied without prune, leave 1,200 flavors, more than one document may
// list. The export says so, with the count, the limit and the ways out, as
// an INVALID_INPUT refusal; a fleet at the limit exports.
func TestExportOfAFleetNoDocumentHolds(t *testing.T) {
	for _, k := range []string{"providerAccounts", "sites", "pools", "flavors", "sandboxTemplates", "offers"} {
		if listLimits()[k] != 1000 {
			t.Fatalf("the schema's limit of %s read as %d", k, listLimits()[k])
		}
	}
	objs := applyCalls(t, nil, Make(flavorsDoc(t, "a", 600), nil, Options{}).Calls)
	if _, err := Export(inventory.NewSnapshot(objs)); err != nil {
		t.Fatalf("600 flavors: %v", err)
	}
	objs = applyCalls(t, objs, Make(flavorsDoc(t, "b", 600), inventory.NewSnapshot(objs), Options{}).Calls)
	_, err := Export(inventory.NewSnapshot(objs))
	if err == nil {
		t.Fatal("1,200 flavors exported")
	}
	if refusal.CodeOf(err) != refusal.InvalidInput {
		t.Errorf("code %s, want INVALID_INPUT", refusal.CodeOf(err))
	}
	msg := refusal.Text(err)
	for _, want := range []string{"1200 flavors", "at most 1000", "prune", "state copy"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
}
