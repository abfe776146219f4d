package main

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/forge"
	"github.com/fleet-agent/fleet-agent/internal/forge/githubemu"
	"github.com/fleet-agent/fleet-agent/internal/testutil/gitserver"
)

// vmHWM is a process's peak resident memory in KiB (VmHWM in
// /proc/PID/status).
func vmHWM(t *testing.T, pid int) int {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("this test reads /proc (Linux): %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	t.Fatal("no VmHWM in /proc/PID/status")
	return 0
}

// The built binary's peak resident memory under 40 concurrent 25 MiB
// webhook posts with a bad signature stays under 100 MiB. FLEET_AGENT_BIN
// measures another build (an older commit, for a before figure).
func TestWebhookFloodPeakOfTheBinary(t *testing.T) {
	bin := os.Getenv("FLEET_AGENT_BIN")
	if bin == "" {
		bin = filepath.Join(t.TempDir(), "fleet-agent")
		build := exec.CommandContext(t.Context(), "go", "build", "-o", bin, ".")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
	}
	srv := gitserver.Start(t)
	remo := srv.NewRepo(t, "fleet")
	work := remo.Clone(t)
	work.Git(t, "checkout", "-q", "-B", "main")
	work.Write(t, "fleet.json", emptyDoc)
	boot := work.CommitAll(t, "empty")
	work.Push(t, "HEAD:refs/heads/main")
	emu := githubemu.New(t, githubemu.Options{})
	emu.AddToken(canaryToken, "fleet-bot")
	emu.Repo("acme/fleet").AddCommit(boot)
	dir := t.TempDir()
	ops := freePort(t)
	cfg := fmt.Sprintf("git:\n  url: %s\n  interval: 1m\n  auth: { token: env://GIT_TOKEN }\ngithub:\n  repository: acme/fleet\n  apiURL: %s\n  token: env://GITHUB_TOKEN\n  webhookSecret: env://HOOK_SECRET\nstate: %s\nsocket: %s\nlisten: %s\n",
		remo.URL, emu.URL(), filepath.Join(dir, "fleet.db"), filepath.Join(dir, "api.sock"), ops)
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "run", "--config", path, "--log-level", "error")
	cmd.Env = append(os.Environ(), "GIT_TOKEN="+srv.Password, "GITHUB_TOKEN="+canaryToken, "HOOK_SECRET="+hookSecret)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	waitFor(t, "the binary to answer /readyz", 30*time.Second, func() bool {
		resp, err := http.Get("http://" + ops + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	before := vmHWM(t, cmd.Process.Pid)
	const flood = 40
	bad := "sha256=" + strings.Repeat("00", 32)
	codes := make(chan string, flood)
	var wg sync.WaitGroup
	start := time.Now()
	for range flood {
		wg.Go(func() {
			req, _ := http.NewRequest("POST", "http://"+ops+"/hooks/github", io.LimitReader(zeros{}, forge.MaxWebhookBody))
			req.ContentLength = forge.MaxWebhookBody
			req.Header.Set(forge.SignatureHeader, bad)
			resp, err := (&http.Client{Timeout: 2 * time.Minute}).Do(req)
			if err != nil {
				codes <- "cut"
				return
			}
			resp.Body.Close()
			codes <- strconv.Itoa(resp.StatusCode)
		})
	}
	wg.Wait()
	close(codes)
	took := time.Since(start)
	seen := map[string]int{}
	for c := range codes {
		seen[c]++
	}
	after := vmHWM(t, cmd.Process.Pid)
	t.Logf("the built binary under %d concurrent bad 25 MiB webhook posts (%v, answers %v): VmHWM %.1f MiB before, %.1f MiB after (goal under 100 MiB)",
		flood, took.Round(time.Millisecond), seen, float64(before)/1024, float64(after)/1024)
	if seen["401"]+seen["503"]+seen["cut"] != flood {
		t.Errorf("bad posts answered %v; want 401 (read and refused) or 503 (no slot)", seen)
	}
	if after >= 100<<10 {
		t.Errorf("VmHWM %.1f MiB under the flood; want under 100 MiB\n%s", float64(after)/1024, stderr.String())
	}
}
