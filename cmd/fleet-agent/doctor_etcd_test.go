package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/doctor"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/state/statetest"
)

// doctor on an etcd store with no agent on the socket: it reads etcd,
// names the leader, and says so when none leads or etcd is gone.
func TestDoctorOnEtcd(t *testing.T) {
	dir := t.TempDir()
	opts := statetest.EtcdOptions(t)
	opts.Name = "agent-x"
	write := func(endpoint string) string {
		return writeFile(t, dir, "config.yaml", "socket: "+filepath.Join(dir, "no.sock")+"\nstate:\n  backend: etcd\n  etcd:\n    endpoints: ['"+endpoint+"']\n    prefix: "+opts.Prefix+"\n")
	}
	findings := func(cfg string) map[string]string {
		t.Helper()
		out, errs, _ := cli(t, map[string]string{}, "doctor", "-o", "json", "--config", cfg)
		var rep doctor.Report
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("doctor: %v\n%s\n%s", err, out, errs)
		}
		got := map[string]string{}
		for _, f := range rep.Findings {
			if f.Check == "state" {
				got[f.Code] = f.Found
			}
		}
		return got
	}
	cfg := write(opts.Endpoints[0])
	// Before any agent made the store: nothing recorded yet, not a failure.
	if got := findings(cfg); !strings.Contains(got["state-missing"], "no fleet is recorded under the etcd prefix") || got["etcd-unreachable"] != "" {
		t.Fatalf("an empty prefix: %v", got)
	}
	s, err := state.OpenEtcd(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := s.Lead(ctx); err != nil {
		t.Fatal(err)
	}
	if got := findings(cfg); !strings.Contains(got["state-ok"], "agent agent-x leads") || !strings.Contains(got["state-ok"], "1 of 1 endpoints answer") {
		t.Fatalf("leading: %v", got)
	}
	s.Close() // resigns
	if got := findings(cfg); !strings.Contains(got["etcd-no-leader"], "no agent leads it") {
		t.Fatalf("no leader: %v", got)
	}
	if got := findings(write("http://127.0.0.1:1")); got["etcd-unreachable"] == "" {
		t.Fatalf("etcd gone: %v", got)
	}
}
