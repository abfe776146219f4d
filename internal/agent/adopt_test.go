package agent_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/rs/zerolog"

	"github.com/fleet-agent/fleet-agent/internal/agent"
	"github.com/fleet-agent/fleet-agent/internal/outbox"
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
			srv := httptest.NewServer(ag.Handler())
			defer srv.Close()
			resp, err := http.Get(srv.URL + "/v1/status")
			if err != nil {
				t.Fatal(err)
			}
			var st agent.StatusView
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
