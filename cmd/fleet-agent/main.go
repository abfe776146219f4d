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

	"github.com/fleet-agent/fleet-agent/internal/refusal"
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
	err := root.Execute()
	if err == nil {
		return 0
	}
	var code exitCode
	if errors.As(err, &code) {
		return int(code)
	}
	var r *refusal.Error
	if errors.As(err, &r) {
		fmt.Fprintf(stderr, "fleet-agent: %s: %s\n", r.Code, r.Message)
		return 1
	}
	// Anything else comes from parsing the command line itself.
	fmt.Fprintf(stderr, "fleet-agent: usage: %v\nRun 'fleet-agent --help' for the commands.\n", err)
	return 2
}
