package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleet-agent/fleet-agent/internal/agent"
	"github.com/fleet-agent/fleet-agent/internal/config"
	"github.com/fleet-agent/fleet-agent/internal/doctor"
	"github.com/fleet-agent/fleet-agent/internal/forge"
	"github.com/fleet-agent/fleet-agent/internal/gitsync"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/localapi"
	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/secrets"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/webhooks"
)

// doctorTimeout bounds each probe, so that one part that does not answer
// (a remote behind a firewall) cannot hang the report.
const doctorTimeout = 20 * time.Second

func (a *app) doctorCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check every part the agent needs and say what to do about each",
		Long: `doctor checks the config, the state file, the git remote, GitHub, each provider
account and the node daemon settings, then the fleet itself (refused tips, blocked
proposals, substrates in error or whose Nodes do not join). Each finding is a line
with a code, what was found and what to do. Through the running agent when one
answers on the socket (it holds the state file and the secrets), else on the files.
Exit status 0 when nothing needs a person, 1 when something does.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := textOrJSON(output); err != nil {
				return err
			}
			var rep doctor.Report
			cfg, err := a.loadConfig()
			if err != nil {
				rep = doctor.Report{Through: "command"}
				switch {
				case errors.Is(err, fs.ErrNotExist):
					rep.Add("config", "config-missing", doctor.Fail, refusal.Text(err), "check the path given by --config or FLEET_AGENT_CONFIG; without either, doctor checks the defaults")
				case errors.Is(err, fs.ErrPermission):
					rep.Add("config", "config-permission", doctor.Fail, refusal.Text(err), "run doctor as the agent's user (sudo -u fleet-agent fleet-agent doctor); the file itself may be fine")
				default:
					rep.Add("config", "config-invalid", doctor.Fail, refusal.Text(err), "fix the config file at the line named; `fleet-agent doctor` checks it again")
				}
			} else if c := a.agentClient(cmd.Context(), cfg); c != nil {
				if err := c.Do(cmd.Context(), "GET", "/v1/doctor", nil, &rep); err != nil {
					return err
				}
			} else {
				rep = a.doctorReport(cmd.Context(), cfg, "", nil)
			}
			if output == "json" {
				if err := a.printJSON(rep); err != nil {
					return err
				}
			} else {
				doctor.WriteText(a.stdout, rep)
			}
			if rep.NeedsPerson() {
				return exitCode(1)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text or json")
	return cmd
}

// doctorReport makes the report. store is the running agent's, nil for
// the command line, which then opens the state file read-only.
func (a *app) doctorReport(ctx context.Context, cfg *config.Config, cfgPath string, store *state.Store) doctor.Report {
	rep := doctor.Report{Through: "command"}
	if store != nil {
		rep.Through = "agent"
	}
	resolver := secrets.NewResolver(secrets.Options{Env: a.lookupEnv, Dir: cfg.Secrets.Dir})
	red := resolver.Redactor()
	add := func(check, code string, sev doctor.Severity, found, do string) {
		rep.Add(check, code, sev, red.Redact(found), red.Redact(do))
	}
	path := cfgPath
	if path == "" {
		path, _ = config.Path(a.configPath, a.lookupEnv)
	}
	if _, err := os.Stat(path); err == nil {
		add("config", "config-ok", doctor.OK, "the config "+path+" is valid", "")
	} else {
		add("config", "config-defaults", doctor.Note, "no config file at "+path+": the defaults apply", "write one to follow a repository (docs/configuration.md)")
	}

	// The state file.
	st := store
	if st == nil {
		st = a.doctorState(cfg, add)
		if st != nil {
			defer st.Close()
		}
	} else if store.Backend() != "etcd" {
		add("state", "state-ok", doctor.OK, "the state file "+cfg.State+" is open in the running agent; installation "+store.Installation(), "")
	}
	if st != nil && st.Backend() == "etcd" {
		doctorEtcd(ctx, st, add)
	}

	a.doctorGit(ctx, cfg, resolver, add)
	a.doctorGitHub(ctx, cfg, resolver, add)
	a.doctorProviders(ctx, cfg, resolver, st, add)
	doctorNodeDaemon(cfg, add)

	if st != nil {
		f := doctor.Fleet{NodeDaemon: cfg.Substrate.NodeDaemon != nil}
		var err error
		// Status lists only the refusals no apply has overtaken since.
		var v localapi.StatusView
		if v, err = agent.Status(st, cfg.Tenant); err == nil {
			f.Refused, f.Proposals, f.Substrates = v.Refused, v.Proposals, v.Substrates
			f.NodeDaemonPin = v.NodeDaemonImage
			if nd := cfg.Substrate.NodeDaemon; nd != nil {
				f.NodeDaemonImage = nd.Image
			}
			if v.Drift != nil {
				f.DriftProposal = v.Drift.Proposal
			}
			if hooks := hooksOf(cfg); len(hooks) > 0 {
				err = st.View(func(tx *state.Tx) (err error) { f.Webhooks, err = webhooks.Statuses(tx, hooks); return })
			}
		}
		if err != nil {
			add("fleet", "fleet-unreadable", doctor.Fail, "the fleet's records cannot be read: "+refusal.Text(err), "run fleet-agent backup and restore it, or report the error")
		} else {
			doctor.CheckFleet(&rep, f, time.Now())
		}
	}
	return rep
}

type addFunc func(check, code string, sev doctor.Severity, found, do string)

// doctorState opens the state file read-only and says what it found; nil
// when there is nothing to read.
func (a *app) doctorState(cfg *config.Config, add addFunc) *state.Store {
	if cfg.StateBackend == config.BackendEtcd && a.stateFile(cfg) == cfg.State {
		s, err := a.openRead(context.Background(), cfg)
		if errors.Is(err, state.ErrNoStoreYet) {
			add("state", "state-missing", doctor.Note, "no fleet is recorded under the etcd prefix "+cfg.Etcd.Prefix+" yet", "fleet-agent run creates it; check state.etcd.prefix if a fleet should be there")
			return nil
		}
		if err != nil {
			add("state", "etcd-unreachable", doctor.Fail, "the store on etcd ("+strings.Join(cfg.Etcd.Endpoints, ",")+cfg.Etcd.Prefix+") cannot be read: "+refusal.Text(err),
				"check that a quorum of the etcd members is up and that state.etcd's endpoints, TLS files and credentials are right (docs/ha.md)")
			return nil
		}
		return s
	}
	path := a.stateFile(cfg)
	none, err := noStateYet(path)
	switch {
	case err != nil:
		add(stateOpenFinding(path, cfg.Socket, err, "fix the path (state in the config, or --state)"))
		return nil
	case none:
		add("state", "state-missing", doctor.Note, "no fleet is recorded at "+path+" yet", "fleet-agent run creates it; check state in the config if a fleet should be there")
		return nil
	}
	s, err := state.Open(path, state.Options{ReadOnly: true})
	if err != nil {
		add(stateOpenFinding(path, cfg.Socket, err,
			"if the file was damaged, stop the agent and restore the last good copy from a backup (fleet-agent backup makes them); keep the damaged file aside"))
		return nil
	}
	found := "the state file " + path + " opens"
	if id := s.Installation(); id != "" {
		found += "; installation " + id
	} else {
		found += "; no installation id yet (the agent adds one when it next opens the file)"
	}
	add("state", "state-ok", doctor.OK, found, "")
	return s
}

// stateOpenFinding names why the state file does not open, each cause
// with its own advice: a file another process holds is busy, not broken,
// and a file this user may not read is a matter of who runs doctor. Only
// what is neither gets otherwise, the caller's advice.
func stateOpenFinding(path, socket string, err error, otherwise string) (check, code string, sev doctor.Severity, found, do string) {
	switch {
	case errors.Is(err, state.ErrInUse):
		return "state", "state-locked", doctor.Fail,
			"another process holds the state file " + path + " and no agent answers on the socket " + socket,
			"nothing is wrong with the file: if the agent runs, point doctor at its socket (socket in the config, or --config with the agent's config) and it answers through it; else find the holder with fuser " + path + " (do not restore or delete the file)"
	case errors.Is(err, state.ErrNotAStateFile):
		return "state", "state-wrong-file", doctor.Fail,
			"the file " + path + " is not a state file: " + refusal.Text(err),
			"fix the path (state in the config, or --state): the file named is not damaged, it is another kind of file"
	case errors.Is(err, fs.ErrPermission):
		return "state", "state-permission", doctor.Fail,
			"this user may not read the state file " + path + ": " + refusal.Text(err),
			"run doctor as the agent's user (sudo -u fleet-agent fleet-agent doctor), or through the running agent's socket; the file itself may be fine"
	}
	return "state", "state-unreadable", doctor.Fail, "the state file " + path + " cannot be opened: " + refusal.Text(err), otherwise
}

func (a *app) doctorGit(ctx context.Context, cfg *config.Config, resolver *secrets.Resolver, add addFunc) {
	if cfg.Git.URL == "" {
		add("git", "git-not-configured", doctor.Note, "git.url is not set: the agent cannot run (fleet-agent run needs it)", "set git.url to the repository holding fleet.json (docs/connect.md)")
		return
	}
	gcfg := gitsync.Config{URL: cfg.Git.URL, Branch: cfg.Git.Branch, Secrets: resolver,
		Auth: gitsync.Auth{Username: cfg.Git.Auth.Username, Token: cfg.Git.Auth.Token, Password: cfg.Git.Auth.Password,
			SSHKey: cfg.Git.Auth.SSHKey, KnownHosts: cfg.Git.Auth.KnownHosts}, ListTimeout: doctorTimeout}
	if cfg.Git.Verify != nil {
		gcfg.KeyringPath = cfg.Git.Verify.Keyring
	}
	where := redactURL(cfg.Git.URL)
	p, err := gitsync.ProbeRemote(ctx, gcfg)
	if err != nil {
		code, do := "git-unreachable", "check git.url and the network path to it; the agent retries with backoff"
		switch gitsync.KindOf(err) {
		case gitsync.KindAuth, gitsync.KindSecret:
			code, do = "git-auth", "check git.auth: the token or key, and that it may read the repository"
		case gitsync.KindConfig:
			code, do = "git-config", "fix the git block of the config as the message says"
		case gitsync.KindNotFound:
			code, do = "git-not-found", "check git.url: the remote says there is no such repository (or the credentials cannot see it)"
		case gitsync.KindHostKey:
			code, do = "git-host-key", "add the remote's host key to git.auth.knownHosts"
		case gitsync.KindPermission:
			code, do = "git-permission", "run doctor as the agent's user (sudo -u fleet-agent fleet-agent doctor); the repository itself may be fine"
		}
		add("git", code, doctor.Fail, where+": "+refusal.Text(err), do)
		return
	}
	if p.Branch == "" {
		add("git", "git-branch-missing", doctor.Fail, fmt.Sprintf("%s answers (%d refs) but has no branch %s", where, p.Refs, cfg.Git.Branch),
			"push the branch, or set git.branch to the branch that holds fleet.json")
		return
	}
	found := fmt.Sprintf("%s answers; %s is at %s; the document is read from %s", where, cfg.Git.Branch, p.Branch[:12], cfg.Git.Path)
	if p.Keys > 0 {
		found += fmt.Sprintf("; %d signing keys trusted", p.Keys)
	}
	add("git", "git-ok", doctor.OK, found, "")
}

func (a *app) doctorGitHub(ctx context.Context, cfg *config.Config, resolver *secrets.Resolver, add addFunc) {
	if cfg.GitHub == nil {
		add("github", "github-off", doctor.Note, "no github block: nothing is posted; other branches are proposals", "add github (docs/github.md) to plan pull requests")
		return
	}
	fc := forge.Config{Repository: cfg.GitHub.Repository, Branch: cfg.Git.Branch, APIURL: cfg.GitHub.APIURL, Token: cfg.GitHub.Token,
		WebhookSecret: cfg.GitHub.WebhookSecret, StatusContext: cfg.GitHub.StatusContext, Resolver: resolver,
		Log: slog.New(slog.DiscardHandler)}
	if app := cfg.GitHub.App; app != nil {
		fc.App = &forge.App{ID: strconv.FormatInt(app.ID, 10), InstallationID: app.InstallationID, PrivateKey: app.PrivateKey}
	}
	gh, err := forge.New(fc)
	if err != nil {
		add("github", "github-config", doctor.Fail, refusal.Text(err), "fix the github block of the config")
		return
	}
	pctx, cancel := context.WithTimeout(ctx, doctorTimeout)
	defer cancel()
	acc, err := gh.Access(pctx, cfg.GitHub.App != nil)
	if err != nil {
		code, do := "github-unreachable", "check github.apiURL and the network; posts wait in the state file meanwhile"
		var fe *forge.Error
		if errors.As(err, &fe) {
			switch fe.Class {
			case forge.ClassUnauthorized, forge.ClassCredentials:
				code, do = "github-token", "the token (or the App's key) is refused or unreadable: replace it (github.token, or github.app)"
			case forge.ClassNotFound, forge.ClassForbidden:
				code, do = "github-repository", "the credentials cannot see "+cfg.GitHub.Repository+": check github.repository and give them access to it"
			}
		}
		add("github", code, doctor.Fail, refusal.Text(err), do)
		return
	}
	who := acc.Login
	if acc.App {
		who += " (an App installation)"
	}
	if len(acc.Missing) > 0 {
		add("github", "github-permissions", doctor.Fail, who+" lacks on "+cfg.GitHub.Repository+": "+strings.Join(acc.Missing, "; "),
			"grant them (a collaborator with write, or the App's permissions) and accept the change")
	} else {
		add("github", "github-ok", doctor.OK, who+" may post statuses and comments on "+cfg.GitHub.Repository, "")
	}
	switch {
	case !gh.HasWebhookSecret():
		add("github", "github-webhook-off", doctor.Note, "no github.webhookSecret: the agent polls every "+cfg.Git.Interval.String(), "set one and a webhook to plan at once on a push")
	case !acc.WebhookSecret:
		add("github", "github-webhook-secret", doctor.Fail, "github.webhookSecret "+cfg.GitHub.WebhookSecret+" does not resolve: every delivery is refused",
			"store the secret where the reference says")
	}
}

// doctorProviders makes one harmless read per provider account of the
// fleet: a verification of its credentials.
func (a *app) doctorProviders(ctx context.Context, cfg *config.Config, resolver *secrets.Resolver, st *state.Store, add addFunc) {
	var accounts []inventory.Object
	// backs: the pools whose substrate each account makes, by account.
	backs := map[string][]string{}
	if st != nil {
		if snap, err := st.Snapshot(); err == nil {
			accounts = snap.Objects(inventory.ProviderAccount)
			for _, p := range snap.Objects(inventory.Pool) {
				pol, _ := p.Spec["policy"].(map[string]any)
				sub, _ := pol["substrate"].(map[string]any)
				if acct, _ := sub["account"].(string); acct != "" && !p.Archived {
					backs[acct] = append(backs[acct], p.Name)
				}
			}
		}
	}
	opened, err := a.adapters(cfg, resolver)
	if errors.Is(err, fs.ErrPermission) {
		add("provider", "provider-permission", doctor.Fail, "this user may not read a file the providers block names: "+refusal.Text(err),
			"run doctor as the agent's user (sudo -u fleet-agent fleet-agent doctor); the config itself may be fine")
		return
	}
	if err != nil {
		add("provider", "provider-config", doctor.Fail, refusal.Text(err), "fix the providers block of the config at the line named")
		return
	}
	if len(accounts) == 0 {
		ids := slices.Sorted(func(yield func(string) bool) {
			for id := range opened {
				if !yield(id) {
					return
				}
			}
		})
		add("provider", "provider-none", doctor.Note, fmt.Sprintf("no provider account in the fleet yet (adapters configured: %s)", strings.Join(orNone(ids), ", ")), "")
		return
	}
	for _, o := range accounts {
		if o.Archived {
			continue
		}
		prov, _ := o.Spec["provider"].(string)
		ad, ok := opened[prov]
		if !ok {
			// An account that backs a substrate without its adapter
			// leaves that substrate unreconciled until a restart; one
			// that backs none is only checked offline.
			if pools := backs[o.Name]; len(pools) > 0 {
				add("provider", "provider-offline", doctor.Fail, fmt.Sprintf("account %s (provider %s): no providers.%s block, so no adapter is open and the substrates of pools %s are not reconciled",
					o.Name, prov, prov, strings.Join(pools, ", ")),
					"add a providers."+prov+" block to the agent's config (docs/configuration.md), then restart the agent (systemctl restart fleet-agent): adapters open at start")
			} else {
				add("provider", "provider-offline", doctor.Note, fmt.Sprintf("account %s (provider %s): no providers.%s block, so it is checked offline; no pool's substrate uses it", o.Name, prov, prov),
					"add providers."+prov+" to check it live")
			}
			continue
		}
		conf, _ := json.Marshal(o.Spec["config"])
		pctx, cancel := context.WithTimeout(ctx, doctorTimeout)
		err := ad.Verify(pctx, providers.Account{Name: o.Name, Provider: prov, Config: conf})
		cancel()
		switch {
		case err == nil:
			add("provider", "provider-ok", doctor.OK, fmt.Sprintf("account %s (%s): the credentials verify", o.Name, prov), "")
			if adv, ok := ad.(advisor); ok {
				actx, cancel := context.WithTimeout(ctx, doctorTimeout)
				for _, a := range adv.Advise(actx, providers.Account{Name: o.Name, Provider: prov, Config: conf}) {
					add("provider", "provider-advice", doctor.Note, a, "the agent works without it, at a higher cost in provider requests (docs/substrates.md, the sweep at rest)")
				}
				cancel()
			}
		case providers.ReasonOf(err) == "secretMissing":
			add("provider", "provider-secret", doctor.Fail, fmt.Sprintf("account %s (%s): %v", o.Name, prov, err), "store the secret the account's config names")
		case providers.ReasonOf(err) == "credentialsRefused":
			add("provider", "provider-credentials", doctor.Fail, fmt.Sprintf("account %s (%s): %v", o.Name, prov, err), "replace the account's credentials")
		default:
			add("provider", "provider-unreachable", doctor.Fail, fmt.Sprintf("account %s (%s): %v", o.Name, prov, err), "check the provider's endpoint and the network; the agent retries")
		}
	}
}

// advisor is an adapter that can say what keeps an account from working
// at its best (a permission its cheap checks need), beside Verify.
type advisor interface {
	Advise(ctx context.Context, acct providers.Account) []string
}

func orNone(s []string) []string {
	if len(s) == 0 {
		return []string{"none"}
	}
	return s
}

// doctorNodeDaemon checks the node daemon settings that a typo breaks
// without a word at start: the join URL, the listener's certificate.
func doctorNodeDaemon(cfg *config.Config, add addFunc) {
	nd, jl := cfg.Substrate.NodeDaemon, cfg.Substrate.Join
	if nd == nil {
		add("nodeDaemon", "node-daemon-off", doctor.Note, "substrate.nodeDaemon is not set: Kubernetes substrates get no node daemon", "set it where pools use policy.substrate (docs/substrates.md)")
		return
	}
	u, err := url.Parse(nd.JoinURL)
	if err != nil || u.Host == "" {
		add("nodeDaemon", "node-daemon-join-url", doctor.Fail, "substrate.nodeDaemon.joinURL "+nd.JoinURL+" is not a URL", "set it to where the Nodes reach the join listener, like https://ops.example.com:9465/")
		return
	}
	if jl == nil {
		add("nodeDaemon", "node-daemon-no-listener", doctor.Fail, "substrate.nodeDaemon is set but substrate.join is not: no listener answers "+nd.JoinURL,
			"set substrate.join.listen (and its certificate)")
		return
	}
	if !jl.Insecure {
		if _, err := tls.LoadX509KeyPair(jl.TLSCert, jl.TLSKey); err != nil {
			add("nodeDaemon", "node-daemon-tls", doctor.Fail, "the join listener's certificate cannot be loaded: "+err.Error(),
				"check substrate.join.tlsCert and tlsKey (PEM files readable by the agent)")
			return
		}
	}
	// This section judges how Nodes join, not the image: whether the
	// image is pinned to a digest is the fleet section's one verdict
	// (node-daemon-pinned or node-daemon-not-pinned).
	add("nodeDaemon", "node-daemon-ok", doctor.OK, "node daemons join at "+nd.JoinURL+" (listener "+jl.Listen+"); the fleet section says whether their image is pinned to a digest", "")
}

// doctorRoute serves GET /v1/doctor in the running agent: the report
// made with the agent's own store and secrets.
func (a *app) doctorRoute(cfg *config.Config, cfgPath string, store *state.Store) localapi.Route {
	return localapi.Route{Method: "GET", Path: "/v1/doctor", Handle: func(w http.ResponseWriter, r *http.Request) {
		localapi.WriteJSON(w, http.StatusOK, a.doctorReport(r.Context(), cfg, cfgPath, store))
	}}
}

// doctorEtcd reports an etcd store: each endpoint, and who leads.
func doctorEtcd(ctx context.Context, st *state.Store, add addFunc) {
	health := st.EtcdHealth(ctx)
	down := 0
	for _, h := range health {
		if h.Err != "" {
			down++
			add("state", "etcd-member-down", doctor.Fail, "etcd endpoint "+h.Endpoint+" does not answer: "+h.Err,
				"bring the member back (etcd keeps serving while a quorum is up; the agents use the others meanwhile)")
		}
	}
	if down == len(health) {
		add("state", "etcd-unreachable", doctor.Fail, "no etcd endpoint answers", "check the etcd cluster and state.etcd.endpoints (docs/ha.md)")
		return
	}
	leader, err := st.Leader(ctx)
	switch {
	case err != nil:
		add("state", "etcd-unreachable", doctor.Fail, "the election cannot be read: "+refusal.Text(err), "check the etcd cluster (docs/ha.md)")
	case leader == "":
		add("state", "etcd-no-leader", doctor.Fail, "the store on etcd ("+st.Path()+") opens, installation "+st.Installation()+", but no agent leads it: nothing is planned or applied",
			"start fleet-agent run on one of the agents' boxes (systemctl start fleet-agent)")
	default:
		role := ""
		if st.Name() != "" && st.Leading() {
			role = " (this agent)"
		}
		add("state", "state-ok", doctor.OK, fmt.Sprintf("the store on etcd (%s) opens, installation %s; %d of %d endpoints answer; agent %s%s leads",
			st.Path(), st.Installation(), len(health)-down, len(health), leader, role), "")
	}
}
