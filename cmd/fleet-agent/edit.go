package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fleet-agent/fleet-agent/internal/apply"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

func (a *app) editCommand() *cobra.Command {
	var del bool
	cmd := &cobra.Command{
		Use:   "edit KIND NAME FIELD=JSON... | edit --delete KIND NAME",
		Short: "Break glass: change one object outside the document (audited)",
		Long: `Changes one object of the fleet directly, as an operator must during an
incident: FIELD=JSON sets a field (JSON null removes it), --delete removes the
object. Each edit is audited with the local user. The next drift check reports it;
apply the document again to undo it. References to sites, pools and provider
accounts are ids, as the state stores them.`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			kind, name := inventory.Kind(args[0]), args[1]
			set := map[string]any{}
			for _, kv := range args[2:] {
				f, v, ok := strings.Cut(kv, "=")
				if !ok || f == "" {
					return fmt.Errorf("%q is not FIELD=JSON", kv)
				}
				dec := json.NewDecoder(strings.NewReader(v))
				dec.UseNumber()
				var val any
				if err := dec.Decode(&val); err != nil || dec.More() {
					return refusal.New(refusal.InvalidInput, "the value of %s is not JSON (strings need quotes: %s='\"x\"')", f, f)
				}
				set[f] = val
			}
			if del && len(set) > 0 {
				return fmt.Errorf("--delete takes no FIELD=JSON")
			}
			cfg, err := a.loadConfig()
			if err != nil {
				return err
			}
			req := editRequest{Kind: string(kind), Name: name, Set: set, Delete: del, Who: who()}
			if c := a.agentClient(cmd.Context(), cfg); c != nil {
				var out map[string]any
				if err := c.Do(cmd.Context(), "POST", "/v1/edit", req, &out); err != nil {
					return err
				}
			} else {
				store, err := state.Open(a.stateFile(cfg), state.Options{})
				if err != nil {
					return err
				}
				defer store.Close()
				if err := apply.ApplyEdit(store, apply.Edit{Kind: kind, Name: name, Set: set, Delete: del, Who: req.Who}); err != nil {
					return err
				}
			}
			what := "changed"
			if del {
				what = "deleted"
			}
			fmt.Fprintf(a.stdout, "%s %s %s (audited as %s); drift will report it until the document is applied again.\n", kind, name, what, req.Who)
			return nil
		},
	}
	cmd.Flags().BoolVar(&del, "delete", false, "delete the object")
	return cmd
}

func (a *app) backupCommand() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "backup --out FILE",
		Short: "Write a consistent copy of the state file, even while the agent runs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return fmt.Errorf("--out FILE is required")
			}
			cfg, err := a.loadConfig()
			if err != nil {
				return err
			}
			f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				if errors.Is(err, fs.ErrExist) {
					return refusal.New(refusal.InvalidInput, "%s exists; backup never overwrites a file", out)
				}
				return refusal.Wrap(refusal.InvalidInput, err, "cannot create %s", out)
			}
			fail := func(err error) error {
				f.Close()
				os.Remove(out)
				return err
			}
			if c := a.agentClient(cmd.Context(), cfg); c != nil {
				if err := c.Do(cmd.Context(), "GET", "/v1/backup", nil, f); err != nil {
					return fail(err)
				}
			} else {
				store, err := state.Open(a.stateFile(cfg), state.Options{ReadOnly: true})
				if err != nil {
					return fail(err)
				}
				_, err = store.WriteBackup(f)
				store.Close()
				if err != nil {
					return fail(refusal.Wrap(refusal.Internal, err, "cannot copy the state file"))
				}
			}
			if err := f.Sync(); err != nil {
				return fail(err)
			}
			if err := f.Close(); err != nil {
				return fail(err)
			}
			// Check the copy opens as a state file before saying it is good.
			check, err := state.Open(out, state.Options{ReadOnly: true})
			if err != nil {
				return refusal.Wrap(refusal.Internal, err, "the backup %s does not open", out)
			}
			defer check.Close()
			if err := check.Check(); err != nil {
				return refusal.Wrap(refusal.Internal, err, "the backup %s is inconsistent", out)
			}
			fmt.Fprintf(a.stdout, "backup written to %s\n", out)
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "the file to write (never overwritten)")
	return cmd
}
