// Command fleet-agent is the GitOps pull agent of a compute fleet and its
// command line: validate, plan, apply, export and status of fleet.json,
// and `run`, the agent itself. It is the only place that wires adapters
// (providers, GitHub) into the orchestration packages.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/fleet-agent/fleet-agent/internal/config"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/textline"
)

// Set at build time with -ldflags -X.
var (
	version = "dev"
	commit  = "none"
	date    = "unknown"
)

// progName is how the program was started ("bin/fleet-agent", or
// "fleet-agent" from the PATH): what a printed command must say to work when
// pasted.
var progName = "fleet-agent"

func main() {
	if len(os.Args) > 0 && os.Args[0] != "" {
		progName = os.Args[0]
	}
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.LookupEnv))
}

// exitCode is returned by a command that has already printed what it must
// and only needs the process to exit with a status.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// run executes one command line and returns the exit status: 0 success, 1 a
// refusal with a code, 2 a usage error.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer, lookupEnv func(string) (string, bool)) (status int) {
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(stderr, "fleet-agent: %s: unexpected failure: %v; please report it\n", refusal.Internal, r)
			status = 1
		}
	}()
	app := &app{stdin: stdin, stdout: stdout, stderr: stderr, lookupEnv: lookupEnv, prog: progName}
	root := app.rootCommand()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteC()
	if err == nil {
		return 0
	}
	var code exitCode
	if errors.As(err, &code) {
		return int(code)
	}
	var r *refusal.Error
	if errors.As(err, &r) {
		fmt.Fprintf(stderr, "fleet-agent: %s: %s\n", r.Code, shownRefusal(r))
		return 1
	}
	// Anything else comes from parsing the command line itself, and may
	// quote an argument: a file's name, handed over by a shell's glob.
	msg := textline.Plain(err.Error())
	if cmd == nil || cmd == root {
		fmt.Fprintf(stderr, "fleet-agent: usage: %s%s\nRun 'fleet-agent --help' for the commands.\n", msg, didYouMean(root, msg))
		return 2
	}
	fmt.Fprintf(stderr, "fleet-agent: usage: %s%s\nRun '%s --help' for its flags and arguments.\n", msg, didYouMean(cmd, msg), cmd.CommandPath())
	return 2
}

// shownRefusal is a refusal's message as stderr shows it: one line of plain
// text (textline.Plain), since it quotes file names, paths and words from a
// pull request's files, which a CI log must show and never obey. A config
// file's problems keep a line each: their breaks are the refusal's own.
func shownRefusal(r *refusal.Error) string {
	if ps := config.AsProblems(r); ps != nil && r.Message == ps.Error() {
		lines := make([]string, len(ps))
		for i, p := range ps {
			lines[i] = textline.Plain(p.String())
		}
		return strings.Join(lines, "\n")
	}
	return textline.Plain(r.Message)
}

// group makes cmd a command of subcommands that refuses an unknown one as
// a usage error (exit 2), as the root does, naming the closest: without a
// run of its own, cobra prints its help and exits 0, and a mistyped CI step
// (policy tset) would pass.
func group(cmd *cobra.Command) *cobra.Command {
	cmd.Args = cobra.ArbitraryArgs
	cmd.SuggestionsMinimumDistance = 2 // cobra's own default, set at the root only
	cmd.RunE = func(c *cobra.Command, args []string) error {
		if len(args) == 0 {
			return c.Help()
		}
		msg := fmt.Sprintf("unknown command %q for %q", args[0], c.CommandPath())
		if near := c.SuggestionsFor(args[0]); len(near) > 0 {
			msg += "; did you mean " + strings.Join(near, " or ") + "?"
		}
		return errors.New(msg)
	}
	return cmd
}

// didYouMean names the flag of cmd closest to the unknown one in msg (a
// flag parse error), or says nothing when none is close.
func didYouMean(cmd *cobra.Command, msg string) string {
	var typed string
	switch {
	case strings.HasPrefix(msg, "unknown flag: --"):
		typed = strings.TrimPrefix(msg, "unknown flag: --")
	case strings.HasPrefix(msg, "unknown shorthand flag: '"):
		// "unknown shorthand flag: 'x' in -xyz": a long flag typed with
		// one dash reads so; the letters after the dash are what was meant.
		if _, in, ok := strings.Cut(msg, " in -"); ok {
			typed = in
		}
	default:
		return ""
	}
	typed, _, _ = strings.Cut(typed, "=")
	// Close is a few edits for the flag's length, or the start of a name.
	best, bestD := "", len(typed)/3+2
	seen := func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		d := editDistance(typed, f.Name)
		if len(typed) >= 3 && strings.HasPrefix(f.Name, typed) {
			d = min(d, 1)
		}
		if d < bestD || d == bestD && best != "" && f.Name < best {
			best, bestD = f.Name, d
		}
	}
	cmd.Flags().VisitAll(seen)
	cmd.InheritedFlags().VisitAll(seen)
	if best == "" {
		return ""
	}
	return " (did you mean --" + best + "?)"
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
