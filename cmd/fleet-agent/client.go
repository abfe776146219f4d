package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/config"
	"github.com/fleet-agent/fleet-agent/internal/localapi"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/textline"
)

// agentClient returns a client of the running agent, or nil when none
// answers on the config's socket: the command then opens the state file.
// A state file named apart from the config's (--state, FLEET_AGENT_STATE)
// is not the agent's: the command opens the file it was given rather than
// answer from the agent's.
func (a *app) agentClient(ctx context.Context, cfg *config.Config) *localapi.Client {
	if named := a.stateFile(cfg); named != cfg.State && !sameFile(named, cfg.State) {
		return nil
	}
	c := localapi.NewClient(cfg.Socket)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if c.Running(ctx) {
		return c
	}
	return nil
}

// readFleet reads what a read-only command shows: through the running
// agent's route when one answers (it holds the state file), else from the
// state file itself, which must exist (openStateRead).
func readFleet[T any](ctx context.Context, a *app, cfg *config.Config, route string, fromFile func(*state.Store) (T, error)) (T, error) {
	var v T
	if c := a.agentClient(ctx, cfg); c != nil {
		err := c.Do(ctx, "GET", route, nil, &v)
		return v, err
	}
	s, err := a.openRead(ctx, cfg)
	if err != nil {
		return v, err
	}
	defer s.Close()
	return fromFile(s)
}

// printJSON writes v indented, without HTML escaping (`->` stays `->`): the
// one JSON printer of the command line.
func (a *app) printJSON(v any) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	// What the JSON quotes came from outside: the characters a terminal
	// would obey are written as their escapes, which read back the same.
	_, err := a.stdout.Write(textline.EscapeJSON(b.Bytes()))
	return err
}

// textOrJSON checks the -o of a command that prints text or JSON.
func textOrJSON(output string) error {
	if output != "text" && output != "json" {
		return fmt.Errorf("-o must be text or json, got %q", output)
	}
	return nil
}
