package plan

import (
	"os"
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
)

func mustDoc(t testing.TB, path string) *fleet.Document {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	d, errs := fleet.Validate(path, data)
	if errs != nil {
		t.Fatal(errs.Text())
	}
	return d
}

// applyCalls is a minimal in-memory apply for tests: it runs calls against
// a list of objects the way the real apply does against the store.
func applyCalls(t testing.TB, objs []inventory.Object, calls []Call) []inventory.Object {
	t.Helper()
	byID := map[string]int{}
	for i, o := range objs {
		byID[o.ID] = i
	}
	for _, c := range calls {
		op := strings.SplitN(c.Method, ".", 2)[1]
		id := c.ID()
		i, exists := byID[id]
		spec := map[string]any{}
		for k, v := range c.Params {
			if k != "id" {
				spec[k] = v
			}
		}
		switch {
		case op == "create" || ((op == "set" || op == "offer") && !exists):
			objs = append(objs, inventory.Object{Kind: c.Kind(), ID: id, Name: c.Name(), Spec: spec})
			byID[id] = len(objs) - 1
		case op == "update" || op == "set" || op == "offer":
			for k, v := range spec {
				if v == nil {
					delete(objs[i].Spec, k)
				} else {
					objs[i].Spec[k] = v
				}
			}
		case op == "archive":
			objs[i].Archived = true
		case op == "delete" || op == "unoffer":
			objs = append(objs[:i], objs[i+1:]...)
			byID = map[string]int{}
			for j, o := range objs {
				byID[o.ID] = j
			}
		default:
			t.Fatalf("unknown method %s", c.Method)
		}
	}
	return objs
}

func TestSmokeApplyThenPlanIsEmpty(t *testing.T) {
	for _, f := range []string{"fleet-config.json", "everything.json", "kubernetes-pool.json"} {
		doc := mustDoc(t, "../../testdata/documents/valid/"+f)
		p := Make(doc, nil, Options{})
		if p.Blocked() {
			t.Fatalf("%s blocked:\n%s", f, strings.Join(p.TextLines(true), "\n"))
		}
		objs := applyCalls(t, nil, p.Calls)
		p2 := Make(doc, inventory.NewSnapshot(objs), Options{})
		if !p2.Empty() || p2.Blocked() {
			t.Fatalf("%s: second plan not empty:\n%s", f, strings.Join(p2.TextLines(true), "\n"))
		}
		exp, err := Export(inventory.NewSnapshot(objs))
		if err != nil {
			t.Fatal(err)
		}
		p3 := Make(exp, inventory.NewSnapshot(objs), Options{Prune: true})
		if !p3.Empty() || p3.Blocked() {
			t.Fatalf("%s: export round trip not empty:\n%s", f, strings.Join(p3.TextLines(true), "\n"))
		}
		t.Log("\n" + strings.Join(p.TextLines(false), "\n"))
	}
}
