package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/textline"
)

// forged is what a pull request author puts wherever the command line
// shows their words, to forge a line in a CI log or a terminal: a line
// break that starts a line of their own, a cursor move and erase, colours,
// a C1 next line and control sequence, the line and paragraph separators,
// and text turned around.
const forged = "x\n\x1b[1A\x1b[2K\rall fleets valid\x1b[8m\u0085\u009b2K\u2028\u2029\u202eok"

// plainLines fails unless out is want lines (want < 0: any number), each
// one line of plain text.
func plainLines(t *testing.T, what, out string, want int) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if want >= 0 && len(lines) != want {
		t.Errorf("%s: %d lines, want %d: %q", what, len(lines), want, out)
	}
	for _, l := range lines {
		if !textline.IsPlain(l) {
			t.Errorf("%s: %q is not one line of plain text", what, l)
		}
	}
}

// TestWhatTheAuthorWroteIsShownAsText: the commands a CI runs on a pull
// request's files print each line as one line of plain text, whatever the
// files' names and contents hold, and keep the exit status.
func TestWhatTheAuthorWroteIsShownAsText(t *testing.T) {
	dir := t.TempDir()
	base, err := os.ReadFile(valid + "fleet-config.json")
	if err != nil {
		t.Fatal(err)
	}
	jsonText := strings.NewReplacer("\n", `\n`, "\r", `\r`, "\x1b", `\u001b`, "\u0085", `\u0085`, "\u009b", `\u009b`).Replace(forged)
	withImage := strings.Replace(string(base), `"imageId": "ubuntu-24.04"`, `"imageId": "`+jsonText+`"`, 1)
	if withImage == string(base) {
		t.Fatal("the image id to replace is not in the valid document")
	}

	t.Run("validate's file names", func(t *testing.T) {
		good := writeFile(t, dir, "good"+forged+".json", string(base))
		dangling := writeFile(t, dir, "dangling"+forged+".json", strings.Replace(string(base), `"site": "fra"`, `"site": "lba"`, 1))
		out, errs, code := cli(t, nil, "validate", good, dangling)
		if code != 0 {
			t.Fatalf("validate: exit %d: %s", code, errs)
		}
		plainLines(t, "validate's stdout", out, -1)
		bad := writeFile(t, dir, "bad"+forged+".json", `{"version":1,"sites":[],"`+jsonText+`":1}`)
		out, errs, code = cli(t, nil, "validate", bad)
		if code != 1 {
			t.Errorf("validate of an invalid file: exit %d", code)
		}
		plainLines(t, "validate's stdout", out, 1)
		plainLines(t, "validate's stderr", errs, 1)
		out, _, code = cli(t, nil, "validate", "-o", "json", bad)
		if code != 1 {
			t.Errorf("validate -o json of an invalid file: exit %d", code)
		}
		plainLines(t, "validate -o json", out, -1)
		_, errs, code = cli(t, nil, "plan", bad, "--offline", "--state", filepath.Join(dir, "plan.db"))
		if code != 1 {
			t.Errorf("plan of an invalid file: exit %d", code)
		}
		plainLines(t, "plan's stderr", errs, -1)
	})

	t.Run("usage errors", func(t *testing.T) {
		// A shell glob hands a file's name to the command line as a flag
		// when it starts with a dash.
		for _, args := range [][]string{
			{"validate", "--x" + forged + ".json"},
			{"validate", "-x" + forged + ".json"},
			{"plan", "--x" + forged},
			{"nosuch" + forged},
		} {
			_, errs, code := cli(t, nil, args...)
			if code != 2 {
				t.Errorf("%q: exit %d, want 2", args, code)
			}
			plainLines(t, "a usage error", errs, 2)
		}
	})

	t.Run("a policy's expression", func(t *testing.T) {
		for i, expr := range []string{`1 """` + forged + `"""`, `'` + forged} {
			pol := writeFile(t, dir, "policy.yaml", "version: 1\nrules:\n  - name: x\n    action: deny\n    expression: "+strconvQuote(expr)+"\n")
			out, errs, code := cli(t, nil, "policy", "check", pol)
			if code != 1 {
				t.Errorf("expression %d: policy check exit %d", i, code)
			}
			plainLines(t, "policy check's stdout", out, -1)
			plainLines(t, "policy check's stderr", errs, 1)
		}
	})

	t.Run("policy test's names", func(t *testing.T) {
		sub := filepath.Join(dir, "pt")
		if err := os.Mkdir(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, sub, "policy.yaml", "version: 1\nrules:\n  - name: x\n    action: deny\n    expression: \"false\"\n")
		writeFile(t, sub, "fleet.json", string(base))
		writeFile(t, sub, "a"+forged+".test.yaml", "policy: policy.yaml\ncases:\n  - name: "+strconvQuote("case"+forged)+"\n    document: fleet.json\n    expect: {x: pass}\n  - name: "+strconvQuote("fails"+forged)+"\n    document: fleet.json\n    expect: {x: deny}\n")
		out, errs, code := cli(t, nil, "policy", "test", sub)
		if code != 1 {
			t.Errorf("policy test with a failing case: exit %d", code)
		}
		plainLines(t, "policy test's stdout", out, 3) // two cases and the count
		plainLines(t, "policy test's stderr", errs, -1)
		writeFile(t, sub, "b.test.yaml", "policy: policy.yaml\ncases:\n  - name: missing\n    document: "+strconvQuote("gone"+forged)+"\n    expect: {x: pass}\n")
		_, errs, code = cli(t, nil, "policy", "test", sub)
		if code != 1 {
			t.Errorf("policy test with a missing document: exit %d", code)
		}
		plainLines(t, "policy test's stderr", errs, 1)
	})

	t.Run("calls, audit and export", func(t *testing.T) {
		doc := writeFile(t, dir, "image.json", withImage)
		state := filepath.Join(dir, "fleet.db")
		for _, args := range [][]string{
			{"plan", doc, "--offline", "--calls"},
			{"plan", doc, "--offline", "-o", "markdown"},
			{"plan", doc, "--offline", "-o", "json"},
		} {
			out, errs, code := cli(t, nil, append(args, "--state", state)...)
			if code != 0 {
				t.Fatalf("%v: exit %d: %s", args, code, errs)
			}
			plainLines(t, strings.Join(args[2:], " "), out, -1)
		}
		if _, errs, code := cli(t, nil, "apply", doc, "--state", state, "--yes", "--offline"); code != 0 {
			t.Fatalf("apply: exit %d: %s", code, errs)
		}
		for _, args := range [][]string{{"audit"}, {"audit", "-o", "json"}, {"export"}} {
			out, errs, code := cli(t, nil, append(args, "--state", state)...)
			if code != 0 {
				t.Fatalf("%v: exit %d: %s", args, code, errs)
			}
			plainLines(t, strings.Join(args, " "), out, -1)
		}
		// The export still reads back as the image id written.
		out, _, _ := cli(t, nil, "export", "--state", state)
		var back struct {
			SandboxTemplates []struct {
				ImageID string `json:"imageId"`
			} `json:"sandboxTemplates"`
		}
		if err := json.Unmarshal([]byte(out), &back); err != nil || len(back.SandboxTemplates) != 1 || back.SandboxTemplates[0].ImageID != forged {
			t.Errorf("the export does not read back as the image id written: %v %+v", err, back)
		}
	})

	t.Run("a file named like a flag", func(t *testing.T) {
		t.Chdir(dir)
		writeFile(t, dir, "--prune", string(base))
		out, errs, code := cli(t, nil, "apply", "--offline", "--state", filepath.Join(dir, "flag.db"), "--", "--prune")
		if code != 0 || !strings.Contains(out, " apply ./--prune ") {
			t.Errorf("apply of a file named --prune: exit %d, %s%s; want the command to apply ./--prune", code, out, errs)
		}
	})

	t.Run("the apply command printed to paste", func(t *testing.T) {
		for _, s := range []string{forged, "it's", "a b", "plain-name.json", "\xff\xfe bytes", `back\slash`} {
			q := quote(s)
			if !textline.IsPlain(q) {
				t.Errorf("quote(%q) = %q, not one line of plain text", s, q)
			}
			// In every locale: bash reads $'\u...' as the character only
			// in a UTF-8 one.
			for _, locale := range []string{"C.UTF-8", "C", "POSIX"} {
				sh := exec.Command("bash", "-c", "printf %s "+q)
				sh.Env = append(os.Environ(), "LC_ALL="+locale)
				got, err := sh.Output()
				if err != nil || string(got) != s {
					t.Errorf("quote(%q) = %s, which bash in %s reads as %q (%v)", s, q, locale, got, err)
				}
			}
		}
	})
}

func strconvQuote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\r", `\r`, "\x1b", `\e`, "\u0085", `\N`, "\u2028", `\L`, "\u2029", `\P`, "\u009b", `\x9b`).Replace(s) + `"`
}
