package main

import (
	"context"
	"fmt"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/config"
	"github.com/fleet-agent/fleet-agent/internal/imagepin"
	"github.com/fleet-agent/fleet-agent/internal/imageref"
	"github.com/fleet-agent/fleet-agent/internal/metrics"
	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/substrate"
	"github.com/fleet-agent/fleet-agent/internal/substrate/drain"
	"github.com/fleet-agent/fleet-agent/internal/substrate/incluster"
	"github.com/fleet-agent/fleet-agent/internal/substrate/join"
)

// substrateReconciler makes the reconciler of the running agent over the
// adapters it opened.
func substrateReconciler(store *state.Store, opened map[string]providers.Kubernetes, cfg *config.Config, log zerolog.Logger, m *metrics.Metrics, joins *join.Store, events substrate.StateEvents) *substrate.Reconciler {
	opts := reconcilerOptions(store, opened, cfg, log, m, joins)
	opts.Events = events
	return substrate.New(opts)
}

// reconcilerOptions are the running agent's reconciler options. With
// substrate.nodeDaemon configured (and the join store the listener shares),
// the in-cluster half puts the node daemon in every substrate's cluster;
// without it a substrate whose node pools run waits, saying the node daemon
// is not configured.
func reconcilerOptions(store *state.Store, opened map[string]providers.Kubernetes, cfg *config.Config, log zerolog.Logger, m *metrics.Metrics, joins *join.Store) substrate.Options {
	provs := make(map[string]substrate.Provider, len(opened))
	for id, ad := range opened {
		provs[id] = ad
	}
	// An operation in progress is looked at again no later than the next
	// pass: a short substrate.every (a demo, a test) polls as often.
	poll := min(substrate.DefaultPoll, cfg.Substrate.Every)
	lg := log.With().Str("room", "substrate").Logger()
	opts := substrate.Options{Store: store, Providers: provs, Log: lg,
		Metrics: m, Every: cfg.Substrate.Every, Poll: poll}
	if cfg.Substrate.NodeDaemon != nil && joins != nil {
		// Node daemons join with their Pod's token, reviewed at the
		// cluster with the run's credential; the pool's Secret token is
		// the fallback where no review can be made.
		pods := incluster.NewPodTokens(nil)
		joins.SetReviewer(pods)
		pin := nodeDaemonPinner(store, cfg.Substrate.NodeDaemon, lg)
		opts.InCluster = incluster.New(incluster.Options{Daemon: cfg.Substrate.NodeDaemon, Joins: joins, Tenant: cfg.Tenant, Log: lg, PodTokens: pods,
			Image: func(ctx context.Context) string { return pin.Image(ctx).Image }, Audit: drain.StateAudit{Store: store, Clock: clock.Real{}}})
	}
	return opts
}

// nodeDaemonPinner pins the node daemon's configured tag to its digest at
// the registry, at the first apply of the DaemonSet after a start (the
// image takes a restart to change), and records the answer in the store.
func nodeDaemonPinner(store *state.Store, nd *config.NodeDaemon, log zerolog.Logger) *imagepin.Pinner {
	return &imagepin.Pinner{Ref: nd.Image, Off: !nd.ResolveDigest, Resolve: imageref.Resolver{}.Resolve,
		Records: imagepin.StoreRecords{Store: store}, Log: log}
}

func (a *app) substratesCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "substrates",
		Short: "List the Kubernetes substrates: cluster, state, node pools, nodes",
		Long: `Lists every pool's Kubernetes substrate (policy.substrate): its cluster, state and
message, node pools, and Nodes listed and joined. Through the running agent, or on
the state file with no agent running. It never shows a token or a credential.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := textOrJSON(output); err != nil {
				return err
			}
			cfg, err := a.loadConfig()
			if err != nil {
				return err
			}
			list, err := readFleet(cmd.Context(), a, cfg, "/v1/substrates", substrate.Statuses)
			if err != nil {
				return err
			}
			if list == nil {
				list = []substrate.Status{}
			}
			if output == "json" {
				return a.printJSON(list)
			}
			for _, l := range substrate.TextLines(list) {
				fmt.Fprintln(a.stdout, l)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text or json")
	return cmd
}
