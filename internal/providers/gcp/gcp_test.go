package gcp_test

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/providers/gcp"
	"github.com/fleet-agent/fleet-agent/internal/providers/gcp/gkeemu"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

func node(t *testing.T, src string) *yaml.Node {
	t.Helper()
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(src), &n); err != nil {
		t.Fatal(err)
	}
	return &n
}

// TestOpenStrict: the providers.gcp block is decoded strictly, through the
// registry as the binary does it.
func TestOpenStrict(t *testing.T) {
	reg := providers.NewRegistry()
	if err := reg.Register(providers.GCP, gcp.Factory()); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, block, want string
	}{
		{"defaults", "", ""},
		{"endpoints", "containerEndpoint: http://127.0.0.1:9/\ncomputeEndpoint: http://127.0.0.1:9/compute/v1", ""},
		{"unknown key", "containerEndpoint: https://x/\nzonez: [a]\n", `line 2: unknown key "zonez"`},
		{"unknown nested key", "systemNodePool:\n  machineType: e2-small\n  count: 2\n", `line 3: unknown key "systemNodePool.count"`},
		{"wrong type", "operationWait: { polls: many }\n", "line 1"},
		{"bad driver", "gpuDriverVersion: NEWEST\n", "gpuDriverVersion"},
		{"bad endpoint", "computeEndpoint: ftp://x/\n", "want an http(s) URL"},
		{"tiny system pool", "systemNodePool: { machineType: e2-small, nodeCount: 0, diskGiB: 50 }\n", "systemNodePool"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var block *yaml.Node
			if c.block != "" {
				block = node(t, c.block)
			}
			ad, err := reg.Open(providers.GCP, block, &secretStore{m: map[string]string{}})
			if c.want == "" {
				if err != nil || ad == nil {
					t.Fatalf("Open: %v", err)
				}
				cfg := ad.(*gcp.Adapter).Config()
				if !strings.HasSuffix(cfg.ComputeEndpoint, "/") || cfg.SystemNodePool.NodeCount != 1 || cfg.GPUDriverVersion != "DEFAULT" {
					t.Errorf("config %+v", cfg)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) || refusal.CodeOf(err) != refusal.InvalidInput {
				t.Errorf("want INVALID_INPUT containing %q, got %v (%s)", c.want, err, refusal.CodeOf(err))
			}
		})
	}
}

// TestAccountConfig: the account's config is checked before any call, and
// a refused one never echoes the credentials it was given.
func TestAccountConfig(t *testing.T) {
	v := newEnv(t, envOpts{})
	const canary = "CANARY-not-a-reference-7f3a"
	cases := []struct {
		name, config, reason string
	}{
		{"no project", `{"credentials":"secret://gke-key"}`, "accountConfig"},
		{"bad project", `{"projectId":"My_Project","credentials":"secret://gke-key"}`, "accountConfig"},
		{"bad zone", `{"projectId":"fa-emu-project","zones":["us-central1"],"credentials":"secret://gke-key"}`, "accountConfig"},
		{"unknown key", `{"projectId":"fa-emu-project","credentials":"secret://gke-key","region":"x"}`, "accountConfig"},
		{"no credentials", `{"projectId":"fa-emu-project"}`, "credentialsMissing"},
		{"both", `{"projectId":"fa-emu-project","credentials":"secret://gke-key","metadataServer":true}`, "accountConfig"},
		{"inline key", `{"projectId":"fa-emu-project","credentials":"{\"private_key\":\"` + canary + `\"}"}`, "secretInline"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := v.emu.Mark()
			acct := providers.Account{Name: "a", Provider: providers.GCP, Config: []byte(c.config)}
			err := v.ad.Verify(t.Context(), acct)
			if providers.ClassOf(err) != providers.Invalid || providers.ReasonOf(err) != c.reason || providers.SideEffectOf(err) != providers.None {
				t.Errorf("got %v (class %s reason %s)", err, providers.ClassOf(err), providers.ReasonOf(err))
			}
			if strings.Contains(fmt.Sprintf("%v %+v", err, err), canary) {
				t.Errorf("the error echoes the credentials: %v", err)
			}
			if n := v.emu.CountSince(before, "oauth2.token") + v.emu.CountSince(before, ""); n != 0 {
				t.Errorf("%d requests made for a config refused up front", n)
			}
		})
	}
}

// TestNoSDKRetries: a 429 and a 503 are each one request per attempt: the
// SDK does not retry, nor does the adapter. The 429's wait is read from
// the header or from the error's RetryInfo.
func TestNoSDKRetries(t *testing.T) {
	v := newEnv(t, envOpts{})
	c := v.ready(t, clusterSpec("fa-retry"))
	const get = "container.projects.locations.clusters.get"
	cases := []struct {
		name   string
		arm    func() error
		class  providers.Class
		wait   time.Duration
		method string
		call   func() error
	}{
		{"429 Retry-After", func() error { return v.emu.Throttle(get, 5, 7*time.Second, "header") }, providers.Throttled, 7 * time.Second, get,
			func() error { _, err := v.ad.GetCluster(t.Context(), v.acct, c.Ref); return err }},
		{"429 RetryInfo", func() error { return v.emu.Throttle(get, 5, 11*time.Second, "details") }, providers.Throttled, 11 * time.Second, get,
			func() error { _, err := v.ad.GetCluster(t.Context(), v.acct, c.Ref); return err }},
		{"429 silent", func() error { return v.emu.Throttle(get, 5, 0, "") }, providers.Throttled, 0, get,
			func() error { _, err := v.ad.GetCluster(t.Context(), v.acct, c.Ref); return err }},
		{"503", func() error { return v.emu.FailNext(get, 5, 503) }, providers.Unavailable, 0, get,
			func() error { _, err := v.ad.GetCluster(t.Context(), v.acct, c.Ref); return err }},
		{"503 on create", func() error { return v.emu.FailNext("container.projects.locations.clusters.create", 5, 503) }, providers.Unavailable, 0,
			"container.projects.locations.clusters.create",
			func() error {
				_, err := v.ad.EnsureCluster(t.Context(), v.acct, clusterSpec("fa-retry-new"))
				return err
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v.emu.ClearFaults()
			if err := tc.arm(); err != nil {
				t.Fatal(err)
			}
			for attempt := 1; attempt <= 2; attempt++ {
				before := v.emu.Mark()
				err := tc.call()
				if providers.ClassOf(err) != tc.class || providers.RetryAfterOf(err) != tc.wait {
					t.Fatalf("attempt %d: %v (class %s, retry after %s)", attempt, err, providers.ClassOf(err), providers.RetryAfterOf(err))
				}
				if n := v.emu.CountSince(before, tc.method); n != 1 {
					t.Errorf("attempt %d sent %d requests to %s, want 1", attempt, n, tc.method)
				}
			}
		})
	}
	v.emu.ClearFaults()
}

// TestErrorClasses: every kind of answer the emulator gives, as GKE gives
// it, maps to a class and a side effect.
func TestErrorClasses(t *testing.T) {
	v := newEnv(t, envOpts{emu: func(o *gkeemu.Options) { o.Steps = gkeemu.Steps{Cluster: 1, NodePool: 3, Update: 1, Delete: 1} }})
	ctx := t.Context()
	c := v.ready(t, clusterSpec("fa-errors"))
	v.readyPool(t, c.Ref, cpuPool("fa-aaaaaa-cpu"))
	theirs, err := v.emu.Seed(gkeemu.SeedCluster{Location: "us-central1", Name: "theirs", Pools: []gkeemu.SeedPool{{Name: "default-pool", MachineType: "e2-standard-4", NodeCount: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	theirRef := providers.ClusterRef{ID: theirs}
	stranger, _ := v.emu.AddServiceAccount("stranger@elsewhere.iam.gserviceaccount.com", "another-project")
	v.secrets.set("secret://stranger", string(stranger))
	v.secrets.set("secret://not-a-key", `{"type":"authorized_user"}`)
	v.secrets.set("secret://unreachable", strings.Replace(v.key, v.emu.TokenURI(), "http://127.0.0.1:1/token", 1))
	deleted, _ := v.emu.AddServiceAccount("deleted@fa-emu-project.iam.gserviceaccount.com", project)
	v.secrets.set("secret://deleted", string(deleted))
	v.emu.DeleteKeys("deleted@fa-emu-project.iam.gserviceaccount.com")
	with := func(ref string) providers.Account {
		return account("other", project, []string{"us-central1-a", "us-central1-b"}, ref)
	}

	cases := []struct {
		name   string
		call   func() error
		class  providers.Class
		side   providers.SideEffect
		reason string
	}{
		{"missing cluster", func() error {
			_, err := v.ad.GetCluster(ctx, v.acct, providers.ClusterRef{Location: "us-central1", Name: "nope"})
			return err
		}, providers.NotFound, providers.None, ""},
		{"missing pool", func() error { _, err := v.ad.GetNodePool(ctx, v.acct, c.Ref, "nope"); return err }, providers.NotFound, providers.None, ""},
		{"cluster busy (FAILED_PRECONDITION)", func() error {
			if _, err := v.ad.EnsureNodePool(ctx, v.acct, c.Ref, cpuPool("fa-aaaaaa-one")); err != nil {
				return fmt.Errorf("first: %w", err)
			}
			_, err := v.ad.EnsureNodePool(ctx, v.acct, c.Ref, cpuPool("fa-aaaaaa-two"))
			return err
		}, providers.Conflict, providers.None, "busy"},
		{"unsupported version (INVALID_ARGUMENT)", func() error {
			s := clusterSpec("fa-errors-v")
			s.Version = "1.99"
			_, err := v.ad.EnsureCluster(ctx, v.acct, s)
			return err
		}, providers.Invalid, providers.None, "invalidArgument"},
		{"machine type missing (adapter's check)", func() error {
			p := cpuPool("fa-aaaaaa-bad")
			p.MachineType = "z9-huge"
			_, err := v.ad.EnsureNodePool(ctx, v.acct, c.Ref, p)
			return err
		}, providers.Invalid, providers.None, "machineType"},
		{"quota (403)", func() error {
			v.emu.SetQuota("europe-west4", "CPUS", 1)
			s := clusterSpec("fa-errors-q")
			s.Location = "europe-west4"
			_, err := v.ad.EnsureCluster(ctx, account("eu", project, []string{"europe-west4-a"}, keyRef), s)
			return err
		}, providers.Terminal, providers.None, "quota"},
		{"permission (403)", func() error { return v.ad.Verify(ctx, with("secret://stranger")) }, providers.Terminal, providers.None, "permissionDenied"},
		{"deleted key (invalid_grant)", func() error { return v.ad.Verify(ctx, with("secret://deleted")) }, providers.Terminal, providers.None, "credentialsRefused"},
		{"secret missing", func() error { return v.ad.Verify(ctx, with("secret://nowhere")) }, providers.Terminal, providers.None, "secretMissing"},
		{"not a service account key", func() error { return v.ad.Verify(ctx, with("secret://not-a-key")) }, providers.Terminal, providers.None, "credentialsRefused"},
		{"token endpoint unreachable", func() error { return v.ad.Verify(ctx, with("secret://unreachable")) }, providers.Unavailable, providers.None, ""},
		{"500 on a mutation", func() error {
			_ = v.emu.FailNext("container.projects.locations.clusters.create", 1, 500)
			_, err := v.ad.EnsureCluster(ctx, v.acct, clusterSpec("fa-errors-500"))
			return err
		}, providers.Unavailable, providers.Maybe, ""},
		{"503 on a read", func() error {
			_ = v.emu.FailNext("container.projects.locations.clusters.get", 1, 503)
			_, err := v.ad.GetCluster(ctx, v.acct, c.Ref)
			return err
		}, providers.Unavailable, providers.None, ""},
		{"answer lost on a mutation", func() error {
			_ = v.emu.DropAfterActing("container.projects.locations.clusters.create", 1)
			_, err := v.ad.EnsureCluster(ctx, v.acct, clusterSpec("fa-errors-lost"))
			return err
		}, providers.Unknown, providers.Maybe, ""},
		{"answer lost on a read", func() error {
			// net/http itself replays a GET once when a reused keep-alive
			// connection closes before any answer (not a retry of an
			// answer): drop the replay too.
			_ = v.emu.DropAfterActing("container.projects.locations.clusters.get", 2)
			defer v.emu.ClearFaults()
			_, err := v.ad.GetCluster(ctx, v.acct, c.Ref)
			return err
		}, providers.Unavailable, providers.None, ""},
		{"etag moved (409 ABORTED)", func() error {
			_ = v.emu.FailNext("container.projects.locations.clusters.nodePools.update", 1, 409)
			p := cpuPool("fa-aaaaaa-cpu")
			p.Labels = map[string]string{providers.LabelSubstratePool: poolID, "x": "y"}
			for range 10 { // the busy case above may still run
				_, err := v.ad.EnsureNodePool(ctx, v.acct, c.Ref, p)
				if providers.ReasonOf(err) != "busy" {
					return err
				}
				_, _ = v.ad.ListNodePools(ctx, v.acct, c.Ref)
			}
			return errors.New("still busy")
		}, providers.Conflict, providers.None, "changed"},
		{"shape change", func() error {
			p := cpuPool("fa-aaaaaa-cpu")
			p.Spot = true
			_, err := v.ad.EnsureNodePool(ctx, v.acct, c.Ref, p)
			return err
		}, providers.Invalid, providers.None, "shapeChange"},
		{"mode change", func() error {
			s := clusterSpec("fa-errors")
			s.PrivateNodes = true
			_, err := v.ad.EnsureCluster(ctx, v.acct, s)
			return err
		}, providers.Invalid, providers.None, "modeChange"},
		{"downgrade", func() error {
			s := clusterSpec("fa-errors")
			s.Version = "1.33"
			_, err := v.ad.EnsureCluster(ctx, v.acct, s)
			return err
		}, providers.Invalid, providers.None, "downgrade"},
		{"adopted cluster is never deleted", func() error { _, err := v.ad.DeleteCluster(ctx, v.acct, theirRef); return err }, providers.Invalid, providers.None, "notOurs"},
		{"the owner's pool is never deleted", func() error {
			_, err := v.ad.DeleteNodePool(ctx, v.acct, theirRef, "default-pool")
			return err
		}, providers.Invalid, providers.None, "notOurs"},
		{"name taken by a cluster that is not ours", func() error {
			_, err := v.ad.EnsureCluster(ctx, v.acct, clusterSpec("theirs"))
			return err
		}, providers.Terminal, providers.None, "nameTaken"},
		{"bad adopt id", func() error { _, err := v.ad.ReadAdoptable(ctx, v.acct, "theirs"); return err }, providers.Invalid, providers.None, "adoptID"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if providers.ClassOf(err) != tc.class || providers.SideEffectOf(err) != tc.side || (tc.reason != "" && providers.ReasonOf(err) != tc.reason) {
				t.Errorf("got %v\n(class %s side %s reason %q), want %s %s %q", err, providers.ClassOf(err), providers.SideEffectOf(err), providers.ReasonOf(err), tc.class, tc.side, tc.reason)
			}
			if tc.class == providers.NotFound && !errors.Is(err, providers.ErrNotFound) {
				t.Errorf("a NotFound that is not ErrNotFound: %v", err)
			}
		})
	}
}

// TestLostAnswers: a create whose answer was lost after GKE acted is found
// by name on the next call, never made twice.
func TestLostAnswers(t *testing.T) {
	v := newEnv(t, envOpts{})
	ctx := t.Context()
	const createCluster = "container.projects.locations.clusters.create"
	if err := v.emu.DropAfterActing(createCluster, 1); err != nil {
		t.Fatal(err)
	}
	spec := clusterSpec("fa-lost")
	_, err := v.ad.EnsureCluster(ctx, v.acct, spec)
	if providers.SideEffectOf(err) != providers.Maybe || !providers.Retryable(err) {
		t.Fatalf("lost answer: %v", err)
	}
	c, err := v.ad.EnsureCluster(ctx, v.acct, spec)
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	if n := v.emu.Count(createCluster); n != 1 {
		t.Errorf("%d creates sent, want the 1 whose answer was lost", n)
	}
	for range 10 {
		if c, err = v.ad.GetCluster(ctx, v.acct, c.Ref); err == nil && c.Status == providers.ClusterRunning {
			break
		}
	}

	const createPool = "container.projects.locations.clusters.nodePools.create"
	if err := v.emu.DropAfterActing(createPool, 1); err != nil {
		t.Fatal(err)
	}
	pool := gpuPool("fa-aaaaaa-gpu")
	if _, err := v.ad.EnsureNodePool(ctx, v.acct, c.Ref, pool); providers.SideEffectOf(err) != providers.Maybe {
		t.Fatalf("lost pool answer: %v", err)
	}
	if _, err := v.ad.EnsureNodePool(ctx, v.acct, c.Ref, pool); err != nil {
		t.Fatalf("pool retry: %v", err)
	}
	if n := v.emu.Count(createPool); n != 1 {
		t.Errorf("%d node pool creates sent, want 1", n)
	}
	pools, err := v.ad.ListNodePools(ctx, v.acct, c.Ref)
	if err != nil || len(pools) != 2 { // ours and the system pool
		t.Errorf("pools after a lost answer: %+v %v", pools, err)
	}

	// A resize whose answer is lost: the retry sees the new size and
	// sends nothing.
	p := v.readyPool(t, c.Ref, pool)
	const setSize = "container.projects.locations.clusters.nodePools.setSize"
	if err := v.emu.DropAfterActing(setSize, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := v.ad.ResizeNodePool(ctx, v.acct, c.Ref, p.Name, providers.Size{NodeCount: 3}); providers.SideEffectOf(err) != providers.Maybe {
		t.Fatalf("lost resize answer: %v", err)
	}
	v.emu.Advance()
	if _, err := v.ad.ResizeNodePool(ctx, v.acct, c.Ref, p.Name, providers.Size{NodeCount: 3}); err != nil {
		t.Fatalf("resize retry: %v", err)
	}
	if n := v.emu.Count(setSize); n != 1 {
		t.Errorf("%d setSize sent, want 1", n)
	}
}

// TestRequestsPerStep counts what each call sends: one token fetch, and
// the API requests listed.
func TestRequestsPerStep(t *testing.T) {
	v := newEnv(t, envOpts{emu: func(o *gkeemu.Options) { o.Steps = gkeemu.Synchronous }})
	ctx := t.Context()
	var ref providers.ClusterRef
	noZones := account("nozones", project, []string{}, keyRef)
	steps := []struct {
		name string
		api  int
		call func() error
	}{
		{"Verify: serverConfig", 1, func() error { return v.ad.Verify(ctx, v.acct) }},
		{"Rules: none", 0, func() error { _, err := v.ad.Rules(ctx, v.acct); return err }},
		{"Locations: regions.list", 1, func() error { _, err := v.ad.Locations(ctx, v.acct); return err }},
		{"MachineType at a region, two account zones: machineTypes.get x2", 2, func() error {
			_, err := v.ad.MachineType(ctx, v.acct, "us-central1", "a3-highgpu-8g")
			return err
		}},
		{"MachineType at a region, no account zones: regions.get, machineTypes.get x3", 4, func() error {
			_, err := v.ad.MachineType(ctx, noZones, "us-central1", "a3-highgpu-8g")
			return err
		}},
		{"EnsureCluster, new: clusters.get (404), clusters.create", 2, func() error {
			c, err := v.ad.EnsureCluster(ctx, v.acct, clusterSpec("fa-count"))
			ref = c.Ref
			return err
		}},
		{"GetCluster: clusters.get", 1, func() error { _, err := v.ad.GetCluster(ctx, v.acct, ref); return err }},
		{"EnsureCluster, unchanged: clusters.get", 1, func() error { _, err := v.ad.EnsureCluster(ctx, v.acct, clusterSpec("fa-count")); return err }},
		{"EnsureNodePool, new: nodePools.get (404), clusters.get, machineTypes.get, nodePools.create", 4, func() error {
			_, err := v.ad.EnsureNodePool(ctx, v.acct, ref, gpuPool("fa-aaaaaa-gpu"))
			return err
		}},
		{"GetNodePool over two zones: nodePools.get, instanceGroupManagers.get x2", 3, func() error {
			_, err := v.ad.GetNodePool(ctx, v.acct, ref, "fa-aaaaaa-gpu")
			return err
		}},
		{"EnsureNodePool, unchanged: nodePools.get, instanceGroupManagers.get x2", 3, func() error {
			_, err := v.ad.EnsureNodePool(ctx, v.acct, ref, gpuPool("fa-aaaaaa-gpu"))
			return err
		}},
		{"ResizeNodePool, fixed to fixed: nodePools.get, igm.get x2, setSize", 4, func() error {
			_, err := v.ad.ResizeNodePool(ctx, v.acct, ref, "fa-aaaaaa-gpu", providers.Size{NodeCount: 2})
			return err
		}},
		{"ResizeNodePool, to autoscaling with another count: nodePools.get, igm.get x2, setSize, setAutoscaling", 5, func() error {
			_, err := v.ad.ResizeNodePool(ctx, v.acct, ref, "fa-aaaaaa-gpu", providers.Size{NodeCount: 1, Autoscaling: &providers.Autoscaling{MinNodes: 1, MaxNodes: 3}})
			return err
		}},
		{"ListNodePools, two pools: nodePools.list, igm.get x3 (system pool 1 zone, ours 2)", 4, func() error {
			_, err := v.ad.ListNodePools(ctx, v.acct, ref)
			return err
		}},
		{"Credentials: clusters.get", 1, func() error { _, err := v.ad.Credentials(ctx, v.acct, ref); return err }},
		{"ListClusters: clusters.list over every location, operations.list for the node pool revision of ours", 2, func() error {
			_, err := v.ad.ListClusters(ctx, v.acct, providers.LabelSubstratePool)
			return err
		}},
		{"DeleteNodePool: nodePools.get, nodePools.delete", 2, func() error {
			_, err := v.ad.DeleteNodePool(ctx, v.acct, ref, "fa-aaaaaa-gpu")
			return err
		}},
		{"DeleteCluster: clusters.get, clusters.delete", 2, func() error { _, err := v.ad.DeleteCluster(ctx, v.acct, ref); return err }},
	}
	for _, st := range steps {
		before := v.emu.Mark()
		if err := st.call(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		api, tokens := v.emu.CountSince(before, ""), v.emu.CountSince(before, "oauth2.token")
		wantTokens := 1
		if st.api == 0 {
			wantTokens = 0
		}
		if api != st.api || tokens != wantTokens {
			t.Errorf("%s: %d API requests and %d token fetches, want %d and %d", st.name, api, tokens, st.api, wantTokens)
		}
	}
}

// recordingTransport keeps every bearer token the adapter sent.
type recordingTransport struct {
	mu     sync.Mutex
	tokens []string
}

func (r *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if tok, ok := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer "); ok {
		r.mu.Lock()
		r.tokens = append(r.tokens, tok)
		r.mu.Unlock()
	}
	return http.DefaultTransport.RoundTrip(req)
}

// TestCanary: the key (the secret) and every token the adapter fetched
// appear nowhere in what it returns or in its errors, except the
// credential's Token field.
func TestCanary(t *testing.T) {
	rec := &recordingTransport{}
	v := newEnv(t, envOpts{options: []gcp.Option{gcp.WithHTTPClient(&http.Client{Transport: rec})}})
	ctx := t.Context()
	// Distinctive pieces of the secret value: a line of the private key and
	// its id.
	lines := strings.Split(v.key, `\n`)
	secretBits := []string{lines[len(lines)/2], v.key[strings.Index(v.key, `"private_key_id": "`)+19:][:40]}
	v.secrets.set("secret://broken", strings.Replace(v.key, `"type": "service_account"`, `"type": "bogus"`, 1))
	v.secrets.set("secret://garbage", `{"private_key": "`+secretBits[0]+`", unterminated`)

	var outputs []any
	note := func(out any, err error) {
		outputs = append(outputs, out)
		for e := err; e != nil; e = errors.Unwrap(e) {
			outputs = append(outputs, e.Error(), fmt.Sprintf("%+v", e))
		}
	}
	c, err := v.ad.EnsureCluster(ctx, v.acct, clusterSpec("fa-canary"))
	note(c, err)
	c = v.ready(t, clusterSpec("fa-canary"))
	note(v.ad.GetCluster(ctx, v.acct, c.Ref))
	note(v.ad.ListClusters(ctx, v.acct, providers.LabelSubstratePool))
	note(v.ad.EnsureNodePool(ctx, v.acct, c.Ref, gpuPool("fa-aaaaaa-gpu")))
	note(v.ad.ListNodePools(ctx, v.acct, c.Ref))
	note(v.ad.Locations(ctx, v.acct))
	note(v.ad.MachineType(ctx, v.acct, "us-central1", "nope"))
	note(nil, v.ad.Verify(ctx, account("x", project, nil, "secret://broken")))
	note(nil, v.ad.Verify(ctx, account("x", project, nil, "secret://garbage")))
	note(nil, v.ad.Verify(ctx, account("x", project, nil, secretBits[0])))
	note(v.ad.EnsureCluster(ctx, v.acct, providers.ClusterSpec{Name: "fa-canary", Location: "us-central1", PrivateNodes: true}))
	_ = v.emu.FailNext("", 1, 500)
	note(v.ad.GetCluster(ctx, v.acct, c.Ref))
	_ = v.emu.DropAfterActing("container.projects.locations.clusters.get", 2)
	note(v.ad.GetCluster(ctx, v.acct, c.Ref))
	v.emu.ClearFaults()
	cred, err := v.ad.Credentials(ctx, v.acct, c.Ref)
	if err != nil || cred.Token == "" {
		t.Fatalf("Credentials: %v", err)
	}
	outputs = append(outputs, cred.String(), fmt.Sprintf("%v %+v %#v", cred, cred, cred))
	note(nil, v.ad.RevokeAccess(ctx, v.acct, c.Ref))

	rec.mu.Lock()
	tokens := append([]string(nil), rec.tokens...)
	rec.mu.Unlock()
	if len(tokens) < 10 {
		t.Fatalf("only %d tokens seen: the test is not looking", len(tokens))
	}
	text := fmt.Sprintf("%+v", outputs)
	for _, s := range append(secretBits, tokens...) {
		if strings.Contains(text, s) {
			t.Errorf("a secret or token appears in the adapter's output: %.12s...", s)
		}
	}
	if !bytes.Contains([]byte(cred.Token), []byte("ya29.")) {
		t.Errorf("the credential carries no token")
	}
}
