package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/fleet-agent/fleet-agent/internal/agent"
	"github.com/fleet-agent/fleet-agent/internal/config"
	"github.com/fleet-agent/fleet-agent/internal/forge"
	"github.com/fleet-agent/fleet-agent/internal/gitsync"
	"github.com/fleet-agent/fleet-agent/internal/localapi"
	"github.com/fleet-agent/fleet-agent/internal/metrics"
	"github.com/fleet-agent/fleet-agent/internal/outbox"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/secrets"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/substrate"
	"github.com/fleet-agent/fleet-agent/internal/substrate/join"
	"github.com/fleet-agent/fleet-agent/internal/ui"
	"github.com/fleet-agent/fleet-agent/internal/webhooks"
)

func (a *app) runCommand() *cobra.Command {
	var logLevel string
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the agent: follow the repository, plan proposals, apply merges",
		Long: `Runs the agent as the config describes (default /etc/fleet-agent/config.yaml):
polls git.url every git.interval, plans each pull request (or, without github,
each other branch), applies the tip of git.branch under the trust rules, checks
drift every drift.every, and serves the local API on the socket and the ops
endpoints on listen. SIGTERM stops it after the current step; SIGHUP reloads.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			level, err := zerolog.ParseLevel(logLevel)
			if err != nil {
				return fmt.Errorf("--log-level: %v", err)
			}
			path, _ := config.Path(a.configPath, a.lookupEnv)
			cfg, err := config.Load(path, a.lookupEnv)
			if err != nil {
				return err
			}
			if err := cfg.CheckForRun(); err != nil {
				return err
			}
			if a.statePath != "" {
				cfg.State = a.statePath
			} else if v, ok := a.lookupEnv("FLEET_AGENT_STATE"); ok && v != "" {
				cfg.State = v
			}
			return a.runAgent(cmd.Context(), cfg, path, level)
		},
	}
	cmd.Flags().StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	return cmd
}

// runAgent wires the agent and runs it until SIGTERM or SIGINT: the store,
// the repository and the adapters, GitHub, the listeners, the agent, what
// serves for the life of the process, the terms that act, and the stop.
func (a *app) runAgent(parent context.Context, cfg *config.Config, cfgPath string, level zerolog.Level) error {
	ctx, stop := signal.NotifyContext(parent, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	resolver := secrets.NewResolver(secrets.Options{Env: a.lookupEnv, Dir: cfg.Secrets.Dir})
	log := secrets.NewLogger(a.stderr, resolver.Redactor(), level)

	// The etcd backend's requests are timed into the metrics, which are
	// made once the store is open.
	var mref atomic.Pointer[metrics.Metrics]
	store, err := openStore(ctx, cfg, resolver, false, func(took time.Duration, err error) {
		if m := mref.Load(); m != nil {
			m.EtcdRequest(took, err)
		}
	}, func(err error) {
		log.Warn().Err(err).Msg("etcd store")
	})
	if err != nil {
		return err
	}
	defer store.Close()

	// The adapters are opened once: the plans' live checks and the
	// substrate reconciler share them.
	opened, err := a.adapters(cfg, resolver)
	if err != nil {
		return err
	}
	repo, err := openRepository(ctx, cfg, resolver)
	if err != nil {
		return err
	}
	defer repo.Close()
	gh, err := a.openGitHub(cfg, resolver, store, log)
	if err != nil {
		return err
	}
	m := agentMetrics(store, gh.box)
	mref.Store(m)
	// The join store is shared by the in-cluster half (tokens, joined
	// nodes) and the join listener (joins, heartbeats kept in memory).
	joins := join.NewStore(store, join.StoreOptions{Log: log.With().Str("room", "join").Logger()})
	defer func() { _ = joins.Flush() }()
	evq, evd := eventDelivery(store, cfg, resolver, log)
	// Interfaces holding no nil *webhooks.Queue without webhooks.
	var agentEv agent.Events
	var recEv substrate.StateEvents
	if evq != nil {
		agentEv, recEv = evq, evq
	}
	rec := substrateReconciler(store, opened, cfg, log, m, joins, recEv)
	ls, err := openListeners(cfg, log, m)
	if err != nil {
		return err
	}
	defer ls.close()
	ag := agent.New(agent.Config{Tenant: cfg.Tenant, Branch: cfg.Git.Branch, Path: cfg.Git.Path, Interval: cfg.Git.Interval,
		Prune: cfg.Apply.Prune, MaxTeardowns: maxTeardowns(cfg), RequireReviewedPlan: cfg.Apply.RequireReviewedPlan, Verify: cfg.Git.Verify != nil,
		Prefix: statusPrefix(cfg), DriftEvery: cfg.Drift.Every, Heal: cfg.Drift.Heal, Repository: redactURL(cfg.Git.URL),
		DriftPullRequests: cfg.Drift.PullRequests, RevertOnClose: cfg.Drift.RevertOnClose,
		// Check runs need an App's installation token; a user token keeps
		// to commit statuses (README, "GitHub checks").
		Checks:     cfg.GitHub != nil && cfg.GitHub.App != nil,
		PolicyPath: cfg.Policy.Path,
		Warnings:   ls.warnings},
		agent.Options{Store: store, Repo: repo, Forge: gh.forge, Outbox: gh.outbox, Live: liveChecks(opened, resolver), Log: log, Metrics: m,
			Substrates: rec, DriftForge: driftForgeOf(gh.gh), Events: agentEv, Hooks: hooksOf(cfg)})
	a.reconfigure = reconfigureAgent(ag)

	srv, err := a.serve(ctx, cfg, cfgPath, store, ag, gh, m, ls.ops, log)
	if err != nil {
		return err
	}
	notify := newNotifier(log)
	notify.ready()
	srv.wg.Go(func() { notify.watchdog(ctx) })
	log.Info().Str("repository", redactURL(cfg.Git.URL)).Str("branch", cfg.Git.Branch).Str("state", store.Path()).
		Str("socket", cfg.Socket).Str("listen", ls.ops.Addr().String()).Bool("github", cfg.GitHub != nil).Msg("fleet-agent running")

	t := &term{cfg: cfg, log: log, ag: ag, box: gh.box, evd: evd, rec: rec, joins: joins, joinPort: ls.join}
	var runErr error
	if store.Backend() != "etcd" {
		runErr = t.run(ctx)
	} else {
		runErr = a.lead(ctx, store, log, t.run)
	}
	notify.stopping()
	log.Info().Msg("stopping: the current step is finished")
	srv.shutdown(stop, gh.box)
	_ = os.Remove(cfg.Socket)
	return runErr
}

// openRepository opens the local copy of git.url. Drift proposals push the
// agent's own branches: a credential that can only read is refused now,
// not at the first drift.
func openRepository(ctx context.Context, cfg *config.Config, resolver *secrets.Resolver) (*gitsync.Repo, error) {
	gcfg := gitsync.Config{URL: cfg.Git.URL, Branch: cfg.Git.Branch, Secrets: resolver,
		Dir: filepath.Join(filepath.Dir(cfg.State), "repository"),
		Auth: gitsync.Auth{Username: cfg.Git.Auth.Username, Token: cfg.Git.Auth.Token, Password: cfg.Git.Auth.Password,
			SSHKey: cfg.Git.Auth.SSHKey, KnownHosts: cfg.Git.Auth.KnownHosts}}
	if cfg.Git.Verify != nil {
		gcfg.KeyringPath = cfg.Git.Verify.Keyring
	}
	repo, err := gitsync.Open(gcfg)
	if err != nil {
		return nil, err
	}
	if cfg.Drift.PullRequests {
		if err := repo.CanPush(ctx); err != nil {
			repo.Close()
			return nil, refusal.Wrap(refusal.InvalidState, err, "drift.pullRequests is on but the git credential cannot push (docs/github.md says what it needs)")
		}
	}
	return repo, nil
}

// github is GitHub as the agent uses it, all nil without a github block:
// the client, the outbox its posts wait in, and the two as the interfaces
// the agent declares (holding no nil pointer when there is no GitHub).
type github struct {
	gh     *forge.GitHub
	box    *outbox.Outbox
	forge  agent.Forge
	outbox agent.Outbox
}

// openGitHub makes the client and its outbox when the config has a github
// block.
func (a *app) openGitHub(cfg *config.Config, resolver *secrets.Resolver, store *state.Store, log zerolog.Logger) (github, error) {
	if cfg.GitHub == nil {
		return github{}, nil
	}
	fc := forge.Config{Repository: cfg.GitHub.Repository, Branch: cfg.Git.Branch, APIURL: cfg.GitHub.APIURL, Token: cfg.GitHub.Token,
		WebhookSecret: cfg.GitHub.WebhookSecret, StatusContext: cfg.GitHub.StatusContext, Resolver: resolver,
		Log: slog.New(slog.NewJSONHandler(resolver.Redactor().Writer(a.stderr), &slog.HandlerOptions{Level: slog.LevelWarn}))}
	if app := cfg.GitHub.App; app != nil {
		fc.App = &forge.App{ID: strconv.FormatInt(app.ID, 10), InstallationID: app.InstallationID, PrivateKey: app.PrivateKey}
	}
	gh, err := forge.New(fc)
	if err != nil {
		return github{}, err
	}
	box := outbox.New(store, gh.Poster(), outbox.Options{Log: log})
	return github{gh: gh, box: box, forge: agentForge{gh}, outbox: box}, nil
}

// agentMetrics are the agent's instruments, with the outbox's and the
// leadership's when there are.
func agentMetrics(store *state.Store, box *outbox.Outbox) *metrics.Metrics {
	var mbox *metrics.Outbox
	if box != nil {
		mbox = &metrics.Outbox{
			Depth: func() int { n, _ := box.Depth(); return n },
			Posts: func() (uint64, uint64, uint64) { s := box.Stats(); return s.Delivered, s.Dropped, s.Failures },
			Drops: box.EachDrop,
		}
	}
	m := metrics.New(mbox)
	if st := store.EtcdStats(); st != nil {
		m.WithLeadership(metrics.Leadership{Leading: store.Leading,
			Transitions:      func() uint64 { return uint64(st.Transitions.Load()) },
			FencedRefused:    func() uint64 { return uint64(st.FencedRefused.Load()) },
			RollForwardsLeft: func() uint64 { return uint64(st.RollForwardsLeft.Load()) }})
	}
	return m
}

// listeners are the agent's TCP listeners: the ops listener, and the join
// listener's port with substrate.join. Both are bound before the agent says
// it runs, so a port taken fails the start, and for the life of the
// process: a standby on etcd keeps the join port bound and refusing
// connections (join.Port) rather than letting another process take it
// between two terms (docs/ha.md).
type listeners struct {
	ops  net.Listener
	join *join.Port // nil without substrate.join
	// warnings are the exposure warnings, for status.
	warnings []string
}

// openListeners binds the listeners and checks where they serve: a
// listener without TLS or authentication off loopback is refused, or served
// loudly by its opt-in.
func openListeners(cfg *config.Config, log zerolog.Logger, m *metrics.Metrics) (*listeners, error) {
	ls := &listeners{}
	if cfg.Substrate.Join != nil {
		p, err := join.BindPort(cfg.Substrate.Join.Listen)
		if err != nil {
			return nil, refusal.Wrap(refusal.InvalidState, err, "cannot listen on %s (substrate.join.listen)", cfg.Substrate.Join.Listen)
		}
		ls.join = p
	}
	ops, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		ls.close()
		return nil, refusal.Wrap(refusal.InvalidState, err, "cannot listen on %s (listen)", cfg.Listen)
	}
	ls.ops = ops
	type check struct {
		addr    net.Addr
		what    exposedWhat
		optedIn bool
	}
	checks := []check{{ops.Addr(), opsExposure, cfg.ExposeOps}}
	if cfg.Pprof {
		checks[0].what = opsPprofExposure
	}
	if ls.join != nil && cfg.Substrate.Join.Insecure {
		checks = append([]check{{ls.join.Addr(), joinExposure, cfg.ExposeInsecureJoin}}, checks...)
	}
	for _, c := range checks {
		e, err := checkExposed(c.addr, c.what, c.optedIn)
		if err != nil {
			ls.close()
			return nil, err
		}
		if e != nil {
			log.Warn().Str("listener", e.listener).Msg(e.warning)
			m.Exposed(e.listener)
			ls.warnings = append(ls.warnings, e.warning)
		}
	}
	return ls, nil
}

// close gives the listeners up; the ops listener's server may have closed
// it already.
func (ls *listeners) close() {
	if ls.join != nil {
		_ = ls.join.Close()
	}
	if ls.ops != nil {
		_ = ls.ops.Close()
	}
}

// servers are what serves for the life of the process, leader or standby:
// the local API on the socket, the ops listener (metrics, status, the
// page, the webhook) and the reload watcher.
type servers struct {
	api, ops *http.Server
	wg       sync.WaitGroup
}

// serve starts the servers on the socket and the ops listener, and the
// reload watcher.
func (a *app) serve(ctx context.Context, cfg *config.Config, cfgPath string, store *state.Store, ag *agent.Agent, gh github,
	m *metrics.Metrics, ops net.Listener, log zerolog.Logger) (*servers, error) {
	sock, err := localapi.ListenSocket(cfg.Socket, cfg.SocketGroup)
	if err != nil {
		return nil, err
	}
	a.running.Store(cfg)
	var hook http.Handler
	if gh.gh != nil && cfg.GitHub.WebhookSecret != "" {
		hook = leaderOnly(store, gh.gh.WebhookHandler(ag.Wake))
	}
	page := ui.Handler(ui.Options{Read: pageSource(ag, store, gh.box, cfg).Read})
	s := &servers{api: localapi.SocketServer(localapi.Handler(ag, store, a.doctorRoute(cfg, cfgPath, store))),
		// Timeouts on the ops listener: a header within 10 s, a whole
		// request within 30 s (the webhook sets its own shorter deadline
		// for its body), an answer within 90 s (pprof's 30 s profile fits),
		// idle keep-alives closed after 60 s; net/http's own OPTIONS *
		// answer is off, so every request reaches the handler.
		ops: &http.Server{Handler: ag.OpsHandler(agent.OpsOptions{Metrics: m.Handler(), Webhook: hook, Pprof: cfg.Pprof, UI: page}),
			ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 90 * time.Second,
			IdleTimeout: 60 * time.Second, MaxHeaderBytes: 64 << 10, DisableGeneralOptionsHandler: true}}
	run := func(srv *http.Server, l net.Listener, what string) {
		s.wg.Go(func() {
			if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error().Err(err).Msg(what + " stopped")
			}
		})
	}
	run(s.api, sock, "the local API")
	run(s.ops, ops, "the ops listener")
	// SIGHUP and changes of the config file reload what can be reloaded.
	s.wg.Go(func() { a.watchReload(ctx, cfgPath, log) })
	return s, nil
}

// shutdown stops the servers once the terms ended: each gets 5 s for the
// requests it is answering, and the outbox as long to deliver what it can
// (the rest waits in the state file); stop ends the reload watcher and the
// watchdog.
func (s *servers) shutdown(stop context.CancelFunc, box *outbox.Outbox) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.api.Shutdown(ctx)
	_ = s.ops.Shutdown(ctx)
	if box != nil {
		_ = box.Flush(ctx)
	}
	stop()
	s.wg.Wait()
}

// term is what acts, for one term: the loop, the outbox, the event
// deliveries, the substrate reconciler and the join listener. On a bbolt
// file one term lasts the life of the process; on etcd one lasts as long as
// this agent leads (lead), and a standby serves the socket, the page and
// the metrics from the store meanwhile.
type term struct {
	cfg      *config.Config
	log      zerolog.Logger
	ag       *agent.Agent
	box      *outbox.Outbox      // nil without GitHub
	evd      *webhooks.Deliverer // nil without webhooks
	rec      *substrate.Reconciler
	joins    *join.Store
	joinPort *join.Port // nil without substrate.join
}

// run runs one term until ctx ends or the loop stops.
func (t *term) run(ctx context.Context) error {
	// The join port listens first: a term that cannot open it starts nothing.
	var joinLn net.Listener
	if t.joinPort != nil {
		ln, err := t.joinPort.Open()
		if err != nil {
			return refusal.Wrap(refusal.InvalidState, err, "cannot listen on %s (substrate.join.listen)", t.joinPort.Addr())
		}
		joinLn = ln
	}
	var wg sync.WaitGroup
	if t.box != nil {
		wg.Go(func() { _ = t.box.Run(ctx) })
	}
	if t.evd != nil {
		wg.Go(func() { t.evd.Run(ctx) })
	}
	if joinLn != nil {
		// The listener's limits are the term's: a new leader starts them
		// afresh, as a newly started agent does.
		jl := join.NewListener(join.ListenerOptions{Store: t.joins, Log: t.log.With().Str("room", "join").Logger()})
		jcfg := *t.cfg.Substrate.Join
		wg.Go(func() {
			defer joinLn.Close() // stops listening; the port stays bound
			if err := jl.ServeOn(ctx, joinLn, jcfg); err != nil && ctx.Err() == nil {
				t.log.Error().Err(err).Msg("the join listener stopped")
			}
		})
	}
	// The substrate reconciler runs beside the loop, on its own schedule
	// (substrate.every) and at once after each apply.
	recCtx, stopRec := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRec()
	recDone := make(chan struct{})
	go func() { defer close(recDone); _ = t.rec.Run(recCtx) }()
	err := t.ag.Run(ctx)
	// A stop lets the reconciler finish its current step, as the loop does:
	// every journal step is its own transaction, so what is cut off is
	// settled by reading the provider back at the next start.
	stopRec()
	select {
	case <-recDone:
	case <-time.After(agent.StopGrace):
		t.log.Warn().Msg("the substrate reconciler did not stop within the grace; its step is settled at the next start")
	}
	wg.Wait()
	// What is kept in memory (heartbeats, posts due) is written while this
	// term still leads: after it resigns every write is refused.
	_ = t.joins.Flush()
	if t.box != nil {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = t.box.Flush(fctx)
		cancel()
	}
	return err
}

func statusPrefix(cfg *config.Config) string {
	if cfg.GitHub != nil && cfg.GitHub.StatusContext != "" {
		return cfg.GitHub.StatusContext
	}
	return config.DefaultStatusContext
}

// redactURL drops credentials from a URL for a log line.
func redactURL(u string) string {
	if i, j := indexScheme(u); i >= 0 && j > i {
		return u[:i] + u[j+1:]
	}
	return u
}

func indexScheme(u string) (int, int) {
	s := -1
	for k := 0; k+2 < len(u); k++ {
		if u[k:k+3] == "://" {
			s = k + 3
			break
		}
	}
	if s < 0 {
		return -1, -1
	}
	for k := s; k < len(u) && u[k] != '/'; k++ {
		if u[k] == '@' {
			return s, k
		}
	}
	return -1, -1
}

// pageSource is where the page (/ui/) reads the running agent: its status,
// the state file, and the outbox when there is GitHub to post to.
func pageSource(ag *agent.Agent, store *state.Store, box *outbox.Outbox, cfg *config.Config) ui.Source {
	src := ui.Source{Agent: ag, Store: store, NoNodeDaemon: cfg.Substrate.NodeDaemon == nil}
	if cfg.GitHub != nil {
		src.CommitURL = ui.CommitURL(redactURL(cfg.Git.URL), cfg.GitHub.Repository, cfg.GitHub.APIURL)
	} else {
		src.CommitURL = ui.CommitURL(redactURL(cfg.Git.URL), "", "")
	}
	if box != nil {
		src.Outbox = func() (*ui.Outbox, error) {
			st := box.Stats()
			o := &ui.Outbox{LastError: st.LastError, LastErrorAt: st.LastErrorAt, LastDelivery: st.LastDelivery}
			err := store.View(func(tx *state.Tx) error {
				n, err := tx.OutboxLen()
				if err != nil {
					return err
				}
				old, _, err := outbox.Oldest(tx)
				o.Waiting, o.Oldest = n, old.QueuedAt
				return err
			})
			return o, err
		}
	}
	return src
}
