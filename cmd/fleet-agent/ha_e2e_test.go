package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fleet-agent/fleet-agent/internal/forge/githubemu"
	"github.com/fleet-agent/fleet-agent/internal/localapi"
	"github.com/fleet-agent/fleet-agent/internal/providers/fake"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/substrate"
	"github.com/fleet-agent/fleet-agent/internal/substrate/crashtest"
	"github.com/fleet-agent/fleet-agent/internal/testutil/etcdcluster"
	"github.com/fleet-agent/fleet-agent/internal/testutil/gitserver"
)

// Several agents on one etcd, end to end: three `fleet-agent run`
// processes (this test binary re-executed as the program, as the crash
// campaign does) on a three-member etcd cluster, one real git server, the
// GitHub emulator (each agent reaching it through a proxy of its own, so a
// post is counted per agent and an agent can be killed while GitHub holds
// its request) and the fake provider's shared account file. Pull requests
// are opened and merged as on GitHub; the leader is killed (SIGKILL) during
// an apply, a cluster create and an outbox drain, paused (SIGSTOP) past its
// lease while a standby takes over and the fleet changes, and an etcd
// member is killed and restarted under load. After each trial: the apply
// happened once (audit rows in etcd), each cluster exists once (the fake's
// truth), each comment was posted once (the emulator), and a standby led
// within the bound.

const (
	haLease = 5 * time.Second
	// haSlowdown is how many times a clean hand-over (measured on this
	// machine when the world starts: the leader stopped with SIGTERM, a
	// standby leading) a standby may take to lead once the dead leader's
	// lease ran out: the bound of a failover is the lease plus that, so a
	// busy machine, which slows both, does not fail the test, and a
	// takeover that waits for something else (a second lease, a retry
	// backoff) still does.
	haSlowdown = 10
	// haDefaultSeed is the campaign's seed unless FLEET_AGENT_HA_SEED names
	// one (or "clock").
	haDefaultSeed = 20261202
	haRepo        = "acme/fleet"
)

// haAgent is one `fleet-agent run` child.
type haAgent struct {
	name   string
	config string
	socket string
	ops    string // host:port of the ops listener
	proxy  *ghProxy

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan error
	exited  bool
	stopped bool // SIGSTOPped
	log     strings.Builder
	lines   int
	// onLine, when set, sees every log line as it is read.
	onLine atomic.Pointer[func(string)]
}

func (a *haAgent) logs() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.log.String()
}

// logTail is the last n lines of the agent's log.
func (a *haAgent) logTail(n int) string {
	lines := strings.Split(strings.TrimRight(a.logs(), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// linesSince is the log lines after the first n.
func (a *haAgent) linesSince(n int) []string {
	lines := strings.Split(strings.TrimRight(a.logs(), "\n"), "\n")
	if n >= len(lines) {
		return nil
	}
	return lines[n:]
}

func (a *haAgent) lineCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lines
}

func (a *haAgent) running() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cmd != nil && !a.exited
}

// ghProxy forwards one agent's GitHub requests to the emulator. It counts
// the writes that reached the emulator, and onWrite (when set) runs after
// the emulator answered a write and before the answer goes back: a test
// kills the agent there, so GitHub did the work and the agent never heard.
type ghProxy struct {
	srv     *httptest.Server
	writes  atomic.Int64
	onWrite atomic.Pointer[func(*http.Request)]
}

func isWrite(method string) bool {
	return method == http.MethodPost || method == http.MethodPatch || method == http.MethodPut || method == http.MethodDelete
}

func newGHProxy(t *testing.T, emuURL string) *ghProxy {
	t.Helper()
	target, err := url.Parse(emuURL)
	if err != nil {
		t.Fatal(err)
	}
	root := &url.URL{Scheme: target.Scheme, Host: target.Host}
	p := &ghProxy{}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(root); r.Out.Host = root.Host },
		ModifyResponse: func(resp *http.Response) error {
			if isWrite(resp.Request.Method) && resp.StatusCode < 300 {
				p.writes.Add(1)
				if f := p.onWrite.Load(); f != nil {
					(*f)(resp.Request)
				}
			}
			return nil
		},
	}
	p.srv = httptest.NewServer(rp)
	t.Cleanup(p.srv.Close)
	return p
}

// apiURL is the emulator's API address through this proxy.
func (p *ghProxy) apiURL(emuURL string) string {
	u, _ := url.Parse(emuURL)
	return p.srv.URL + u.Path
}

// haWorld is the etcd cluster, the repository, GitHub, the fake account
// and the three agents.
type haWorld struct {
	t      *testing.T
	dir    string
	etcd   *etcdcluster.Cluster
	prefix string
	srv    *gitserver.Server
	remo   *gitserver.Repo
	work   *gitserver.Work
	emu    *githubemu.Server
	gh     *githubemu.Repo
	fake   string // the fake account's state file
	agents []*haAgent
	reader *state.Store // a store on the same etcd for the checks: it never leads
	kv     *clientv3.Client
	pr     int    // the last pull request number
	main   string // main's tip
	step   crashtest.Step
	// failovers are the times from a SIGKILL (or a pause) to a standby
	// leading.
	failovers []time.Duration
	// handover is the clean hand-over measured at the start; bound is how
	// soon after a SIGKILL or a pause a standby must lead (haSlowdown).
	handover, bound time.Duration
	twoLeaders      int // scrapes that found two agents saying they lead
	// pausedCalls counts pause trials where the continued agent tried a
	// provider call before it noticed it no longer led (refused by the
	// fake at the call).
	pausedCalls int
}

func newHAWorld(t *testing.T) *haWorld {
	t.Helper()
	dir := t.TempDir()
	w := &haWorld{t: t, dir: dir, prefix: "/fleet-agent-ha", fake: filepath.Join(dir, "fake.json")}
	w.etcd = etcdcluster.Start(t, etcdcluster.Options{Members: 3})
	w.kv = w.etcd.Client(t)
	w.srv = gitserver.Start(t)
	w.remo = w.srv.NewRepo(t, "fleet")
	w.work = w.remo.Clone(t)
	w.work.Git(t, "checkout", "-q", "-B", "main")
	w.emu = githubemu.New(t, githubemu.Options{})
	w.emu.AddToken(canaryToken, "fleet-bot")
	w.gh = w.emu.Repo(haRepo)
	w.main = w.push("main", `{"version":1}`, "an empty fleet")

	secrets := filepath.Join(dir, "secrets")
	if err := os.MkdirAll(secrets, 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, secrets, "fake-token", crashtest.TokenValue)
	fakeBlock := "  " + strings.ReplaceAll(strings.TrimRight(crashtest.FakeBlock(w.fake), "\n"), "\n", "\n  ")
	var endpoints []string
	for _, e := range w.etcd.Endpoints() {
		endpoints = append(endpoints, strconv.Quote(e))
	}
	for i := range 3 {
		a := &haAgent{name: "agent-" + strconv.Itoa(i), socket: filepath.Join(dir, "a"+strconv.Itoa(i)+".sock"), ops: freePort(t)}
		a.proxy = newGHProxy(t, w.emu.URL())
		a.config = writeFile(t, dir, a.name+".yaml", fmt.Sprintf(`git:
  url: %s
  interval: 1s
  auth: { token: env://GIT_TOKEN }
github:
  repository: %s
  apiURL: %s
  token: env://GITHUB_TOKEN
%s
socket: %s
listen: %s
apply:
  prune: true
drift:
  every: 1h
substrate:
  every: 1s
secrets:
  dir: %s
providers:
%s
`, w.remo.URL, haRepo, a.proxy.apiURL(w.emu.URL()), stateYAML(strings.Join(endpoints, ", "), w.prefix, a.name, dir),
			a.socket, a.ops, secrets, fakeBlock))
		w.agents = append(w.agents, a)
	}
	t.Cleanup(func() {
		for _, a := range w.agents {
			w.terminate(a)
		}
		if t.Failed() {
			for _, a := range w.agents {
				t.Logf("---- %s, the end of its log:\n%s", a.name, a.logTail(40))
			}
		}
	})
	for _, a := range w.agents {
		w.start(a)
	}
	w.waitLeader(nil, 30*time.Second)
	// The store exists once the first leader made it.
	w.waitFor(30*time.Second, "the store in etcd", func() (bool, string) {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		r, err := state.OpenEtcd(ctx, state.EtcdOptions{Endpoints: w.etcd.Endpoints(), Prefix: w.prefix, Name: "ha-test-reader", ReadOnly: true})
		if err != nil {
			return false, err.Error()
		}
		w.reader = r
		return true, ""
	})
	t.Cleanup(func() { w.reader.Close() })
	w.waitApplied(w.main, 60*time.Second)
	w.measureHandover()
	return w
}

// measureHandover stops the leader with SIGTERM (it resigns), times until
// a standby leads, starts it again, and derives the failover bound.
func (w *haWorld) measureHandover() {
	w.t.Helper()
	old := w.leader()
	began := time.Now()
	w.terminate(old)
	// A generous bound for the measurement itself: the lease a resign
	// makes unnecessary, many times over.
	w.waitLeader(old, 20*haLease)
	w.handover = time.Since(began)
	w.bound = haLease + haSlowdown*w.handover
	w.t.Logf("a clean hand-over (SIGTERM of %s) took %s on this machine: a failover must take less than %s (the %s lease plus %d times that)",
		old.name, w.handover.Round(time.Millisecond), w.bound.Round(time.Millisecond), haLease, haSlowdown)
	w.start(old)
}

// push commits doc on branch, pushes it and tells the emulator.
func (w *haWorld) push(branch, doc, msg string) string {
	w.t.Helper()
	w.work.Write(w.t, "fleet.json", doc)
	sha := w.work.CommitAll(w.t, msg)
	w.work.Push(w.t, "--force", "HEAD:refs/heads/"+branch)
	w.gh.AddCommit(sha)
	return sha
}

// openPR opens the next pull request with doc on top of main.
func (w *haWorld) openPR(doc string) (int, string) {
	w.t.Helper()
	w.pr++
	n := w.pr
	w.work.Git(w.t, "checkout", "-q", "-B", "pr"+strconv.Itoa(n), w.main)
	sha := w.push("pr"+strconv.Itoa(n), doc, "change "+strconv.Itoa(n))
	w.remo.UpdateRef(w.t, "refs/pull/"+strconv.Itoa(n)+"/head", sha)
	w.gh.OpenPR(githubemu.PR{Number: n, HeadSHA: sha, HeadRef: "pr" + strconv.Itoa(n), BaseRef: "main", User: "alice"})
	return n, sha
}

// merge fast-forwards main to the pull request's head.
func (w *haWorld) merge(n int, sha string) {
	w.t.Helper()
	w.work.Push(w.t, "--force", sha+":refs/heads/main")
	w.gh.MergePR(n, sha)
	w.main = sha
}

func (w *haWorld) start(a *haAgent) {
	w.t.Helper()
	self, err := os.Executable()
	if err != nil {
		w.t.Fatal(err)
	}
	cmd := exec.Command(self, "run", "--config", a.config, "--log-level", "info")
	cmd.Env = append(os.Environ(), childEnv+"=1", "GIT_TOKEN="+w.srv.Password, "GITHUB_TOKEN="+canaryToken)
	cmd.Stdout = io.Discard
	// Its own working directory: with etcd the agent keeps its clone of
	// the repository beside where a state file would be (./repository
	// without STATE_DIRECTORY), which no two agents may share.
	cmd.Dir = filepath.Join(w.dir, a.name)
	if err := os.MkdirAll(cmd.Dir, 0o700); err != nil {
		w.t.Fatal(err)
	}
	// Killed with the test binary, whatever ends it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		w.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	done := make(chan error, 1)
	a.mu.Lock()
	a.cmd, a.done, a.exited, a.stopped = cmd, done, false, false
	fmt.Fprintf(&a.log, "---- test: %s started (pid %d)\n", a.name, cmd.Process.Pid)
	a.lines++
	a.mu.Unlock()
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			a.mu.Lock()
			a.log.WriteString(line + "\n")
			a.lines++
			a.mu.Unlock()
			if f := a.onLine.Load(); f != nil {
				(*f)(line)
			}
		}
		err := cmd.Wait()
		a.mu.Lock()
		a.exited = true
		a.mu.Unlock()
		done <- err
	}()
	// Up when its ops listener answers (a standby serves it too).
	deadline := time.Now().Add(30 * time.Second)
	for {
		if resp, err := http.Get("http://" + a.ops + "/metrics"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case err := <-done:
			done <- err
			w.t.Fatalf("%s exited at start: %v\n%s", a.name, err, a.logTail(40))
		default:
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("%s's ops listener did not answer in 30 s:\n%s", a.name, a.logTail(40))
		}
		time.Sleep(50 * time.Millisecond) // poll interval
	}
}

// terminate stops a with SIGTERM (SIGKILL after 20 s); for the cleanup.
func (w *haWorld) terminate(a *haAgent) {
	a.mu.Lock()
	cmd, done, exited := a.cmd, a.done, a.exited
	a.mu.Unlock()
	if cmd == nil || exited {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
		done <- nil
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		done <- nil
	}
}

func (w *haWorld) signal(a *haAgent, sig syscall.Signal) {
	w.t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.cmd.Process.Signal(sig); err != nil {
		w.t.Fatalf("signal %v to %s: %v", sig, a.name, err)
	}
	a.stopped = sig == syscall.SIGSTOP
}

// leaderMetric reads fleet_agent_leader from a's /metrics.
func (w *haWorld) leaderMetric(a *haAgent) (int, error) {
	ctx, cancel := context.WithTimeout(w.t.Context(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a.ops+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET /metrics: %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "fleet_agent_leader "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int(f), err
		}
	}
	return 0, fmt.Errorf("%s serves no fleet_agent_leader", a.name)
}

// leaders are the running, unpaused agents whose metric says they lead.
func (w *haWorld) leaders() []*haAgent {
	var out []*haAgent
	for _, a := range w.agents {
		a.mu.Lock()
		live := a.cmd != nil && !a.exited && !a.stopped
		a.mu.Unlock()
		if !live {
			continue
		}
		if v, err := w.leaderMetric(a); err == nil && v == 1 {
			out = append(out, a)
		}
	}
	if len(out) > 1 {
		w.twoLeaders++
	}
	return out
}

// waitLeader waits until one agent other than not leads and returns it.
func (w *haWorld) waitLeader(not *haAgent, within time.Duration) *haAgent {
	w.t.Helper()
	deadline := time.Now().Add(within)
	for {
		if ls := w.leaders(); len(ls) == 1 && ls[0] != not {
			return ls[0]
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("no agent (other than %v) led within %s", not, within)
		}
		time.Sleep(50 * time.Millisecond) // poll interval
	}
}

// leader is the agent that leads now (it waits for one).
func (w *haWorld) leader() *haAgent { return w.waitLeader(nil, 30*time.Second) }

// view reads the store in etcd.
func (w *haWorld) view(fn func(tx *state.Tx) error) {
	w.t.Helper()
	if err := w.reader.View(fn); err != nil {
		w.t.Fatalf("read the store in etcd: %v", err)
	}
}

func (w *haWorld) applied() string {
	var ap *state.Applied
	w.view(func(tx *state.Tx) (err error) { ap, err = tx.Applied(); return })
	if ap == nil {
		return ""
	}
	return ap.Commit
}

// applies counts the audit rows of applies of commit.
func (w *haWorld) applies(commit string) int {
	var rows []state.AuditRow
	w.view(func(tx *state.Tx) (err error) { rows, err = tx.Audit(); return })
	n := 0
	for _, r := range rows {
		if r.Action == "apply" && r.Commit == commit {
			n++
		}
	}
	return n
}

func (w *haWorld) waitApplied(commit string, within time.Duration) {
	w.t.Helper()
	w.waitFor(within, commit+" applied", func() (bool, string) {
		got := w.applied()
		return got == commit, "applied is " + got
	})
}

// waitFor polls cond, restarting no one; it fails with cond's last word.
func (w *haWorld) waitFor(within time.Duration, what string, cond func() (bool, string)) {
	w.t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("%s: not within %s: %s", what, within, last)
		}
		time.Sleep(100 * time.Millisecond) // poll interval
	}
}

func comments(gh *githubemu.Repo, pr int, marker string) int {
	n := 0
	for _, c := range gh.Comments(pr) {
		if strings.Contains(c.Body, marker) {
			n++
		}
	}
	return n
}

// waitPlanned waits for the plan comment and a plan status on head.
func (w *haWorld) waitPlanned(pr int, head string, within time.Duration) {
	w.t.Helper()
	w.waitFor(within, fmt.Sprintf("#%d planned", pr), func() (bool, string) {
		return w.planned(pr, head), "no plan status success and comment yet"
	})
}

func (w *haWorld) planned(pr int, head string) bool {
	var plan string
	for _, s := range w.gh.Statuses(head) {
		if s.Context == "fleet-agent/plan" {
			plan = s.State
		}
	}
	return plan == "success" && comments(w.gh, pr, "<!-- fleet-agent:plan -->") >= 1
}

// substrates is the leader's view of the substrates.
func (w *haWorld) substrates(a *haAgent) ([]substrate.Status, error) {
	ctx, cancel := context.WithTimeout(w.t.Context(), 5*time.Second)
	defer cancel()
	var list []substrate.Status
	err := localapi.NewClient(a.socket).Do(ctx, "GET", "/v1/substrates", nil, &list)
	return list, err
}

// check is the fake's truth against the step and the substrate records
// in etcd.
func (w *haWorld) check(step crashtest.Step) crashtest.Findings {
	w.t.Helper()
	f, err := fake.New(crashtest.FakeConfig(w.fake), crashtest.DefaultSecrets)
	if err != nil {
		w.t.Fatal(err)
	}
	var recs []state.SubstrateRecord
	w.view(func(tx *state.Tx) (err error) { recs, err = tx.Substrates(); return })
	return crashtest.Check(f.Snapshot(), step, recs, w.reader.Installation())
}

// waitConverged waits until the leader says the step converged and the
// fake's truth agrees with it and with etcd.
func (w *haWorld) waitConverged(step crashtest.Step, within time.Duration) {
	w.t.Helper()
	w.waitFor(within, "the substrates converged", func() (bool, string) {
		ls := w.leaders()
		if len(ls) != 1 {
			return false, fmt.Sprintf("%d leaders", len(ls))
		}
		list, err := w.substrates(ls[0])
		if err != nil {
			return false, err.Error()
		}
		if !converged(list, step, "creating") {
			return false, fmt.Sprintf("%+v", list)
		}
		f := w.check(step)
		return f.OK(), fmt.Sprintf("%+v", f)
	})
}

// truth is a digest of what exists at the fake (clusters, their node
// pools, sizes and the create tokens): what a stray call would change.
func (w *haWorld) truth() string {
	w.t.Helper()
	f, err := fake.New(crashtest.FakeConfig(w.fake), crashtest.DefaultSecrets)
	if err != nil {
		w.t.Fatal(err)
	}
	snap := f.Snapshot()
	var lines []string
	for id, c := range snap.Clusters {
		lines = append(lines, fmt.Sprintf("cluster %s %s %s %v", id, c.Name, c.Status, c.ClientTokens))
		for name, np := range c.NodePools {
			lines = append(lines, fmt.Sprintf("  pool %s %s %d %v", id, name, np.NodeCount, np.ClientTokens))
		}
	}
	sort.Strings(lines)
	sum := sha256.Sum256([]byte(strings.Join(lines, "\n")))
	return hex.EncodeToString(sum[:8]) + " (" + strconv.Itoa(len(lines)) + " lines)"
}

// posts checks the comments of pull request pr: one plan comment, and one
// result comment once merged.
func (w *haWorld) posts(pr int, merged bool) []string {
	var bad []string
	if n := comments(w.gh, pr, "<!-- fleet-agent:plan -->"); n != 1 {
		bad = append(bad, fmt.Sprintf("#%d has %d plan comments, want 1", pr, n))
	}
	if merged {
		if n := comments(w.gh, pr, "<!-- fleet-agent:result:"); n != 1 {
			bad = append(bad, fmt.Sprintf("#%d has %d result comments, want 1", pr, n))
		}
	}
	return bad
}

// statusRepeats counts statuses on sha posted twice with the same
// context, state and description (a delivery made again; harmless on
// GitHub, where statuses are a list, but counted).
func (w *haWorld) statusRepeats(sha string) int {
	seen := map[string]int{}
	n := 0
	for _, s := range w.gh.Statuses(sha) {
		k := s.Context + "|" + s.State + "|" + s.Description
		if seen[k]++; seen[k] > 1 {
			n++
		}
	}
	return n
}

// restartDead starts every agent that is not running again.
func (w *haWorld) restartDead() {
	w.t.Helper()
	for _, a := range w.agents {
		if !a.running() {
			w.start(a)
		}
	}
}

// killLeaderAt arms a kill of the leader: arm installs a trigger that
// calls fire once; fire SIGKILLs the leader and notes the time. It
// returns the leader and a channel closed when it was killed.
type killer struct {
	once   sync.Once
	killed chan struct{}
	at     time.Time
}

func (w *haWorld) killNow(a *haAgent, k *killer) {
	k.once.Do(func() {
		a.mu.Lock()
		cmd := a.cmd
		a.mu.Unlock()
		_ = cmd.Process.Signal(syscall.SIGKILL)
		k.at = time.Now()
		close(k.killed)
	})
}

// failover waits for the kill, then for a standby to lead, and records
// the time it took; more than the bound fails the test.
func (w *haWorld) failover(old *haAgent, k *killer, within time.Duration) *haAgent {
	w.t.Helper()
	select {
	case <-k.killed:
	case <-time.After(within):
		w.t.Fatalf("the kill of %s never fired in %s", old.name, within)
	}
	a := old
	a.mu.Lock()
	done := a.done
	a.mu.Unlock()
	<-done
	done <- nil
	next := w.waitLeader(old, 2*w.bound)
	took := time.Since(k.at)
	w.failovers = append(w.failovers, took)
	w.t.Logf("failover: %s killed, %s leads %s later", old.name, next.name, took.Round(10*time.Millisecond))
	if took > w.bound {
		w.t.Errorf("%s led %s after %s was killed; the bound is %s with a %s lease", next.name, took.Round(10*time.Millisecond), old.name, w.bound.Round(time.Millisecond), haLease)
	}
	return next
}

// haTrial is one trial: what it does and where the leader dies.
type haTrial struct {
	kind string // apply, create, drain, pause, member
	// k is which event kills (the k-th etcd write, journal transition or
	// GitHub write after the trigger).
	k    int
	step crashtest.Step
}

// runTrial runs one trial in w and checks it; it returns what it found
// wrong (the test fails on any).
func (w *haWorld) runTrial(tr haTrial) {
	t := w.t
	t.Helper()
	lead := w.leader()
	var k *killer
	if tr.kind == "drain" {
		// Killed while GitHub holds its k-th post of this pull request:
		// the emulator did it, the agent never heard the answer.
		k = &killer{killed: make(chan struct{})}
		var n atomic.Int64
		hook := func(r *http.Request) {
			if n.Add(1) == int64(tr.k) {
				t.Logf("drain: %s killed while GitHub answers its %d-th post, %s %s", lead.name, tr.k, r.Method, r.URL.Path)
				w.killNow(lead, k)
			}
		}
		lead.proxy.onWrite.Store(&hook)
	}
	pr, head := w.openPR(crashtest.Document(tr.step))
	switch tr.kind {
	case "drain":
		// The k-th post may be one of the plan's or, after the merge, one
		// of the apply's.
		killedFirst := false
		w.waitFor(60*time.Second, fmt.Sprintf("#%d planned or its leader killed", pr), func() (bool, string) {
			select {
			case <-k.killed:
				killedFirst = true
				return true, ""
			default:
			}
			return w.planned(pr, head), "neither"
		})
		if killedFirst {
			w.failover(lead, k, 60*time.Second)
			w.waitPlanned(pr, head, 60*time.Second)
			w.merge(pr, head)
		} else {
			w.merge(pr, head)
			w.failover(lead, k, 60*time.Second)
		}
		lead.proxy.onWrite.Store(nil)
	case "apply":
		w.waitPlanned(pr, head, 60*time.Second)
		// Killed at the k-th write to etcd after the merge: the apply's
		// pending status, its transaction, what follows it.
		k = &killer{killed: make(chan struct{})}
		wctx, cancel := context.WithCancel(t.Context())
		rev := w.revision()
		wch := w.kv.Watch(wctx, w.prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
		go func() {
			n := 0
			for resp := range wch {
				for range resp.Events {
					if n++; n == tr.k {
						w.killNow(lead, k)
					}
				}
			}
		}()
		w.merge(pr, head)
		w.failover(lead, k, 60*time.Second)
		cancel()
		when := "before its apply's transaction committed"
		if strings.Contains(lead.logs(), `"commit":"`+head+`","calls"`) {
			when = "after its apply's transaction committed"
		}
		t.Logf("apply: %s killed at the %d-th etcd write after the merge, %s", lead.name, tr.k, when)
	case "create":
		w.waitPlanned(pr, head, 60*time.Second)
		// Killed at its k-th journal transition after the merge: a
		// cluster or node pool create in flight at the fake.
		k = &killer{killed: make(chan struct{})}
		var n atomic.Int64
		hook := func(line string) {
			if strings.Contains(line, `"message":"substrate: journal transition"`) && n.Add(1) == int64(tr.k) {
				w.killNow(lead, k)
			}
		}
		lead.onLine.Store(&hook)
		w.merge(pr, head)
		w.failover(lead, k, 90*time.Second)
	case "member":
		w.waitPlanned(pr, head, 60*time.Second)
		// An etcd member (the k-th, counted from the raft leader) killed
		// at the merge and restarted at the k-th journal transition.
		victim := (w.raftLeader() + tr.k) % w.etcd.Size()
		restarted := make(chan struct{})
		var once sync.Once
		var n atomic.Int64
		hook := func(line string) {
			if strings.Contains(line, `"message":"substrate: journal transition"`) && n.Add(1) == int64(tr.k) {
				once.Do(func() { close(restarted) })
			}
		}
		lead.onLine.Store(&hook)
		if err := w.etcd.Kill(victim); err != nil {
			t.Fatal(err)
		}
		w.merge(pr, head)
		select {
		case <-restarted:
		case <-time.After(90 * time.Second):
			t.Fatalf("no journal transition with etcd member %d down", victim)
		}
		if err := w.etcd.Restart(victim); err != nil {
			t.Fatal(err)
		}
		if err := w.etcd.WaitHealthy(30 * time.Second); err != nil {
			t.Fatal(err)
		}
		lead.onLine.Store(nil)
	case "pause":
		w.pauseTrial(tr, pr, head, lead)
		return
	default:
		t.Fatalf("unknown trial kind %q", tr.kind)
	}
	lead.onLine.Store(nil)
	w.waitApplied(head, 90*time.Second)
	w.waitConverged(tr.step, 120*time.Second)
	w.verify(tr, pr, head)
	w.restartDead()
}

// verify: applied once, each comment once, the truth as the document
// says and as etcd records it.
func (w *haWorld) verify(tr haTrial, pr int, head string) {
	t := w.t
	t.Helper()
	w.waitFor(60*time.Second, fmt.Sprintf("#%d's result comment", pr), func() (bool, string) {
		return comments(w.gh, pr, "<!-- fleet-agent:result:") >= 1, "none yet"
	})
	if n := w.applies(head); n != 1 {
		t.Errorf("%s k=%d: %s applied %d times (audit rows in etcd), want once", tr.kind, tr.k, head, n)
	}
	for _, b := range w.posts(pr, true) {
		t.Errorf("%s k=%d: %s", tr.kind, tr.k, b)
	}
	if f := w.check(tr.step); !f.OK() {
		t.Errorf("%s k=%d: the fake's truth: %+v", tr.kind, tr.k, f)
	}
	if n := w.statusRepeats(head); n > 0 {
		t.Logf("%s k=%d: %d statuses on %s delivered twice", tr.kind, tr.k, n, head[:8])
	}
	w.step = tr.step
}

func (w *haWorld) revision() int64 {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(w.t.Context(), 10*time.Second)
	defer cancel()
	resp, err := w.kv.Get(ctx, "fleet-agent-ha-test-revision")
	if err != nil {
		w.t.Fatal(err)
	}
	return resp.Header.Revision
}

// raftLeader is the etcd member that leads etcd's own raft group.
func (w *haWorld) raftLeader() int {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(w.t.Context(), 10*time.Second)
	defer cancel()
	for i := range w.etcd.Size() {
		if !w.etcd.Running(i) {
			continue
		}
		st, err := w.kv.Status(ctx, w.etcd.Endpoint(i))
		if err == nil && st.Header.MemberId == st.Leader {
			return i
		}
	}
	w.t.Fatal("no etcd member leads")
	return 0
}

// pauseTrial: the leader is SIGSTOPped at its k-th journal transition of
// a create; a standby leads, finishes it, and the fleet changes again
// (another pull request merged and converged); then the paused agent is
// continued. From then on none of its writes, posts or provider calls may
// land: its proxy counts no write at GitHub, the fake's truth does not
// move, etcd still holds the new leader's apply, and it stands by.
func (w *haWorld) pauseTrial(tr haTrial, pr int, head string, old *haAgent) {
	t := w.t
	t.Helper()
	w.waitPlanned(pr, head, 60*time.Second)
	paused := make(chan time.Time, 1)
	var once sync.Once
	var n atomic.Int64
	hook := func(line string) {
		if strings.Contains(line, `"message":"substrate: journal transition"`) && n.Add(1) == int64(tr.k) {
			once.Do(func() { paused <- w.pauseOutsideFake(old) })
		}
	}
	old.onLine.Store(&hook)
	w.merge(pr, head)
	var at time.Time
	select {
	case at = <-paused:
	case <-time.After(90 * time.Second):
		t.Fatalf("pause: %s made no journal transition", old.name)
	}
	old.onLine.Store(nil)
	next := w.waitLeader(old, 2*w.bound)
	took := time.Since(at)
	w.failovers = append(w.failovers, took)
	t.Logf("pause: %s paused, %s leads %s later", old.name, next.name, took.Round(10*time.Millisecond))
	if took > w.bound {
		t.Errorf("pause: %s led %s after %s was paused; the bound is %s", next.name, took, old.name, w.bound.Round(time.Millisecond))
	}
	w.waitApplied(head, 90*time.Second)
	w.waitConverged(tr.step, 120*time.Second)
	w.verify(tr, pr, head)

	// The fleet changes while the old leader sleeps: the pool resized
	// (every flavor one node more), so a stale call of the old leader
	// (its create, at the old size) would show at the fake.
	changed := crashtest.Step{Prune: true}
	for _, p := range tr.step.Pools {
		if p.Left {
			changed.Pools = append(changed.Pools, p)
			continue
		}
		q := p
		q.Flavors = nil
		for _, f := range p.Flavors {
			if f.Autoscaling == nil {
				f.Nodes++
			}
			q.Flavors = append(q.Flavors, f)
		}
		changed.Pools = append(changed.Pools, q)
	}
	pr2, head2 := w.openPR(crashtest.Document(changed))
	w.waitPlanned(pr2, head2, 60*time.Second)
	w.merge(pr2, head2)
	w.waitApplied(head2, 90*time.Second)
	w.waitConverged(changed, 120*time.Second)
	w.verify(haTrial{kind: "pause(change)", k: tr.k, step: changed}, pr2, head2)

	// Continue the old leader and watch what it does.
	truth := w.truth()
	writes := old.proxy.writes.Load()
	applies2 := w.applies(head2)
	from := old.lineCount()
	// A call to the fake that changes nothing (a create asked again under
	// its token answers the cluster there) would not show in the truth,
	// so the test holds the fake's account lock from before the SIGCONT
	// until the old leader stood by: every call, of any agent, then waits
	// in flock(2), and a thread of the old leader seen waiting there is a
	// provider call it tried after it was continued.
	lf, err := os.OpenFile(w.fake+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	calls := 0
	refusedBefore := refusedCalls(w.fake)
	// etcd's revision while the old leader is still stopped: a write of
	// it that landed at or below it was sent before the SIGSTOP (a stopped
	// process sends nothing), whenever its log line is written.
	r, err := w.kv.Get(t.Context(), w.prefix+"/", clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	stoppedAt := r.Header.Revision
	w.signal(old, syscall.SIGCONT)
	resumed := time.Now()
	// It stands by: its log says it campaigns again (its term ended), its
	// metric says 0, and it does not lead while next does.
	w.waitFor(30*time.Second, old.name+" stands by after SIGCONT", func() (bool, string) {
		if n := flockWaiters(old.cmd.Process.Pid); n > calls {
			calls = n
		}
		if calls > 0 {
			return true, ""
		}
		return w.standsBy(old, from)
	})
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	if calls > 0 {
		// The old leader was paused between its own check of the fence
		// and the call (the window no client-side check closes): once the
		// account is free, the call reaches the fake, which asks the
		// call's term with the account held, as a cloud checks its
		// preconditions, and refuses it. Each refusal is in the account's
		// refusal log; the truth, checked below, does not move.
		w.waitFor(30*time.Second, old.name+"'s late call refused by the fake", func() (bool, string) {
			got := refusedCalls(w.fake)
			return len(got) > len(refusedBefore), fmt.Sprintf("the fake's refusal log: %v", got)
		})
		w.pausedCalls++
		t.Logf("pause: %s tried %d provider call(s) after it was continued, refused by the fake at the call: %v", old.name, calls, refusedCalls(w.fake)[len(refusedBefore):])
		w.waitFor(30*time.Second, old.name+" stands by after its late call", func() (bool, string) {
			return w.standsBy(old, from)
		})
	}
	// A full substrate pass of the new leader and a poll after the old
	// one stood by: the new leader's journal moves no operation (the
	// fleet converged), and the old one's log says what it did.
	w.waitConverged(changed, 60*time.Second)
	t.Logf("pause: %s continued, stood by %s later", old.name, time.Since(resumed).Round(10*time.Millisecond))
	if got := old.proxy.writes.Load() - writes; got != 0 {
		t.Errorf("pause: %s made %d writes at GitHub after it was continued, want 0", old.name, got)
	}
	if got := w.truth(); got != truth {
		t.Errorf("pause: the fake's truth moved after %s was continued: %s, then %s", old.name, truth, got)
	}
	if got := w.applies(head2); got != applies2 || w.applied() != head2 {
		t.Errorf("pause: after %s was continued etcd holds %d applies of %s (was %d), applied %s", old.name, got, head2[:8], applies2, w.applied())
	}
	// Each of these is logged after its write landed in etcd, with the
	// revision it landed at. A line written after the SIGCONT whose write
	// landed while the agent was stopped was only logged late: the SIGSTOP
	// fell between the commit and the log write.
	var stray []string
	for _, l := range old.linesSince(from) {
		for _, m := range []string{`"message":"applied"`, `"message":"outbox: delivered"`, `"message":"substrate: journal transition"`, `"message":"substrate: journal operation written"`} {
			if !strings.Contains(l, m) {
				continue
			}
			var line struct{ Rev int64 }
			if err := json.Unmarshal([]byte(l), &line); err == nil && line.Rev > 0 && line.Rev <= stoppedAt {
				t.Logf("pause: %s logged after it was continued a write that landed while it was stopped (rev %d <= %d): %s", old.name, line.Rev, stoppedAt, l)
				continue
			}
			stray = append(stray, l)
		}
	}
	if len(stray) > 0 {
		t.Errorf("pause: %s acted after it was continued:\n%s", old.name, strings.Join(stray, "\n"))
	}
	if ls := w.leaders(); len(ls) != 1 || ls[0] != next {
		t.Errorf("pause: after %s was continued the leaders are %v, want only %s", old.name, names(ls), next.name)
	}
	w.step = changed
	w.restartDead()
}

// standsBy reports whether a stands by: its log after line from says it
// campaigns again (its term ended) and its metric says it does not lead.
func (w *haWorld) standsBy(a *haAgent, from int) (bool, string) {
	campaigning := false
	for _, l := range a.linesSince(from) {
		campaigning = campaigning || strings.Contains(l, `"message":"standing by: campaigning for the leadership"`)
	}
	v, err := w.leaderMetric(a)
	if err != nil {
		return false, err.Error()
	}
	return v == 0 && campaigning, fmt.Sprintf("fleet_agent_leader %d, campaigning again %v", v, campaigning)
}

// pauseOutsideFake SIGSTOPs a at an instant it is not inside a call to
// the fake, and returns when. The fake serialises its account on one file
// lock, which a real cloud does not: a process paused while holding it
// would freeze every other agent's calls, which says nothing about
// fencing. So after the SIGSTOP the test tries the lock itself; when it
// is held (only the leader calls the fake), a is continued for a moment
// and paused again.
func (w *haWorld) pauseOutsideFake(a *haAgent) time.Time {
	lf, err := os.OpenFile(w.fake+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		w.t.Errorf("open the fake's lock: %v", err)
	}
	defer lf.Close()
	a.mu.Lock()
	defer a.mu.Unlock()
	for try := 0; ; try++ {
		_ = a.cmd.Process.Signal(syscall.SIGSTOP)
		a.stopped = true
		at := time.Now()
		// A signal is delivered after kill returns: until every thread
		// is stopped, one may still take the lock.
		waitStopped(w.t, a.cmd.Process.Pid)
		if lf == nil {
			return at
		}
		err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			_ = syscall.Flock(int(lf.Fd()), syscall.LOCK_UN)
			if try > 0 {
				w.t.Logf("pause: %s paused outside a call to the fake at the %d-th try", a.name, try+1)
			}
			return at
		}
		_ = a.cmd.Process.Signal(syscall.SIGCONT)
		a.stopped = false
		time.Sleep(time.Millisecond) // let the call finish: a retry interval, not a wait for an event
	}
}

// refusedCalls is the fake account's refusal log: the methods it refused
// because the caller's term had ended, in order.
func refusedCalls(statePath string) []string {
	b, _ := os.ReadFile(fake.RefusedLog(statePath))
	return strings.Fields(string(b))
}

// flockSyscall is flock(2)'s number, as /proc/PID/task/TID/syscall shows
// it for a thread blocked in it.
var flockSyscall = map[string]string{"amd64": "73", "arm64": "32"}[runtime.GOARCH]

// flockWaiters counts the threads of pid blocked in flock(2).
func flockWaiters(pid int) int {
	tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/syscall")
	n := 0
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err == nil && strings.Fields(string(b) + " x")[0] == flockSyscall {
			n++
		}
	}
	return n
}

// waitStopped polls until every thread of pid is in the stopped state.
func waitStopped(t *testing.T, pid int) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/stat")
		all := len(tasks) > 0
		for _, f := range tasks {
			b, err := os.ReadFile(f)
			// The state follows the command's closing parenthesis.
			i := strings.LastIndexByte(string(b), ')')
			if err != nil || i < 0 || i+2 >= len(b) || (b[i+2] != 'T' && b[i+2] != 't') {
				all = false
				break
			}
		}
		if all {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("process %d not stopped 5 s after SIGSTOP", pid)
			return
		}
		time.Sleep(time.Millisecond) // poll interval
	}
}

func names(as []*haAgent) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.name)
	}
	return out
}

// haSeed is the campaign's seed: FLEET_AGENT_HA_SEED=N replays one,
// FLEET_AGENT_HA_SEED=clock draws a new one.
func haSeed() uint64 {
	switch v := os.Getenv("FLEET_AGENT_HA_SEED"); {
	case v == "clock":
		return uint64(time.Now().UnixNano())
	case v != "":
		if n, err := strconv.ParseUint(v, 10, 64); err == nil {
			return n
		}
	}
	return haDefaultSeed
}

// haStep is the document of trial i: it creates pool p<i>, adds a
// flavor to p<i-1> (a node pool create) and tears p<i-2> down, so that
// every trial makes provider calls of each kind and posts. Every pool of
// an earlier trial is named (those left out as Left): the check counts a
// cluster of a torn-down pool as a leak, not as a pool it does not know.
// Names are never reused: a pool's name comes back only as a new pool.
func haStep(i int) crashtest.Step {
	h100 := crashtest.Flavor{Name: "h100", MachineType: "fake-h100x8", Nodes: 1}
	l4 := crashtest.Flavor{Name: "l4", MachineType: "fake-l4x1", Nodes: 2, Spot: true}
	cpu := crashtest.Flavor{Name: "cpu", MachineType: "fake-cpu-4", Nodes: 1, Autoscaling: &[2]int{1, 3}}
	first := func(j int) crashtest.Flavor {
		if j%2 == 0 {
			return h100
		}
		return cpu
	}
	st := crashtest.Step{Prune: true}
	for j := 0; j <= i; j++ {
		p := crashtest.Pool{Name: "p" + strconv.Itoa(j)}
		switch {
		case j < i-1:
			p.Left, p.Flavors = true, []crashtest.Flavor{h100, l4, cpu}
		case j == i-1:
			p.Flavors = []crashtest.Flavor{first(j), l4}
		default:
			p.Flavors = []crashtest.Flavor{first(j)}
		}
		st.Pools = append(st.Pools, p)
	}
	return st
}

// TestHAOnEtcd runs the fixed trials (one of each kind) and then a seeded
// campaign of random ones in one world: three agents, three etcd members.
func TestHAOnEtcd(t *testing.T) {
	seed := haSeed()
	rng := rand.New(rand.NewPCG(seed, 0))
	w := newHAWorld(t)
	trials := []haTrial{
		{kind: "apply", k: 1},
		{kind: "create", k: 2},
		{kind: "drain", k: 1},
		{kind: "pause", k: 1},
		{kind: "member", k: 1},
	}
	kinds := []string{"apply", "create", "drain", "pause", "member"}
	campaign := 4
	if v, err := strconv.Atoi(os.Getenv("FLEET_AGENT_HA_TRIALS")); err == nil && v >= 0 {
		campaign = v
	}
	// How far into each kind's events the kill may fall: an apply makes
	// several etcd writes before its transaction (the plan's records, the
	// pending status) and more after it (the posts' deliveries); a create
	// five to ten journal transitions; a pull request and its merge about
	// six posts.
	reach := map[string]int{"apply": 16, "create": 8, "drain": 6, "pause": 4, "member": 3}
	for range campaign {
		kind := kinds[rng.IntN(len(kinds))]
		trials = append(trials, haTrial{kind: kind, k: 1 + rng.IntN(reach[kind])})
	}
	began := time.Now()
	t.Cleanup(func() {
		worst := time.Duration(0)
		for _, d := range w.failovers {
			worst = max(worst, d)
		}
		t.Logf("HA campaign: seed %d (FLEET_AGENT_HA_SEED), %d trials, %d leader losses, worst failover %s (lease %s, bound %s), %d scrapes saw two leaders, %d pauses after which the continued agent tried a provider call (refused at the call), %s",
			seed, len(trials), len(w.failovers), worst.Round(10*time.Millisecond), haLease, w.bound.Round(time.Millisecond), w.twoLeaders, w.pausedCalls, time.Since(began).Round(time.Second))
	})
	for i, tr := range trials {
		tr.step = haStep(i)
		t.Logf("trial %d: %s, k=%d", i, tr.kind, tr.k)
		w.runTrial(tr)
		if t.Failed() {
			t.Fatalf("trial %d (%s, k=%d) failed: rerun with FLEET_AGENT_HA_SEED=%d", i, tr.kind, tr.k, seed)
		}
	}
	if w.twoLeaders > 0 {
		t.Errorf("%d scrapes found two agents saying they lead", w.twoLeaders)
	}
}

func stateYAML(endpoints, prefix, name, dir string) string {
	return fmt.Sprintf("state:\n  backend: etcd\n  etcd:\n    endpoints: [%s]\n    prefix: %s\n    name: %s\n    lease: %s", endpoints, prefix, name, haLease)
}
