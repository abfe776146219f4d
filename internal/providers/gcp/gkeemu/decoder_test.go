package gkeemu_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// raw sends one request as a client that is not the Go SDK would, with a
// token from the emulator's token endpoint.
func (v *env) raw(t *testing.T, method, path, body string) (int, map[string]any) {
	t.Helper()
	code, tb := postToken(t, v.emu.TokenURI(), signAssertion(t, v.key, "https://oauth2.googleapis.com/token", false))
	if code != 200 {
		t.Fatal(code, tb)
	}
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	_ = json.Unmarshal([]byte(tb), &tok)
	req, _ := http.NewRequest(method, v.emu.URL()+"/v1/"+path, bytes.NewBufferString(body))
	req.Header.Set("Authorization", "Bearer "+tok.AccessToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	return resp.StatusCode, m
}

// awaitRunning polls a cluster until RUNNING, failing after ten reads.
func (v *env) awaitRunning(t *testing.T, loc, name string) {
	t.Helper()
	for range 10 {
		if _, cl := v.raw(t, "GET", parent(loc)+"/clusters/"+name, ""); cl["status"] == "RUNNING" {
			return
		}
	}
	t.Fatalf("cluster %s not RUNNING after 10 reads", name)
}

// dig follows a path of keys and list indexes through decoded JSON.
func dig(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			l, _ := v.([]any)
			if k >= len(l) {
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

// TestDecoderTakesDocumentedFields: a create or update may carry any field
// container/v1 documents for it. Modelled fields act, accepted ones come
// back, output-only ones are ignored, the rest are refused naming the field
// unless they hold their default; names the document lacks are refused as
// Google's parser refuses them.
func TestDecoderTakesDocumentedFields(t *testing.T) {
	const gcloudBody = `{"cluster": {"name": "c1", "nodePools": [{"config": {"oauthScopes": ["https://www.googleapis.com/auth/devstorage.read_only", "https://www.googleapis.com/auth/logging.write"]}, "initialNodeCount": 1, "management": {"autoRepair": true, "autoUpgrade": true}, "name": "default-pool", "upgradeSettings": {"maxSurge": 1}}]}, "parent": "projects/fa-emu-project/locations/us-central1-a"}`
	type check struct {
		path []any
		want string // JSON of the value at path in the cluster as GET answers it
	}
	cases := []struct {
		name    string
		body    string
		code    int
		errSub  string // in the error message
		checks  []check
		poolReq string // a node pool create sent after the cluster runs
		poolErr string
		pool    []check // of the pool as GET answers it
	}{
		{name: "gcloud's create", body: gcloudBody, code: 200, checks: []check{
			{[]any{"nodePools", 0, "upgradeSettings", "maxSurge"}, `1`},
			{[]any{"nodePools", 0, "management"}, `{"autoRepair":true,"autoUpgrade":true}`},
			{[]any{"nodePools", 0, "config", "oauthScopes", 1}, `"https://www.googleapis.com/auth/logging.write"`},
		}},
		{name: "initialNodeCount alone makes default-pool", code: 200,
			body: `{"cluster":{"name":"c1","initialNodeCount":2,"nodeConfig":{"machineType":"e2-standard-4","diskSizeGb":50,"tags":["web"]}}}`,
			checks: []check{
				{[]any{"nodePools", 0, "name"}, `"default-pool"`},
				{[]any{"nodePools", 0, "initialNodeCount"}, `2`},
				{[]any{"nodePools", 0, "config", "machineType"}, `"e2-standard-4"`},
				{[]any{"nodePools", 0, "config", "tags"}, `["web"]`},
				{[]any{"currentNodeCount"}, `2`},
				{[]any{"initialNodeCount"}, `2`},
				{[]any{"nodeConfig", "machineType"}, `"e2-standard-4"`},
			}},
		{name: "accepted and returned, and modelled", code: 200,
			body: `{"cluster":{"name":"c1","description":"d","initialNodeCount":1,"loggingService":"none","monitoringService":"monitoring.googleapis.com/kubernetes","releaseChannel":{"channel":"STABLE"},"ipAllocationPolicy":{"useIpAliases":true,"clusterIpv4CidrBlock":"/14"},"locations":["us-central1-a","us-central1-b"],"privateClusterConfig":{"enablePrivateNodes":true,"masterIpv4CidrBlock":"172.16.0.0/28"}}}`,
			checks: []check{
				{[]any{"description"}, `"d"`},
				{[]any{"loggingService"}, `"none"`},
				{[]any{"releaseChannel", "channel"}, `"STABLE"`},
				{[]any{"ipAllocationPolicy"}, `{"clusterIpv4CidrBlock":"/14","useIpAliases":true}`},
				{[]any{"locations"}, `["us-central1-a","us-central1-b"]`},
				{[]any{"privateClusterConfig", "masterIpv4CidrBlock"}, `"172.16.0.0/28"`},
				{[]any{"privateClusterConfig", "enablePrivateNodes"}, `true`},
			}},
		{name: "documented, not modelled, default", code: 200,
			body: `{"cluster":{"name":"c1","initialNodeCount":1,"enableKubernetesAlpha":false,"shieldedNodes":{"enabled":false},"autopilot":{},"nodePools":[]}}`},
		{name: "output-only fields are ignored", code: 200,
			body:   `{"cluster":{"name":"c1","initialNodeCount":1,"status":"ERROR","selfLink":"x"}}`,
			checks: []check{{[]any{"status"}, `"PROVISIONING"`}}},
		{name: "documented, not modelled, set", code: 400, errSub: "'cluster.enable_tpu': true",
			body: `{"cluster":{"name":"c1","initialNodeCount":1,"enableTpu":true}}`},
		{name: "nested, not modelled", code: 400, errSub: "'cluster.node_pools[1].config.local_ssd_count': 2",
			body: `{"cluster":{"name":"c1","nodePools":[{"name":"a","initialNodeCount":1},{"name":"b","initialNodeCount":1,"config":{"localSsdCount":2}}]}}`},
		{name: "unknown name", code: 400, errSub: `Unknown name "bogus" at 'cluster.node_pools[0]': Cannot find field.`,
			body: `{"cluster":{"name":"c1","nodePools":[{"name":"a","initialNodeCount":1,"bogus":1}]}}`},
		{name: "unknown name inside an accepted object", code: 400, errSub: `Unknown name "nope" at 'cluster.ip_allocation_policy'`,
			body: `{"cluster":{"name":"c1","initialNodeCount":1,"ipAllocationPolicy":{"nope":true}}}`},
		{name: "wrong type", code: 400, errSub: `Invalid value at 'cluster.initial_node_count' (TYPE_INT32), "abc"`,
			body: `{"cluster":{"name":"c1","initialNodeCount":"abc"}}`},
		{name: "both nodePools and initialNodeCount", code: 400, errSub: "cluster.initial_node_count",
			body: `{"cluster":{"name":"c1","initialNodeCount":1,"nodePools":[{"name":"a","initialNodeCount":1}]}}`},
		{name: "node pool with upgrade settings and management", body: gcloudBody, code: 200,
			poolReq: `{"nodePool":{"name":"p2","initialNodeCount":1,"management":{"autoRepair":false,"autoUpgrade":true},"upgradeSettings":{"maxSurge":0,"maxUnavailable":2},"maxPodsConstraint":{"maxPodsPerNode":"32"},"config":{"metadata":{"k":"v"},"serviceAccount":"sa@x.iam.gserviceaccount.com"}}}`,
			pool: []check{
				{[]any{"management"}, `{"autoRepair":false,"autoUpgrade":true}`},
				{[]any{"upgradeSettings"}, `{"maxSurge":0,"maxUnavailable":2,"strategy":"SURGE"}`},
				{[]any{"maxPodsConstraint", "maxPodsPerNode"}, `"32"`},
				{[]any{"podIpv4CidrSize"}, `26`},
				{[]any{"config", "metadata", "k"}, `"v"`},
				{[]any{"config", "serviceAccount"}, `"sa@x.iam.gserviceaccount.com"`},
			}},
		{name: "node pool field not modelled", body: gcloudBody, code: 200,
			poolReq: `{"nodePool":{"name":"p2","initialNodeCount":1,"queuedProvisioning":{"enabled":true}}}`,
			poolErr: "'node_pool.queued_provisioning': {\"enabled\":true}"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := start(t, nil)
			code, out := v.raw(t, "POST", parent("us-central1-a")+"/clusters", c.body)
			if code != c.code {
				t.Fatalf("create: %d %s", code, js(out))
			}
			if c.errSub != "" {
				if msg, _ := dig(out, "error", "message").(string); !strings.Contains(msg, c.errSub) || dig(out, "error", "status") != "INVALID_ARGUMENT" {
					t.Fatalf("create error %s, want INVALID_ARGUMENT with %q", js(out), c.errSub)
				}
				return
			}
			_, cl := v.raw(t, "GET", parent("us-central1-a")+"/clusters/c1", "")
			for _, ch := range c.checks {
				if got := js(dig(cl, ch.path...)); got != ch.want {
					t.Errorf("cluster %v = %s, want %s", ch.path, got, ch.want)
				}
			}
			if c.poolReq == "" {
				return
			}
			v.awaitRunning(t, "us-central1-a", "c1")
			code, out = v.raw(t, "POST", parent("us-central1-a")+"/clusters/c1/nodePools", c.poolReq)
			if c.poolErr != "" {
				if msg, _ := dig(out, "error", "message").(string); code != 400 || !strings.Contains(msg, c.poolErr) {
					t.Fatalf("pool create: %d %s, want 400 with %q", code, js(out), c.poolErr)
				}
				return
			}
			if code != 200 {
				t.Fatalf("pool create: %d %s", code, js(out))
			}
			_, p := v.raw(t, "GET", parent("us-central1-a")+"/clusters/c1/nodePools/p2", "")
			for _, ch := range c.pool {
				if got := js(dig(p, ch.path...)); got != ch.want {
					t.Errorf("pool %v = %s, want %s", ch.path, got, ch.want)
				}
			}
		})
	}
}

// TestUpdateRefusesUnmodelledFields: a documented ClusterUpdate field the
// emulator does not model is refused by name, not as an unknown field.
func TestUpdateRefusesUnmodelledFields(t *testing.T) {
	v := start(t, nil)
	v.raw(t, "POST", parent("us-central1-a")+"/clusters", `{"cluster":{"name":"c1","initialNodeCount":1}}`)
	v.awaitRunning(t, "us-central1-a", "c1")
	code, out := v.raw(t, "PUT", parent("us-central1-a")+"/clusters/c1", `{"update":{"desiredLocations":["us-central1-b"]}}`)
	msg, _ := dig(out, "error", "message").(string)
	if code != 400 || !strings.Contains(msg, "'update.desired_locations'") || strings.Contains(msg, "Unknown name") {
		t.Fatalf("%d %s", code, js(out))
	}
}
