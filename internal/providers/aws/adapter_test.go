package aws_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/fleet-agent/fleet-agent/internal/providers"
	awsadapter "github.com/fleet-agent/fleet-agent/internal/providers/aws"
	"github.com/fleet-agent/fleet-agent/internal/providers/aws/eksemu"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

// TestLostAnswersAreFoundNotRepeated: a create or change whose answer was
// lost after EKS acted is read back on the next call (the journal's
// retry), never made twice.
func TestLostAnswersAreFoundNotRepeated(t *testing.T) {
	ctx := t.Context()
	t.Run("CreateCluster", func(t *testing.T) {
		h := newHarness(t, harnessOpts{})
		h.emu.DropAfterActing("CreateCluster", 1)
		_, err := h.adapter.EnsureCluster(ctx, h.acct, h.spec("c1"))
		if providers.SideEffectOf(err) != providers.Maybe || !providers.Retryable(err) {
			t.Fatalf("a lost answer: %v (side effect %q)", err, providers.SideEffectOf(err))
		}
		c, err := h.adapter.EnsureCluster(ctx, h.acct, h.spec("c1"))
		if err != nil || c.Ref.Name != "c1" || c.Outputs.GlobalID == "" {
			t.Fatalf("the retry: %v %+v", err, c)
		}
		if n := h.emu.Count("CreateCluster"); n != 1 {
			t.Errorf("%d CreateCluster requests, want 1", n)
		}
	})
	t.Run("CreateCluster, read back missed it", func(t *testing.T) {
		// Robust to both answers EKS may give a repeated create: the same
		// journal token finds the first cluster (same token and body), and
		// another token meets ResourceInUse and converges the cluster.
		for _, token := range []string{"journal:c1", "journal:c1:again"} {
			h := newHarness(t, harnessOpts{})
			h.emu.DropAfterActing("CreateCluster", 1)
			_, _ = h.adapter.EnsureCluster(ctx, h.acct, h.spec("c1"))
			h.emu.Inject(eksemu.Fault{Op: "DescribeCluster", Status: 404, Code: "ResourceNotFoundException", Message: "No cluster found for name: c1."})
			spec := h.spec("c1")
			spec.ClientToken = token
			c, err := h.adapter.EnsureCluster(ctx, h.acct, spec)
			if err != nil || c.Ref.Name != "c1" {
				t.Fatalf("token %s: %v", token, err)
			}
			if n := h.emu.Count("CreateCluster"); n != 2 || len(h.emu.NodegroupNames("c1")) != 0 || h.emu.ClusterStatus("c1") == "" {
				t.Errorf("token %s: %d creates", token, n)
			}
		}
	})
	t.Run("CreateNodegroup", func(t *testing.T) {
		h := newHarness(t, harnessOpts{emu: eksemu.Options{Steps: &eksemu.Steps{}}})
		c := h.running("c1")
		h.emu.DropAfterActing("CreateNodegroup", 1)
		spec := h.pool("fa-abcdef-gpu", "g6.xlarge", 1)
		if _, err := h.adapter.EnsureNodePool(ctx, h.acct, c.Ref, spec); providers.SideEffectOf(err) != providers.Maybe {
			t.Fatalf("a lost answer: %v", err)
		}
		p, err := h.adapter.EnsureNodePool(ctx, h.acct, c.Ref, spec)
		if err != nil || p.Name != spec.Name {
			t.Fatalf("the retry: %v", err)
		}
		if n := h.emu.Count("CreateNodegroup"); n != 1 {
			t.Errorf("%d CreateNodegroup requests", n)
		}
	})
	t.Run("UpdateNodegroupConfig", func(t *testing.T) {
		h := newHarness(t, harnessOpts{})
		c := h.running("c1")
		spec := h.pool("fa-abcdef-cpu", "m5.large", 1)
		if _, err := h.adapter.EnsureNodePool(ctx, h.acct, c.Ref, spec); err != nil {
			t.Fatal(err)
		}
		h.emu.Advance()
		h.emu.Advance()
		h.emu.DropAfterActing("UpdateNodegroupConfig", 1)
		size := providers.Size{NodeCount: 3}
		if _, err := h.adapter.ResizeNodePool(ctx, h.acct, c.Ref, spec.Name, size); providers.SideEffectOf(err) != providers.Maybe {
			t.Fatalf("a lost answer: %v", err)
		}
		p, err := h.adapter.ResizeNodePool(ctx, h.acct, c.Ref, spec.Name, size)
		if err != nil || p.NodeCount != 3 {
			t.Fatalf("the retry: %v %+v", err, p)
		}
		if n := h.emu.Count("UpdateNodegroupConfig"); n != 1 {
			t.Errorf("%d UpdateNodegroupConfig requests", n)
		}
	})
	t.Run("UpdateClusterVersion", func(t *testing.T) {
		h := newHarness(t, harnessOpts{})
		h.running("c1")
		h.emu.DropAfterActing("UpdateClusterVersion", 1)
		spec := h.spec("c1")
		spec.Version = "1.35"
		if _, err := h.adapter.EnsureCluster(ctx, h.acct, spec); providers.SideEffectOf(err) != providers.Maybe {
			t.Fatalf("a lost answer: %v", err)
		}
		c, err := h.adapter.EnsureCluster(ctx, h.acct, spec)
		if err != nil || (c.Status != providers.ClusterUpdating && c.Outputs.Version != "1.35") {
			t.Fatalf("the retry: %v %+v", err, c)
		}
		if n := h.emu.Count("UpdateClusterVersion"); n != 1 {
			t.Errorf("%d UpdateClusterVersion requests", n)
		}
	})
	t.Run("UpdateNodegroupVersion", func(t *testing.T) {
		h := newHarness(t, harnessOpts{emu: eksemu.Options{Steps: &eksemu.Steps{Update: 2}}})
		c := h.running("c1")
		spec := h.pool("fa-abcdef-cpu", "m5.large", 1)
		if _, err := h.adapter.EnsureNodePool(ctx, h.acct, c.Ref, spec); err != nil {
			t.Fatal(err)
		}
		spec.Version = "1.35"
		if _, err := h.adapter.EnsureNodePool(ctx, h.acct, c.Ref, spec); providers.ClassOf(err) != providers.Conflict {
			t.Fatalf("a pool ahead of its control plane: %v, want Conflict", err)
		}
		cs := h.spec("c1")
		cs.Version = "1.35"
		if _, err := h.adapter.EnsureCluster(ctx, h.acct, cs); err != nil {
			t.Fatal(err)
		}
		h.emu.Advance()
		h.emu.Advance()
		h.emu.DropAfterActing("UpdateNodegroupVersion", 1)
		if _, err := h.adapter.EnsureNodePool(ctx, h.acct, c.Ref, spec); providers.SideEffectOf(err) != providers.Maybe {
			t.Fatalf("a lost answer: %v", err)
		}
		p, err := h.adapter.EnsureNodePool(ctx, h.acct, c.Ref, spec)
		if err != nil || p.Status != providers.NodePoolUpdating || p.Version != "1.34" {
			t.Fatalf("the retry: %v %+v", err, p)
		}
		if n := h.emu.Count("UpdateNodegroupVersion"); n != 1 {
			t.Errorf("%d UpdateNodegroupVersion requests", n)
		}
		h.emu.Advance()
		h.emu.Advance()
		if p, err = h.adapter.GetNodePool(ctx, h.acct, c.Ref, spec.Name); err != nil || p.Status != providers.NodePoolRunning || p.Version != "1.35" {
			t.Fatalf("after the upgrade: %v %+v", err, p)
		}
		if p, err = h.adapter.EnsureNodePool(ctx, h.acct, c.Ref, spec); err != nil || p.Operation != "" || h.emu.Count("UpdateNodegroupVersion") != 1 {
			t.Errorf("an upgraded pool ensured again: %v %+v, %d upgrades sent", err, p, h.emu.Count("UpdateNodegroupVersion"))
		}
		spec.Version = "1.34"
		if _, err := h.adapter.EnsureNodePool(ctx, h.acct, c.Ref, spec); providers.ReasonOf(err) != "downgrade" {
			t.Errorf("a downgrade: %v", err)
		}
	})
	t.Run("DeleteCluster", func(t *testing.T) {
		h := newHarness(t, harnessOpts{})
		c := h.running("c1")
		h.emu.DropAfterActing("DeleteCluster", 1)
		if _, err := h.adapter.DeleteCluster(ctx, h.acct, c.Ref); providers.SideEffectOf(err) != providers.Maybe {
			t.Fatalf("a lost answer: %v", err)
		}
		// Being deleted, or (its delete done while the retry read it) gone.
		d, err := h.adapter.DeleteCluster(ctx, h.acct, c.Ref)
		if !errors.Is(err, providers.ErrNotFound) && (err != nil || d.Status != providers.ClusterDeleting) {
			t.Fatalf("the retry: %v %+v", err, d)
		}
		if n := h.emu.Count("DeleteCluster"); n != 2 {
			t.Errorf("%d DeleteCluster requests", n)
		}
	})
}

// TestGPUSpotNodeGroupOnTheWire checks what a GPU Spot flavor sends: the
// NVIDIA AMI, SPOT capacity, nodes per zone, labels, disk, tags.
func TestGPUSpotNodeGroupOnTheWire(t *testing.T) {
	h := newHarness(t, harnessOpts{emu: eksemu.Options{Steps: &eksemu.Steps{}}})
	c := h.running("c1")
	ctx := t.Context()
	spec := providers.NodePoolSpec{Name: "fa-abcdef-h100",
		Shape:  providers.Shape{MachineType: "p5.48xlarge", Accelerators: &providers.Accelerators{Type: "nvidia-h100", Count: 8}, Spot: true, DiskGiB: 200},
		Size:   providers.Size{NodeCount: 2},
		Labels: providers.PoolLabels("pool_abcdef", true), ClientToken: "journal:h100"}
	p, err := h.adapter.EnsureNodePool(ctx, h.acct, c.Ref, spec)
	if err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	for _, r := range h.emu.Requests() {
		if r.Op == "CreateNodegroup" {
			_ = json.Unmarshal(r.Body, &body)
		}
	}
	sc := body["scalingConfig"].(map[string]any)
	if body["amiType"] != "AL2023_x86_64_NVIDIA" || body["capacityType"] != "SPOT" || body["diskSize"] != 200.0 ||
		sc["desiredSize"] != 4.0 || sc["minSize"] != 4.0 || sc["maxSize"] != 4.0 ||
		fmt.Sprint(body["subnets"]) != "["+subnetA+" "+subnetB+"]" || fmt.Sprint(body["instanceTypes"]) != "[p5.48xlarge]" {
		t.Errorf("CreateNodegroup sent %v", body)
	}
	labels := body["labels"].(map[string]any)
	tags := body["tags"].(map[string]any)
	if labels[providers.LabelSubstratePool] != "pool_abcdef" || labels[providers.LabelCapacity] != "spot" || tags["fleet-agent.dev/size"] != "fixed" {
		t.Errorf("labels %v tags %v", labels, tags)
	}
	if len(body["clientRequestToken"].(string)) != 64 {
		t.Errorf("token %v", body["clientRequestToken"])
	}
	if p.NodeCount != 2 || !p.Spot || p.DiskGiB != 200 || *p.Accelerators != *spec.Accelerators || !slices.Equal(p.Zones, []string{"us-east-1a", "us-east-1b"}) {
		t.Errorf("read back %+v", p)
	}
	// Pinned to one zone, nodes are that zone's alone.
	one := h.pool("fa-abcdef-one", "m7g.large", 3)
	one.Zones = []string{"us-east-1b"}
	if _, err := h.adapter.EnsureNodePool(ctx, h.acct, c.Ref, one); err != nil {
		t.Fatal(err)
	}
	recs := h.emu.Requests()
	_ = json.Unmarshal(recs[len(recs)-1].Body, &body)
	if fmt.Sprint(body["subnets"]) != "["+subnetB+"]" || body["scalingConfig"].(map[string]any)["desiredSize"] != 3.0 || body["amiType"] != "AL2023_ARM_64_STANDARD" {
		t.Errorf("a pool pinned to one zone sent %v", body)
	}
	zonal := h.pool("fa-abcdef-c", "m5.large", 1)
	zonal.Zones = []string{"us-east-1c"}
	if _, err := h.adapter.EnsureNodePool(ctx, h.acct, c.Ref, zonal); providers.ReasonOf(err) != "zone" {
		t.Errorf("a zone without a subnet: %v", err)
	}
}

// TestStockoutIsAnError: a node group that cannot get its instances is an
// error pool, with EKS's reason as the message.
func TestStockoutIsAnError(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	c := h.running("c1")
	h.emu.Stockout("p5.48xlarge", true)
	spec := h.pool("fa-abcdef-h100", "p5.48xlarge", 1)
	if _, err := h.adapter.EnsureNodePool(t.Context(), h.acct, c.Ref, spec); err != nil {
		t.Fatal(err)
	}
	var p providers.NodePool
	for range 3 {
		p, _ = h.adapter.GetNodePool(t.Context(), h.acct, c.Ref, spec.Name)
	}
	if p.Status != providers.NodePoolError || !strings.Contains(p.Message, "AsgInstanceLaunchFailures") || !strings.Contains(p.Message, "InsufficientInstanceCapacity") {
		t.Errorf("a pool in a stockout: %+v", p)
	}
}

// TestAccessGrantedOnAdoptIsRevoked: with grantAccessOnAdopt, Credentials
// gives the principal an access entry of its own on an adopted cluster,
// the cluster takes the token, and RevokeAccess removes that entry (after
// the in-cluster seam), so the token stops working; the tenant's entries
// stay.
func TestAccessGrantedOnAdoptIsRevoked(t *testing.T) {
	h := newHarness(t, harnessOpts{block: "grantAccessOnAdopt: true\n"})
	if _, err := h.emu.Seed(eksemu.SeedCluster{Name: "theirs", AccessEntries: []eksemu.SeedAccessEntry{{PrincipalArn: teamRoleArn, Policies: []string{eksemu.ClusterAdminPolicy}}}}); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	c, err := h.adapter.ReadAdoptable(ctx, h.acct, "us-east-1/theirs")
	if err != nil {
		t.Fatalf("ReadAdoptable with grantAccessOnAdopt: %v", err)
	}
	d := h.delta(func() {
		cred, err := h.adapter.Credentials(ctx, h.acct, c.Ref)
		if err != nil || !h.accepts(cred) {
			t.Fatalf("Credentials: %v, accepted %v", err, err == nil && h.accepts(cred))
		}
	})
	if d["CreateAccessEntry"] != 1 || d["AssociateAccessPolicy"] != 1 {
		t.Errorf("granting: %v", d)
	}
	cred, _ := h.adapter.Credentials(ctx, h.acct, c.Ref)
	if h.emu.Count("CreateAccessEntry") != 1 {
		t.Error("a second Credentials granted again")
	}
	rev := &revoker{accepts: h.accepts}
	// A second adapter, as the binary has one, with the seam wired.
	a2 := h.open(awsadapter.WithInClusterRevoker(rev))
	for range 2 {
		if err := a2.RevokeAccess(ctx, h.acct, c.Ref); err != nil {
			t.Fatalf("RevokeAccess: %v", err)
		}
	}
	// The second revoke finds no access left: nothing in the cluster can
	// be reached, and nothing of ours is left to remove there.
	if rev.calls != 1 || !rev.accepted {
		t.Errorf("the in-cluster seam: %d calls, its credential accepted %v", rev.calls, rev.accepted)
	}
	if h.emu.HasAccessEntry("theirs", userArn) || !h.emu.HasAccessEntry("theirs", teamRoleArn) {
		t.Error("RevokeAccess left ours or removed the tenant's")
	}
	if h.accepts(cred) {
		t.Error("the token still works after RevokeAccess")
	}
}

type revoker struct {
	accepts  func(providers.Credential) bool
	calls    int
	accepted bool
}

func (r *revoker) RevokeInCluster(_ context.Context, cred providers.Credential) error {
	r.calls++
	if r.calls == 1 {
		r.accepted = r.accepts(cred)
	}
	return nil
}

// TestCredentialLifetime: a token lives the 600 s reported, on the clock
// the emulator checks it with.
func TestCredentialLifetime(t *testing.T) {
	h := newHarness(t, harnessOpts{emu: eksemu.Options{Steps: &eksemu.Steps{}}})
	c := h.running("c1")
	cred, err := h.adapter.Credentials(t.Context(), h.acct, c.Ref)
	if err != nil {
		t.Fatal(err)
	}
	if !cred.ExpiresAt.Equal(h.clk.Now().Add(providers.CredentialTTL)) || !strings.HasPrefix(cred.Token, "k8s-aws-v1.") || !strings.HasPrefix(string(cred.CACert), "-----BEGIN CERTIFICATE-----") {
		t.Fatalf("credential %s", cred)
	}
	h.clk.Advance(599 * time.Second)
	if !h.accepts(cred) {
		t.Error("refused before it expires")
	}
	h.clk.Advance(time.Second)
	if h.accepts(cred) {
		t.Error("accepted at its ExpiresAt")
	}
	other := h.running("c2")
	cred2, _ := h.adapter.Credentials(t.Context(), h.acct, other.Ref)
	cred2.Endpoint = cred.Endpoint
	if h.accepts(cred2) {
		t.Error("c2's token works at c1")
	}
	// Keys of an assumed role sign with their session token; the role's
	// entry on the owner's cluster admits it, and nothing admits it on a
	// cluster where it has none.
	h.seedTheirs()
	theirs, err := h.adapter.Credentials(t.Context(), h.team, providers.ClusterRef{Location: "us-east-1", Name: "theirs"})
	if err != nil || !strings.Contains(mustDecode(t, theirs.Token), "X-Amz-Security-Token=") || !h.accepts(theirs) {
		t.Errorf("a role session's token on the owner's cluster: %v", err)
	}
	mine, err := h.adapter.Credentials(t.Context(), h.team, other.Ref)
	if err != nil || h.accepts(mine) {
		t.Errorf("a role session's token where the role has no entry: %v, accepted %v", err, err == nil && h.accepts(mine))
	}
}

func mustDecode(t *testing.T, token string) string {
	t.Helper()
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(token, "k8s-aws-v1."))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestConfigBlock: the providers.aws block is checked strictly.
func TestConfigBlock(t *testing.T) {
	cases := []struct {
		block, err string
	}{
		{"", ""},
		{"endpoints: {eks: http://127.0.0.1:1}\nrequestTimeout: 5s\nsessionName: agent-1\ngrantAccessOnAdopt: true\n", ""},
		{"endpoints:\n  eks: http://x\n  s3: http://y\n", `line 3: unknown key "endpoints.s3"`},
		{"region: us-east-1\n", `line 1: unknown key "region"`},
		{"endpoints: {eks: 'ftp://x'}\n", "endpoints.eks"},
		{"requestTimeout: -1s\n", "requestTimeout must be positive"},
		{"sessionName: 'a b'\n", "sessionName"},
		{"grantAccessOnAdopt: maybe\n", "line 1"},
	}
	for _, c := range cases {
		var n yaml.Node
		if err := yaml.Unmarshal([]byte(c.block), &n); err != nil {
			t.Fatal(err)
		}
		block := &n
		if c.block == "" {
			block = nil
		}
		reg := providers.NewRegistry()
		if err := reg.Register(providers.AWS, awsadapter.Factory()); err != nil {
			t.Fatal(err)
		}
		k, err := reg.Open(providers.AWS, block, resolver{})
		switch {
		case c.err == "" && (err != nil || k == nil):
			t.Errorf("%q: %v", c.block, err)
		case c.err != "" && (err == nil || refusal.CodeOf(err) != refusal.InvalidInput || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%q: got %v, want INVALID_INPUT with %q", c.block, err, c.err)
		}
	}
}

// TestCanary: neither the account's keys, nor the keys STS hands out for
// roleArn, nor a minted token appear in anything the adapter returns or
// any error it gives, but the Credential's Token.
func TestCanary(t *testing.T) {
	h := newHarness(t, harnessOpts{emu: eksemu.Options{Steps: &eksemu.Steps{}}})
	h.seedTheirs()
	ctx := t.Context()
	var outputs []any
	var errs []error
	keep := func(v any, err error) {
		outputs = append(outputs, v)
		if err != nil {
			errs = append(errs, err)
		}
	}
	c := h.running("c1")
	for _, acct := range []providers.Account{h.acct, h.team} {
		keep(nil, h.adapter.Verify(ctx, acct))
		keep(h.adapter.Locations(ctx, acct))
		keep(h.adapter.MachineType(ctx, acct, "us-east-1", "g6.xlarge"))
		keep(h.adapter.ReadAdoptable(ctx, acct, "us-east-1/theirs"))
		keep(h.adapter.ListClusters(ctx, acct, providers.LabelSubstratePool))
		keep(h.adapter.EnsureNodePool(ctx, acct, c.Ref, h.pool("fa-abcdef-"+acct.Name[:4], "g6.xlarge", 1)))
		keep(h.adapter.ListNodePools(ctx, acct, c.Ref))
		keep(h.adapter.GetNodePool(ctx, acct, c.Ref, "fa-nope"))
		keep(h.adapter.ReadAdoptable(ctx, acct, "us-east-1/nope"))
		keep(nil, h.adapter.RevokeAccess(ctx, acct, c.Ref))
		keep(h.adapter.DeleteCluster(ctx, acct, providers.ClusterRef{Location: "us-east-1", Name: "nope"}))
	}
	var tokens []string
	for _, acct := range []providers.Account{h.acct, h.team} {
		cred, err := h.adapter.Credentials(ctx, acct, c.Ref)
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, cred.Token)
		keep(cred, nil)
		keep(cred.String(), nil)
		keep(fmt.Sprintf("%v %+v %#v", cred, cred, cred), nil)
	}
	// Failures that carry what was sent: a refused signature, a refused
	// role, a throttle, a lost answer.
	h.emu.Throttle("DescribeCluster", 1, "ThrottlingException", time.Second)
	keep(h.adapter.GetCluster(ctx, h.team, c.Ref))
	h.emu.DropAfterActing("DescribeCluster", 1)
	keep(h.adapter.Credentials(ctx, h.acct, c.Ref))
	h.secrets["secret://ops/aws-secret"] = "canary-wrong-" + keySecret
	keep(nil, h.adapter.Verify(ctx, h.acct))
	keep(h.adapter.GetCluster(ctx, h.acct, c.Ref))

	secrets := []string{keyID, keySecret, opsKeyID, opsSecret, "canary-wrong-" + keySecret}
	// The keys STS handed out for the team's role.
	issued := h.emu.IssuedSessionSecrets()
	if len(issued) == 0 {
		t.Fatal("no role was assumed")
	}
	secrets = append(secrets, issued...)
	var texts []string
	for _, e := range errs {
		texts = append(texts, e.Error(), fmt.Sprintf("%+v", e), fmt.Sprintf("%#v", e))
		for u := errors.Unwrap(e); u != nil; u = errors.Unwrap(u) {
			texts = append(texts, u.Error())
		}
	}
	for _, o := range outputs {
		if _, ok := o.(providers.Credential); ok {
			continue // its Token is the one place a token may be
		}
		b, _ := json.Marshal(o)
		texts = append(texts, string(b), fmt.Sprintf("%+v", o))
	}
	if len(errs) < 6 {
		t.Fatalf("only %d errors to look at", len(errs))
	}
	for _, text := range texts {
		for _, s := range append(secrets, tokens...) {
			if strings.Contains(text, s) {
				t.Errorf("%q appears in %q", s, text)
			}
		}
		// A token's body is base64 of a URL holding the signature.
		for _, tok := range tokens {
			if strings.Contains(text, tok[len("k8s-aws-v1."):][:40]) {
				t.Errorf("a token's body appears in %q", text)
			}
		}
	}
}

// TestLabelsConverge: a cluster's labels are added as tags (never
// removed: the tenant's tags stay); a node pool's labels are replaced in
// place by one UpdateNodegroupConfig of deltas.
func TestLabelsConverge(t *testing.T) {
	h := newHarness(t, harnessOpts{emu: eksemu.Options{Steps: &eksemu.Steps{}}})
	ctx := t.Context()
	c := h.running("c1")
	spec := h.spec("c1")
	spec.Labels["team"] = "ml"
	d := h.delta(func() {
		got, err := h.adapter.EnsureCluster(ctx, h.acct, spec)
		if err != nil || got.Labels["team"] != "ml" || got.Labels["fleet-agent.dev/substrate-pool"] != "pool_abcdef" {
			t.Errorf("EnsureCluster with a new label: %v %v", err, got.Labels)
		}
	})
	if !slices.Equal(sortedOps(d), []string{"DescribeCluster", "TagResource"}) {
		t.Errorf("a new cluster label cost %v", d)
	}
	pool := h.pool("fa-abcdef-cpu", "m5.large", 1)
	pool.Labels["old"] = "x"
	if _, err := h.adapter.EnsureNodePool(ctx, h.acct, c.Ref, pool); err != nil {
		t.Fatal(err)
	}
	delete(pool.Labels, "old")
	pool.Labels["new"] = "y"
	d = h.delta(func() {
		if _, err := h.adapter.EnsureNodePool(ctx, h.acct, c.Ref, pool); err != nil {
			t.Fatal(err)
		}
	})
	recs := h.emu.Requests()
	var body struct {
		Labels struct {
			Add    map[string]string `json:"addOrUpdateLabels"`
			Remove []string          `json:"removeLabels"`
		} `json:"labels"`
		ScalingConfig any `json:"scalingConfig"`
	}
	_ = json.Unmarshal(recs[len(recs)-1].Body, &body)
	if d["UpdateNodegroupConfig"] != 1 || body.Labels.Add["new"] != "y" || len(body.Labels.Add) != 1 || !slices.Equal(body.Labels.Remove, []string{"old"}) || body.ScalingConfig != nil {
		t.Errorf("relabel sent %+v (%v)", body, d)
	}
	p, _ := h.adapter.GetNodePool(ctx, h.acct, c.Ref, pool.Name)
	if p.Labels["new"] != "y" || p.Labels["old"] != "" {
		t.Errorf("labels after: %v", p.Labels)
	}
}

func sortedOps(m map[string]int) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
