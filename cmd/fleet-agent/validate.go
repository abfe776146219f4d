package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/textline"
)

func (a *app) validateCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "validate FILE...",
		Short: "Check fleet.json files against the schema and the rules",
		Long: `Checks each file and prints one line per error, FILE:POINTER: message, on
standard output ("-" reads standard input). With -o json it prints one flat list
of {file, code, message, path} for all files. Exits 0 when every file is valid.
A reference to an object the file does not hold (a pool's site, account) is
no error: applied, it resolves against the fleet. The text output warns of
each, with the nearest name of the file when it looks like a typo.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := textOrJSON(output); err != nil {
				return err
			}
			all := fleet.Errors{}
			bad := 0
			var warnings []string
			for _, path := range args {
				data, errs := fleet.ReadFile(path)
				var doc *fleet.Document
				if errs == nil {
					doc, errs = fleet.Validate(path, data)
				}
				if len(errs) > 0 {
					bad++
					all = append(all, errs...)
					continue
				}
				for _, d := range fleet.DanglingReferences(doc) {
					warnings = append(warnings, textline.Plain(path+": warning: "+d.String()))
				}
			}
			if output == "json" {
				if err := a.printJSON(all); err != nil {
					return refusal.Wrap(refusal.Internal, err, "cannot write the result")
				}
			} else {
				fmt.Fprint(a.stdout, all.Text())
				for _, w := range warnings {
					fmt.Fprintln(a.stdout, w)
				}
				if bad == 0 {
					fmt.Fprintf(a.stdout, "%s: valid\n", textline.Plain(strings.Join(args, ", ")))
				}
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
