package main

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/doctor"
	"github.com/fleet-agent/fleet-agent/internal/forge/githubemu"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/testutil/gitserver"
)

// A healthy agent: doctor answers through its socket, every check passes,
// exit 0.
func TestDoctorHealthyAgent(t *testing.T) {
	r := startRunning(t, "1h")
	out, errs, code := cli(t, map[string]string{}, "doctor", "-o", "json", "--config", r.path)
	if code != 0 {
		t.Fatalf("doctor on a healthy agent: exit %d\n%s\n%s", code, out, errs)
	}
	var rep doctor.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Through != "agent" {
		t.Fatalf("made through %q, want the running agent", rep.Through)
	}
	for _, want := range []string{"config-ok", "state-ok", "git-ok", "github-ok", "fleet-ok"} {
		if !slices.Contains(rep.Codes(), want) {
			t.Errorf("no %s in %v", want, rep.Codes())
		}
	}
	if strings.Contains(out, canaryToken) || strings.Contains(out, r.srv.Password) {
		t.Fatal("the report holds a secret")
	}
	text, _, code := cli(t, map[string]string{}, "doctor", "--config", r.path)
	if code != 0 || !strings.Contains(text, "nothing needs a person") || !strings.Contains(text, "ok   git-ok: ") {
		t.Fatalf("text: exit %d\n%s", code, text)
	}
}

// Each broken part gets its own code and exit 1, found by doctor on the
// files with no agent running.
func TestDoctorFindsEachBrokenPart(t *testing.T) {
	srv := gitserver.Start(t)
	remo := srv.NewRepo(t, "fleet")
	work := remo.Clone(t)
	work.Git(t, "checkout", "-q", "-B", "main")
	work.Write(t, "fleet.json", emptyDoc)
	work.CommitAll(t, "empty")
	work.Push(t, "HEAD:refs/heads/main")
	emu := githubemu.New(t, githubemu.Options{})
	emu.AddToken(canaryToken, "fleet-bot")
	emu.AddReadOnlyToken("ghp_readonly_1", "reader")
	emu.Repo("acme/fleet")

	gitBlock := func(url string) string {
		return fmt.Sprintf("git:\n  url: %s\n  auth: { token: env://GIT_TOKEN }\n", url)
	}
	ghBlock := "github:\n  repository: acme/fleet\n  apiURL: " + emu.URL() + "\n  token: env://GITHUB_TOKEN\n"
	cases := []struct {
		name   string
		config string
		env    map[string]string
		want   string
	}{
		{"remote unreachable", gitBlock("http://127.0.0.1:1/fleet.git"), nil, "git-unreachable"},
		{"git password refused", gitBlock(remo.URL), map[string]string{"GIT_TOKEN": "not-the-password"}, "git-auth"},
		{"branch missing", gitBlock(remo.URL) + "  branch: production\n", nil, "git-branch-missing"},
		{"github token refused", gitBlock(remo.URL) + ghBlock, map[string]string{"GITHUB_TOKEN": "ghp_revoked"}, "github-token"},
		{"github token read-only", gitBlock(remo.URL) + ghBlock, map[string]string{"GITHUB_TOKEN": "ghp_readonly_1"}, "github-permissions"},
		{"github repository unknown", gitBlock(remo.URL) + strings.Replace(ghBlock, "acme/fleet", "acme/other", 1), nil, "github-repository"},
		{"join listener missing", gitBlock(remo.URL) + "substrate:\n  nodeDaemon: { image: registry.example.com/fleet-agent:1, joinURL: 'https://ops.example.com:9465/' }\n", nil, "node-daemon-no-listener"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := writeFile(t, dir, "config.yaml", c.config+"state: "+filepath.Join(dir, "fleet.db")+"\nsocket: "+filepath.Join(dir, "api.sock")+"\n")
			env := map[string]string{"GIT_TOKEN": srv.Password, "GITHUB_TOKEN": canaryToken}
			for k, v := range c.env {
				env[k] = v
			}
			out, errs, code := cli(t, env, "doctor", "-o", "json", "--config", cfg)
			var rep doctor.Report
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatalf("exit %d: %v\n%s\n%s", code, err, out, errs)
			}
			if code != 1 || !slices.Contains(rep.Codes(), c.want) {
				t.Fatalf("exit %d, codes %v, want %s\n%s", code, rep.Codes(), c.want, out)
			}
			for _, f := range rep.Findings {
				if f.Severity == doctor.Fail && f.Do == "" {
					t.Errorf("%s says nothing to do", f.Code)
				}
			}
			if strings.Contains(out, srv.Password) || strings.Contains(out, canaryToken) {
				t.Fatal("the report holds a secret")
			}
		})
	}
}

// A fleet with a Kubernetes substrate and no substrate.nodeDaemon:
// substrate-agent-missing.
func TestDoctorSubstrateWithoutNodeDaemon(t *testing.T) {
	dir, cfg := liveSetup(t, fakeOK)
	st := filepath.Join(dir, "fleet.db")
	if out, errs, code := cli(t, map[string]string{}, "apply", liveDoc(t, dir, "secret://fake-token"), "--config", cfg, "--state", st, "--yes"); code != 0 {
		t.Fatalf("apply: %d\n%s\n%s", code, out, errs)
	}
	out, _, code := cli(t, map[string]string{}, "doctor", "-o", "json", "--config", cfg, "--state", st)
	var rep doctor.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err, out)
	}
	codes := rep.Codes()
	if code != 1 || !slices.Contains(codes, "substrate-agent-missing") || !slices.Contains(codes, "provider-ok") || !slices.Contains(codes, "provider-offline") {
		t.Fatalf("exit %d, codes %v\n%s", code, codes, out)
	}
	// The aws account has no providers.aws block and backs pool on-aws: its
	// substrate is not reconciled, a failure that needs a restart.
	for _, f := range rep.Findings {
		if f.Code == "provider-offline" && (f.Severity != doctor.Fail || !strings.Contains(f.Found, "on-aws") ||
			!strings.Contains(f.Found, "not reconciled") || !strings.Contains(f.Do, "restart")) {
			t.Errorf("provider-offline %s %q, do %q: want a failure naming pool on-aws as not reconciled, and a restart", f.Severity, f.Found, f.Do)
		}
	}
	if strings.Contains(out, liveToken) {
		t.Fatal("the report holds the provider's token")
	}
}

// A state file another process holds (a running agent whose socket doctor
// does not reach) is busy, not broken: state-locked, and advice that never
// says to restore or delete the file.
func TestDoctorStateLockedIsNotBroken(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "fleet.db")
	holder, err := state.Open(path, state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	cfg := writeFile(t, dir, "config.yaml", "state: "+path+"\nsocket: "+filepath.Join(dir, "api.sock")+"\n")
	out, errs, code := cli(t, map[string]string{}, "doctor", "-o", "json", "--config", cfg)
	var rep doctor.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("exit %d: %v\n%s\n%s", code, err, out, errs)
	}
	f := finding(t, rep, "state-locked")
	if code != 1 || slices.Contains(rep.Codes(), "state-unreadable") {
		t.Fatalf("exit %d, codes %v", code, rep.Codes())
	}
	if strings.Contains(strings.ToLower(f.Do), "restore it") || !strings.Contains(f.Do, "socket") || !strings.Contains(f.Do, "fuser "+path) {
		t.Fatalf("advice for a busy file: %q", f.Do)
	}
}

// Each cause of a state file that does not open gets its own code and
// advice; only a damaged file is told about backups. (Permission denied is
// built here because the tests may run as root, who is never denied.)
func TestDoctorStateOpenFindingPerCause(t *testing.T) {
	denied := refusal.Wrap(refusal.InvalidState, &fs.PathError{Op: "open", Path: "/x/fleet.db", Err: syscall.EACCES}, "cannot open the state file /x/fleet.db")
	damaged := refusal.New(refusal.InvalidState, "the state file /x/fleet.db is not a fleet-agent state file")
	cases := []struct {
		err        error
		code       string
		wantBackup bool
	}{
		{denied, "state-permission", false},
		{damaged, "state-unreadable", true},
	}
	for _, c := range cases {
		_, code, sev, _, do := stateOpenFinding("/x/fleet.db", "/run/fleet-agent/api.sock", c.err, "restore the last good copy from a backup")
		if code != c.code || sev != doctor.Fail || strings.Contains(do, "backup") != c.wantBackup {
			t.Errorf("%v: %s %s do %q", c.err, code, sev, do)
		}
	}
}

// A fleet document given where the state file belongs is not damaged:
// doctor says the path is wrong and never sends the operator to a backup.
func TestDoctorStateIsADocument(t *testing.T) {
	doc := writeFile(t, t.TempDir(), "fleet.json", `{"version": 1, "sites": []}`+"\n")
	_, err := state.Open(doc, state.Options{ReadOnly: true})
	if err == nil {
		t.Fatal("a fleet document opened as a state file")
	}
	_, code, _, found, do := stateOpenFinding(doc, "/run/fleet-agent/api.sock", err, "restore the last good copy from a backup")
	if code != "state-wrong-file" || strings.Contains(do, "backup") || !strings.Contains(found, "fleet document") {
		t.Errorf("%s: found %q do %q", code, found, do)
	}
}

// A config path that names nothing is a path to check, not a file to fix
// "at the line named".
func TestDoctorConfigMissing(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope.yaml")
	out, _, code := cli(t, map[string]string{}, "doctor", "-o", "json", "--config", missing)
	var rep doctor.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("doctor: %v\n%s", err, out)
	}
	f := finding(t, rep, "config-missing")
	if code != 1 || !strings.Contains(f.Do, "check the path") || strings.Contains(f.Do, "line named") {
		t.Errorf("exit %d, %+v", code, f)
	}
}

func finding(t *testing.T, rep doctor.Report, code string) doctor.Finding {
	t.Helper()
	for _, f := range rep.Findings {
		if f.Code == code {
			return f
		}
	}
	t.Fatalf("no %s in %v", code, rep.Codes())
	return doctor.Finding{}
}
