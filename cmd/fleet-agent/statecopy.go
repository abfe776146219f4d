package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleet-agent/fleet-agent/internal/config"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/secrets"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

func (a *app) stateCommand() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "state",
		Short: "Move the store between backends (a bbolt file, etcd)",
	})
	cmd.AddCommand(a.stateCopyCommand())
	return cmd
}

func (a *app) stateCopyCommand() *cobra.Command {
	var from, to string
	cmd := &cobra.Command{
		Use:   "copy --from bbolt:PATH|etcd:URL[,URL...]/PREFIX --to bbolt:PATH|etcd:URL[,URL...]/PREFIX",
		Short: "Copy every record of a store into a new one, installation id included",
		Long: `Copies every record of one store into another that holds nothing yet: a new
bbolt file, or an etcd prefix nothing was written under. The installation id
travels, so the copy owns the same clusters. Stop the agent first (a copy of a
bbolt file needs it released; a copy out of etcd reads one revision, so it is
consistent while agents run, but what they write after it is not in it).
etcd: alone means the config's state.etcd; its TLS files and credentials are
used for any etcd location.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if from == "" || to == "" {
				return refusal.New(refusal.InvalidInput, "state copy needs --from and --to (bbolt:PATH or etcd:URL,.../PREFIX)")
			}
			cfg, err := a.loadConfig()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			src, err := a.openLocation(ctx, cfg, from, true)
			if err != nil {
				return err
			}
			defer src.Close()
			dst, err := a.openLocation(ctx, cfg, to, false)
			if err != nil {
				return err
			}
			defer dst.Close()
			n, err := src.CopyTo(dst)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "copied %d records of installation %s from %s to %s\n", n, src.Installation(), src.Path(), dst.Path())
			return nil
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "the store to read: bbolt:PATH or etcd:URL[,URL...]/PREFIX")
	cmd.Flags().StringVar(&to, "to", "", "the new store: bbolt:PATH (a new file) or etcd:URL[,URL...]/PREFIX (an unused prefix)")
	return cmd
}

// openLocation opens a --from or --to store. A destination on etcd is led
// for the copy: an agent leading that prefix means it is in use, and the
// copy is refused rather than waiting.
func (a *app) openLocation(ctx context.Context, cfg *config.Config, loc string, read bool) (*state.Store, error) {
	kind, rest, _ := strings.Cut(loc, ":")
	switch kind {
	case "bbolt":
		if rest == "" {
			return nil, refusal.New(refusal.InvalidInput, "%s: name the file (bbolt:PATH)", loc)
		}
		if read {
			return openStateRead(rest)
		}
		if _, err := os.Stat(rest); err == nil {
			return nil, refusal.New(refusal.InvalidInput, "%s exists; a copy goes into a new file", rest)
		}
		return state.Open(rest, state.Options{})
	case "etcd":
		e := config.StateEtcd{Lease: 5 * time.Second}
		if cfg.Etcd != nil {
			e = *cfg.Etcd
		}
		if rest != "" {
			eps, prefix, err := parseEtcdLocation(rest)
			if err != nil {
				return nil, err
			}
			e.Endpoints, e.Prefix = eps, prefix
		}
		if len(e.Endpoints) == 0 {
			return nil, refusal.New(refusal.InvalidInput, "%s: no endpoints (write etcd:https://host:2379/PREFIX, or set state.etcd in the config)", loc)
		}
		if e.Name == "" {
			e.Name = "state-copy"
		}
		opts, err := etcdOptions(ctx, &e, secrets.NewResolver(secrets.Options{Env: a.lookupEnv, Dir: cfg.Secrets.Dir}))
		if err != nil {
			return nil, err
		}
		opts.ReadOnly = read
		s, err := state.OpenEtcd(ctx, opts)
		if err != nil || read {
			return s, err
		}
		if leader, _ := s.Leader(ctx); leader != "" {
			s.Close()
			return nil, refusal.New(refusal.InvalidState, "agent %s leads %s: it is in use; copy into an unused prefix, or stop the agents first", leader, s.Path())
		}
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if _, err := s.Lead(lctx); err != nil {
			s.Close()
			return nil, refusal.Wrap(refusal.Unavailable, err, "cannot lead %s for the copy", s.Path())
		}
		return s, nil
	}
	return nil, refusal.New(refusal.InvalidInput, "%q: a location is bbolt:PATH or etcd:URL[,URL...]/PREFIX", loc)
}

// parseEtcdLocation reads URL[,URL...]/PREFIX: the prefix is the path of
// the last URL.
func parseEtcdLocation(s string) ([]string, string, error) {
	parts := strings.Split(s, ",")
	last, err := url.Parse(parts[len(parts)-1])
	if err != nil || last.Host == "" || (last.Scheme != "http" && last.Scheme != "https") {
		return nil, "", refusal.New(refusal.InvalidInput, "etcd:%s: write etcd:https://host:2379[,https://host2:2379]/PREFIX", s)
	}
	prefix := strings.TrimRight(last.Path, "/")
	if prefix == "" {
		return nil, "", refusal.New(refusal.InvalidInput, "etcd:%s: name the prefix after the last endpoint (for example /fleet-agent/prod)", s)
	}
	last.Path = ""
	parts[len(parts)-1] = last.String()
	return parts, prefix, nil
}
