package main

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
)

func (a *app) versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit and build date",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			v, c, d := buildInfo()
			fmt.Fprintf(a.stdout, "fleet-agent %s (commit %s, built %s)\n", v, c, d)
			return nil
		},
	}
}

// buildInfo is the version, commit and date: set by the Makefile's
// -ldflags, else what the Go toolchain recorded (a plain go build in a git
// checkout records the commit and its time; go install records the module
// version).
func buildInfo() (v, c, d string) {
	v, c, d = version, commit, date
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v, c, d
	}
	if v == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v = bi.Main.Version
	}
	modified := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			if c == "none" {
				c = s.Value
			}
		case "vcs.time":
			if d == "unknown" {
				d = s.Value
			}
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if modified && commit == "none" && c != "none" {
		c += "-dirty"
	}
	return v, c, d
}
