package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMistypedPlanHashIsNotDrift: a --plan-hash that cannot be a plan hash,
// or is a part of the plan's hash, or differs from it in a digit or two, is
// a typo (INVALID_INPUT, saying where the right hash is), never CONFIG_DRIFT;
// a whole other hash still reads as drift, and nothing is applied either way.
func TestMistypedPlanHashIsNotDrift(t *testing.T) {
	dir := t.TempDir()
	env := map[string]string{}
	state := filepath.Join(dir, "fleet.db")
	doc := valid + "fleet-config.json"
	out, _, code := cli(t, env, "apply", doc, "--state", state)
	if code != 0 || !strings.Contains(out, "--plan-hash ") {
		t.Fatalf("apply dry: %d\n%s", code, out)
	}
	hash := strings.TrimSpace(out[strings.LastIndex(out, "--plan-hash ")+len("--plan-hash "):])
	if len(hash) != 64 {
		t.Fatalf("printed hash %q", hash)
	}
	flip := func(i int) string {
		b := []byte(hash)
		if b[i] == '0' {
			b[i] = '1'
		} else {
			b[i] = '0'
		}
		return string(b)
	}
	swap := []byte(hash)
	for i := 0; i+1 < len(swap); i++ {
		if swap[i] != swap[i+1] {
			swap[i], swap[i+1] = swap[i+1], swap[i]
			break
		}
	}
	cases := []struct {
		name, hash, says string
	}{
		{"a prefix", hash[:12], "is the first 12 digits of the plan's hash"},
		{"too short, not a prefix", flip(0)[:12], "it has 12 digits, a plan hash has 64"},
		{"too long", hash + "0", "it has 65 digits"},
		{"not hex", "planhash-" + hash[9:], "is not a lowercase hexadecimal digit"},
		{"uppercase", strings.ToUpper(hash[:1]) + "X" + hash[2:], "is not a lowercase hexadecimal digit"},
		{"one digit wrong", flip(30), "differs from the hash of the plan of now (" + hash + ") in 1 digit(s) only"},
		{"two digits swapped", string(swap), "in 2 digit(s) only"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, errs, code := cli(t, env, "apply", doc, "--state", state, "--plan-hash", c.hash)
			if code != 1 || !strings.Contains(errs, "INVALID_INPUT") || strings.Contains(errs, "CONFIG_DRIFT") || !strings.Contains(errs, c.says) || !strings.Contains(errs, "planHash line") && !strings.Contains(errs, "pass all 64 digits") {
				t.Fatalf("code %d\nstdout: %s\nstderr: %s", code, out, errs)
			}
			if strings.Count(strings.TrimSpace(errs), "\n") != 0 {
				t.Fatalf("the error is more than one line:\n%s", errs)
			}
			if strings.Contains(out, "Applied") {
				t.Fatalf("applied:\n%s", out)
			}
		})
	}
	// A whole other well-formed hash is what a moved fleet looks like.
	other := strings.Map(func(r rune) rune {
		if r == 'f' {
			return '0'
		}
		if r >= '0' && r <= '9' {
			return 'a' + (r-'0')%6
		}
		return '1'
	}, hash)
	if _, errs, code := cli(t, env, "apply", doc, "--state", state, "--plan-hash", other); code != 1 || !strings.Contains(errs, "CONFIG_DRIFT") {
		t.Fatalf("another hash: %d %s", code, errs)
	}
	if out, errs, code := cli(t, env, "apply", doc, "--state", state, "--plan-hash", hash); code != 0 || !strings.Contains(out, "Applied 8 call(s)") {
		t.Fatalf("the right hash: %d\n%s\n%s", code, out, errs)
	}
}

// TestApplyCommitRefusalIsOneLine: apply --commit through the running
// agent: a mistyped hash is INVALID_INPUT, not drift; a refusal the plan
// explains prints the plan on stdout and keeps the error to one line with
// its code and advice.
func TestApplyCommitRefusalIsOneLine(t *testing.T) {
	r := startRunning(t, "1s")
	env := map[string]string{"GIT_TOKEN": r.srv.Password, "GITHUB_TOKEN": canaryToken, "HOOK_SECRET": hookSecret}
	r.work.Write(t, "fleet.json", poolDoc)
	sha := r.work.CommitAll(t, "a pool")
	r.work.Push(t, "HEAD:refs/heads/main")
	r.gh.AddCommit(sha)
	// The agent fetches every second: poll until it knows the commit.
	var out, errs string
	var code int
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if out, errs, code = cli(t, env, "plan", "--commit", sha, "--config", r.path); !strings.Contains(errs, "not in the local copy") && !strings.Contains(errs, "is not on main") {
			break
		}
	}
	_, hash, _ := strings.Cut(out, "\nplanHash ")
	hash, _, _ = strings.Cut(hash, "\n")
	if code != 0 || len(hash) != 64 {
		t.Fatalf("plan --commit: %d\n%s\n%s", code, out, errs)
	}
	oneLine := func(what, errs string) {
		t.Helper()
		if strings.Count(strings.TrimSpace(errs), "\n") != 0 {
			t.Fatalf("%s: the error is more than one line:\n%s", what, errs)
		}
	}
	typo := []byte(hash)
	if typo[5] == '0' {
		typo[5] = '1'
	} else {
		typo[5] = '0'
	}
	out, errs, code = cli(t, env, "apply", "--commit", sha, "--plan-hash", string(typo), "--config", r.path)
	if code != 1 || !strings.Contains(errs, "INVALID_INPUT") || !strings.Contains(errs, "in 1 digit(s) only") {
		t.Fatalf("mistyped hash: %d\n%s\n%s", code, out, errs)
	}
	oneLine("mistyped hash", errs)
	out, errs, code = cli(t, env, "apply", "--commit", sha, "--plan-hash", hash[:10], "--config", r.path)
	if code != 1 || !strings.Contains(errs, "INVALID_INPUT") || !strings.Contains(errs, "first 10 digits") {
		t.Fatalf("a prefix: %d\n%s\n%s", code, out, errs)
	}
	oneLine("a prefix", errs)
	other := strings.Repeat("0", 64)
	out, errs, code = cli(t, env, "apply", "--commit", sha, "--plan-hash", other, "--config", r.path)
	if code != 1 || !strings.Contains(errs, "CONFIG_DRIFT") || !strings.Contains(errs, "plan it again") {
		t.Fatalf("another hash: %d\n%s\n%s", code, out, errs)
	}
	oneLine("another hash", errs)
	if !strings.Contains(out, "+ pool vps\n") || strings.Contains(errs, "pool vps") {
		t.Fatalf("the plan is not on stdout (or is in the error):\nstdout:\n%s\nstderr:\n%s", out, errs)
	}
	if out, errs, code := cli(t, env, "apply", "--commit", sha, "--plan-hash", hash, "--config", r.path); code != 0 {
		t.Fatalf("the right hash: %d\n%s\n%s", code, out, errs)
	}
}
