package gcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/providers/gcp"
	"github.com/fleet-agent/fleet-agent/internal/providers/gcp/gkeemu"
	goldenfile "github.com/fleet-agent/fleet-agent/internal/testutil/golden"
)

// golden compares got with testdata/name; -update writes got there first
// (review the diff before committing it).
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	goldenfile.Check(t, filepath.Join("testdata", name), got)
}

func indent(t *testing.T, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		t.Fatal(err)
	}
	return append(out.Bytes(), '\n')
}

// lastBody is the request body of the last exchange of a method.
func (v *env) lastBody(t *testing.T, method string) []byte {
	t.Helper()
	xs := v.emu.Exchanges()
	for i := len(xs) - 1; i >= 0; i-- {
		if xs[i].MethodID == method {
			return xs[i].RequestBody
		}
	}
	t.Fatalf("no %s sent", method)
	return nil
}

// TestWireBodies: what the adapter asks of GKE, byte for byte: a regional
// cluster with its system pool and our labels encoded, and an H100 Spot
// pool with its accelerators, driver and autoscaling from zero.
func TestWireBodies(t *testing.T) {
	v := newEnv(t, envOpts{})
	ctx := t.Context()
	spec := clusterSpec("fa-gpu-fleet-abcdef")
	spec.Version = "1.34"
	c := v.ready(t, spec)
	golden(t, "create-cluster.json", indent(t, v.lastBody(t, "container.projects.locations.clusters.create")))
	pool := gpuPool("fa-abcdef-h100")
	pool.Spot, pool.Labels = true, testOwner(poolID).PoolLabels(true)
	pool.DiskGiB, pool.Zones = 200, []string{"us-central1-b"}
	pool.NodeCount, pool.Autoscaling = 0, &providers.Autoscaling{MinNodes: 0, MaxNodes: 2}
	p := v.readyPool(t, c.Ref, pool)
	golden(t, "create-node-pool-h100-spot.json", indent(t, v.lastBody(t, "container.projects.locations.clusters.nodePools.create")))
	if !p.Spot || p.Accelerators == nil || *p.Accelerators != *pool.Accelerators || p.DiskGiB != 200 || p.Autoscaling == nil || p.Autoscaling.MaxNodes != 2 {
		t.Errorf("pool read back: %+v", p)
	}
	if _, err := v.ad.ResizeNodePool(ctx, v.acct, c.Ref, p.Name, providers.Size{NodeCount: 0}); err != nil {
		t.Fatal(err)
	}
	// Autoscaling off is sent as {} (Enabled false is left out).
	if b := v.lastBody(t, "container.projects.locations.clusters.nodePools.setAutoscaling"); string(b) != `{"autoscaling":{}}`+"\n" && string(b) != `{"autoscaling":{}}` {
		t.Errorf("autoscaling off sent as %s", b)
	}
}

// TestLabelsAtGKE: the resource label GKE holds is the encoded key; every
// read gives this project's key back; the system pool carries the pool's
// resource labels but no node labels, so the node daemon never lands on it.
func TestLabelsAtGKE(t *testing.T) {
	v := newEnv(t, envOpts{emu: func(o *gkeemu.Options) { o.Steps = gkeemu.Synchronous }})
	ctx := t.Context()
	spec := clusterSpec("fa-labels")
	spec.Labels["fleet-agent.dev/odd_key"] = "v_1"
	c := v.ready(t, spec)
	body := string(v.lastBody(t, "container.projects.locations.clusters.create"))
	for _, k := range []string{`"fleet-agent_ddev_ssubstrate-pool":"` + poolID + `"`, `"fleet-agent_ddev_sodd__key":"v_1"`} {
		if !strings.Contains(body, k) {
			t.Errorf("create body lacks %s: %s", k, body)
		}
	}
	if c.Labels[providers.LabelSubstratePool] != poolID || c.Labels["fleet-agent.dev/odd_key"] != "v_1" {
		t.Errorf("labels read back %v", c.Labels)
	}
	listed, err := v.ad.ListClusters(ctx, v.acct, "fleet-agent.dev/odd_key")
	if err != nil || len(listed) != 1 || listed[0].Labels[providers.LabelSubstratePool] != poolID {
		t.Errorf("ListClusters by the odd key: %+v %v", listed, err)
	}
	pools, err := v.ad.ListNodePools(ctx, v.acct, c.Ref)
	if err != nil || len(pools) != 1 || pools[0].Name != gcp.SystemPoolName || len(pools[0].Labels) != 0 || pools[0].NodeCount != 1 || len(pools[0].Zones) != 1 {
		t.Errorf("system pool: %+v %v", pools, err)
	}
	bad := clusterSpec("fa-labels-bad")
	bad.Labels["Team"] = "x"
	if _, err := v.ad.EnsureCluster(ctx, v.acct, bad); providers.ReasonOf(err) != "label" {
		t.Errorf("an uppercase label key: %v", err)
	}
	// An owner's labels on the cluster survive our labels being set.
	spec.Labels[providers.LabelCapacity] = "spot"
	if _, err := v.ad.EnsureCluster(ctx, v.acct, spec); err != nil {
		t.Fatal(err)
	}
	sent := string(v.lastBody(t, "container.projects.locations.clusters.setResourceLabels"))
	if !strings.Contains(sent, `"fleet-agent_ddev_scapacity":"spot"`) || !strings.Contains(sent, `"labelFingerprint"`) || !strings.Contains(sent, `"fleet-agent_ddev_sodd__key"`) {
		t.Errorf("setResourceLabels sent %s", sent)
	}
}

// TestMachineTypes: the live check's answers: built-in GPUs from compute,
// the GPUs an N1 type can be given (in every zone a regional cluster uses),
// the zones a regional cluster uses, and a type missing from one of them.
func TestMachineTypes(t *testing.T) {
	v := newEnv(t, envOpts{})
	ctx := t.Context()
	cases := []struct {
		acct     providers.Account
		location string
		name     string
		gpus     string // "8 x nvidia-h100-80gb", "" for none, "missing"
	}{
		{v.acct, "us-central1", "a3-highgpu-8g", "8 x nvidia-h100-80gb"},
		{v.acct, "us-central1-a", "g2-standard-8", "1 x nvidia-l4"},
		{v.acct, "us-central1", "n1-standard-8", "attachable 4 x nvidia-tesla-t4"},
		{v.acct, "us-central1", "e2-standard-4", ""},
		{v.acct, "us-central1", "a3-highgpu-9g", "missing"},
		// us-central1-f has no A3: an account spreading over all four zones
		// cannot run one there.
		{account("all", project, []string{"us-central1-a", "us-central1-f"}, keyRef), "us-central1", "a3-highgpu-8g", "missing"},
		{account("eu", project, []string{"europe-west4-a"}, keyRef), "europe-west4", "a3-highgpu-8g", "missing"},
		{account("nozones", project, []string{}, keyRef), "europe-west4", "a3-highgpu-8g", "missing"},
		{account("nozones", project, []string{}, keyRef), "mars-north1", "a3-highgpu-8g", "missing"},
	}
	for _, c := range cases {
		mt, err := v.ad.MachineType(ctx, c.acct, c.location, c.name)
		got := ""
		switch {
		case errors.Is(err, providers.ErrNotFound):
			got = "missing"
		case err != nil:
			t.Errorf("%s at %s: %v", c.name, c.location, err)
			continue
		case mt.Accelerators != nil:
			got = strconv.Itoa(mt.Accelerators.Count) + " x " + mt.Accelerators.Type
		}
		for _, a := range mt.Attachable {
			got += "attachable " + strconv.Itoa(a.Count) + " x " + a.Type
		}
		if got != c.gpus {
			t.Errorf("%s at %s (zones %s): %q, want %q", c.name, c.location, c.acct.Config, got, c.gpus)
		}
	}
	locs, err := v.ad.Locations(ctx, v.acct)
	if err != nil || len(locs) != 3 || locs[0].Name != "us-central1" || strings.Join(locs[0].Zones, ",") != "us-central1-a,us-central1-b" || locs[1].Kind != providers.Zone {
		t.Errorf("Locations of an account with zones: %+v %v", locs, err)
	}
	if _, err := v.ad.Locations(ctx, account("x", project, []string{"us-central1-z"}, keyRef)); providers.ReasonOf(err) != "accountConfig" {
		t.Errorf("an account zone that does not exist: %v", err)
	}
}

// TestAttachableInEveryZone: the GPUs an N1 type can be given at a region
// are those offered in every zone its clusters use, at the least most;
// GPUs built into other machine types are never attachable.
func TestAttachableInEveryZone(t *testing.T) {
	v := newEnv(t, envOpts{emu: func(o *gkeemu.Options) {
		o.AcceleratorTypes = []gkeemu.AcceleratorType{
			{Name: "nvidia-tesla-t4", MaxCards: 4, Zones: []string{"us-central1-a"}},
			{Name: "nvidia-tesla-v100", MaxCards: 8, Zones: []string{"us-central1-a"}},
			{Name: "nvidia-l4", MaxCards: 8, Zones: []string{"us-central1-a", "us-central1-b"}},
		}
		// The second zone's T4s: another listing with a lower most.
		o.AcceleratorTypes = append(o.AcceleratorTypes, gkeemu.AcceleratorType{Name: "nvidia-tesla-t4", MaxCards: 2, Zones: []string{"us-central1-b"}})
	}})
	for _, c := range []struct{ location, want string }{
		{"us-central1-a", "[{nvidia-tesla-t4 4} {nvidia-tesla-v100 8}]"},
		{"us-central1-b", "[{nvidia-tesla-t4 2}]"},
		{"us-central1", "[{nvidia-tesla-t4 2}]"},
	} {
		mt, err := v.ad.MachineType(t.Context(), v.acct, c.location, "n1-standard-8")
		if err != nil || fmt.Sprint(mt.Attachable) != c.want {
			t.Errorf("n1-standard-8 at %s: %v %v, want %s", c.location, mt.Attachable, err, c.want)
		}
	}
}

// TestAttachedAccelerators: a GPU attached to an N1 machine is taken, one
// that only comes built into its own machine types is refused by GKE; a
// built-in GPU of the wrong count is refused before anything is asked.
func TestAttachedAccelerators(t *testing.T) {
	v := newEnv(t, envOpts{emu: func(o *gkeemu.Options) { o.Steps = gkeemu.Synchronous }})
	ctx := t.Context()
	c := v.ready(t, clusterSpec("fa-attached"))
	t4 := providers.NodePoolSpec{Name: "fa-aaaaaa-t4", Shape: providers.Shape{MachineType: "n1-standard-8", Accelerators: &providers.Accelerators{Type: "nvidia-tesla-t4", Count: 2}}, Size: providers.Size{NodeCount: 1}, Labels: testOwner(poolID).PoolLabels(false)}
	p := v.readyPool(t, c.Ref, t4)
	if p.Accelerators == nil || p.Accelerators.Count != 2 {
		t.Errorf("attached T4s: %+v", p)
	}
	wrong := gpuPool("fa-aaaaaa-h100")
	wrong.Accelerators = &providers.Accelerators{Type: "nvidia-h100-80gb", Count: 4}
	before := v.emu.Mark()
	if _, err := v.ad.EnsureNodePool(ctx, v.acct, c.Ref, wrong); providers.ReasonOf(err) != "accelerators" {
		t.Errorf("4 x H100 on a3-highgpu-8g: %v", err)
	}
	if n := v.emu.CountSince(before, "container.projects.locations.clusters.nodePools.create"); n != 0 {
		t.Errorf("a refused pool was sent")
	}
	l4 := t4
	l4.Name, l4.Accelerators = "fa-aaaaaa-l4", &providers.Accelerators{Type: "nvidia-l4", Count: 1}
	if _, err := v.ad.EnsureNodePool(ctx, v.acct, c.Ref, l4); providers.ClassOf(err) != providers.Invalid || !strings.Contains(err.Error(), "not supported for machine type") {
		t.Errorf("an L4 attached to an N1 machine: %v", err)
	}
	e2 := providers.NodePoolSpec{Name: "fa-aaaaaa-e2", Shape: providers.Shape{MachineType: "e2-standard-4", Accelerators: &providers.Accelerators{Type: "nvidia-tesla-t4", Count: 1}}, Size: providers.Size{NodeCount: 1}}
	if _, err := v.ad.EnsureNodePool(ctx, v.acct, c.Ref, e2); providers.ClassOf(err) != providers.Invalid {
		t.Errorf("a GPU on an E2 machine: %v", err)
	}
}

// TestRefusedPools: a stockout found after GKE took the pool leaves it in
// error with the reason, the other pools untouched; a quota is refused at
// once.
func TestRefusedPools(t *testing.T) {
	v := newEnv(t, envOpts{emu: func(o *gkeemu.Options) { o.Steps = gkeemu.Steps{Cluster: 1, NodePool: 1, Update: 1, Delete: 1} }})
	ctx := t.Context()
	c := v.ready(t, clusterSpec("fa-refused"))
	v.emu.Stockout("us-central1-a", "a3-highgpu-8g", true)
	gpu := gpuPool("fa-aaaaaa-gpu")
	if _, err := v.ad.EnsureNodePool(ctx, v.acct, c.Ref, gpu); err != nil {
		t.Fatalf("GKE takes the pool first: %v", err)
	}
	var p providers.NodePool
	var err error
	for range 5 {
		if p, err = v.ad.GetNodePool(ctx, v.acct, c.Ref, gpu.Name); err == nil && p.Status.Settled() {
			break
		}
	}
	if p.Status != providers.NodePoolError || !strings.Contains(p.Message, "GCE_STOCKOUT") {
		t.Errorf("stocked-out pool (one zone of two): %+v %v", p, err)
	}
	v.readyPool(t, c.Ref, cpuPool("fa-aaaaaa-cpu"))

	v.emu.SetQuota("us-central1", "PREEMPTIBLE_NVIDIA_H100_GPUS", 8)
	spot := gpuPool("fa-aaaaaa-spot")
	spot.Spot, spot.Labels = true, testOwner(poolID).PoolLabels(true)
	_, err = v.ad.EnsureNodePool(ctx, v.acct, c.Ref, spot)
	if providers.ReasonOf(err) != "quota" || providers.ClassOf(err) != providers.Terminal || !strings.Contains(err.Error(), "PREEMPTIBLE_NVIDIA_H100_GPUS") {
		t.Errorf("16 Spot H100s against a quota of 8: %v", err)
	}
	// A resize that grows into the stockout: the operation fails, and when
	// it was the first of two the error says the call did something.
	v.emu.Stockout("us-central1-b", "e2-standard-4", true)
	_, err = v.ad.ResizeNodePool(ctx, v.acct, c.Ref, "fa-aaaaaa-cpu", providers.Size{NodeCount: 2, Autoscaling: &providers.Autoscaling{MinNodes: 2, MaxNodes: 3}})
	if providers.ReasonOf(err) != "stockout" || providers.SideEffectOf(err) != providers.Done {
		t.Errorf("resize into a stockout: %v (reason %s side %s)", err, providers.ReasonOf(err), providers.SideEffectOf(err))
	}
}

// TestTwoOperationsInOneCall: when the first of two operations outlasts
// operationWait, the call says so (Conflict, done) and the next call does
// only what is left.
func TestTwoOperationsInOneCall(t *testing.T) {
	v := newEnv(t, envOpts{
		emu: func(o *gkeemu.Options) { o.Steps = gkeemu.Steps{Cluster: 1, NodePool: 1, Update: 10, Delete: 1} },
		cfg: func(c *gcp.Config) { c.OperationWait = gcp.OperationWait{Every: time.Minute, Polls: 3} },
	})
	autoAdvance(t, v.clk, time.Minute)
	ctx := t.Context()
	c := v.ready(t, clusterSpec("fa-twostep"))
	p := v.readyPool(t, c.Ref, cpuPool("fa-aaaaaa-cpu"))
	want := providers.Size{NodeCount: 3, Autoscaling: &providers.Autoscaling{MinNodes: 2, MaxNodes: 4}}
	_, err := v.ad.ResizeNodePool(ctx, v.acct, c.Ref, p.Name, want)
	if providers.ReasonOf(err) != "inProgress" || providers.SideEffectOf(err) != providers.Done || !providers.Retryable(err) {
		t.Fatalf("first call: %v", err)
	}
	const setSize, setAutoscaling = "container.projects.locations.clusters.nodePools.setSize", "container.projects.locations.clusters.nodePools.setAutoscaling"
	if v.emu.Count(setSize) != 1 || v.emu.Count(setAutoscaling) != 0 {
		t.Errorf("first call sent %d setSize, %d setAutoscaling", v.emu.Count(setSize), v.emu.Count(setAutoscaling))
	}
	for range 10 {
		v.emu.Advance()
	}
	if _, err := v.ad.ResizeNodePool(ctx, v.acct, c.Ref, p.Name, want); err != nil {
		t.Fatalf("second call: %v", err)
	}
	if v.emu.Count(setSize) != 1 || v.emu.Count(setAutoscaling) != 1 {
		t.Errorf("after the second call: %d setSize, %d setAutoscaling", v.emu.Count(setSize), v.emu.Count(setAutoscaling))
	}
	for range 10 {
		v.emu.Advance()
	}
	got, err := v.ad.GetNodePool(ctx, v.acct, c.Ref, p.Name)
	if err != nil || got.NodeCount != 3 || got.Autoscaling == nil || *got.Autoscaling != *want.Autoscaling || got.Status != providers.NodePoolRunning {
		t.Errorf("pool %+v %v", got, err)
	}
}

// TestCredentialLifetime: the credential says 600 s on the adapter's clock
// whatever Google's token lives; with the guess that Google honours the
// assertion's exp, the token itself dies then too.
func TestCredentialLifetime(t *testing.T) {
	for _, honour := range []bool{false, true} {
		v := newEnv(t, envOpts{emu: func(o *gkeemu.Options) {
			o.Steps = gkeemu.Synchronous
			o.Guesses.HonourAssertionExpiry = honour
		}})
		c := v.ready(t, clusterSpec("fa-cred"))
		cred, err := v.ad.Credentials(t.Context(), v.acct, c.Ref)
		if err != nil {
			t.Fatal(err)
		}
		if d := cred.ExpiresAt.Sub(v.clk.Now()); d != providers.CredentialTTL {
			t.Errorf("honour %v: credential lives %s", honour, d)
		}
		if !v.accepts(t)(cred) || cred.Endpoint != c.Outputs.Endpoint {
			t.Fatalf("honour %v: fresh credential refused (%s vs %s)", honour, cred.Endpoint, c.Outputs.Endpoint)
		}
		v.clk.Advance(providers.CredentialTTL + 11*time.Second)
		if got := v.accepts(t)(cred); got == honour {
			t.Errorf("honour %v: accepted after the TTL = %v", honour, got)
		}
	}
}

// TestMetadataServer: an account that says so takes its token from the
// metadata server (GCE_METADATA_HOST), and no key is read.
func TestMetadataServer(t *testing.T) {
	v := newEnv(t, envOpts{})
	v.emu.SetMetadataAccount(saEmail)
	t.Setenv("GCE_METADATA_HOST", v.emu.MetadataHost())
	acct := providers.Account{Name: "on-gce", Provider: providers.GCP, Config: []byte(`{"projectId":"fa-emu-project","metadataServer":true}`)}
	before := v.emu.Mark()
	if err := v.ad.Verify(t.Context(), acct); err != nil {
		t.Fatalf("Verify through the metadata server: %v", err)
	}
	if v.emu.CountSince(before, "metadata.token") != 1 || v.emu.CountSince(before, "oauth2.token") != 0 {
		t.Errorf("metadata %d, key %d token fetches", v.emu.CountSince(before, "metadata.token"), v.emu.CountSince(before, "oauth2.token"))
	}
}

// revoker records what RevokeAccess hands to the in-cluster seam.
type revoker struct {
	creds []providers.Credential
	err   error
}

func (r *revoker) RevokeInCluster(_ context.Context, cred providers.Credential) error {
	r.creds = append(r.creds, cred)
	return r.err
}

// TestRevokeAccess: GKE grants nothing to withdraw, so RevokeAccess hands
// a live credential to the in-cluster revoker (issue 12's), and passes its
// failure on; without one it checks the cluster and does nothing.
func TestRevokeAccess(t *testing.T) {
	r := &revoker{}
	v := newEnv(t, envOpts{emu: func(o *gkeemu.Options) { o.Steps = gkeemu.Synchronous }, options: []gcp.Option{gcp.WithInClusterRevoker(r)}})
	c := v.ready(t, clusterSpec("fa-revoke"))
	if err := v.ad.RevokeAccess(t.Context(), v.acct, c.Ref); err != nil {
		t.Fatal(err)
	}
	if len(r.creds) != 1 || !v.accepts(t)(r.creds[0]) {
		t.Fatalf("revoker got %d credentials", len(r.creds))
	}
	r.err = errors.New("forbidden: cannot delete namespace fleet-agent-access")
	if err := v.ad.RevokeAccess(t.Context(), v.acct, c.Ref); err == nil || !providers.Retryable(err) {
		t.Errorf("a failed in-cluster revoke: %v", err)
	}
	bare := newEnv(t, envOpts{emu: func(o *gkeemu.Options) { o.Steps = gkeemu.Synchronous }})
	if err := bare.ad.RevokeAccess(t.Context(), bare.acct, providers.ClusterRef{Location: "us-central1", Name: "gone"}); !errors.Is(err, providers.ErrNotFound) {
		t.Errorf("revoke on a missing cluster: %v", err)
	}
}

// TestPrivateNodes: the mode is sent, read back, and never changed.
func TestPrivateNodes(t *testing.T) {
	v := newEnv(t, envOpts{emu: func(o *gkeemu.Options) { o.Steps = gkeemu.Synchronous }})
	spec := clusterSpec("fa-private")
	spec.PrivateNodes = true
	c := v.ready(t, spec)
	if !c.PrivateNodes || !strings.Contains(string(v.lastBody(t, "container.projects.locations.clusters.create")), `"privateClusterConfig":{"enablePrivateNodes":true}`) {
		t.Errorf("private cluster %+v", c)
	}
	spec.PrivateNodes = false
	if _, err := v.ad.EnsureCluster(t.Context(), v.acct, spec); providers.ReasonOf(err) != "modeChange" {
		t.Errorf("privateNodes off in place: %v", err)
	}
}

// TestRulesAndGlobalID: GKE's differences as the reference lists them, and
// the selfLink as the global id, the same through a second account.
func TestRulesAndGlobalID(t *testing.T) {
	v := newEnv(t, envOpts{emu: func(o *gkeemu.Options) { o.Steps = gkeemu.Synchronous }})
	r, err := v.ad.Rules(t.Context(), v.acct)
	want := providers.Rules{ClusterLocations: []providers.LocationKind{providers.Region, providers.Zone}, NodePoolZones: true, DiskSize: true, NodesPerZone: true, ZeroNodes: true, Spot: true}
	if err != nil || !reflect.DeepEqual(r, want) {
		t.Errorf("Rules %+v %v", r, err)
	}
	c := v.ready(t, clusterSpec("fa-global"))
	if c.Outputs.GlobalID != "https://container.googleapis.com/v1/projects/fa-emu-project/locations/us-central1/clusters/fa-global" {
		t.Errorf("global id %s", c.Outputs.GlobalID)
	}
	otherKey, _ := v.emu.AddServiceAccount("other@fa-emu-project.iam.gserviceaccount.com", project)
	v.secrets.set("secret://other", string(otherKey))
	other, err := v.ad.ReadAdoptable(t.Context(), account("other", project, nil, "secret://other"), "us-central1/fa-global")
	if err != nil || other.Outputs.GlobalID != c.Outputs.GlobalID || other.Ref.ID != c.Ref.ID {
		t.Errorf("through another account: %+v %v", other, err)
	}
}
