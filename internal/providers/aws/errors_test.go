package aws_test

import (
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/eks"

	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/providers/aws/eksemu"
)

func (h *harness) spec(name string) providers.ClusterSpec {
	return providers.ClusterSpec{Name: name, Location: "us-east-1", Labels: map[string]string{providers.LabelSubstratePool: "pool_abcdef"}, ClientToken: "journal:" + name}
}

// running makes a cluster and settles it.
func (h *harness) running(name string) providers.Cluster {
	h.t.Helper()
	c, err := h.adapter.EnsureCluster(h.t.Context(), h.acct, h.spec(name))
	if err != nil {
		h.t.Fatalf("EnsureCluster %s: %v", name, err)
	}
	for range 5 {
		h.emu.Advance()
	}
	c, err = h.adapter.GetCluster(h.t.Context(), h.acct, c.Ref)
	if err != nil || c.Status != providers.ClusterRunning {
		h.t.Fatalf("cluster %s: %v %+v", name, err, c)
	}
	return c
}

func (h *harness) pool(name, machine string, nodes int) providers.NodePoolSpec {
	return providers.NodePoolSpec{Name: name, Shape: providers.Shape{MachineType: machine}, Size: providers.Size{NodeCount: nodes},
		Labels: providers.PoolLabels("pool_abcdef", false), ClientToken: "journal:" + name}
}

// delta counts the requests f makes, by operation.
func (h *harness) delta(f func()) map[string]int {
	before := h.emu.Counts()
	f()
	return since(before, h.emu.Counts())
}

// TestRetriesAreOff: a throttled or failing answer is one request per
// attempt; the journal decides when to try again. The control shows that
// the SDK's default retryer would have repeated the same answers.
func TestRetriesAreOff(t *testing.T) {
	cases := []struct {
		name      string
		op        string
		status    int
		code      string
		call      func(h *harness) error
		class     providers.Class
		wait      time.Duration
		sdkWould  bool
		sideEffet providers.SideEffect
	}{
		{"eks 429", "DescribeCluster", 429, "ThrottlingException", func(h *harness) error {
			_, err := h.adapter.GetCluster(h.t.Context(), h.acct, providers.ClusterRef{Location: "us-east-1", Name: "c1"})
			return err
		}, providers.Throttled, 7 * time.Second, true, providers.None},
		{"eks 429 unmodeled", "DescribeCluster", 429, "TooManyRequestsException", func(h *harness) error {
			_, err := h.adapter.GetCluster(h.t.Context(), h.acct, providers.ClusterRef{Location: "us-east-1", Name: "c1"})
			return err
		}, providers.Throttled, 7 * time.Second, true, providers.None},
		{"eks 503", "DescribeCluster", 503, "ServiceUnavailableException", func(h *harness) error {
			_, err := h.adapter.GetCluster(h.t.Context(), h.acct, providers.ClusterRef{Location: "us-east-1", Name: "c1"})
			return err
		}, providers.Unavailable, 0, true, providers.None},
		{"eks 500 on a create", "CreateCluster", 500, "ServerException", func(h *harness) error {
			_, err := h.adapter.EnsureCluster(h.t.Context(), h.acct, h.spec("c2"))
			return err
		}, providers.Unavailable, 0, true, providers.Maybe},
		{"ec2 503", "DescribeInstanceTypes", 503, "RequestLimitExceeded", func(h *harness) error {
			_, err := h.adapter.MachineType(h.t.Context(), h.acct, "us-east-1", "m5.large")
			return err
		}, providers.Throttled, 7 * time.Second, true, providers.None},
		{"sts 503", "GetCallerIdentity", 503, "ServiceUnavailable", func(h *harness) error {
			return h.adapter.Verify(h.t.Context(), h.acct)
		}, providers.Unavailable, 0, true, providers.None},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, harnessOpts{emu: eksemu.Options{Steps: &eksemu.Steps{}}})
			h.running("c1")
			h.emu.Inject(eksemu.Fault{Op: c.op, Status: c.status, Code: c.code, RetryAfter: c.wait})
			d := h.delta(func() {
				err := c.call(h)
				if providers.ClassOf(err) != c.class || providers.RetryAfterOf(err) != c.wait || providers.SideEffectOf(err) != c.sideEffet {
					t.Errorf("got %v: class %q, retry after %s, side effect %q; want %q, %s, %q", err,
						providers.ClassOf(err), providers.RetryAfterOf(err), providers.SideEffectOf(err), c.class, c.wait, c.sideEffet)
				}
			})
			if d[c.op] != 1 {
				t.Errorf("%d requests of %s for one attempt: %v", d[c.op], c.op, d)
			}
		})
	}
	t.Run("control: the SDK's default retryer", func(t *testing.T) {
		h := newHarness(t, harnessOpts{emu: eksemu.Options{Steps: &eksemu.Steps{}}})
		h.running("c1")
		cfg := sdkaws.Config{Region: "us-east-1", BaseEndpoint: sdkaws.String(h.emu.URL()), Credentials: credentials.NewStaticCredentialsProvider(keyID, keySecret, ""),
			Retryer: func() sdkaws.Retryer {
				return retry.NewStandard(func(o *retry.StandardOptions) {
					o.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return 0, nil })
				})
			}}
		client := eks.NewFromConfig(cfg)
		for _, code := range []struct {
			status int
			code   string
		}{{429, "ThrottlingException"}, {429, "TooManyRequestsException"}, {503, "ServiceUnavailableException"}} {
			h.emu.Inject(eksemu.Fault{Op: "DescribeCluster", Count: 3, Status: code.status, Code: code.code})
			d := h.delta(func() {
				_, _ = client.DescribeCluster(t.Context(), &eks.DescribeClusterInput{Name: sdkaws.String("c1")})
			})
			if d["DescribeCluster"] != 3 {
				t.Errorf("%s: the default retryer made %d requests, want 3", code.code, d["DescribeCluster"])
			}
		}
	})
}

// TestErrorClasses maps the emulator's answers, each made as the service
// makes it, to the boundary's classes, side effects and reasons.
func TestErrorClasses(t *testing.T) {
	type want struct {
		class  providers.Class
		side   providers.SideEffect
		reason string
		text   string
	}
	cases := []struct {
		name string
		emu  eksemu.Options
		run  func(h *harness) error
		want want
	}{
		{"missing cluster", eksemu.Options{}, func(h *harness) error {
			_, err := h.adapter.GetCluster(h.t.Context(), h.acct, providers.ClusterRef{Location: "us-east-1", Name: "nope"})
			return err
		}, want{providers.NotFound, providers.None, "", "No cluster found for name: nope."}},
		{"bad name", eksemu.Options{}, func(h *harness) error {
			_, err := h.adapter.EnsureCluster(h.t.Context(), h.acct, h.spec("-bad"))
			return err
		}, want{providers.Invalid, providers.None, "", "InvalidParameterException"}},
		{"cluster not active yet", eksemu.Options{}, func(h *harness) error {
			c, _ := h.adapter.EnsureCluster(h.t.Context(), h.acct, h.spec("c1"))
			_, err := h.adapter.EnsureNodePool(h.t.Context(), h.acct, c.Ref, h.pool("fa-abcdef-cpu", "m5.large", 1))
			return err
		}, want{providers.Conflict, providers.None, "", "not in ACTIVE status"}},
		{"quota", eksemu.Options{Steps: &eksemu.Steps{}, MaxClusters: 1}, func(h *harness) error {
			h.running("c1")
			_, err := h.adapter.EnsureCluster(h.t.Context(), h.acct, h.spec("c2"))
			return err
		}, want{providers.Terminal, providers.None, "quota", "ResourceLimitExceededException"}},
		{"unsupported zone", eksemu.Options{UnsupportedZones: []string{"us-east-1b"}}, func(h *harness) error {
			_, err := h.adapter.EnsureCluster(h.t.Context(), h.acct, h.spec("c1"))
			return err
		}, want{providers.Invalid, providers.None, "zone", "us-east-1a, us-east-1c"}},
		{"delete with node groups", eksemu.Options{Steps: &eksemu.Steps{Delete: 2}}, func(h *harness) error {
			c := h.running("c1")
			if _, err := h.adapter.EnsureNodePool(h.t.Context(), h.acct, c.Ref, h.pool("fa-abcdef-cpu", "m5.large", 1)); err != nil {
				return err
			}
			_, err := h.adapter.DeleteCluster(h.t.Context(), h.acct, c.Ref)
			return err
		}, want{providers.Conflict, providers.Done, "nodePoolsRemain", "fa-abcdef-cpu"}},
		{"permission", eksemu.Options{}, func(h *harness) error {
			h.emu.Inject(eksemu.Fault{Op: "ListClusters", Status: 403, Code: "AccessDeniedException", Message: "User is not authorized to perform: eks:ListClusters"})
			_, err := h.adapter.ListClusters(h.t.Context(), h.acct, providers.LabelSubstratePool)
			return err
		}, want{providers.Terminal, providers.None, "permission", "eks:ListClusters"}},
		{"client exception", eksemu.Options{}, func(h *harness) error {
			h.emu.Inject(eksemu.Fault{Op: "CreateCluster", Status: 400, Code: "ClientException"})
			_, err := h.adapter.EnsureCluster(h.t.Context(), h.acct, h.spec("c1"))
			return err
		}, want{providers.Invalid, providers.None, "", "ClientException"}},
		{"a code nobody knows", eksemu.Options{}, func(h *harness) error {
			h.emu.Inject(eksemu.Fault{Op: "CreateCluster", Status: 418, Code: "TeapotException"})
			_, err := h.adapter.EnsureCluster(h.t.Context(), h.acct, h.spec("c1"))
			return err
		}, want{providers.Unknown, providers.Maybe, "", "TeapotException"}},
		{"answer lost after acting", eksemu.Options{}, func(h *harness) error {
			h.emu.DropAfterActing("CreateCluster", 1)
			_, err := h.adapter.EnsureCluster(h.t.Context(), h.acct, h.spec("c1"))
			return err
		}, want{providers.Unknown, providers.Maybe, "", "CreateCluster"}},
		{"wrong secret", eksemu.Options{}, func(h *harness) error {
			h.secrets["secret://ops/aws-secret"] = "not-the-secret"
			return h.adapter.Verify(h.t.Context(), h.acct)
		}, want{providers.Terminal, providers.None, "credentialsRefused", "SignatureDoesNotMatch"}},
		{"unknown key at EKS", eksemu.Options{}, func(h *harness) error {
			h.secrets["secret://ops/aws-key-id"] = "AKIANOBODY0000000000"
			_, err := h.adapter.GetCluster(h.t.Context(), h.acct, providers.ClusterRef{Location: "us-east-1", Name: "c1"})
			return err
		}, want{providers.Terminal, providers.None, "credentialsRefused", "UnrecognizedClientException"}},
		{"role not assumable", eksemu.Options{}, func(h *harness) error {
			acct := account("team-k8s", map[string]any{"accessKeyId": "secret://ops/aws-key-id", "secretAccessKey": "secret://ops/aws-secret", "roleArn": teamRoleArn})
			_, err := h.adapter.GetCluster(h.t.Context(), acct, providers.ClusterRef{Location: "us-east-1", Name: "c1"})
			return err
		}, want{providers.Terminal, providers.None, "credentialsRefused", "sts:AssumeRole"}},
		{"secret missing", eksemu.Options{}, func(h *harness) error {
			delete(h.secrets, "secret://ops/aws-secret")
			return h.adapter.Verify(h.t.Context(), h.acct)
		}, want{providers.Terminal, providers.None, "secretMissing", "secretAccessKey (secret://ops/aws-secret) does not resolve"}},
		{"a key instead of a reference", eksemu.Options{}, func(h *harness) error {
			return h.adapter.Verify(h.t.Context(), account("x", map[string]any{"accessKeyId": keyID, "secretAccessKey": keySecret}))
		}, want{providers.Invalid, providers.None, "accountConfig", "must be secret references"}},
		{"an unknown config key", eksemu.Options{}, func(h *harness) error {
			return h.adapter.Verify(h.t.Context(), account("x", map[string]any{"accessKeyId": "secret://ops/aws-key-id", "secretAccessKey": "secret://ops/aws-secret", "subnets": []string{"x"}}))
		}, want{providers.Invalid, providers.None, "accountConfig", `unknown field "subnets"`}},
		{"subnets in one zone", eksemu.Options{}, func(h *harness) error {
			return h.adapter.Verify(h.t.Context(), account("x", map[string]any{"accessKeyId": "secret://ops/aws-key-id", "secretAccessKey": "secret://ops/aws-secret", "eksSubnetIds": []string{subnetA}, "zones": nil}))
		}, want{providers.Invalid, providers.None, "subnets", "at least two zones"}},
		{"a zone without a subnet", eksemu.Options{}, func(h *harness) error {
			return h.adapter.Verify(h.t.Context(), account("x", map[string]any{"accessKeyId": "secret://ops/aws-key-id", "secretAccessKey": "secret://ops/aws-secret", "zones": []string{"us-east-1a", "us-east-1c"}}))
		}, want{providers.Invalid, providers.None, "zone", "us-east-1c has no subnet"}},
		{"a subnet that does not exist", eksemu.Options{}, func(h *harness) error {
			return h.adapter.Verify(h.t.Context(), account("x", map[string]any{"accessKeyId": "secret://ops/aws-key-id", "secretAccessKey": "secret://ops/aws-secret", "eksSubnetIds": []string{subnetA, "subnet-nope"}}))
		}, want{providers.Invalid, providers.None, "subnets", "subnet-nope"}},
		{"unknown machine type", eksemu.Options{}, func(h *harness) error {
			_, err := h.adapter.MachineType(h.t.Context(), h.acct, "us-east-1", "x9.huge")
			return err
		}, want{providers.NotFound, providers.None, "", "InvalidInstanceType"}},
		{"machine type not offered in a zone", eksemu.Options{Subnets: zonesABC()}, func(h *harness) error {
			acct := account("x", map[string]any{"accessKeyId": "secret://ops/aws-key-id", "secretAccessKey": "secret://ops/aws-secret", "zones": nil, "eksSubnetIds": []string{subnetA, subnetB, subnetC}})
			_, err := h.adapter.MachineType(h.t.Context(), acct, "us-east-1c", "p5.48xlarge")
			return err
		}, want{providers.NotFound, providers.None, "", "not offered in zone us-east-1c"}},
		{"a cluster in a zone", eksemu.Options{}, func(h *harness) error {
			spec := h.spec("c1")
			spec.Location = "us-east-1a"
			_, err := h.adapter.EnsureCluster(h.t.Context(), h.acct, spec)
			return err
		}, want{providers.Invalid, providers.None, "location", `use "us-east-1"`}},
		{"wrong accelerators", eksemu.Options{Steps: &eksemu.Steps{}}, func(h *harness) error {
			c := h.running("c1")
			p := h.pool("fa-abcdef-gpu", "p5.48xlarge", 1)
			p.Accelerators = &providers.Accelerators{Type: "nvidia-a100", Count: 8}
			_, err := h.adapter.EnsureNodePool(h.t.Context(), h.acct, c.Ref, p)
			return err
		}, want{providers.Invalid, providers.None, "accelerators", "has 8 x nvidia-h100, not 8 x nvidia-a100"}},
		{"no access entry on an adopted cluster", eksemu.Options{}, func(h *harness) error {
			if _, err := h.emu.Seed(eksemu.SeedCluster{Name: "theirs"}); err != nil {
				return err
			}
			_, err := h.adapter.ReadAdoptable(h.t.Context(), h.acct, "us-east-1/theirs")
			return err
		}, want{providers.Terminal, providers.None, "accessEntryMissing", "aws eks create-access-entry --region us-east-1 --cluster-name theirs --principal-arn " + userArn}},
		{"an adopted cluster in CONFIG_MAP mode", eksemu.Options{}, func(h *harness) error {
			if _, err := h.emu.Seed(eksemu.SeedCluster{Name: "theirs", AuthenticationMode: "CONFIG_MAP"}); err != nil {
				return err
			}
			_, err := h.adapter.ReadAdoptable(h.t.Context(), h.acct, "us-east-1/theirs")
			return err
		}, want{providers.Terminal, providers.None, "accessEntryMissing", "authenticationMode=API_AND_CONFIG_MAP"}},
		{"an adopt id of another shape", eksemu.Options{}, func(h *harness) error {
			_, err := h.adapter.ReadAdoptable(h.t.Context(), h.acct, "theirs")
			return err
		}, want{providers.Invalid, providers.None, "adoptId", "<region>/<cluster name>"}},
		{"the emulator is gone", eksemu.Options{}, func(h *harness) error {
			h.emu.Close()
			_, err := h.adapter.GetCluster(h.t.Context(), h.acct, providers.ClusterRef{Location: "us-east-1", Name: "c1"})
			return err
		}, want{providers.Unavailable, providers.None, "", "connection refused"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, harnessOpts{emu: c.emu})
			err := c.run(h)
			got := want{providers.ClassOf(err), providers.SideEffectOf(err), providers.ReasonOf(err), ""}
			if got.class != c.want.class || got.side != c.want.side || got.reason != c.want.reason || err == nil || !strings.Contains(err.Error(), c.want.text) {
				t.Errorf("got %v\n  class %q side %q reason %q\nwant class %q side %q reason %q, text %q", err, got.class, got.side, got.reason, c.want.class, c.want.side, c.want.reason, c.want.text)
			}
			var pe *providers.Error
			if err != nil && (!errors.As(err, &pe) || pe.Op == "") {
				t.Errorf("not a providers.Error naming its method: %#v", err)
			}
		})
	}
}

func zonesABC() []eksemu.Subnet {
	return []eksemu.Subnet{
		{ID: subnetA, Zone: "us-east-1a", VpcID: "vpc-1", CIDR: "10.0.0.0/24"},
		{ID: subnetB, Zone: "us-east-1b", VpcID: "vpc-1", CIDR: "10.0.1.0/24"},
		{ID: subnetC, Zone: "us-east-1c", VpcID: "vpc-1", CIDR: "10.0.2.0/24"},
	}
}

// TestRequestsPerStep counts what each step of the adapter costs, caches
// warm (subnet zones and instance types never change, so they are asked
// once per adapter).
func TestRequestsPerStep(t *testing.T) {
	h := newHarness(t, harnessOpts{emu: eksemu.Options{Steps: &eksemu.Steps{}}})
	h.seedTheirs()
	ctx := t.Context()
	var c providers.Cluster
	var err error
	steps := []struct {
		name string
		do   func()
		want map[string]int
	}{
		{"Verify, cold", func() { err = h.adapter.Verify(ctx, h.acct) }, map[string]int{"GetCallerIdentity": 1, "DescribeSubnets": 1}},
		{"Verify, warm", func() { err = h.adapter.Verify(ctx, h.acct) }, map[string]int{"GetCallerIdentity": 1}},
		{"Locations", func() { _, err = h.adapter.Locations(ctx, h.acct) }, map[string]int{}},
		{"Rules", func() { _, err = h.adapter.Rules(ctx, h.acct) }, map[string]int{}},
		{"MachineType in the region, cold", func() { _, err = h.adapter.MachineType(ctx, h.acct, "us-east-1", "p5.48xlarge") }, map[string]int{"DescribeInstanceTypes": 1}},
		{"MachineType in a zone, warm", func() { _, err = h.adapter.MachineType(ctx, h.acct, "us-east-1a", "p5.48xlarge") }, map[string]int{"DescribeInstanceTypeOfferings": 1}},
		{"EnsureCluster, new", func() { c, err = h.adapter.EnsureCluster(ctx, h.acct, h.spec("c1")) }, map[string]int{"DescribeCluster": 1, "CreateCluster": 1}},
		{"EnsureCluster, as it is", func() { c, err = h.adapter.EnsureCluster(ctx, h.acct, h.spec("c1")) }, map[string]int{"DescribeCluster": 1}},
		{"GetCluster", func() { c, err = h.adapter.GetCluster(ctx, h.acct, c.Ref) }, map[string]int{"DescribeCluster": 1}},
		{"EnsureNodePool, new GPU Spot", func() {
			p := h.pool("fa-abcdef-gpu", "p5.48xlarge", 1)
			p.Spot = true
			_, err = h.adapter.EnsureNodePool(ctx, h.acct, c.Ref, p)
		}, map[string]int{"DescribeNodegroup": 1, "CreateNodegroup": 1}},
		{"EnsureNodePool, new CPU (type cold)", func() { _, err = h.adapter.EnsureNodePool(ctx, h.acct, c.Ref, h.pool("fa-abcdef-cpu", "m5.large", 1)) },
			map[string]int{"DescribeNodegroup": 1, "DescribeInstanceTypes": 1, "CreateNodegroup": 1}},
		{"EnsureNodePool, as it is", func() { _, err = h.adapter.EnsureNodePool(ctx, h.acct, c.Ref, h.pool("fa-abcdef-cpu", "m5.large", 1)) }, map[string]int{"DescribeNodegroup": 1}},
		{"EnsureNodePool, resized", func() { _, err = h.adapter.EnsureNodePool(ctx, h.acct, c.Ref, h.pool("fa-abcdef-cpu", "m5.large", 2)) },
			map[string]int{"DescribeNodegroup": 1, "UpdateNodegroupConfig": 1}},
		{"ResizeNodePool to autoscaling", func() {
			_, err = h.adapter.ResizeNodePool(ctx, h.acct, c.Ref, "fa-abcdef-cpu", providers.Size{NodeCount: 1, Autoscaling: &providers.Autoscaling{MinNodes: 0, MaxNodes: 3}})
		}, map[string]int{"DescribeNodegroup": 1, "TagResource": 1, "UpdateNodegroupConfig": 1}},
		{"ResizeNodePool within autoscaling", func() {
			_, err = h.adapter.ResizeNodePool(ctx, h.acct, c.Ref, "fa-abcdef-cpu", providers.Size{NodeCount: 2, Autoscaling: &providers.Autoscaling{MinNodes: 0, MaxNodes: 3}})
		}, map[string]int{"DescribeNodegroup": 1, "UpdateNodegroupConfig": 1}},
		{"GetNodePool", func() { _, err = h.adapter.GetNodePool(ctx, h.acct, c.Ref, "fa-abcdef-cpu") }, map[string]int{"DescribeNodegroup": 1}},
		{"ListNodePools of two", func() { _, err = h.adapter.ListNodePools(ctx, h.acct, c.Ref) }, map[string]int{"ListNodegroups": 1, "DescribeNodegroup": 2}},
		{"Credentials", func() { _, err = h.adapter.Credentials(ctx, h.acct, c.Ref) }, map[string]int{"DescribeCluster": 1}},
		{"ListClusters of two", func() { _, err = h.adapter.ListClusters(ctx, h.acct, providers.LabelSubstratePool) }, map[string]int{"ListClusters": 1, "DescribeCluster": 2, "DescribeAutoScalingGroups": 1}},
		{"ReadAdoptable", func() { _, err = h.adapter.ReadAdoptable(ctx, h.acct, "us-east-1/theirs") },
			map[string]int{"DescribeCluster": 1, "GetCallerIdentity": 1, "ListAssociatedAccessPolicies": 1}},
		{"ReadAdoptable through roleArn", func() { _, err = h.adapter.ReadAdoptable(ctx, h.team, "us-east-1/theirs") },
			map[string]int{"AssumeRole": 1, "DescribeCluster": 1, "ListAssociatedAccessPolicies": 1}},
		{"RevokeAccess of the tenant's entry", func() {
			err = h.adapter.RevokeAccess(ctx, h.acct, providers.ClusterRef{Location: "us-east-1", Name: "theirs"})
		},
			map[string]int{"DescribeCluster": 1, "GetCallerIdentity": 1, "DescribeAccessEntry": 1}},
		{"DeleteCluster with node groups", func() { _, err = h.adapter.DeleteCluster(ctx, h.acct, c.Ref) },
			map[string]int{"DeleteCluster": 1, "DescribeCluster": 1, "ListNodegroups": 1, "DeleteNodegroup": 2}},
	}
	for _, s := range steps {
		got := h.delta(func() { err = nil; s.do() })
		wantErr := s.name == "DeleteCluster with node groups"
		if (err != nil) != wantErr && !(wantErr && providers.ReasonOf(err) == "nodePoolsRemain") {
			t.Errorf("%s: %v", s.name, err)
		}
		if !maps.Equal(got, s.want) {
			t.Errorf("%s: requests %v, want %v", s.name, got, s.want)
		}
	}
}
