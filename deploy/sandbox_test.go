package deploy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
	"gopkg.in/yaml.v3"

	"github.com/fleet-agent/fleet-agent/internal/localapi"
)

// The shipped unit and the shipped example config must start together.
// No systemd manager runs on a build machine (systemd-run needs one), so
// this test applies the part of the unit's sandbox that decided the bug
// (the socketGroup chown refused with EPERM) the honest way: it reads the
// unit's SystemCallFilter= lines, expands their groups with
// `systemd-analyze syscall-filter` as systemd does (an allow list starts
// from @default; ~ entries remove; later entries add back), turns them into
// a seccomp filter with the unit's SystemCallErrorNumber=, installs it in a
// child process and execs the real fleet-agent binary under it with the
// example config. The rest of the sandbox (namespaces, PrivateUsers=,
// ProtectSystem=) is not reproduced here; systemd-analyze security and
// verify check the unit's text.

// seccompEnv names the file of allowed syscall numbers when the test binary
// runs as the launcher.
const seccompEnv = "FLEET_AGENT_TEST_SECCOMP"

func TestMain(m *testing.M) {
	if spec := os.Getenv(seccompEnv); spec != "" {
		os.Exit(launch(spec, os.Args))
	}
	os.Exit(m.Run())
}

// launch installs the filter of spec and execs what follows "--" in args:
// the child of a test, never a test itself.
func launch(spec string, args []string) int {
	i := slices.Index(args, "--")
	if i < 0 || i == len(args)-1 {
		fmt.Fprintln(os.Stderr, "launcher: nothing to exec")
		return 2
	}
	data, err := os.ReadFile(spec)
	if err != nil {
		fmt.Fprintln(os.Stderr, "launcher:", err)
		return 2
	}
	var allowed []uint32
	errno := uint32(syscall.EPERM)
	for _, f := range strings.Fields(string(data)) {
		if v, ok := strings.CutPrefix(f, "errno="); ok {
			n, _ := strconv.Atoi(v)
			errno = uint32(n)
			continue
		}
		n, err := strconv.ParseUint(f, 10, 32)
		if err != nil {
			fmt.Fprintln(os.Stderr, "launcher: bad syscall number", f)
			return 2
		}
		allowed = append(allowed, uint32(n))
	}
	prog, err := filterProgram(allowed, errno)
	if err != nil {
		fmt.Fprintln(os.Stderr, "launcher:", err)
		return 2
	}
	runtime.LockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "launcher: no_new_privs:", err)
		return 2
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	// TSYNC: every thread of this Go process gets the filter, and exec
	// keeps it for the program that replaces the process.
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog))); e != 0 {
		fmt.Fprintln(os.Stderr, "launcher: seccomp:", e)
		return 2
	}
	if args[i+1] == "chown-probe" {
		// A control: under the filter, a chown is refused.
		err := os.Chown(args[i+2], -1, os.Getegid())
		if errors.Is(err, syscall.EPERM) {
			fmt.Println("chown: EPERM")
			return 0
		}
		fmt.Println("chown:", err)
		return 1
	}
	err = syscall.Exec(args[i+1], args[i+1:], os.Environ())
	fmt.Fprintln(os.Stderr, "launcher: exec:", err)
	return 2
}

// filterProgram is a seccomp BPF program: other architectures and every
// syscall not in allowed answer errno; the allowed ones pass.
func filterProgram(allowed []uint32, errno uint32) ([]unix.SockFilter, error) {
	ret := func(v uint32) bpf.Instruction { return bpf.RetConstant{Val: v} }
	deny := ret(unix.SECCOMP_RET_ERRNO | (errno & unix.SECCOMP_RET_DATA))
	ins := []bpf.Instruction{
		bpf.LoadAbsolute{Off: 4, Size: 4}, // seccomp_data.arch
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.AUDIT_ARCH_X86_64, SkipTrue: 1},
		deny,
		bpf.LoadAbsolute{Off: 0, Size: 4}, // seccomp_data.nr
	}
	for _, nr := range allowed {
		ins = append(ins, bpf.JumpIf{Cond: bpf.JumpEqual, Val: nr, SkipFalse: 1}, ret(unix.SECCOMP_RET_ALLOW))
	}
	ins = append(ins, deny)
	raw, err := bpf.Assemble(ins)
	if err != nil {
		return nil, err
	}
	out := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		out[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	return out, nil
}

// unitFilter reads the unit's SystemCallFilter= and SystemCallErrorNumber=.
func unitFilter(t *testing.T) (lines []string, errno int) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("systemd", "fleet-agent.service"))
	if err != nil {
		t.Fatal(err)
	}
	errno = int(syscall.EPERM)
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		switch {
		case !ok:
		case k == "SystemCallFilter":
			lines = append(lines, v)
		case k == "SystemCallErrorNumber":
			if v != "EPERM" {
				t.Fatalf("SystemCallErrorNumber=%s: the test knows EPERM only", v)
			}
		}
	}
	if len(lines) == 0 {
		t.Fatal("the unit has no SystemCallFilter=: nothing to test")
	}
	return lines, errno
}

// syscallNumbers maps x86_64 syscall names to numbers, from the kernel's
// own header (linux-libc-dev).
func syscallNumbers(t *testing.T) map[string]uint32 {
	t.Helper()
	const header = "/usr/include/x86_64-linux-gnu/asm/unistd_64.h"
	data, err := os.ReadFile(header)
	if err != nil {
		t.Fatalf("%v: install linux-libc-dev (.ci/run does)", err)
	}
	out := map[string]uint32{}
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.Fields(l)
		if len(f) == 3 && f[0] == "#define" && strings.HasPrefix(f[1], "__NR_") {
			if n, err := strconv.ParseUint(f[2], 10, 32); err == nil {
				out[strings.TrimPrefix(f[1], "__NR_")] = uint32(n)
			}
		}
	}
	if len(out) < 300 {
		t.Fatalf("only %d syscalls read from %s", len(out), header)
	}
	return out
}

// expand lists the syscalls of a name or @group, recursively, as
// systemd-analyze prints them.
func expand(t *testing.T, sa, item string, seen map[string][]string) []string {
	t.Helper()
	if !strings.HasPrefix(item, "@") {
		return []string{item}
	}
	if got, ok := seen[item]; ok {
		return got
	}
	seen[item] = nil
	out, err := exec.CommandContext(t.Context(), sa, "syscall-filter", "--no-pager", item).Output()
	if err != nil {
		t.Fatalf("systemd-analyze syscall-filter %s: %v", item, err)
	}
	var names []string
	for i, l := range strings.Split(string(out), "\n") {
		l = strings.TrimSpace(l)
		if i == 0 || l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		names = append(names, expand(t, sa, l, seen)...)
	}
	seen[item] = names
	return names
}

// allowedSyscalls applies the unit's lines as systemd parses them.
func allowedSyscalls(t *testing.T, lines []string) []uint32 {
	t.Helper()
	sa := systemdAnalyze(t)
	nums := syscallNumbers(t)
	seen := map[string][]string{}
	allow := map[string]bool{}
	for i, line := range lines {
		deny := strings.HasPrefix(line, "~")
		items := strings.Fields(strings.TrimPrefix(line, "~"))
		if i == 0 {
			if deny {
				t.Fatal("the unit's filter starts with a deny list; the test builds allow lists only")
			}
			// An allow list always lets systemd's @default set through.
			for _, n := range expand(t, sa, "@default", seen) {
				allow[n] = true
			}
		}
		for _, it := range items {
			for _, n := range expand(t, sa, it, seen) {
				allow[n] = !deny
			}
		}
	}
	var out []uint32
	for n, ok := range allow {
		if nr, known := nums[n]; ok && known {
			out = append(out, nr)
		}
	}
	slices.Sort(out)
	return out
}

func writeSpec(t *testing.T, allowed []uint32, errno int) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "errno=%d\n", errno)
	for _, n := range allowed {
		fmt.Fprintln(&b, n)
	}
	p := filepath.Join(t.TempDir(), "filter")
	if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// underUnitFilter runs args under the unit's system call filter.
func underUnitFilter(t *testing.T, ctx context.Context, args ...string) *exec.Cmd {
	t.Helper()
	lines, errno := unitFilter(t)
	spec := writeSpec(t, allowedSyscalls(t, lines), errno)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, self, append([]string{"--"}, args...)...)
	cmd.Env = append(os.Environ(), seccompEnv+"="+spec)
	return cmd
}

// TestSandboxRefusesChown is the control: the filter built from the unit
// really refuses a chown, so the test below would catch the bug it is about.
func TestSandboxRefusesChown(t *testing.T) {
	f := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := underUnitFilter(t, t.Context(), "chown-probe", f).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "chown: EPERM") {
		t.Fatalf("the unit's filter let a chown through (or the probe failed): %v\n%s", err, out)
	}
}

func buildAgent(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "fleet-agent")
	cmd := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "../cmd/fleet-agent")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// exampleConfigHere is the shipped example config with only what must
// differ on a build machine: a local repository instead of GitHub's, paths
// in a temporary directory, a free port, no GitHub (its tokens are systemd
// credentials). socketGroup stays, as the service's own group: the unit's
// Group= is the group its process runs with, here this test's group.
func exampleConfigHere(t *testing.T, dir, repo, group string) string {
	t.Helper()
	data, err := os.ReadFile("config.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg["socketGroup"] == nil {
		t.Fatal("the example no longer sets socketGroup: update this test")
	}
	cfg["socketGroup"] = group
	cfg["state"] = filepath.Join(dir, "state", "fleet.db")
	cfg["socket"] = filepath.Join(dir, "api.sock")
	cfg["listen"] = "127.0.0.1:0"
	git := cfg["git"].(map[string]any)
	git["url"] = repo
	delete(git, "auth")
	delete(cfg, "github")
	if p, ok := cfg["providers"].(map[string]any); ok {
		if _, ok := p["fake"]; ok {
			p["fake"] = map[string]any{"statePath": filepath.Join(dir, "state", "fake.json")}
		}
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func localRepo(t *testing.T, dir string) string {
	t.Helper()
	repo := filepath.Join(dir, "fleet.git")
	work := filepath.Join(dir, "work")
	env := append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
	run := func(d string, args ...string) {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), "git", args...)
		cmd.Dir, cmd.Env = d, env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	run(dir, "init", "-q", "--bare", "-b", "main", repo)
	run(dir, "init", "-q", "-b", "main", work)
	if err := os.WriteFile(filepath.Join(work, "fleet.json"), []byte(`{"version":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	run(work, "add", "fleet.json")
	run(work, "commit", "-qm", "empty fleet")
	run(work, "push", "-q", repo, "main")
	return repo
}

// TestUnitAndExampleConfigStartTogether starts the real binary with the
// shipped example config under the shipped unit's system call filter: it
// must serve its socket, owned by socketGroup, and stop cleanly on SIGTERM.
func TestUnitAndExampleConfigStartTogether(t *testing.T) {
	dir := t.TempDir()
	g, err := user.LookupGroupId(strconv.Itoa(os.Getegid()))
	if err != nil {
		t.Fatal(err)
	}
	cfg := exampleConfigHere(t, dir, localRepo(t, dir), g.Name)
	bin := buildAgent(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := underUnitFilter(t, ctx, bin, "run", "--config", cfg)
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	sock := filepath.Join(dir, "api.sock")
	deadline := time.Now().Add(30 * time.Second)
	for !localapi.NewClient(sock).Running(ctx) {
		select {
		case err := <-exited:
			t.Fatalf("the agent exited under the unit's filter: %v\n%s", err, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent did not serve its socket within 30 s:\n%s", logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(sock, &st); err != nil || int(st.Gid) != os.Getegid() || st.Mode&0o777 != 0o660 {
		t.Errorf("the socket: gid %d mode %o (%v); want gid %d mode 660", st.Gid, st.Mode&0o777, err, os.Getegid())
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("the agent did not stop cleanly on SIGTERM: %v\n%s", err, logs.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the agent did not stop on SIGTERM:\n%s", logs.String())
	}
}

// TestSocketGroupOtherThanTheServiceGroup: a socketGroup the process does
// not run with needs a chown, which the unit's filter refuses; the agent
// then says what to do instead of only "permission denied".
func TestSocketGroupOtherThanTheServiceGroup(t *testing.T) {
	other := ""
	for _, name := range []string{"nogroup", "daemon", "adm", "users", "staff"} {
		if g, err := user.LookupGroup(name); err == nil && g.Gid != strconv.Itoa(os.Getegid()) {
			other = name
			break
		}
	}
	if other == "" {
		t.Fatal("no second group on this machine to try (nogroup, daemon, adm, users, staff)")
	}
	dir := t.TempDir()
	cfg := exampleConfigHere(t, dir, localRepo(t, dir), other)
	bin := buildAgent(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out, err := underUnitFilter(t, ctx, bin, "run", "--config", cfg).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), "cannot give the socket to group "+other+": run the agent with that group as its own") {
		t.Fatalf("want a refusal saying what to do, got %v:\n%s", err, out)
	}
}
