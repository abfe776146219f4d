package main

import (
	"context"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/rs/zerolog"

	"github.com/fleet-agent/fleet-agent/internal/agent"
	"github.com/fleet-agent/fleet-agent/internal/config"
)

// maxTeardowns is the config's apply.maxTeardowns for the agent: a copy,
// so that a reload never writes under a plan that reads it.
func maxTeardowns(c *config.Config) *int {
	n := c.Apply.MaxTeardowns
	return &n
}

// watchReload reloads on SIGHUP and when the config file or the secrets
// directory changes. A bad config is refused (logged with its line) and the
// running one kept.
func (a *app) watchReload(ctx context.Context, path string, log zerolog.Logger) {
	running := a.running.Load()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	w, err := fsnotify.NewWatcher()
	if err == nil {
		defer w.Close()
		// Watch directories, not files: editors and systemd replace files.
		_ = w.Add(filepath.Dir(path))
		if running.Secrets.Dir != "" {
			_ = w.Add(running.Secrets.Dir)
		}
	}
	var events chan fsnotify.Event
	if w != nil {
		events = w.Events
	}
	debounce := time.NewTimer(time.Hour)
	debounce.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			a.reload(path, log, "SIGHUP")
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if filepath.Clean(ev.Name) == filepath.Clean(path) {
				debounce.Reset(200 * time.Millisecond)
			} else if running.Secrets.Dir != "" && filepath.Dir(ev.Name) == filepath.Clean(running.Secrets.Dir) {
				log.Info().Str("file", filepath.Base(ev.Name)).Msg("a secret changed; it is read at its next use")
			}
		case <-debounce.C:
			a.reload(path, log, "the config file changed")
		}
	}
}

// reconfigurable is the running agent as a reload sees it.
type reconfigurable interface {
	Reconfigure(func(*agent.Config))
}

// reconfigureAgent is how a reload reaches the running agent: the keys
// config.Reloadable names, and nothing else.
func reconfigureAgent(ag reconfigurable) func(*config.Config) {
	return func(next *config.Config) {
		ag.Reconfigure(func(c *agent.Config) {
			c.Prune, c.RequireReviewedPlan = next.Apply.Prune, next.Apply.RequireReviewedPlan
			c.MaxTeardowns = maxTeardowns(next)
			c.PolicyPath = next.Policy.Path
			c.DriftEvery, c.Heal = next.Drift.Every, next.Drift.Heal
		})
	}
}

func (a *app) reload(path string, log zerolog.Logger, why string) {
	running := a.running.Load()
	next, err := config.Load(path, a.lookupEnv)
	if err == nil {
		err = next.CheckForRun()
	}
	if err != nil {
		log.Error().Err(err).Str("why", why).Msg("the new config is refused; the running one is kept")
		return
	}
	changes := next.Changes(running)
	if len(changes) == 0 {
		log.Info().Str("why", why).Msg("reloaded: nothing changed")
		return
	}
	restart := []string{}
	for _, c := range changes {
		if c.NeedsRestart() {
			restart = append(restart, c.Key)
		}
		log.Info().Str("why", why).Msg("config: " + c.String())
	}
	// The running config takes only what a reload changes: the local API
	// answers with it, and the next reload compares against it.
	kept := running.Reloaded(next)
	if a.reconfigure != nil {
		a.reconfigure(kept)
	}
	a.running.Store(kept)
	if len(restart) > 0 {
		log.Warn().Strs("keys", restart).Msg("these changes take effect after a restart (systemctl restart fleet-agent); a reload changes " + strings.Join(config.Reloadable, ", "))
	}
}
