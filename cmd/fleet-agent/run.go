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
	"github.com/fleet-agent/fleet-agent/internal/metrics"
	"github.com/fleet-agent/fleet-agent/internal/outbox"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/secrets"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/substrate"
	"github.com/fleet-agent/fleet-agent/internal/substrate/join"
	"github.com/fleet-agent/fleet-agent/internal/ui"
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

// runAgent wires the agent and runs it until SIGTERM or SIGINT.
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
	})
	if err != nil {
		return err
	}
	defer store.Close()
	onEtcd := store.Backend() == "etcd"

	// The adapters are opened once: the plans' live checks and the
	// substrate reconciler share them.
	opened, err := a.adapters(cfg, resolver)
	if err != nil {
		return err
	}
	live := liveChecks(opened, resolver)
	gcfg := gitsync.Config{URL: cfg.Git.URL, Branch: cfg.Git.Branch, Secrets: resolver,
		Dir: filepath.Join(filepath.Dir(cfg.State), "repository"),
		Auth: gitsync.Auth{Username: cfg.Git.Auth.Username, Token: cfg.Git.Auth.Token, Password: cfg.Git.Auth.Password,
			SSHKey: cfg.Git.Auth.SSHKey, KnownHosts: cfg.Git.Auth.KnownHosts}}
	if cfg.Git.Verify != nil {
		gcfg.KeyringPath = cfg.Git.Verify.Keyring
	}
	repo, err := gitsync.Open(gcfg)
	if err != nil {
		return err
	}
	defer repo.Close()
	// Drift proposals push the agent's own branches: a credential that can
	// only read is refused now, not at the first drift.
	if cfg.Drift.PullRequests {
		if err := repo.CanPush(ctx); err != nil {
			return refusal.Wrap(refusal.InvalidState, err, "drift.pullRequests is on but the git credential cannot push (docs/github.md says what it needs)")
		}
	}

	var box *outbox.Outbox
	var gh *forge.GitHub
	var agentF agent.Forge
	var agentO agent.Outbox // an interface holding no *outbox.Outbox when nil
	if cfg.GitHub != nil {
		fc := forge.Config{Repository: cfg.GitHub.Repository, Branch: cfg.Git.Branch, APIURL: cfg.GitHub.APIURL, Token: cfg.GitHub.Token,
			WebhookSecret: cfg.GitHub.WebhookSecret, StatusContext: cfg.GitHub.StatusContext, Resolver: resolver,
			Log: slog.New(slog.NewJSONHandler(resolver.Redactor().Writer(a.stderr), &slog.HandlerOptions{Level: slog.LevelWarn}))}
		if app := cfg.GitHub.App; app != nil {
			fc.App = &forge.App{ID: strconv.FormatInt(app.ID, 10), InstallationID: app.InstallationID, PrivateKey: app.PrivateKey}
		}
		gh, err = forge.New(fc)
		if err != nil {
			return err
		}
		box = outbox.New(store, gh.Poster(), outbox.Options{Log: log})
		agentF, agentO = agentForge{gh}, box
	}
	var mbox *metrics.Outbox
	if box != nil {
		mbox = &metrics.Outbox{
			Depth: func() int { n, _ := box.Depth(); return n },
			Posts: func() (uint64, uint64, uint64) { s := box.Stats(); return s.Delivered, s.Dropped, s.Failures },
			Drops: box.EachDrop,
		}
	}
	m := metrics.New(mbox)
	mref.Store(m)
	if st := store.EtcdStats(); st != nil {
		m.WithLeadership(metrics.Leadership{Leading: store.Leading,
			Transitions:   func() uint64 { return uint64(st.Transitions.Load()) },
			FencedRefused: func() uint64 { return uint64(st.FencedRefused.Load()) }})
	}
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
	// The join listener faces the nodes' network; it listens before the
	// agent says it runs, so a port taken fails the start.
	// On etcd only the leader serves it (docs/ha.md): it is opened here to
	// check the address, and again for each term of leadership.
	var joinLn net.Listener
	if cfg.Substrate.Join != nil {
		if joinLn, err = net.Listen("tcp", cfg.Substrate.Join.Listen); err != nil {
			return refusal.Wrap(refusal.InvalidState, err, "cannot listen on %s (substrate.join.listen)", cfg.Substrate.Join.Listen)
		}
		// Served below; closed here when the start fails before that.
		defer func() { joinLn.Close() }()
	}
	// The ops listener, as early, and for the same reason.
	ops, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return refusal.Wrap(refusal.InvalidState, err, "cannot listen on %s (listen)", cfg.Listen)
	}
	defer ops.Close()
	// A listener without TLS or authentication off loopback is refused, or
	// served loudly by its opt-in.
	var warnings []string
	for _, c := range []struct {
		l       net.Listener
		what    exposedWhat
		optedIn bool
	}{
		{joinLn, joinExposure, cfg.ExposeInsecureJoin},
		{ops, opsExposure, cfg.ExposeOps},
	} {
		if c.l == nil || (c.what.listener == "join" && !cfg.Substrate.Join.Insecure) {
			continue
		}
		if c.what.listener == "ops" && cfg.Pprof {
			c.what = opsPprofExposure
		}
		e, err := checkExposed(c.l, c.what, c.optedIn)
		if err != nil {
			return err
		}
		if e != nil {
			log.Warn().Str("listener", e.listener).Msg(e.warning)
			m.Exposed(e.listener)
			warnings = append(warnings, e.warning)
		}
	}
	ag := agent.New(agent.Config{Tenant: cfg.Tenant, Branch: cfg.Git.Branch, Path: cfg.Git.Path, Interval: cfg.Git.Interval,
		Prune: cfg.Apply.Prune, MaxTeardowns: maxTeardowns(cfg), RequireReviewedPlan: cfg.Apply.RequireReviewedPlan, Verify: cfg.Git.Verify != nil,
		Prefix: statusPrefix(cfg), DriftEvery: cfg.Drift.Every, Heal: cfg.Drift.Heal, Repository: redactURL(cfg.Git.URL),
		DriftPullRequests: cfg.Drift.PullRequests, RevertOnClose: cfg.Drift.RevertOnClose,
		// Check runs need an App's installation token; a user token keeps
		// to commit statuses (README, "GitHub checks").
		Checks:     cfg.GitHub != nil && cfg.GitHub.App != nil,
		PolicyPath: cfg.Policy.Path,
		Warnings:   warnings},
		agent.Options{Store: store, Repo: repo, Forge: agentF, Outbox: agentO, Live: live, Log: log, Metrics: m,
			Substrates: rec, DriftForge: driftForgeOf(gh), Events: agentEv, Hooks: hooksOf(cfg)})

	a.reconfigure = func(next *config.Config) {
		ag.Reconfigure(func(c *agent.Config) {
			c.Prune, c.RequireReviewedPlan = next.Apply.Prune, next.Apply.RequireReviewedPlan
			c.MaxTeardowns = maxTeardowns(next)
			c.PolicyPath = next.Policy.Path
			c.DriftEvery, c.Heal = next.Drift.Every, next.Drift.Heal
		})
	}
	// The local API on the socket.
	sock, err := agent.ListenSocket(cfg.Socket, cfg.SocketGroup)
	if err != nil {
		return err
	}
	a.running.Store(cfg)
	api := agent.SocketServer(a.doctorHandler(cfg, cfgPath, store, ag.Handler()))
	var hook http.Handler
	if gh != nil && cfg.GitHub.WebhookSecret != "" {
		hook = leaderOnly(store, gh.WebhookHandler(ag.Wake))
	}
	page := ui.Handler(ui.Options{Read: pageSource(ag, store, box, cfg).Read})
	// Timeouts on the ops listener: a header within 10 s, a whole request
	// within 30 s (the webhook sets its own shorter deadline for its body), an
	// answer within 90 s (pprof's 30 s profile fits), idle keep-alives closed
	// after 60 s; net/http's own OPTIONS * answer is off, so every request
	// reaches the handler.
	opsSrv := &http.Server{Handler: ag.OpsHandler(agent.OpsOptions{Metrics: m.Handler(), Webhook: hook, Pprof: cfg.Pprof, UI: page}),
		ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 90 * time.Second,
		IdleTimeout: 60 * time.Second, MaxHeaderBytes: 64 << 10, DisableGeneralOptionsHandler: true}

	var wg sync.WaitGroup
	serve := func(s *http.Server, l net.Listener, what string) {
		wg.Go(func() {
			if err := s.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error().Err(err).Msg(what + " stopped")
			}
		})
	}
	serve(api, sock, "the local API")
	serve(opsSrv, ops, "the ops listener")
	// SIGHUP and changes of the config file reload what can be reloaded.
	wg.Go(func() { a.watchReload(ctx, cfgPath, log) })
	notify := newNotifier(log)
	notify.ready()
	wg.Go(func() { notify.watchdog(ctx) })
	log.Info().Str("repository", redactURL(cfg.Git.URL)).Str("branch", cfg.Git.Branch).Str("state", store.Path()).
		Str("socket", cfg.Socket).Str("listen", ops.Addr().String()).Bool("github", cfg.GitHub != nil).Msg("fleet-agent running")

	// What acts (the loop, the outbox, the reconciler, the join listener)
	// runs in a term: for the life of the process on a bbolt file, for as
	// long as this agent leads on etcd. A standby serves the socket, the
	// page and the metrics from the store meanwhile.
	term := func(tctx context.Context, joinLn net.Listener) error {
		var twg sync.WaitGroup
		if box != nil {
			twg.Go(func() { _ = box.Run(tctx) })
		}
		if evd != nil {
			twg.Go(func() { evd.Run(tctx) })
		}
		if joinLn != nil {
			jl := join.NewListener(join.ListenerOptions{Store: joins, Log: log.With().Str("room", "join").Logger()})
			jcfg := *cfg.Substrate.Join
			twg.Go(func() {
				if err := jl.ServeOn(tctx, joinLn, jcfg); err != nil && tctx.Err() == nil {
					log.Error().Err(err).Msg("the join listener stopped")
				}
			})
		}
		// The substrate reconciler runs beside the loop, on its own schedule
		// (substrate.every) and at once after each apply.
		recCtx, stopRec := context.WithCancel(context.WithoutCancel(tctx))
		defer stopRec()
		recDone := make(chan struct{})
		go func() { defer close(recDone); _ = rec.Run(recCtx) }()
		err := ag.Run(tctx)
		// A stop lets the reconciler finish its current step, as the loop does:
		// every journal step is its own transaction, so what is cut off is
		// settled by reading the provider back at the next start.
		stopRec()
		select {
		case <-recDone:
		case <-time.After(agent.StopGrace):
			log.Warn().Msg("the substrate reconciler did not stop within the grace; its step is settled at the next start")
		}
		twg.Wait()
		// What is kept in memory (heartbeats, posts due) is written while
		// this term still leads: after it resigns every write is refused.
		_ = joins.Flush()
		if box != nil {
			fctx, cancel := context.WithTimeout(context.WithoutCancel(tctx), 5*time.Second)
			_ = box.Flush(fctx)
			cancel()
		}
		return err
	}
	var runErr error
	if !onEtcd {
		runErr = term(ctx, joinLn)
	} else {
		joinAddr := ""
		if joinLn != nil {
			joinAddr = joinLn.Addr().String()
			joinLn.Close()
		}
		runErr = a.lead(ctx, store, log, func(tctx context.Context) error {
			var ln net.Listener
			if joinAddr != "" {
				var err error
				if ln, err = net.Listen("tcp", joinAddr); err != nil {
					return refusal.Wrap(refusal.InvalidState, err, "cannot listen on %s (substrate.join.listen)", joinAddr)
				}
				defer ln.Close()
			}
			return term(tctx, ln)
		})
	}
	notify.stopping()
	log.Info().Msg("stopping: the current step is finished")
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = api.Shutdown(shutdown)
	_ = opsSrv.Shutdown(shutdown)
	if box != nil {
		// Deliver what can be delivered quickly; the rest waits in the state file.
		_ = box.Flush(shutdown)
	}
	stop()
	wg.Wait()
	_ = os.Remove(cfg.Socket)
	return runErr
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
