package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// TestEditRefusesWhatAPlanGuards: through the command line, an edit that
// would tear down a protected substrate, take its protect out or change its
// cluster's version exits 1 with INVALID_STATE and what to do, leaves the
// fleet as applied (no drift) and is in the audit log as edit-refused.
func TestEditRefusesWhatAPlanGuards(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "fleet.db")
	env := map[string]string{}
	const sub = `{"kind":"kubernetes","account":"k8s","cluster":{"create":{"location":"fake-east","version":"%s"}},%s"flavors":[{"name":"h100","machineType":"fake-h100x8","nodes":1}]}`
	policy := func(version, protect string) string {
		return `{"substrate":` + strings.Replace(strings.Replace(sub, "%s", version, 1), "%s", protect, 1) + `}`
	}
	doc := writeFile(t, dir, "fleet.json", `{"version":1,"sites":[{"name":"k8s","kind":"shared","region":"fake-east"}],
 "providerAccounts":[{"name":"k8s","provider":"fake","config":{"token":"secret://fake-token"}}],
 "pools":[{"name":"gpu","site":"k8s","class":"metal-host","gpuModel":"H100","policy":`+policy("1.34", `"protect":true,`)+`}]}`)
	if _, errs, code := cli(t, env, "apply", doc, "--state", state, "--yes", "--offline"); code != 0 {
		t.Fatalf("apply: %d %s", code, errs)
	}
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"edit", "--delete", "pool", "gpu"}, "tears a substrate down only through the document"},
		{[]string{"edit", "pool", "gpu", "policy=" + policy("1.34", "")}, `apply "protect": false through the document`},
		{[]string{"edit", "pool", "gpu", "policy=" + policy("1.99", `"protect":true,`)}, "an upgrade goes through a reviewed plan"},
	} {
		_, errs, code := cli(t, env, append(c.args, "--state", state)...)
		if code != 1 || !strings.Contains(errs, "INVALID_STATE") || !strings.Contains(errs, c.says) {
			t.Errorf("%v: exit %d, %s; want 1, INVALID_STATE saying %q", c.args, code, errs, c.says)
		}
	}
	if out, errs, code := cli(t, env, "status", "--fail-on-drift", "--state", state); code != 0 {
		t.Fatalf("the refused edits left drift: %d\n%s%s", code, out, errs)
	}
	out, errs, code := cli(t, env, "audit", "-o", "json", "--state", state)
	if code != 0 {
		t.Fatalf("audit: %d %s", code, errs)
	}
	var rows []struct {
		Action string `json:"action"`
	}
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("audit JSON: %v\n%s", err, out)
	}
	refused := 0
	for _, r := range rows {
		if r.Action == "edit-refused" {
			refused++
		}
		if r.Action == "edit" {
			t.Errorf("a refused edit was audited as made: %+v", r)
		}
	}
	if refused != 3 {
		t.Errorf("%d edit-refused rows, want 3:\n%s", refused, out)
	}
}
