package main

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
)

func (a *app) versionCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit and build date (-o json: and the Go modules it was built from)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := textOrJSON(output); err != nil {
				return err
			}
			v, c, d := buildInfo()
			if output == "json" {
				return a.printJSON(versionReport(v, c, d))
			}
			fmt.Fprintf(a.stdout, "fleet-agent %s (commit %s, built %s)\n", v, c, d)
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text or json")
	return cmd
}

// versionJSON is `version -o json`: what the binary is and what it was
// built from, as the Go toolchain recorded it (the same facts an SBOM of
// the binary lists).
type versionJSON struct {
	Version   string        `json:"version"`
	Commit    string        `json:"commit"`
	Date      string        `json:"date"`
	GoVersion string        `json:"goVersion"`
	Path      string        `json:"path"`
	Main      moduleJSON    `json:"main"`
	Modules   []moduleJSON  `json:"modules"`
	Settings  []settingJSON `json:"settings"`
}

type moduleJSON struct {
	Path    string `json:"path"`
	Version string `json:"version"`
	Sum     string `json:"sum,omitempty"`
	// Replace is the module that replaced this one, when go.mod says so.
	Replace *moduleJSON `json:"replace,omitempty"`
}

type settingJSON struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

func versionReport(v, c, d string) versionJSON {
	out := versionJSON{Version: v, Commit: c, Date: d, Modules: []moduleJSON{}, Settings: []settingJSON{}}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return out
	}
	out.GoVersion, out.Path, out.Main = bi.GoVersion, bi.Path, moduleOf(&bi.Main)
	for _, m := range bi.Deps {
		out.Modules = append(out.Modules, moduleOf(m))
	}
	for _, s := range bi.Settings {
		out.Settings = append(out.Settings, settingJSON{Key: s.Key, Value: s.Value})
	}
	return out
}

func moduleOf(m *debug.Module) moduleJSON {
	j := moduleJSON{Path: m.Path, Version: m.Version, Sum: m.Sum}
	if m.Replace != nil {
		r := moduleOf(m.Replace)
		j.Replace = &r
	}
	return j
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
