package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/fleet-agent/fleet-agent/internal/agent"
	"github.com/fleet-agent/fleet-agent/internal/apply"
	"github.com/fleet-agent/fleet-agent/internal/config"
	"github.com/fleet-agent/fleet-agent/internal/localapi"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/refs"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/textline"
)

func (a *app) applyCommand() *cobra.Command {
	var prune, yes, offline, force bool
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
			if err := plan.CheckHashForm(planHash); err != nil {
				return err
			}
			cfg, client, err := a.begin(cmd, args, commit, &prune)
			if err != nil {
				return err
			}
			if commit != "" && planHash == "" {
				// As apply FILE without --plan-hash: show the plan and the
				// command that applies exactly it, change nothing.
				var resp localapi.PlanResponse
				if err := client.Do(cmd.Context(), "POST", "/v1/plan", localapi.PlanRequest{Commit: commit, Output: "text"}, &resp); err != nil {
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
				var resp localapi.PlanResponse
				err := client.Do(cmd.Context(), "POST", "/v1/apply", localapi.ApplyRequest{Commit: commit, PlanHash: planHash}, &resp)
				if pr := (*localapi.PlanRefusal)(nil); errors.As(err, &pr) {
					// The plan that explains the refusal goes to stdout,
					// as every other plan; the refusal stays one line.
					fmt.Fprint(a.stdout, pr.Plan)
					return pr.Refusal
				}
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
			if err := a.agentsStateFile(store, cfg, path, force); err != nil {
				return err
			}
			snap, err := store.Snapshot()
			if err != nil {
				return err
			}
			checks := live.For(snap)
			opts := apply.Options{Tenant: cfg.Tenant, Prune: prune, MaxTeardowns: &cfg.Apply.MaxTeardowns, PlanHash: planHash, AppliedBy: who(), Live: checks, AgainIsNothing: true}
			if yes && planHash == "" {
				// Apply what is printed now: hold the apply to this plan's
				// hash so a fleet that moves in between is refused, not
				// applied unseen.
				p, err := plan.For(ctx, doc, snap, checks, plan.Options{Tenant: cfg.Tenant, Prune: prune, MaxTeardowns: &cfg.Apply.MaxTeardowns})
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
	cmd.Flags().BoolVar(&force, "force", false, "apply FILE even to the state file of an agent that follows a branch (it then refuses the branch's tip until the tip matches)")
	return cmd
}

// agentsStateFile refuses, without force, an apply of a file to the state
// file of an agent that follows a branch (stopped: a running agent holds the
// file and refuses apply FILE itself). Such an apply moves the fleet away
// from the branch, and the agent would refuse every tip of it whose plan
// then makes calls no one reviewed, until the branch matches again or the
// tip is adopted by hand. A state file is an agent's when it applied a
// commit, or recorded a refused tip or a proposal, or when the config follows
// a repository and keeps its state in this file. With force it warns.
func (a *app) agentsStateFile(store *state.Store, cfg *config.Config, path string, force bool) error {
	v, err := agent.Status(store, cfg.Tenant)
	if err != nil {
		return err
	}
	var why string
	switch {
	case v.Applied != nil && v.Applied.Commit != "":
		why = "it holds the apply of commit " + refs.Short(v.Applied.Commit) + " by " + v.Applied.AppliedBy
	case len(v.Refused) > 0:
		why = "it holds the refusal of commit " + refs.Short(v.Refused[0].Commit)
	case len(v.Proposals) > 0:
		why = "it holds the plan of the proposal " + v.Proposals[0].Ref
	case cfg.Git.URL != "" && sameFile(path, cfg.State):
		why = "the config's agent follows " + cfg.Git.URL + " with it"
	default:
		return nil
	}
	branch := cfg.Git.Branch
	if branch == "" {
		branch = config.DefaultBranch
	}
	if !force {
		return refusal.New(refusal.InvalidState, "%s is the state file of an agent that follows a branch (%s): applying a file to it moves the fleet away from the branch, and the agent then refuses the tip of %s until the tip's document matches the fleet or is adopted by hand. Change the fleet through the repository (a pull request), or pass --force to apply it anyway",
			path, why, branch)
	}
	fmt.Fprintln(a.stderr, textline.Plain(fmt.Sprintf("fleet-agent: warning: %s is the state file of an agent that follows a branch (%s): after this apply the agent refuses the tip of %s until the tip's document matches the fleet (fleet-agent status says so, with the commands that adopt it)",
		path, why, branch)))
	return nil
}

// sameFile says whether two paths name the same file (either may not exist
// yet: then their cleaned absolute paths are compared).
func sameFile(p, q string) bool {
	if q == "" {
		return false
	}
	if a, err := os.Stat(p); err == nil {
		if b, err := os.Stat(q); err == nil {
			return os.SameFile(a, b)
		}
	}
	ap, err1 := filepath.Abs(p)
	bq, err2 := filepath.Abs(q)
	return err1 == nil && err2 == nil && ap == bq
}

// again is the command that applies exactly the plan just printed: the
// same program, file and flags that decide what is planned (state, config,
// prune, offline; force, which it needs as well), and the hash.
func (a *app) again(cmd *cobra.Command, file, hash string) string {
	if strings.HasPrefix(file, "-") && file != "-" {
		file = "./" + file // the same file, never read as a flag
	}
	parts := []string{a.prog, "apply", quote(file)}
	for _, name := range []string{"config", "state", "prune", "offline", "force"} {
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

// quote makes an argument safe to paste into a POSIX shell. An argument
// holding what a terminal would obey (a line break, an escape, a direction
// mark, bytes that are not UTF-8: textline.Plain's list) is written in
// bash's $'...' with those as escapes, so the printed command stays one
// line of plain text and still means the argument.
func quote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:@%+,", r))
	}) < 0 {
		return s
	}
	if !textline.IsPlain(s) {
		return ansiQuote(s)
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// ansiQuote is s in bash's $'...': a backslash and a quote escaped, and
// the bytes of each character textline.Plain would blank (controls, bytes
// that are not UTF-8, separators, direction marks) as \xHH.
func ansiQuote(s string) string {
	var b strings.Builder
	b.WriteString("$'")
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == '\\' || r == '\'':
			b.WriteByte('\\')
			b.WriteRune(r)
		case !textline.IsPlain(s[i : i+n]):
			// Its bytes: bash reads \u as the character only in a
			// UTF-8 locale, and \x the same in every one.
			for _, c := range []byte(s[i : i+n]) {
				fmt.Fprintf(&b, `\x%02x`, c)
			}
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	b.WriteByte('\'')
	return b.String()
}
