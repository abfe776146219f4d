package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const policyDir = "../../testdata/policy/"

// TestPolicyTest: the worked suite passes (exit 0); a case whose expected
// verdict is wrong fails with what differed (exit 1); a policy that does not
// compile is INVALID_INPUT with its line.
func TestPolicyTest(t *testing.T) {
	out, errs, code := cli(t, nil, "policy", "test", policyDir)
	if code != 0 || !strings.Contains(out, "5 case(s): 5 passed, 0 failed.") {
		t.Fatalf("worked suite: %d\n%s\n%s", code, out, errs)
	}
	dir := t.TempDir()
	abs, _ := filepath.Abs(policyDir)
	writeFile(t, dir, "wrong.test.yaml", "policy: "+abs+"/policy.yaml\ncases:\n  - name: wrong\n    document: "+abs+"/fixtures/spot.json\n    expect: {no-spot-in-uninterruptible: pass}\n")
	out, errs, code = cli(t, nil, "policy", "test", dir)
	if code != 1 || !strings.Contains(out, "FAIL wrong.test.yaml: wrong: no-spot-in-uninterruptible: deny, want pass (pool k8s is sold as uninterruptible but has a Spot node pool)") ||
		!strings.Contains(errs, "INVALID_INPUT: 1 policy case(s) failed") {
		t.Fatalf("failing case: %d\n%s\n%s", code, out, errs)
	}
	bad := t.TempDir()
	writeFile(t, bad, "p.yaml", "rules:\n  - name: a\n    expression: change.after.gpus >\n    action: deny\n")
	writeFile(t, bad, "a.test.yaml", "policy: p.yaml\ncases: []\n")
	_, errs, code = cli(t, nil, "policy", "test", bad)
	if code != 1 || !strings.Contains(errs, `INVALID_INPUT:`) || !strings.Contains(errs, `line 3: rule "a": expression, column 20: Syntax error`) {
		t.Fatalf("bad policy: %d %s", code, errs)
	}
	_, errs, code = cli(t, nil, "policy", "check", filepath.Join(bad, "p.yaml"))
	if code != 1 || !strings.Contains(errs, `line 3: rule "a"`) {
		t.Fatalf("policy check: %d %s", code, errs)
	}
}

// TestPlanPolicy: plan --policy prints the verdicts with the plan; a deny
// exits PLAN_BLOCKED, an approve rule is shown and does not fail.
func TestPlanPolicy(t *testing.T) {
	state := filepath.Join(t.TempDir(), "fleet.db")
	out, errs, code := cli(t, nil, "plan", policyDir+"fixtures/spot.json", "--state", state, "--offline", "--policy", policyDir+"policy.yaml")
	if code != 1 || !strings.Contains(errs, `PLAN_BLOCKED: policy rule "no-spot-in-uninterruptible" denies the plan: pool k8s is sold as uninterruptible but has a Spot node pool`) ||
		!strings.Contains(out, "  deny no-spot-in-uninterruptible: pool k8s is sold as uninterruptible but has a Spot node pool\n    create pool k8s (line 10):") {
		t.Fatalf("deny: %d\n%s\n%s", code, out, errs)
	}
	out, errs, code = cli(t, nil, "plan", policyDir+"fixtures/next.json", "--state", state, "--offline", "--policy", policyDir+"policy.yaml", "-o", "json")
	if code != 0 || !strings.Contains(out, `"verdict": "approve"`) || !strings.Contains(out, `"approvers": [`) {
		t.Fatalf("approve: %d\n%s\n%s", code, out, errs)
	}
}

// TestPlanPolicyThroughAgent: plan --policy while an agent runs (the agent
// holds the state) judges with each change's before, as stored: a rule
// comparing before and after sees both.
func TestPlanPolicyThroughAgent(t *testing.T) {
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
	if code != 0 || hash == "" {
		t.Fatalf("plan --commit: %d\n%s\n%s", code, out, errs)
	}
	if out, errs, code := cli(t, env, "apply", "--commit", sha, "--plan-hash", hash, "--config", r.path, "--yes"); code != 0 {
		t.Fatalf("apply --commit: %d\n%s\n%s", code, out, errs)
	}
	dir := t.TempDir()
	pol := writeFile(t, dir, "policy.yaml", `rules:
  - name: quota-grows
    match: {kinds: [ownerQuota], changes: [update]}
    expression: change.after.max > change.before.max
    action: deny
    message: "change.name + ' grows from ' + string(change.before.max) + ' to ' + string(change.after.max)"
`)
	out, errs, code = cli(t, env, "plan", writeFile(t, dir, "pool8.json", pool8Doc), "--config", r.path, "--offline", "--policy", pol)
	if code != 1 || !strings.Contains(errs, `PLAN_BLOCKED: policy rule "quota-grows" denies the plan: vps:gpu grows from 4 to 8`) {
		t.Fatalf("plan --policy through the agent: %d\n%s\n%s", code, out, errs)
	}
}
