package plan

import (
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/canon"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
)

// The planHash of the reference's example planned against an empty fleet.
// It changes only when hashing, ids or call params change: every plan
// reviewed before such a change then no longer matches its apply, so a
// change here must be deliberate (and said in the release notes).
const fleetConfigPlanHash = "4da1d9490c8475798f33da5c66a41cd788346f35265b7fcb1b281d10b76674ba"

func TestPlanHashGolden(t *testing.T) {
	p := Make(mustDoc(t, "../../testdata/documents/valid/fleet-config.json"), nil, Options{})
	if p.PlanHash != fleetConfigPlanHash {
		t.Errorf("planHash %s, want %s", p.PlanHash, fleetConfigPlanHash)
	}
	// Independently: SHA-256 over [{"method":M,"params":P},...] in
	// canonical JSON (keys sorted: method before params).
	var b strings.Builder
	b.WriteByte('[')
	for i, c := range p.Calls {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"method":` + strconv.Quote(c.Method) + `,"params":` + string(canon.MustMarshal(c.Params)) + `}`)
	}
	b.WriteByte(']')
	sum := sha256.Sum256([]byte(b.String()))
	if got := hex.EncodeToString(sum[:]); got != p.PlanHash {
		t.Errorf("planHash %s, recomputed %s", p.PlanHash, got)
	}
	empty := Make(docOf(t, parseJSON(t, `{"version":1}`)), nil, Options{})
	if want := sha256.Sum256([]byte("[]")); empty.PlanHash != hex.EncodeToString(want[:]) {
		t.Errorf("empty plan hash %s", empty.PlanHash)
	}
}

// shuffleDoc permutes every list of a document whose order does not make
// calls: sites, accounts, pools, offers, flavors, templates (not volumes,
// not substrate flavors: their order is data).
func shuffleDoc(r *rand.Rand, d jdoc) {
	shuffle := func(v any) {
		l, _ := v.([]any)
		r.Shuffle(len(l), func(i, j int) { l[i], l[j] = l[j], l[i] })
	}
	for _, k := range []string{"sites", "providerAccounts", "pools", "flavors", "sandboxTemplates"} {
		shuffle(d[k])
	}
	pools, _ := d["pools"].([]any)
	for _, p := range pools {
		shuffle(p.(map[string]any)["offers"])
	}
}

func TestPlanHashStable(t *testing.T) {
	for _, tc := range []struct {
		name, state, doc string
		opts             Options
	}{
		{"everything from nothing", "", string(mustRead(t, "../../testdata/documents/valid/everything.json")), Options{}},
		{"every group", orderState, orderDoc, Options{Prune: true}},
		{"base, blocked", baseDoc, strings.Replace(baseDoc, `"kind":"shared"`, `"kind":"custom"`, 1), Options{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var objs []inventory.Object
			if tc.state != "" {
				objs = applied(t, docOf(t, parseJSON(t, tc.state)), Options{})
			}
			first := Make(docOf(t, parseJSON(t, tc.doc)), inventory.NewSnapshot(objs), tc.opts)
			firstText := text(first, true)
			r := rand.New(rand.NewPCG(1, 2))
			for i := range 30 {
				d := parseJSON(t, tc.doc)
				shuffleDoc(r, d)
				o := cloneObjects(objs)
				r.Shuffle(len(o), func(i, j int) { o[i], o[j] = o[j], o[i] })
				p := Make(docOf(t, d), inventory.NewSnapshot(o), tc.opts)
				if p.PlanHash != first.PlanHash || text(p, true) != firstText {
					t.Fatalf("permutation %d: plan differs:\n%s\nfirst:\n%s", i, text(p, true), firstText)
				}
				if p.DriftHash() != first.DriftHash() {
					t.Fatalf("permutation %d: drift hash differs", i)
				}
			}
		})
	}
}

// Every difference in the call list changes the hash: a param value, a
// param added or removed, the method, the order, a call more or less.
func TestPlanHashSeesEveryCall(t *testing.T) {
	objs := applied(t, docOf(t, parseJSON(t, orderState)), Options{})
	p := Make(docOf(t, parseJSON(t, orderDoc)), inventory.NewSnapshot(objs), Options{Prune: true})
	seen := map[string]bool{p.PlanHash: true}
	distinct := func(what string, calls []Call) {
		t.Helper()
		h := hashCalls(calls)
		if seen[h] {
			t.Errorf("%s: hash %s seen before", what, h)
		}
		seen[h] = true
	}
	copyCalls := func() []Call {
		out := make([]Call, len(p.Calls))
		for i, c := range p.Calls {
			c.Params = inventory.CloneValue(c.Params).(map[string]any)
			out[i] = c
		}
		return out
	}
	for i := range p.Calls {
		for k := range p.Calls[i].Params {
			calls := copyCalls()
			calls[i].Params[k] = "changed"
			distinct("call "+strconv.Itoa(i)+" param "+k, calls)
			calls = copyCalls()
			delete(calls[i].Params, k)
			distinct("call "+strconv.Itoa(i)+" without "+k, calls)
		}
		calls := copyCalls()
		calls[i].Params["extra"] = nil
		distinct("call "+strconv.Itoa(i)+" with extra null", calls)
		calls = copyCalls()
		calls[i].Method += "x"
		distinct("call "+strconv.Itoa(i)+" method", calls)
		calls = copyCalls()
		distinct("without call "+strconv.Itoa(i), append(calls[:i], calls[i+1:]...))
		if i > 0 {
			calls = copyCalls()
			calls[i], calls[i-1] = calls[i-1], calls[i]
			distinct("swap "+strconv.Itoa(i), calls)
		}
	}
	distinct("a call more", append(copyCalls(), p.Calls[0]))
	// An integer and the same number as a float hash the same (canonical
	// numbers); 1 and "1" do not.
	a := []Call{{Method: "m", Params: map[string]any{"n": int64(1)}}}
	b := []Call{{Method: "m", Params: map[string]any{"n": 1.0}}}
	c := []Call{{Method: "m", Params: map[string]any{"n": "1"}}}
	if hashCalls(a) != hashCalls(b) || hashCalls(a) == hashCalls(c) {
		t.Errorf("numbers hash by value: %s %s %s", hashCalls(a), hashCalls(b), hashCalls(c))
	}
}

// Drifts differ when their calls or their blocked reasons differ.
func TestDriftHash(t *testing.T) {
	objs := applied(t, docOf(t, parseJSON(t, baseDoc)), Options{})
	plan := func(edit func(d jdoc)) *Plan {
		d := parseJSON(t, baseDoc)
		edit(d)
		return Make(docOf(t, d), inventory.NewSnapshot(objs), Options{})
	}
	kind := plan(func(d jdoc) { set(t, d, "sites/0/kind", "custom") })
	region := plan(func(d jdoc) { set(t, d, "sites/0/region", "eu-west") })
	if kind.PlanHash != region.PlanHash {
		t.Errorf("two blocked plans without calls: planHash should be the same")
	}
	if kind.DriftHash() == region.DriftHash() {
		t.Errorf("different blocked reasons, same drift hash")
	}
	again := plan(func(d jdoc) { set(t, d, "sites/0/kind", "custom") })
	if again.DriftHash() != kind.DriftHash() {
		t.Errorf("drift hash not stable")
	}
	gpu := plan(func(d jdoc) { set(t, d, pVps+"/gpuModel", "X") })
	if gpu.DriftHash() == kind.DriftHash() || gpu.PlanHash == kind.PlanHash {
		t.Errorf("a call changes both hashes")
	}
}

// A drift is what the fleet holds, not the calls that would undo it: two
// hand edits of the same field to different values are two drifts, though
// both plans set the document's value back.
func TestDriftHashFollowsTheFleetsValues(t *testing.T) {
	doc := docOf(t, parseJSON(t, baseDoc))
	base := applied(t, doc, Options{})
	drift := func(vcpu int64) *Plan {
		objs := cloneObjects(base)
		find(t, objs, inventory.Flavor, "vps/small").Spec["vcpu"] = vcpu
		return Make(doc, inventory.NewSnapshot(objs), Options{})
	}
	a, b, again := drift(24), drift(12), drift(24)
	if a.PlanHash != b.PlanHash {
		t.Fatalf("both plans set vcpu back: planHash should be the same")
	}
	if a.DriftHash() == b.DriftHash() {
		t.Errorf("vcpu 24 and vcpu 12 are the same drift")
	}
	if a.DriftHash() != again.DriftHash() {
		t.Errorf("drift hash not stable")
	}
}
