package main

import (
	"io"
	"sync/atomic"

	"github.com/fleet-agent/fleet-agent/internal/config"

	"github.com/spf13/cobra"
)

// app carries what every command needs: the streams and the environment,
// injected so tests run commands in-process.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	lookupEnv      func(string) (string, bool)
	// prog is the program as it was started, for commands printed to paste.
	prog string

	configPath string
	statePath  string

	// reconfigure applies a reloaded config to the running agent.
	reconfigure func(*config.Config)
	// running is the running agent's config, replaced whole by a reload.
	running atomic.Pointer[config.Config]
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "fleet-agent",
		Short: "GitOps pull agent for a compute fleet described in fleet.json",
		Long: `fleet-agent validates fleet.json, plans it against the fleet's state and live
providers, and applies exactly the reviewed plan. 'fleet-agent run' is the agent;
the other commands work on their own or through a running agent.`,
		SilenceErrors:     true,
		SilenceUsage:      true,
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	// Accepted by every command, before or after positional arguments.
	root.PersistentFlags().StringVar(&a.configPath, "config", "", "agent config file (default $FLEET_AGENT_CONFIG, else /etc/fleet-agent/config.yaml)")
	root.PersistentFlags().StringVar(&a.statePath, "state", "", "state file (default $FLEET_AGENT_STATE, else the config's state)")
	root.AddCommand(
		a.validateCommand(),
		a.planCommand(),
		a.applyCommand(),
		a.exportCommand(),
		a.statusCommand(),
		a.runCommand(),
		a.editCommand(),
		a.backupCommand(),
		a.stateCommand(),
		a.auditCommand(),
		a.nodeCommand(),
		a.substratesCommand(),
		a.doctorCommand(),
		a.schemaCommand(),
		a.policyCommand(),
		a.versionCommand(),
	)
	return root
}
