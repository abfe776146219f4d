package main

import (
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/metrics"
	"github.com/fleet-agent/fleet-agent/internal/providers/aws/eksemu"
	"github.com/fleet-agent/fleet-agent/internal/providers/digitalocean/doemu"
	"github.com/fleet-agent/fleet-agent/internal/providers/gcp/gkeemu"
	"github.com/fleet-agent/fleet-agent/internal/secrets"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/substrate"
)

// Each cloud end to end through fleet-agent: the reference's example
// document for the provider (with the credentials the example leaves out,
// as secret references, and one more flavor: a GPU one, Spot where the
// provider has Spot) is planned live against the provider's emulator,
// applied, and the substrate reconciler of `fleet-agent run` (the same
// constructor, over the adapters the binary opens from the config) brings
// the cluster and one node pool per flavor up; a document without the pool,
// applied with prune, tears it all down. Nothing here is a stub: the real SDK
// of each provider speaks to an HTTP emulator of the service.

// cloud is one provider's emulator, the config block that points the
// adapter at it, and the document.
type cloud struct {
	name    string
	block   string            // providers.<id>, YAML, indented under providers:
	secrets map[string]string // files of the secrets directory
	doc     []byte
	flavors []string
	// blocked are edits of doc (old, new) that a live plan must block,
	// with a word of the reason.
	blocked [][3]string
	// gone reports that the emulator holds nothing of ours.
	gone func() bool
}

// referenceWith reads a reference document and edits its first account's
// config and its pool's substrate flavors.
func referenceWith(t *testing.T, file string, acct map[string]any, extra map[string]any) ([]byte, []string) {
	t.Helper()
	raw, err := os.ReadFile(valid + file)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	cfg := doc["providerAccounts"].([]any)[0].(map[string]any)["config"].(map[string]any)
	for k, v := range acct {
		cfg[k] = v
	}
	sub := doc["pools"].([]any)[0].(map[string]any)["policy"].(map[string]any)["substrate"].(map[string]any)
	flavors := sub["flavors"].([]any)
	if extra != nil {
		flavors = append(flavors, extra)
		sub["flavors"] = flavors
	}
	var names []string
	for _, f := range flavors {
		names = append(names, f.(map[string]any)["name"].(string))
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return out, names
}

func eksCloud(t *testing.T) cloud {
	t.Helper()
	// The SDK signs on the wall clock; the emulator checks signatures on
	// its own, so both tell the same time.
	emu := eksemu.New(eksemu.Options{Clock: clock.Real{}, Subnets: []eksemu.Subnet{
		{ID: "subnet-0000000000000000a", Zone: "us-east-1a", VpcID: "vpc-00000000000000001", CIDR: "10.0.0.0/24"},
		{ID: "subnet-0000000000000000b", Zone: "us-east-1b", VpcID: "vpc-00000000000000001", CIDR: "10.0.1.0/24"},
	}})
	url := emu.Start()
	t.Cleanup(emu.Close)
	const id, secret = "AKIAE2ETESTKEY000001", "CANARYe2eSecretAccessKey0000000000000000"
	emu.AddUser(id, secret, "arn:aws:iam::111111111111:user/fleet-agent")
	doc, flavors := referenceWith(t, "kubernetes-pool-eks.json",
		map[string]any{"accessKeyId": "secret://aws-key-id", "secretAccessKey": "secret://aws-secret"},
		map[string]any{"name": "l4", "machineType": "g6.xlarge", "nodes": 1, "spot": true, "gpus": map[string]any{"type": "nvidia-l4", "count": 1}})
	return cloud{name: "aws", block: "aws:\n    endpoints: {eks: " + url + ", ec2: " + url + ", sts: " + url + ", autoscaling: " + url + "}\n",
		secrets: map[string]string{"aws-key-id": id, "aws-secret": secret}, doc: doc, flavors: flavors,
		blocked: [][3]string{{`"location": "us-east-1"`, `"location": "us-east-1a"`, "zone"}, {`"machineType": "p5.48xlarge"`, `"machineType": "p9.huge"`, "p9.huge"}},
		gone:    func() bool { return len(emu.ClusterNames()) == 0 }}
}

func gkeCloud(t *testing.T) cloud {
	t.Helper()
	emu, err := gkeemu.Start(gkeemu.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(emu.Close)
	key, err := emu.AddServiceAccount("fleet-agent@fa-emu-project.iam.gserviceaccount.com", "fa-emu-project")
	if err != nil {
		t.Fatal(err)
	}
	doc, flavors := referenceWith(t, "kubernetes-pool-gke.json",
		map[string]any{"projectId": "fa-emu-project", "credentials": "secret://gke-key"},
		map[string]any{"name": "l4", "machineType": "g2-standard-8", "nodes": 1, "spot": true, "zones": []any{"us-central1-a"},
			"gpus": map[string]any{"type": "nvidia-l4", "count": 1}})
	return cloud{name: "gcp", block: "gcp:\n    containerEndpoint: " + emu.ContainerEndpoint() + "\n    computeEndpoint: " + emu.ComputeEndpoint() + "\n",
		secrets: map[string]string{"gke-key": string(key)}, doc: doc, flavors: flavors,
		blocked: [][3]string{{`"machineType": "a3-highgpu-8g"`, `"machineType": "a3-nosuch-8g"`, "a3-nosuch-8g"}, {`"count": 8`, `"count": 4`, "8 x"}},
		gone:    func() bool { return len(emu.Snapshot().Clusters) == 0 }}
}

func doksCloud(t *testing.T) cloud {
	t.Helper()
	emu := doemu.New(doemu.Options{Accounts: []doemu.Account{{Token: doksToken, Team: "team-a", Email: "ops@example.com", Previews: true}}})
	srv := httptest.NewServer(emu)
	t.Cleanup(srv.Close)
	doc, flavors := referenceWith(t, "kubernetes-pool-doks.json", map[string]any{"allowSpot": true, "previews": true},
		map[string]any{"name": "l40s", "machineType": "gpu-l40sx1-48gb", "nodes": 1, "spot": true, "gpus": map[string]any{"type": "nvidia-l40s", "count": 1}})
	return cloud{name: "digitalocean", block: "digitalocean:\n    apiURL: " + srv.URL + "/\n",
		secrets: map[string]string{"root/do-api-token": doksToken}, doc: doc, flavors: flavors,
		blocked: [][3]string{{`"machineType": "gpu-h100x8-640gb",`, `"machineType": "gpu-h100x8-640gb", "zones": ["tor1-a"],`, "zones"}, {`"machineType": "gpu-h100x8-640gb",`, `"machineType": "gpu-h100x8-640gb", "diskGiB": 200,`, "disk"}},
		gone:    func() bool { return len(emu.Clusters()) == 0 }}
}

func TestEachCloudEndToEnd(t *testing.T) {
	for _, mk := range []func(*testing.T) cloud{eksCloud, gkeCloud, doksCloud} {
		c := mk(t)
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			sdir := filepath.Join(dir, "secrets")
			for name, v := range c.secrets {
				if err := os.MkdirAll(filepath.Dir(filepath.Join(sdir, name)), 0o700); err != nil {
					t.Fatal(err)
				}
				writeFile(t, sdir, name, v)
			}
			statePath := filepath.Join(dir, "fleet.db")
			cfgPath := writeFile(t, dir, "config.yaml", "state: "+statePath+"\nsecrets:\n  dir: "+sdir+"\nsubstrate:\n  every: 1s\nproviders:\n  "+c.block)
			docPath := writeFile(t, dir, "fleet.json", string(c.doc))
			env := map[string]string{}

			out, errs, code := cli(t, env, "plan", docPath, "--config", cfgPath)
			if code != 0 || strings.Contains(out, "not checked live") || !strings.Contains(out, "+ pool gpu-fleet") {
				t.Fatalf("plan: %d\n%s\n%s", code, out, errs)
			}
			for _, b := range c.blocked {
				if !strings.Contains(string(c.doc), b[0]) {
					t.Fatalf("the document has no %s to change", b[0])
				}
				bad := writeFile(t, dir, "blocked.json", strings.Replace(string(c.doc), b[0], b[1], 1))
				out, errs, code := cli(t, env, "plan", bad, "--config", cfgPath)
				if code != 1 || !strings.Contains(errs, "PLAN_BLOCKED") || !strings.Contains(out, "! pool gpu-fleet") || !strings.Contains(out, b[2]) {
					t.Errorf("%s: want a blocked plan naming %q: %d\n%s\n%s", b[1], b[2], code, out, errs)
				}
			}
			if out, errs, code := cli(t, env, "apply", docPath, "--config", cfgPath, "--yes"); code != 0 {
				t.Fatalf("apply: %d\n%s\n%s", code, out, errs)
			}
			reconcile(t, env, cfgPath, statePath, func(list []substrate.Status) bool {
				if len(list) != 1 || !list[0].Converged || list[0].State != "creating" {
					return false
				}
				var got []string
				for _, np := range list[0].NodePools {
					if np.Status != "running" {
						return false
					}
					got = append(got, np.Flavor)
				}
				return slices.Equal(got, c.flavors)
			})
			out, _, _ = cli(t, env, "substrates", "--config", cfgPath)
			t.Logf("%s substrates:\n%s", c.name, out)
			for name, v := range c.secrets {
				if strings.Contains(out, v) {
					t.Fatalf("the secret %s reached the output", name)
				}
			}

			// The same document without its pool (the site and the account
			// stay): with prune, the pool is archived and its substrate torn
			// down.
			var without map[string]any
			if err := json.Unmarshal(c.doc, &without); err != nil {
				t.Fatal(err)
			}
			without["pools"] = []any{}
			raw, _ := json.Marshal(without)
			empty := writeFile(t, dir, "without-pool.json", string(raw))
			if out, errs, code := cli(t, env, "apply", empty, "--config", cfgPath, "--prune", "--yes"); code != 0 {
				t.Fatalf("apply of the teardown: %d\n%s\n%s", code, out, errs)
			}
			reconcile(t, env, cfgPath, statePath, func(list []substrate.Status) bool {
				return len(list) == 1 && list[0].State == "deleted" && list[0].Converged
			})
			if !c.gone() {
				t.Fatal("the teardown left a cluster at the emulator")
			}
			data, err := os.ReadFile(statePath)
			if err != nil {
				t.Fatal(err)
			}
			for name, v := range c.secrets {
				if strings.Contains(string(data), v) {
					t.Fatalf("the secret %s reached the state file", name)
				}
			}
		})
	}
}

// reconcile runs the reconciler `fleet-agent run` makes, over the adapters
// it opens from the config, on an injected clock, until done says the
// substrates are where the test wants them (at most 600 passes).
func reconcile(t *testing.T, env map[string]string, cfgPath, statePath string, done func([]substrate.Status) bool) {
	t.Helper()
	a := &app{lookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }, configPath: cfgPath}
	cfg, err := a.loadConfig()
	if err != nil {
		t.Fatal(err)
	}
	resolver := secrets.NewResolver(secrets.Options{Env: a.lookupEnv, Dir: cfg.Secrets.Dir})
	opened, err := a.adapters(cfg, resolver)
	if err != nil {
		t.Fatal(err)
	}
	store, err := state.Open(statePath, state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	var logs strings.Builder
	opts := reconcilerOptions(store, opened, cfg, zerolog.New(&logs), metrics.New(nil), nil)
	clk := clock.NewFake(time.Now())
	opts.Clock = clk
	rec := substrate.New(opts)
	for i := range 600 {
		if err := rec.ReconcileOnce(t.Context()); err != nil {
			t.Fatalf("pass %d: %v", i, err)
		}
		list, err := substrate.Statuses(store)
		if err != nil {
			t.Fatal(err)
		}
		if done(list) {
			return
		}
		clk.Advance(10 * time.Second)
	}
	list, _ := substrate.Statuses(store)
	t.Fatalf("not there after 600 passes: %+v\n%s", list, logs.String())
}
