package agent_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleet-agent/fleet-agent/internal/agent"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/localapi"
	"github.com/fleet-agent/fleet-agent/internal/outbox"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

// A branch merged into main (its head is the tip or an ancestor) is no
// longer an open proposal, even if nobody deleted it.
func TestMergedBranchIsNoProposal(t *testing.T) {
	w := newWorld(t, agent.Config{})
	boot := w.commit(t, "main", docV1, "bootstrap")
	w.tick(t)
	w.work.Git(t, "checkout", "-B", "grow", boot)
	head := w.commit(t, "grow", docV2, "add a pool")
	w.work.Git(t, "checkout", "-B", "other", boot)
	other := w.commit(t, "other", docV3, "another idea")
	w.tick(t)
	if props, _ := w.agent.Proposals(); len(props) != 2 {
		t.Fatalf("two open branches, %d proposals: %+v", len(props), props)
	}
	w.work.Push(t, "--force", head+":refs/heads/main")
	w.tick(t)
	props, err := w.agent.Proposals()
	if err != nil || len(props) != 1 || props[0].Commit != other {
		t.Fatalf("after merging grow the proposals should be only other: %+v %v", props, err)
	}
}

// countingMetrics records the apply outcomes the agent reports.
type countingMetrics struct {
	mu      sync.Mutex
	applies map[string]int
}

func (m *countingMetrics) Poll(error, time.Duration, bool) {}
func (m *countingMetrics) Plan(error, time.Duration)       {}
func (m *countingMetrics) ForgeError()                     {}
func (m *countingMetrics) Drift(bool, error)               {}
func (m *countingMetrics) Apply(trigger, result string, _ time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.applies[trigger+"/"+result]++
}

// Every outcome of an apply is counted: refusals of the trust rules too.
func TestEveryApplyOutcomeIsCounted(t *testing.T) {
	w := newWorld(t, agent.Config{RequireReviewedPlan: true})
	m := &countingMetrics{applies: map[string]int{}}
	w.agent = agent.New(agent.Config{Branch: "main", RequireReviewedPlan: true}, agent.Options{Store: w.store, Repo: w.repo, Clock: w.clk, Log: zerolog.New(w.log), Metrics: m})
	boot := w.commit(t, "main", docV1, "unreviewed")
	w.tick(t)
	w.tick(t)
	if m.applies["tip/refused"] != 1 {
		t.Fatalf("an unreviewed tip refused once should count once: %v", m.applies)
	}
	p, _, err := w.agent.PlanCommit(t.Context(), boot)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.agent.ApplyCommit(t.Context(), boot, strings.Repeat("0", 64), "ops@box"); err == nil {
		t.Fatal("a wrong hash applied")
	}
	if _, _, err := w.agent.ApplyCommit(t.Context(), boot, p.PlanHash, "ops@box"); err != nil {
		t.Fatal(err)
	}
	if m.applies["hand/refused"] != 1 || m.applies["hand/applied"] != 1 {
		t.Fatalf("applies by hand: %v", m.applies)
	}
	// A force-push is refused and counted.
	w.work.Git(t, "checkout", "--orphan", "rewritten")
	w.work.Write(t, "fleet.json", docV1)
	w.work.CommitAll(t, "history rewritten")
	w.work.Push(t, "--force", "HEAD:refs/heads/main")
	w.tick(t)
	if m.applies["tip/refused"] != 2 {
		t.Fatalf("the rewind was not counted: %v\n%s", m.applies, w.log.String())
	}
}

// recordingSource remembers the fleets its plans were made against.
type recordingSource struct {
	mu    sync.Mutex
	fleet []int
}

func (s *recordingSource) For(snap *inventory.Snapshot) plan.Checks {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fleet = append(s.fleet, snap.Len())
	return plan.Offline{}
}

// The socket's plan of a document sees the fleet the way every other route
// does (the agent's own live source, given the fleet it plans against), and
// the adapters behind that source are opened once, by the binary, not per
// request.
func TestPlanDocumentRouteSeesTheFleet(t *testing.T) {
	w := newWorld(t, agent.Config{})
	src := &recordingSource{}
	w.agent = agent.New(agent.Config{Branch: "main"}, agent.Options{Store: w.store, Repo: w.repo, Clock: w.clk, Log: zerolog.New(w.log), Live: src})
	w.commit(t, "main", docV2, "a pool")
	w.tick(t)
	srv := httptest.NewServer(localapi.Handler(w.agent, w.store))
	t.Cleanup(srv.Close)
	body, _ := json.Marshal(localapi.PlanDocumentRequest{Name: "fleet.json", Document: []byte(docV3)})
	for range 3 {
		resp, err := http.Post(srv.URL+"/v1/plan-document", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var pr localapi.PlanResponse
		if err := json.NewDecoder(resp.Body).Decode(&pr); err != nil || resp.StatusCode != 200 {
			t.Fatalf("%d %v", resp.StatusCode, err)
		}
		resp.Body.Close()
		if !strings.Contains(pr.Output, "~ ownerQuota vps:gpu (max)") {
			t.Fatalf("the route did not plan against the fleet:\n%s", pr.Output)
		}
	}
	src.mu.Lock()
	defer src.mu.Unlock()
	// The apply planned once (the tip), each request once more: all against
	// the fleet as the store holds it.
	if len(src.fleet) != 4 || src.fleet[3] != src.fleet[1] || src.fleet[1] == 0 {
		t.Fatalf("plans were made against fleets of %v objects", src.fleet)
	}
}

// The local API has one decoder: an unknown field, a second value, a body
// over the limit are INVALID_INPUT with one error shape.
func TestLocalAPIRefusesBadRequests(t *testing.T) {
	w := newWorld(t, agent.Config{})
	srv := httptest.NewServer(localapi.Handler(w.agent, w.store))
	t.Cleanup(srv.Close)
	for name, body := range map[string]string{
		"unknown field": `{"commit":"abc","colour":"blue"}`,
		"two values":    `{"commit":"abc"}{"commit":"def"}`,
		"not JSON":      `commit=abc`,
		"too big":       `{"commit":"` + strings.Repeat("a", 33<<20) + `"}`,
	} {
		resp, err := http.Post(srv.URL+"/v1/plan", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var e struct{ Code, Message string }
		_ = json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || e.Code != "INVALID_INPUT" || !strings.HasPrefix(e.Message, "bad request") {
			t.Errorf("%s: %d %+v", name, resp.StatusCode, e)
		}
	}
}

// posts records what the agent queues for GitHub.
type posts struct {
	mu  sync.Mutex
	all []outbox.Post
}

func (p *posts) Enqueue(_ *state.Tx, post outbox.Post) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.all = append(p.all, post)
	return nil
}

func (p *posts) statuses(sha, ctx string) []outbox.Post {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []outbox.Post
	for _, x := range p.all {
		if x.Kind == outbox.KindStatus && x.SHA == sha && x.Context == ctx {
			out = append(out, x)
		}
	}
	return out
}

// While GitHub cannot say which pull request merged a tip, the tip waits
// and its apply status says so at once, posted once however many polls it
// waits; when GitHub answers, the wait ends.
func TestApplyStatusWhileGitHubIsDown(t *testing.T) {
	w := newWorld(t, agent.Config{})
	f := &flakyForge{down: true}
	box := &posts{}
	ag := agent.New(agent.Config{Branch: "main", RequireReviewedPlan: true}, agent.Options{Store: w.store, Repo: w.repo, Forge: f, Outbox: box, Clock: w.clk, Log: zerolog.New(w.log)})
	tip := w.commit(t, "main", docV1, "merged by #7")
	for range 3 {
		_ = ag.Tick(t.Context())
	}
	st := box.statuses(tip, "apply")
	if len(st) != 1 || st[0].State != "pending" || !strings.Contains(st[0].Description, "waiting for GitHub to say which pull request merged") {
		t.Fatalf("apply statuses while GitHub is down: %+v", st)
	}
	f.mu.Lock()
	f.down = false
	f.mu.Unlock()
	_ = ag.Tick(t.Context())
	st = box.statuses(tip, "apply")
	last := st[len(st)-1]
	// #7's head was never planned: refused, with a status saying why.
	if last.State != "failure" || !strings.HasPrefix(last.Description, "unplanned merge; adopt: fleet-agent apply --commit "+tip[:12]+" --plan-hash ") {
		t.Fatalf("after GitHub came back: %+v", st)
	}
}

// A branch whose name holds control or direction characters (a U+202E that
// turns the rest of a line around, a line separator, a C1 escape) is not
// planned: its name would be shown by status, doctor and the page, where
// it could pass for another branch or forge a line. The log says so once,
// with the name escaped; a branch with a plain name beside it is planned.
func TestBranchWithHostileNameIsNotPlanned(t *testing.T) {
	w := newWorld(t, agent.Config{})
	boot := w.commit(t, "main", docV1, "bootstrap")
	w.tick(t)
	w.work.Git(t, "checkout", "-B", "grow", boot)
	head := w.commit(t, "grow", docV2, "add a pool")
	for _, name := range []string{"x\u202eabc", "a\u2028b", "c\u009b31m"} {
		w.work.Push(t, head+":refs/heads/"+name)
	}
	w.tick(t)
	w.tick(t)
	props, err := w.agent.Proposals()
	if err != nil || len(props) != 1 || props[0].Ref != "refs/heads/grow" {
		t.Fatalf("proposals %+v %v", props, err)
	}
	if n := strings.Count(w.log.String(), "not planned"); n != 3 {
		t.Fatalf("%d log lines say a branch is not planned, want 3 (one per branch, once):\n%s", n, w.log.String())
	}
}

// A name asked for by plan --proposal is quoted in the refusal, its
// control and direction characters escaped, never echoed raw.
func TestPlanProposalQuotesTheNameAsked(t *testing.T) {
	w := newWorld(t, agent.Config{})
	w.commit(t, "main", docV1, "bootstrap")
	w.tick(t)
	_, _, err := w.agent.PlanProposal(t.Context(), "\x1b]0;X\x07\u202eevil")
	if err == nil || !strings.Contains(err.Error(), `"\x1b]0;X\a\u202eevil"`) || strings.ContainsAny(err.Error(), "\x1b\a\u202e") {
		t.Fatalf("the refusal: %v", err)
	}
}
