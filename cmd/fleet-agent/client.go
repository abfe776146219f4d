package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/agent"
	"github.com/fleet-agent/fleet-agent/internal/config"
)

// agentClient returns a client of the running agent, or nil when none
// answers on the config's socket: the command then opens the state file.
func (a *app) agentClient(ctx context.Context, cfg *config.Config) *agent.Client {
	c := agent.NewClient(cfg.Socket)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if c.Running(ctx) {
		return c
	}
	return nil
}

// printJSON writes v indented, without HTML escaping (`->` stays `->`): the
// one JSON printer of the command line.
func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.stdout)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// textOrJSON checks the -o of a command that prints text or JSON.
func textOrJSON(output string) error {
	if output != "text" && output != "json" {
		return fmt.Errorf("-o must be text or json, got %q", output)
	}
	return nil
}
