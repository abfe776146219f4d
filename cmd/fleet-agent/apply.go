package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleet-agent/fleet-agent/internal/agent"
	"github.com/fleet-agent/fleet-agent/internal/apply"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

func (a *app) applyCommand() *cobra.Command {
	var prune, yes, offline bool
	var planHash, commit string
	cmd := &cobra.Command{
		Use:   "apply FILE",
		Short: "Apply a document to the fleet, exactly as planned",
		Long: `Plans FILE and prints the plan. Without --yes or --plan-hash it stops there and
prints the command that applies exactly this plan later (--plan-hash). With --yes
it applies what it just planned; with --plan-hash it applies a plan reviewed
earlier and refuses with CONFIG_DRIFT when the fleet moved since.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, client, err := a.begin(cmd, args, commit, &prune)
			if err != nil {
				return err
			}
			if commit != "" && planHash == "" {
				// As apply FILE without --plan-hash: show the plan and the
				// command that applies exactly it, change nothing.
				var resp agent.PlanResponse
				if err := client.Do(cmd.Context(), "POST", "/v1/plan", agent.PlanRequest{Commit: commit, Output: "text"}, &resp); err != nil {
					return err
				}
				fmt.Fprint(a.stdout, resp.Output)
				if resp.Blocked {
					return refusal.New(refusal.PlanBlocked, "the plan of %s is blocked; nothing was applied", resp.Commit)
				}
				fmt.Fprintf(a.stdout, "Nothing was applied. To apply exactly this plan:\n  %s apply --commit %s --plan-hash %s\n", a.prog, resp.Commit, resp.PlanHash)
				return nil
			}
			if commit != "" {
				var resp agent.PlanResponse
				err := client.Do(cmd.Context(), "POST", "/v1/apply", agent.ApplyRequest{Commit: commit, PlanHash: planHash}, &resp)
				if err != nil {
					return err
				}
				fmt.Fprint(a.stdout, resp.Output)
				fmt.Fprintf(a.stdout, "Applied %d call(s) of %s; planHash %s.\n", resp.Applied, commit, resp.PlanHash)
				return nil
			}
			if client != nil {
				return client.Do(cmd.Context(), "POST", "/v1/apply-document", map[string]any{}, nil)
			}
			doc, err := a.readDocument(args[0])
			if err != nil {
				return err
			}
			path := a.stateFile(cfg)
			live, err := a.liveSource(cfg, offline)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Minute)
			defer cancel()
			if !yes && planHash == "" {
				snap, err := a.snapshotForPlan(path)
				if err != nil {
					return err
				}
				p, _, err := planHere(ctx, cfg, doc, snap, prune, live)
				if err != nil {
					return err
				}
				if err := p.WriteText(a.stdout, false); err != nil {
					return err
				}
				if p.Blocked() {
					return apply.Blocked(p)
				}
				fmt.Fprintf(a.stdout, "Nothing was applied. To apply exactly this plan:\n  %s\n", a.again(cmd, args[0], p.PlanHash))
				return nil
			}
			none, err := noStateYet(path)
			if err != nil {
				return err
			}
			store, err := state.Open(path, state.Options{})
			if err != nil {
				return err
			}
			// A refused apply leaves no state file behind where there was
			// none: a mistyped --state must not litter.
			recorded := false
			defer func() {
				store.Close()
				if none && !recorded {
					_ = os.Remove(path)
				}
			}()
			snap, err := store.Snapshot()
			if err != nil {
				return err
			}
			checks := live.For(snap)
			opts := apply.Options{Tenant: cfg.Tenant, Prune: prune, PlanHash: planHash, AppliedBy: who(), Live: checks, AgainIsNothing: true}
			if yes && planHash == "" {
				// Apply what is printed now: hold the apply to this plan's
				// hash so a fleet that moves in between is refused, not
				// applied unseen.
				p, err := plan.For(ctx, doc, snap, checks, plan.Options{Tenant: cfg.Tenant, Prune: prune})
				if err != nil {
					return err
				}
				if p.Empty() && !p.Blocked() {
					if err := p.WriteText(a.stdout, false); err != nil {
						return err
					}
					fmt.Fprintln(a.stdout, "Nothing to change; nothing recorded (pass --plan-hash to record this document as the drift baseline).")
					return nil
				}
				opts.PlanHash = p.PlanHash
			}
			res, err := apply.Apply(ctx, store, doc, opts)
			if res != nil {
				if werr := res.Plan.WriteText(a.stdout, false); werr != nil {
					return werr
				}
			}
			if err != nil {
				return err
			}
			recorded = res.Recorded
			if res.AlreadyApplied {
				fmt.Fprintf(a.stdout, "Nothing to change: the plan %s was already applied to this document.\n", planHash)
				return nil
			}
			fmt.Fprintf(a.stdout, "Applied %d call(s); planHash %s.\n", res.Applied, res.Plan.PlanHash)
			return nil
		},
	}
	cmd.Flags().BoolVar(&prune, "prune", false, "delete what the document leaves out (default: the config's apply.prune)")
	cmd.Flags().BoolVar(&yes, "yes", false, "apply what was just planned")
	cmd.Flags().StringVar(&commit, "commit", "", "apply the document at this commit of the branch (through the running agent; needs --plan-hash)")
	cmd.Flags().StringVar(&planHash, "plan-hash", "", "apply only if the plan still has this hash")
	cmd.Flags().BoolVar(&offline, "offline", false, "skip the live checks")
	return cmd
}

// again is the command that applies exactly the plan just printed: the
// same program, file and flags that decide what is planned (state, config,
// prune, offline), and the hash.
func (a *app) again(cmd *cobra.Command, file, hash string) string {
	parts := []string{a.prog, "apply", quote(file)}
	for _, name := range []string{"config", "state", "prune", "offline"} {
		f := cmd.Flags().Lookup(name)
		if f == nil || !f.Changed {
			continue
		}
		if f.Value.Type() == "bool" {
			parts = append(parts, "--"+name+"="+f.Value.String())
		} else {
			parts = append(parts, "--"+name, quote(f.Value.String()))
		}
	}
	return strings.Join(append(parts, "--plan-hash", hash), " ")
}

// quote makes an argument safe to paste into a POSIX shell.
func quote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:@%+,", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
