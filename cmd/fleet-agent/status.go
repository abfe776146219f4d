package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleet-agent/fleet-agent/internal/agent"
	"github.com/fleet-agent/fleet-agent/internal/localapi"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/refs"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/textline"
	"github.com/fleet-agent/fleet-agent/internal/webhooks"
)

func (a *app) statusCommand() *cobra.Command {
	var failOnDrift bool
	var output string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the applied document, the drift and the proposals",
		Long: `Shows the applied document, the drift and the proposals. Through a running
agent the drift is the agent's last check; with the state file to itself, status
plans the applied document again now, so a break-glass edit shows at once.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := textOrJSON(output); err != nil {
				return err
			}
			cfg, err := a.loadConfig()
			if err != nil {
				return err
			}
			var v localapi.StatusView
			if client := a.agentClient(cmd.Context(), cfg); client != nil {
				if err := client.Do(cmd.Context(), "GET", "/v1/status", nil, &v); err != nil {
					return err
				}
			} else {
				s, err := a.openRead(cmd.Context(), cfg)
				if err != nil {
					return err
				}
				live, err := a.liveSource(cfg, false)
				if err != nil {
					s.Close()
					return err
				}
				ctx, cancel := context.WithTimeout(cmd.Context(), time.Minute)
				v, err = agent.StatusNow(ctx, s, live, agent.NowOptions{Tenant: cfg.Tenant, MaxTeardowns: &cfg.Apply.MaxTeardowns})
				cancel()
				if hooks := hooksOf(cfg); err == nil && len(hooks) > 0 {
					err = s.View(func(tx *state.Tx) (err error) { v.Webhooks, err = webhooks.Statuses(tx, hooks); return })
				}
				s.Close()
				if err != nil {
					return err
				}
			}
			if output == "json" {
				if err := a.printJSON(v); err != nil {
					return err
				}
			} else {
				a.statusText(v)
			}
			if failOnDrift && v.Drift != nil && agent.Drifted(&state.Drift{Changes: v.Drift.Changes, Blocked: v.Drift.Blocked, Error: v.Drift.Error}) {
				return refusal.New(refusal.FleetDrifted, "the fleet has drifted from the applied document")
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&failOnDrift, "fail-on-drift", false, "exit FLEET_DRIFTED while drift is recorded")
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text or json")
	return cmd
}

// statusText prints the status as text. Its lines quote the document, the
// fleet and providers' errors (a drift's values, a refusal's reason): each
// print is plain text ending at most in its own line break, so whatever
// they hold stays inside its line.
func (a *app) statusText(v localapi.StatusView) {
	a.writeStatusText(plainWriter{a.stdout}, v)
}

// plainWriter writes each Write as textline.Plain gives it, keeping one
// line break at its end: a print of one line, or a part of one, stays so.
type plainWriter struct{ w io.Writer }

func (p plainWriter) Write(b []byte) (int, error) {
	s, nl := strings.CutSuffix(string(b), "\n")
	s = textline.Plain(s)
	if nl {
		s += "\n"
	}
	if _, err := io.WriteString(p.w, s); err != nil {
		return 0, err
	}
	return len(b), nil
}

func (a *app) writeStatusText(w io.Writer, v localapi.StatusView) {
	fmt.Fprintf(w, "tenant: %s\n", v.TenantID)
	for _, warn := range v.Warnings {
		fmt.Fprintf(w, "warning: %s\n", warn)
	}
	if st := v.Store; st != nil {
		role := "standing by"
		if st.Leading {
			role = "leading"
		}
		leader := st.Leader
		if leader == "" {
			leader = "none (an election is under way)"
		}
		fmt.Fprintf(w, "store: %s, agent %s %s, leader %s\n", st.Backend, st.Agent, role, leader)
	}
	if v.Installation != "" {
		fmt.Fprintf(w, "installation: %s\n", v.Installation)
	}
	if v.Applied == nil {
		fmt.Fprintln(w, "applied: nothing yet")
	} else {
		ap := v.Applied
		commit := ""
		if ap.Commit != "" {
			commit = " from commit " + ap.Commit
		}
		fmt.Fprintf(w, "applied: plan %s%s by %s at %s (prune %v)\n", ap.PlanHash, commit, ap.AppliedBy, ms(ap.AppliedAt), ap.Prune)
		dr := v.Drift
		when := "checked at " + ms(ap.CheckedAt)
		if dr != nil && dr.Now {
			when = "checked now"
		}
		switch {
		case dr == nil:
			fmt.Fprintln(w, "drift: not checked since the apply")
		case dr.Error != "" && !agent.Drifted(&state.Drift{Changes: dr.Changes, Blocked: dr.Blocked}):
			fmt.Fprintf(w, "drift: the check (%s) failed: %s\n", when, dr.Error)
		case !agent.Drifted(&state.Drift{Changes: dr.Changes, Blocked: dr.Blocked}):
			fmt.Fprintf(w, "drift: none (%s)\n", when)
		default:
			fmt.Fprintf(w, "drift: %d change(s) (%s)\n", agent.DriftCount(dr.Changes), when)
			for _, c := range driftRows(dr.Changes, true) {
				fmt.Fprintln(w, "  "+c.Line())
			}
			if dr.Error != "" {
				fmt.Fprintf(w, "  (the last check failed: %s)\n", dr.Error)
			}
		}
		// Rows kept for a note are not drift (docs/drift.md): said apart.
		if dr != nil {
			for _, c := range driftRows(dr.Changes, false) {
				fmt.Fprintf(w, "  note, not drift: %s: %s\n", c.Line(), c.Note)
			}
		}
	}
	if p := driftProposalOf(v); p != nil {
		pr := ""
		if p.PR > 0 {
			pr = fmt.Sprintf(", pull request #%d", p.PR)
		}
		fmt.Fprintf(w, "drift proposal: branch %s%s, %s (%d value(s) written, %d the document cannot hold)\n", p.Branch, pr, p.State, p.Fields, p.Unwritten)
		if p.MergeRefused != "" && p.State == "open" {
			fmt.Fprintf(w, "  its merge was refused, so it stays open: %s\n", p.MergeRefused)
		}
		if p.Waiting != "" && (p.State == "open" || p.State == "none") {
			fmt.Fprintf(w, "  waiting: %s\n", p.Waiting)
		}
		// The description in short, while it stands (or, with none, why
		// none does): without GitHub nothing else shows it.
		if p.State != "open" && p.State != "none" {
			p = &localapi.DriftProposal{}
		}
		for _, d := range p.Values {
			fmt.Fprintf(w, "  writes %s %s: %s -> %s (%s)\n", d.Object, d.Field, valueOrNone(d.Document), valueOrNone(d.Fleet), strings.ReplaceAll(d.Source, "`", ""))
		}
		for _, d := range p.NotWritten {
			obj := d.Object
			if d.Field != "" {
				obj += " " + d.Field
			}
			fmt.Fprintf(w, "  not written: %s: %s (%s)\n", obj, d.Reason, strings.ReplaceAll(d.Source, "`", ""))
		}
	}
	if pv := v.Policy; pv != nil {
		if pv.Hash != "" {
			fmt.Fprintf(w, "policy: %s at %s, %d rule(s)\n", pv.Path, pv.Commit, pv.Rules)
		}
		if pv.Problem != "" {
			fmt.Fprintf(w, "policy: %s\n", pv.Problem)
		}
	}
	for _, r := range v.Refused {
		fmt.Fprintf(w, "refused: commit %s of the branch (%s): %s\n", r.Commit, r.Code, r.Reason)
		for i, c := range r.Adopt {
			lead := "  then:  "
			if i == 0 {
				lead = "  adopt: "
			}
			fmt.Fprintln(w, lead+c)
		}
	}
	if im := v.NodeDaemonImage; im != nil {
		switch {
		case im.Pinned && im.Reason == "":
			fmt.Fprintf(w, "node daemon image: %s (pinned, from the %s)\n", im.Image, im.Source)
		case im.Pinned:
			fmt.Fprintf(w, "node daemon image: %s (pinned by the recorded digest; the registry could not be asked: %s)\n", im.Image, im.Reason)
		default:
			fmt.Fprintf(w, "node daemon image: %s (not pinned: %s: %s)\n", im.Image, im.Reason, im.Detail)
		}
	}
	for _, l := range v.Substrates {
		fmt.Fprintf(w, "substrate %s: %s", l.Pool, l.State)
		if l.Message != "" {
			fmt.Fprintf(w, " (%s)", l.Message)
		}
		fmt.Fprintf(w, ", nodes %d/%d joined, %d connected\n", l.Nodes.Joined, l.Nodes.Listed, l.Nodes.Connected)
		// Each joined node daemon, connected (a heartbeat within 90 s) or
		// not, as the page and the JSON show them.
		for _, n := range l.JoinedNodes {
			what := "not connected"
			if n.Connected {
				what = "connected"
			}
			fmt.Fprintf(w, "  node %s: %s (last seen %s)\n", n.Name, what, ms(n.LastSeen))
		}
	}
	for _, p := range v.Proposals {
		what := p.Summary.Counts()
		switch {
		case len(p.Errors) > 0:
			what = fmt.Sprintf("%d error(s): %s", len(p.Errors), p.Errors[0])
		case len(p.Denied) > 0:
			what = fmt.Sprintf("denied by the policy (%s); %s", p.Denied[0], what)
			if p.Blocked {
				what = fmt.Sprintf("denied by the policy (%s), blocked (%d); %s", p.Denied[0], p.Summary.Blocked, p.Summary.Counts())
			}
		case p.Blocked:
			what = fmt.Sprintf("blocked (%d); %s", p.Summary.Blocked, what)
		}
		fmt.Fprintf(w, "proposal %s at %s: %s\n", p.Ref, refs.Short(p.Commit), what)
	}
	webhooksText(w, v.Webhooks)
}

// valueOrNone names a value one side does not have.
func valueOrNone(v string) string {
	if v == "" {
		return "(none)"
	}
	return v
}

// driftRows is a drift record's rows that are drift (plan.Change.Drifts),
// or those that are not.
func driftRows(raw json.RawMessage, drifts bool) []plan.Change {
	var cs, out []plan.Change
	_ = json.Unmarshal(raw, &cs)
	for _, c := range cs {
		if c.Drifts() == drifts {
			out = append(out, c)
		}
	}
	return out
}
