package main

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleet-agent/fleet-agent/internal/agent"
	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/forge"
	"github.com/fleet-agent/fleet-agent/internal/forge/githubemu"
	"github.com/fleet-agent/fleet-agent/internal/gitsync"
	"github.com/fleet-agent/fleet-agent/internal/outbox"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/state/statetest"
	"github.com/fleet-agent/fleet-agent/internal/testutil/gitserver"
)

// The end-to-end tests of the agent on GitHub: a real git server, the
// GitHub emulator driven through the real forge and outbox, a real bbolt
// file, the agent wired as the binary wires it, on a fake clock.

const canaryToken = "ghp_CANARY_5f1e9d0c"

type secretsMap map[string]string

func (m secretsMap) Resolve(_ context.Context, ref string) (string, error) {
	if v, ok := m[ref]; ok {
		return v, nil
	}
	return "", errors.New("no secret " + ref)
}

type ghWorld struct {
	t     *testing.T
	srv   *gitserver.Server
	remo  *gitserver.Repo
	work  *gitserver.Work
	emu   *githubemu.Server
	gh    *githubemu.Repo
	clk   *clock.Fake
	store *state.Store
	repo  *gitsync.Repo
	box   *outbox.Outbox
	ag    *agent.Agent
	log   *syncBuffer
	// checks: the agent is a GitHub App (appKey its private key in PEM),
	// and it posts check runs beside its statuses.
	checks bool
	appKey string
	// policyPath is the agent's policy.path ("" for none).
	policyPath string
	// prune is the agent's prune.
	prune    bool
	interval time.Duration // the agent's poll interval, for a test that runs its loop
}

func newGHWorld(t *testing.T) *ghWorld {
	t.Helper()
	w := &ghWorld{t: t, srv: gitserver.Start(t), clk: clock.NewFake(time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)), log: &syncBuffer{}}
	w.remo = w.srv.NewRepo(t, "fleet")
	w.work = w.remo.Clone(t)
	w.emu = githubemu.New(t, githubemu.Options{Clock: w.clk})
	w.emu.AddToken(canaryToken, "fleet-bot")
	w.gh = w.emu.Repo("acme/fleet")
	w.store = statetest.Open(t)
	w.start()
	return w
}

// start wires a fresh agent and outbox over the same state file (a restart).
func (w *ghWorld) start() {
	t := w.t
	sec := secretsMap{"secret://git": w.srv.Password, "secret://gh": canaryToken}
	repo, err := gitsync.Open(gitsync.Config{URL: w.remo.URL, Auth: gitsync.Auth{Token: "secret://git"}, Secrets: sec, Dir: t.TempDir(), Clock: w.clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { repo.Close() })
	fc := forge.Config{Repository: "acme/fleet", APIURL: w.emu.URL(), Token: "secret://gh", Resolver: sec, Clock: w.clk}
	if w.checks {
		fc.Token, fc.App = "", &forge.App{ID: "4242", InstallationID: 77, PrivateKey: "secret://app-key"}
		sec["secret://app-key"] = w.appKey
	}
	g, err := forge.New(fc)
	if err != nil {
		t.Fatal(err)
	}
	log := zerolog.New(w.log)
	w.repo = repo
	// No spacing between sends: step drains the queue with Flush on a
	// clock that moves only when told to (the outbox's tests keep it).
	w.box = outbox.New(w.store, g.Poster(), outbox.Options{Clock: w.clk, Log: log, MinSpacing: outbox.NoSpacing})
	w.ag = agent.New(agent.Config{Branch: "main", RequireReviewedPlan: true, Prefix: "fleet-agent", Checks: w.checks, PolicyPath: w.policyPath, Prune: w.prune, Interval: w.interval},
		agent.Options{Store: w.store, Repo: repo, Forge: agentForge{g}, Outbox: w.box, Clock: w.clk, Log: log})
}

// push commits doc on branch and pushes it; the emulator learns the commit.
func (w *ghWorld) push(branch, doc, msg string) string {
	w.t.Helper()
	w.work.Write(w.t, "fleet.json", doc)
	sha := w.work.CommitAll(w.t, msg)
	w.work.Push(w.t, "--force", "HEAD:refs/heads/"+branch)
	w.gh.AddCommit(sha)
	return sha
}

// openPR pushes a branch from base and opens a pull request for it.
func (w *ghWorld) openPR(n int, base, doc string) string {
	w.t.Helper()
	w.work.Git(w.t, "checkout", "-q", "-B", "pr"+strconv.Itoa(n), base)
	sha := w.push("pr"+strconv.Itoa(n), doc, "change "+strconv.Itoa(n))
	w.remo.UpdateRef(w.t, "refs/pull/"+strconv.Itoa(n)+"/head", sha)
	w.gh.OpenPR(githubemu.PR{Number: n, HeadSHA: sha, HeadRef: "pr" + strconv.Itoa(n), BaseRef: "main", User: "alice"})
	return sha
}

// merge fast-forwards main to sha as GitHub's rebase merge does.
func (w *ghWorld) merge(n int, sha string) {
	w.t.Helper()
	w.work.Push(w.t, "--force", sha+":refs/heads/main")
	w.gh.MergePR(n, sha)
}

// step runs one iteration and delivers what it posted.
func (w *ghWorld) step() {
	w.t.Helper()
	_ = w.ag.Tick(w.t.Context())
	if err := w.box.Flush(w.t.Context()); err != nil {
		w.t.Fatalf("flush: %v", err)
	}
}

func (w *ghWorld) lastStatus(sha, ctx string) githubemu.Status {
	w.t.Helper()
	var last githubemu.Status
	for _, s := range w.gh.Statuses(sha) {
		if s.Context == "fleet-agent/"+ctx {
			last = s
		}
	}
	return last
}

func (w *ghWorld) applied() *state.Applied {
	w.t.Helper()
	var ap *state.Applied
	_ = w.store.View(func(tx *state.Tx) (err error) { ap, err = tx.Applied(); return })
	return ap
}

func (w *ghWorld) planComments(pr int) []githubemu.Comment {
	var out []githubemu.Comment
	for _, c := range w.gh.Comments(pr) {
		if strings.Contains(c.Body, "<!-- fleet-agent:plan -->") {
			out = append(out, c)
		}
	}
	return out
}

func (w *ghWorld) resultComments(pr int) []githubemu.Comment {
	var out []githubemu.Comment
	for _, c := range w.gh.Comments(pr) {
		if strings.Contains(c.Body, "<!-- fleet-agent:result:") {
			out = append(out, c)
		}
	}
	return out
}

const (
	emptyDoc = `{"version":1}`
	poolDoc  = `{"version":1,"sites":[{"name":"fra","kind":"shared","region":"eu"}],"pools":[{"name":"vps","site":"fra","class":"vps-host","ownerQuota":{"gpu":4}}]}`
	pool8Doc = `{"version":1,"sites":[{"name":"fra","kind":"shared","region":"eu"}],"pools":[{"name":"vps","site":"fra","class":"vps-host","ownerQuota":{"gpu":8}}]}`
	flvDoc   = `{"version":1,"flavors":[{"pool":"vps","name":"small","vcpu":2,"memoryGiB":4,"diskGiB":40}]}`
	badDoc   = `{"version":1,"sites":[{"name":"fra","kind":"huge","region":"eu"}]}`
	blockDoc = `{"version":1,"pools":[{"name":"lost","site":"nowhere","class":"vps-host"}]}`
)

func TestAgentOnGitHub(t *testing.T) {
	w := newGHWorld(t)
	w.work.Git(t, "checkout", "-q", "-B", "main")
	boot := w.push("main", emptyDoc, "an empty fleet")
	w.step()
	if ap := w.applied(); ap == nil || ap.Commit != boot || ap.AppliedBy != "agent" {
		t.Fatalf("the empty first tip is not followed: %+v", ap)
	}

	// A pull request: one comment and a plan success.
	head1 := w.openPR(1, boot, poolDoc)
	flvHead := w.openPR(4, boot, flvDoc) // needs the pool of #1: blocked until #1 is applied
	w.step()
	if c := w.planComments(1); len(c) != 1 || !strings.Contains(c[0].Body, head1) || !strings.Contains(c[0].Body, "+ pool vps") {
		t.Fatalf("plan comment on #1: %+v", c)
	}
	if s := w.lastStatus(head1, "plan"); s.State != "success" {
		t.Fatalf("plan status on #1: %+v", s)
	}
	if s := w.lastStatus(flvHead, "plan"); s.State != "failure" {
		t.Fatalf("#4 should be blocked before #1 lands: %+v", s)
	}

	// Push again: the same comment edited, a status on the new head.
	w.work.Git(t, "checkout", "-q", "pr1")
	head1b := w.push("pr1", pool8Doc, "owner keeps 8")
	w.remo.UpdateRef(t, "refs/pull/1/head", head1b)
	w.gh.PushHead(1, head1b)
	w.step()
	c := w.planComments(1)
	if len(c) != 1 || c[0].Edits != 1 || !strings.Contains(c[0].Body, head1b) {
		t.Fatalf("the plan comment was not edited in place: %+v", c)
	}
	if s := w.lastStatus(head1b, "plan"); s.State != "success" {
		t.Fatalf("status on the new head: %+v", s)
	}

	// An invalid document and a blocked plan: failure, with the pointer.
	bad := w.openPR(2, boot, badDoc)
	blocked := w.openPR(3, boot, blockDoc)
	w.step()
	if s := w.lastStatus(bad, "plan"); s.State != "failure" || !strings.Contains(s.Description, "/sites/0/kind") {
		t.Fatalf("invalid document status: %+v", s)
	}
	if c := w.planComments(2); len(c) != 1 || !strings.Contains(c[0].Body, "`/sites/0/kind`") {
		t.Fatalf("invalid document comment: %+v", c)
	}
	if s := w.lastStatus(blocked, "plan"); s.State != "failure" || !strings.Contains(s.Description, "blocked") {
		t.Fatalf("blocked plan status: %+v", s)
	}

	// Merge #1: applied on the merge commit, a result comment, and the
	// other pull requests planned again (#4 is no longer blocked).
	w.merge(1, head1b)
	w.step()
	if ap := w.applied(); ap == nil || ap.Commit != head1b || ap.AppliedBy != "agent (#1 by alice)" {
		t.Fatalf("merge not applied: %+v\n%s", ap, w.log.String())
	}
	if s := w.lastStatus(head1b, "apply"); s.State != "success" {
		t.Fatalf("apply status: %+v", s)
	}
	if r := w.resultComments(1); len(r) != 1 || !strings.Contains(r[0].Body, "Applied 3 call(s)") {
		t.Fatalf("result comment: %+v", r)
	}
	if s := w.lastStatus(flvHead, "plan"); s.State != "success" {
		t.Fatalf("#4 was not planned again after the apply: %+v", s)
	}

	// A direct push: refused, nothing applied, reported on the commit.
	w.work.Git(t, "checkout", "-q", "-B", "main", head1b)
	direct := w.push("main", poolDoc, "direct push")
	w.step()
	// GitHub may link a merge to its pull request a moment late: the agent
	// waits MergeLinkGrace before it calls the push direct, and says so at
	// once on the commit.
	if s := w.lastStatus(direct, "apply"); s.State != "pending" || !strings.Contains(s.Description, "waiting for GitHub to link") {
		t.Fatalf("while the grace runs the apply status should be pending and say why: %+v", s)
	}
	w.clk.Advance(agent.MergeLinkGrace + time.Second)
	w.step()
	if ap := w.applied(); ap.Commit != head1b {
		t.Fatal("a direct push was applied")
	}
	if s := w.lastStatus(direct, "apply"); s.State != "failure" || !strings.Contains(s.Description, "directly") {
		t.Fatalf("direct push status: %+v", s)
	}

	// A force-push that rewinds main: refused.
	w.work.Push(t, "--force", boot+":refs/heads/main")
	w.step()
	if s := w.lastStatus(boot, "apply"); s.State != "failure" || !strings.Contains(s.Description, "does not descend") {
		t.Fatalf("rewind status: %+v", s)
	}

	// A head merged before it was planned: refused and reported on the PR;
	// then applied by hand after review.
	w.work.Git(t, "checkout", "-q", "-B", "pr5", head1b)
	quick := w.push("pr5", strings.Replace(pool8Doc, `"gpu":8`, `"gpu":16`, 1), "merged at once")
	w.remo.UpdateRef(t, "refs/pull/5/head", quick)
	w.gh.OpenPR(githubemu.PR{Number: 5, HeadSHA: quick, HeadRef: "pr5", User: "bob"})
	w.merge(5, quick)
	w.work.Push(t, "--force", quick+":refs/heads/main")
	w.step()
	if ap := w.applied(); ap.Commit != head1b {
		t.Fatal("a head merged before it was planned was applied")
	}
	if r := w.resultComments(5); len(r) != 1 || !strings.Contains(r[0].Body, "before its plan was made") {
		t.Fatalf("refusal comment on #5: %+v\n%s", r, w.log.String())
	}
	p, _, err := w.ag.PlanCommit(t.Context(), quick)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.ag.ApplyCommit(t.Context(), quick, p.PlanHash, "ops@box"); err != nil {
		t.Fatalf("apply by hand: %v", err)
	}
	if ap := w.applied(); ap.Commit != quick || ap.AppliedBy != "ops@box" {
		t.Fatalf("by hand: %+v", ap)
	}
	if err := w.box.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	byHand := 0
	for _, c := range w.gh.Comments(5) {
		if strings.Contains(c.Body, "<!-- fleet-agent:by-hand:"+quick) && strings.Contains(c.Body, "Applied by hand by ops@box") {
			byHand++
		}
	}
	if byHand != 1 {
		t.Fatalf("%d by-hand result comments on #5", byHand)
	}

	// GitHub down for many polls: planning goes on, posts wait; afterwards
	// the final statuses and comments are right and none is duplicated.
	w.emu.SetOutage(true)
	w.work.Git(t, "checkout", "-q", "pr4")
	flvHead2 := w.push("pr4", `{"version":1,"flavors":[{"pool":"vps","name":"small","vcpu":4,"memoryGiB":4,"diskGiB":40}]}`, "bigger")
	w.remo.UpdateRef(t, "refs/pull/4/head", flvHead2)
	w.gh.PushHead(4, flvHead2)
	for range 5 {
		_ = w.ag.Tick(t.Context())
		_ = w.box.Flush(t.Context())
		w.clk.Advance(time.Minute)
	}
	w.emu.SetOutage(false)
	for range 20 {
		w.clk.Advance(5 * time.Minute)
		if err := w.box.Flush(t.Context()); err == nil {
			break
		}
	}
	// The pull request list is read again once GitHub is back.
	w.step()
	if s := w.lastStatus(flvHead2, "plan"); s.State != "success" {
		t.Fatalf("after the outage, status on #4's new head: %+v", s)
	}
	if c := w.planComments(4); len(c) != 1 || !strings.Contains(c[0].Body, flvHead2) {
		t.Fatalf("after the outage, #4's comments: %+v", c)
	}
	for _, s := range []string{head1b} {
		n := 0
		for _, st := range w.gh.Statuses(s) {
			if st.Context == "fleet-agent/apply" && st.State == "success" {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("apply success posted %d times on %s", n, s)
		}
	}

	// A restart: nothing is posted again, and an idle poll costs one
	// conditional request answered 304.
	w.start()
	w.step() // the first list after a restart has no ETag yet
	w.emu.ResetLog()
	w.step()
	reqs := w.emu.Requests()
	if len(reqs) != 1 || reqs[0].Status != 304 || reqs[0].Counted {
		t.Fatalf("an idle poll made %d request(s): %+v", len(reqs), reqs)
	}
	if r := w.resultComments(1); len(r) != 1 {
		t.Fatalf("result comment duplicated after restart: %d", len(r))
	}

	// No resolved secret anywhere GitHub shows.
	for pr := 1; pr <= 5; pr++ {
		for _, c := range w.gh.Comments(pr) {
			if strings.Contains(c.Body, canaryToken) || strings.Contains(c.Body, w.srv.Password) {
				t.Fatalf("a secret in a comment on #%d", pr)
			}
		}
	}
	if strings.Contains(w.log.String(), canaryToken) {
		t.Fatal("the GitHub token is in the log")
	}
}
