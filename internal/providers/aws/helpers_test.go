package aws_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/providers"
	awsadapter "github.com/fleet-agent/fleet-agent/internal/providers/aws"
	"github.com/fleet-agent/fleet-agent/internal/providers/aws/eksemu"
)

// resolver is a secret resolver over a map.
type resolver map[string]string

var errNoSecret = errors.New("no such secret")

func (r resolver) Resolve(_ context.Context, ref string) (string, error) {
	v, ok := r[ref]
	if !ok {
		return "", errNoSecret
	}
	return v, nil
}

const (
	acctID      = "111111111111"
	userArn     = "arn:aws:iam::111111111111:user/fleet"
	opsArn      = "arn:aws:iam::111111111111:user/ops"
	teamRoleArn = "arn:aws:iam::111111111111:role/teams/fleet-b"
	subnetA     = "subnet-0000000000000000a"
	subnetB     = "subnet-0000000000000001b"
	subnetC     = "subnet-0000000000000002c"
	keyID       = "AKIAFLEETEXAMPLE0001"
	keySecret   = "fleet-secret-key-value-0001"
	opsKeyID    = "AKIAOPSEXAMPLE000002"
	opsSecret   = "ops-secret-key-value-0002"
)

// harness is an emulator, a fake clock and an adapter pointed at them.
type harness struct {
	t       *testing.T
	emu     *eksemu.Emulator
	clk     *clock.Fake
	adapter *awsadapter.Adapter
	secrets resolver
	acct    providers.Account
	// team reaches the same clusters by assuming teamRoleArn.
	team providers.Account
	// block is the providers.aws block the adapter was opened with.
	block string
}

// open makes another adapter over the same emulator and config block, as
// a restarted agent has one: nothing cached.
func (h *harness) open(opts ...awsadapter.Option) *awsadapter.Adapter {
	h.t.Helper()
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(h.block), &n); err != nil {
		h.t.Fatal(err)
	}
	a, err := awsadapter.Open(&n, h.secrets, append([]awsadapter.Option{awsadapter.WithClock(h.clk)}, opts...)...)
	if err != nil {
		h.t.Fatalf("Open: %v", err)
	}
	return a
}

type harnessOpts struct {
	emu   eksemu.Options
	block string // the providers.aws block, YAML; endpoints are added
}

func newHarness(t *testing.T, o harnessOpts) *harness {
	t.Helper()
	// The fake clock starts at the wall time: the SDK signs, and its
	// credential cache expires keys, on the wall clock.
	clk := clock.NewFake(time.Now().UTC().Truncate(time.Second))
	o.emu.Clock = clk
	emu := eksemu.New(o.emu)
	url := emu.Start()
	t.Cleanup(emu.Close)
	emu.AddUser(keyID, keySecret, userArn)
	emu.AddUser(opsKeyID, opsSecret, opsArn)
	emu.AddRole(teamRoleArn, opsArn)
	h := &harness{t: t, emu: emu, clk: clk, secrets: resolver{
		"secret://ops/aws-key-id": keyID, "secret://ops/aws-secret": keySecret,
		"secret://team/aws-key-id": opsKeyID, "secret://team/aws-secret": opsSecret,
	}}
	h.block = "endpoints: {eks: " + url + ", ec2: " + url + ", sts: " + url + ", autoscaling: " + url + "}\n" + o.block
	h.adapter = h.open()
	h.acct = account("managed-k8s", map[string]any{
		"accessKeyId": "secret://ops/aws-key-id", "secretAccessKey": "secret://ops/aws-secret",
	})
	h.team = account("team-k8s", map[string]any{
		"accessKeyId": "secret://team/aws-key-id", "secretAccessKey": "secret://team/aws-secret", "roleArn": teamRoleArn,
	})
	return h
}

// account is an aws account of the reference's EKS example, with extra
// keys.
func account(name string, extra map[string]any) providers.Account {
	cfg := map[string]any{
		"region":            "us-east-1",
		"zones":             []string{"us-east-1a", "us-east-1b"},
		"eksClusterRoleArn": "arn:aws:iam::111111111111:role/eks-cluster",
		"eksNodeRoleArn":    "arn:aws:iam::111111111111:role/eks-node",
		"eksSubnetIds":      []string{subnetA, subnetB},
	}
	for k, v := range extra {
		if v == nil {
			delete(cfg, k)
			continue
		}
		cfg[k] = v
	}
	raw, _ := json.Marshal(cfg)
	return providers.Account{Name: name, Provider: providers.AWS, Config: raw}
}

// seedTheirs seeds the owner's cluster `theirs` with a node group of its
// own and access entries for both test principals.
func (h *harness) seedTheirs() {
	h.t.Helper()
	if _, err := h.emu.Seed(eksemu.SeedCluster{
		Name:       "theirs",
		Nodegroups: []eksemu.SeedNodegroup{{Name: "default", InstanceType: "m5.large", Desired: 2}},
		AccessEntries: []eksemu.SeedAccessEntry{
			{PrincipalArn: userArn, Policies: []string{eksemu.ClusterAdminPolicy}},
			{PrincipalArn: teamRoleArn, Policies: []string{eksemu.ClusterAdminPolicy}},
		},
	}); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) accepts(c providers.Credential) bool { return h.emu.Accepts(c.Endpoint, c.Token) }

// testInstallation is the installation id of the state files the substrate
// tests make, so that the names they expect are fixed.
const testInstallation = "5eed0000000000000000000000000001"

// testOwner is who a test substrate's objects belong to.
func testOwner(poolID string) providers.Owner {
	return providers.Owner{Installation: testInstallation, PoolID: poolID}
}
