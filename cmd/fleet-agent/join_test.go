package main

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/fleet-agent/fleet-agent/internal/config"
	"github.com/fleet-agent/fleet-agent/internal/metrics"
	"github.com/fleet-agent/fleet-agent/internal/substrate/join"
)

// TestRunServesTheJoinListener: with substrate.join, `run` serves the join
// listener: a join with a token it never issued is refused with its
// reason, and nothing but the two routes is served.
func TestRunServesTheJoinListener(t *testing.T) {
	addr := freePort(t)
	startRunning(t, "1s", "substrate:\n  nodeDaemon:\n    image: registry.example.com/fleet-agent:1.2.0\n    joinURL: http://"+addr+"/\n"+
		"  join:\n    listen: "+addr+"\n    insecure: true\n")
	resp, err := http.Post("http://"+addr+join.JoinPath, "application/json",
		strings.NewReader(`{"poolId":"pool_x","nodeName":"node-1","token":"not-a-token"}`))
	if err != nil {
		t.Fatalf("the join listener does not answer: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(body), join.CodeTokenUnknown) {
		t.Fatalf("a join with a token never issued: %d %s", resp.StatusCode, body)
	}
	resp, err = http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("GET /metrics on the join listener: %d", resp.StatusCode)
	}
}

// TestInClusterWired: the reconciler gets the in-cluster half exactly
// when substrate.nodeDaemon is configured.
func TestInClusterWired(t *testing.T) {
	for _, nd := range []*config.NodeDaemon{nil, {Image: "registry.example.com/fleet-agent:1.2.0", JoinURL: "https://ops.example.com:9465/"}} {
		cfg := &config.Config{}
		cfg.Substrate.Every, cfg.Substrate.NodeDaemon = config.DefaultSubstrateEvery, nd
		opts := reconcilerOptions(nil, nil, cfg, zerolog.Nop(), metrics.New(nil), &join.Store{})
		if (opts.InCluster != nil) != (nd != nil) {
			t.Errorf("nodeDaemon %v: in-cluster half %v", nd != nil, opts.InCluster != nil)
		}
	}
}
