package gkeemu_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"
	compute "google.golang.org/api/compute/v1"
	container "google.golang.org/api/container/v1"
	"google.golang.org/api/googleapi"

	"github.com/fleet-agent/fleet-agent/internal/providers/gcp/gkeemu"
)

// TestClusterLifecycle drives a cluster and a GPU Spot node pool through
// create, resize, autoscaling, relabel and delete with the real SDK, and
// checks what GKE shows at each step.
func TestClusterLifecycle(t *testing.T) {
	v := start(t, func(o *gkeemu.Options) { o.Steps = gkeemu.Steps{Cluster: 3, NodePool: 2, Update: 2, Delete: 2} })
	ctx := t.Context()
	clusters := v.ctr.Projects.Locations.Clusters

	op, err := clusters.Create(parent(region), cpuCluster("c1", 1)).Context(ctx).Do()
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if op.Status != "RUNNING" || op.OperationType != "CREATE_CLUSTER" || !strings.HasPrefix(op.Name, "operation-") {
		t.Fatalf("create answered %+v", op)
	}
	if want := "https://container.googleapis.com/v1/projects/314159265358/locations/us-central1/clusters/c1"; op.TargetLink != want {
		t.Errorf("targetLink %s, want %s (project number, locations/ for a region)", op.TargetLink, want)
	}
	c, err := clusters.Get(clusterName(region, "c1")).Context(ctx).Do()
	if err != nil {
		t.Fatal(err)
	}
	if c.Status != "PROVISIONING" || c.Endpoint != "" || len(c.Locations) != 3 {
		t.Errorf("while provisioning: status %s endpoint %q locations %v", c.Status, c.Endpoint, c.Locations)
	}
	v.wait(t, region, op, 5)
	c, err = clusters.Get(clusterName(region, "c1")).Context(ctx).Do()
	if err != nil {
		t.Fatal(err)
	}
	if c.Status != "RUNNING" || c.Endpoint == "" || c.CurrentMasterVersion != "1.34.3-gke.1100000" || c.SelfLink != "https://container.googleapis.com/v1/projects/fa-emu-project/locations/us-central1/clusters/c1" {
		t.Fatalf("running cluster: %+v", c)
	}
	ca, err := base64.StdEncoding.DecodeString(c.MasterAuth.ClusterCaCertificate)
	if blk, _ := pem.Decode(ca); err != nil || blk == nil || blk.Type != "CERTIFICATE" {
		t.Errorf("clusterCaCertificate is not base64 of a PEM certificate: %v", err)
	}

	pools := clusters.NodePools
	gpu := &container.NodePool{
		Name: "gpu", InitialNodeCount: 1, Locations: []string{"us-central1-a"},
		Config: &container.NodeConfig{
			MachineType: "a3-highgpu-8g", DiskSizeGb: 200, Spot: true, Labels: map[string]string{"fleet-agent.dev/substrate-pool": "pool_x"},
			Accelerators: []*container.AcceleratorConfig{{AcceleratorType: "nvidia-h100-80gb", AcceleratorCount: 8,
				GpuDriverInstallationConfig: &container.GPUDriverInstallationConfig{GpuDriverVersion: "LATEST"}}},
		},
	}
	op, err = pools.Create(clusterName(region, "c1"), &container.CreateNodePoolRequest{NodePool: gpu}).Context(ctx).Do()
	if err != nil {
		t.Fatalf("nodePools.create: %v", err)
	}
	// A second mutation while the first runs is refused with GKE's text.
	_, err = pools.Create(clusterName(region, "c1"), &container.CreateNodePoolRequest{NodePool: &container.NodePool{Name: "other", InitialNodeCount: 1}}).Context(ctx).Do()
	if g := gerr(t, err); g.Code != 400 || !strings.Contains(g.Message, "is currently creating a node pool for cluster c1") || g.Errors[0].Reason != "failedPrecondition" {
		t.Errorf("concurrent create: %v", err)
	}
	v.wait(t, region, op, 5)
	p, err := pools.Get(clusterName(region, "c1") + "/nodePools/gpu").Context(ctx).Do()
	if err != nil {
		t.Fatal(err)
	}
	if p.Status != "RUNNING" || !p.Config.Spot || p.Config.Accelerators[0].AcceleratorCount != 8 || p.Config.ResourceLabels["goog-gke-node-pool-provisioning-model"] != "spot" || len(p.InstanceGroupUrls) != 1 {
		t.Fatalf("gpu pool: %+v", p)
	}
	mig := func() *compute.InstanceGroupManager {
		t.Helper()
		u := strings.TrimPrefix(p.InstanceGroupUrls[0], "https://www.googleapis.com/compute/v1/")
		parts := strings.Split(u, "/")
		m, err := v.cmp.InstanceGroupManagers.Get(parts[1], parts[3], parts[5]).Context(ctx).Do()
		if err != nil {
			t.Fatalf("instanceGroupManagers.get: %v", err)
		}
		return m
	}
	if m := mig(); m.TargetSize != 1 || !m.Status.IsStable {
		t.Errorf("mig after create: target %d stable %v", m.TargetSize, m.Status.IsStable)
	}

	// Resize to 0: the SDK drops a zero unless forced.
	op, err = pools.SetSize(p.SelfLink[len("https://container.googleapis.com/v1/"):], &container.SetNodePoolSizeRequest{NodeCount: 0, ForceSendFields: []string{"NodeCount"}}).Context(ctx).Do()
	if err != nil {
		t.Fatalf("setSize: %v", err)
	}
	if m := mig(); m.TargetSize != 0 || m.Status.IsStable {
		t.Errorf("mig while resizing: target %d stable %v", m.TargetSize, m.Status.IsStable)
	}
	p, _ = pools.Get(clusterName(region, "c1") + "/nodePools/gpu").Context(ctx).Do()
	if p.Status != "RECONCILING" || p.InitialNodeCount != 1 {
		t.Errorf("pool while resizing: %s, initialNodeCount %d (kept as created)", p.Status, p.InitialNodeCount)
	}
	v.wait(t, region, op, 5)
	if m := mig(); m.TargetSize != 0 || !m.Status.IsStable {
		t.Errorf("mig after resize: target %d stable %v", m.TargetSize, m.Status.IsStable)
	}

	op, err = pools.SetAutoscaling(clusterName(region, "c1")+"/nodePools/gpu", &container.SetNodePoolAutoscalingRequest{
		Autoscaling: &container.NodePoolAutoscaling{Enabled: true, MinNodeCount: 0, MaxNodeCount: 2, ForceSendFields: []string{"MinNodeCount"}},
	}).Context(ctx).Do()
	if err != nil {
		t.Fatalf("setAutoscaling: %v", err)
	}
	v.wait(t, region, op, 5)
	p, _ = pools.Get(clusterName(region, "c1") + "/nodePools/gpu").Context(ctx).Do()
	if !p.Autoscaling.Enabled || p.Autoscaling.MaxNodeCount != 2 || p.Autoscaling.MinNodeCount != 0 {
		t.Errorf("autoscaling %+v", p.Autoscaling)
	}

	// Labels are replaced as a whole; the update needs version and image.
	_, err = pools.Update(clusterName(region, "c1")+"/nodePools/gpu", &container.UpdateNodePoolRequest{Labels: &container.NodeLabels{Labels: map[string]string{"a": "b"}}}).Context(ctx).Do()
	if g := gerr(t, err); g.Code != 400 {
		t.Errorf("update without nodeVersion/imageType: %v", err)
	}
	op, err = pools.Update(clusterName(region, "c1")+"/nodePools/gpu", &container.UpdateNodePoolRequest{
		NodeVersion: p.Version, ImageType: p.Config.ImageType, Labels: &container.NodeLabels{Labels: map[string]string{"fleet-agent.dev/substrate-pool": "pool_y"}},
	}).Context(ctx).Do()
	if err != nil {
		t.Fatalf("update labels: %v", err)
	}
	v.wait(t, region, op, 5)
	p, _ = pools.Get(clusterName(region, "c1") + "/nodePools/gpu").Context(ctx).Do()
	if len(p.Config.Labels) != 1 || p.Config.Labels["fleet-agent.dev/substrate-pool"] != "pool_y" {
		t.Errorf("labels %v", p.Config.Labels)
	}

	op, err = pools.Delete(clusterName(region, "c1") + "/nodePools/gpu").Context(ctx).Do()
	if err != nil || op.OperationType != "DELETE_NODE_POOL" {
		t.Fatalf("delete pool: %+v %v", op, err)
	}
	p, _ = pools.Get(clusterName(region, "c1") + "/nodePools/gpu").Context(ctx).Do()
	if p == nil || p.Status != "STOPPING" {
		t.Errorf("pool being deleted: %+v", p)
	}
	v.wait(t, region, op, 5)
	if _, err := pools.Get(clusterName(region, "c1") + "/nodePools/gpu").Context(ctx).Do(); gerr(t, err).Code != 404 {
		t.Errorf("deleted pool: %v", err)
	}

	op, err = clusters.Delete(clusterName(region, "c1")).Context(ctx).Do()
	if err != nil {
		t.Fatal(err)
	}
	c, _ = clusters.Get(clusterName(region, "c1")).Context(ctx).Do()
	if c == nil || c.Status != "STOPPING" {
		t.Errorf("cluster being deleted: %+v", c)
	}
	v.wait(t, region, op, 5)
	_, err = clusters.Get(clusterName(region, "c1")).Context(ctx).Do()
	if g := gerr(t, err); g.Code != 404 || g.Message != "Not found: projects/fa-emu-project/locations/us-central1/clusters/c1." {
		t.Errorf("deleted cluster: %v", err)
	}
}

// status reads the "status" of a Google error body, which the Go client
// does not parse.
func status(g *googleapi.Error) string {
	var b struct {
		Error struct {
			Status string `json:"status"`
		} `json:"error"`
	}
	_ = json.Unmarshal([]byte(g.Body), &b)
	return b.Error.Status
}

// TestErrors: each refusal has GKE's code, status, reason and text.
func TestErrors(t *testing.T) {
	v := start(t, func(o *gkeemu.Options) { o.Steps = gkeemu.Synchronous })
	ctx := t.Context()
	clusters := v.ctr.Projects.Locations.Clusters
	v.runningCluster(t, "us-central1-a", "busy")
	v.emu.SetQuota("europe-west4", "CPUS", 24)
	tooLong := strings.Repeat("a", 41)
	gpuPool := func(count int64) *container.CreateNodePoolRequest {
		return &container.CreateNodePoolRequest{NodePool: &container.NodePool{Name: "g", InitialNodeCount: 1, Config: &container.NodeConfig{
			MachineType: "a3-highgpu-8g", Accelerators: []*container.AcceleratorConfig{{AcceleratorType: "nvidia-h100-80gb", AcceleratorCount: count}}}}}
	}
	cases := []struct {
		name    string
		call    func() error
		code    int
		status  string
		reason  string
		message string
	}{
		{"missing cluster", func() error {
			_, err := clusters.Get(clusterName(region, "nope")).Context(ctx).Do()
			return err
		}, 404, "NOT_FOUND", "notFound", "Not found: projects/fa-emu-project/locations/us-central1/clusters/nope."},
		{"duplicate cluster", func() error {
			_, err := clusters.Create(parent("us-central1-a"), cpuCluster("busy", 1)).Context(ctx).Do()
			return err
		}, 409, "ALREADY_EXISTS", "alreadyExists", "Already exists: projects/fa-emu-project/locations/us-central1-a/clusters/busy."},
		{"no nodes", func() error {
			_, err := clusters.Create(parent(region), cpuCluster("empty", 0)).Context(ctx).Do()
			return err
		}, 400, "INVALID_ARGUMENT", "badRequest", "Cluster.initial_node_count must be greater than zero."},
		{"long cluster name", func() error {
			_, err := clusters.Create(parent(region), cpuCluster(tooLong, 1)).Context(ctx).Do()
			return err
		}, 400, "INVALID_ARGUMENT", "badRequest", "Invalid value for field 'cluster.name'"},
		{"long pool name", func() error {
			_, err := clusters.NodePools.Create(clusterName("us-central1-a", "busy"), &container.CreateNodePoolRequest{NodePool: &container.NodePool{Name: tooLong}}).Context(ctx).Do()
			return err
		}, 400, "INVALID_ARGUMENT", "badRequest", "must be no longer than 40 characters"},
		{"unknown machine type", func() error {
			_, err := clusters.NodePools.Create(clusterName("us-central1-a", "busy"), &container.CreateNodePoolRequest{NodePool: &container.NodePool{Name: "x", Config: &container.NodeConfig{MachineType: "z9-huge"}}}).Context(ctx).Do()
			return err
		}, 400, "INVALID_ARGUMENT", "badRequest", `Machine type "z9-huge" does not exist in zone "us-central1-a".`},
		{"wrong accelerator count", func() error {
			_, err := clusters.NodePools.Create(clusterName("us-central1-a", "busy"), gpuPool(4)).Context(ctx).Do()
			return err
		}, 400, "INVALID_ARGUMENT", "badRequest", "is not supported for machine type"},
		{"quota", func() error {
			req := cpuCluster("big", 0)
			req.Cluster.NodePools[0].InitialNodeCount = 2
			req.Cluster.NodePools[0].Config.MachineType = "n1-standard-8"
			_, err := clusters.Create(parent("europe-west4"), req).Context(ctx).Do()
			return err
		}, 403, "PERMISSION_DENIED", "forbidden", `Insufficient regional quota to satisfy request: resource "CPUS": request requires '48.0' and is short '24.0'.`},
		{"unknown location", func() error {
			_, err := clusters.Get(clusterName("mars-north1", "x")).Context(ctx).Do()
			return err
		}, 400, "INVALID_ARGUMENT", "badRequest", `Location "mars-north1" does not exist.`},
		{"throttled", func() error {
			if err := v.emu.Throttle("container.projects.locations.clusters.list", 1, 7*time.Second, "both"); err != nil {
				t.Fatal(err)
			}
			_, err := clusters.List(parent("-")).Context(ctx).Do()
			return err
		}, 429, "RESOURCE_EXHAUSTED", "rateLimitExceeded", "Quota exceeded for quota metric"},
		{"unavailable", func() error {
			if err := v.emu.FailNext("container.projects.locations.clusters.get", 1, 503); err != nil {
				t.Fatal(err)
			}
			_, err := clusters.Get(clusterName("us-central1-a", "busy")).Context(ctx).Do()
			return err
		}, 503, "UNAVAILABLE", "backendError", "The service is currently unavailable."},
		{"missing machine type (compute, no status)", func() error {
			_, err := v.cmp.MachineTypes.Get(project, "us-central1-a", "z9-huge").Context(ctx).Do()
			return err
		}, 404, "", "notFound", "The resource 'projects/fa-emu-project/zones/us-central1-a/machineTypes/z9-huge' was not found"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := gerr(t, c.call())
			if g.Code != c.code || status(g) != c.status || len(g.Errors) == 0 || g.Errors[0].Reason != c.reason || !strings.Contains(g.Message, c.message) {
				t.Errorf("got %d %s %v %q\nwant %d %s %s %q", g.Code, status(g), g.Errors, g.Message, c.code, c.status, c.reason, c.message)
			}
		})
	}
	// The 429 carried its wait both ways.
	xs := v.emu.Exchanges()
	for _, x := range xs {
		if x.Status == 429 && (x.Header.Get("Retry-After") != "7" || !bytes.Contains(x.Body, []byte(`"retryDelay":"7s"`))) {
			t.Errorf("429 without its wait: %s %s", x.Header, x.Body)
		}
	}
}

// TestAuth: no token is 401 as Google words it; an identity without the
// project is 403; a key the emulator did not issue is refused at the token
// endpoint; a token dies with the emulator's clock.
func TestAuth(t *testing.T) {
	v := start(t, nil)
	ctx := t.Context()
	hc := &http.Client{}
	resp, err := hc.Get(v.emu.URL() + "/v1/projects/fa-emu-project/locations/us-central1/clusters?alt=json&prettyPrint=false")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("no token: %d", resp.StatusCode)
	}

	other, err := v.emu.AddServiceAccount("stranger@elsewhere.iam.gserviceaccount.com", "another-project")
	if err != nil {
		t.Fatal(err)
	}
	_, err = containerFor(t, v.emu, other).Projects.Locations.Clusters.List(parent("-")).Context(ctx).Do()
	if g := gerr(t, err); g.Code != 403 || status(g) != "PERMISSION_DENIED" {
		t.Errorf("stranger: %v", err)
	}

	foreign, err := gkeemu.New(gkeemu.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	forged, _ := foreign.AddServiceAccount(saEmail) // same email, a key this emulator never issued
	forged = bytes.ReplaceAll(forged, []byte(`"token_uri": "/token"`), []byte(`"token_uri": "`+v.emu.TokenURI()+`"`))
	conf, err := google.JWTConfigFromJSON(forged, container.CloudPlatformScope)
	if err != nil {
		t.Fatal(err)
	}
	_, err = conf.TokenSource(ctx).Token()
	var re *oauth2.RetrieveError
	if !errors.As(err, &re) || !bytes.Contains(re.Body, []byte(`"error":"invalid_grant"`)) {
		t.Errorf("forged key: %v", err)
	}

	conf, _ = google.JWTConfigFromJSON(v.key, container.CloudPlatformScope)
	tok, err := conf.TokenSource(ctx).Token()
	if err != nil {
		t.Fatal(err)
	}
	if !v.emu.Accepts(tok.AccessToken) {
		t.Fatal("fresh token not accepted")
	}
	v.clk.Advance(time.Hour)
	if v.emu.Accepts(tok.AccessToken) {
		t.Error("token outlived its hour")
	}
	svc := containerFor(t, v.emu, v.key) // a new token source: a new token
	if _, err := svc.Projects.Locations.Clusters.List(parent("-")).Context(ctx).Do(); err != nil {
		t.Errorf("new token: %v", err)
	}
}

// TestAssertionExpiryGuess: with the guess on, a token asked for 600 s (the
// assertion's exp) dies at 600 s; without it, it lives the hour.
func TestAssertionExpiryGuess(t *testing.T) {
	for _, honour := range []bool{false, true} {
		v := start(t, func(o *gkeemu.Options) { o.Guesses.HonourAssertionExpiry = honour })
		conf, _ := google.JWTConfigFromJSON(v.key, container.CloudPlatformScope)
		conf.Expires = 600 * time.Second
		tok, err := conf.TokenSource(t.Context()).Token()
		if err != nil {
			t.Fatal(err)
		}
		// x/oauth2/jwt backdates iat by 10 s: the assertion spans 610 s.
		v.clk.Advance(611 * time.Second)
		if got := v.emu.Accepts(tok.AccessToken); got == honour {
			t.Errorf("honour %v: accepted after 611 s = %v", honour, got)
		}
	}
}

// TestTokenReview is the route kube-apiserver's webhook token
// authentication posts to, over plain HTTP.
func TestTokenReview(t *testing.T) {
	v := start(t, nil)
	conf, _ := google.JWTConfigFromJSON(v.key, container.CloudPlatformScope)
	tok, err := conf.TokenSource(t.Context()).Token()
	if err != nil {
		t.Fatal(err)
	}
	review := func(token string) map[string]any {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": map[string]any{"token": token}})
		resp, err := http.Post(v.emu.TokenReviewURL(), "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 {
			t.Fatalf("tokenreview: %d %v", resp.StatusCode, err)
		}
		if out["kind"] != "TokenReview" || out["apiVersion"] != "authentication.k8s.io/v1" {
			t.Errorf("answer %v", out)
		}
		return out["status"].(map[string]any)
	}
	st := review(tok.AccessToken)
	user, _ := st["user"].(map[string]any)
	if st["authenticated"] != true || user["username"] != saEmail || !strings.Contains(strings.Join(strs(user["groups"]), ","), "system:masters") {
		t.Errorf("minted token: %v", st)
	}
	if st := review(tok.AccessToken + "x"); st["authenticated"] != false {
		t.Errorf("forged token: %v", st)
	}
	v.clk.Advance(time.Hour)
	if st := review(tok.AccessToken); st["authenticated"] != false {
		t.Errorf("expired token: %v", st)
	}
}

func strs(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}

// TestDropAfterActing: the create happens, the answer never comes; the
// cluster is there to be found.
func TestDropAfterActing(t *testing.T) {
	v := start(t, nil)
	if err := v.emu.DropAfterActing("container.projects.locations.clusters.create", 1); err != nil {
		t.Fatal(err)
	}
	_, err := v.ctr.Projects.Locations.Clusters.Create(parent(region), cpuCluster("lost", 1)).Context(t.Context()).Do()
	var g *googleapi.Error
	if err == nil || errors.As(err, &g) {
		t.Fatalf("a dropped answer should be a transport error, got %v", err)
	}
	if _, err := v.ctr.Projects.Locations.Clusters.Get(clusterName(region, "lost")).Context(t.Context()).Do(); err != nil {
		t.Errorf("the create did not happen: %v", err)
	}
	x := v.emu.Exchanges()
	if last := x[len(x)-2]; !last.Dropped || last.MethodID != "container.projects.locations.clusters.create" {
		t.Errorf("exchange not recorded as dropped: %+v", last)
	}
}

// TestCompute: regions page by page, machine types with their GPUs,
// attachable accelerator types.
func TestCompute(t *testing.T) {
	v := start(t, func(o *gkeemu.Options) { o.PageSize = 1 })
	ctx := t.Context()
	var names []string
	pages := 0
	err := v.cmp.Regions.List(project).Pages(ctx, func(l *compute.RegionList) error {
		pages++
		for _, r := range l.Items {
			names = append(names, r.Name+":"+r.Zones[0][strings.LastIndexByte(r.Zones[0], '/')+1:])
		}
		return nil
	})
	if err != nil || pages != 2 || strings.Join(names, ",") != "europe-west4:europe-west4-a,us-central1:us-central1-a" {
		t.Errorf("regions: %v in %d pages, %v", names, pages, err)
	}
	mt, err := v.cmp.MachineTypes.Get(project, "us-central1-a", "a3-highgpu-8g").Context(ctx).Do()
	if err != nil || mt.GuestCpus != 208 || len(mt.Accelerators) != 1 || mt.Accelerators[0].GuestAcceleratorType != "nvidia-h100-80gb" || mt.Accelerators[0].GuestAcceleratorCount != 8 {
		t.Errorf("a3-highgpu-8g: %+v %v", mt, err)
	}
	if _, err := v.cmp.MachineTypes.Get(project, "europe-west4-a", "a3-highgpu-8g").Context(ctx).Do(); gerr(t, err).Code != 404 {
		t.Errorf("a3 where it is not offered: %v", err)
	}
	at, err := v.cmp.AcceleratorTypes.Get(project, "us-central1-f", "nvidia-tesla-t4").Context(ctx).Do()
	if err != nil || at.MaximumCardsPerInstance != 4 {
		t.Errorf("t4: %+v %v", at, err)
	}
}

// TestStockout: an accepted node pool whose machines cannot be had ends
// DONE with an error, and the pool says why.
func TestStockout(t *testing.T) {
	v := start(t, func(o *gkeemu.Options) { o.Steps = gkeemu.Synchronous })
	v.runningCluster(t, "us-central1-a", "c")
	v.emu.Stockout("us-central1-a", "g2-standard-8", true)
	op, err := v.ctr.Projects.Locations.Clusters.NodePools.Create(clusterName("us-central1-a", "c"), &container.CreateNodePoolRequest{NodePool: &container.NodePool{
		Name: "l4", InitialNodeCount: 1, Config: &container.NodeConfig{MachineType: "g2-standard-8"}}}).Context(t.Context()).Do()
	if err != nil {
		t.Fatal(err)
	}
	if op.Status != "DONE" || op.Error == nil || !strings.Contains(op.Error.Message, "GCE_STOCKOUT") {
		t.Errorf("op %+v", op)
	}
	p, err := v.ctr.Projects.Locations.Clusters.NodePools.Get(clusterName("us-central1-a", "c") + "/nodePools/l4").Context(t.Context()).Do()
	if err != nil || p.Status != "ERROR" || len(p.Conditions) != 1 || p.Conditions[0].Code != "GCE_STOCKOUT" {
		t.Errorf("pool %+v %v", p, err)
	}
}

// TestClockDrivenOperations: with StepEvery, operations finish with the
// clock even when nobody looks.
func TestClockDrivenOperations(t *testing.T) {
	v := start(t, func(o *gkeemu.Options) {
		o.Steps = gkeemu.Steps{Cluster: 1000, NodePool: 1000, Update: 1000, Delete: 1000}
		o.StepEvery = time.Second
	})
	op, err := v.ctr.Projects.Locations.Clusters.Create(parent(region), cpuCluster("slow", 1)).Context(t.Context()).Do()
	if err != nil {
		t.Fatal(err)
	}
	get := func() string {
		op, err := v.ctr.Projects.Locations.Operations.Get(parent(region) + "/operations/" + op.Name).Context(t.Context()).Do()
		if err != nil {
			t.Fatal(err)
		}
		return op.Status
	}
	if s := get(); s != "RUNNING" {
		t.Fatalf("at once: %s", s)
	}
	v.clk.Advance(1000 * time.Second)
	if s := get(); s != "DONE" {
		t.Errorf("after the clock: %s", s)
	}
}

// TestMetadataToken: the metadata server's token route, for a process that
// runs on Google Cloud and was told to use it.
func TestMetadataToken(t *testing.T) {
	v := start(t, nil)
	v.emu.SetMetadataAccount(saEmail)
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, v.emu.URL()+"/computeMetadata/v1/instance/service-accounts/default/token", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Errorf("without Metadata-Flavor: %d", resp.StatusCode)
	}
	req.Header.Set("Metadata-Flavor", "Google")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&tok); err != nil || !v.emu.Accepts(tok.AccessToken) {
		t.Errorf("metadata token: %v", err)
	}
}

// TestSeed: a cluster made outside is running with its own pools.
func TestSeed(t *testing.T) {
	v := start(t, nil)
	path, err := v.emu.Seed(gkeemu.SeedCluster{Location: "us-central1-b", Name: "theirs", Pools: []gkeemu.SeedPool{{Name: "default-pool", MachineType: "e2-standard-4", NodeCount: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := v.ctr.Projects.Locations.Clusters.Get(path).Context(t.Context()).Do()
	if err != nil || c.Status != "RUNNING" || len(c.NodePools) != 1 || c.CurrentNodeCount != 2 || len(c.ResourceLabels) != 0 {
		t.Errorf("seeded: %+v %v", c, err)
	}
}

// TestFrontsAKubeAPIServer: with Kube set, every cluster hands out that
// server's address and CA, as a real kube-apiserver whose webhook token
// authentication posts to TokenReviewURL would need.
func TestFrontsAKubeAPIServer(t *testing.T) {
	ca := []byte("-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n")
	v := start(t, func(o *gkeemu.Options) {
		o.Steps = gkeemu.Synchronous
		o.Kube = gkeemu.KubeAPI{Endpoint: "https://127.0.0.1:6443", CAPEM: ca}
	})
	c := v.runningCluster(t, "us-central1-a", "kube")
	got, _ := base64.StdEncoding.DecodeString(c.MasterAuth.ClusterCaCertificate)
	if c.Endpoint != "127.0.0.1:6443" || !bytes.Equal(got, ca) || !bytes.Equal(v.emu.CAPEM(), ca) {
		t.Errorf("endpoint %q, CA %q", c.Endpoint, got)
	}
	if !strings.HasSuffix(v.emu.TokenReviewURL(), "/apis/authentication.k8s.io/v1/tokenreviews") {
		t.Errorf("token review URL %s", v.emu.TokenReviewURL())
	}
}

// TestErrorClusterGoesAway: a create whose only nodes stock out ends DONE
// with an error; the cluster shows ERROR and GKE removes it by itself.
func TestErrorClusterGoesAway(t *testing.T) {
	v := start(t, func(o *gkeemu.Options) { o.Steps = gkeemu.Steps{Cluster: 1, NodePool: 1, Update: 1, Delete: 2} })
	v.emu.Stockout("us-central1-a", "e2-standard-2", true)
	op, err := v.ctr.Projects.Locations.Clusters.Create(parent("us-central1-a"), cpuCluster("doomed", 1)).Context(t.Context()).Do()
	if err != nil {
		t.Fatal(err)
	}
	op = v.wait(t, "us-central1-a", op, 5)
	if op.Error == nil || !strings.Contains(op.Error.Message, "GCE_STOCKOUT") {
		t.Errorf("create op %+v", op)
	}
	c, err := v.ctr.Projects.Locations.Clusters.Get(clusterName("us-central1-a", "doomed")).Context(t.Context()).Do()
	if err != nil || c.Status != "ERROR" || !strings.Contains(c.StatusMessage, "GCE_STOCKOUT") {
		t.Fatalf("failed cluster: %+v %v", c, err)
	}
	for range 3 {
		_, err = v.ctr.Projects.Locations.Clusters.Get(clusterName("us-central1-a", "doomed")).Context(t.Context()).Do()
	}
	if g := gerr(t, err); g.Code != 404 {
		t.Errorf("the ERROR cluster is still there: %v", err)
	}
}
