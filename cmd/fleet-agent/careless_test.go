package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The command line as a careless or hostile user meets it (issue 10):
// each case was a trap once.

// An empty (0-byte) state file is a fleet that never recorded anything,
// for every command alike: no "bad file descriptor".
func TestEmptyStateFileIsNoStateYet(t *testing.T) {
	dir := t.TempDir()
	state := writeFile(t, dir, "fleet.db", "")
	doc := valid + "fleet-config.json"
	env := map[string]string{}
	for _, args := range [][]string{{"status"}, {"export"}, {"audit"}, {"backup", "--out", filepath.Join(dir, "b.db")}} {
		_, errs, code := cli(t, env, append(args, "--state", state)...)
		if code != 1 || !strings.Contains(errs, "INVALID_STATE: no fleet is recorded at "+state+" (no state file, or an empty one)") {
			t.Errorf("%v on an empty state file: %d %s", args, code, errs)
		}
	}
	out, errs, code := cli(t, env, "plan", doc, "--state", state)
	if code != 0 || !strings.Contains(out, "8 to create") || !strings.Contains(errs, "planned against an empty fleet") {
		t.Fatalf("plan on an empty state file: %d\n%s\n%s", code, out, errs)
	}
	if _, errs, code := cli(t, env, "apply", doc, "--state", state, "--yes"); code != 0 {
		t.Fatalf("apply initialises an empty state file: %s", errs)
	}
	if out, errs, code := cli(t, env, "status", "--state", state); code != 0 || !strings.Contains(out, "applied: plan") {
		t.Fatalf("status after the apply: %d %s %s", code, out, errs)
	}
}

// A mistyped --state: reads refuse (never an empty fleet that looks
// real), export writes nothing, and a refused apply leaves no file.
func TestMistypedStatePath(t *testing.T) {
	dir := t.TempDir()
	typo := filepath.Join(dir, "flet.db")
	env := map[string]string{}
	out := filepath.Join(dir, "export.json")
	if _, errs, code := cli(t, env, "export", "--state", typo, "--out", out); code != 1 || !strings.Contains(errs, "no fleet is recorded") {
		t.Fatalf("export of a typo: %d %s", code, errs)
	}
	if _, err := os.Stat(out); err == nil {
		t.Fatal("export wrote a document of a fleet that does not exist")
	}
	if _, errs, code := cli(t, env, "apply", valid+"fleet-config.json", "--state", typo, "--plan-hash", strings.Repeat("0", 64)); code != 1 || !strings.Contains(errs, "CONFIG_DRIFT") {
		t.Fatalf("stale apply: %d %s", code, errs)
	}
	if _, err := os.Stat(typo); err == nil {
		t.Fatal("a refused apply left a state file behind")
	}
	if _, err := os.Stat(filepath.Join(dir, "fleet.db")); err == nil {
		t.Fatal("a refused apply created ./fleet.db")
	}
}

// apply without --yes prints the command that applies exactly that plan,
// with the flags that decide the plan: pasted as printed, it works.
func TestApplyPrintsACommandThatWorks(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "my state.db")
	doc := valid + "fleet-config.json"
	env := map[string]string{}
	out, _, code := cli(t, env, "apply", doc, "--state", state, "--prune")
	if code != 0 {
		t.Fatalf("%d %s", code, out)
	}
	line := ""
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, " apply ") && strings.Contains(l, "--plan-hash") {
			line = strings.TrimSpace(l)
		}
	}
	args := splitShell(t, line)
	if len(args) < 2 || args[0] != "fleet-agent" {
		t.Fatalf("printed %q", line)
	}
	if !strings.Contains(line, "--state '"+state+"'") || !strings.Contains(line, "--prune=true") {
		t.Fatalf("the printed command drops a flag: %q", line)
	}
	if out, errs, code := cli(t, env, args[1:]...); code != 0 || !strings.Contains(out, "Applied 8 call(s)") {
		t.Fatalf("the pasted command: %d\n%s\n%s", code, out, errs)
	}
}

// splitShell splits what quote wrote: words, single quotes, '\” escapes.
func splitShell(t *testing.T, s string) []string {
	t.Helper()
	var out []string
	var cur strings.Builder
	in, any := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case in && c == '\'':
			in = false
		case in:
			cur.WriteByte(c)
		case c == '\'':
			in, any = true, true
		case c == '\\' && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
		case c == ' ':
			if cur.Len() > 0 || any {
				out = append(out, cur.String())
			}
			cur.Reset()
			any = false
		default:
			cur.WriteByte(c)
		}
	}
	if in {
		t.Fatalf("unterminated quote in %q", s)
	}
	if cur.Len() > 0 || any {
		out = append(out, cur.String())
	}
	return out
}

// With no agent running, status checks drift itself: a break-glass edit
// shows at once, and --fail-on-drift exits FLEET_DRIFTED; JSON lists are
// lists.
func TestStatusChecksDriftWithoutAnAgent(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "fleet.db")
	env := map[string]string{}
	if _, errs, code := cli(t, env, "apply", valid+"fleet-config.json", "--state", state, "--yes"); code != 0 {
		t.Fatal(errs)
	}
	out, _, code := cli(t, env, "status", "-o", "json", "--state", state)
	var st struct {
		Drift struct {
			Changes []json.RawMessage `json:"changes"`
			Now     bool              `json:"checkedNow"`
		} `json:"drift"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || st.Drift.Changes == nil || len(st.Drift.Changes) != 0 || !st.Drift.Now {
		t.Fatalf("status right after the apply: %d\n%s", code, out)
	}
	for _, list := range []string{`"changes": []`, `"proposals": []`, `"substrates": []`} {
		if !strings.Contains(out, list) {
			t.Fatalf("an empty list must print as [] (%s):\n%s", list, out)
		}
	}
	if _, errs, code := cli(t, env, "edit", "pool", "vps-fra", `gpuModel="L4"`, "--state", state); code != 0 {
		t.Fatal(errs)
	}
	out, _, code = cli(t, env, "status", "--state", state)
	if code != 0 || !strings.Contains(out, "drift: 1 change(s) (checked now)") || !strings.Contains(out, "~ pool vps-fra (gpuModel)") {
		t.Fatalf("status after a break-glass edit: %d\n%s", code, out)
	}
	if _, errs, code := cli(t, env, "status", "--fail-on-drift", "--state", state); code != 1 || !strings.Contains(errs, "FLEET_DRIFTED") {
		t.Fatalf("--fail-on-drift after an edit: %d %s", code, errs)
	}
}

// validate of a valid file says so, in one line.
func TestValidateSaysValid(t *testing.T) {
	out, _, code := cli(t, nil, "validate", valid+"fleet-config.json")
	if code != 0 || strings.TrimSpace(out) != valid+"fleet-config.json: valid" {
		t.Fatalf("%d %q", code, out)
	}
}
