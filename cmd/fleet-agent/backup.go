package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/spf13/cobra"

	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

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
				store, err := a.openRead(cmd.Context(), cfg)
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
