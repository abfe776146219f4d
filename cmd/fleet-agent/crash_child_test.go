package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/localapi"
	"github.com/fleet-agent/fleet-agent/internal/providers/fake"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/substrate"
	"github.com/fleet-agent/fleet-agent/internal/substrate/crashtest"
)

// The substrate's crash campaign with a real process: `fleet-agent run` is
// started as a child (this test binary, re-executed as the program), a
// scenario's document is pushed, and the child is killed with SIGKILL at a
// random journal transition (counted in its log as it happens). It is
// started again over the same state file and the same fake provider state
// file, and when the substrates have converged, the fake's ground truth is
// checked against the document and the state file's records: no duplicate
// cluster or node pool, nothing leaked after a teardown, state and provider
// agreeing. The in-process campaign (internal/substrate) crashes at every
// journal step many times over; this one shows the same holds for the real
// binary, its real bbolt locking, fsync and restart path.

// childEnv marks the test binary re-executed as fleet-agent.
const childEnv = "FLEET_AGENT_TEST_AS_BINARY"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.LookupEnv))
	}
	os.Exit(kubePlane.Run(m))
}

// childCampaignSeed is the child-process campaign's seed when none is asked.
const childCampaignSeed = 20261202

// campaignTrials is how many child trials run; FLEET_AGENT_CHILD_TRIALS and
// FLEET_AGENT_CHILD_SEED change the run (the seed of a failure is printed).
func campaignTrials() (int, uint64) {
	n := 30
	if v, err := strconv.Atoi(os.Getenv("FLEET_AGENT_CHILD_TRIALS")); err == nil && v > 0 {
		n = v
	}
	// The same campaign on every run unless asked: FLEET_AGENT_CHILD_SEED=N
	// replays a printed seed, FLEET_AGENT_CHILD_SEED=clock draws a new one.
	seed := uint64(childCampaignSeed)
	switch v := os.Getenv("FLEET_AGENT_CHILD_SEED"); {
	case v == "clock":
		seed = uint64(time.Now().UnixNano())
	case v != "":
		if n, err := strconv.ParseUint(v, 10, 64); err == nil {
			seed = n
		}
	}
	return n, seed
}

// trialWorld is one trial's repository, config and files.
type trialWorld struct {
	t      *testing.T
	dir    string
	work   string
	config string
	state  string
	fake   string
	socket string
	// want is the state a converged pool is in: creating when no in-cluster
	// half is configured (it waits for the node daemon), ready when one is.
	want string
}

func newTrialWorld(t *testing.T) *trialWorld {
	t.Helper()
	dir := t.TempDir()
	w := &trialWorld{t: t, dir: dir, work: filepath.Join(dir, "work"), state: filepath.Join(dir, "state", "fleet.db"),
		fake: filepath.Join(dir, "state", "fake.json"), socket: filepath.Join(dir, "api.sock"), want: "creating"}
	remote := filepath.Join(dir, "remote.git")
	w.git(dir, "init", "-q", "--bare", "-b", "main", remote)
	w.git(dir, "clone", "-q", remote, w.work)
	w.git(w.work, "checkout", "-q", "-b", "main")
	secrets := filepath.Join(dir, "secrets")
	if err := os.MkdirAll(secrets, 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, secrets, "fake-token", crashtest.TokenValue)
	indented := "  " + strings.ReplaceAll(strings.TrimRight(crashtest.FakeBlock(w.fake), "\n"), "\n", "\n  ")
	// prune: the scenarios' steps that prune leave pools out, the others
	// leave nothing out, so pruning always is what each step means.
	w.config = writeFile(t, dir, "config.yaml", fmt.Sprintf(`git:
  url: %s
  interval: 1s
state: %s
socket: %s
listen: 127.0.0.1:0
apply:
  prune: true
  requireReviewedPlan: false
drift:
  every: 1h
substrate:
  every: 1s
secrets:
  dir: %s
providers:
%s
`, remote, w.state, w.socket, secrets, indented))
	return w
}

func (w *trialWorld) git(dir string, args ...string) {
	w.t.Helper()
	cmd := exec.CommandContext(w.t.Context(), "git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
	if out, err := cmd.CombinedOutput(); err != nil {
		w.t.Fatalf("git %v: %v\n%s", args, err, out)
	}
}

// push commits and pushes one step's document to main; it returns the
// commit.
func (w *trialWorld) push(step crashtest.Step, i int) string {
	w.t.Helper()
	writeFile(w.t, w.work, "fleet.json", crashtest.Document(step))
	w.git(w.work, "add", "fleet.json")
	w.git(w.work, "commit", "-qm", "step "+strconv.Itoa(i))
	w.git(w.work, "push", "-q", "origin", "main")
	cmd := exec.CommandContext(w.t.Context(), "git", "rev-parse", "HEAD")
	cmd.Dir = w.work
	out, err := cmd.Output()
	if err != nil {
		w.t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// child is a running `fleet-agent run`.
type child struct {
	cmd         *exec.Cmd
	transitions atomic.Int64
	killAt      atomic.Int64 // SIGKILL at this journal transition; 0 never
	killed      chan struct{}
	done        chan error
	log         *strings.Builder
	mu          sync.Mutex
}

func (w *trialWorld) start() *child {
	w.t.Helper()
	self, err := os.Executable()
	if err != nil {
		w.t.Fatal(err)
	}
	c := &child{killed: make(chan struct{}), done: make(chan error, 1), log: &strings.Builder{}}
	c.cmd = exec.Command(self, "run", "--config", w.config, "--log-level", "info")
	c.cmd.Env = append(os.Environ(), childEnv+"=1")
	stderr, err := c.cmd.StderrPipe()
	if err != nil {
		w.t.Fatal(err)
	}
	c.cmd.Stdout = io.Discard
	if err := c.cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			c.mu.Lock()
			c.log.WriteString(line + "\n")
			c.mu.Unlock()
			if strings.Contains(line, `"message":"substrate: journal transition"`) {
				if n := c.transitions.Add(1); n == c.killAt.Load() {
					_ = c.cmd.Process.Signal(syscall.SIGKILL)
					close(c.killed)
				}
			}
		}
		c.done <- c.cmd.Wait()
	}()
	deadline := time.Now().Add(30 * time.Second)
	for !localapi.NewClient(w.socket).Running(w.t.Context()) {
		select {
		case err := <-c.done:
			w.t.Fatalf("the agent exited at start: %v\n%s", err, c.logs())
		default:
		}
		if time.Now().After(deadline) {
			c.cmd.Process.Kill()
			w.t.Fatalf("the agent did not start:\n%s", c.logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return c
}

func (c *child) logs() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.log.String()
}

// stop ends the child with SIGTERM (it must exit 0).
func (c *child) stop(t *testing.T) {
	t.Helper()
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-c.done:
		if err != nil {
			t.Fatalf("the agent did not stop cleanly: %v\n%s", err, c.logs())
		}
	case <-time.After(30 * time.Second):
		c.cmd.Process.Kill()
		t.Fatalf("the agent did not stop on SIGTERM:\n%s", c.logs())
	}
}

// converged reports whether the substrates say the step is done: every pool
// of the step converged, in state want (creating when no in-cluster half is
// configured: it waits for the node daemon) with one running node pool per
// flavor; every pool left out deleted.
func converged(list []substrate.Status, step crashtest.Step, want string) bool {
	byPool := map[string]substrate.Status{}
	for _, s := range list {
		byPool[s.Pool] = s
	}
	for _, p := range step.Pools {
		s, ok := byPool[p.Name]
		if p.Left {
			if ok && (s.State != "deleted" || !s.Converged) {
				return false
			}
			continue
		}
		if !ok || !s.Converged || s.State != want || len(s.NodePools) != len(p.Flavors) {
			return false
		}
		for _, f := range p.Flavors {
			i := slices.IndexFunc(s.NodePools, func(np substrate.StatusNodePool) bool { return np.Flavor == f.Name })
			if i < 0 || s.NodePools[i].Status != "running" || (f.Autoscaling == nil && s.NodePools[i].Nodes != f.Nodes) {
				return false
			}
		}
	}
	return true
}

// waitConverged polls the running agent's substrates until the step is
// done; a child killed meanwhile (its kill point reached) is started again,
// and the wait goes on with the new one, which it returns.
func (w *trialWorld) waitConverged(c *child, step crashtest.Step, head, what string) (*child, bool) {
	w.t.Helper()
	var list []substrate.Status
	return w.waitUntil(c, head, what, "the substrates did not converge", func(ctx context.Context, client *localapi.Client) (bool, error) {
		err := client.Do(ctx, "GET", "/v1/substrates", nil, &list)
		return err == nil && converged(list, step, w.want), err
	}, func() string { return fmt.Sprintf("%+v", list) })
}

// waitApplied waits until the running agent applied head (a child killed
// meanwhile is started again).
func (w *trialWorld) waitApplied(c *child, head, what string) (*child, bool) {
	w.t.Helper()
	return w.waitUntil(c, head, what, head+" was not applied", func(context.Context, *localapi.Client) (bool, error) { return true, nil }, func() string { return "" })
}

// waitUntil polls the running agent until it applied head and done says
// so, for 90 s; a child killed meanwhile is started again and the wait goes
// on with the new one, which it returns, with whether one was killed.
func (w *trialWorld) waitUntil(c *child, head, what, failure string, done func(context.Context, *localapi.Client) (bool, error), last func() string) (*child, bool) {
	w.t.Helper()
	client := localapi.NewClient(w.socket)
	deadline := time.Now().Add(90 * time.Second)
	wasKilled := false
	for {
		select {
		case <-c.killed:
			<-c.done
			wasKilled = true
			c = w.start()
		default:
		}
		ctx, cancel := context.WithTimeout(w.t.Context(), 5*time.Second)
		var st localapi.StatusView
		err := client.Do(ctx, "GET", "/v1/status", nil, &st)
		if err == nil && st.Applied != nil && st.Applied.Commit == head {
			var ok bool
			if ok, err = done(ctx, client); ok {
				cancel()
				return c, wasKilled
			}
		}
		cancel()
		if time.Now().After(deadline) {
			w.t.Fatalf("%s: %s in 90 s: %s (%v)\n%s", what, failure, last(), err, c.logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// check stops nothing: it reads the files of a stopped agent.
func (w *trialWorld) check(last crashtest.Step) crashtest.Findings {
	w.t.Helper()
	f, err := fake.New(crashtest.FakeConfig(w.fake), crashtest.DefaultSecrets)
	if err != nil {
		w.t.Fatal(err)
	}
	s, err := state.Open(w.state, state.Options{ReadOnly: true})
	if err != nil {
		w.t.Fatal(err)
	}
	defer s.Close()
	var recs []state.SubstrateRecord
	if err := s.View(func(tx *state.Tx) (err error) { recs, err = tx.Substrates(); return }); err != nil {
		w.t.Fatal(err)
	}
	return crashtest.Check(f.Snapshot(), last, recs, s.Installation())
}

func TestCrashCampaignChildProcess(t *testing.T) {
	trials, seed := campaignTrials()
	scenarios := withoutInCluster(crashtest.Scenarios())
	var mu sync.Mutex
	killed, clean, failed := 0, 0, 0
	t.Cleanup(func() {
		t.Logf("child-process campaign: seed %d, %d trials, %d killed mid-step, %d reached the end without a kill, %d failed", seed, trials, killed, clean, failed)
	})
	sem := make(chan struct{}, 3)
	var wg sync.WaitGroup
	for i := range trials {
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		sc := scenarios[rng.IntN(len(scenarios))]
		// The kill falls in any of the scenario's steps, at any of its first
		// 10 journal transitions (a step makes 5 to 40).
		killStep := rng.IntN(len(sc.Steps))
		killAt := int64(1 + rng.IntN(10))
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			t.Run(fmt.Sprintf("%02d-%s-step%d-kill%d", i, sc.Name, killStep, killAt), func(t *testing.T) {
				defer func() {
					if t.Failed() {
						mu.Lock()
						failed++
						mu.Unlock()
						t.Logf("FAILED: rerun with FLEET_AGENT_CHILD_SEED=%d FLEET_AGENT_CHILD_TRIALS=%d (trial %d, scenario %s, kill at transition %d of step %d)", seed, trials, i, sc.Name, killAt, killStep)
					}
				}()
				w := newTrialWorld(t)
				c := w.start()
				n := 0
				for _, step := range sc.Setup {
					head := w.push(step, n)
					n++
					c, _ = w.waitConverged(c, step, head, "setup")
				}
				var last crashtest.Step
				for si, step := range sc.Steps {
					last = step
					if si == killStep {
						// SIGKILL at the k-th journal transition of this step.
						c.killAt.Store(c.transitions.Load() + killAt)
					}
					head := w.push(step, n)
					n++
					var wasKilled bool
					if step.Rush {
						// The next step is pushed while this one is in
						// flight: wait only until it is applied.
						c, wasKilled = w.waitApplied(c, head, "step "+strconv.Itoa(si))
					} else {
						c, wasKilled = w.waitConverged(c, step, head, "step "+strconv.Itoa(si))
					}
					if si == killStep {
						mu.Lock()
						if wasKilled {
							killed++
						} else {
							clean++
						}
						mu.Unlock()
					}
				}
				c.stop(t)
				if f := w.check(last); !f.OK() {
					lines := strings.Split(strings.TrimSpace(c.logs()), "\n")
					t.Fatalf("%+v\nthe last agent's log, its end:\n%s", f, strings.Join(lines[max(0, len(lines)-25):], "\n"))
				}
			})
		})
	}
	wg.Wait()
	if _, set := os.LookupEnv("FLEET_AGENT_CHILD_TRIALS"); !set && killed < trials/2 {
		t.Errorf("only %d of %d trials killed the agent mid-step (seed %d): the campaign must SIGKILL in at least half", killed, trials, seed)
	}
}

// withoutInCluster is the scenarios as the child binary runs them: it has
// no Kubernetes API behind the fake, so no in-cluster half, and a drained
// shrink is the resize it is without one (its steps marked not drained, so
// the check expects a substrate waiting for its node daemon).
func withoutInCluster(scenarios []crashtest.Scenario) []crashtest.Scenario {
	out := make([]crashtest.Scenario, 0, len(scenarios))
	for _, sc := range scenarios {
		if sc.Drains {
			continue
		}
		sc.Setup, sc.Steps = undrained(sc.Setup), undrained(sc.Steps)
		out = append(out, sc)
	}
	return out
}

func undrained(steps []crashtest.Step) []crashtest.Step {
	out := slices.Clone(steps)
	for i := range out {
		out[i].Drained = false
	}
	return out
}
