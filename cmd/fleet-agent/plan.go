package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleet-agent/fleet-agent/internal/apply"
	"github.com/fleet-agent/fleet-agent/internal/config"
	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/localapi"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

// begin is what plan and apply do first: a FILE or --commit (which needs
// the running agent), the config, prune's default, and the agent's client
// when one runs.
func (a *app) begin(cmd *cobra.Command, args []string, commit string, prune *bool) (*config.Config, *localapi.Client, error) {
	if (len(args) == 1) == (commit != "") {
		return nil, nil, fmt.Errorf("give a FILE or --commit SHA")
	}
	cfg, err := a.loadConfig()
	if err != nil {
		return nil, nil, err
	}
	if !cmd.Flags().Changed("prune") {
		*prune = cfg.Apply.Prune
	}
	client := a.agentClient(cmd.Context(), cfg)
	if commit != "" && client == nil {
		flag := "--commit"
		if f := cmd.Flags().Lookup("proposal"); f != nil && f.Changed {
			flag = "--proposal"
		}
		return nil, nil, refusal.New(refusal.Unavailable, "%s needs the running agent (it reads the commit of %s from its repository); none answers on %s", flag, cfg.Git.Branch, cfg.Socket)
	}
	return cfg, client, nil
}

// planHere plans doc against a snapshot in this process, through the one
// planning pipeline, with the live checks of the config (or offline).
func planHere(ctx context.Context, cfg *config.Config, doc *fleet.Document, snap *inventory.Snapshot, prune bool, live plan.Source) (*plan.Plan, plan.Checks, error) {
	checks := live.For(snap)
	p, err := plan.For(ctx, doc, snap, checks, plan.Options{Tenant: cfg.Tenant, Prune: prune, MaxTeardowns: &cfg.Apply.MaxTeardowns})
	return p, checks, err
}

// agentSnapshot is the fleet a running agent holds, read from its
// consistent copy of the state (the backup route): the agent holds the
// state file, so this is how a command beside it sees each object as
// stored. The copy is a temporary file, removed before returning.
func agentSnapshot(ctx context.Context, client *localapi.Client) (*inventory.Snapshot, error) {
	dir, err := os.MkdirTemp("", "fleet-agent-snapshot-")
	if err != nil {
		return nil, refusal.Wrap(refusal.Internal, err, "cannot make a temporary directory for the agent's state; set TMPDIR to a writable one")
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "fleet.db")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, refusal.Wrap(refusal.Internal, err, "cannot write the agent's state to %s; set TMPDIR to a writable directory", dir)
	}
	err = client.Do(ctx, "GET", "/v1/backup", nil, f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, refusal.Wrap(refusal.Unavailable, err, "cannot read the running agent's fleet (its state copy); check the agent is up (fleet-agent status)")
	}
	s, err := state.Open(path, state.Options{ReadOnly: true})
	if err != nil {
		return nil, refusal.Wrap(refusal.Internal, err, "the running agent's state copy does not open")
	}
	defer s.Close()
	return s.Snapshot()
}

// planOutcome turns a plan into the exit status plan has.
func planOutcome(blocked bool, calls int, failOnDrift bool, what string) error {
	if blocked {
		return refusal.New(refusal.PlanBlocked, "the plan of %s has blocked changes; fix the document", what)
	}
	return driftOutcome(calls, failOnDrift, what)
}

// agentPlanOutcome is planOutcome of a plan the agent made, which says
// why it is blocked: a policy's denial is not a document to fix in place.
func agentPlanOutcome(resp localapi.PlanResponse, failOnDrift bool, what string) error {
	switch {
	case resp.Denied && resp.Proposal:
		return refusal.New(refusal.PlanBlocked, "a policy rule denies the plan of %s (its verdict is printed above); merged, it is refused: change the proposal until the policy allows it", what)
	case resp.Denied:
		return refusal.New(refusal.PlanBlocked, "a policy rule denies the plan of %s (its verdict is printed above); no apply takes it: make a new commit (a proposal) that the policy allows", what)
	}
	return planOutcome(resp.Blocked, resp.Calls, failOnDrift, what)
}

func driftOutcome(calls int, failOnDrift bool, what string) error {
	if failOnDrift && calls > 0 {
		return refusal.New(refusal.FleetDrifted, "%d call(s) would run: the fleet does not match %s", calls, what)
	}
	return nil
}

func (a *app) planCommand() *cobra.Command {
	var prune, calls, failOnDrift, offline bool
	var output, commit, policyFile, proposal string
	cmd := &cobra.Command{
		Use:   "plan FILE | --commit SHA | --proposal BRANCH",
		Short: "Show what applying a document would change",
		Long: `Plans FILE against the fleet (the state file and the live providers) and prints
one line per change, then the counts. Exits 1 with PLAN_BLOCKED when a change is
blocked, and with --fail-on-drift, FLEET_DRIFTED when any call would run.
With --policy FILE the plan is judged by that policy (docs/policy.md): each
rule's verdict is printed with the plan, and a broken deny rule exits 1 with
PLAN_BLOCKED.
With --proposal BRANCH (or #N for a pull request, or its head commit) the
running agent plans a proposal it has planned, as its pull request comment
shows it: the changes, the policy's verdicts and the blocked reasons; a
blocked or denied proposal exits 1 with PLAN_BLOCKED. --commit of a
proposal's head does the same.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			format, err := plan.ParseFormat(output)
			if err != nil {
				return fmt.Errorf("-o: %v", err)
			}
			if proposal != "" {
				if commit != "" || len(args) > 0 || policyFile != "" {
					return fmt.Errorf("--proposal plans a proposal on its own: leave out FILE, --commit and --policy")
				}
				commit = proposal
			}
			cfg, client, err := a.begin(cmd, args, commit, &prune)
			if err != nil {
				return err
			}
			if policyFile != "" {
				if commit != "" {
					return fmt.Errorf("--policy judges a FILE; the agent judges --commit by the policy of its branch")
				}
				return a.planWithPolicy(cmd, cfg, client, args[0], policyFile, format, planFlags{prune: prune, pruneSet: cmd.Flags().Changed("prune"),
					calls: calls, failOnDrift: failOnDrift, offline: offline})
			}
			var resp localapi.PlanResponse
			switch {
			case commit != "":
				req := localapi.PlanRequest{Commit: commit, Output: output, Calls: calls}
				if proposal != "" {
					req = localapi.PlanRequest{Proposal: proposal, Output: output, Calls: calls}
				}
				if err := client.Do(cmd.Context(), "POST", "/v1/plan", req, &resp); err != nil {
					return err
				}
				fmt.Fprint(a.stdout, resp.Output)
				if format == plan.Text {
					// json and markdown carry the hash; text says it, and
					// the command that applies exactly this plan.
					fmt.Fprintf(a.stdout, "planHash %s\n", resp.PlanHash)
					switch {
					case resp.Proposal && resp.Denied:
						fmt.Fprintf(a.stdout, "This is a proposal's plan and the policy denies it: merged into %s, the agent would refuse to apply it. Change the proposal (or the policy, in its own reviewed pull request).\n", cfg.Git.Branch)
					case resp.Proposal && resp.Blocked:
						fmt.Fprintf(a.stdout, "This is a proposal's plan and a change in it is blocked: merged into %s, the agent would refuse to apply it. Resolve what the plan says is blocked first.\n", cfg.Git.Branch)
					case resp.Proposal:
						fmt.Fprintf(a.stdout, "This is a proposal's plan: merging it into %s applies it (the agent plans it again then).\n", cfg.Git.Branch)
					case !resp.Blocked:
						fmt.Fprintf(a.stdout, "To apply exactly this plan:\n  %s apply --commit %s --plan-hash %s\n", a.prog, resp.Commit, resp.PlanHash)
					}
				}
				return agentPlanOutcome(resp, failOnDrift, resp.Commit)
			case client != nil:
				if _, err := a.readDocumentAs(args[0], format); err != nil {
					return err
				}
				data, _ := fleet.ReadFile(args[0])
				req := localapi.PlanDocumentRequest{Name: args[0], Document: data, Calls: calls, Output: output, Offline: offline}
				if cmd.Flags().Changed("prune") {
					req.Prune = &prune
				}
				if err := client.Do(cmd.Context(), "POST", "/v1/plan-document", req, &resp); err != nil {
					return err
				}
				fmt.Fprint(a.stdout, resp.Output)
				return agentPlanOutcome(resp, failOnDrift, args[0])
			}
			doc, err := a.readDocumentAs(args[0], format)
			if err != nil {
				return err
			}
			snap, err := a.snapshotForPlan(a.stateFile(cfg))
			if err != nil {
				return err
			}
			live, err := a.liveSource(cfg, offline)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Minute)
			defer cancel()
			p, _, err := planHere(ctx, cfg, doc, snap, prune, live)
			if err != nil {
				return err
			}
			err = p.Render(a.stdout, format, plan.RenderOptions{Calls: calls, Markdown: plan.MarkdownOptions{Branch: cfg.Git.Branch}})
			if err != nil {
				return refusal.Wrap(refusal.Internal, err, "cannot write the plan")
			}
			if p.Blocked() {
				return apply.Blocked(p)
			}
			return planOutcome(false, len(p.Calls), failOnDrift, args[0])
		},
	}
	cmd.Flags().BoolVar(&prune, "prune", false, "delete what the document leaves out (default: the config's apply.prune)")
	cmd.Flags().StringVar(&commit, "commit", "", "plan the document at this commit of the branch (through the running agent)")
	cmd.Flags().StringVar(&proposal, "proposal", "", "plan this proposal (a branch, #N, or its head commit) as its pull request comment shows it (through the running agent)")
	cmd.Flags().BoolVar(&calls, "calls", false, "print the calls after the counts")
	cmd.Flags().BoolVar(&failOnDrift, "fail-on-drift", false, "exit FLEET_DRIFTED when any call would run")
	cmd.Flags().BoolVar(&offline, "offline", false, "skip the live checks")
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text, json or markdown")
	cmd.Flags().StringVar(&policyFile, "policy", "", "judge the plan by this policy file (YAML or JSON)")
	return cmd
}
