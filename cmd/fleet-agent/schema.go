package main

import (
	"github.com/spf13/cobra"

	"github.com/fleet-agent/fleet-agent/schema"
)

func (a *app) schemaCommand() *cobra.Command {
	var policy bool
	cmd := &cobra.Command{
		Use:   "schema",
		Short: "Print the embedded JSON Schema of fleet.json (or, with --policy, of a policy file)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			out := schema.JSON
			if policy {
				out = schema.PolicyJSON
			}
			_, err := a.stdout.Write(out)
			return err
		},
	}
	cmd.Flags().BoolVar(&policy, "policy", false, "print the schema of a policy file instead")
	return cmd
}
