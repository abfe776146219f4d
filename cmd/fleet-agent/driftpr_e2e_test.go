package main

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleet-agent/fleet-agent/internal/agent"
	"github.com/fleet-agent/fleet-agent/internal/apply"
	"github.com/fleet-agent/fleet-agent/internal/forge"
	"github.com/fleet-agent/fleet-agent/internal/gitsync"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/localapi"
	"github.com/fleet-agent/fleet-agent/internal/outbox"
	"github.com/fleet-agent/fleet-agent/internal/state/statetest"
)

// oddDoc is formatted as a person might: the drift proposal must keep it.
const oddDoc = `{ "version": 1,
  "sites": [ {"name": "fra", "kind": "shared",   "region": "eu"} ],
    "pools": [
	{"name":"gpu-fra","site":"fra","class":"metal-host","gpuModel":"H100","sharing":"mig","agent":"bcd",
	 "policy": { "disruptionBudget": 0.25 ,
	             "maxNodes":2.0 } }
    ],
  "flavors": [ {"pool":"gpu-fra","name":"h100x1", "vcpu": 16,"memoryGiB":128,"gpus":1,"diskGiB":200} ]
}
`

// startDrift rewires the world's agent with drift pull requests on.
func (w *ghWorld) startDrift(revert bool) {
	t := w.t
	sec := secretsMap{"secret://git": w.srv.Password, "secret://gh": canaryToken}
	repo, err := gitsync.Open(gitsync.Config{URL: w.remo.URL, Auth: gitsync.Auth{Token: "secret://git"}, Secrets: sec, Dir: t.TempDir(), Clock: w.clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { repo.Close() })
	g, err := forge.New(forge.Config{Repository: "acme/fleet", APIURL: w.emu.URL(), Token: "secret://gh", Resolver: sec, Clock: w.clk})
	if err != nil {
		t.Fatal(err)
	}
	log := zerolog.New(w.log)
	w.repo = repo
	w.box = outbox.New(w.store, g.Poster(), outbox.Options{Clock: w.clk, Log: log, MinSpacing: outbox.NoSpacing})
	w.ag = agent.New(agent.Config{Branch: "main", RequireReviewedPlan: true, Prefix: "fleet-agent", DriftPullRequests: true, RevertOnClose: revert},
		agent.Options{Store: w.store, Repo: repo, Forge: agentForge{g}, Outbox: w.box, Clock: w.clk, Log: log, DriftForge: driftForgeOf(g)})
	// GitHub knows where branches point: the emulator asks the git server.
	w.gh.SetHeadOf(func(branch string) string {
		out, err := exec.Command("git", "-C", w.remo.Dir, "rev-parse", "--verify", "-q", "refs/heads/"+branch).Output()
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(out))
	})
}

// driftGHWorld: main holds oddDoc, applied through a reviewed pull request.
func driftGHWorld(t *testing.T, revert bool) (*ghWorld, string) {
	w := newGHWorld(t)
	w.startDrift(revert)
	w.work.Git(t, "checkout", "-q", "-B", "main")
	boot := w.push("main", emptyDoc, "an empty fleet")
	w.step()
	head := w.openPR(1, boot, oddDoc)
	w.step()
	w.merge(1, head)
	w.step()
	if ap := w.applied(); ap == nil || ap.Commit != head {
		t.Fatalf("oddDoc not applied: %+v\n%s", ap, w.log)
	}
	return w, head
}

func (w *ghWorld) editVcpu(v int) {
	w.t.Helper()
	if err := apply.ApplyEdit(w.store, apply.Edit{Kind: inventory.Flavor, Name: "gpu-fra/h100x1", Set: map[string]any{"vcpu": v}, Who: "ops@box (uid 1000)"}); err != nil {
		w.t.Fatal(err)
	}
}

func (w *ghWorld) driftCheck() *localapi.DriftProposal {
	w.t.Helper()
	if err := w.ag.DriftCheck(w.t.Context()); err != nil {
		w.t.Fatalf("drift check: %v\n%s", err, w.log)
	}
	if err := w.box.Flush(w.t.Context()); err != nil {
		w.t.Fatal(err)
	}
	rec, err := w.ag.DriftProposalNow()
	if err != nil || rec == nil {
		w.t.Fatalf("no drift proposal: %v\n%s", err, w.log)
	}
	return rec
}

// mergeHead fast-forwards main to a commit the server holds, as a merge
// on GitHub does.
func (w *ghWorld) mergeHead(n int, sha string) {
	w.remo.UpdateRef(w.t, "refs/heads/main", sha)
	w.gh.MergePR(n, sha)
}

// mirror makes refs/pull/N/head follow the proposal's branch, as GitHub does.
func (w *ghWorld) mirror(rec *localapi.DriftProposal) {
	w.remo.UpdateRef(w.t, "refs/pull/"+strconv.Itoa(rec.PR)+"/head", rec.Head)
	w.gh.AddCommit(rec.Head)
}

func TestDriftPullRequestMergedKeepsTheFleet(t *testing.T) {
	w, tip := driftGHWorld(t, false)
	clockStart, wallStart := w.clk.Now(), time.Now()
	w.editVcpu(24)
	rec := w.driftCheck()
	t.Logf("edit to drift pull request opened: %v on the injected clock, %v wall", w.clk.Now().Sub(clockStart), time.Since(wallStart))
	if rec.PR == 0 || rec.State != "open" {
		t.Fatalf("no pull request: %+v\n%s", rec, w.log)
	}
	pr := w.gh.Pull(rec.PR)
	if pr.HeadRef != rec.Branch || pr.BaseRef != "main" || pr.HeadSHA != rec.Head || pr.State != "open" {
		t.Fatalf("pull request: %+v, record %+v", pr, rec)
	}
	for _, want := range []string{"`edit` by ops@box (uid 1000) at ", "`16`", "`24`", "Merge to keep", "drift.revertOnClose` is off", "flavor `gpu-fra/h100x1`"} {
		if !strings.Contains(pr.Body, want) {
			t.Fatalf("body lacks %q:\n%s", want, pr.Body)
		}
	}
	if got, want := w.remo.Git(t, "show", rec.Head+":fleet.json")+"\n", strings.Replace(oddDoc, `"vcpu": 16`, `"vcpu": 24`, 1); got != want {
		t.Fatalf("file on the branch:\n%s", got)
	}
	if d := w.remo.Git(t, "diff", "--numstat", tip, rec.Head); !strings.HasPrefix(d, "1\t1\tfleet.json") {
		t.Fatalf("diff: %q", d)
	}
	// A second edit updates the same pull request.
	w.clk.Advance(time.Minute)
	w.editVcpu(32)
	rec2 := w.driftCheck()
	if rec2.PR != rec.PR || rec2.Head == rec.Head || !strings.Contains(w.gh.Body(rec.PR), "`32`") || w.gh.Pull(rec.PR).HeadSHA != rec2.Head {
		t.Fatalf("second edit: %+v\n%s", rec2, w.gh.Body(rec.PR))
	}
	// Reviewed like any pull request: planned, no calls.
	w.mirror(rec2)
	w.step()
	if c := w.planComments(rec.PR); len(c) != 1 || !strings.Contains(c[0].Body, rec2.Head) {
		t.Fatalf("plan comment: %+v", c)
	}
	if s := w.lastStatus(rec2.Head, "plan"); s.State != "success" {
		t.Fatalf("plan status: %+v", s)
	}
	calls := 0
	countCalls := func() int {
		n := 0
		rows, _ := localapi.AuditRows(w.store)
		for _, r := range rows {
			if r.Action == "call" {
				n++
			}
		}
		return n
	}
	calls = countCalls()
	w.mergeHead(rec.PR, rec2.Head)
	w.step()
	if ap := w.applied(); ap == nil || ap.Commit != rec2.Head || countCalls() != calls {
		t.Fatalf("merge not applied without calls: %+v, calls %d -> %d\n%s", ap, calls, countCalls(), w.log)
	}
	rec3 := w.driftCheck()
	if rec3.State != "merged" || w.remo.Git(t, "for-each-ref", "refs/heads/"+rec.Branch) != "" {
		t.Fatalf("after the merge: %+v", rec3)
	}
	if s := w.lastStatus(rec2.Head, "drift"); s.State == "failure" {
		t.Fatalf("drift still reported on the merged commit: %+v", s)
	}
	for _, where := range []string{w.log.String(), w.gh.Body(rec.PR), w.remo.Git(t, "log", "-p", "--all")} {
		if strings.Contains(where, canaryToken) || strings.Contains(where, w.srv.Password) {
			t.Fatal("a secret leaked into a log, a pull request or a branch")
		}
	}
}

func TestDriftPullRequestClosedReverts(t *testing.T) {
	w, _ := driftGHWorld(t, true)
	w.editVcpu(24)
	rec := w.driftCheck()
	w.gh.ClosePR(rec.PR)
	rec2 := w.driftCheck()
	if rec2.State != "reverted" || w.remo.Git(t, "for-each-ref", "refs/heads/"+rec.Branch) != "" {
		t.Fatalf("after close: %+v\n%s", rec2, w.log)
	}
	snap, _ := w.store.Snapshot()
	if o, _ := snap.ByName(inventory.Flavor, "gpu-fra/h100x1"); o.Spec["vcpu"] != int64(16) {
		t.Fatalf("the fleet is not back: %v", o.Spec["vcpu"])
	}
}

func TestDriftPullRequestClosedWhenDriftClears(t *testing.T) {
	w, _ := driftGHWorld(t, false)
	w.editVcpu(24)
	rec := w.driftCheck()
	w.editVcpu(16)
	rec2 := w.driftCheck()
	if rec2.State != "cleared" || w.gh.Pull(rec.PR).State != "closed" || w.gh.Pull(rec.PR).Merged {
		t.Fatalf("after clearing: %+v %+v", rec2, w.gh.Pull(rec.PR))
	}
	found := false
	for _, c := range w.gh.Comments(rec.PR) {
		found = found || strings.Contains(c.Body, "matches the applied document again")
	}
	if !found || w.remo.Git(t, "for-each-ref", "refs/heads/"+rec.Branch) != "" {
		t.Fatalf("no closing comment, or branch kept")
	}
}

// A drift pull request merged after the fleet moved again plans calls: the
// reviewed plan no longer matches, and the merge is refused like any other.
func TestDriftPullRequestStaleMergeRefused(t *testing.T) {
	w, _ := driftGHWorld(t, false)
	w.editVcpu(24)
	rec := w.driftCheck()
	w.mirror(rec)
	w.step()
	w.editVcpu(40) // the fleet moves again; nobody re-reviews
	w.mergeHead(rec.PR, rec.Head)
	w.step()
	if ap := w.applied(); ap != nil && ap.Commit == rec.Head {
		t.Fatalf("a stale drift pull request was applied\n%s", w.log)
	}
	// Refused, the merge kept nothing: the proposal is not merged, its
	// branch stays, and a new pull request writes the fleet as it now is.
	rec2 := w.driftCheck()
	if rec2.State != "open" || rec2.PR == rec.PR || rec2.PR == 0 || rec2.MergeRefused == "" || w.remo.Git(t, "for-each-ref", "refs/heads/"+rec.Branch) == "" {
		t.Fatalf("after the refused merge: %+v\n%s", rec2, w.log)
	}
	if w.remo.Rev(t, rec2.Head+"^") != rec.Head || !strings.Contains(w.gh.Body(rec2.PR), "`40`") {
		t.Fatalf("the new pull request is not the fleet now on the refused tip: %+v\n%s", rec2, w.gh.Body(rec2.PR))
	}
	w.clk.Advance(time.Minute)
	if again := w.driftCheck(); again.Head != rec2.Head || again.PR != rec2.PR {
		t.Fatalf("a check with nothing new moved the proposal: %+v", again)
	}
	w.mirror(rec2)
	w.step()
	w.mergeHead(rec2.PR, rec2.Head)
	w.step()
	if ap := w.applied(); ap == nil || ap.Commit != rec2.Head {
		t.Fatalf("the rewritten drift pull request was not applied: %+v\n%s", ap, w.log)
	}
	if rec3 := w.driftCheck(); rec3.State != "merged" {
		t.Fatalf("after the second merge: %+v", rec3)
	}
}

// A drift that comes to hold nothing the document can say (a fixed field
// changed, the written value put back) closes the pull request with a
// comment that says why, and status says so.
func TestDriftPullRequestClosedWhenNothingCanBeWritten(t *testing.T) {
	w, _ := driftGHWorld(t, false)
	w.editVcpu(24)
	rec := w.driftCheck()
	// A field that never changes once created, changed outside any plan:
	// edit refuses that now, but a state file written by an agent from
	// before may hold one, so it is written to the state directly.
	statetest.SetSpec(t, w.store, inventory.Pool, "gpu-fra", map[string]any{"sharing": "exclusive"})
	w.editVcpu(16)
	rec2 := w.driftCheck()
	if pr := w.gh.Pull(rec.PR); rec2.State != "none" || pr.State != "closed" || pr.Merged {
		t.Fatalf("after the drift became unwritable: %+v, pull request %+v\n%s", rec2, pr, w.log)
	}
	found := false
	for _, c := range w.gh.Comments(rec.PR) {
		found = found || (strings.Contains(c.Body, "nothing in the drift can be written") && strings.Contains(c.Body, "sharing cannot change once created"))
	}
	if !found || w.remo.Git(t, "for-each-ref", "refs/heads/"+rec.Branch) != "" {
		t.Fatalf("no closing comment that says why, or the branch kept: %+v", w.gh.Comments(rec.PR))
	}
	if !strings.Contains(rec2.Waiting, "sharing cannot change once created") || len(rec2.Values) != 0 {
		t.Fatalf("the record does not say why: %+v", rec2)
	}
}
