package doemu_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/digitalocean/godo"

	"github.com/fleet-agent/fleet-agent/internal/providers/digitalocean/doemu"
	"github.com/fleet-agent/fleet-agent/internal/providers/digitalocean/doemu/wirecheck"
)

func TestClusterLifecycle(t *testing.T) {
	w := newWorld(t, doemu.Options{}, wireAll)
	ctx := t.Context()
	c, resp, err := w.do.Kubernetes.Create(ctx, basicCreate("fa-life"))
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if resp.StatusCode != http.StatusCreated || c.Status.State != godo.KubernetesClusterStatusProvisioning || c.Endpoint != "" {
		t.Fatalf("create answered %d %+v endpoint %q", resp.StatusCode, c.Status, c.Endpoint)
	}
	if !slices.Contains(c.Tags, "k8s") || !slices.Contains(c.Tags, "k8s:"+c.ID) || c.VersionSlug != "1.34.2-do.1" {
		t.Errorf("tags %v version %s: want the automatic tags and the newest 1.34", c.Tags, c.VersionSlug)
	}
	// DefaultSteps: three reads to run; nodes two.
	var states []godo.KubernetesClusterStatusState
	for range 3 {
		got, _, err := w.do.Kubernetes.Get(ctx, c.ID)
		if err != nil {
			t.Fatal(err)
		}
		states = append(states, got.Status.State)
		c = got
	}
	if !slices.Equal(states, []godo.KubernetesClusterStatusState{"provisioning", "provisioning", "running"}) {
		t.Fatalf("states %v", states)
	}
	if c.Endpoint == "" || c.NodePools[0].Nodes[0].Status.State != "running" || !strings.HasPrefix(c.NodePools[0].Nodes[0].Name, "default-") {
		t.Fatalf("running cluster: endpoint %q nodes %+v", c.Endpoint, c.NodePools[0].Nodes[0])
	}
	list, _, err := w.do.Kubernetes.List(ctx, &godo.ListOptions{PerPage: 200})
	if err != nil || len(list) != 1 || list[0].ID != c.ID {
		t.Fatalf("List: %v %+v", err, list)
	}
	if resp, err := w.do.Kubernetes.Delete(ctx, c.ID); err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := w.do.Kubernetes.Delete(ctx, c.ID); err != nil {
		t.Fatalf("Delete again while deleting: %v", err)
	}
	got, _, err := w.do.Kubernetes.Get(ctx, c.ID)
	if err != nil || got.Status.State != godo.KubernetesClusterStatusDeleted {
		t.Fatalf("after delete: %v %+v", err, got)
	}
	if _, _, err := w.do.Kubernetes.Get(ctx, c.ID); status(err) != http.StatusNotFound {
		t.Fatalf("a deleted cluster: want 404, got %v", err)
	}
	if _, err := w.do.Kubernetes.Delete(ctx, c.ID); status(err) != http.StatusNotFound {
		t.Fatalf("deleting a gone cluster: want 404, got %v", err)
	}
}

func TestClockDrivesOperations(t *testing.T) {
	w := newWorld(t, doemu.Options{Steps: doemu.Steps{Cluster: 1000, Node: 1000, Upgrade: 1000, Delete: 1000, Drain: 1000}, StepEvery: 10 * time.Second}, wireAll)
	ctx := t.Context()
	c, _, err := w.do.Kubernetes.Create(ctx, basicCreate("fa-clock"))
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		got, _, _ := w.do.Kubernetes.Get(ctx, c.ID)
		if got.Status.State != godo.KubernetesClusterStatusProvisioning {
			t.Fatalf("reads alone finished a 1000-step create: %+v", got.Status)
		}
	}
	w.clk.Advance(1000 * 10 * time.Second)
	got, _, _ := w.do.Kubernetes.Get(ctx, c.ID)
	if got.Status.State != godo.KubernetesClusterStatusRunning {
		t.Fatalf("after the clock moved: %+v", got.Status)
	}
}

func TestErrorsHaveTheServiceShape(t *testing.T) {
	w := newWorld(t, doemu.Options{}, wireAll)
	ctx := t.Context()
	provisioning, _, err := w.do.Kubernetes.Create(ctx, basicCreate("fa-busy"))
	if err != nil {
		t.Fatal(err)
	}
	bad := func(mut func(*godo.KubernetesClusterCreateRequest)) *godo.KubernetesClusterCreateRequest {
		r := basicCreate("fa-bad")
		mut(r)
		return r
	}
	cases := []struct {
		name   string
		call   func() error
		status int
		id     string
	}{
		{"bad token", func() error {
			_, _, err := client(t, w.srv.URL, "dop_v1_nobody").Account.Get(ctx)
			return err
		}, 401, "unauthorized"},
		{"missing cluster", func() error {
			_, _, err := w.do.Kubernetes.Get(ctx, "00000000-0000-4000-8000-000000000000")
			return err
		}, 404, "not_found"},
		{"unknown region", func() error {
			_, _, err := w.do.Kubernetes.Create(ctx, bad(func(r *godo.KubernetesClusterCreateRequest) { r.RegionSlug = "mars1" }))
			return err
		}, 422, "unprocessable_entity"},
		{"unknown version", func() error {
			_, _, err := w.do.Kubernetes.Create(ctx, bad(func(r *godo.KubernetesClusterCreateRequest) { r.VersionSlug = "1.20" }))
			return err
		}, 422, "unprocessable_entity"},
		{"size not in the region", func() error {
			_, _, err := w.do.Kubernetes.Create(ctx, bad(func(r *godo.KubernetesClusterCreateRequest) {
				r.RegionSlug = "ams3"
				r.NodePools[0].Size = "gpu-h100x8-640gb"
			}))
			return err
		}, 422, "unprocessable_entity"},
		{"name too long", func() error {
			_, _, err := w.do.Kubernetes.Create(ctx, bad(func(r *godo.KubernetesClusterCreateRequest) { r.Name = strings.Repeat("a", 64) }))
			return err
		}, 422, "unprocessable_entity"},
		{"upper-case name", func() error {
			_, _, err := w.do.Kubernetes.Create(ctx, bad(func(r *godo.KubernetesClusterCreateRequest) { r.Name = "Prod" }))
			return err
		}, 422, "unprocessable_entity"},
		{"tag with a slash", func() error {
			_, _, err := w.do.Kubernetes.Create(ctx, bad(func(r *godo.KubernetesClusterCreateRequest) { r.Tags = []string{"fleet-agent.dev/pool"} }))
			return err
		}, 422, "unprocessable_entity"},
		{"duplicate name", func() error {
			_, _, err := w.do.Kubernetes.Create(ctx, basicCreate("fa-busy"))
			return err
		}, 422, "unprocessable_entity"},
		{"pool on a provisioning cluster", func() error {
			_, _, err := w.do.Kubernetes.CreateNodePool(ctx, provisioning.ID, &godo.KubernetesNodePoolCreateRequest{Name: "more", Size: "s-1vcpu-2gb", Count: 1})
			return err
		}, 409, "conflict"},
		{"read-only token", func() error {
			_, _, err := client(t, w.srv.URL, roToken).Kubernetes.Create(ctx, basicCreate("fa-ro"))
			return err
		}, 403, "forbidden"},
		{"unknown route", func() error {
			req, _ := w.do.NewRequest(ctx, http.MethodGet, "v2/kubernetes/nothing/here/at/all", nil)
			_, err := w.do.Do(ctx, req, nil)
			return err
		}, 404, "not_found"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var err error
			w.badRequests(func() { err = c.call() })
			var er *godo.ErrorResponse
			if !asErr(err, &er) || er.Response.StatusCode != c.status {
				t.Fatalf("want a %d godo.ErrorResponse, got %v", c.status, err)
			}
			var body struct{ ID, Message, RequestID string }
			last := w.emu.Exchanges()[len(w.emu.Exchanges())-1]
			if err := json.Unmarshal(last.RespBody, &body); err != nil || body.ID != c.id || body.Message == "" || er.RequestID == "" {
				t.Errorf("error body %s (request id %q), want id %s", last.RespBody, er.RequestID, c.id)
			}
		})
	}
}

func TestDuplicateNamesWhenAllowed(t *testing.T) {
	w := newWorld(t, doemu.Options{AllowDuplicateNames: true}, wireAll)
	for range 2 {
		if _, _, err := w.do.Kubernetes.Create(t.Context(), basicCreate("fa-twice")); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(w.emu.Clusters()); n != 2 {
		t.Fatalf("%d clusters", n)
	}
}

func TestRateLimits(t *testing.T) {
	w := newWorld(t, doemu.Options{RatePerMinute: 3}, wireAll)
	ctx := t.Context()
	for i := range 3 {
		_, resp, err := w.do.Account.Get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Rate.Limit != 5000 || resp.Rate.Remaining != 5000-(i+1) || resp.Rate.Reset.Unix() != epoch.Add(time.Hour).Unix() {
			t.Errorf("rate %+v after %d requests", resp.Rate, i+1)
		}
	}
	w.clk.Advance(20 * time.Second)
	_, _, err := w.do.Account.Get(ctx)
	var er *godo.ErrorResponse
	if !asErr(err, &er) || er.Response.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("the fourth request in a minute: want 429, got %v", err)
	}
	if ra := er.Response.Header.Get("Retry-After"); ra != "40" {
		t.Errorf("Retry-After %q, want 40", ra)
	}
	if er.Response.Header.Get("RateLimit-Reset") == "" {
		t.Error("a 429 without RateLimit-Reset")
	}
	w.clk.Advance(41 * time.Second)
	if _, _, err := w.do.Account.Get(ctx); err != nil {
		t.Fatalf("after the minute: %v", err)
	}
	// The refused request did not count: 4 of the hour's 5000 are used.
	if _, resp, _ := w.do.Account.Get(ctx); resp.Rate.Remaining != 5000-5 {
		t.Errorf("remaining %d", resp.Rate.Remaining)
	}
}

func TestRetryAfterCanBeLeftOut(t *testing.T) {
	w := newWorld(t, doemu.Options{RatePerMinute: 1, NoRetryAfter: true}, wireAll)
	_, _, _ = w.do.Account.Get(t.Context())
	_, _, err := w.do.Account.Get(t.Context())
	var er *godo.ErrorResponse
	if !asErr(err, &er) || er.Response.StatusCode != 429 || er.Response.Header.Get("Retry-After") != "" || er.Response.Header.Get("RateLimit-Reset") == "" {
		t.Fatalf("want a 429 with only the RateLimit headers, got %v", err)
	}
}

func TestFaults(t *testing.T) {
	w := newWorld(t, doemu.Options{}, wireAll)
	ctx := t.Context()
	w.emu.Inject(doemu.Fault{Route: "GET /v2/account", Status: 503})
	if _, _, err := w.do.Account.Get(ctx); status(err) != 503 {
		t.Fatalf("want 503, got %v", err)
	}
	if _, _, err := w.do.Account.Get(ctx); err != nil {
		t.Fatalf("the fault fired twice: %v", err)
	}
	w.emu.Inject(doemu.Fault{Route: "POST /v2/kubernetes/clusters", Drop: true})
	_, _, err := w.do.Kubernetes.Create(ctx, basicCreate("fa-dropped"))
	if err == nil || status(err) != 0 {
		t.Fatalf("a dropped answer: want a transport error, got %v", err)
	}
	if cs := w.emu.Clusters(); len(cs) != 1 || cs[0].Name != "fa-dropped" {
		t.Fatalf("the dropped create did not act: %+v", cs)
	}
	if x := w.emu.Exchanges(); !x[len(x)-1].Dropped {
		t.Error("the exchange is not marked dropped")
	}
	w.emu.Inject(doemu.Fault{Status: 429, RetryAfter: 7 * time.Second})
	_, _, err = w.do.Sizes.List(ctx, nil)
	var er *godo.ErrorResponse
	if !asErr(err, &er) || er.Response.Header.Get("Retry-After") != "7" {
		t.Fatalf("an injected 429: %v", err)
	}
}

func TestQuotaAndStockout(t *testing.T) {
	w := newWorld(t, doemu.Options{Accounts: []doemu.Account{{Token: token, Team: "t", Email: "a@example.com", DropletLimit: 3}}}, wireAll)
	ctx := t.Context()
	c := w.running(t, "fa-quota")
	_, _, err := w.do.Kubernetes.CreateNodePool(ctx, c.ID, &godo.KubernetesNodePoolCreateRequest{Name: "big", Size: "s-1vcpu-2gb", Count: 3})
	var er *godo.ErrorResponse
	if !asErr(err, &er) || er.Response.StatusCode != 422 || !strings.Contains(er.Message, "droplet limit") {
		t.Fatalf("over the droplet limit: %v", err)
	}
	w.emu.Stockout("gpu-h100x8-640gb", "tor1", true)
	_, _, err = w.do.Kubernetes.CreateNodePool(ctx, c.ID, &godo.KubernetesNodePoolCreateRequest{Name: "gpu", Size: "gpu-h100x8-640gb", Count: 1})
	if !asErr(err, &er) || er.Response.StatusCode != 422 || !strings.Contains(er.Message, "capacity") {
		t.Fatalf("a stockout: %v", err)
	}
	w.emu.Stockout("gpu-h100x8-640gb", "tor1", false)
	if _, _, err := w.do.Kubernetes.CreateNodePool(ctx, c.ID, &godo.KubernetesNodePoolCreateRequest{Name: "gpu", Size: "gpu-h100x8-640gb", Count: 1}); err != nil {
		t.Fatalf("after the stockout: %v", err)
	}
}

func TestNodePools(t *testing.T) {
	w := newWorld(t, doemu.Options{}, wireAll)
	ctx := t.Context()
	c := w.running(t, "fa-pools")
	p, resp, err := w.do.Kubernetes.CreateNodePool(ctx, c.ID, &godo.KubernetesNodePoolCreateRequest{
		Name: "gpu", Size: "gpu-h100x8-640gb", Count: 2, Labels: map[string]string{"fleet-agent.dev/substrate-pool": "pool_x"},
		Tags: []string{"fleet-agent", "fleet-agent:substrate-pool:pool_x"},
	})
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("CreateNodePool: %v", err)
	}
	if len(p.Nodes) != 2 || p.Nodes[0].Status.State != "provisioning" || !slices.Contains(p.Tags, "k8s-worker") {
		t.Fatalf("new pool %+v", p)
	}
	for range 2 {
		p, _, _ = w.do.Kubernetes.GetNodePool(ctx, c.ID, p.ID)
	}
	if p.Nodes[0].Status.State != "running" || p.Nodes[1].Status.State != "running" {
		t.Fatalf("nodes after two reads: %+v %+v", p.Nodes[0].Status, p.Nodes[1].Status)
	}
	one := 1
	p, resp, err = w.do.Kubernetes.UpdateNodePool(ctx, c.ID, p.ID, &godo.KubernetesNodePoolUpdateRequest{Name: "gpu", Count: &one})
	if err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("UpdateNodePool: %v", err)
	}
	if p.Count != 1 || len(p.Nodes) != 2 || p.Nodes[1].Status.State != "draining" || p.Labels["fleet-agent.dev/substrate-pool"] != "pool_x" {
		t.Fatalf("after scaling down: %+v", p)
	}
	pools, _, err := w.do.Kubernetes.ListNodePools(ctx, c.ID, nil)
	if err != nil || len(pools) != 2 || len(pools[1].Nodes) != 1 {
		t.Fatalf("after the drain: %v %+v", err, pools)
	}
	// The description requires name and count on a PUT; godo and doctl
	// leave them out when unset, and the pool keeps them.
	if kept, _, err := w.do.Kubernetes.UpdateNodePool(ctx, c.ID, p.ID, &godo.KubernetesNodePoolUpdateRequest{Name: "gpu"}); err != nil {
		t.Errorf("a PUT without count: %v", err)
	} else if kept.Count != 1 {
		t.Errorf("a PUT without count made the count %d, want it kept (1)", kept.Count)
	}
	// A fixed-size pool has at least one node.
	zero := 0
	if _, _, err := w.do.Kubernetes.UpdateNodePool(ctx, c.ID, p.ID, &godo.KubernetesNodePoolUpdateRequest{Name: "gpu", Count: &zero}); status(err) != 422 {
		t.Errorf("a fixed pool to 0: %v", err)
	}
	// Autoscaled from zero, sent as the adapter sends it (godo's create
	// request drops a count of 0).
	req, _ := w.do.NewRequest(ctx, http.MethodPost, "v2/kubernetes/clusters/"+c.ID+"/node_pools", map[string]any{
		"name": "auto", "size": "s-1vcpu-2gb", "count": 0, "auto_scale": true, "min_nodes": 0, "max_nodes": 2,
	})
	var root struct {
		NodePool godo.KubernetesNodePool `json:"node_pool"`
	}
	if _, err := w.do.Do(ctx, req, &root); err != nil || root.NodePool.Count != 0 || !root.NodePool.AutoScale || root.NodePool.MaxNodes != 2 {
		t.Fatalf("an autoscaled pool from 0: %v %+v", err, root.NodePool)
	}
	if _, err := w.do.Kubernetes.DeleteNodePool(ctx, c.ID, p.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := w.do.Kubernetes.DeleteNodePool(ctx, c.ID, p.ID); err != nil {
		t.Fatalf("deleting a pool being deleted: %v", err)
	}
	for range 3 {
		_, _, err = w.do.Kubernetes.GetNodePool(ctx, c.ID, p.ID)
	}
	if status(err) != 404 {
		t.Fatalf("a deleted pool: want 404, got %v", err)
	}
	if _, err := w.do.Kubernetes.DeleteNodePool(ctx, c.ID, root.NodePool.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := w.do.Kubernetes.DeleteNodePool(ctx, c.ID, c.NodePools[0].ID); status(err) != 422 {
		t.Fatalf("deleting the last pool: want 422, got %v", err)
	}
}

// godo sends taints with capitalised keys (godo.Taint has no JSON tags),
// which the description does not declare; the service (and the emulator)
// takes them, and answers in lower case.
func TestTaintsInEitherCase(t *testing.T) {
	w := newWorld(t, doemu.Options{}, wireAll)
	c := w.running(t, "fa-taints")
	p, _, err := w.do.Kubernetes.CreateNodePool(t.Context(), c.ID, &godo.KubernetesNodePoolCreateRequest{
		Name: "gpu", Size: "gpu-h100x1-80gb", Count: 1, Taints: []godo.Taint{{Key: "nvidia.com/gpu", Value: "true", Effect: "NoSchedule"}},
	})
	if err != nil || len(p.Taints) != 1 || p.Taints[0].Key != "nvidia.com/gpu" {
		t.Fatalf("%v %+v", err, p)
	}
	x := w.emu.Exchanges()
	last := x[len(x)-1]
	if !bytes.Contains(last.Body, []byte(`"Key":"nvidia.com/gpu"`)) || !bytes.Contains(last.RespBody, []byte(`"key":"nvidia.com/gpu"`)) {
		t.Errorf("sent %s, answered %s", last.Body, last.RespBody)
	}
	// The wire check takes godo's capitalised keys in a request, as the
	// service does, and holds answers to lower case.
	checker, err := wirecheck.Shared()
	if err != nil {
		t.Fatal(err)
	}
	if errs := checker.Check(last); len(errs) != 0 {
		t.Errorf("the wire check refused godo's taint keys: %v", errs)
	}
	capital := last
	capital.RespBody = bytes.Replace(bytes.Clone(last.RespBody), []byte(`"key":`), []byte(`"Key":`), 1)
	if errs := checker.Check(capital); !strings.Contains(fmt.Sprint(errs), "/node_pool/taints/0/Key is not declared") {
		t.Errorf("the wire check let a capitalised key through in an answer: %v", errs)
	}
}

func TestDevicePlugins(t *testing.T) {
	w := newWorld(t, doemu.Options{}, wireAll)
	ctx := t.Context()
	off := w.running(t, "fa-plugins-off")
	if _, _, err := w.do.Kubernetes.CreateNodePool(ctx, off.ID, &godo.KubernetesNodePoolCreateRequest{Name: "gpu", Size: "gpu-h100x1-80gb", Count: 1}); err != nil {
		t.Fatal(err)
	}
	got, _, _ := w.do.Kubernetes.Get(ctx, off.ID)
	if got.NvidiaGpuDevicePlugin == nil || *got.NvidiaGpuDevicePlugin.Enabled {
		t.Errorf("created with the plugin off: %+v", got.NvidiaGpuDevicePlugin)
	}
	id := w.emu.Seed(doemu.SeedCluster{Team: "team-a", Name: "theirs", Region: "tor1", Pools: []doemu.SeedPool{{Name: "gpu", Size: "gpu-h100x1-80gb", Count: 1}}})
	theirs, _, err := w.do.Kubernetes.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if p := theirs.NvidiaGpuDevicePlugin; p == nil || p.Enabled == nil || !*p.Enabled || theirs.AmdGpuDevicePlugin != nil {
		t.Errorf("left unset with an NVIDIA pool: nvidia %+v amd %+v; want on and absent", p, theirs.AmdGpuDevicePlugin)
	}
	f := false
	if _, _, err := w.do.Kubernetes.Update(ctx, id, &godo.KubernetesClusterUpdateRequest{Name: "theirs", NvidiaGpuDevicePlugin: &godo.KubernetesNvidiaGpuDevicePlugin{Enabled: &f}}); err != nil {
		t.Fatal(err)
	}
	if theirs, _, _ = w.do.Kubernetes.Get(ctx, id); *theirs.NvidiaGpuDevicePlugin.Enabled {
		t.Error("turning the plugin off did not hold")
	}
}

func TestPagination(t *testing.T) {
	w := newWorld(t, doemu.Options{MaxPerPage: 2}, wireAll)
	ctx := t.Context()
	for i := range 5 {
		if _, _, err := w.do.Kubernetes.Create(ctx, basicCreate(fmt.Sprintf("fa-page-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	var names []string
	opt := &godo.ListOptions{Page: 1, PerPage: 200}
	for {
		page, resp, err := w.do.Kubernetes.List(ctx, opt)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range page {
			names = append(names, c.Name)
		}
		if resp.Meta.Total != 5 {
			t.Errorf("meta.total %d", resp.Meta.Total)
		}
		if resp.Links == nil || resp.Links.IsLastPage() {
			break
		}
		cur, err := resp.Links.CurrentPage()
		if err != nil {
			t.Fatal(err)
		}
		opt.Page = cur + 1
	}
	if len(names) != 5 || names[4] != "fa-page-4" {
		t.Fatalf("walked %v", names)
	}
	sizes, _, err := w.do.Sizes.List(ctx, &godo.ListOptions{PerPage: 2})
	if err != nil || len(sizes) != 2 {
		t.Fatalf("sizes: %v %d", err, len(sizes))
	}
}

// The description lists "deleting" among the states, which godo v1.237.0
// refuses to parse: with DeletingState "deleting" a Get of a cluster being
// deleted fails in godo. The adapter reads states leniently for that.
func TestDeletingStateBreaksGodo(t *testing.T) {
	w := newWorld(t, doemu.Options{DeletingState: "deleting"}, wireAll)
	c := w.running(t, "fa-spec-state")
	if _, err := w.do.Kubernetes.Delete(t.Context(), c.ID); err != nil {
		t.Fatal(err)
	}
	_, _, err := w.do.Kubernetes.Get(t.Context(), c.ID)
	if err == nil || !strings.Contains(err.Error(), `unknown cluster state "deleting"`) {
		t.Fatalf("want godo's parse error, got %v", err)
	}
}

func TestOptionsAndSizes(t *testing.T) {
	w := newWorld(t, doemu.Options{}, wireAll)
	opts, _, err := w.do.Kubernetes.GetOptions(t.Context())
	if err != nil || len(opts.Regions) != 6 || opts.Versions[0].Slug != "1.35.1-do.0" {
		t.Fatalf("%v %+v", err, opts)
	}
	sizes, _, err := w.do.Sizes.List(t.Context(), &godo.ListOptions{PerPage: 200})
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(sizes, func(s godo.Size) bool { return s.Slug == "gpu-h100x8-640gb" })
	if i < 0 || sizes[i].GPUInfo == nil || sizes[i].GPUInfo.Count != 8 || sizes[i].GPUInfo.Model != "nvidia_h100" {
		t.Fatalf("the H100 x 8 size: %+v", sizes)
	}
	acct, _, err := w.do.Account.Get(t.Context())
	if err != nil || acct.Status != "active" || acct.DropletLimit != 40 || acct.Team == nil || acct.Team.Name != "team-a" {
		t.Fatalf("account %v %+v", err, acct)
	}
}

// A cluster DigitalOcean reports degraded still takes node pool changes; in
// error it takes only a delete (and PUTs of its name and tags); running again
// takes everything. The states are the ones godo parses.
func TestClusterTrouble(t *testing.T) {
	w := newWorld(t, doemu.Options{}, wireAll)
	ctx := t.Context()
	c := w.running(t, "fa-trouble")
	pool := func(name string) error {
		_, _, err := w.do.Kubernetes.CreateNodePool(ctx, c.ID, &godo.KubernetesNodePoolCreateRequest{Name: name, Size: "s-1vcpu-2gb", Count: 1})
		return err
	}
	state := func() (string, string) {
		got, _, err := w.do.Kubernetes.Get(ctx, c.ID)
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		return string(got.Status.State), got.Status.Message
	}
	if err := w.emu.SetClusterState(c.ID, "degraded", "1 of 3 control plane components is unhealthy"); err != nil {
		t.Fatal(err)
	}
	if st, msg := state(); st != "degraded" || msg != "1 of 3 control plane components is unhealthy" {
		t.Fatalf("degraded: %s %q", st, msg)
	}
	if err := pool("while-degraded"); err != nil {
		t.Fatalf("a node pool on a degraded cluster: %v", err)
	}
	if err := w.emu.SetClusterState(c.ID, "error", "the control plane could not be provisioned"); err != nil {
		t.Fatal(err)
	}
	if st, _ := state(); st != "error" {
		t.Fatalf("error: %s", st)
	}
	if err := pool("while-error"); status(err) != http.StatusConflict {
		t.Errorf("a node pool on a cluster in error: %v, want 409", err)
	}
	if _, err := w.do.Kubernetes.Upgrade(ctx, c.ID, &godo.KubernetesClusterUpgradeRequest{VersionSlug: "1.35.1-do.0"}); status(err) != http.StatusConflict {
		t.Errorf("an upgrade of a cluster in error: %v, want 409", err)
	}
	if _, _, err := w.do.Kubernetes.Update(ctx, c.ID, &godo.KubernetesClusterUpdateRequest{Name: "fa-trouble", Tags: []string{"kept"}}); err != nil {
		t.Errorf("a PUT of a cluster in error: %v", err)
	}
	if err := w.emu.SetClusterState(c.ID, "running", ""); err != nil {
		t.Fatal(err)
	}
	if err := pool("after"); err != nil {
		t.Fatalf("a node pool once running again: %v", err)
	}
	if err := w.emu.SetClusterState(c.ID, "error", "lost"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.do.Kubernetes.Delete(ctx, c.ID); err != nil {
		t.Fatalf("a delete of a cluster in error: %v", err)
	}
	for _, bad := range []struct{ id, state string }{{c.ID, "error"}, {c.ID, "weird"}, {"00000000-0000-4000-8000-000000000000", "error"}} {
		if err := w.emu.SetClusterState(bad.id, bad.state, ""); err == nil {
			t.Errorf("SetClusterState(%s, %s) on a deleted, unknown state or missing cluster was taken", bad.id, bad.state)
		}
	}
	st := w.emu.Clusters()
	if len(st) != 1 || st[0].Message != "deleting" || len(st[0].Pools) != 3 || st[0].NvidiaPlugin == nil || *st[0].NvidiaPlugin {
		t.Fatalf("emulator state: %+v", st)
	}
}
