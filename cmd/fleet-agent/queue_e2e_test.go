package main

import (
	"strconv"
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/agent"
	"github.com/fleet-agent/fleet-agent/internal/forge/githubemu"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

// queueRef is the ref GitHub's merge queue makes for pull request n queued
// on base.
func queueRef(n int, base string) string { return githubemu.QueueRef("main", n, base) }

// enqueue builds the queue entry of pull request n on base as GitHub does:
// a commit on base holding the merged document, under a gh-readonly-queue
// ref. It returns the entry's commit.
func (w *ghWorld) enqueue(n int, base, mergedDoc string) string {
	w.t.Helper()
	ref := queueRef(n, base)
	w.work.Git(w.t, "checkout", "-q", "--detach", base)
	w.work.Write(w.t, "fleet.json", mergedDoc)
	sha := w.work.CommitAll(w.t, "Merge pull request #"+strconv.Itoa(n)+" (merge queue)")
	w.work.Push(w.t, "--force", "HEAD:"+ref)
	w.gh.AddCommit(sha)
	return sha
}

// mergeQueued does what GitHub does when an entry's required checks pass:
// the branch moves to the entry's very commit, the pull request is merged
// by it, and the entry's ref goes.
func (w *ghWorld) mergeQueued(n int, base, sha string) {
	w.t.Helper()
	w.work.Push(w.t, "--force", sha+":refs/heads/main")
	w.gh.MergePR(n, sha)
	w.remo.DeleteRef(w.t, queueRef(n, base))
}

func (w *ghWorld) reviewedOf(sha string) (agent.Reviewed, bool) {
	var rv agent.Reviewed
	var found bool
	_ = w.store.View(func(tx *state.Tx) (err error) { found, err = tx.Get("reviewed", sha, &rv); return })
	return rv, found
}

const (
	queueDocA  = `{"version":1,"sites":[{"name":"fra","kind":"shared","region":"eu"}],"pools":[{"name":"a","site":"fra","class":"vps-host"}]}`
	queueDocB  = `{"version":1,"sites":[{"name":"fra","kind":"shared","region":"eu"}],"pools":[{"name":"b","site":"fra","class":"vps-host"}]}`
	queueDocAB = `{"version":1,"sites":[{"name":"fra","kind":"shared","region":"eu"}],"pools":[{"name":"a","site":"fra","class":"vps-host"},{"name":"b","site":"fra","class":"vps-host"}]}`
	queueDocX  = `{"version":1,"sites":[{"name":"fra","kind":"shared","region":"eu"}],"pools":[{"name":"a","site":"fra","class":"vps-host"},{"name":"b","site":"fra","class":"vps-host"},{"name":"lost","site":"nowhere","class":"vps-host"}]}`
)

// queueTwo starts w with an empty fleet, opens pull requests #1 and #2 and
// queues both (#2's entry holds #1's too, as GitHub builds it), planned.
func queueTwo(t *testing.T, w *ghWorld) (boot, q1, q2 string) {
	t.Helper()
	w.work.Git(t, "checkout", "-q", "-B", "main")
	boot = w.push("main", emptyDoc, "an empty fleet")
	w.step()
	w.openPR(1, boot, queueDocA)
	w.openPR(2, boot, queueDocB)
	w.openPR(3, boot, blockDoc)
	w.step()
	q1 = w.enqueue(1, boot, queueDocA)
	q2 = w.enqueue(2, q1, queueDocAB)
	w.step()
	return boot, q1, q2
}

// Two pull requests merged through the merge queue (the agent a GitHub App)
// are each applied once,
// with the plan recorded for their queue commits; a queue commit whose plan
// is blocked fails its check and is never applied, even when it lands.
func TestMergeQueue(t *testing.T) {
	w := newChecksWorld(t)
	boot, q1, q2 := queueTwo(t, w)
	for _, q := range []string{q1, q2} {
		if s := w.lastStatus(q, "plan"); s.State != "success" {
			t.Fatalf("plan status on the queue commit %s: %+v", q[:7], s)
		}
		if rv, ok := w.reviewedOf(q); !ok || !rv.Valid || !strings.Contains(rv.Ref, "gh-readonly-queue/main/") {
			t.Fatalf("no plan recorded for the queue commit %s: %+v", q[:7], rv)
		}
	}
	planComments := len(w.planComments(1))

	// #1 lands: the queue commit becomes the tip and is applied with the
	// queue's plan; #2's entry is planned again against the new fleet.
	rv1, _ := w.reviewedOf(q1)
	w.mergeQueued(1, boot, q1)
	w.step()
	if ap := w.applied(); ap == nil || ap.Commit != q1 || ap.PlanHash != rv1.PlanHash {
		t.Fatalf("#1 not applied with the queue's plan %s: %+v\n%s", rv1.PlanHash, ap, w.log)
	}
	rv2, _ := w.reviewedOf(q2)
	w.mergeQueued(2, q1, q2)
	w.step()
	if ap := w.applied(); ap == nil || ap.Commit != q2 || ap.PlanHash != rv2.PlanHash {
		t.Fatalf("#2 not applied with the queue's plan %s: %+v\n%s", rv2.PlanHash, ap, w.log)
	}
	w.step()
	for _, pr := range []int{1, 2} {
		if c := w.resultComments(pr); len(c) != 1 {
			t.Errorf("#%d has %d result comments, want 1 (applied once)", pr, len(c))
		}
	}
	if n := len(w.planComments(1)); n != planComments {
		t.Errorf("the queue touched #1's plan comment: %d, was %d", n, planComments)
	}

	// #3 queued with a blocked plan: its check fails.
	q3 := w.enqueue(3, q2, queueDocX)
	w.step()
	if s := w.lastStatus(q3, "plan"); s.State != "failure" {
		t.Fatalf("plan status on the blocked queue commit: %+v", s)
	}
	// The check run the queue waits for fails too, on the blocked pool.
	if c := lastCheck(t, w, q3, "plan"); c.Conclusion != "failure" || len(c.Annotations) != 1 || !strings.Contains(c.Annotations[0].Message, "nowhere") {
		t.Fatalf("plan check run on the blocked queue commit: %+v", c)
	}
	// A repository that does not require the check merges it anyway: the
	// agent refuses it.
	w.mergeQueued(3, q2, q3)
	w.step()
	w.step()
	if ap := w.applied(); ap == nil || ap.Commit != q2 {
		t.Fatalf("the blocked queue commit was applied: %+v", ap)
	}
	if s := w.lastStatus(q3, "apply"); s.State != "failure" || !strings.Contains(s.Description, "blocked") {
		t.Errorf("apply status on the blocked queue commit: %+v", s)
	}
}

// When the queue lands two entries at once, the branch moves straight to
// the later entry's commit, which holds both: it is applied once, with the
// plan the queue recorded for it (made against the fleet both were planned
// on).
func TestMergeQueueLandsTwoAtOnce(t *testing.T) {
	w := newGHWorld(t)
	boot, q1, q2 := queueTwo(t, w)
	rv2, ok := w.reviewedOf(q2)
	if !ok || !rv2.Valid {
		t.Fatalf("no plan recorded for %s", q2[:7])
	}
	w.work.Push(t, "--force", q2+":refs/heads/main")
	w.gh.MergePR(1, q1)
	w.gh.MergePR(2, q2)
	w.remo.DeleteRef(t, queueRef(1, boot))
	w.remo.DeleteRef(t, queueRef(2, q1))
	w.step()
	w.step()
	if ap := w.applied(); ap == nil || ap.Commit != q2 || ap.PlanHash != rv2.PlanHash {
		t.Fatalf("not applied with the queue's plan %s: %+v\n%s", rv2.PlanHash, ap, w.log)
	}
	if c := w.resultComments(2); len(c) != 1 {
		t.Errorf("#2 has %d result comments, want 1", len(c))
	}
	if s := w.lastStatus(q2, "apply"); s.State != "success" {
		t.Errorf("apply status %+v", s)
	}
}
