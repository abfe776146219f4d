package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/config"
	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/textline"
)

// loadConfig reads the agent config when one is named (--config,
// FLEET_AGENT_CONFIG) or exists at the default path; the commands other
// than run work without one, on the documented defaults.
func (a *app) loadConfig() (*config.Config, error) {
	path, explicit := config.Path(a.configPath, a.lookupEnv)
	if !explicit {
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return config.Defaults(a.lookupEnv), nil
		}
	}
	return config.Load(path, a.lookupEnv)
}

// stateFile says which state file: --state, FLEET_AGENT_STATE, the config's.
func (a *app) stateFile(cfg *config.Config) string {
	if a.statePath != "" {
		return a.statePath
	}
	if v, ok := a.lookupEnv("FLEET_AGENT_STATE"); ok && v != "" {
		return v
	}
	return cfg.State
}

// noStateYet reports whether path holds no state yet: no file, or an empty
// one (what `touch` or a failed copy leaves). Both are a fleet that never
// recorded anything; apply initialises either.
func noStateYet(path string) (bool, error) {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return true, nil
	case err != nil:
		return false, refusal.Wrap(refusal.InvalidState, err, "cannot read the state file %s", path)
	case fi.IsDir():
		return false, refusal.New(refusal.InvalidState, "the state file %s is a directory; --state names the file (for example %s/fleet.db)", path, path)
	}
	return fi.Size() == 0, nil
}

// errNoState is the refusal of a command that reads a fleet (status, export,
// audit, backup) where no state file holds one: a mistyped --state must not
// look like an empty fleet.
func errNoState(path string) error {
	return refusal.New(refusal.InvalidState,
		"no fleet is recorded at %s (no state file, or an empty one): name the agent's state file with --state or --config (or FLEET_AGENT_STATE); nothing was read", path)
}

// openStateRead opens the state file for a command that only reads it, or
// refuses where there is none.
func openStateRead(path string) (*state.Store, error) {
	none, err := noStateYet(path)
	if err != nil {
		return nil, err
	}
	if none {
		return nil, errNoState(path)
	}
	return state.Open(path, state.Options{ReadOnly: true})
}

// snapshotForPlan reads the fleet a plan is made against. Where no state
// is recorded yet the plan is made against an empty fleet (the first plan of
// a new fleet) and says so on stderr, so a mistyped --state is noticed while
// stdout stays the plan.
func (a *app) snapshotForPlan(path string) (*inventory.Snapshot, error) {
	none, err := noStateYet(path)
	if err != nil {
		return nil, err
	}
	if none {
		fmt.Fprintf(a.stderr, "fleet-agent: note: no fleet is recorded at %s yet: planned against an empty fleet (name another state file with --state or --config)\n", textline.Plain(path))
		return inventory.NewSnapshot(nil), nil
	}
	s, err := state.Open(path, state.Options{ReadOnly: true})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return s.Snapshot()
}

// readDocument reads and validates a document, printing its errors the way
// validate does.
func (a *app) readDocument(path string) (*fleet.Document, error) {
	return a.readDocumentAs(path, plan.Text)
}

// readDocumentAs is readDocument for a command printing format: with JSON
// the errors are validate -o json's list, so what reads the output as JSON
// reads them.
func (a *app) readDocumentAs(path string, format plan.Format) (*fleet.Document, error) {
	printErrs := func(errs fleet.Errors) {
		if format == plan.JSON {
			_ = a.printJSON(errs)
			return
		}
		fmt.Fprint(a.stdout, errs.Text())
	}
	data, errs := fleet.ReadFile(path)
	if errs != nil {
		// A file that cannot be read is not an invalid document: say
		// which it is, so a typo in the path reads as one.
		printErrs(errs)
		if _, err := os.Stat(path); path != "-" && errors.Is(err, fs.ErrNotExist) {
			return nil, refusal.New(refusal.InvalidInput, "%s: no such file; give the path of a fleet.json", path)
		}
		return nil, refusal.New(refusal.InvalidInput, "%s cannot be read: %s", path, errs[0].Message)
	}
	var doc *fleet.Document
	if errs == nil {
		doc, errs = fleet.Validate(path, data)
	}
	if errs != nil {
		printErrs(errs)
		return nil, refusal.New(refusal.InvalidInput, "%s is not a valid document (%d error(s))", path, len(errs))
	}
	return doc, nil
}

// who is USER@HOST, the command line's appliedBy.
func who() string {
	name := "unknown"
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	return name + "@" + host
}

// ms renders Unix milliseconds for people.
func ms(t int64) string { return time.UnixMilli(t).UTC().Format(time.RFC3339) }
