package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// TestCommandsPageIsComplete holds docs/commands.md to the binary, both
// ways, from the binary's own command tree and sources, so that a command,
// flag or code added anywhere is caught: every runnable command has a
// section, every flag of it is named there, every refusal code and doctor
// code is on the page; and every command, heading flag, refusal code and
// doctor code the page names exists.
func TestCommandsPageIsComplete(t *testing.T) {
	page, err := os.ReadFile(filepath.Join(repo, "docs", "commands.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range commandsPageGaps(string(page), (&app{}).rootCommand(), refusalCodes(t), doctorCodes(t)) {
		t.Error(e)
	}
}

// TestCommandsPageGapsCatches holds the check to each gap it exists for.
func TestCommandsPageGapsCatches(t *testing.T) {
	page, err := os.ReadFile(filepath.Join(repo, "docs", "commands.md"))
	if err != nil {
		t.Fatal(err)
	}
	root := (&app{}).rootCommand()
	codes, doctors := refusalCodes(t), doctorCodes(t)
	cases := []struct {
		name string
		edit func(page string, root *cobra.Command) (string, []string, []string)
		want string
	}{
		{"a new command", func(p string, r *cobra.Command) (string, []string, []string) {
			r.AddCommand(&cobra.Command{Use: "frobnicate", RunE: func(*cobra.Command, []string) error { return nil }})
			return p, codes, doctors
		}, "command frobnicate has no section"},
		{"a new flag", func(p string, r *cobra.Command) (string, []string, []string) {
			c, _, _ := r.Find([]string{"status"})
			c.Flags().Bool("frobnicate", false, "")
			return p, codes, doctors
		}, "--frobnicate"},
		{"a new refusal code", func(p string, _ *cobra.Command) (string, []string, []string) {
			return p, append(slices.Clone(codes), "FROBNICATED"), doctors
		}, "FROBNICATED"},
		{"a new doctor code", func(p string, _ *cobra.Command) (string, []string, []string) {
			return p, codes, append(slices.Clone(doctors), "frob-failed")
		}, "frob-failed"},
		{"a documented command gone", func(p string, _ *cobra.Command) (string, []string, []string) {
			return p + "\n### `fleet-agent frobnicate`\n\ntext\n", codes, doctors
		}, "frobnicate"},
		{"a documented doctor code gone", func(p string, _ *cobra.Command) (string, []string, []string) {
			return strings.Replace(p, "`state-ok`", "`state-ok`, `state-frob`", 1), codes, doctors
		}, "state-frob"},
	}
	if gaps := commandsPageGaps(string(page), root, codes, doctors); len(gaps) > 0 {
		t.Fatalf("the page itself has gaps (TestCommandsPageIsComplete names them): %v", gaps)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := (&app{}).rootCommand()
			p, cs, ds := c.edit(string(page), r)
			gaps := commandsPageGaps(p, r, cs, ds)
			if !slices.ContainsFunc(gaps, func(g string) bool { return strings.Contains(g, c.want) }) {
				t.Fatalf("gaps %v, want one naming %s", gaps, c.want)
			}
		})
	}
}

var (
	sectionHeading = regexp.MustCompile("(?m)^### (.*)$")
	backticked     = regexp.MustCompile("`([^`]+)`")
	flagName       = regexp.MustCompile(`--([a-z][a-z0-9-]*)`)
	codeCell       = regexp.MustCompile("`([A-Z][A-Z_]+)`")
	doctorCodeRef  = regexp.MustCompile("`([a-z0-9]+(?:-[a-z0-9]+)+)`")
)

// commandsPageGaps lists what the page and the binary disagree on.
func commandsPageGaps(page string, root *cobra.Command, refusals, doctors []string) []string {
	var gaps []string
	type section struct{ heading, body string }
	var sections []section
	locs := sectionHeading.FindAllStringSubmatchIndex(page, -1)
	for i, l := range locs {
		end := len(page)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		sections = append(sections, section{heading: page[l[2]:l[3]], body: page[l[0]:end]})
	}
	// The commands a heading names: `fleet-agent PATH ...` or `PATH ...`
	// after the first.
	names := func(heading string) []string {
		var out []string
		for _, m := range backticked.FindAllStringSubmatch(heading, -1) {
			words := strings.Fields(strings.TrimPrefix(m[1], "fleet-agent "))
			var path []string
			for _, w := range words {
				if w == "" || w[0] == '-' || w[0] == '[' || strings.ToUpper(w) == w {
					break
				}
				path = append(path, w)
			}
			out = append(out, strings.Join(path, " "))
		}
		return out
	}
	var runnable []*cobra.Command
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			if sub.Hidden || sub.Name() == "help" {
				continue
			}
			// A group (policy, state) runs only to print its help or
			// refuse an unknown subcommand: its subcommands have the
			// sections.
			if sub.Runnable() && !sub.HasSubCommands() {
				runnable = append(runnable, sub)
			}
			walk(sub)
		}
	}
	walk(root)
	pathOf := func(c *cobra.Command) string { return strings.TrimPrefix(c.CommandPath(), root.Name()+" ") }
	for _, c := range runnable {
		path := pathOf(c)
		var body string
		for _, s := range sections {
			if slices.Contains(names(s.heading), path) {
				body += s.body
			}
		}
		if body == "" {
			gaps = append(gaps, "command "+path+" has no section (### `fleet-agent "+path+" ...`) in docs/commands.md")
			continue
		}
		c.LocalNonPersistentFlags().VisitAll(func(f *pflag.Flag) {
			named := strings.Contains(body, "--"+f.Name) || f.Shorthand != "" && strings.Contains(body, "-"+f.Shorthand+" ")
			if !f.Hidden && f.Name != "help" && !named {
				gaps = append(gaps, "flag --"+f.Name+" of "+path+" is not in its section of docs/commands.md")
			}
		})
	}
	root.PersistentFlags().VisitAll(func(f *pflag.Flag) {
		if !strings.Contains(page, "--"+f.Name) {
			gaps = append(gaps, "the global flag --"+f.Name+" is not in docs/commands.md")
		}
	})
	// The other way: what the headings name exists.
	for _, s := range sections {
		var cmds []*cobra.Command
		for _, n := range names(s.heading) {
			if n == "" {
				continue
			}
			c, rest, err := root.Find(strings.Fields(n))
			if err != nil || len(rest) > 0 || pathOf(c) != n {
				gaps = append(gaps, "docs/commands.md documents the command "+n+", which the binary does not have")
				continue
			}
			cmds = append(cmds, c)
		}
		if len(cmds) == 0 {
			continue
		}
		for _, m := range flagName.FindAllStringSubmatch(s.heading, -1) {
			if !slices.ContainsFunc(cmds, func(c *cobra.Command) bool { return c.Flags().Lookup(m[1]) != nil }) {
				gaps = append(gaps, "docs/commands.md names --"+m[1]+" in the heading "+s.heading+", and no command of it has that flag")
			}
		}
	}
	exit := pageBetween(page, "## Exit status", "## ")
	for _, code := range refusals {
		if !strings.Contains(exit, "`"+code+"`") {
			gaps = append(gaps, "the refusal code "+code+" is not in the exit status table of docs/commands.md")
		}
	}
	for _, m := range codeCell.FindAllStringSubmatch(exit, -1) {
		if !slices.Contains(refusals, m[1]) {
			gaps = append(gaps, "docs/commands.md lists the refusal code "+m[1]+", which the binary does not have")
		}
	}
	var doctorTable string
	for _, s := range sections {
		if slices.Contains(names(s.heading), "doctor") {
			doctorTable = s.body
		}
	}
	for _, code := range doctors {
		if !strings.Contains(doctorTable, "`"+code+"`") {
			gaps = append(gaps, "the doctor code "+code+" is not in the doctor section of docs/commands.md")
		}
	}
	for _, line := range strings.Split(doctorTable, "\n") {
		if !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "| check") {
			continue
		}
		for _, m := range doctorCodeRef.FindAllStringSubmatch(line, -1) {
			if !slices.Contains(doctors, m[1]) {
				gaps = append(gaps, "docs/commands.md lists the doctor code "+m[1]+", which the binary does not have")
			}
		}
	}
	return gaps
}

// pageBetween is the text of page from the heading start up to the next
// heading that begins with next.
func pageBetween(page, start, next string) string {
	i := strings.Index(page, start)
	if i < 0 {
		return ""
	}
	rest := page[i+len(start):]
	if j := strings.Index(rest, "\n"+next); j >= 0 {
		return rest[:j]
	}
	return rest
}

// refusalCodes are the codes the refusal package declares.
func refusalCodes(t *testing.T) []string {
	t.Helper()
	return sourceMatches(t, []string{"internal/refusal"}, regexp.MustCompile(`\bCode\s*=\s*"([A-Z][A-Z_]+)"`))
}

// doctorCodes are the codes doctor's findings are made with: every
// literal code passed with a severity, in the doctor package and the
// command's wiring.
func doctorCodes(t *testing.T) []string {
	t.Helper()
	codes := sourceMatches(t, []string{"internal/doctor", "cmd/fleet-agent"},
		regexp.MustCompile(`"([a-z0-9]+(?:-[a-z0-9]+)+)",\s*(?:doctor\.)?(?:OK|Note|Fail)\b`))
	// A code chosen among several before one add: code, do = "x", "...".
	more := sourceMatches(t, []string{"internal/doctor", "cmd/fleet-agent"},
		regexp.MustCompile(`code, do (?::)?= "([a-z0-9]+(?:-[a-z0-9]+)+)"`))
	for _, c := range more {
		if !slices.Contains(codes, c) {
			codes = append(codes, c)
		}
	}
	if len(codes) < 20 {
		t.Fatalf("only %d doctor codes found in the sources (%v): has the way findings are added changed?", len(codes), codes)
	}
	return codes
}

func sourceMatches(t *testing.T, dirs []string, re *regexp.Regexp) []string {
	t.Helper()
	var out []string
	for _, dir := range dirs {
		files, err := filepath.Glob(filepath.Join(repo, dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range re.FindAllStringSubmatch(string(data), -1) {
				if !slices.Contains(out, m[1]) {
					out = append(out, m[1])
				}
			}
		}
	}
	return out
}
