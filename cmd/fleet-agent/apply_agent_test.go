package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/agent"
	"github.com/fleet-agent/fleet-agent/internal/apply"
	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

// apply FILE on the state file of an agent that follows a branch (stopped:
// a running one refuses it itself) is refused without --force, because the
// agent would then refuse the branch's tip until its document matches the
// fleet again; with --force it applies and warns. A state file no agent
// follows applies as before.
func TestApplyFileOnAnAgentsStateFile(t *testing.T) {
	const (
		followed = `{"version":1,"sites":[{"name":"fra","kind":"shared","region":"eu"}]}`
		byHand   = `{"version":1,"sites":[{"name":"fra","kind":"shared","region":"eu"},{"name":"ams","kind":"shared","region":"eu"}]}`
		commit   = "9e26dfeeb6e641a33dae4961196235bdb965b21b"
	)
	for _, tc := range []struct {
		name    string
		commit  string // the commit the state's applied record came from
		args    []string
		code    int
		stdout  string
		stderr  string
		applied bool
	}{
		{"an agent's, refused", commit, []string{"--yes"}, 1, "", "INVALID_STATE", false},
		{"an agent's, reviewed hash, refused", commit, []string{"--plan-hash", "HASH"}, 1, "", "--force", false},
		{"an agent's, forced", commit, []string{"--yes", "--force"}, 0, "Applied 1 call(s)", "refuses the tip of main until", true},
		{"no agent's", "", []string{"--yes"}, 0, "Applied 1 call(s)", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "fleet.db")
			s, err := state.Open(path, state.Options{})
			if err != nil {
				t.Fatal(err)
			}
			doc, errs := fleet.Validate("fleet.json", []byte(followed))
			if errs != nil {
				t.Fatal(errs)
			}
			if _, err := apply.Apply(t.Context(), s, doc, apply.Options{Tenant: "root", AppliedBy: "agent", Commit: tc.commit}); err != nil {
				t.Fatal(err)
			}
			s.Close()
			file := writeFile(t, dir, "fleet.json", byHand)
			env := map[string]string{}
			args := append([]string{"apply", file, "--state", path, "--offline"}, tc.args...)
			if args[len(args)-1] == "HASH" {
				out, _, _ := cli(t, env, "apply", file, "--state", path, "--offline")
				args[len(args)-1] = strings.TrimSpace(out[strings.LastIndex(out, "--plan-hash ")+len("--plan-hash "):])
			}
			out, errOut, code := cli(t, env, args...)
			if code != tc.code || !strings.Contains(out, tc.stdout) || !strings.Contains(errOut, tc.stderr) {
				t.Fatalf("apply %v: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", tc.args, code, tc.code, out, errOut)
			}
			if tc.code != 0 && !strings.Contains(errOut, "--force") {
				t.Errorf("the refusal does not say how to go on:\n%s", errOut)
			}
			s, err = openStateRead(path)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			st, err := agent.Status(s, "root")
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Contains(st.Applied.AppliedBy, "@"); got != tc.applied {
				t.Errorf("applied %+v, want applied by hand %v", st.Applied, tc.applied)
			}
		})
	}
}
