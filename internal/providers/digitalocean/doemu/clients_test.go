package doemu_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/digitalocean/godo"
	"gopkg.in/yaml.v3"

	"github.com/fleet-agent/fleet-agent/internal/providers/digitalocean/doemu"
)

// raw sends a JSON request with the world's token and returns the status
// and the decoded error body (id, message), if any.
func (w *world) raw(t *testing.T, method, path, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, w.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return resp.StatusCode, m
}

// TestStrictBodies: a body member the service does not document is refused
// (400, the decoder's words), and one godo knows but the emulator does not
// model is refused with the service's 422, never taken and dropped.
func TestStrictBodies(t *testing.T) {
	w := newWorld(t, doemu.Options{}, answersOnly)
	c := w.running(t, "fa-strict")
	pool := c.NodePools[0].ID
	cases := []struct {
		name, method, path, body string
		status                   int
		id, words                string
	}{
		{"misspelt create member", "POST", "/v2/kubernetes/clusters",
			`{"name":"x1","region":"tor1","version":"1.34","regoin":"tor1","node_pools":[{"name":"p","size":"s-2vcpu-4gb","count":1}]}`,
			400, "bad_request", `unknown field "regoin"`},
		{"misspelt pool member", "POST", "/v2/kubernetes/clusters",
			`{"name":"x2","region":"tor1","version":"1.34","node_pools":[{"name":"p","size":"s-2vcpu-4gb","count":1,"lables":{}}]}`,
			400, "bad_request", `unknown field "lables"`},
		{"misspelt update member", "PUT", "/v2/kubernetes/clusters/" + c.ID, `{"auto_upgrad":true}`,
			400, "bad_request", `unknown field "auto_upgrad"`},
		{"misspelt pool update member", "PUT", "/v2/kubernetes/clusters/" + c.ID + "/node_pools/" + pool, `{"cuont":2}`,
			400, "bad_request", `unknown field "cuont"`},
		{"unmodelled DRA driver", "POST", "/v2/kubernetes/clusters",
			`{"name":"x3","region":"tor1","version":"1.34","nvidia_gpu_dra_driver":{"enabled":true},"node_pools":[{"name":"p","size":"s-2vcpu-4gb","count":1}]}`,
			422, "unprocessable_entity", "nvidia_gpu_dra_driver"},
		{"unmodelled GPU partition mode", "POST", "/v2/kubernetes/clusters/" + c.ID + "/node_pools",
			`{"name":"amd","size":"s-2vcpu-4gb","count":1,"gpu_partition_mode":"AMD_PARTITION_MODE_DPX_NPS2"}`,
			422, "unprocessable_entity", "gpu_partition_mode"},
		{"a bad maintenance day", "PUT", "/v2/kubernetes/clusters/" + c.ID, `{"maintenance_policy":{"day":"someday","start_time":"03:00"}}`,
			422, "unprocessable_entity", "day"},
		{"a bad maintenance start", "PUT", "/v2/kubernetes/clusters/" + c.ID, `{"maintenance_policy":{"day":"monday","start_time":"25:00"}}`,
			422, "unprocessable_entity", "start_time"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st, body := w.raw(t, tc.method, tc.path, tc.body)
			msg, _ := body["message"].(string)
			if st != tc.status || body["id"] != tc.id || !strings.Contains(msg, tc.words) {
				t.Errorf("answered %d %v, want %d %s mentioning %q", st, body, tc.status, tc.id, tc.words)
			}
		})
	}
}

// TestClusterSettingsKept: the documented settable fields of a create and
// an update are kept and returned.
func TestClusterSettingsKept(t *testing.T) {
	w := newWorld(t, doemu.Options{}, wireAll)
	ctx := t.Context()
	on, off := true, false
	thr, unneeded := 0.65, "2m"
	req := basicCreate("fa-kept")
	req.HA = &on
	req.AutoUpgrade = true
	req.SurgeUpgrade = true
	req.MaintenancePolicy = &godo.KubernetesMaintenancePolicy{StartTime: "03:00", Day: godo.KubernetesMaintenanceDayTuesday}
	req.ControlPlaneFirewall = &godo.KubernetesControlPlaneFirewall{Enabled: &on, AllowedAddresses: []string{"10.0.0.0/8"}}
	req.ClusterAutoscalerConfiguration = &godo.KubernetesClusterAutoscalerConfiguration{ScaleDownUtilizationThreshold: &thr, ScaleDownUnneededTime: &unneeded, Expanders: []string{"priority"}}
	req.RoutingAgent = &godo.KubernetesRoutingAgent{Enabled: &on}
	req.CorednsAutoscaler = &godo.KubernetesCorednsAutoscaler{Enabled: &off}
	req.ClusterSubnet, req.ServiceSubnet = "192.168.0.0/20", "192.168.16.0/24"
	c, _, err := w.do.Kubernetes.Create(ctx, req)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	got, _, err := w.do.Kubernetes.Get(ctx, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	check := func(when string, got *godo.KubernetesCluster, ha, auto, surge bool, day godo.KubernetesMaintenancePolicyDay, start string) {
		t.Helper()
		if got.HA != ha || got.AutoUpgrade != auto || got.SurgeUpgrade != surge {
			t.Errorf("%s: ha %v auto_upgrade %v surge_upgrade %v, want %v %v %v", when, got.HA, got.AutoUpgrade, got.SurgeUpgrade, ha, auto, surge)
		}
		if mp := got.MaintenancePolicy; mp == nil || mp.Day != day || mp.StartTime != start || mp.Duration == "" {
			t.Errorf("%s: maintenance policy %+v, want %s at %s with a duration", when, mp, day, start)
		}
	}
	check("create", got, true, true, true, godo.KubernetesMaintenanceDayTuesday, "03:00")
	if fw := got.ControlPlaneFirewall; fw == nil || fw.Enabled == nil || !*fw.Enabled || len(fw.AllowedAddresses) != 1 {
		t.Errorf("control plane firewall %+v, want enabled with one address", fw)
	}
	if ca := got.ClusterAutoscalerConfiguration; ca == nil || ca.ScaleDownUtilizationThreshold == nil || *ca.ScaleDownUtilizationThreshold != thr || len(ca.Expanders) != 1 {
		t.Errorf("autoscaler configuration %+v", ca)
	}
	if got.RoutingAgent == nil || !*got.RoutingAgent.Enabled || got.CorednsAutoscaler == nil || *got.CorednsAutoscaler.Enabled {
		t.Errorf("routing agent %+v coredns autoscaler %+v", got.RoutingAgent, got.CorednsAutoscaler)
	}
	if got.ClusterSubnet != "192.168.0.0/20" || got.ServiceSubnet != "192.168.16.0/24" {
		t.Errorf("subnets %s %s", got.ClusterSubnet, got.ServiceSubnet)
	}
	for range 3 {
		if _, _, err := w.do.Kubernetes.Get(ctx, c.ID); err != nil {
			t.Fatal(err)
		}
	}
	// An update without a name, as doctl sends one: the name stays.
	up, resp, err := w.do.Kubernetes.Update(ctx, c.ID, &godo.KubernetesClusterUpdateRequest{
		AutoUpgrade:       &off,
		MaintenancePolicy: &godo.KubernetesMaintenancePolicy{StartTime: "22:30", Day: godo.KubernetesMaintenanceDayAny},
	})
	if err != nil {
		t.Fatalf("Update without a name: %v", err)
	}
	if resp.StatusCode != http.StatusAccepted || up.Name != "fa-kept" {
		t.Errorf("update answered %d with name %q, want 202 and the old name", resp.StatusCode, up.Name)
	}
	check("update", up, true, false, true, godo.KubernetesMaintenanceDayAny, "22:30")
	// HA cannot be turned off once on: refused, not dropped.
	w.badRequests(func() {
		st, body := w.raw(t, "PUT", "/v2/kubernetes/clusters/"+c.ID, `{"ha":false}`)
		if st != 422 || body["id"] != "unprocessable_entity" {
			t.Errorf("turning HA off answered %d %v, want 422", st, body)
		}
	})
	// A cluster made without ha gets the version's default: off before 1.36.
	plain, _, err := w.do.Kubernetes.Create(ctx, basicCreate("fa-plain"))
	if err != nil {
		t.Fatal(err)
	}
	if plain.HA || plain.MaintenancePolicy == nil || plain.MaintenancePolicy.Day != godo.KubernetesMaintenanceDayAny {
		t.Errorf("defaults: ha %v maintenance %+v", plain.HA, plain.MaintenancePolicy)
	}
}

// TestPoolUpdateWithoutName: godo and doctl leave name (and count) out of a
// node pool update; what is left out keeps its value.
func TestPoolUpdateWithoutName(t *testing.T) {
	w := newWorld(t, doemu.Options{}, wireAll)
	ctx := t.Context()
	c := w.running(t, "fa-poolup")
	pool := c.NodePools[0]
	three := 3
	got, resp, err := w.do.Kubernetes.UpdateNodePool(ctx, c.ID, pool.ID, &godo.KubernetesNodePoolUpdateRequest{Count: &three})
	if err != nil {
		t.Fatalf("UpdateNodePool without a name: %v", err)
	}
	if resp.StatusCode != http.StatusAccepted || got.Name != pool.Name || got.Count != 3 {
		t.Errorf("answered %d name %q count %d", resp.StatusCode, got.Name, got.Count)
	}
	got, _, err = w.do.Kubernetes.UpdateNodePool(ctx, c.ID, pool.ID, &godo.KubernetesNodePoolUpdateRequest{Labels: map[string]string{"tier": "web"}})
	if err != nil {
		t.Fatalf("UpdateNodePool without a count: %v", err)
	}
	if got.Count != 3 || got.Labels["tier"] != "web" {
		t.Errorf("count %d labels %v, want 3 and tier=web", got.Count, got.Labels)
	}
}

// TestListsAdvance: a client that waits through the list sees the cluster
// and its nodes come up, exactly as one reading it directly does.
func TestListsAdvance(t *testing.T) {
	cases := []struct {
		name string
		read func(w *world, id string) (string, []string)
	}{
		{"get", func(w *world, id string) (string, []string) {
			c, _, err := w.do.Kubernetes.Get(t.Context(), id)
			if err != nil {
				t.Fatal(err)
			}
			return string(c.Status.State), nodeStates(c.NodePools)
		}},
		{"list", func(w *world, id string) (string, []string) {
			cs, _, err := w.do.Kubernetes.List(t.Context(), nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range cs {
				if c.ID == id {
					return string(c.Status.State), nodeStates(c.NodePools)
				}
			}
			t.Fatalf("cluster %s not listed", id)
			return "", nil
		}},
	}
	var seen [][]string
	for _, tc := range cases {
		w := newWorld(t, doemu.Options{}, wireAll)
		c, _, err := w.do.Kubernetes.Create(t.Context(), basicCreate("fa-"+tc.name))
		if err != nil {
			t.Fatal(err)
		}
		var states []string
		for range 4 {
			st, nodes := tc.read(w, c.ID)
			states = append(states, st+":"+strings.Join(nodes, ","))
		}
		if !strings.HasPrefix(states[3], "running:running") {
			t.Errorf("%s: states %v, want running with running nodes by the fourth read", tc.name, states)
		}
		seen = append(seen, states)
	}
	if strings.Join(seen[0], " ") != strings.Join(seen[1], " ") {
		t.Errorf("reading through the list went %v, directly %v", seen[1], seen[0])
	}
	// The node pool list advances the pool as a direct read of it does.
	w := newWorld(t, doemu.Options{}, wireAll)
	c := w.running(t, "fa-pools")
	two := 2
	if _, _, err := w.do.Kubernetes.UpdateNodePool(t.Context(), c.ID, c.NodePools[0].ID, &godo.KubernetesNodePoolUpdateRequest{Count: &two}); err != nil {
		t.Fatal(err)
	}
	var last []string
	for range 2 {
		ps, _, err := w.do.Kubernetes.ListNodePools(t.Context(), c.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		last = nodeStates(ps)
	}
	if strings.Join(last, ",") != "running,running" {
		t.Errorf("after two pool lists the nodes are %v", last)
	}
}

func nodeStates(pools []*godo.KubernetesNodePool) []string {
	var out []string
	for _, p := range pools {
		for _, n := range p.Nodes {
			out = append(out, n.Status.State)
		}
	}
	return out
}

// TestKubeconfig: the kubeconfig route answers YAML naming the cluster's
// server and CA with a token minted as the credentials route mints them,
// expiry_seconds honoured.
func TestKubeconfig(t *testing.T) {
	w := newWorld(t, doemu.Options{}, wireAll)
	ctx := t.Context()
	c := w.running(t, "fa-kc")
	cases := []struct {
		name   string
		expiry int64 // 0: the route without expiry_seconds
		life   time.Duration
	}{
		{"ten minutes", 600, 600 * time.Second},
		{"default seven days", 0, 7 * 24 * time.Hour},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var cfg *godo.KubernetesClusterConfig
			var err error
			if tc.expiry > 0 {
				cfg, _, err = w.do.Kubernetes.GetKubeConfigWithExpiry(ctx, c.ID, tc.expiry)
			} else {
				cfg, _, err = w.do.Kubernetes.GetKubeConfig(ctx, c.ID, nil)
			}
			if err != nil {
				t.Fatalf("kubeconfig: %v", err)
			}
			var kc struct {
				Kind     string `yaml:"kind"`
				Clusters []struct {
					Name    string `yaml:"name"`
					Cluster struct {
						Server string `yaml:"server"`
						CA     string `yaml:"certificate-authority-data"`
					} `yaml:"cluster"`
				} `yaml:"clusters"`
				Users []struct {
					Name string `yaml:"name"`
					User struct {
						Token string `yaml:"token"`
					} `yaml:"user"`
				} `yaml:"users"`
				Current string `yaml:"current-context"`
			}
			if err := yaml.Unmarshal(cfg.KubeconfigYAML, &kc); err != nil {
				t.Fatalf("not YAML: %v\n%s", err, cfg.KubeconfigYAML)
			}
			if kc.Kind != "Config" || len(kc.Clusters) != 1 || len(kc.Users) != 1 || kc.Current != "do-tor1-fa-kc" {
				t.Fatalf("kubeconfig %+v", kc)
			}
			ca, _ := base64.StdEncoding.DecodeString(kc.Clusters[0].Cluster.CA)
			if kc.Clusters[0].Cluster.Server != c.Endpoint || !bytes.Equal(ca, w.emu.CA()) {
				t.Errorf("server %s (want %s), CA equal %v", kc.Clusters[0].Cluster.Server, c.Endpoint, bytes.Equal(ca, w.emu.CA()))
			}
			tok := kc.Users[0].User.Token
			if !w.emu.Accepts(c.Endpoint, tok) {
				t.Fatal("the kubeconfig's token is not accepted")
			}
			w.clk.Advance(tc.life - time.Second)
			if !w.emu.Accepts(c.Endpoint, tok) {
				t.Error("the token expired early")
			}
			w.clk.Advance(time.Second)
			if w.emu.Accepts(c.Endpoint, tok) {
				t.Error("the token outlived its expiry")
			}
		})
	}
	if _, _, err := w.do.Kubernetes.GetKubeConfig(ctx, "00000000-0000-4000-8000-000000000000", nil); status(err) != 404 {
		t.Errorf("kubeconfig of an unknown cluster: %v, want 404", err)
	}
}

// TestDeleteNode: a node deleted with replace is made again (the count
// stays), one deleted without it lowers the count; skip_drain removes it at
// once, else it drains; an unknown node is 404.
func TestDeleteNode(t *testing.T) {
	w := newWorld(t, doemu.Options{}, wireAll)
	ctx := t.Context()
	c := w.running(t, "fa-nodes")
	poolID := c.NodePools[0].ID
	three := 3
	if _, _, err := w.do.Kubernetes.UpdateNodePool(ctx, c.ID, poolID, &godo.KubernetesNodePoolUpdateRequest{Count: &three}); err != nil {
		t.Fatal(err)
	}
	read := func() *godo.KubernetesNodePool {
		t.Helper()
		p, _, err := w.do.Kubernetes.GetNodePool(ctx, c.ID, poolID)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	_ = read() // the first read moves the pool on
	p := read()
	if len(p.Nodes) != 3 {
		t.Fatalf("%d nodes, want 3", len(p.Nodes))
	}
	cases := []struct {
		name        string
		req         *godo.KubernetesNodeDeleteRequest
		count       int
		nodesAtOnce int // the node list right after (a draining node is still listed)
	}{
		{"replace, drained", &godo.KubernetesNodeDeleteRequest{Replace: true}, 3, 4},
		{"delete, skip drain", &godo.KubernetesNodeDeleteRequest{SkipDrain: true}, 2, 2},
		{"delete, drained", &godo.KubernetesNodeDeleteRequest{}, 1, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := read()
			victim := p.Nodes[0]
			for _, n := range p.Nodes {
				if n.Status.State == "running" {
					victim = n
					break
				}
			}
			resp, err := w.do.Kubernetes.DeleteNode(ctx, c.ID, poolID, victim.ID, tc.req)
			if err != nil {
				t.Fatalf("DeleteNode: %v", err)
			}
			if resp.StatusCode != http.StatusAccepted {
				t.Errorf("answered %d, want 202", resp.StatusCode)
			}
			ps := w.emu.Clusters()[0].Pools[0]
			if ps.Count != tc.count || ps.Nodes != tc.nodesAtOnce {
				t.Errorf("count %d nodes %d, want %d and %d", ps.Count, ps.Nodes, tc.count, tc.nodesAtOnce)
			}
			for range 3 {
				p = read()
			}
			if len(p.Nodes) != tc.count || p.Count != tc.count {
				t.Errorf("settled: %d nodes, count %d, want %d", len(p.Nodes), p.Count, tc.count)
			}
			for _, n := range p.Nodes {
				if n.ID == victim.ID {
					t.Errorf("node %s still listed", victim.ID)
				}
			}
		})
	}
	// A replacement needs capacity for its new node while the old drains.
	w.emu.Stockout("s-2vcpu-4gb", "tor1", true)
	if _, err := w.do.Kubernetes.DeleteNode(ctx, c.ID, poolID, read().Nodes[0].ID, &godo.KubernetesNodeDeleteRequest{Replace: true}); status(err) != 422 {
		t.Errorf("replacing a node of a size out of stock: %v, want 422", err)
	}
	w.emu.Stockout("s-2vcpu-4gb", "tor1", false)
	if _, err := w.do.Kubernetes.DeleteNode(ctx, c.ID, poolID, "00000000-0000-4000-8000-000000000000", nil); status(err) != 404 {
		t.Errorf("deleting an unknown node: %v, want 404", err)
	}
	// The last node of a fixed-size pool cannot be deleted without
	// replacement, as such a pool cannot be resized to zero.
	p = read()
	if _, err := w.do.Kubernetes.DeleteNode(ctx, c.ID, poolID, p.Nodes[0].ID, nil); status(err) != 422 {
		t.Errorf("deleting the last node: %v, want 422", err)
	}
}

// TestSettingsUpdateByMember: an update changes the members of a settings
// object it gives and keeps the others, a null one included (doctl sends
// `"enabled":null` in a firewall it only changes the addresses of).
func TestSettingsUpdateByMember(t *testing.T) {
	w := newWorld(t, doemu.Options{}, answersOnly)
	ctx := t.Context()
	on := true
	req := basicCreate("fa-members")
	req.ControlPlaneFirewall = &godo.KubernetesControlPlaneFirewall{Enabled: &on, AllowedAddresses: []string{"10.0.0.0/8"}}
	req.RoutingAgent = &godo.KubernetesRoutingAgent{Enabled: &on}
	c, _, err := w.do.Kubernetes.Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, _, err := w.do.Kubernetes.Get(ctx, c.ID); err != nil {
			t.Fatal(err)
		}
	}
	st, body := w.raw(t, "PUT", "/v2/kubernetes/clusters/"+c.ID,
		`{"control_plane_firewall":{"enabled":null,"allowed_addresses":["10.1.0.0/16"]},"routing_agent":{"enabled":null}}`)
	if st != http.StatusAccepted {
		t.Fatalf("update answered %d %v", st, body)
	}
	got, _, err := w.do.Kubernetes.Get(ctx, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	fw := got.ControlPlaneFirewall
	if fw == nil || fw.Enabled == nil || !*fw.Enabled || len(fw.AllowedAddresses) != 1 || fw.AllowedAddresses[0] != "10.1.0.0/16" {
		t.Errorf("firewall %+v, want still enabled with the new address", fw)
	}
	if ra := got.RoutingAgent; ra == nil || ra.Enabled == nil || !*ra.Enabled {
		t.Errorf("routing agent %+v, want still enabled", ra)
	}
}
