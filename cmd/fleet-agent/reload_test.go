package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

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
