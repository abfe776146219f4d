package agent_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/rs/zerolog"

	"github.com/fleet-agent/fleet-agent/internal/agent"
	"github.com/fleet-agent/fleet-agent/internal/apply"
	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/localapi"
	"github.com/fleet-agent/fleet-agent/internal/outbox"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

// A tip of main that was never proposed is refused, and the refusal is
// recorded where a person looks (status, and the apply status and its check
// run on GitHub) with the exact commands that adopt it: the real commit and
// plan hash. Once adopted, status no longer lists it.
func TestNeverProposedTipSaysHowToAdoptIt(t *testing.T) {
	for _, tc := range []struct {
		name   string
		github bool
		reason string
	}{
		{"without GitHub", false, "was never proposed"},
		{"on GitHub, pushed directly", true, "was pushed to main directly"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, agent.Config{})
			box := &posts{}
			opts := agent.Options{Store: w.store, Repo: w.repo, Clock: w.clk, Log: zerolog.New(w.log)}
			cfg := agent.Config{Branch: "main", Tenant: "root", RequireReviewedPlan: true}
			if tc.github {
				opts.Forge, opts.Outbox, cfg.Checks = &deadlineForge{}, box, true
			}
			ag := agent.New(cfg, opts)
			tip := w.commit(t, "main", docV2, "the fleet as it is")
			_ = ag.Tick(t.Context())
			if tc.github { // GitHub is given MergeLinkGrace to link a merge
				w.clk.Advance(agent.MergeLinkGrace)
				_ = ag.Tick(t.Context())
			}
			p, _, err := ag.PlanCommit(t.Context(), tip)
			if err != nil {
				t.Fatal(err)
			}
			want := []string{"fleet-agent plan --commit " + tip, "fleet-agent apply --commit " + tip + " --plan-hash " + p.PlanHash}

			// What the socket serves (GET /v1/status), as status reads it.
			srv := httptest.NewServer(localapi.Handler(ag, w.store))
			defer srv.Close()
			resp, err := http.Get(srv.URL + "/v1/status")
			if err != nil {
				t.Fatal(err)
			}
			var st localapi.StatusView
			err = json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if len(st.Refused) != 1 {
				t.Fatalf("status lists %d refused commits, want 1: %+v\n%s", len(st.Refused), st.Refused, w.log.String())
			}
			r := st.Refused[0]
			if r.Commit != tip || r.Code != "INVALID_STATE" || r.PlanHash != p.PlanHash || strings.Join(r.Adopt, "\n") != strings.Join(want, "\n") ||
				!strings.Contains(r.Reason, tc.reason) || strings.Contains(r.Reason, "push the change to a branch") {
				t.Fatalf("refused record %+v, want commands %q", r, want)
			}
			if !strings.Contains(w.log.String(), p.PlanHash) {
				t.Errorf("the log does not name the plan hash:\n%s", w.log.String())
			}
			if tc.github {
				sts := box.statuses(tip, "apply")
				last := sts[len(sts)-1]
				wantDesc := "fleet-agent apply --commit " + tip[:12] + " --plan-hash " + p.PlanHash
				if last.State != "failure" || !strings.Contains(last.Description, wantDesc) || utf8.RuneCountInString(last.Description) > 140 {
					t.Fatalf("apply status %+v, want failure with %q in 140 code points", last, wantDesc)
				}
				var check *outbox.Post
				for _, x := range box.all {
					if x.Kind == outbox.KindCheck && x.SHA == tip && x.Context == "apply" {
						check = &x
					}
				}
				if check == nil || !strings.Contains(check.Body, want[0]) || !strings.Contains(check.Body, want[1]) {
					t.Fatalf("apply check run %+v, want both commands in its summary", check)
				}
			}

			// Adopted with the printed commands: applied, and no longer listed.
			if _, _, err := ag.ApplyCommit(t.Context(), tip, r.PlanHash, "ops@box"); err != nil {
				t.Fatal(err)
			}
			if st, _ = agent.Status(w.store, "root"); len(st.Refused) != 0 || st.Applied == nil || st.Applied.Commit != tip {
				t.Fatalf("after the adoption: refused %+v, applied %+v", st.Refused, st.Applied)
			}
		})
	}
}

// A proposal merged after the fleet changed under it is refused with what
// happened: the plan it was reviewed as, the plan it has now, and the change
// of the fleet since the review (when, what, by whom); without a change, that
// the merge itself brought more than the reviewed head.
func TestPlanMovedSaysWhatHappened(t *testing.T) {
	const docSite = `{"version":1,"sites":[{"name":"fra","kind":"shared","region":"eu"},{"name":"ams","kind":"shared","region":"eu"}],"pools":[{"name":"vps","site":"fra","class":"vps-host","ownerQuota":{"gpu":4}}]}`
	for _, tc := range []struct {
		name   string
		change func(t *testing.T, w *world) // between the review and the merge
		want   []string
		not    []string
	}{
		{"an edit", func(t *testing.T, w *world) {
			w.clk.Advance(time.Minute)
			if err := apply.ApplyEdit(w.store, apply.Edit{Kind: inventory.Pool, Name: "vps", Set: map[string]any{"gpuModel": "L4"}, Who: "ops@box", Now: w.clk.Now}); err != nil {
				t.Fatal(err)
			}
		}, []string{"because the fleet changed at 2026-11-01T00:01:00Z by an edit by ops@box"}, []string{"push the change to a branch"}},
		{"nothing changed, main moved", func(t *testing.T, w *world) {}, []string{"the fleet has not changed since the review"}, []string{"because the fleet changed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, agent.Config{RequireReviewedPlan: true})
			boot := w.commit(t, "main", docV2, "the fleet")
			w.tick(t)
			p, _, err := w.agent.PlanCommit(t.Context(), boot)
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := w.agent.ApplyCommit(t.Context(), boot, p.PlanHash, "ops@box"); err != nil {
				t.Fatal(err)
			}
			// A proposal, planned (reviewed) now.
			w.work.Git(t, "checkout", "-B", "grow", boot)
			head := w.commit(t, "grow", docV3, "8 GPUs")
			w.tick(t)
			props, _ := w.agent.Proposals()
			if len(props) != 1 || props[0].Commit != head {
				t.Fatalf("proposals %+v", props)
			}
			reviewed := props[0].PlanHash
			tc.change(t, w)
			merged := head
			if tc.name == "nothing changed, main moved" {
				// A merge commit that also adds a site the proposal never had.
				w.work.Git(t, "checkout", "-B", "main", boot)
				w.work.Write(t, "fleet.json", strings.Replace(docSite, `"gpu":4`, `"gpu":8`, 1))
				w.work.Git(t, "add", "fleet.json")
				tree := strings.TrimSpace(w.work.Git(t, "write-tree"))
				merged = strings.TrimSpace(w.work.Git(t, "commit-tree", "-p", boot, "-p", head, "-m", "merge grow", tree))
				w.work.Push(t, "--force", merged+":refs/heads/main")
			} else {
				w.work.Push(t, "--force", head+":refs/heads/main")
			}
			w.tick(t)
			if ap := w.applied(t); ap.Commit != boot {
				t.Fatalf("applied %s, want still %s:\n%s", ap.Commit, boot, w.log.String())
			}
			st, err := agent.Status(w.store, "")
			if err != nil || len(st.Refused) != 1 {
				t.Fatalf("refused %+v %v\n%s", st.Refused, err, w.log.String())
			}
			now, _, err := w.agent.PlanCommit(t.Context(), merged)
			if err != nil {
				t.Fatal(err)
			}
			r := st.Refused[0]
			want := append([]string{"was reviewed as " + reviewed[:12] + ", now " + now.PlanHash[:12]}, tc.want...)
			for _, s := range want {
				if !strings.Contains(r.Reason, s) {
					t.Errorf("reason %q lacks %q", r.Reason, s)
				}
			}
			for _, s := range tc.not {
				if strings.Contains(r.Reason, s) {
					t.Errorf("reason %q says %q", r.Reason, s)
				}
			}
			if len(r.Adopt) != 2 || r.PlanHash != now.PlanHash {
				t.Errorf("no commands to adopt it: %+v", r)
			}
		})
	}
}

// An apply by hand whose reviewed hash is no longer the plan names the last
// change of the fleet.
func TestApplyByHandNamesTheChange(t *testing.T) {
	w := newWorld(t, agent.Config{RequireReviewedPlan: true})
	tip := w.commit(t, "main", docV2, "the fleet")
	w.tick(t)
	p, _, err := w.agent.PlanCommit(t.Context(), tip)
	if err != nil {
		t.Fatal(err)
	}
	w.clk.Advance(time.Minute)
	// By hand on the state file: apply FILE records no commit.
	doc, errs := fleet.Validate("fleet.json", []byte(docV1))
	if errs != nil {
		t.Fatal(errs)
	}
	if _, err := apply.Apply(t.Context(), w.store, doc, apply.Options{AppliedBy: "alice@laptop", Prune: true, Now: w.clk.Now}); err != nil {
		t.Fatal(err)
	}
	_, _, err = w.agent.ApplyCommit(t.Context(), tip, p.PlanHash, "ops@box")
	if !refusal.Is(err, refusal.ConfigDrift) || !strings.Contains(err.Error(), "its last change: 2026-11-01T00:01:00Z by a hand apply of a file by alice@laptop") {
		t.Fatalf("apply of a moved plan: %v", err)
	}
}

// Open proposals are planned again whenever the applied fleet changes, not
// only when their head, the branch or the applied commit moves: after an
// edit, the proposal's recorded plan is the plan against the fleet as it is.
func TestProposalsFollowAFleetChange(t *testing.T) {
	w := newWorld(t, agent.Config{})
	w.commit(t, "main", docV2, "the fleet")
	w.tick(t)
	w.work.Git(t, "checkout", "-B", "grow")
	head := w.commit(t, "grow", docV3, "8 GPUs")
	w.tick(t)
	before, _ := w.agent.Proposals()
	w.clk.Advance(time.Minute)
	if err := apply.ApplyEdit(w.store, apply.Edit{Kind: inventory.Pool, Name: "vps", Set: map[string]any{"gpuModel": "L4"}, Who: "ops@box", Now: w.clk.Now}); err != nil {
		t.Fatal(err)
	}
	w.tick(t)
	after, _ := w.agent.Proposals()
	// The edit set a field the document leaves out: the proposal's plan
	// now also takes it off again, so its hash moved.
	if len(before) != 1 || len(after) != 1 || after[0].Commit != head || before[0].PlanHash == after[0].PlanHash || after[0].Summary.Update <= before[0].Summary.Update {
		t.Fatalf("proposal before the edit %+v, after %+v", before, after)
	}
}
