package livecheck_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/livecheck"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/providers/fake"
	"github.com/fleet-agent/fleet-agent/internal/secrets"
)

var (
	_ plan.Live   = (*livecheck.Checker)(nil)
	_ plan.Checks = (*livecheck.Checker)(nil)
)

// canary is the fake's token: it must never show anywhere.
const canary = "canary-0f1e2d3c4b5a69788796a5b4c3d2e1f0"

// world is a real fake adapter with a token, a resolver over a secrets
// directory, and a checker over them that logs into logs.
type world struct {
	dir      string
	resolver *secrets.Resolver
	fake     *fake.Fake
	logs     *bytes.Buffer
	opts     livecheck.Options
}

func newWorld(t *testing.T, mod func(*fake.Config)) *world {
	t.Helper()
	w := &world{dir: t.TempDir(), logs: &bytes.Buffer{}}
	w.secret(t, "fake-token", canary)
	w.secret(t, "wrong-token", "not-the-token")
	w.resolver = secrets.NewResolver(secrets.Options{Dir: w.dir, Env: func(string) (string, bool) { return "", false }})
	cfg := fake.DefaultConfig()
	cfg.Token = "secret://fake-token"
	cfg.Adoptable = []fake.SeedCluster{{Name: "theirs", Location: "fake-east"}}
	if mod != nil {
		mod(&cfg)
	}
	var err error
	if w.fake, err = fake.New(cfg, w.resolver); err != nil {
		t.Fatal(err)
	}
	// The logger's redactor is its own, empty one: what the checks log is
	// tested, not the redaction.
	log := secrets.NewLogger(w.logs, secrets.NewRedactor(), zerolog.DebugLevel)
	w.opts = livecheck.Options{Adapters: map[string]livecheck.Adapter{"fake": w.fake}, Secrets: w.resolver, Logger: &log, Timeout: 5 * time.Second}
	return w
}

func (w *world) secret(t *testing.T, name, value string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(w.dir, name), []byte(value), 0o600); err != nil {
		t.Fatal(err)
	}
}

func (w *world) checker() *livecheck.Checker { return livecheck.New(w.opts) }

type obj = map[string]any

func fakeAccount(name, tokenRef string) obj {
	cfg := obj{}
	if tokenRef != "" {
		cfg["token"] = tokenRef
	}
	return obj{"name": name, "provider": "fake", "config": cfg}
}

func create(loc string) obj { return obj{"create": obj{"location": loc}} }
func adopt(id string) obj   { return obj{"adopt": id} }

func flavor(name, machineType string, extra obj) obj {
	f := obj{"name": name, "machineType": machineType}
	for k, v := range extra {
		f[k] = v
	}
	return f
}

func gpus(typ string, n int) obj { return obj{"type": typ, "count": n} }

func pool(name, account string, cluster obj, flavors ...obj) obj {
	fl := make([]any, len(flavors))
	for i, f := range flavors {
		fl[i] = f
	}
	return obj{"name": name, "site": "k8s", "class": "metal-host", "gpuModel": "H100",
		"policy": obj{"substrate": obj{"kind": "kubernetes", "account": account, "cluster": cluster, "flavors": fl}}}
}

// h100 is a flavor that fits the fake's catalogue.
func h100() obj {
	return flavor("h100", "fake-h100x8", obj{"nodes": 1, "gpus": gpus("nvidia-h100", 8)})
}

func document(t *testing.T, accounts []obj, pools ...obj) *fleet.Document {
	t.Helper()
	d := obj{"version": 1, "sites": []any{obj{"name": "k8s", "kind": "shared", "region": "fake-east"}}}
	if len(accounts) > 0 {
		d["providerAccounts"] = accounts
	}
	if len(pools) > 0 {
		d["pools"] = pools
	}
	data, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	doc, errs := fleet.Validate("test.json", data)
	if errs != nil {
		t.Fatalf("test document invalid:\n%s\n%s", errs.Text(), data)
	}
	return doc
}

// planWith gathers the live facts with live and makes the plan.
func planWith(t *testing.T, doc *fleet.Document, snap *inventory.Snapshot, live plan.Live) (*plan.Plan, error) {
	t.Helper()
	facts, err := plan.Gather(t.Context(), doc, snap, live)
	if err != nil {
		return nil, err
	}
	return plan.Make(doc, snap, plan.Options{Facts: facts}), nil
}

func change(t *testing.T, p *plan.Plan, kind inventory.Kind, name string) plan.Change {
	t.Helper()
	for _, c := range p.Changes {
		if c.Kind == kind && c.Name == name {
			return c
		}
	}
	t.Fatalf("no change %s %s in\n%s", kind, name, text(t, p))
	return plan.Change{}
}

func text(t *testing.T, p *plan.Plan) string {
	t.Helper()
	var b strings.Builder
	if err := p.WriteText(&b, true); err != nil {
		t.Fatal(err)
	}
	return b.String()
}
