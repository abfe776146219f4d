package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleet-agent/fleet-agent/internal/agent"
	"github.com/fleet-agent/fleet-agent/internal/config"
)

// A reload that changes events.webhooks says that the change waits for a
// restart, as for any key a reload does not apply, and keeps the running
// receivers; the log never quotes a URL, which may be a credential.
func TestReloadSaysWebhooksNeedARestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const base = "git:\n  url: https://example.com/acme/fleet.git\nevents:\n  webhooks:\n    - { url: https://hooks.example.com/T0K3N, secret: env://K }\n"
	write(base)
	env := func(string) (string, bool) { return "", false }
	running, err := config.Load(path, env)
	if err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	a := &app{lookupEnv: env}
	a.running.Store(running)
	a.reconfigure = func(*config.Config) {}
	write(strings.Replace(base, "env://K }", "env://K, format: slack }", 1))
	a.reload(path, zerolog.New(&logs), "test")
	out := logs.String()
	if !strings.Contains(out, "events.webhooks changed") || !strings.Contains(out, `"keys":["events.webhooks"]`) || !strings.Contains(out, "after a restart") {
		t.Fatalf("the reload does not say events.webhooks needs a restart:\n%s", out)
	}
	if strings.Contains(out, "T0K3N") {
		t.Fatalf("the log quotes the webhook's URL:\n%s", out)
	}
	if got := a.running.Load().Events.Webhooks; len(got) != 1 || got[0].Format == "slack" {
		t.Fatalf("the running webhooks changed on reload: %+v", got)
	}
}

// agentConfig is a running agent's config as a reload changes it.
type agentConfig struct{ cfg agent.Config }

func (f *agentConfig) Reconfigure(change func(*agent.Config)) { change(&f.cfg) }

// A reload of policy.path (or any key config.Reloadable names) reaches the
// running agent, is kept in the running config, and is never logged as
// waiting for a restart; the restart line names exactly the other keys and
// lists the reloadable ones as the table has them.
func TestReloadFollowsTheReloadableTable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const base = "git:\n  url: https://example.com/acme/fleet.git\n"
	write(base)
	env := func(string) (string, bool) { return "", false }
	running, err := config.Load(path, env)
	if err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	log := zerolog.New(&logs)
	ag := &agentConfig{}
	a := &app{lookupEnv: env}
	a.running.Store(running)
	a.reconfigure = reconfigureAgent(ag)
	write("tenant: acme\n" + base + "apply: { prune: true, requireReviewedPlan: false, maxTeardowns: 3 }\npolicy: { path: policy.yaml }\ndrift: { every: 5m, heal: true }\n")
	a.reload(path, log, "test")
	got := ag.cfg
	if got.PolicyPath != "policy.yaml" || !got.Prune || got.RequireReviewedPlan || got.MaxTeardowns == nil || *got.MaxTeardowns != 3 || got.DriftEvery != 5*time.Minute || !got.Heal {
		t.Fatalf("the agent after the reload: %+v\n%s", got, logs.String())
	}
	out := logs.String()
	if !strings.Contains(out, `"keys":["tenant"]`) {
		t.Fatalf("the restart line does not name tenant alone:\n%s", out)
	}
	if !strings.Contains(out, "a reload changes "+strings.Join(config.Reloadable, ", ")) {
		t.Fatalf("the restart line does not list the reloadable keys:\n%s", out)
	}
	if kept := a.running.Load(); kept.Policy.Path != "policy.yaml" || kept.Tenant == "acme" {
		t.Fatalf("running config: policy %q tenant %q", kept.Policy.Path, kept.Tenant)
	}
	// Taken, policy.path is no change the next time; tenant still is.
	logs.Reset()
	a.reload(path, log, "again")
	if out := logs.String(); strings.Contains(out, "config: policy.path") || !strings.Contains(out, `"keys":["tenant"]`) {
		t.Fatalf("the second reload:\n%s", out)
	}
}
