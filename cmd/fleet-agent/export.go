package main

import (
	"bytes"
	"errors"
	"io/fs"
	"os"

	"github.com/spf13/cobra"

	"github.com/fleet-agent/fleet-agent/internal/localapi"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/textline"
)

func (a *app) exportCommand() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "export",
		Short: "Print the current fleet as a document",
		Long: `Writes the fleet as a fleet.json document: every live object by name (objects
fleet did not create under their id). With --out it writes a new file and refuses
to overwrite one.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := a.loadConfig()
			if err != nil {
				return err
			}
			var data []byte
			if client := a.agentClient(cmd.Context(), cfg); client != nil {
				var b bytes.Buffer
				if err := client.Do(cmd.Context(), "GET", "/v1/export", nil, &b); err != nil {
					return err
				}
				data = b.Bytes()
			} else {
				s, err := a.openRead(cmd.Context(), cfg)
				if err != nil {
					return err
				}
				data, err = localapi.Export(s)
				s.Close()
				if err != nil {
					return err
				}
			}
			// The document quotes the authors' words: what a terminal
			// would obey is written as its escape, which reads back the same.
			data = textline.EscapeJSON(data)
			if out == "" {
				_, err = a.stdout.Write(data)
				return err
			}
			f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
			if err != nil {
				if errors.Is(err, fs.ErrExist) {
					return refusal.New(refusal.InvalidInput, "%s exists; export never overwrites a file: choose another --out or remove it", out)
				}
				return refusal.Wrap(refusal.InvalidInput, err, "cannot create %s", out)
			}
			if _, err := f.Write(data); err != nil {
				f.Close()
				return refusal.Wrap(refusal.Internal, err, "cannot write %s", out)
			}
			return f.Close()
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "write to a new file instead of standard output")
	return cmd
}
