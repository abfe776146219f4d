package doctl_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/providers/digitalocean/doemu/doctl"
)

var (
	record   = flag.Bool("record", false, "run doctl through every flow against doemu and rewrite the transcript")
	doctlBin = flag.String("doctl", "/work/cache/doctl/doctl-bin", "the doctl binary -record runs")
)

// proxy forwards to the emulator and records every exchange on the wire.
type proxy struct {
	target string
	mu     sync.Mutex
	got    []doctl.Exchange
}

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	in, _ := io.ReadAll(r.Body)
	req, err := http.NewRequestWithContext(r.Context(), r.Method, p.target+r.URL.RequestURI(), bytes.NewReader(in))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	req.Header = r.Header.Clone()
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	x := doctl.Exchange{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Status: resp.StatusCode,
		ContentType: resp.Header.Get("Content-Type")}
	x.Body, _ = body(in)
	x.Response, x.ResponseText = body(out)
	p.mu.Lock()
	p.got = append(p.got, x)
	p.mu.Unlock()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(out)
}

func (p *proxy) take() []doctl.Exchange {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.got
	p.got = nil
	return out
}

// state is what later flows need from earlier ones' output.
type state struct {
	cluster, pool string
	nodes         []string
}

// flow is one doctl command; args sees the state so far.
type flow struct {
	name string
	args func(s *state) []string
	// after reads what later flows need from the output.
	after func(s *state, stdout []byte) error
}

func poolNodes(s *state, stdout []byte) error {
	var pools []struct {
		ID    string `json:"id"`
		Nodes []struct {
			ID string `json:"id"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal(stdout, &pools); err != nil || len(pools) == 0 {
		return fmt.Errorf("node pool output %q: %v", stdout, err)
	}
	s.pool, s.nodes = pools[0].ID, nil
	for _, n := range pools[0].Nodes {
		s.nodes = append(s.nodes, n.ID)
	}
	return nil
}

func args(a ...string) func(*state) []string { return func(*state) []string { return a } }

// flows are doctl's Kubernetes flows, in the order they run (each one's
// ids come from the ones before; the emulator's ids repeat run to run).
var flows = []flow{
	{"options versions", args("kubernetes", "options", "versions", "-o", "json"), nil},
	{"options regions", args("kubernetes", "options", "regions", "-o", "json"), nil},
	{"options sizes", args("kubernetes", "options", "sizes", "-o", "json"), nil},
	{"cluster create, no wait", args("kubernetes", "cluster", "create", "fa-nowait", "--region", "tor1", "--version", "1.34",
		"--size", "s-2vcpu-4gb", "--count", "1", "--wait=false", "--update-kubeconfig=false", "-o", "json"), nil},
	{"cluster create, waiting, kubeconfig saved", args("kubernetes", "cluster", "create", "fa-doctl", "--region", "tor1", "--version", "1.34",
		"--size", "s-2vcpu-4gb", "--count", "2", "--ha", "--auto-upgrade=true", "--maintenance-window", "tuesday=03:00",
		"--tag", "team-web", "-o", "json"), func(s *state, out []byte) error {
		var cs []struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(out, &cs); err != nil || len(cs) != 1 {
			return fmt.Errorf("create output %q: %v", out, err)
		}
		s.cluster = cs[0].ID
		return nil
	}},
	{"cluster create, node pool spec and settings", args("kubernetes", "cluster", "create", "fa-spec", "--region", "tor1", "--version", "latest",
		"--node-pool", "name=auto;size=s-2vcpu-4gb;count=1;tag=pool-a;label=tier=batch;taint=batch=true:NoSchedule;auto-scale=true;min-nodes=1;max-nodes=3",
		"--surge-upgrade=false", "--enable-control-plane-firewall", "--control-plane-firewall-allowed-addresses", "10.0.0.0/8,192.168.1.1/32",
		"--enable-routing-agent", "--scale-down-utilization-threshold", "0.5", "--scale-down-unneeded-time", "1m30s", "--expanders", "priority",
		"--cluster-subnet", "192.168.0.0/20", "--service-subnet", "192.168.16.0/24",
		"--wait=false", "--update-kubeconfig=false", "-o", "json"), nil},
	{"cluster create of a bad region", args("kubernetes", "cluster", "create", "fa-nowhere", "--region", "atl9", "--version", "1.34",
		"--size", "s-2vcpu-4gb", "--count", "1", "--wait=false", "--update-kubeconfig=false", "-o", "json"), nil},
	{"cluster list", args("kubernetes", "cluster", "list", "-o", "json"), nil},
	{"cluster get by name", args("kubernetes", "cluster", "get", "fa-doctl", "-o", "json"), nil},
	{"cluster get by id", func(s *state) []string { return []string{"kubernetes", "cluster", "get", s.cluster, "-o", "json"} }, nil},
	{"cluster update without a name", args("kubernetes", "cluster", "update", "fa-doctl", "--auto-upgrade=false", "--surge-upgrade=false",
		"--maintenance-window", "any=22:30", "--tag", "team-api", "--update-kubeconfig=false", "-o", "json"), nil},
	{"cluster update turning HA off", args("kubernetes", "cluster", "update", "fa-doctl", "--ha=false", "--update-kubeconfig=false", "-o", "json"), nil},
	{"cluster update of the settings", args("kubernetes", "cluster", "update", "fa-spec", "--enable-routing-agent=false",
		"--control-plane-firewall-allowed-addresses", "10.1.0.0/16", "--update-kubeconfig=false", "-o", "json"), nil},
	{"cluster kubeconfig save", args("kubernetes", "cluster", "kubeconfig", "save", "fa-doctl", "--expiry-seconds", "3600", "--set-current-context=false"), nil},
	{"cluster kubeconfig show", args("kubernetes", "cluster", "kubeconfig", "show", "fa-doctl", "--expiry-seconds", "600"), nil},
	{"node-pool create", args("kubernetes", "cluster", "node-pool", "create", "fa-doctl", "--name", "workers", "--size", "s-2vcpu-4gb",
		"--count", "2", "--label", "tier=web", "--taint", "dedicated=web:NoSchedule", "-o", "json"), nil},
	{"node-pool list", args("kubernetes", "cluster", "node-pool", "list", "fa-doctl", "-o", "json"), nil},
	{"node-pool get", args("kubernetes", "cluster", "node-pool", "get", "fa-doctl", "workers", "-o", "json"), poolNodes},
	{"node-pool update without a name", args("kubernetes", "cluster", "node-pool", "update", "fa-doctl", "workers", "--count", "3", "-o", "json"), nil},
	{"node-pool get after the resize", args("kubernetes", "cluster", "node-pool", "get", "fa-doctl", "workers", "-o", "json"), poolNodes},
	{"node replace", func(s *state) []string {
		return []string{"kubernetes", "cluster", "node-pool", "replace-node", "fa-doctl", "workers", s.nodes[0], "--force"}
	}, nil},
	{"node delete, skipping the drain", func(s *state) []string {
		return []string{"kubernetes", "cluster", "node-pool", "delete-node", "fa-doctl", "workers", s.nodes[1], "--skip-drain", "--force"}
	}, nil},
	{"node-pool update to autoscaling", args("kubernetes", "cluster", "node-pool", "update", "fa-spec", "auto", "--auto-scale", "--min-nodes", "2",
		"--max-nodes", "4", "-o", "json"), nil},
	{"node-pool get after the node changes", args("kubernetes", "cluster", "node-pool", "get", "fa-doctl", "workers", "-o", "json"), nil},
	{"node delete of an unknown node", args("kubernetes", "cluster", "node-pool", "delete-node", "fa-doctl", "workers",
		"00000000-0000-4000-8000-000000000000", "--force"), nil},
	{"node-pool delete", args("kubernetes", "cluster", "node-pool", "delete", "fa-doctl", "workers", "--force"), nil},
	{"cluster get of an unknown id", args("kubernetes", "cluster", "get", "00000000-0000-4000-8000-000000000000", "-o", "json"), nil},
	{"node-pool create of a bad size", args("kubernetes", "cluster", "node-pool", "create", "fa-doctl", "--name", "bad", "--size", "s-99vcpu-1tb",
		"--count", "1", "-o", "json"), nil},
	{"cluster get-upgrades", args("kubernetes", "cluster", "get-upgrades", "fa-doctl", "-o", "json"), nil},
	{"cluster upgrade", args("kubernetes", "cluster", "upgrade", "fa-doctl", "--version", "1.35.1-do.0"), nil},
	{"cluster get while upgrading", args("kubernetes", "cluster", "get", "fa-doctl", "-o", "json"), nil},
	{"cluster update with a new name", args("kubernetes", "cluster", "update", "fa-doctl", "--cluster-name", "fa-renamed",
		"--update-kubeconfig=false", "-o", "json"), nil},
	{"cluster delete", args("kubernetes", "cluster", "delete", "fa-renamed", "--force", "--update-kubeconfig=false"), nil},
	{"cluster delete, the one made without waiting", args("kubernetes", "cluster", "delete", "fa-nowait", "--force", "--update-kubeconfig=false"), nil},
	{"cluster delete, the one made from a spec", args("kubernetes", "cluster", "delete", "fa-spec", "--force", "--update-kubeconfig=false"), nil},
	{"cluster list after the deletes", args("kubernetes", "cluster", "list", "-o", "json"), nil},
}

// TestRecord runs doctl through every flow against a fresh emulator behind
// a recording proxy and rewrites the transcript. It runs only with
// -record, since it needs a doctl binary (see docs/emulators.md).
func TestRecord(t *testing.T) {
	if !*record {
		t.Skip("records only with -record (needs doctl; the replay test runs without it)")
	}
	if _, err := os.Stat(*doctlBin); err != nil {
		t.Fatalf("no doctl at %s (-doctl): build it from doctl's vendored source, see docs/emulators.md: %v", *doctlBin, err)
	}
	emu := httptest.NewServer(emulator())
	defer emu.Close()
	p := &proxy{target: emu.URL}
	front := httptest.NewServer(p)
	defer front.Close()
	tmp := t.TempDir()
	cfg := filepath.Join(tmp, "config.yaml")
	if err := os.WriteFile(cfg, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "HOME="+tmp, "XDG_CONFIG_HOME="+tmp, "KUBECONFIG="+filepath.Join(tmp, "kubeconfig"))
	tr := doctl.Transcript{
		Client: "doctl", Version: "1.166.0", Source: "https://github.com/digitalocean/doctl (tag v1.166.0, built from its vendored source)",
		Licence: "Apache-2.0", Godo: "v1.202.0",
		Note: "Recorded by go test ./internal/providers/digitalocean/doemu/doctl -record against doemu. Tokens, CA data and " +
			"request ids are normalised; the emulator's ids and times repeat from run to run.",
	}
	s := &state{}
	for _, f := range flows {
		a := f.args(s)
		full := append([]string{"--api-url", front.URL, "--access-token", token, "--config", cfg, "--http-retry-max", "0"}, a...)
		ctx, cancel := contextWithTimeout(t, 60*time.Second)
		cmd := exec.CommandContext(ctx, *doctlBin, full...)
		cmd.Env = env
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		cancel()
		exit := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			exit = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		fl := doctl.Flow{Name: f.name, Args: append([]string{"doctl"}, a...), Exit: exit,
			Stderr: text(strings.ReplaceAll(errb.String(), tmp, "$TMP")), Exchanges: p.take()}
		fl.Stdout, fl.StdoutRaw = body(out.Bytes())
		t.Logf("%s: exit %d, %d requests", f.name, exit, len(fl.Exchanges))
		if f.after != nil {
			if err := f.after(s, out.Bytes()); err != nil {
				t.Fatalf("%s: %v (stderr %s)", f.name, err, errb.String())
			}
		}
		tr.Flows = append(tr.Flows, fl)
	}
	b, err := json.MarshalIndent(tr, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(transcript, append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}
