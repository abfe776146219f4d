package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/docgen"
	"github.com/fleet-agent/fleet-agent/internal/fleet"
)

// pastedPages are the pages whose shell blocks a newcomer pastes.
var pastedPages = []string{"README.md", "docs/connect.md", "docs/github.md"}

// TestShellBlocksWorkAsPasted reads every ```sh and ```console block of
// the pages a newcomer pastes from and checks each command against the
// repository: a make target exists in the Makefile; a fleet-agent command
// parses with the CLI's own command tree and flag sets (the subcommand,
// each flag, the number of arguments); the documents it names exist (in
// the repository, made by `make demo`, or written by an earlier command of
// the page); a break-glass edit names an object of a document the page
// uses; `go run` names a package of the repository; no placeholder in
// angle brackets is read as a redirection.
func TestShellBlocksWorkAsPasted(t *testing.T) {
	targets := makeTargets(t)
	for _, page := range pastedPages {
		t.Run(page, func(t *testing.T) {
			text, err := os.ReadFile(filepath.Join(repo, page))
			if err != nil {
				t.Fatal(err)
			}
			errs := checkPasted(page, string(text), targets)
			if len(docgen.Fenced(string(text), "sh", "console")) == 0 && page != "docs/github.md" {
				t.Fatalf("%s has no shell block: is the fence still ```sh?", page)
			}
			for _, e := range errs {
				t.Error(e)
			}
		})
	}
}

// checkPasted checks the shell blocks of one page, in order.
func checkPasted(page, text string, targets map[string]bool) []string {
	c := &pasteCheck{page: page, targets: targets, made: map[string]bool{}}
	blocks := docgen.Fenced(text, "sh")
	for _, b := range docgen.Fenced(text, "console") {
		blocks = append(blocks, consoleCommands(b))
	}
	for bi, b := range blocks {
		cmds, err := docgen.Commands(b)
		if err != nil {
			c.errs = append(c.errs, fmt.Sprintf("%s, block %d: %v (pasted into a shell it fails the same way)", page, bi+1, err))
			continue
		}
		for _, cmd := range cmds {
			c.where = fmt.Sprintf("%s, block %d line %d", page, bi+1, cmd.Line)
			c.command(cmd)
		}
	}
	return c.errs
}

// TestPasteCheckCatches holds the check to each mistake it exists for.
func TestPasteCheckCatches(t *testing.T) {
	targets := makeTargets(t)
	const doc = "testdata/documents/valid/fleet-config.json"
	cases := []struct{ name, block, want string }{
		{"good", "make build\nfleet-agent validate " + doc + " -o json\n", ""},
		{"a make target", "make demoo\n", `no target "demoo"`},
		{"a command", "fleet-agent frobnicate\n", "unknown command"},
		{"a flag", "fleet-agent plan " + doc + " --colour\n", "unknown flag: --colour"},
		{"arguments", "fleet-agent validate\n", "requires at least 1 arg"},
		{"a document", "fleet-agent plan fleet.json --state fleet.db\n", "the document fleet.json does not exist"},
		{"a document made first", "fleet-agent export --state f.db --out x.json\nfleet-agent validate x.json\n", ""},
		{"a document made in a directory", "mkdir -p try && cd try\nfleet-agent schema > s.json\nfleet-agent validate s.json\ncd ..\nfleet-agent validate s.json\n",
			"block 1 line 5: the document s.json does not exist"},
		{"a config", `export FLEET_AGENT_CONFIG="$PWD/nope/config.yaml"` + "\n", "the config $PWD/nope/config.yaml does not exist"},
		{"the demo's files", "make demo\n" + `export FLEET_AGENT_CONFIG="$PWD/demo/config.yaml"` + "\nfleet-agent plan demo/work/fleet.json\n", ""},
		{"a pool", "fleet-agent plan " + doc + "\nfleet-agent edit pool gpu gpuModel='\"L4\"'\n", `no pool named "gpu"`},
		{"a pool that exists", "fleet-agent plan " + doc + "\nfleet-agent edit pool vps-fra gpuModel='\"L4\"'\n", ""},
		{"a pool of a copied document", "cp " + doc + " f.json\nfleet-agent edit pool vps-fra gpuModel='\"L4\"'\n", ""},
		{"a site of a here-document", "cat > f.json <<'EOF'\n" + `{"version": 1, "sites": [{"name": "lab", "kind": "shared", "region": "x"}]}` + "\nEOF\nfleet-agent edit site lab region='\"y\"'\n", ""},
		{"a placeholder", "fleet-agent apply --commit 1a2b3c4 --plan-hash <hash> out.txt\n", "a placeholder in angle brackets"},
		{"a placeholder of two words", "fleet-agent apply --commit 1a2b3c4 --plan-hash <the hash>\n", "without a file"},
		{"a package", "go run ./cmd/nope\n", "no such package"},
		{"inside a substitution", "H=$(fleet-agent plan x.json --colour | sed -n p)\n", "unknown flag: --colour"},
		{"inside a loop", "until fleet-agent statuss | grep -q x; do sleep 1; done\n", "unknown command"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			errs := checkPasted("page.md", "```sh\n"+c.block+"```\n", targets)
			got := strings.Join(errs, "\n")
			if c.want == "" && got != "" || c.want != "" && !strings.Contains(got, c.want) {
				t.Fatalf("errors:\n%s\nwant %q", got, c.want)
			}
		})
	}
	// A console block's commands are its "$ " lines.
	errs := checkPasted("page.md", "```console\n$ make demoo\nmake: output\n```\n", targets)
	if len(errs) != 1 || !strings.Contains(errs[0], `no target "demoo"`) {
		t.Fatalf("console block: %q", errs)
	}
}

// pasteCheck follows one page's commands in order.
type pasteCheck struct {
	page, where string
	targets     map[string]bool
	// made are the paths written by earlier commands of the page, each as
	// norm gives it.
	made map[string]bool
	// docs are the documents the page's commands used, for edit's names.
	docs []*fleet.Document
	// cwd is the directory the page has cd'd to, "" for the repository's
	// root (where a newcomer starts).
	cwd  string
	errs []string
}

func (c *pasteCheck) fail(format string, args ...any) {
	c.errs = append(c.errs, c.where+": "+fmt.Sprintf(format, args...))
}

// norm is a path as the page means it: $HOME and ~ as "~", $PWD the page's
// directory, relative paths joined to it. ok is false when it depends on a
// variable the page set (a SHA, a hash).
func (c *pasteCheck) norm(p string) (string, bool) {
	for _, h := range []string{"${HOME}", "$HOME"} {
		if rest, ok := strings.CutPrefix(p, h); ok {
			p = "~" + rest
		}
	}
	for _, w := range []string{"${PWD}", "$PWD"} {
		if rest, ok := strings.CutPrefix(p, w); ok {
			p = path.Join(".", c.cwd) + rest
		}
	}
	if strings.Contains(p, "$") {
		return "", false
	}
	if strings.HasPrefix(p, "/") || strings.HasPrefix(p, "~") {
		return path.Clean(p), true
	}
	return path.Join(".", c.cwd, p), true
}

func (c *pasteCheck) exists(p string) bool {
	if c.made[p] {
		return true
	}
	if strings.HasPrefix(p, "/") || strings.HasPrefix(p, "~") || strings.HasPrefix(p, "..") {
		return false
	}
	_, err := os.Stat(filepath.Join(repo, p))
	return err == nil
}

func (c *pasteCheck) mark(p string) {
	if n, ok := c.norm(p); ok {
		c.made[n] = true
	}
}

func (c *pasteCheck) needFile(what, p string) {
	n, ok := c.norm(p)
	if !ok || p == "-" {
		return
	}
	if !c.exists(n) {
		c.fail("%s %s does not exist: not in the repository, not made by `make demo` nor by an earlier command of %s", what, p, c.page)
	}
}

func (c *pasteCheck) command(cmd docgen.ShellCommand) {
	for _, in := range cmd.In {
		c.fail("reads %q with <: a placeholder in angle brackets is a redirection when pasted; write it as a WORD and say what it stands for", in)
	}
	args := cmd.Args
	env := cmd.Env
	for len(args) > 0 && (args[0] == "sudo" || args[0] == "env") {
		args = args[1:]
		for len(args) > 0 && strings.Contains(args[0], "=") && !strings.HasPrefix(args[0], "-") {
			env, args = append(env, args[0]), args[1:]
		}
	}
	// The words that open a compound command (until ...; do ...; done)
	// stand before the command they run.
	for len(args) > 0 && slices.Contains([]string{"until", "while", "if", "then", "do", "else", "!"}, args[0]) {
		args = args[1:]
	}
	if len(args) > 0 && args[0] == "export" {
		env, args = append(env, args[1:]...), nil
	}
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "FLEET_AGENT_CONFIG="); ok && v != "" {
			c.needFile("the config", v)
		}
	}
	for _, sub := range cmd.Subs {
		inner, err := docgen.Commands(sub)
		if err != nil {
			c.fail("$(%s): %v", sub, err)
		}
		for _, ic := range inner {
			c.command(ic)
		}
	}
	for _, o := range cmd.Out {
		c.mark(o)
	}
	if len(args) == 0 {
		return
	}
	positional := func(from int) []string {
		var ps []string
		for _, a := range args[from:] {
			if !strings.HasPrefix(a, "-") {
				ps = append(ps, a)
			}
		}
		return ps
	}
	switch name := args[0]; {
	case name == "cd":
		if n, ok := c.norm(args[1]); ok {
			c.cwd = n
		}
	case name == "mkdir" || name == "tee":
		for _, p := range positional(1) {
			c.mark(p)
		}
	case name == "cp" || name == "mv":
		src := positional(1)
		if len(src) == 2 {
			// A document copied from the repository is that document.
			if n, ok := c.norm(src[0]); ok && !c.made[n] && c.exists(n) && strings.HasSuffix(n, ".json") {
				if d := readDocument(n); d != nil {
					c.docs = append(c.docs, d)
				}
			} else if ok && !c.exists(n) {
				c.fail("%s %s: %s does not exist", name, strings.Join(args[1:], " "), src[0])
			}
		}
		c.mark(args[len(args)-1])
	case name == "git" && len(args) > 1 && (args[1] == "clone" || args[1] == "init"):
		c.mark(args[len(args)-1])
	case name == "make":
		for _, tg := range positional(1) {
			if strings.Contains(tg, "=") {
				continue
			}
			if !c.targets[tg] {
				c.fail("make %s: the Makefile has no target %q", tg, tg)
			}
			if tg == "demo" {
				for _, p := range demoOutputs(c) {
					c.made[p] = true
				}
			}
			if tg == "build" {
				c.made["bin/fleet-agent"] = true
			}
			if tg == "install" {
				for _, p := range installOutputs(c) {
					c.made[p] = true
				}
			}
		}
	case name == "go" && len(args) > 2 && args[1] == "run":
		if p := positional(2); len(p) > 0 && !c.exists(path.Clean(p[0])) {
			c.fail("go run %s: no such package in the repository", p[0])
		}
	case name == "fleet-agent" || strings.HasSuffix(name, "/fleet-agent"):
		c.fleetAgent(args[1:], cmd)
	}
	if cmd.Heredoc != "" {
		for _, o := range cmd.Out {
			if strings.HasSuffix(o, ".json") {
				if d, errs := fleet.Validate(o, []byte(cmd.Heredoc)); len(errs) == 0 {
					c.docs = append(c.docs, d)
				} else {
					c.fail("the document written to %s is invalid: %v", o, errs)
				}
			}
		}
	}
}

// fleetAgent parses a command line with the CLI's own command tree.
func (c *pasteCheck) fleetAgent(args []string, sh docgen.ShellCommand) {
	a := &app{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard,
		lookupEnv: func(string) (string, bool) { return "", false }, prog: "fleet-agent"}
	root := a.rootCommand()
	cmd, rest, err := root.Find(args)
	if err != nil {
		c.fail("fleet-agent %s: %v", strings.Join(args, " "), err)
		return
	}
	if cmd == root && len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		c.fail("fleet-agent %s: no such command", args[0])
		return
	}
	if err := cmd.ParseFlags(rest); err != nil {
		c.fail("fleet-agent %s: %v", strings.Join(args, " "), err)
		return
	}
	pos := cmd.Flags().Args()
	if err := cmd.ValidateArgs(pos); err != nil {
		c.fail("fleet-agent %s: %v", strings.Join(args, " "), err)
		return
	}
	if f := cmd.Flags().Lookup("config"); f != nil && f.Changed {
		c.needFile("the config", f.Value.String())
	}
	if f := cmd.Flags().Lookup("out"); f != nil && f.Changed {
		c.mark(f.Value.String())
	}
	switch cmd.Name() {
	case "validate", "plan", "apply":
		for _, p := range pos {
			c.needFile("the document", p)
			if n, ok := c.norm(p); ok && !c.made[n] && c.exists(n) {
				if d := readDocument(n); d != nil {
					c.docs = append(c.docs, d)
				}
			}
		}
	case "edit":
		if len(pos) >= 2 && !c.has(pos[0], pos[1]) {
			c.fail("fleet-agent edit %s %s: no %s named %q in the documents this page uses (%s)", pos[0], pos[1], pos[0], pos[1], c.names(pos[0]))
		}
	}
}

func readDocument(p string) *fleet.Document {
	text, err := os.ReadFile(filepath.Join(repo, p))
	if err != nil {
		return nil
	}
	d, errs := fleet.Validate(p, text)
	if len(errs) > 0 {
		return nil
	}
	return d
}

func (c *pasteCheck) names(kind string) []string {
	var ns []string
	for _, d := range c.docs {
		switch kind {
		case "pool":
			for _, p := range d.Pools {
				ns = append(ns, p.Name)
			}
		case "site":
			for _, s := range d.Sites {
				ns = append(ns, s.Name)
			}
		case "providerAccount":
			for _, a := range d.ProviderAccounts {
				ns = append(ns, a.Name)
			}
		case "sandboxTemplate":
			for _, s := range d.SandboxTemplates {
				ns = append(ns, s.Name)
			}
		}
	}
	return ns
}

func (c *pasteCheck) has(kind, name string) bool { return slices.Contains(c.names(kind), name) }

// makeTargets are the Makefile's targets.
func makeTargets(t *testing.T) map[string]bool {
	t.Helper()
	text, err := os.ReadFile(filepath.Join(repo, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^([A-Za-z0-9_-]+):`).FindAllStringSubmatch(string(text), -1) {
		targets[m[1]] = true
	}
	if !targets["demo"] || !targets["test"] {
		t.Fatalf("found the targets %v in the Makefile: is the pattern still right?", targets)
	}
	return targets
}

// demoOutputs are the files scripts/demo.sh leaves under demo/.
func demoOutputs(c *pasteCheck) []string {
	text, err := os.ReadFile(filepath.Join(repo, "scripts/demo.sh"))
	if err != nil || !strings.Contains(string(text), `DEMO="$ROOT/demo"`) {
		c.fail("scripts/demo.sh no longer works in demo/ (DEMO=\"$ROOT/demo\"): teach this test where it works")
		return nil
	}
	var out []string
	for _, m := range regexp.MustCompile(`\$DEMO/([A-Za-z0-9_./-]+)`).FindAllStringSubmatch(string(text), -1) {
		out = append(out, path.Join("demo", m[1]))
	}
	return out
}

// installOutputs are the files under /etc that `make install` writes.
func installOutputs(c *pasteCheck) []string {
	text, err := os.ReadFile(filepath.Join(repo, "Makefile"))
	if err != nil {
		c.fail("%v", err)
		return nil
	}
	var out []string
	for _, m := range regexp.MustCompile(`\$\(DESTDIR\)(/etc/[A-Za-z0-9_./-]+)`).FindAllStringSubmatch(string(text), -1) {
		out = append(out, m[1])
	}
	return out
}

// consoleCommands are the "$ " lines of a console block, the prompt
// removed.
func consoleCommands(block string) string {
	var b strings.Builder
	for _, l := range strings.Split(block, "\n") {
		if cmd, ok := strings.CutPrefix(l, "$ "); ok {
			b.WriteString(cmd + "\n")
		}
	}
	return b.String()
}

// TestPastedBlocksRun runs, with a fleet-agent built from this tree, the
// README's block of commands at the root of a clone and the local
// walkthrough of docs/connect.md in a fresh home directory, each as one
// bash script exactly as the page has it (a here-document, a loop, a
// background agent), and checks what a newcomer would see.
func TestPastedBlocksRun(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Fatal("this test runs the pages' blocks with bash: apt-get install bash")
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("this test runs the pages' blocks with git: apt-get install git")
	}
	bin := filepath.Join(t.TempDir(), "bin")
	build := exec.CommandContext(t.Context(), "go", "build", "-buildvcs=true", "-o", filepath.Join(bin, "fleet-agent"), ".")
	build.Env = append(os.Environ(), "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	absRepo, err := filepath.Abs(repo)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("README.md", func(t *testing.T) {
		text, err := os.ReadFile(filepath.Join(repo, "README.md"))
		if err != nil {
			t.Fatal(err)
		}
		var block string
		for _, b := range docgen.Fenced(string(text), "sh") {
			if strings.Contains(b, "fleet-agent validate") {
				block = b
			}
		}
		if block == "" {
			t.Fatal("README.md has no block running fleet-agent validate")
		}
		// A clone's root, as far as the block reads it.
		clone := t.TempDir()
		if err := os.Symlink(filepath.Join(absRepo, "testdata"), filepath.Join(clone, "testdata")); err != nil {
			t.Fatal(err)
		}
		out := runBash(t, clone, bin, "-euo", "pipefail", block)
		for _, want := range []string{"fleet.json: valid", "8 to create", "Applied 8 call(s)", `"planHash"`, "audited as"} {
			if !strings.Contains(out, want) {
				t.Errorf("no %q in the block's output:\n%s", want, out)
			}
		}
		for _, f := range []string{"current.json", "fleet.db.bak", "fleet.schema.json"} {
			if _, err := os.Stat(filepath.Join(clone, "try", f)); err != nil {
				t.Errorf("the block did not leave try/%s: %v", f, err)
			}
		}
	})

	t.Run("docs/connect.md", func(t *testing.T) {
		text, err := os.ReadFile(filepath.Join(repo, "docs/connect.md"))
		if err != nil {
			t.Fatal(err)
		}
		s := string(text)
		i, j := strings.Index(s, "## Without GitHub"), strings.Index(s, "## On GitHub")
		if i < 0 || j < i {
			t.Fatal(`docs/connect.md has no "## Without GitHub" section before "## On GitHub"`)
		}
		script := strings.Join(docgen.Fenced(s[i:j], "sh"), "") + "wait\n"
		// No -e: doctor exits 1 while the tip is refused, as it should.
		out := runBash(t, t.TempDir(), bin, "-u", script)
		for _, want := range []string{
			"tip-refused",                                               // doctor says the tip was never proposed
			"was never proposed", "  adopt: fleet-agent plan --commit ", // status says it too, and how to adopt it
			"To apply exactly this plan",                      // plan --commit prints the command
			"Applied 5 call(s) of",                            // the adopted tip
			"proposal refs/heads/more-gpus at", "1 to update", // the proposal is planned
			"by agent at", // and applied by the agent once merged
		} {
			if !strings.Contains(out, want) {
				t.Errorf("no %q in the walkthrough's output:\n%s", want, out)
			}
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "fleet-agent: ") && !strings.HasPrefix(line, "fleet-agent: note: ") {
				t.Errorf("a command was refused (%s):\n%s", line, out)
			}
		}
	})
}

// runBash runs script with bash in dir, HOME there too, fleet-agent from
// bin first on the PATH and a git identity, and returns what it printed.
// The process group is killed at the end, so a background agent the
// script started cannot outlive the test.
func runBash(t *testing.T, dir, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	script := args[len(args)-1]
	cmd := exec.CommandContext(ctx, "bash", append(args[:len(args)-1], "-c", script)...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + bin + ":" + os.Getenv("PATH"), "HOME=" + dir, "LANG=C.UTF-8",
		"GIT_AUTHOR_NAME=Newcomer", "GIT_AUTHOR_EMAIL=newcomer@example.com",
		"GIT_COMMITTER_NAME=Newcomer", "GIT_COMMITTER_EMAIL=newcomer@example.com",
		"GIT_CONFIG_NOSYSTEM=1"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	t.Logf("bash %s in %s:\n%s", strings.Join(args[:len(args)-1], " "), dir, out)
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	if err != nil {
		t.Fatalf("bash: %v (a timeout means a loop of the page waited for something that never came)\n%s", err, out)
	}
	return string(out)
}
