package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/schema"
)

func (a *app) validateCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "validate FILE...",
		Short: "Check fleet.json files against the schema and the rules",
		Long: `Checks each file and prints one line per error, FILE:POINTER: message, on
standard output ("-" reads standard input). With -o json it prints one flat list
of {file, code, message, path} for all files. Exits 0 when every file is valid.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "text" && output != "json" {
				return fmt.Errorf("-o must be text or json, got %q", output)
			}
			all := fleet.Errors{}
			bad := 0
			for _, path := range args {
				data, errs := fleet.ReadFile(path)
				if errs == nil {
					_, errs = fleet.Validate(path, data)
				}
				if len(errs) > 0 {
					bad++
					all = append(all, errs...)
				}
			}
			if output == "json" {
				if err := a.printJSON(all); err != nil {
					return refusal.Wrap(refusal.Internal, err, "cannot write the result")
				}
			} else {
				fmt.Fprint(a.stdout, all.Text())
			}
			if bad > 0 {
				return refusal.New(refusal.InvalidInput, "%d of %d file(s) invalid (%d error(s))", bad, len(args), len(all))
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text or json")
	return cmd
}

// printJSON writes v indented, without HTML escaping (`->` stays `->`).
func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.stdout)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func (a *app) schemaCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "schema",
		Short: "Print the embedded JSON Schema of fleet.json",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			_, err := a.stdout.Write(schema.JSON)
			return err
		},
	}
}

func (a *app) versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit and build date",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			fmt.Fprintf(a.stdout, "fleet-agent %s (commit %s, built %s)\n", version, commit, date)
			return nil
		},
	}
}
