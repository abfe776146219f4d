package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/testutil/gitserver"
)

// exposedRun starts `run` in-process with the ops listener on listen and
// extra config; it returns the run's end and its log.
func exposedRun(t *testing.T, listen, extra string) (<-chan error, *syncBuffer) {
	t.Helper()
	srv := gitserver.Start(t)
	remo := srv.NewRepo(t, "fleet")
	work := remo.Clone(t)
	work.Git(t, "checkout", "-q", "-B", "main")
	work.Write(t, "fleet.json", emptyDoc)
	work.CommitAll(t, "empty")
	work.Push(t, "HEAD:refs/heads/main")
	dir := t.TempDir()
	cfg := fmt.Sprintf("git:\n  url: %s\n  interval: 1s\n  auth: { token: env://GIT_TOKEN }\nstate: %s\nsocket: %s\nlisten: %s\n%s",
		remo.URL, filepath.Join(dir, "fleet.db"), filepath.Join(dir, "api.sock"), listen, extra)
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	log := &syncBuffer{}
	a := &app{stdin: strings.NewReader(""), stdout: io.Discard, stderr: log,
		lookupEnv: func(k string) (string, bool) { return srv.Password, k == "GIT_TOKEN" }}
	ctx, cancel := context.WithCancel(context.Background())
	done, stopped := make(chan error, 1), make(chan struct{})
	go func() {
		defer close(stopped)
		done <- a.runAgent(ctx, mustLoad(t, path, a), path, zerolog.InfoLevel)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-stopped:
		case <-time.After(20 * time.Second):
			t.Error("the agent did not stop")
		}
	})
	return done, log
}

// A listener without TLS or authentication on an address other than
// loopback refuses the start, saying what to set; with its opt-in it
// starts, and says so in its log, its metrics and its status.
func TestExposedListenerIsRefusedOrLoud(t *testing.T) {
	anyAddr := func(t *testing.T) string {
		_, port, _ := net.SplitHostPort(freePort(t))
		return "0.0.0.0:" + port
	}
	for _, c := range []struct {
		name, extra, want string
		ops               func(t *testing.T) string
	}{
		{"ops on every address", "", "set exposeOps: true", anyAddr},
		{"ops with pprof", "pprof: true\n", "memory profiles", anyAddr},
		{"ops without a host", "", "set exposeOps: true", func(t *testing.T) string { _, port, _ := net.SplitHostPort(freePort(t)); return ":" + port }},
		{"insecure join", "substrate:\n  join:\n    listen: 0.0.0.0:0\n    insecure: true\n", "set exposeInsecureJoin: true", func(t *testing.T) string { return freePort(t) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			done, log := exposedRun(t, c.ops(t), c.extra)
			select {
			case err := <-done:
				if !refusal.Is(err, refusal.InvalidInput) {
					t.Fatalf("refused with %v, want INVALID_INPUT", err)
				}
				if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "loopback") {
					t.Fatalf("the refusal does not say what to set (%q): %v", c.want, err)
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("the agent started with an exposed listener:\n%s", log.String())
			}
		})
	}
	t.Run("opted in", func(t *testing.T) {
		addr := anyAddr(t)
		_, port, _ := net.SplitHostPort(addr)
		local := "127.0.0.1:" + port
		_, log := exposedRun(t, addr, "exposeOps: true\nexposeInsecureJoin: true\nsubstrate:\n  join:\n    listen: 0.0.0.0:0\n    insecure: true\n")
		get := func(path string) string {
			resp, err := http.Get("http://" + local + path)
			if err != nil {
				return ""
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return string(b)
		}
		waitFor(t, "the opted-in agent to answer", 20*time.Second, func() bool { return get("/healthz") == "ok\n" })
		metrics := get("/metrics")
		for _, l := range []string{"ops", "join"} {
			if !strings.Contains(metrics, `fleet_agent_exposed_listener{listener="`+l+`"} 1`) {
				t.Errorf("no metric for the exposed %s listener:\n%s", l, grepLines(metrics, "exposed"))
			}
			if !strings.Contains(log.String(), `"listener":"`+l+`"`) || !strings.Contains(log.String(), `"level":"warn"`) {
				t.Errorf("no warning line for the exposed %s listener:\n%s", l, log.String())
			}
		}
		status := get("/status")
		if !strings.Contains(status, `"warnings":[`) || !strings.Contains(status, "exposeOps: true") || !strings.Contains(status, "exposeInsecureJoin: true") {
			t.Errorf("the status does not warn:\n%s", status)
		}
	})
}

func grepLines(s, word string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, word) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
