package livecheck_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/apply"
	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/secrets"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/state/statetest"
)

func applyDoc(t *testing.T) *fleet.Document {
	return document(t, demo(), pool("gpu", "demo", adopt("fake-east/theirs"), h100()))
}

// nothingWritten fails unless the store holds no object and no applied
// record.
func nothingWritten(t *testing.T, store *state.Store) {
	t.Helper()
	err := store.View(func(tx *state.Tx) error {
		snap, err := tx.Snapshot()
		if err != nil {
			return err
		}
		for _, k := range inventory.Kinds {
			if n := len(snap.Objects(k)); n > 0 {
				t.Errorf("%d %s written", n, k)
			}
		}
		ap, err := tx.Applied()
		if ap != nil {
			t.Errorf("applied recorded: %+v", ap)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestFaultClassesInApply(t *testing.T) {
	classes := []struct {
		class providers.Class
		// inPlan is the refusal when Verify fails while apply plans;
		// beforeWrite when it fails in the preflight of the calls.
		inPlan, beforeWrite refusal.Code
	}{
		{providers.Invalid, refusal.PlanBlocked, refusal.InvalidState},
		{providers.NotFound, refusal.PlanBlocked, refusal.InvalidState},
		{providers.Terminal, refusal.PlanBlocked, refusal.InvalidState},
		{providers.Conflict, refusal.Unavailable, refusal.Unavailable},
		{providers.Throttled, refusal.Unavailable, refusal.Unavailable},
		{providers.Unavailable, refusal.Unavailable, refusal.Unavailable},
		{providers.Unknown, refusal.Unavailable, refusal.Unavailable},
	}
	for _, cl := range classes {
		t.Run(string(cl.class)+"/in the plan", func(t *testing.T) {
			w := newWorld(t, nil)
			store := statetest.Open(t)
			if err := w.fake.FailNext("Verify", 1, cl.class, providers.None); err != nil {
				t.Fatal(err)
			}
			c := w.checker()
			_, err := apply.Apply(t.Context(), store, applyDoc(t), apply.Options{Live: c})
			if got := refusal.CodeOf(err); got != cl.inPlan {
				t.Fatalf("got %s (%v), want %s", got, err, cl.inPlan)
			}
			nothingWritten(t, store)
		})
		t.Run(string(cl.class)+"/before the write", func(t *testing.T) {
			w := newWorld(t, nil)
			store := statetest.Open(t)
			c := w.checker()
			doc := applyDoc(t)
			// The plan a person reviewed, then the provider changes its
			// mind before the apply writes.
			if p, err := planWith(t, doc, nil, c); err != nil || p.Blocked() {
				t.Fatalf("plan: %v", err)
			}
			if err := w.fake.FailNext("Verify", 1, cl.class, providers.None); err != nil {
				t.Fatal(err)
			}
			_, err := apply.Apply(t.Context(), store, doc, apply.Options{Live: c})
			if got := refusal.CodeOf(err); got != cl.beforeWrite {
				t.Fatalf("got %s (%v), want %s", got, err, cl.beforeWrite)
			}
			if !strings.Contains(err.Error(), `call 1 of 3 (providerAccounts.create`) || !strings.Contains(err.Error(), `provider account "demo" (fake)`) {
				t.Errorf("the refusal does not name the call and the account: %v", err)
			}
			nothingWritten(t, store)
		})
	}
}

func TestApplyVerifiesAgainOnce(t *testing.T) {
	w := newWorld(t, nil)
	store := statetest.Open(t)
	c := w.checker()
	res, err := apply.Apply(t.Context(), store, applyDoc(t), apply.Options{Live: c})
	if err != nil {
		t.Fatal(err)
	}
	if res.Applied != 3 || !res.Recorded {
		t.Fatalf("applied %d, recorded %v", res.Applied, res.Recorded)
	}
	// Once while planning, once before the write (for the account's and the
	// pool's calls together).
	if n := w.fake.Calls("Verify"); n != 2 {
		t.Fatalf("Verify called %d times", n)
	}
}

func TestPreflightSecretGone(t *testing.T) {
	w := newWorld(t, nil)
	w.secret(t, "acct-token", canary)
	store := statetest.Open(t)
	c := w.checker()
	doc := document(t, []obj{fakeAccount("demo", "secret://acct-token")}, pool("gpu", "demo", create("fake-east"), h100()))
	if p, err := planWith(t, doc, nil, c); err != nil || p.Blocked() {
		t.Fatalf("plan: %v", err)
	}
	if err := os.Remove(filepath.Join(w.dir, "acct-token")); err != nil {
		t.Fatal(err)
	}
	_, err := apply.Apply(t.Context(), store, doc, apply.Options{Live: c})
	if refusal.CodeOf(err) != refusal.InvalidState || !strings.Contains(err.Error(), `provider account "demo": a secret reference does not resolve: secret://acct-token`) {
		t.Fatalf("got %v", err)
	}
	if n := w.fake.Calls("Verify"); n != 1 {
		t.Errorf("Verify called %d times: the missing secret should stop the preflight first", n)
	}
	nothingWritten(t, store)
}

func TestCheckCallScope(t *testing.T) {
	w := newWorld(t, nil)
	w.secret(t, "acct-token", canary)
	c := w.checker()
	doc := document(t, []obj{fakeAccount("demo", "secret://acct-token"), {"name": "eks", "provider": "aws", "config": obj{}}},
		pool("gpu", "demo", create("fake-east"), h100()),
		obj{"name": "plain", "site": "k8s", "class": "vps-host"},
		pool("on-aws", "eks", create("us-east-1"), flavor("x", "m7i.large", nil)))
	p, err := planWith(t, doc, nil, c)
	if err != nil || p.Blocked() {
		t.Fatalf("plan: %v", err)
	}
	before := w.fake.Calls("Verify")
	// Break the credentials: every call that reaches the fake's account now
	// fails, the others pass.
	w.secret(t, "acct-token", "rotated")
	checked := map[string]bool{}
	for _, call := range p.Calls {
		if err := c.CheckCall(t.Context(), call); err != nil {
			checked[call.Method+" "+call.Name()] = true
			if refusal.CodeOf(err) != refusal.InvalidState || !strings.Contains(err.Error(), "credentials refused") {
				t.Errorf("%s: %v", call.Method, err)
			}
		}
	}
	want := map[string]bool{"providerAccounts.create demo": true, "pools.create gpu": true}
	if len(checked) != len(want) || !checked["providerAccounts.create demo"] || !checked["pools.create gpu"] {
		t.Errorf("refused calls %v, want %v", checked, want)
	}
	if n := w.fake.Calls("Verify") - before; n != 1 {
		t.Errorf("Verify called %d times in the preflight, want once per account", n)
	}
	// A call about an account the checks never saw cannot be judged.
	fresh := w.checker()
	for _, call := range p.Calls {
		if call.Method == "pools.create" && call.Name() == "gpu" {
			if err := fresh.CheckCall(t.Context(), call); refusal.CodeOf(err) != refusal.InvalidState || !strings.Contains(err.Error(), "plan again") {
				t.Errorf("unseen account: %v", err)
			}
		}
	}
}

// The fake's token (the canary) is resolved by the checks but shows in no
// plan rendering, error, log line or state file.
func TestCanaryNeverShows(t *testing.T) {
	w := newWorld(t, nil)
	w.secret(t, "acct-token", canary)
	path := filepath.Join(t.TempDir(), "fleet.db")
	store := statetest.OpenAt(t, path)
	var out bytes.Buffer
	seen := func(s string) { out.WriteString(s + "\n") }
	render := func(p *plan.Plan) {
		if err := p.WriteText(&out, true); err != nil {
			t.Fatal(err)
		}
		if err := p.WriteJSON(&out); err != nil {
			t.Fatal(err)
		}
		seen(p.Markdown(plan.MarkdownOptions{}))
	}
	good := document(t, []obj{fakeAccount("demo", "secret://acct-token")}, pool("gpu", "demo", adopt("fake-east/theirs"), h100()))
	bad := document(t, []obj{fakeAccount("demo", "secret://wrong-token")}, pool("gpu", "demo", create("fake-east"), h100()))

	// A plan that passes and one whose credentials are refused.
	for _, doc := range []*fleet.Document{good, bad} {
		p, err := planWith(t, doc, nil, w.checker())
		if err != nil {
			t.Fatal(err)
		}
		render(p)
	}
	// An unreachable provider.
	if err := w.fake.FailNext("Verify", 1, providers.Unavailable, providers.None); err != nil {
		t.Fatal(err)
	}
	if _, err := planWith(t, good, nil, w.checker()); err == nil {
		t.Fatal("no error")
	} else {
		seen(err.Error())
	}
	// A preflight refused after the plan: the account's token rotated.
	c := w.checker()
	if _, err := planWith(t, good, nil, c); err != nil {
		t.Fatal(err)
	}
	w.secret(t, "acct-token", "rotated-"+canary[:8])
	if _, err := apply.Apply(t.Context(), store, good, apply.Options{Live: c}); err == nil {
		t.Fatal("preflight passed")
	} else {
		seen(err.Error())
	}
	// And an apply that goes through.
	w.secret(t, "acct-token", canary)
	c = w.checker()
	res, err := apply.Apply(t.Context(), store, good, apply.Options{Live: c})
	if err != nil {
		t.Fatal(err)
	}
	render(res.Plan)
	seen(w.logs.String())
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out.Write(data)

	if w.resolver.Redactor().Redact(canary) != secrets.Mask {
		t.Fatal("the canary was never resolved: the test proves nothing")
	}
	if !bytes.Contains(data, []byte("secret://acct-token")) || !strings.Contains(w.logs.String(), "live check") {
		t.Fatal("the state or the logs are not what the test thinks")
	}
	if i := bytes.Index(out.Bytes(), []byte(canary)); i >= 0 {
		t.Fatalf("the canary shows: ...%s...", out.Bytes()[max(0, i-200):i])
	}
}
