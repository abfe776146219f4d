package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/fleet"
)

const valid = "../../testdata/documents/valid/"
const invalid = "../../testdata/documents/invalid/"

// cli runs one command line in-process with a hermetic environment.
func cli(t *testing.T, env map[string]string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	code = run(args, strings.NewReader(""), &out, &errb, lookup)
	return out.String(), errb.String(), code
}

func writeFile(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestValidateExitCodesAndOutput(t *testing.T) {
	cases := []struct {
		name   string
		args   []string
		code   int
		stdout string // substring
		stderr string // substring
	}{
		{"valid", []string{"validate", valid + "fleet-config.json", valid + "kubernetes-pool-gke.json"}, 0, "", ""},
		{"invalid", []string{"validate", invalid + "unknown-field.json"}, 1, "unknown-field.json:/pools/0/colour: unknown field", "fleet-agent: INVALID_INPUT: 1 of 1 file(s) invalid"},
		{"missing file", []string{"validate", "nope.json"}, 1, "nope.json: cannot read the file", "INVALID_INPUT"},
		{"no file", []string{"validate"}, 2, "", "fleet-agent: usage:"},
		{"unknown flag", []string{"validate", "--colour", valid + "fleet-config.json"}, 2, "", "unknown flag"},
		{"unknown command", []string{"frobnicate"}, 2, "", "unknown command"},
		{"bad output", []string{"validate", "-o", "yaml", valid + "fleet-config.json"}, 2, "", "-o must be text or json"},
		{"schema", []string{"schema"}, 0, `"$schema": "https://json-schema.org/draft/2020-12/schema"`, ""},
		{"version", []string{"version"}, 0, "fleet-agent dev (commit none", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, errs, code := cli(t, nil, c.args...)
			if code != c.code || !strings.Contains(out, c.stdout) || !strings.Contains(errs, c.stderr) {
				t.Fatalf("code %d (want %d)\nstdout: %s\nstderr: %s", code, c.code, out, errs)
			}
		})
	}
}

func TestValidateJSONIsOneFlatList(t *testing.T) {
	out, _, code := cli(t, nil, "validate", "-o", "json", invalid+"unknown-field.json", valid+"fleet-config.json", invalid+"empty.json")
	if code != 1 {
		t.Fatalf("code %d", code)
	}
	var list []map[string]string
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(list) != 6 {
		t.Fatalf("%d errors: %s", len(list), out)
	}
	for _, e := range list {
		if e["code"] != "INVALID_INPUT" || e["file"] == "" || e["message"] == "" {
			t.Errorf("bad entry %v", e)
		}
		if _, ok := e["path"]; !ok {
			t.Errorf("no path in %v", e)
		}
	}
	out, _, code = cli(t, nil, "validate", "-o", "json", valid+"fleet-config.json")
	if code != 0 || strings.TrimSpace(out) != "[]" {
		t.Fatalf("valid: %d %q", code, out)
	}
}

func TestPlanApplyExportStatus(t *testing.T) {
	dir := t.TempDir()
	env := map[string]string{"FLEET_AGENT_CONFIG": filepath.Join(dir, "missing-is-explicit.yaml")}
	// An explicitly named config that does not exist is an error...
	if _, errs, code := cli(t, env, "status"); code != 1 || !strings.Contains(errs, "INVALID_INPUT") {
		t.Fatalf("missing explicit config: %d %s", code, errs)
	}
	// ...while no config at all works on the defaults.
	env = map[string]string{}
	state := filepath.Join(dir, "fleet.db")
	doc := valid + "fleet-config.json"

	// A state file that does not exist is no fleet: status says so rather
	// than show an empty one (a mistyped --state), and plan says it plans
	// against an empty fleet.
	_, errs, code := cli(t, env, "status", "-o", "json", "--state", state)
	if code != 1 || !strings.Contains(errs, "INVALID_STATE: no fleet is recorded at "+state) {
		t.Fatalf("status of a state file that does not exist: %d %q", code, errs)
	}
	// --state after the positional argument, plan exits 0.
	out, errs, code := cli(t, env, "plan", doc, "--state", state)
	if code != 0 || !strings.Contains(out, "8 to create, 0 to update, 0 to delete, 0 unchanged.") || !strings.Contains(errs, "planned against an empty fleet") {
		t.Fatalf("plan: %d\n%s\n%s", code, out, errs)
	}
	if _, err := os.Stat(state); err == nil {
		t.Fatal("plan created the state file")
	}
	_, errs, code = cli(t, env, "plan", doc, "--state", state, "--fail-on-drift")
	if code != 1 || !strings.Contains(errs, "FLEET_DRIFTED") {
		t.Fatalf("fail-on-drift: %d %s", code, errs)
	}
	// apply without --yes changes nothing and prints the hash.
	out, _, code = cli(t, env, "apply", doc, "--state", state)
	if code != 0 || !strings.Contains(out, "--plan-hash ") {
		t.Fatalf("apply dry: %d\n%s", code, out)
	}
	hash := out[strings.LastIndex(out, "--plan-hash ")+len("--plan-hash "):]
	hash = strings.TrimSpace(hash)
	// A wrong hash is CONFIG_DRIFT.
	_, errs, code = cli(t, env, "apply", doc, "--state", state, "--plan-hash", strings.Repeat("a", 64))
	if code != 1 || !strings.Contains(errs, "CONFIG_DRIFT") {
		t.Fatalf("stale hash: %d %s", code, errs)
	}
	out, _, code = cli(t, env, "apply", doc, "--state", state, "--plan-hash", hash)
	if code != 0 || !strings.Contains(out, "Applied 8 call(s)") {
		t.Fatalf("apply: %d\n%s", code, out)
	}
	// The same apply again is nothing to change, not drift; a stale hash
	// still is.
	out, errs, code = cli(t, env, "apply", doc, "--state", state, "--plan-hash", hash)
	if code != 0 || !strings.Contains(out, "Nothing to change: the plan "+hash+" was already applied") {
		t.Fatalf("apply again: %d\n%s\n%s", code, out, errs)
	}
	if _, errs, code = cli(t, env, "apply", doc, "--state", state, "--plan-hash", strings.Repeat("b", 64)); code != 1 || !strings.Contains(errs, "CONFIG_DRIFT") {
		t.Fatalf("stale hash after the apply: %d %s", code, errs)
	}
	out, _, code = cli(t, env, "status", "-o", "json", "--state", state)
	var st map[string]any
	if err := json.Unmarshal([]byte(out), &st); err != nil || code != 0 {
		t.Fatalf("status: %v %s", err, out)
	}
	if ap, _ := st["applied"].(map[string]any); ap["planHash"] != hash || !strings.Contains(ap["appliedBy"].(string), "@") {
		t.Fatalf("status applied: %v", st)
	}
	// export, then plan it with prune: nothing to do.
	exp := filepath.Join(dir, "export.json")
	if _, errs, code := cli(t, env, "export", "--state", state, "--out", exp); code != 0 {
		t.Fatalf("export: %s", errs)
	}
	out, _, code = cli(t, env, "plan", exp, "--prune", "--state", state, "--fail-on-drift")
	if code != 0 || !strings.Contains(out, "0 to create, 0 to update, 0 to delete, 8 unchanged.") {
		t.Fatalf("plan of the export: %d\n%s", code, out)
	}
	if _, errs, code := cli(t, env, "export", "--state", state, "--out", exp); code != 1 || !strings.Contains(errs, "never overwrites") {
		t.Fatalf("export overwrite: %d %s", code, errs)
	}
	// A blocked plan: plan and apply exit PLAN_BLOCKED and write nothing.
	blocked := writeFile(t, dir, "blocked.json", `{"version":1,"pools":[{"name":"x","site":"nowhere","class":"vps-host"}]}`)
	out, errs, code = cli(t, env, "plan", blocked, "--state", state)
	if code != 1 || !strings.Contains(errs, "PLAN_BLOCKED") || !strings.Contains(out, `! pool x: unknown site "nowhere"`) || !strings.Contains(out, "1 blocked.") {
		t.Fatalf("blocked plan: %d\n%s\n%s", code, out, errs)
	}
	if _, errs, code = cli(t, env, "apply", blocked, "--state", state, "--yes"); code != 1 || !strings.Contains(errs, "PLAN_BLOCKED") {
		t.Fatalf("blocked apply: %d %s", code, errs)
	}
	// An invalid document: the errors on stdout, INVALID_INPUT.
	out, errs, code = cli(t, env, "plan", invalid+"numbers.json", "--state", state)
	if code != 1 || !strings.Contains(errs, "INVALID_INPUT") || !strings.Contains(out, "/flavors/0/vcpu") {
		t.Fatalf("invalid plan: %d\n%s\n%s", code, out, errs)
	}
	// JSON and markdown renderings.
	out, _, code = cli(t, env, "plan", doc, "--state", state, "-o", "json")
	var pj map[string]any
	if err := json.Unmarshal([]byte(out), &pj); err != nil || code != 0 || pj["planHash"] == nil || pj["summary"] == nil {
		t.Fatalf("json plan: %v\n%s", err, out)
	}
	out, _, code = cli(t, env, "plan", doc, "--state", state, "-o", "markdown")
	if code != 0 || !strings.Contains(out, "planHash: `") {
		t.Fatalf("markdown plan: %d\n%s", code, out)
	}
	// apply --yes with nothing to change records nothing.
	out, _, code = cli(t, env, "apply", doc, "--state", state, "--yes")
	if code != 0 || !strings.Contains(out, "Nothing to change") {
		t.Fatalf("empty apply: %d\n%s", code, out)
	}
}

func TestStateEnvAndConfig(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "from-env.db")
	cfg := writeFile(t, dir, "config.yaml", "tenant: acme\nstate: "+filepath.Join(dir, "from-config.db")+"\n")
	env := map[string]string{"FLEET_AGENT_STATE": state}
	if _, errs, code := cli(t, env, "apply", valid+"fleet-config.json", "--yes"); code != 0 {
		t.Fatal(errs)
	}
	if _, err := os.Stat(state); err != nil {
		t.Fatal("FLEET_AGENT_STATE ignored")
	}
	// --config: its state and tenant are used (acme owns the pool now, so
	// offering it to acme is blocked).
	_, errs, code := cli(t, map[string]string{}, "plan", valid+"fleet-config.json", "--config", cfg)
	if code != 1 || !strings.Contains(errs, "PLAN_BLOCKED") || !strings.Contains(errs, "owner tenant") {
		t.Fatalf("config tenant: %d %s", code, errs)
	}
	bad := writeFile(t, dir, "bad.yaml", "tenant: root\ncolour: blue\n")
	if _, errs, code := cli(t, map[string]string{}, "status", "--config", bad); code != 1 || !strings.Contains(errs, "bad.yaml:2") {
		t.Fatalf("bad config: %d %s", code, errs)
	}
}

// TestPlanJSONOfAnInvalidDocumentIsJSON: a script reading plan -o json reads
// an invalid document's errors as JSON (validate -o json's list), with the
// exit status and the refusal as before.
func TestPlanJSONOfAnInvalidDocumentIsJSON(t *testing.T) {
	state := filepath.Join(t.TempDir(), "fleet.db")
	for _, args := range [][]string{
		{"plan", invalid + "unknown-field.json", "--offline", "-o", "json"},
		{"plan", invalid + "unknown-field.json", "--offline", "-o", "json", "--policy", "../../testdata/policy/policy.yaml"},
	} {
		out, errs, code := cli(t, nil, append(args, "--state", state)...)
		var list []fleet.Error
		err := json.Unmarshal([]byte(out), &list)
		colour := false
		for _, e := range list {
			colour = colour || e.Path == "/pools/0/colour" && e.Code == "INVALID_INPUT"
		}
		if err != nil || !colour {
			t.Errorf("%v: stdout %q is not the errors' JSON list (%v)", args, out, err)
		}
		if code != 1 || !strings.Contains(errs, "INVALID_INPUT") {
			t.Errorf("%v: exit %d, %s; want 1 with INVALID_INPUT", args, code, errs)
		}
	}
}

// TestUnknownSubcommandIsAUsageError: a mistyped subcommand of a group
// (policy, state) exits 2 naming the closest, as an unknown command does,
// so a CI step with a typo fails; the group alone prints its help.
func TestUnknownSubcommandIsAUsageError(t *testing.T) {
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"policy", "tset", "dir"}, `unknown command "tset" for "fleet-agent policy"; did you mean test?`},
		{[]string{"policy", "chek"}, "did you mean check?"},
		{[]string{"state", "bogus"}, `unknown command "bogus" for "fleet-agent state"`},
	} {
		_, errs, code := cli(t, nil, c.args...)
		if code != 2 || !strings.Contains(errs, c.says) {
			t.Errorf("%v: exit %d, %s; want 2 saying %q", c.args, code, errs, c.says)
		}
	}
	for _, g := range []string{"policy", "state"} {
		if out, _, code := cli(t, nil, g); code != 0 || !strings.Contains(out, "Available Commands") {
			t.Errorf("%s alone: exit %d, %s; want its help", g, code, out)
		}
	}
}

// TestAgentOnlyFlagsNameThemselves: with no agent answering, --commit and
// --proposal each say that they need it, by their own name.
func TestAgentOnlyFlagsNameThemselves(t *testing.T) {
	cfg := writeFile(t, t.TempDir(), "agent.yaml", "socket: "+filepath.Join(t.TempDir(), "none.sock")+"\n")
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"plan", "--proposal", "feat"}, "--proposal needs the running agent"},
		{[]string{"plan", "--commit", "abc123"}, "--commit needs the running agent"},
	} {
		_, errs, code := cli(t, nil, append(c.args, "--config", cfg)...)
		if code != 1 || !strings.Contains(errs, c.says) {
			t.Errorf("%v: exit %d, %s; want 1 saying %q", c.args, code, errs, c.says)
		}
	}
}
