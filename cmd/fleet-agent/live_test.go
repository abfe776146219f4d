package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const liveToken = "cli-canary-5e1d2c3b4a"

// liveSetup writes a secrets directory, a config whose providers block is
// fakeBlock (indented under `fake:`), and returns the config's path.
func liveSetup(t *testing.T, fakeBlock string) (dir, cfg string) {
	t.Helper()
	dir = t.TempDir()
	secretsDir := filepath.Join(dir, "secrets")
	if err := os.Mkdir(secretsDir, 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, secretsDir, "fake-token", liveToken)
	writeFile(t, secretsDir, "wrong-token", "not-it")
	text := "secrets:\n  dir: " + secretsDir + "\nproviders:\n  fake:\n" + fakeBlock
	cfg = writeFile(t, dir, "config.yaml", text)
	return dir, cfg
}

const fakeOK = "    token: secret://fake-token\n    adoptable: [{ name: theirs, location: fake-east }]\n"

func liveDoc(t *testing.T, dir, token string) string {
	t.Helper()
	return writeFile(t, dir, "fleet.json", `{"version": 1,
  "sites": [{"name": "k8s", "kind": "shared", "region": "us-east-1"}],
  "providerAccounts": [
    {"name": "demo", "provider": "fake", "config": {"token": "`+token+`"}},
    {"name": "eks", "provider": "aws", "config": {"region": "us-east-1"}}
  ],
  "pools": [
    {"name": "on-fake", "site": "k8s", "class": "metal-host", "gpuModel": "H100", "policy": {"substrate": {
      "kind": "kubernetes", "account": "demo", "cluster": {"adopt": "fake-east/theirs"},
      "flavors": [{"name": "h100", "machineType": "fake-h100x8", "nodes": 1, "gpus": {"type": "nvidia-h100", "count": 8}}]}}},
    {"name": "on-aws", "site": "k8s", "class": "metal-host", "gpuModel": "H100", "policy": {"substrate": {
      "kind": "kubernetes", "account": "eks", "cluster": {"create": {"location": "us-east-1"}},
      "flavors": [{"name": "h100", "machineType": "p5.48xlarge", "nodes": 1, "gpus": {"type": "nvidia-h100", "count": 8}}]}}}
  ]}`)
}

// noteOf returns the note lines under the change line that starts with
// prefix.
func noteOf(out, prefix string) string {
	lines := strings.Split(out, "\n")
	var notes []string
	for i, l := range lines {
		if strings.HasPrefix(l, prefix) {
			for _, n := range lines[i+1:] {
				if !strings.HasPrefix(n, "  note: ") {
					break
				}
				notes = append(notes, n)
			}
		}
	}
	return strings.Join(notes, "\n")
}

func TestPlanLiveChecks(t *testing.T) {
	cases := []struct {
		name       string
		block      string
		token      string
		args       []string
		code       int
		stderr     []string
		notChecked []string // change line prefixes noted "not checked live"
		checked    []string
	}{
		{name: "checked", block: fakeOK, token: "secret://fake-token", code: 0,
			notChecked: []string{"+ providerAccount eks", "+ pool on-aws"}, checked: []string{"+ providerAccount demo", "+ pool on-fake"}},
		{name: "credentials refused", block: fakeOK, token: "secret://wrong-token", code: 1,
			stderr: []string{"PLAN_BLOCKED", `providerAccount demo: credentials refused`, `pool on-fake: provider account "demo": credentials refused`}},
		{name: "unreachable", block: fakeOK + "    faults: [{ method: Verify, class: unavailable, count: 5 }]\n", token: "secret://fake-token", code: 1,
			stderr: []string{"UNAVAILABLE", `provider account "demo" (fake): Verify: injected unavailable`}},
		{name: "offline", block: fakeOK + "    faults: [{ method: Verify, class: unavailable, count: 5 }]\n", token: "secret://wrong-token", args: []string{"--offline"}, code: 0,
			notChecked: []string{"+ providerAccount eks", "+ pool on-aws", "+ providerAccount demo", "+ pool on-fake"}},
		{name: "machine type missing", block: fakeOK + "    machineTypes: [{ name: fake-cpu-4 }]\n", token: "secret://fake-token", code: 1,
			stderr: []string{"PLAN_BLOCKED", `flavor "h100": machine type fake-h100x8 does not exist in fake-east at account demo`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir, cfg := liveSetup(t, c.block)
			args := append([]string{"plan", liveDoc(t, dir, c.token), "--config", cfg, "--state", filepath.Join(dir, "fleet.db")}, c.args...)
			out, errs, code := cli(t, map[string]string{}, args...)
			if code != c.code {
				t.Fatalf("code %d, want %d\n%s\n%s", code, c.code, out, errs)
			}
			for _, s := range c.stderr {
				if !strings.Contains(errs, s) {
					t.Errorf("stderr lacks %q:\n%s", s, errs)
				}
			}
			for _, p := range c.notChecked {
				if !strings.Contains(noteOf(out, p), "note: not checked live") {
					t.Errorf("%q is not noted %q:\n%s", p, "not checked live", out)
				}
			}
			for _, p := range c.checked {
				if !strings.Contains(out, p) || strings.Contains(noteOf(out, p), "not checked live") {
					t.Errorf("%q was not checked live:\n%s", p, out)
				}
			}
			if strings.Contains(out+errs, liveToken) {
				t.Fatal("the token shows")
			}
		})
	}
}

// Without a providers block (only --state), everything is checked offline:
// the fake is opened only when the config names it.
func TestPlanWithoutProvidersIsOffline(t *testing.T) {
	dir := t.TempDir()
	out, errs, code := cli(t, map[string]string{}, "plan", liveDoc(t, dir, "secret://fake-token"), "--state", filepath.Join(dir, "fleet.db"))
	if code != 0 || !strings.Contains(noteOf(out, "+ pool on-fake"), "not checked live") {
		t.Fatalf("%d\n%s\n%s", code, out, errs)
	}
}

func TestBadProvidersBlock(t *testing.T) {
	cases := []struct {
		name, block, want string
	}{
		{"unknown key", "    colour: blue\n", `config.yaml: providers.fake: line 5: unknown key "colour"`},
		{"unknown key, deeper", "    steps: { cluster: 1, colour: 2 }\n", "line 5"},
		{"adapter's own check", "    locations: []\n", "config.yaml:4: providers.fake: fake: locations: at least one is needed"},
		{"bad fault", "    faults: [{ method: Frobnicate, class: unavailable }]\n", "config.yaml:4: providers.fake"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir, cfg := liveSetup(t, c.block)
			for _, cmd := range []string{"plan", "apply"} {
				_, errs, code := cli(t, map[string]string{}, cmd, liveDoc(t, dir, "secret://fake-token"), "--config", cfg, "--state", filepath.Join(dir, "fleet.db"))
				if code != 1 || !strings.Contains(errs, "INVALID_INPUT") || !strings.Contains(errs, c.want) {
					t.Errorf("%s: %d %s (want %q)", cmd, code, errs, c.want)
				}
			}
			// --offline opens nothing, so the block is not read.
			if _, errs, code := cli(t, map[string]string{}, "plan", liveDoc(t, dir, "secret://fake-token"), "--config", cfg, "--state", filepath.Join(dir, "fleet.db"), "--offline"); code != 0 {
				t.Errorf("--offline: %d %s", code, errs)
			}
		})
	}
}

func TestApplyLiveChecks(t *testing.T) {
	dir, cfg := liveSetup(t, fakeOK)
	state := filepath.Join(dir, "fleet.db")
	doc := liveDoc(t, dir, "secret://fake-token")
	out, errs, code := cli(t, map[string]string{}, "apply", doc, "--config", cfg, "--state", state, "--yes")
	if code != 0 || !strings.Contains(out, "Applied 5 call(s)") {
		t.Fatalf("apply: %d\n%s\n%s", code, out, errs)
	}
	data, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), liveToken) || !strings.Contains(string(data), "secret://fake-token") {
		t.Fatal("the state file holds the token, or not the reference")
	}
	// A document whose account presents the wrong token: the account's
	// update and the pool are blocked, nothing is written.
	bad := liveDoc(t, dir, "secret://wrong-token")
	if _, errs, code := cli(t, map[string]string{}, "apply", bad, "--config", cfg, "--state", state, "--yes"); code != 1 || !strings.Contains(errs, "PLAN_BLOCKED") || !strings.Contains(errs, "credentials refused") {
		t.Fatalf("refused credentials: %d %s", code, errs)
	}
}

// apply passes the checks to the preflight of its calls: the provider's
// first Verify (the plan) passes, the second (before the write) fails.
func TestApplyPreflight(t *testing.T) {
	cases := []struct{ class, code string }{
		{"terminal", "INVALID_STATE"},
		{"unavailable", "UNAVAILABLE"},
	}
	for _, c := range cases {
		t.Run(c.class, func(t *testing.T) {
			dir, cfg := liveSetup(t, fakeOK+"    faults: [{ method: Verify, latency: 1ns }, { method: Verify, class: "+c.class+" }]\n")
			state := filepath.Join(dir, "fleet.db")
			out, errs, code := cli(t, map[string]string{}, "apply", liveDoc(t, dir, "secret://fake-token"), "--config", cfg, "--state", state, "--yes")
			if code != 1 || !strings.Contains(errs, "fleet-agent: "+c.code+": call 1 of 5 (providerAccounts.create") || !strings.Contains(errs, "injected "+c.class) {
				t.Fatalf("%d\n%s\n%s", code, out, errs)
			}
			if out, _, _ := cli(t, map[string]string{}, "status", "-o", "json", "--state", state); strings.Contains(out, "applied") {
				t.Fatalf("something was applied: %s", out)
			}
		})
	}
}
