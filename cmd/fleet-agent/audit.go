package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/fleet-agent/fleet-agent/internal/localapi"
	"github.com/fleet-agent/fleet-agent/internal/refs"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/textline"
)

// audit is an addition to the documented commands: the audit log is
// written by every apply, heal and edit, and an operator must be able to
// read it without copying the state file.
func (a *app) auditCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Print the audit log: every call, apply, heal and break-glass edit",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := textOrJSON(output); err != nil {
				return err
			}
			cfg, err := a.loadConfig()
			if err != nil {
				return err
			}
			rows, err := readFleet(cmd.Context(), a, cfg, "/v1/audit", localapi.AuditRows)
			if err != nil {
				return err
			}
			if output == "json" {
				if rows == nil {
					rows = []state.AuditRow{}
				}
				return a.printJSON(rows)
			}
			for _, r := range rows {
				line := fmt.Sprintf("%d %s %s %s", r.Seq, ms(r.At), r.Who, r.Action)
				if r.Method != "" {
					line += " " + r.Method + " " + string(textline.EscapeJSON(r.Params))
				}
				if r.Action == "apply" || r.Action == "heal" {
					line += fmt.Sprintf(" %d call(s) plan %s", r.Calls, refs.Short(r.PlanHash))
				}
				if r.Commit != "" {
					line += " commit " + refs.Short(r.Commit)
				}
				fmt.Fprintln(a.stdout, line)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text or json")
	return cmd
}
