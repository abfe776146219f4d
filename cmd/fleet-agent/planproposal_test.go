package main

import (
	"github.com/fleet-agent/fleet-agent/internal/localapi"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPlanProposalShowsTheComment: without reading GitHub, plan --proposal
// (a pull request's number, or --commit of its head) prints the plan as
// the pull request comment shows it, with the policy's deny verdict, and
// exits PLAN_BLOCKED; no apply command is offered. status says the
// proposal is denied (doctor's proposal-denied is internal/doctor's test).
func TestPlanProposalShowsTheComment(t *testing.T) {
	w, boot := newPolicyWorld(t, gpuCapPolicy)
	head := w.openPR(1, boot, bigFlavorDoc)
	w.step()

	dir, err := os.MkdirTemp("", "fa-prop-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "api.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: localapi.Handler(w.ag, w.store)}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Close() })
	cfg := writeFile(t, dir, "config.yaml", "socket: "+sock+"\nstate: "+filepath.Join(dir, "fleet.db")+"\n")

	const verdict = "- **deny** `gpu-cap`: gpu/huge asks for 16 GPUs; at most 8"
	for _, args := range [][]string{
		{"plan", "--proposal", "#1", "-o", "markdown"},
		{"plan", "--commit", head[:12], "-o", "markdown"},
	} {
		out, errs, code := cli(t, nil, append(args, "--config", cfg)...)
		if code != 1 || !strings.Contains(errs, "PLAN_BLOCKED") || !strings.Contains(out, "### fleet-agent plan: denied by policy") || !strings.Contains(out, verdict) {
			t.Errorf("%v: exit %d\nstdout:\n%s\nstderr:\n%s", args, code, out, errs)
		}
	}
	out, errs, code := cli(t, nil, "plan", "--proposal", "1", "--config", cfg)
	if code != 1 || !strings.Contains(out, "deny gpu-cap") || strings.Contains(out, "apply --commit") || strings.Contains(out, "applies it") || !strings.Contains(out, "the policy denies it: merged into main, the agent would refuse to apply it") {
		t.Errorf("text: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	out, errs, code = cli(t, nil, "plan", "--proposal", "no-such-branch", "--config", cfg)
	if code != 1 || !strings.Contains(errs, "INVALID_INPUT") || !strings.Contains(errs, "refs/pull/1/head") {
		t.Errorf("an unknown proposal: exit %d\n%s%s", code, out, errs)
	}
	out, _, _ = cli(t, nil, "status", "--config", cfg)
	if !strings.Contains(out, "denied by the policy (deny gpu-cap: gpu/huge asks for 16 GPUs; at most 8)") {
		t.Errorf("status does not say the proposal is denied:\n%s", out)
	}

	// --state naming another file than the config's is not answered by
	// the agent: the command reads the file it was given (absent here).
	other := filepath.Join(dir, "other.db")
	out, errs, code = cli(t, nil, "status", "--state", other, "--config", cfg)
	if code == 0 || !strings.Contains(errs, other) || strings.Contains(out, "denied by the policy") {
		t.Errorf("status --state OTHER answered from the agent: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	out, _, _ = cli(t, nil, "status", "--state", filepath.Join(dir, ".", "fleet.db"), "--config", cfg)
	if !strings.Contains(out, "denied by the policy") {
		t.Errorf("status --state of the config's own file is not answered by the agent:\n%s", out)
	}

	// Merged anyway, it is refused; plan --commit of it says why and
	// offers no apply (which would fail PLAN_BLOCKED).
	w.merge(1, head)
	w.step()
	out, errs, code = cli(t, nil, "plan", "--commit", head[:12], "--config", cfg)
	if code != 1 || !strings.Contains(out, "deny gpu-cap") || strings.Contains(out, "To apply exactly this plan") || !strings.Contains(errs, "new commit") {
		t.Errorf("plan --commit of the denied tip: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
}
