package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleet-agent/fleet-agent/internal/agent"
	"github.com/fleet-agent/fleet-agent/internal/apply"
	"github.com/fleet-agent/fleet-agent/internal/config"
	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/localapi"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/policy"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

type planFlags struct {
	prune, pruneSet, calls, failOnDrift, offline bool
}

// loadPolicy reads and compiles a policy file.
func loadPolicy(path string) (*policy.Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, refusal.Wrap(refusal.InvalidInput, err, "cannot read the policy %s", path)
	}
	pol, err := policy.Load(data)
	if err != nil {
		var r *refusal.Error
		if errors.As(err, &r) {
			return nil, &refusal.Error{Code: r.Code, Message: path + ": " + r.Message, Err: r.Err}
		}
		return nil, err
	}
	return pol, nil
}

// planWithPolicy plans FILE (in this process, or through the running agent
// when it holds the state file) and judges the plan by the policy file.
// Through the agent the plan comes back as JSON, and the changes' before
// is read from the agent's copy of its state (agentSnapshot), taken right
// after the plan.
func (a *app) planWithPolicy(cmd *cobra.Command, cfg *config.Config, client *localapi.Client, file, policyFile string, format plan.Format, f planFlags) error {
	pol, err := loadPolicy(policyFile)
	if err != nil {
		return err
	}
	doc, err := a.readDocumentAs(file, format)
	if err != nil {
		return err
	}
	data, _ := fleet.ReadFile(file)
	var p *plan.Plan
	var snap *inventory.Snapshot
	if client != nil {
		req := localapi.PlanDocumentRequest{Name: file, Document: data, Output: string(plan.JSON), Offline: f.offline}
		if f.pruneSet {
			req.Prune = &f.prune
		}
		var resp localapi.PlanResponse
		if err := client.Do(cmd.Context(), "POST", "/v1/plan-document", req, &resp); err != nil {
			return err
		}
		p = &plan.Plan{}
		if err := json.Unmarshal([]byte(resp.Output), p); err != nil {
			return refusal.Wrap(refusal.Internal, err, "the agent's plan is not the plan JSON")
		}
		if snap, err = agentSnapshot(cmd.Context(), client); err != nil {
			return err
		}
	} else {
		snap, err = a.snapshotForPlan(a.stateFile(cfg))
		if err != nil {
			return err
		}
		live, err := a.liveSource(cfg, f.offline)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Minute)
		defer cancel()
		if p, _, err = planHere(ctx, cfg, doc, snap, f.prune, live); err != nil {
			return err
		}
	}
	// Under the agent's own bounds, so that a plan the agent could not judge
	// is not shown here as passing.
	jctx, jcancel := context.WithTimeout(cmd.Context(), agent.PolicyDeadline)
	defer jcancel()
	var judged error
	p.Policy, _, judged = pol.Judge(jctx, policy.Input{Doc: doc, Data: data, Snap: snap, Plan: p, Tenant: cfg.Tenant}, policy.PlanCostBudget)
	p.Policy.Source = policyFile
	if err := p.Render(a.stdout, format, plan.RenderOptions{Calls: f.calls, Markdown: plan.MarkdownOptions{Branch: cfg.Git.Branch}}); err != nil {
		return refusal.Wrap(refusal.Internal, err, "cannot write the plan")
	}
	if p.Blocked() {
		return apply.Blocked(p)
	}
	if judged != nil {
		return refusal.New(refusal.PlanBlocked, "the policy could not judge the plan: %s; the agent refuses such a plan too: make the rules cheaper (docs/policy.md)", refusal.Text(judged))
	}
	if err := policyOutcome(p.Policy); err != nil {
		return err
	}
	return planOutcome(false, len(p.Calls), f.failOnDrift, file)
}

// policyOutcome is PLAN_BLOCKED when a deny rule is broken. An approve rule
// is reported and does not fail: the approval is given on the pull request.
func policyOutcome(r *plan.PolicyReport) error {
	for _, v := range r.Rules {
		if v.Verdict == plan.VerdictDeny {
			return refusal.New(refusal.PlanBlocked, "policy rule %q denies the plan: %s", v.Name, v.Message)
		}
	}
	return nil
}

func (a *app) policyCommand() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "policy",
		Short: "Check policy files and their test cases",
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "test DIR",
		Short: "Run the policy test cases of DIR (exit 1 when one fails)",
		Long: `Reads every *.test.yaml, *.test.yml and *.test.json file of DIR: each names a
policy file and lists cases (a document, optionally the fleet it is planned
against, and the verdict expected of each rule named). Prints one line per
case, PASS or FAIL with what differed, and exits 1 when a case fails or a
policy does not compile (docs/policy.md).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := policy.RunSuite(args[0])
			if err != nil {
				return err
			}
			for _, c := range res.Cases {
				fmt.Fprintln(a.stdout, c.Line())
			}
			fmt.Fprintf(a.stdout, "%d case(s): %d passed, %d failed.\n", len(res.Cases), res.Passed(), len(res.Cases)-res.Passed())
			if res.Passed() < len(res.Cases) {
				return refusal.New(refusal.InvalidInput, "%d policy case(s) failed: fix the policy or the expected verdicts", len(res.Cases)-res.Passed())
			}
			return nil
		},
	})
	var checkDoc string
	check := &cobra.Command{
		Use:   "check FILE",
		Short: "Compile a policy file, list its rules and warn of rules that can never match",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			pol, err := loadPolicy(args[0])
			if err != nil {
				return err
			}
			var doc *fleet.Document
			if checkDoc != "" {
				if doc, err = a.readDocument(checkDoc); err != nil {
					return err
				}
			}
			for _, r := range pol.Rules {
				fmt.Fprintf(a.stdout, "%s %s (line %d)\n", r.Action, r.Name, r.Line)
			}
			for _, w := range pol.Warnings(doc) {
				fmt.Fprintf(a.stdout, "warning: %s\n", w)
			}
			fmt.Fprintf(a.stdout, "%d rule(s) compile.\n", len(pol.Rules))
			return nil
		},
	}
	check.Flags().StringVar(&checkDoc, "document", "", "a fleet document: warn of match.accounts it does not hold")
	cmd.AddCommand(check)
	return cmd
}
