package ui

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/localapi"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/testutil/golden"
	"github.com/fleet-agent/fleet-agent/internal/webhooks"
)

// now is the page's clock in every golden: relative times are fixed.
var now = time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC)

func ms(d time.Duration) int64 { return now.Add(-d).UnixMilli() }

const (
	commitA = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
	commitB = "9e26dfeeb6e641a33dae4961196235bdb965b21b"
	hashA   = "sha256:5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef"
	canary  = "ghp_CANARY_PAGE_7d1c"
)

func base() *Fleet {
	return &Fleet{Tenant: "root", Repository: "https://github.com/acme/fleet.git", CommitURL: "https://github.com/acme/fleet/commit/", Branch: "main",
		LastPoll: now.Add(-20 * time.Second)}
}

func applied(f *Fleet) *Fleet {
	f.Applied = &localapi.AppliedView{PlanHash: hashA, Commit: commitA, AppliedBy: "agent", AppliedAt: ms(3 * time.Hour), CheckedAt: ms(4 * time.Minute)}
	f.Drift = &localapi.DriftView{Changes: json.RawMessage("[]"), Summary: json.RawMessage("{}"), PlanHash: hashA}
	f.Outbox = &Outbox{LastDelivery: now.Add(-3 * time.Hour)}
	f.Audit = []state.AuditRow{
		{Seq: 1, At: ms(3*time.Hour + time.Second), Who: "agent", Action: "call", Method: "pools.create", Params: json.RawMessage(`{"name":"vps"}`), PlanHash: hashA, Commit: commitA},
		{Seq: 2, At: ms(3 * time.Hour), Who: "agent", Action: "apply", PlanHash: hashA, Commit: commitA, Calls: 1},
	}
	return f
}

func changes(cs ...plan.Change) json.RawMessage {
	b, _ := json.Marshal(cs)
	return b
}

func i64(v int64) *int64 { return &v }

func substrateOf(pool, st, msg string, listed, joined, waiting int, since *int64, ops ...state.JournalOp) Substrate {
	var s Substrate
	s.Pool, s.PoolID, s.Account, s.Mode, s.State, s.Message = pool, "pool-"+pool, "sim", "create", st, msg
	s.Cluster.ID, s.Cluster.Location, s.Cluster.Version = "fake-cl-"+pool, "fake-east", "1.31"
	s.NodePools = append(s.NodePools, struct {
		Flavor string `json:"flavor"`
		Name   string `json:"name"`
		Status string `json:"status"`
		Nodes  int    `json:"nodes"`
	}{"cpu", "fa-" + pool + "-cpu", "running", listed})
	s.Nodes.Listed, s.Nodes.Joined = listed, joined
	s.WaitingToJoin.Count, s.WaitingToJoin.Since = waiting, since
	s.UpdatedAt = ms(30 * time.Second)
	s.Ops = ops
	return s
}

// situations are the fleets of issue 16, each a golden per page.
func situations() map[string]*Fleet {
	out := map[string]*Fleet{}

	// Fresh: the agent started, nothing applied yet.
	out["fresh"] = base()

	// In sync: applied after a merge, one applicable pull request open.
	f := applied(base())
	f.Proposals = []localapi.ProposalPage{{PR: 7, Proposal: localapi.Proposal{Ref: "refs/pull/7/head", Commit: commitB, PlanHash: hashA,
		Summary: plan.Summary{Create: 1, Update: 0, Delete: 0, Unchanged: 3}, Errors: []string{}},
		Lines: []string{"+ pool gpu", "1 to create, 0 to update, 0 to delete, 3 unchanged."}}}
	out["insync"] = f

	// Drifted: a break-glass edit changed two objects of two kinds.
	f = applied(base())
	f.Drift.Changes = changes(
		plan.Change{Kind: "flavor", Name: "gpu/small", Action: "update", Fields: []string{"vcpu"}},
		plan.Change{Kind: "ownerQuota", Name: "gpu:gpu", Action: "update", Fields: []string{"max"}},
		plan.Change{Kind: "flavor", Name: "gpu/large", Action: "update", Fields: []string{"memoryGiB"}})
	f.Audit = append(f.Audit, state.AuditRow{Seq: 3, At: ms(5 * time.Minute), Who: "ops@box", Action: "edit", Method: "flavors.update", Params: json.RawMessage(`{"name":"gpu/small","vcpu":8}`)})
	// The drift is proposed as a pull request, and two webhooks hear of
	// it: one delivers, one fails (hostile text escaped).
	f.Drift.Proposal = &localapi.DriftProposal{State: "open", Branch: "fleet-agent/drift-1a2b3c4d", PR: 12, Fields: 3, Unwritten: 1,
		MergeRefused: "merged into main at 9f8e7d6c5b4a, but the merge was refused (UNREVIEWED): its plan now makes 1 call(s)",
		Waiting:      "the tip 9f8e7d6c5b4a of main is not applied yet <script>alert(1)</script>"}
	held := now.Add(2 * time.Minute)
	f.Webhooks = []webhooks.Status{
		{ID: "wh-3d31bacb7186", Receiver: "https://hooks.example.com", Format: "cloudevents", Delivered: 4,
			Recent: []webhooks.Delivery{{ID: "e1", Type: "drifted", Subject: "fleet/root", At: now.Add(-5 * time.Minute), Code: 202}}},
		{ID: "wh-bb9f2788ca8e", Receiver: "env://SLACK_URL", Format: "slack", Failed: 2, Queued: 1, HeldUntil: &held, LastError: "HTTP 500",
			Failures: []webhooks.Delivery{{ID: "e2", Type: "drifted", Subject: "<b>fleet/root</b>", At: now.Add(-time.Minute), Code: 500, Error: "HTTP 500"}}},
	}
	out["drifted"] = f

	// Needs a person: a refused direct push, a blocked and an invalid
	// proposal, GitHub unreachable with posts waiting, a substrate in
	// error and one whose nodes have not joined for 20 minutes. Hostile
	// values in every free-text field are escaped by the template.
	f = applied(base())
	f.Drift.Blocked = true
	f.Drift.Changes = changes(plan.Change{Kind: "pool", Name: "vps", Action: "update", Fields: []string{"site"}, Blocked: "the site of a pool cannot change"})
	f.Refused = []localapi.Refused{
		{Commit: commitB, Code: "INVALID_STATE", Reason: "9e26dfeeb6e6 was never proposed: no one reviewed its plan", At: ms(time.Minute),
			PlanHash: hashA, Adopt: []string{"fleet-agent plan --commit " + commitB, "fleet-agent apply --commit " + commitB + " --plan-hash " + hashA}},
		{Commit: commitA, Code: "UNREVIEWED", Reason: "not applied: no proposal with this plan <b>was reviewed</b>", At: ms(2 * time.Minute)},
	}
	f.Proposals = []localapi.ProposalPage{
		{Proposal: localapi.Proposal{Ref: "refs/heads/bad-doc", Commit: commitB, Errors: []string{`/pools/0/site: unknown site "<script>alert(1)</script>"`}}},
		{PR: 9, Proposal: localapi.Proposal{Ref: "refs/pull/9/head", Commit: commitA, PlanHash: hashA, Blocked: true,
			Summary: plan.Summary{Update: 1, Unchanged: 2, Blocked: 1}, Errors: []string{}},
			Lines: []string{"! pool vps (site): the site of a pool cannot change", "0 to create, 1 to update, 0 to delete, 2 unchanged.", "1 blocked."}},
	}
	f.Outbox = &Outbox{Waiting: 3, Oldest: now.Add(-42 * time.Minute), LastError: "POST /repos/acme/fleet/statuses: 502 Bad Gateway", LastErrorAt: now.Add(-time.Minute), LastDelivery: now.Add(-50 * time.Minute)}
	f.Substrates = []Substrate{
		substrateOf("k8s", "error", `node pool fa-k8s-h100: quota exceeded for "nvidia-h100" in fake-east <img src=x onerror=alert(1)>`, 2, 2, 0, nil,
			state.JournalOp{Step: "createNodePool", Object: "fa-k8s-h100", State: state.Failed, Attempts: 3, LastError: &state.OpError{Class: "quota", Message: "quota exceeded\x1b]0;owned\x07 \u202ein 3 regions\u2028\r\nok"}, UpdatedAt: ms(2 * time.Minute)}),
		substrateOf("edge", "ready", "ready; 3 node(s) waiting to join for 20m; look at DaemonSet fleet-node/fleet-node", 3, 0, 3, i64(ms(20*time.Minute))),
	}
	// Each step's condition, the failing one's message escaped like the rest.
	f.Substrates[0].Conditions = []Condition{{Type: "Account", Status: "True", Reason: "AccountFound"}, {Type: "Cluster", Status: "True", Reason: "ClusterRunning"},
		{Type: "NodePools", Status: "False", Reason: "NodePoolError", Message: `flavor h100: quota exceeded <img src=x onerror=alert(1)>`}}
	out["attention"] = f

	// Substrates coming up: creating, with the journal's operations.
	// Each joined node connected or not (a name the page must escape).
	f = applied(base())
	coming := substrateOf("k8s", "creating", "waiting for the node daemon", 3, 2, 1, i64(ms(2*time.Minute)),
		state.JournalOp{Step: "createNodePool", Object: "fa-k8s-cpu", State: state.Accepted, Attempts: 1, UpdatedAt: ms(40 * time.Second)},
		state.JournalOp{Step: "createCluster", Object: "fa-k8s-000001", State: state.Succeeded, Attempts: 2, UpdatedAt: ms(3 * time.Minute)})
	coming.Nodes.Connected = 1
	coming.JoinedNodes = []JoinedNode{{Name: "gpu-node-1", Connected: true, LastSeen: ms(15 * time.Second)},
		{Name: "<b>gpu-node-2</b>", Connected: false, LastSeen: ms(20 * time.Minute)}}
	coming.Conditions = []Condition{{Type: "Cluster", Status: "True", Reason: "ClusterRunning"},
		{Type: "NodePools", Status: "Unknown", Reason: "NodePoolProvisioning", Message: "flavor cpu: node pool fa-k8s-cpu is provisioning"}}
	f.Substrates = []Substrate{coming}
	out["substrates"] = f

	// A standby on an etcd store: it says who leads (escaped like every field).
	standby := applied(base())
	standby.Store = &localapi.StoreView{Backend: "etcd", Agent: "ops-2", Leader: "<i>ops-1</i>"}
	out["standby"] = standby
	return out
}

// shows are the pages that show each situation (the others add nothing a
// golden of another situation does not already hold).
var shows = map[string][]string{
	"fresh":      {"", "proposals", "substrates", "audit"},
	"insync":     {"", "proposals", "audit"},
	"drifted":    {"", "audit?kind=edit"},
	"attention":  {"", "proposals", "substrates"},
	"substrates": {"substrates"},
	"standby":    {""},
}

// TestPages renders the pages of every situation against their golden HTML
// (testdata/, rewritten with -update).
func TestPages(t *testing.T) {
	for name, f := range situations() {
		srv := httptest.NewServer(Handler(Options{Read: func(context.Context) (*Fleet, error) { c := *f; return &c, nil },
			Clock: clock.NewFake(now)}))
		t.Cleanup(srv.Close)
		for _, page := range shows[name] {
			file := name + "-" + strings.ReplaceAll(page, "?kind=", "-")
			if page == "" {
				file = name + "-overview"
			}
			t.Run(file, func(t *testing.T) {
				body, resp := get(t, srv.URL+"/ui/"+page)
				if resp.StatusCode != 200 {
					t.Fatalf("%d: %s", resp.StatusCode, body)
				}
				if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
					t.Errorf("no content security policy: %q", csp)
				}
				if strings.Contains(body, "<script>alert") || strings.Contains(body, "<img src=x") || strings.Contains(body, "<b>was") {
					t.Errorf("a value was not escaped:\n%s", body)
				}
				// Words from outside (a provider's error) reach the page
				// as plain text: no terminal or direction control, no line
				// separator, no carriage return.
				if i := strings.IndexAny(body, "\x1b\x07\r\u202e\u2028"); i >= 0 {
					t.Errorf("a control character reached the page: %q", body[max(0, i-60):min(len(body), i+60)])
				}
				golden.Check(t, filepath.Join("testdata", file+".html"), []byte(body))
			})
		}
	}
}

func get(t *testing.T, url string) (string, *http.Response) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), "GET", url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b), resp
}

// TestReadOnly: nothing but GET (and HEAD) is answered, so no request to
// the page can change anything.
func TestReadOnly(t *testing.T) {
	srv := httptest.NewServer(Handler(Options{Read: func(context.Context) (*Fleet, error) { return base(), nil }}))
	t.Cleanup(srv.Close)
	for _, method := range []string{"POST", "PUT", "DELETE", "PATCH"} {
		for _, page := range []string{"", "proposals", "audit", "static/style.css"} {
			req, _ := http.NewRequestWithContext(t.Context(), method, srv.URL+"/ui/"+page, strings.NewReader("x"))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusMethodNotAllowed {
				t.Errorf("%s /ui/%s answered %d", method, page, resp.StatusCode)
			}
		}
	}
	for _, page := range []string{"static/style.css", "static/refresh.js"} {
		if body, resp := get(t, srv.URL+"/ui/"+page); resp.StatusCode != 200 || len(body) < 100 {
			t.Errorf("/ui/%s: %d", page, resp.StatusCode)
		}
	}
	if _, resp := get(t, srv.URL+"/ui/nothing-here"); resp.StatusCode != 404 {
		t.Errorf("an unknown page answered %d", resp.StatusCode)
	}
}

// TestCommitURL: links go to the forge's web view, never carry a
// credential, and are absent for a remote that has no web view.
func TestCommitURL(t *testing.T) {
	for _, c := range []struct{ git, repo, api, want string }{
		{"https://github.com/acme/fleet.git", "acme/fleet", "", "https://github.com/acme/fleet/commit/"},
		{"https://github.com/acme/fleet.git", "acme/fleet", "https://api.github.com/", "https://github.com/acme/fleet/commit/"},
		{"https://ghe.example.com/acme/fleet.git", "acme/fleet", "https://ghe.example.com/api/v3/", "https://ghe.example.com/acme/fleet/commit/"},
		{"https://gitlab.example.com/acme/fleet.git", "", "", "https://gitlab.example.com/acme/fleet/commit/"},
		{"/srv/git/fleet.git", "", "", ""},
		{"ssh://git@example.com/acme/fleet.git", "", "", ""},
	} {
		if got := CommitURL(c.git, c.repo, c.api); got != c.want {
			t.Errorf("CommitURL(%q, %q, %q) = %q, want %q", c.git, c.repo, c.api, got, c.want)
		}
	}
}

// TestAttention: what needs a person, and only that.
func TestAttention(t *testing.T) {
	for _, c := range []struct {
		name string
		want []string
	}{
		{"fresh", nil},
		{"insync", nil},
		{"drifted", nil},
		{"attention", []string{"was never proposed", "was not applied", "plan is blocked", "branch bad-doc is invalid", "pull request #9 is blocked", "pool k8s is in error", "3 nodes of pool edge have not joined for 20 min"}},
		{"substrates", nil}, // two nodes wait, but for 2 minutes only
	} {
		t.Run(c.name, func(t *testing.T) {
			f := situations()[c.name]
			f.Now = now
			got := f.Attention()
			if len(got) != len(c.want) {
				t.Fatalf("%d items, want %d: %+v", len(got), len(c.want), got)
			}
			for i, w := range c.want {
				if !strings.Contains(got[i].What, w) || got[i].Do == "" {
					t.Errorf("item %d = %+v, want %q with what to do", i, got[i], w)
				}
			}
			// A refusal that can be adopted says the exact commands.
			for i, r := range f.Refused {
				for _, cmd := range r.Adopt {
					if !strings.Contains(got[i].Do, cmd) {
						t.Errorf("item %d says %q, want the command %q", i, got[i].Do, cmd)
					}
				}
			}
		})
	}
}

// TestAttentionAgreesWithDoctor: what doctor fails on, the page lists
// too: an invalid proposal, a proposal the policy denies, a substrate
// whose Nodes never join for want of a node daemon; and a refused tip
// gets doctor's advice for its cause.
func TestAttentionAgreesWithDoctor(t *testing.T) {
	f := situations()["substrates"]
	f.Now = now
	f.NoNodeDaemon = true
	f.Refused = []localapi.Refused{{Commit: "0123456789abcdef0123456789abcdef01234567", Code: "PLAN_BLOCKED",
		Reason: `policy rule "no-h100" (policy.yaml@abc) denies the plan: no H100`}}
	f.Proposals = []localapi.ProposalPage{
		{Proposal: localapi.Proposal{Ref: "refs/heads/broken", Commit: "1111111111111111", Errors: []string{"fleet.json:/pools/0/gpus: must be at least 0"}}},
		{Proposal: localapi.Proposal{Ref: "refs/heads/more-h100", Commit: "2222222222222222", Errors: []string{}, Denied: []string{"deny no-h100: H100 pools need a budget"}}},
	}
	var what, do []string
	for _, a := range f.Attention() {
		what, do = append(what, a.What), append(do, a.Do)
	}
	all := strings.Join(what, "\n")
	for _, w := range []string{"branch broken is invalid", "policy denies the plan of branch more-h100: deny no-h100", "never join: substrate.nodeDaemon is not configured"} {
		if !strings.Contains(all, w) {
			t.Errorf("no %q in\n%s", w, all)
		}
	}
	if !strings.Contains(do[0], "new commit") || strings.Contains(do[0], "apply --commit") {
		t.Errorf("a policy denial's advice is %q: want a new commit, not an apply by hand", do[0])
	}
	if !strings.Contains(strings.Join(do, "\n"), "restart") {
		t.Errorf("the node daemon's advice does not say a restart applies it: %q", do)
	}
	srv := httptest.NewServer(Handler(Options{Read: func(context.Context) (*Fleet, error) { c := *f; return &c, nil }, Clock: clock.NewFake(now)}))
	t.Cleanup(srv.Close)
	body, _ := get(t, srv.URL+"/ui/proposals")
	if !strings.Contains(body, "denied by policy") || !strings.Contains(body, "deny no-h100") {
		t.Errorf("the proposals page does not say the policy denies more-h100:\n%s", body)
	}
	overview, _ := get(t, srv.URL+"/ui/")
	if strings.Contains(overview, "Nothing needs a person") {
		t.Errorf("the overview says nothing needs a person:\n%s", overview)
	}
}
