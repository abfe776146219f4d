package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleet-agent/fleet-agent/internal/config"
	"github.com/fleet-agent/fleet-agent/internal/forge"
	"github.com/fleet-agent/fleet-agent/internal/forge/githubemu"
	"github.com/fleet-agent/fleet-agent/internal/testutil/gitserver"
)

// runningAgent is `fleet-agent run` in-process against a git server and the
// GitHub emulator, on the wall clock, as an operator runs it.
type runningAgent struct {
	path string // the config file
	log  *syncBuffer
	srv  *gitserver.Server
	remo *gitserver.Repo
	work *gitserver.Work
	emu  *githubemu.Server
	gh   *githubemu.Repo
	ops  string
	boot string // the first commit of main
	stop context.CancelFunc
	done chan error
}

const hookSecret = "hook-secret-for-tests"

func freePort(tb testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startRunning starts `run` in-process; extra is appended to its config.
func startRunning(tb testing.TB, interval string, extra ...string) *runningAgent {
	tb.Helper()
	return startRunningWith(tb, interval, strings.Join(extra, ""))
}

// startRunningWith is startRunning with more config (YAML appended to the
// config file: providers, substrate, drift).
func startRunningWith(tb testing.TB, interval, extra string) *runningAgent {
	tb.Helper()
	r := &runningAgent{srv: gitserver.Start(tb), emu: githubemu.New(tb, githubemu.Options{})}
	r.remo = r.srv.NewRepo(tb, "fleet")
	r.work = r.remo.Clone(tb)
	r.emu.AddToken(canaryToken, "fleet-bot")
	r.gh = r.emu.Repo("acme/fleet")
	r.work.Git(tb, "checkout", "-q", "-B", "main")
	r.work.Write(tb, "fleet.json", emptyDoc)
	boot := r.work.CommitAll(tb, "empty")
	r.work.Push(tb, "HEAD:refs/heads/main")
	r.gh.AddCommit(boot)
	r.boot = boot
	dir := tb.TempDir()
	r.ops = freePort(tb)
	cfg := fmt.Sprintf(`git:
  url: %s
  interval: %s
  auth: { token: env://GIT_TOKEN }
github:
  repository: acme/fleet
  apiURL: %s
  token: env://GITHUB_TOKEN
  webhookSecret: env://HOOK_SECRET
state: %s
socket: %s
listen: %s
%s`, r.remo.URL, interval, r.emu.URL(), filepath.Join(dir, "fleet.db"), filepath.Join(dir, "api.sock"), r.ops, extra)
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		tb.Fatal(err)
	}
	env := map[string]string{"GIT_TOKEN": r.srv.Password, "GITHUB_TOKEN": canaryToken, "HOOK_SECRET": hookSecret}
	r.path, r.log = path, &syncBuffer{}
	a := &app{stdin: strings.NewReader(""), stdout: io.Discard, stderr: r.log,
		lookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }}
	ctx, cancel := context.WithCancel(context.Background())
	r.stop, r.done = cancel, make(chan error, 1)
	go func() { r.done <- a.runAgent(ctx, mustLoad(tb, path, a), path, zerolog.InfoLevel) }()
	tb.Cleanup(func() {
		cancel()
		<-r.done
	})
	r.waitReady(tb)
	return r
}

func (r *runningAgent) waitReady(tb testing.TB) {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + r.ops + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	tb.Fatal("the agent never got ready")
}

// pushPR pushes a new head for pull request n and returns it.
func (r *runningAgent) pushPR(tb testing.TB, n, i int) string {
	r.work.Git(tb, "checkout", "-q", "-B", "pr"+strconv.Itoa(n))
	r.work.Write(tb, "fleet.json", fmt.Sprintf(`{"version":1,"sites":[{"name":"s%d","kind":"shared","region":"eu"}]}`, i))
	sha := r.work.CommitAll(tb, "change "+strconv.Itoa(i))
	r.work.Push(tb, "--force", "HEAD:refs/pull/"+strconv.Itoa(n)+"/head")
	r.gh.AddCommit(sha)
	if _, ok := r.gh.PR(n); ok {
		r.gh.PushHead(n, sha)
	} else {
		r.gh.OpenPR(githubemu.PR{Number: n, HeadSHA: sha, HeadRef: "pr" + strconv.Itoa(n)})
	}
	return sha
}

func (r *runningAgent) webhook(tb testing.TB) {
	body := []byte(`{"action":"synchronize"}`)
	req, _ := http.NewRequest("POST", "http://"+r.ops+"/hooks/github", bytes.NewReader(body))
	req.Header.Set("X-Hub-Signature-256", forge.Sign([]byte(hookSecret), body))
	req.Header.Set("X-GitHub-Event", "pull_request")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		tb.Fatalf("webhook answered %d", resp.StatusCode)
	}
}

// quiet waits for the posts of the start (the first tip's apply and drift
// statuses) to be delivered and the spacing after them to pass.
func (r *runningAgent) quiet(tb testing.TB) {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for _, s := range r.gh.Statuses(r.boot) {
			if s.Context == "fleet-agent/drift" {
				time.Sleep(1100 * time.Millisecond)
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	tb.Fatal("the start's posts never came")
}

// settle waits until the plan comment naming sha is on GitHub and the
// outbox's one-second spacing has passed, so each push is measured from a
// quiet agent, as a person pushing again would meet it.
func (r *runningAgent) settle(tb testing.TB, sha string) {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for _, c := range r.gh.Comments(1) {
			if strings.Contains(c.Body, sha) {
				time.Sleep(1100 * time.Millisecond)
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	tb.Fatalf("the plan comment for %s never came", sha)
}

func (r *runningAgent) waitStatus(tb testing.TB, sha string, limit time.Duration) time.Duration {
	start := time.Now()
	for time.Since(start) < limit {
		for _, s := range r.gh.Statuses(sha) {
			if s.Context == "fleet-agent/plan" {
				return time.Since(start)
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	tb.Fatalf("no plan status on %s within %s", sha, limit)
	return 0
}

// BenchmarkPushToStatus measures a push to its plan status on GitHub: with
// the webhook (goal under 1 s, with a 30 s interval so only the webhook can
// explain it) and without (goal under one interval + 1 s, interval 2 s).
// Each push starts from a quiet agent: the outbox spaces writes a second
// apart, so a push made while the last one's comment is still going out
// waits up to that second more.
// It also counts the requests of an idle poll (goal at most one, a 304).
func BenchmarkPushToStatus(b *testing.B) {
	b.Run("webhook", func(b *testing.B) {
		r := startRunning(b, "30s")
		r.quiet(b)
		var worst time.Duration
		i := 0
		for b.Loop() {
			i++
			sha := r.pushPR(b, 1, i)
			r.webhook(b)
			worst = max(worst, r.waitStatus(b, sha, 10*time.Second))
			b.StopTimer()
			r.settle(b, sha)
			b.StartTimer()
		}
		b.ReportMetric(float64(worst.Milliseconds()), "worst-ms")
		b.ReportMetric(float64(worst)/float64(time.Second), "x-goal-1s")
	})
	b.Run("poll", func(b *testing.B) {
		r := startRunning(b, "2s")
		r.quiet(b)
		var worst time.Duration
		i := 0
		for b.Loop() {
			i++
			sha := r.pushPR(b, 1, i)
			worst = max(worst, r.waitStatus(b, sha, 20*time.Second))
			b.StopTimer()
			r.settle(b, sha)
			b.StartTimer()
		}
		b.ReportMetric(float64(worst.Milliseconds()), "worst-ms")
		b.ReportMetric(float64(worst)/float64(3*time.Second), "x-goal-interval+1s")
		// Idle: after the last status, let a few polls pass and count.
		time.Sleep(3 * time.Second)
		r.emu.ResetLog()
		time.Sleep(4100 * time.Millisecond) // two polls of 2 s
		reqs := r.emu.Requests()
		counted := 0
		for _, q := range reqs {
			if q.Counted {
				counted++
			}
		}
		b.ReportMetric(float64(len(reqs))/2, "requests/idle-poll")
		b.ReportMetric(float64(counted), "counted-requests")
	})
}

func mustLoad(tb testing.TB, path string, a *app) *config.Config {
	tb.Helper()
	cfg, err := config.Load(path, a.lookupEnv)
	if err == nil {
		err = cfg.CheckForRun()
	}
	if err != nil {
		tb.Fatal(err)
	}
	return cfg
}

// syncBuffer is a log sink the agent writes while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
