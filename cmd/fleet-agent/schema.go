package main

import (
	"github.com/spf13/cobra"

	"github.com/fleet-agent/fleet-agent/schema"
)

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
