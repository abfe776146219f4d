package gkeemu_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"golang.org/x/oauth2/google"
	container "google.golang.org/api/container/v1"

	"github.com/fleet-agent/fleet-agent/internal/providers/gcp/gkeemu"
)

// TestSnapshot: the truth a test asserts at the emulator follows what the
// API did (a GPU Spot pool, its groups' sizes, a resize, the operations
// still running) and observes nothing: reading it moves no operation.
func TestSnapshot(t *testing.T) {
	v := start(t, func(o *gkeemu.Options) { o.Steps = gkeemu.Steps{Cluster: 1, NodePool: 2, Update: 1, Delete: 1} })
	v.runningCluster(t, "us-central1-a", "snap")
	op, err := v.ctr.Projects.Locations.Clusters.NodePools.Create(clusterName("us-central1-a", "snap"), &container.CreateNodePoolRequest{NodePool: &container.NodePool{
		Name: "gpu", InitialNodeCount: 2,
		Config: &container.NodeConfig{MachineType: "g2-standard-8", Spot: true, Labels: map[string]string{"fleet-agent.dev/capacity": "spot"},
			Accelerators: []*container.AcceleratorConfig{{AcceleratorType: "nvidia-l4", AcceleratorCount: 1, GpuDriverInstallationConfig: &container.GPUDriverInstallationConfig{GpuDriverVersion: "LATEST"}}}},
	}}).Context(t.Context()).Do()
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if s := v.emu.Snapshot(); len(s.Running) != 1 || s.Running[0] != op.Name {
			t.Fatalf("running %v, want %s alone (a snapshot must not move it)", s.Running, op.Name)
		}
	}
	v.wait(t, "us-central1-a", op, 5)
	s := v.emu.Snapshot()
	c, ok := s.Cluster("us-central1-a", "snap")
	if !ok || len(s.Clusters) != 1 || c.Status != "RUNNING" || c.SelfLink != "https://container.googleapis.com/v1/projects/"+project+"/zones/us-central1-a/clusters/snap" {
		t.Fatalf("snapshot %+v", s)
	}
	p, ok := c.Pool("gpu")
	want := gkeemu.PoolState{Name: "gpu", Status: "RUNNING", MachineType: "g2-standard-8", DiskGB: 100, Spot: true,
		Accelerators: []gkeemu.Accelerator{{Type: "nvidia-l4", Count: 1, Driver: "LATEST"}},
		Labels:       map[string]string{"fleet-agent.dev/capacity": "spot"}, Locations: []string{"us-central1-a"},
		InitialNodeCount: 2, Nodes: map[string]int{"us-central1-a": 2}}
	if b, w := jsonOf(p), jsonOf(want); !ok || b != w {
		t.Fatalf("pool\n have %s\n want %s", b, w)
	}
	if len(s.Groups) != 2 || !s.Groups[0].Stable {
		t.Fatalf("groups %+v", s.Groups)
	}
	op, err = v.ctr.Projects.Locations.Clusters.NodePools.SetSize(clusterName("us-central1-a", "snap")+"/nodePools/gpu", &container.SetNodePoolSizeRequest{NodeCount: 0, ForceSendFields: []string{"NodeCount"}}).Context(t.Context()).Do()
	if err != nil {
		t.Fatal(err)
	}
	v.wait(t, "us-central1-a", op, 5)
	c, _ = v.emu.Snapshot().Cluster("us-central1-a", "snap")
	if p, _ := c.Pool("gpu"); p.Nodes["us-central1-a"] != 0 {
		t.Fatalf("after setSize 0: %+v", p)
	}
	op, err = v.ctr.Projects.Locations.Clusters.Delete(clusterName("us-central1-a", "snap")).Context(t.Context()).Do()
	if err != nil {
		t.Fatal(err)
	}
	v.wait(t, "us-central1-a", op, 5)
	if s := v.emu.Snapshot(); len(s.Clusters)+len(s.Groups)+len(s.Running) != 0 {
		t.Fatalf("after the delete: %+v", s)
	}
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestTokenReviewer: the handler kubeplane's webhook forwards to answers at
// its own path as the TokenReview route does, and is recorded as one.
func TestTokenReviewer(t *testing.T) {
	v := start(t, nil)
	conf, _ := google.JWTConfigFromJSON(v.key, container.CloudPlatformScope)
	tok, err := conf.TokenSource(t.Context()).Token()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		token string
		ok    bool
	}{{tok.AccessToken, true}, {tok.AccessToken + "x", false}} {
		body, _ := json.Marshal(map[string]any{"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
			"spec": map[string]any{"token": c.token, "audiences": []string{"https://kubernetes.default.svc"}}})
		rec := httptest.NewRecorder()
		v.emu.TokenReviewer().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/tokenreview", bytes.NewReader(body)))
		var out struct {
			Status struct {
				Authenticated bool     `json:"authenticated"`
				Audiences     []string `json:"audiences"`
				User          struct {
					Username string `json:"username"`
				} `json:"user"`
			} `json:"status"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || rec.Code != 200 {
			t.Fatalf("%d %s", rec.Code, rec.Body)
		}
		if out.Status.Authenticated != c.ok || c.ok && (out.Status.User.Username != saEmail || len(out.Status.Audiences) != 1) {
			t.Errorf("token ok=%v: %s", c.ok, rec.Body)
		}
	}
	if n := v.emu.Count("tokenreviews.create"); n != 2 {
		t.Errorf("%d reviews recorded, want 2", n)
	}
}
