package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/user"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleet-agent/fleet-agent/internal/agent"
	"github.com/fleet-agent/fleet-agent/internal/apply"
	"github.com/fleet-agent/fleet-agent/internal/config"
	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/livecheck"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/providers/fake"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/secrets"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

// loadConfig reads the agent config when one is named (--config,
// FLEET_AGENT_CONFIG) or exists at the default path; the commands other
// than run work without one, on the contract's defaults.
func (a *app) loadConfig() (*config.Config, error) {
	path, explicit := config.Path(a.configPath, a.lookupEnv)
	if !explicit {
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return config.Defaults(a.lookupEnv), nil
		}
	}
	return config.Load(path, a.lookupEnv)
}

// stateFile says which state file: --state, FLEET_AGENT_STATE, the config's.
func (a *app) stateFile(cfg *config.Config) string {
	if a.statePath != "" {
		return a.statePath
	}
	if v, ok := a.lookupEnv("FLEET_AGENT_STATE"); ok && v != "" {
		return v
	}
	return cfg.State
}

// snapshot reads the fleet without writing: a state file that does not
// exist yet is an empty fleet.
func snapshot(path string) (*inventory.Snapshot, *state.Applied, *state.Drift, error) {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return inventory.NewSnapshot(nil), nil, nil, nil
	}
	s, err := state.Open(path, state.Options{ReadOnly: true})
	if err != nil {
		return nil, nil, nil, err
	}
	defer s.Close()
	var snap *inventory.Snapshot
	var ap *state.Applied
	var dr *state.Drift
	err = s.View(func(tx *state.Tx) error {
		var err error
		if snap, err = tx.Snapshot(); err != nil {
			return err
		}
		if ap, err = tx.Applied(); err != nil {
			return err
		}
		dr, err = tx.Drift()
		return err
	})
	return snap, ap, dr, err
}

// readDocument reads and validates a document, printing its errors the way
// validate does.
func (a *app) readDocument(path string) (*fleet.Document, error) {
	data, errs := fleet.ReadFile(path)
	var doc *fleet.Document
	if errs == nil {
		doc, errs = fleet.Validate(path, data)
	}
	if errs != nil {
		fmt.Fprint(a.stdout, errs.Text())
		return nil, refusal.New(refusal.InvalidInput, "%s is not a valid document (%d error(s))", path, len(errs))
	}
	return doc, nil
}

// live is what plans ask of providers, and the preflight of apply's calls.
// The registry holds the adapters this build links in (only the fake
// today: aws, gcp and digitalocean have none yet, so their accounts plan
// offline). Only the adapters the config has a `providers.<id>` block for
// are opened (`fake: {}` opens the fake on its defaults): a provider
// without configuration is checked offline, as is everything with
// --offline. A bad block is INVALID_INPUT with its line.
func (a *app) live(cfg *config.Config, offline bool) (plan.Live, apply.Checker, error) {
	if offline || len(cfg.Providers) == 0 {
		return plan.Offline{}, nil, nil
	}
	reg := providers.NewRegistry()
	if err := reg.Register(providers.FakeID, fake.Factory()); err != nil {
		return nil, nil, refusal.Wrap(refusal.Internal, err, "cannot register the provider adapters")
	}
	resolver := secrets.NewResolver(secrets.Options{Env: a.lookupEnv, Dir: cfg.Secrets.Dir})
	adapters := map[string]livecheck.Adapter{}
	for _, id := range slices.Sorted(maps.Keys(cfg.Providers)) {
		ad, err := reg.Open(id, cfg.Providers[id], resolver)
		switch {
		case errors.Is(err, providers.ErrNoAdapter):
			continue // checked offline
		case err != nil:
			var r *refusal.Error
			if !errors.As(err, &r) {
				return nil, nil, refusal.Wrap(refusal.InvalidInput, err, "%s: providers.%s", cfg.Where("providers."+id), id)
			}
			where := cfg.File
			if !strings.Contains(r.Message, "line ") {
				// The adapter's own check names no line: point at the block.
				where = cfg.Where("providers." + id)
			}
			if where == "" {
				return nil, nil, err
			}
			return nil, nil, &refusal.Error{Code: r.Code, Message: where + ": " + r.Message, Err: err}
		}
		adapters[id] = ad
	}
	if len(adapters) == 0 {
		return plan.Offline{}, nil, nil
	}
	checks := livecheck.New(livecheck.Options{Adapters: adapters, Secrets: resolver, Redactor: resolver.Redactor()})
	return checks, checks, nil
}

// begin is what plan and apply do first: a FILE or --commit (which needs
// the running agent), the config, prune's default, and the agent's client
// when one runs.
func (a *app) begin(cmd *cobra.Command, args []string, commit string, prune *bool) (*config.Config, *agent.Client, error) {
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
		return nil, nil, refusal.New(refusal.Unavailable, "--commit needs the running agent (it reads the commit of %s from its repository); none answers on %s", cfg.Git.Branch, cfg.Socket)
	}
	return cfg, client, nil
}

// planHere plans doc against a snapshot in this process, with the live
// checks of the config (or offline).
func (a *app) planHere(ctx context.Context, cfg *config.Config, doc *fleet.Document, snap *inventory.Snapshot, prune bool, live plan.Live) (*plan.Plan, error) {
	if lc, ok := live.(*livecheck.Checker); ok {
		lc.WithFleet(snap)
	}
	facts, err := plan.Gather(ctx, doc, snap, live)
	if err != nil {
		return nil, err
	}
	return plan.Make(doc, snap, plan.Options{Tenant: cfg.Tenant, Prune: prune, Facts: facts}), nil
}

// planOutcome prints a plan the agent made and turns it into the exit
// status plan would have.
func (a *app) planOutcome(resp agent.PlanResponse, failOnDrift bool, what string) error {
	fmt.Fprint(a.stdout, resp.Output)
	if resp.Blocked {
		return refusal.New(refusal.PlanBlocked, "the plan of %s has blocked changes; fix the document", what)
	}
	if failOnDrift && resp.Calls > 0 {
		return refusal.New(refusal.FleetDrifted, "%d call(s) would run: the fleet does not match %s", resp.Calls, what)
	}
	return nil
}

func (a *app) planCommand() *cobra.Command {
	var prune, calls, failOnDrift, offline bool
	var output, commit string
	cmd := &cobra.Command{
		Use:   "plan FILE",
		Short: "Show what applying a document would change",
		Long: `Plans FILE against the fleet (the state file and the live providers) and prints
one line per change, then the counts. Exits 1 with PLAN_BLOCKED when a change is
blocked, and with --fail-on-drift, FLEET_DRIFTED when any call would run.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "text" && output != "json" && output != "markdown" {
				return fmt.Errorf("-o must be text, json or markdown, got %q", output)
			}
			cfg, client, err := a.begin(cmd, args, commit, &prune)
			if err != nil {
				return err
			}
			if commit != "" {
				var resp agent.PlanResponse
				if err := client.Do(cmd.Context(), "POST", "/v1/plan", agent.PlanRequest{Commit: commit, Output: output, Calls: calls}, &resp); err != nil {
					return err
				}
				return a.planOutcome(resp, failOnDrift, resp.Commit)
			}
			doc, err := a.readDocument(args[0])
			if err != nil {
				return err
			}
			if client != nil {
				data, _ := fleet.ReadFile(args[0])
				req := planDocRequest{Name: args[0], Document: data, Calls: calls, Output: output, Offline: offline}
				if cmd.Flags().Changed("prune") {
					req.Prune = &prune
				}
				var resp agent.PlanResponse
				if err := client.Do(cmd.Context(), "POST", "/v1/plan-document", req, &resp); err != nil {
					return err
				}
				return a.planOutcome(resp, failOnDrift, args[0])
			}
			snap, _, _, err := snapshot(a.stateFile(cfg))
			if err != nil {
				return err
			}
			live, _, err := a.live(cfg, offline)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Minute)
			defer cancel()
			p, err := a.planHere(ctx, cfg, doc, snap, prune, live)
			if err != nil {
				return err
			}
			switch output {
			case "json":
				err = p.WriteJSON(a.stdout)
			case "markdown":
				_, err = fmt.Fprint(a.stdout, p.Markdown(plan.MarkdownOptions{Branch: cfg.Git.Branch}))
			default:
				err = p.WriteText(a.stdout, calls)
			}
			if err != nil {
				return refusal.Wrap(refusal.Internal, err, "cannot write the plan")
			}
			if p.Blocked() {
				return apply.Blocked(p)
			}
			if failOnDrift && !p.Empty() {
				return refusal.New(refusal.FleetDrifted, "%d call(s) would run: the fleet does not match %s", len(p.Calls), args[0])
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&prune, "prune", false, "delete what the document leaves out (default: the config's apply.prune)")
	cmd.Flags().StringVar(&commit, "commit", "", "plan the document at this commit of the branch (through the running agent)")
	cmd.Flags().BoolVar(&calls, "calls", false, "print the calls after the counts")
	cmd.Flags().BoolVar(&failOnDrift, "fail-on-drift", false, "exit FLEET_DRIFTED when any call would run")
	cmd.Flags().BoolVar(&offline, "offline", false, "skip the live checks")
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text, json or markdown")
	return cmd
}

// who is USER@HOST, the command line's appliedBy.
func who() string {
	name := "unknown"
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	return name + "@" + host
}

func (a *app) applyCommand() *cobra.Command {
	var prune, yes, offline bool
	var planHash, commit string
	cmd := &cobra.Command{
		Use:   "apply FILE",
		Short: "Apply a document to the fleet, exactly as planned",
		Long: `Plans FILE and prints the plan. Without --yes or --plan-hash it stops there and
prints the --plan-hash that applies exactly this plan later. With --yes it applies
what it just planned; with --plan-hash it applies a plan reviewed earlier and
refuses with CONFIG_DRIFT when the fleet moved since.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, client, err := a.begin(cmd, args, commit, &prune)
			if err != nil {
				return err
			}
			if commit != "" {
				var resp agent.PlanResponse
				err := client.Do(cmd.Context(), "POST", "/v1/apply", agent.ApplyRequest{Commit: commit, PlanHash: planHash, By: who()}, &resp)
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
			live, checker, err := a.live(cfg, offline)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Minute)
			defer cancel()
			if !yes && planHash == "" {
				snap, _, _, err := snapshot(path)
				if err != nil {
					return err
				}
				p, err := a.planHere(ctx, cfg, doc, snap, prune, live)
				if err != nil {
					return err
				}
				if err := p.WriteText(a.stdout, false); err != nil {
					return err
				}
				if p.Blocked() {
					return apply.Blocked(p)
				}
				fmt.Fprintf(a.stdout, "Nothing was applied. To apply exactly this plan:\n  fleet-agent apply %s --plan-hash %s\n", args[0], p.PlanHash)
				return nil
			}
			store, err := state.Open(path, state.Options{})
			if err != nil {
				return err
			}
			defer store.Close()
			opts := apply.Options{Tenant: cfg.Tenant, Prune: prune, PlanHash: planHash, AppliedBy: who(), Live: live, Checker: checker}
			snap, err := store.Snapshot()
			if err != nil {
				return err
			}
			if lc, ok := live.(*livecheck.Checker); ok {
				lc.WithFleet(snap)
			}
			if yes && planHash == "" {
				// Apply what is printed now: plan, then hold the apply to
				// that plan's hash so a fleet that moves in between is
				// refused, not applied unseen.
				p, err := a.planHere(ctx, cfg, doc, snap, prune, live)
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

func (a *app) exportCommand() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "export",
		Short: "Print the current fleet as a document",
		Long: `Writes the fleet as a fleet.json document: every live object by name (objects
fleet did not create under their id). With --out it writes a new file and refuses
to overwrite one.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := a.loadConfig()
			if err != nil {
				return err
			}
			var data []byte
			if client := a.agentClient(cmd.Context(), cfg); client != nil {
				var b bytes.Buffer
				if err := client.Do(cmd.Context(), "GET", "/v1/export", nil, &b); err != nil {
					return err
				}
				data = b.Bytes()
			} else {
				snap, _, _, err := snapshot(a.stateFile(cfg))
				if err != nil {
					return err
				}
				doc, err := plan.Export(snap)
				if err != nil {
					return err
				}
				if data, err = plan.Pretty(doc); err != nil {
					return refusal.Wrap(refusal.Internal, err, "cannot render the document")
				}
			}
			if out == "" {
				_, err = a.stdout.Write(data)
				return err
			}
			f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
			if err != nil {
				if errors.Is(err, fs.ErrExist) {
					return refusal.New(refusal.InvalidInput, "%s exists; export never overwrites a file: choose another --out or remove it", out)
				}
				return refusal.Wrap(refusal.InvalidInput, err, "cannot create %s", out)
			}
			if _, err := f.Write(data); err != nil {
				f.Close()
				return refusal.Wrap(refusal.Internal, err, "cannot write %s", out)
			}
			return f.Close()
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "write to a new file instead of standard output")
	return cmd
}

func (a *app) statusCommand() *cobra.Command {
	var failOnDrift bool
	var output string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the applied document, the drift and the proposals",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "text" && output != "json" {
				return fmt.Errorf("-o must be text or json, got %q", output)
			}
			cfg, err := a.loadConfig()
			if err != nil {
				return err
			}
			var v agent.StatusView
			if client := a.agentClient(cmd.Context(), cfg); client != nil {
				if err := client.Do(cmd.Context(), "GET", "/v1/status", nil, &v); err != nil {
					return err
				}
			} else if v, err = statusOffline(a.stateFile(cfg), cfg.Tenant); err != nil {
				return err
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

// statusOffline reads the status from the state file (no agent running).
func statusOffline(path, tenant string) (agent.StatusView, error) {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return agent.StatusView{TenantID: tenant}, nil
	}
	s, err := state.Open(path, state.Options{ReadOnly: true})
	if err != nil {
		return agent.StatusView{}, err
	}
	defer s.Close()
	return agent.Status(s, tenant)
}

func ms(t int64) string { return time.UnixMilli(t).UTC().Format(time.RFC3339) }

func (a *app) statusText(v agent.StatusView) {
	w := a.stdout
	fmt.Fprintf(w, "tenant: %s\n", v.TenantID)
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
		switch {
		case dr == nil:
			fmt.Fprintln(w, "drift: not checked since the apply")
		case dr.Error != "":
			fmt.Fprintf(w, "drift: the last check at %s failed: %s\n", ms(ap.CheckedAt), dr.Error)
		case !agent.Drifted(&state.Drift{Changes: dr.Changes, Blocked: dr.Blocked}):
			fmt.Fprintf(w, "drift: none (checked at %s)\n", ms(ap.CheckedAt))
		default:
			var changes []plan.Change
			_ = json.Unmarshal(dr.Changes, &changes)
			fmt.Fprintf(w, "drift: %d change(s) (checked at %s)\n", len(changes), ms(ap.CheckedAt))
			for _, c := range changes {
				fmt.Fprintln(w, "  "+c.Line())
			}
		}
	}
	for _, p := range v.Proposals {
		what := p.Summary.Counts()
		switch {
		case len(p.Errors) > 0:
			what = fmt.Sprintf("%d error(s): %s", len(p.Errors), p.Errors[0])
		case p.Blocked:
			what = fmt.Sprintf("blocked (%d); %s", p.Summary.Blocked, what)
		}
		fmt.Fprintf(w, "proposal %s at %s: %s\n", p.Ref, shortCommit(p.Commit), what)
	}
}

func shortCommit(c string) string {
	if len(c) > 12 {
		return c[:12]
	}
	return c
}
