package clients

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/providers/gcp/gkeemu"
	"github.com/fleet-agent/fleet-agent/internal/providers/gcp/gkeemu/wirecheck"
)

const (
	project = "fa-emu-project"
	account = "fleet-agent@fa-emu-project.iam.gserviceaccount.com"
	zone    = "us-central1-a"
)

const installGcloud = `gcloud is not installed. Install Google's google-cloud-cli (the suite was written against 528):
  apt-get install -y apt-transport-https ca-certificates gnupg curl
  curl -fsSL https://packages.cloud.google.com/apt/doc/apt-key.gpg | gpg --dearmor -o /usr/share/keyrings/cloud.google.gpg
  echo "deb [signed-by=/usr/share/keyrings/cloud.google.gpg] https://packages.cloud.google.com/apt cloud-sdk main" > /etc/apt/sources.list.d/google-cloud-sdk.list
  apt-get update && apt-get install -y google-cloud-cli
or point FLEET_GCLOUD at a gcloud binary.`

// findGcloud is FLEET_GCLOUD, else gcloud on PATH; without one the suite
// fails (it never skips).
func findGcloud(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("FLEET_GCLOUD"); p != "" {
		return p
	}
	p, err := exec.LookPath("gcloud")
	if err != nil {
		t.Fatal(installGcloud)
	}
	return p
}

// gcloud runs one gcloud against one emulator, in a configuration directory,
// HOME and kubeconfig of the test's own.
type gcloud struct {
	t   *testing.T
	bin string
	env []string
	ran []string
}

func newGcloud(t *testing.T, emu *gkeemu.Emulator) *gcloud {
	dir := t.TempDir()
	return &gcloud{t: t, bin: findGcloud(t), env: []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + dir,
		"KUBECONFIG=" + filepath.Join(dir, "kubeconfig"),
		"CLOUDSDK_CONFIG=" + filepath.Join(dir, "gcloud"),
		"CLOUDSDK_CORE_PROJECT=" + project,
		"CLOUDSDK_CORE_DISABLE_PROMPTS=1",
		"CLOUDSDK_CORE_DISABLE_USAGE_REPORTING=1",
		"CLOUDSDK_COMPONENT_MANAGER_DISABLE_UPDATE_CHECK=1",
		// gcloud's documented endpoint overrides: the token endpoint
		// (auth/token_host), Kubernetes Engine, and Service Usage, which
		// clusters create asks whether the API is enabled.
		"CLOUDSDK_AUTH_TOKEN_HOST=" + emu.TokenURI(),
		"CLOUDSDK_API_ENDPOINT_OVERRIDES_CONTAINER=" + emu.ContainerEndpoint(),
		"CLOUDSDK_API_ENDPOINT_OVERRIDES_SERVICEUSAGE=" + emu.ServiceUsageEndpoint(),
	}}
}

// run runs gcloud with args and returns its stdout, stderr and exit code.
func (g *gcloud) run(args ...string) (string, string, int) {
	g.t.Helper()
	ctx, cancel := context.WithTimeout(g.t.Context(), 120*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, g.bin, args...)
	cmd.Env = g.env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok || ctx.Err() != nil {
			g.t.Fatalf("gcloud %s: %v (%v)\n%s", strings.Join(args, " "), err, ctx.Err(), errb.String())
		}
		code = ee.ExitCode()
	}
	g.ran = append(g.ran, strings.Join(args[:min(3, len(args))], " "))
	return out.String(), errb.String(), code
}

// json runs a container command with --format=json, which must succeed,
// and decodes what gcloud printed.
func (g *gcloud) json(args ...string) any {
	g.t.Helper()
	out, errs, code := g.run(append(args, "--format=json")...)
	if code != 0 {
		g.t.Fatalf("gcloud %s: exit %d\n%s", strings.Join(args, " "), code, errs)
	}
	var v any
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		g.t.Fatalf("gcloud %s printed no JSON: %v\n%s\n%s", strings.Join(args, " "), err, out, errs)
	}
	return v
}

// fails runs a command that must fail, with stderr holding every want.
func (g *gcloud) fails(args []string, want ...string) {
	g.t.Helper()
	_, errs, code := g.run(append(args, "--format=json")...)
	if code == 0 {
		g.t.Fatalf("gcloud %s succeeded; want a failure with %q", strings.Join(args, " "), want)
	}
	for _, w := range want {
		if !strings.Contains(errs, w) {
			g.t.Errorf("gcloud %s: stderr lacks %q:\n%s", strings.Join(args, " "), w, errs)
		}
	}
}

func dig(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			l, _ := v.([]any)
			if k < 0 || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

func js(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// want checks values gcloud parsed, as JSON.
func want(t *testing.T, what string, v any, checks map[string]string, paths map[string][]any) {
	t.Helper()
	for _, name := range slices.Sorted(maps.Keys(checks)) {
		if got := js(dig(v, paths[name]...)); got != checks[name] {
			t.Errorf("%s: %s = %s, want %s", what, name, got, checks[name])
		}
	}
}

func names(v any) []string {
	var out []string
	l, _ := v.([]any)
	for _, el := range l {
		n, _ := dig(el, "name").(string)
		out = append(out, n)
	}
	return out
}

// TestGcloud runs gcloud's cluster, node pool and operation flows against
// the emulator: activate a service account key whose token_uri is the
// emulator's, create a zonal cluster (asynchronously, then waiting on its
// operation), list, describe, resize, node pool create/list/describe/delete,
// the errors of a missing cluster, a duplicate pool and a documented field
// the emulator does not model, and delete.
func TestGcloud(t *testing.T) {
	opts := gkeemu.DefaultOptions()
	// Two observations per create: gcloud's --async create answers while
	// PROVISIONING, its first poll sees it DONE.
	opts.Steps = gkeemu.Steps{Cluster: 2, NodePool: 1, Update: 1, Delete: 1}
	emu, err := gkeemu.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(emu.Close)
	wirecheck.Register(t, emu)
	key, err := emu.AddServiceAccount(account, project)
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(t.TempDir(), "key.json")
	if err := os.WriteFile(keyFile, key, 0o600); err != nil {
		t.Fatal(err)
	}
	g := newGcloud(t, emu)
	if out, _, _ := g.run("version"); !strings.Contains(out, "Google Cloud SDK") {
		t.Fatalf("gcloud version: %q", out)
	}
	_, errs, code := g.run("auth", "activate-service-account", "--key-file", keyFile)
	if code != 0 || !strings.Contains(errs, "Activated service account credentials for: ["+account+"]") {
		t.Fatalf("activate-service-account: exit %d\n%s", code, errs)
	}
	z := "--zone=" + zone

	// create, asynchronously: gcloud prints the cluster it reads back.
	c := g.json("container", "clusters", "create", "c1", z, "--num-nodes=1", "--async")
	want(t, "create --async", c,
		map[string]string{"name": `"c1"`, "status": `"PROVISIONING"`, "pool": `"default-pool"`, "autoRepair": `true`},
		map[string][]any{"name": {"name"}, "status": {"status"}, "pool": {"nodePools", 0, "name"}, "autoRepair": {"nodePools", 0, "management", "autoRepair"}})

	ops := g.json("container", "operations", "list", z)
	if l, _ := ops.([]any); len(l) != 1 || dig(l, 0, "operationType") != "CREATE_CLUSTER" {
		t.Fatalf("operations list: %s", js(ops))
	}
	op, _ := dig(ops, 0, "name").(string)
	d := g.json("container", "operations", "describe", op, z)
	want(t, "operations describe", d, map[string]string{"type": `"CREATE_CLUSTER"`, "target": `"https://container.googleapis.com/v1/projects/314159265358/zones/us-central1-a/clusters/c1"`},
		map[string][]any{"type": {"operationType"}, "target": {"targetLink"}})
	w := g.json("container", "operations", "wait", op, z)
	want(t, "operations wait", w, map[string]string{"status": `"DONE"`}, map[string][]any{"status": {"status"}})

	l := g.json("container", "clusters", "list", z)
	if got := names(l); !slices.Equal(got, []string{"c1"}) || dig(l, 0, "status") != "RUNNING" {
		t.Fatalf("clusters list: %s", js(l))
	}
	c = g.json("container", "clusters", "describe", "c1", z)
	want(t, "describe", c, map[string]string{
		"status": `"RUNNING"`, "nodes": `1`, "surge": `1`, "logging": `"logging.googleapis.com/kubernetes"`,
		"scope": `"https://www.googleapis.com/auth/devstorage.read_only"`, "location": `"us-central1-a"`,
	}, map[string][]any{
		"status": {"status"}, "nodes": {"currentNodeCount"}, "surge": {"nodePools", 0, "upgradeSettings", "maxSurge"},
		"logging": {"loggingService"}, "scope": {"nodePools", 0, "config", "oauthScopes", 0}, "location": {"location"},
	})
	if e, _ := c.(map[string]any)["endpoint"].(string); e == "" {
		t.Errorf("describe: no endpoint: %s", js(c))
	}

	// resize prints nothing; the cluster shows it.
	g.json("container", "clusters", "resize", "c1", z, "--node-pool=default-pool", "--num-nodes=3")
	c = g.json("container", "clusters", "describe", "c1", z)
	want(t, "describe after resize", c, map[string]string{"nodes": `3`}, map[string][]any{"nodes": {"currentNodeCount"}})

	// node pools.
	p := g.json("container", "node-pools", "create", "p2", "--cluster=c1", z, "--num-nodes=2", "--machine-type=e2-standard-4", "--node-labels=team=ml")
	want(t, "node-pools create", p, map[string]string{"name": `"p2"`, "type": `"e2-standard-4"`},
		map[string][]any{"name": {0, "name"}, "type": {0, "config", "machineType"}})
	if got := names(g.json("container", "node-pools", "list", "--cluster=c1", z)); !slices.Equal(got, []string{"default-pool", "p2"}) {
		t.Errorf("node-pools list: %v", got)
	}
	p = g.json("container", "node-pools", "describe", "p2", "--cluster=c1", z)
	want(t, "node-pools describe", p, map[string]string{"status": `"RUNNING"`, "labels": `{"team":"ml"}`, "count": `2`},
		map[string][]any{"status": {"status"}, "labels": {"config", "labels"}, "count": {"initialNodeCount"}})

	// errors, as gcloud shows them.
	g.fails([]string{"container", "clusters", "describe", "nope", z}, "code=404", "Not found: projects/"+project+"/locations/"+zone+"/clusters/nope")
	g.fails([]string{"container", "node-pools", "create", "p2", "--cluster=c1", z, "--num-nodes=1"}, "code=409", "Already exists")
	g.fails([]string{"container", "node-pools", "create", "p3", "--cluster=c1", z, "--num-nodes=1", "--local-ssd-count=1"}, "code=400", "'node_pool.config.local_ssd_count'")

	// upgrades: the master one minor, never down; a pool's nodes never
	// past the master, then to it (gcloud's upgrade without --master sends
	// clusters.update with desiredNodeVersion). gcloud waits on each
	// operation.
	g.fails([]string{"container", "clusters", "upgrade", "c1", z, "--node-pool=p2", "--cluster-version=1.35"}, "code=400", "must not be newer than the master version 1.34.3-gke.1100000")
	g.fails([]string{"container", "clusters", "upgrade", "c1", z, "--master", "--cluster-version=1.33"}, "code=400", "Master cannot be downgraded")
	if _, errs, code := g.run("container", "clusters", "upgrade", "c1", z, "--master", "--cluster-version=1.35"); code != 0 {
		t.Fatalf("clusters upgrade --master: exit %d\n%s", code, errs)
	}
	c = g.json("container", "clusters", "describe", "c1", z)
	want(t, "describe after the master upgrade", c, map[string]string{"master": `"1.35.1-gke.1200000"`, "p2": `"1.34.3-gke.1100000"`},
		map[string][]any{"master": {"currentMasterVersion"}, "p2": {"nodePools", 1, "version"}})
	if _, errs, code := g.run("container", "clusters", "upgrade", "c1", z, "--node-pool=p2", "--cluster-version=1.35"); code != 0 {
		t.Fatalf("clusters upgrade --node-pool: exit %d\n%s", code, errs)
	}
	p = g.json("container", "node-pools", "describe", "p2", "--cluster=c1", z)
	want(t, "node-pools describe after the upgrade", p, map[string]string{"version": `"1.35.1-gke.1200000"`, "status": `"RUNNING"`},
		map[string][]any{"version": {"version"}, "status": {"status"}})
	ups := 0
	for _, x := range g.json("container", "operations", "list", z).([]any) {
		if ty, _ := x.(map[string]any)["operationType"].(string); ty == "UPGRADE_MASTER" || ty == "UPGRADE_NODES" {
			ups++
		}
	}
	if ups != 2 {
		t.Errorf("operations list shows %d upgrades, want 2", ups)
	}

	g.json("container", "node-pools", "delete", "p2", "--cluster=c1", z)
	if got := names(g.json("container", "node-pools", "list", "--cluster=c1", z)); !slices.Equal(got, []string{"default-pool"}) {
		t.Errorf("node-pools list after delete: %v", got)
	}
	g.json("container", "clusters", "delete", "c1", z)
	if got := names(g.json("container", "clusters", "list", z)); len(got) != 0 {
		t.Errorf("clusters list after delete: %v", got)
	}

	counts := map[string]int{}
	for _, x := range emu.Exchanges() {
		counts[x.MethodID]++
		if x.MethodID == "oauth2.token" && x.Status != 200 {
			t.Errorf("the token endpoint refused gcloud: %d %s", x.Status, x.Body)
		}
	}
	var summary []string
	for _, id := range slices.Sorted(maps.Keys(counts)) {
		summary = append(summary, fmt.Sprintf("%s×%d", strings.TrimPrefix(id, "container.projects."), counts[id]))
	}
	t.Logf("gcloud ran: %s", strings.Join(g.ran, "; "))
	t.Logf("emulator served: %s", strings.Join(summary, " "))
	for _, id := range []string{"oauth2.token", "serviceusage.services.get", "container.projects.locations.clusters.create",
		"container.projects.locations.clusters.nodePools.setSize", "container.projects.locations.clusters.nodePools.create",
		"container.projects.locations.operations.get", "container.projects.locations.clusters.delete"} {
		if counts[id] == 0 {
			t.Errorf("gcloud never reached %s", id)
		}
	}
}
