package main

import (
	"fmt"
	"os/signal"
	"syscall"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/fleet-agent/fleet-agent/internal/secrets"
	"github.com/fleet-agent/fleet-agent/internal/substrate/join"
)

// nodeCommand is `fleet-agent node`, the node daemon: the entrypoint of the
// image the substrate's DaemonSet runs on every Node of a pool.
func (a *app) nodeCommand() *cobra.Command {
	var o join.DaemonOptions
	var logLevel string
	cmd := &cobra.Command{
		Use:   "node",
		Short: "Run the node daemon: join this Node to its pool and heartbeat",
		Long: `Runs on each Node of a Kubernetes substrate, as the DaemonSet fleet-node/fleet-node
starts it. Reads the pool id, join URL and pins from the ConfigMap fleet-node/fleet-node
(mounted at --config-dir), the join token from the Secret fleet-node/fleet-node-join
(--token-file) and the Node name from NODE_NAME; joins the pool through the agent's join
listener, keeps the node key it gets in --state-dir, and heartbeats with it. Every
failure is retried with backoff and logged with what to fix. SIGTERM stops it.

Each flag may also come from the environment: FLEET_NODE_CONFIG_DIR,
FLEET_NODE_TOKEN_FILE, FLEET_NODE_POD_TOKEN_FILE, FLEET_NODE_STATE_DIR, NODE_NAME, POD_UID.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			level, err := zerolog.ParseLevel(logLevel)
			if err != nil {
				return fmt.Errorf("--log-level: %v", err)
			}
			fromEnv := func(flag, env string, dst *string) {
				if !cmd.Flags().Changed(flag) {
					if v, ok := a.lookupEnv(env); ok && v != "" {
						*dst = v
					}
				}
			}
			fromEnv("config-dir", "FLEET_NODE_CONFIG_DIR", &o.ConfigDir)
			fromEnv("token-file", "FLEET_NODE_TOKEN_FILE", &o.TokenFile)
			fromEnv("pod-token-file", "FLEET_NODE_POD_TOKEN_FILE", &o.PodTokenFile)
			fromEnv("state-dir", "FLEET_NODE_STATE_DIR", &o.StateDir)
			fromEnv("node-name", join.NodeNameEnv, &o.NodeName)
			fromEnv("pod-uid", join.PodUIDEnv, &o.PodUID)
			// The token and the node key are added as they are read, so no
			// log line can show them.
			o.Redactor = secrets.NewRedactor()
			o.Log = secrets.NewLogger(a.stderr, o.Redactor, level)
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			return join.RunDaemon(ctx, o)
		},
	}
	cmd.Flags().StringVar(&o.ConfigDir, "config-dir", join.DefaultConfigDir, "the ConfigMap fleet-node/fleet-node as mounted (files poolId, joinURL, caPins)")
	cmd.Flags().StringVar(&o.TokenFile, "token-file", join.DefaultTokenFile, "the join token (key token of the Secret fleet-node/fleet-node-join)")
	cmd.Flags().StringVar(&o.PodTokenFile, "pod-token-file", join.DefaultPodTokenFile, "the Pod's projected service-account token (audience "+join.PodAudience+"), tried first when joining")
	cmd.Flags().StringVar(&o.StateDir, "state-dir", join.DefaultStateDir, "where the node key is kept (mode 0600), so a restart heartbeats instead of joining again")
	cmd.Flags().StringVar(&o.NodeName, "node-name", "", "this Node's name (default $NODE_NAME, from the downward API's spec.nodeName)")
	cmd.Flags().StringVar(&o.PodUID, "pod-uid", "", "this Pod's uid (default $POD_UID, from the downward API's metadata.uid), sent with each heartbeat so that a key left on the Node by another Pod is refused")
	cmd.Flags().StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	return cmd
}
