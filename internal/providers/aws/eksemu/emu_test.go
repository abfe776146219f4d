package eksemu_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/providers/aws/eksemu"
)

const (
	akid     = "AKIDEXAMPLE00000001"
	secret   = "emulator-test-secret"
	userArn  = "arn:aws:iam::111111111111:user/fleet"
	roleArn  = "arn:aws:iam::111111111111:role/eks"
	subnetA  = "subnet-0000000000000000a"
	subnetB  = "subnet-0000000000000001b"
	tokenLen = "0123456789abcdef0123456789abcdef-"
)

type clients struct {
	emu *eksemu.Emulator
	clk *clock.Fake
	cfg sdkaws.Config
	eks *eks.Client
	ec2 *ec2.Client
	sts *sts.Client
}

// start serves an emulator on a fake clock set to the wall time (the SDK
// signs with the wall clock) and returns the SDK's clients, retries off.
func start(t *testing.T, o eksemu.Options) *clients {
	t.Helper()
	clk := clock.NewFake(time.Now())
	o.Clock = clk
	e := eksemu.New(o)
	url := e.Start()
	t.Cleanup(e.Close)
	e.AddUser(akid, secret, userArn)
	return dial(e, clk, url, akid, secret)
}

func dial(e *eksemu.Emulator, clk *clock.Fake, url, key, sec string) *clients {
	cfg := sdkaws.Config{
		Region: "us-east-1", BaseEndpoint: sdkaws.String(url),
		Credentials: credentials.NewStaticCredentialsProvider(key, sec, ""),
		Retryer:     func() sdkaws.Retryer { return sdkaws.NopRetryer{} },
	}
	return &clients{emu: e, clk: clk, cfg: cfg, eks: eks.NewFromConfig(cfg), ec2: ec2.NewFromConfig(cfg), sts: sts.NewFromConfig(cfg)}
}

func tok(s string) *string { return sdkaws.String(tokenLen + s) }

func (c *clients) createCluster(t *testing.T, name, token string, mode ekstypes.AuthenticationMode) (*eks.CreateClusterOutput, error) {
	t.Helper()
	return c.eks.CreateCluster(t.Context(), &eks.CreateClusterInput{
		Name: sdkaws.String(name), RoleArn: sdkaws.String(roleArn), ClientRequestToken: tok(token),
		ResourcesVpcConfig: &ekstypes.VpcConfigRequest{SubnetIds: []string{subnetA, subnetB}},
		AccessConfig:       &ekstypes.CreateAccessConfigRequest{AuthenticationMode: mode},
		Tags:               map[string]string{"fleet-agent.dev/substrate-pool": "pool_x"},
	})
}

func (c *clients) status(t *testing.T, name string) (ekstypes.ClusterStatus, *ekstypes.Cluster, error) {
	t.Helper()
	out, err := c.eks.DescribeCluster(t.Context(), &eks.DescribeClusterInput{Name: sdkaws.String(name)})
	if err != nil {
		return "", nil, err
	}
	return out.Cluster.Status, out.Cluster, nil
}

func code(err error) string {
	var api smithy.APIError
	if errors.As(err, &api) {
		return api.ErrorCode()
	}
	return ""
}

func TestClusterLifecycleAdvancesPerObservation(t *testing.T) {
	c := start(t, eksemu.Options{})
	out, err := c.createCluster(t, "c1", "a", ekstypes.AuthenticationModeApi)
	if err != nil {
		t.Fatal(err)
	}
	if out.Cluster.Status != ekstypes.ClusterStatusCreating || out.Cluster.Endpoint != nil || *out.Cluster.ClientRequestToken != *tok("a") {
		t.Fatalf("a new cluster: %s endpoint %v token %v", out.Cluster.Status, out.Cluster.Endpoint, out.Cluster.ClientRequestToken)
	}
	if !strings.HasPrefix(*out.Cluster.Arn, "arn:aws:eks:us-east-1:111111111111:cluster/c1") {
		t.Errorf("arn %s", *out.Cluster.Arn)
	}
	var seen []ekstypes.ClusterStatus
	for range 3 {
		s, _, err := c.status(t, "c1")
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, s)
	}
	s, cl, _ := c.status(t, "c1")
	if want := []ekstypes.ClusterStatus{"CREATING", "CREATING", "ACTIVE"}; strings.Join(toStrings(seen), ",") != strings.Join(toStrings(want), ",") {
		t.Errorf("statuses %v, want %v (three steps)", seen, want)
	}
	if s != ekstypes.ClusterStatusActive || !strings.HasPrefix(*cl.Endpoint, "https://") || cl.CertificateAuthority.Data == nil {
		t.Fatalf("an ACTIVE cluster without its endpoint or CA: %+v", cl)
	}
	ca, _ := base64.StdEncoding.DecodeString(*cl.CertificateAuthority.Data)
	if !bytes.HasPrefix(ca, []byte("-----BEGIN CERTIFICATE-----")) {
		t.Errorf("the CA is not base64 of a PEM: %q", ca[:20])
	}
	del, err := c.eks.DeleteCluster(t.Context(), &eks.DeleteClusterInput{Name: sdkaws.String("c1")})
	if err != nil || del.Cluster.Status != ekstypes.ClusterStatusDeleting {
		t.Fatalf("DeleteCluster: %v %v", err, del)
	}
	_, err = c.eks.DeleteCluster(t.Context(), &eks.DeleteClusterInput{Name: sdkaws.String("c1")})
	var inUse *ekstypes.ResourceInUseException
	if !errors.As(err, &inUse) {
		t.Errorf("a second delete: %v", err)
	}
	_, _, err = c.status(t, "c1")
	var nf *ekstypes.ResourceNotFoundException
	if !errors.As(err, &nf) || !strings.Contains(err.Error(), "No cluster found for name: c1.") || *nf.ClusterName != "c1" {
		t.Errorf("a deleted cluster: %v", err)
	}
}

func toStrings[T ~string](s []T) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = string(v)
	}
	return out
}

func TestOperationsAdvanceOnTheClock(t *testing.T) {
	c := start(t, eksemu.Options{Steps: &eksemu.Steps{Cluster: 600, Nodegroup: 600, Update: 600, Delete: 600}, StepEvery: time.Second})
	if _, err := c.createCluster(t, "c1", "a", ekstypes.AuthenticationModeApi); err != nil {
		t.Fatal(err)
	}
	c.clk.Advance(9 * time.Minute)
	if s, _, _ := c.status(t, "c1"); s != ekstypes.ClusterStatusCreating {
		t.Errorf("after 9 minutes: %s", s)
	}
	c.clk.Advance(time.Minute)
	if s, _, _ := c.status(t, "c1"); s != ekstypes.ClusterStatusActive {
		t.Errorf("after 10 minutes: %s", s)
	}
}

func TestClientRequestTokens(t *testing.T) {
	c := start(t, eksemu.Options{})
	first, err := c.createCluster(t, "c1", "a", ekstypes.AuthenticationModeApi)
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.createCluster(t, "c1", "a", ekstypes.AuthenticationModeApi)
	if err != nil || *again.Cluster.Arn != *first.Cluster.Arn {
		t.Fatalf("the same token and body: %v", err)
	}
	if _, err := c.createCluster(t, "c1", "a", ekstypes.AuthenticationModeApiAndConfigMap); code(err) != "InvalidParameterException" {
		t.Errorf("the same token, another body: %v", err)
	}
	if _, err := c.createCluster(t, "c1", "b", ekstypes.AuthenticationModeApi); code(err) != "ResourceInUseException" || !strings.Contains(err.Error(), "Cluster already exists with name: c1") {
		t.Errorf("another token, the same name: %v", err)
	}
	_, err = c.eks.CreateCluster(t.Context(), &eks.CreateClusterInput{Name: sdkaws.String("c2"), RoleArn: sdkaws.String(roleArn), ClientRequestToken: sdkaws.String("short"),
		ResourcesVpcConfig: &ekstypes.VpcConfigRequest{SubnetIds: []string{subnetA, subnetB}}})
	// botocore's model (what the AWS CLI validates against, tested by AWS
	// against the real service) has the token as a plain string with no
	// length rule, so a short one is taken.
	if err != nil {
		t.Errorf("a short token: %v", err)
	}
	if n := c.emu.Count("CreateCluster"); n != 5 {
		t.Errorf("recorded %d CreateCluster requests, sent 5", n)
	}
}

func TestNamesAndLimits(t *testing.T) {
	c := start(t, eksemu.Options{Steps: &eksemu.Steps{}, MaxClusters: 1})
	if _, err := c.createCluster(t, "-bad", "a", ekstypes.AuthenticationModeApi); code(err) != "InvalidParameterException" {
		t.Errorf("a bad name: %v", err)
	}
	if _, err := c.createCluster(t, strings.Repeat("a", 101), "b", ekstypes.AuthenticationModeApi); code(err) != "InvalidParameterException" {
		t.Errorf("a long name: %v", err)
	}
	if _, err := c.createCluster(t, "c1", "c", ekstypes.AuthenticationModeApi); err != nil {
		t.Fatal(err)
	}
	var limit *ekstypes.ResourceLimitExceededException
	if _, err := c.createCluster(t, "c2", "d", ekstypes.AuthenticationModeApi); !errors.As(err, &limit) {
		t.Errorf("beyond the quota: %v", err)
	}
	ng := func(name string, min, max, desired int32) error {
		_, err := c.eks.CreateNodegroup(t.Context(), &eks.CreateNodegroupInput{
			ClusterName: sdkaws.String("c1"), NodegroupName: sdkaws.String(name), NodeRole: sdkaws.String(roleArn),
			Subnets: []string{subnetA}, InstanceTypes: []string{"m5.large"},
			ScalingConfig: &ekstypes.NodegroupScalingConfig{MinSize: sdkaws.Int32(min), MaxSize: sdkaws.Int32(max), DesiredSize: sdkaws.Int32(desired)},
		})
		return err
	}
	for _, tc := range []struct {
		min, max, desired int32
		msg               string
	}{
		{0, 0, 0, "maxSize must be at least 1"},
		{3, 4, 2, "Minimum capacity 3 can't be greater than desired size 2"},
		{0, 2, 3, "desiredSize can't be greater than maxSize"},
		{0, 500, 1, "exceeds the limit of 450"},
	} {
		if err := ng("ng", tc.min, tc.max, tc.desired); code(err) != "InvalidParameterException" || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("scaling %d/%d/%d: %v", tc.min, tc.max, tc.desired, err)
		}
	}
	if err := ng("ng", 0, 1, 0); err != nil {
		t.Errorf("zero nodes: %v", err)
	}
	_, err := c.eks.CreateNodegroup(t.Context(), &eks.CreateNodegroupInput{
		ClusterName: sdkaws.String("c1"), NodegroupName: sdkaws.String("gpu"), NodeRole: sdkaws.String(roleArn),
		Subnets: []string{subnetA}, InstanceTypes: []string{"m5.large"}, AmiType: ekstypes.AMITypesAl2023X8664Nvidia,
	})
	if code(err) != "InvalidParameterException" || !strings.Contains(err.Error(), "not a valid instance type for requested amiType") {
		t.Errorf("a GPU AMI on a CPU type: %v", err)
	}
}

func TestNodegroupsBusyAndDeletes(t *testing.T) {
	c := start(t, eksemu.Options{})
	if _, err := c.createCluster(t, "c1", "a", ekstypes.AuthenticationModeApi); err != nil {
		t.Fatal(err)
	}
	create := func() error {
		_, err := c.eks.CreateNodegroup(t.Context(), &eks.CreateNodegroupInput{
			ClusterName: sdkaws.String("c1"), NodegroupName: sdkaws.String("ng"), NodeRole: sdkaws.String(roleArn),
			Subnets: []string{subnetA, subnetB}, InstanceTypes: []string{"m5.large"},
		})
		return err
	}
	if err := create(); code(err) != "InvalidRequestException" || !strings.Contains(err.Error(), "Cluster 'c1' is not in ACTIVE status") {
		t.Fatalf("a node group on a CREATING cluster: %v", err)
	}
	c.emu.Advance()
	c.emu.Advance()
	c.emu.Advance()
	if err := create(); err != nil {
		t.Fatal(err)
	}
	if err := create(); code(err) != "ResourceInUseException" || !strings.Contains(err.Error(), "NodeGroup already exists with name ng and cluster name c1") {
		t.Errorf("a second node group of that name: %v", err)
	}
	_, err := c.eks.UpdateNodegroupConfig(t.Context(), &eks.UpdateNodegroupConfigInput{ClusterName: sdkaws.String("c1"), NodegroupName: sdkaws.String("ng"),
		ScalingConfig: &ekstypes.NodegroupScalingConfig{MinSize: sdkaws.Int32(0), MaxSize: sdkaws.Int32(4), DesiredSize: sdkaws.Int32(3)}})
	if code(err) != "ResourceInUseException" || !strings.Contains(err.Error(), "not in Active State") {
		t.Errorf("an update of a CREATING node group: %v", err)
	}
	_, err = c.eks.DeleteCluster(t.Context(), &eks.DeleteClusterInput{Name: sdkaws.String("c1")})
	var inUse *ekstypes.ResourceInUseException
	if !errors.As(err, &inUse) || *inUse.NodegroupName != "ng" || !strings.Contains(err.Error(), "Cluster has nodegroups attached") {
		t.Errorf("deleting a cluster with node groups: %v", err)
	}
	c.emu.Advance()
	c.emu.Advance()
	up, err := c.eks.UpdateNodegroupConfig(t.Context(), &eks.UpdateNodegroupConfigInput{ClusterName: sdkaws.String("c1"), NodegroupName: sdkaws.String("ng"),
		ScalingConfig: &ekstypes.NodegroupScalingConfig{MinSize: sdkaws.Int32(0), MaxSize: sdkaws.Int32(4), DesiredSize: sdkaws.Int32(3)},
		Labels:        &ekstypes.UpdateLabelsPayload{AddOrUpdateLabels: map[string]string{"a": "b"}}})
	if err != nil {
		t.Fatal(err)
	}
	if up.Update.Type != ekstypes.UpdateTypeConfigUpdate || up.Update.Status != ekstypes.UpdateStatusInProgress || len(up.Update.Params) != 4 {
		t.Errorf("update %+v", up.Update)
	}
	d, _ := c.eks.DescribeNodegroup(t.Context(), &eks.DescribeNodegroupInput{ClusterName: sdkaws.String("c1"), NodegroupName: sdkaws.String("ng")})
	if d.Nodegroup.Status != ekstypes.NodegroupStatusActive || *d.Nodegroup.ScalingConfig.DesiredSize != 3 || d.Nodegroup.Labels["a"] != "b" {
		t.Errorf("after the update: %s %+v %v", d.Nodegroup.Status, d.Nodegroup.ScalingConfig, d.Nodegroup.Labels)
	}
	u, err := c.eks.DescribeUpdate(t.Context(), &eks.DescribeUpdateInput{Name: sdkaws.String("c1"), UpdateId: up.Update.Id, NodegroupName: sdkaws.String("ng")})
	if err != nil || u.Update.Status != ekstypes.UpdateStatusSuccessful {
		t.Errorf("DescribeUpdate: %v %+v", err, u)
	}
}

func TestStockout(t *testing.T) {
	c := start(t, eksemu.Options{Steps: &eksemu.Steps{}})
	if _, err := c.createCluster(t, "c1", "a", ekstypes.AuthenticationModeApi); err != nil {
		t.Fatal(err)
	}
	c.emu.Stockout("p5.48xlarge", true)
	mk := func(name string, desired int32) *ekstypes.Nodegroup {
		out, err := c.eks.CreateNodegroup(t.Context(), &eks.CreateNodegroupInput{
			ClusterName: sdkaws.String("c1"), NodegroupName: sdkaws.String(name), NodeRole: sdkaws.String(roleArn),
			Subnets: []string{subnetA}, InstanceTypes: []string{"p5.48xlarge"}, AmiType: ekstypes.AMITypesAl2023X8664Nvidia, CapacityType: ekstypes.CapacityTypesSpot,
			ScalingConfig: &ekstypes.NodegroupScalingConfig{MinSize: sdkaws.Int32(0), MaxSize: sdkaws.Int32(4), DesiredSize: sdkaws.Int32(desired)},
		})
		if err != nil {
			t.Fatal(err)
		}
		return out.Nodegroup
	}
	if ng := mk("failed", 2); ng.Status != ekstypes.NodegroupStatusCreateFailed || ng.Health.Issues[0].Code != ekstypes.NodegroupIssueCodeAsgInstanceLaunchFailures ||
		!strings.Contains(*ng.Health.Issues[0].Message, "InsufficientInstanceCapacity") || !strings.Contains(*ng.Health.Issues[0].Message, "Spot") {
		t.Errorf("made in a stockout: %s %+v", ng.Status, ng.Health)
	}
	if ng := mk("empty", 0); ng.Status != ekstypes.NodegroupStatusActive {
		t.Errorf("no nodes wanted: %s", ng.Status)
	}
	scale := func(n int32) ekstypes.NodegroupStatus {
		_, err := c.eks.UpdateNodegroupConfig(t.Context(), &eks.UpdateNodegroupConfigInput{ClusterName: sdkaws.String("c1"), NodegroupName: sdkaws.String("empty"),
			ScalingConfig: &ekstypes.NodegroupScalingConfig{MinSize: sdkaws.Int32(0), MaxSize: sdkaws.Int32(4), DesiredSize: sdkaws.Int32(n)}})
		if err != nil {
			t.Fatal(err)
		}
		d, _ := c.eks.DescribeNodegroup(t.Context(), &eks.DescribeNodegroupInput{ClusterName: sdkaws.String("c1"), NodegroupName: sdkaws.String("empty")})
		return d.Nodegroup.Status
	}
	if s := scale(2); s != ekstypes.NodegroupStatusDegraded {
		t.Errorf("a scale-out in a stockout: %s", s)
	}
	if s := scale(1); s != ekstypes.NodegroupStatusDegraded {
		t.Errorf("a scale-in leaves DEGRADED: %s", s)
	}
	c.emu.Stockout("p5.48xlarge", false)
	if s := scale(3); s != ekstypes.NodegroupStatusActive {
		t.Errorf("a scale-out once capacity is back: %s", s)
	}
}

// TestClusterCreateFails: an armed failure ends the next create FAILED
// with its health issue and no endpoint; such a cluster takes no node
// group, and a delete removes it; the create after it is ACTIVE again.
func TestClusterCreateFails(t *testing.T) {
	c := start(t, eksemu.Options{Steps: &eksemu.Steps{Cluster: 1}})
	c.emu.FailClusterCreates(1, eksemu.ClusterIssue{Code: "IamRoleNotFound", Message: "The cluster role could not be assumed"})
	for _, n := range []string{"c1", "c2"} {
		if _, err := c.createCluster(t, n, n, ekstypes.AuthenticationModeApi); err != nil {
			t.Fatal(err)
		}
	}
	s, cl, err := c.status(t, "c1")
	if err != nil || s != ekstypes.ClusterStatusFailed || cl.Endpoint != nil || len(cl.Health.Issues) != 1 ||
		cl.Health.Issues[0].Code != ekstypes.ClusterIssueCodeIamRoleNotFound || *cl.Health.Issues[0].Message != "The cluster role could not be assumed" {
		t.Fatalf("a failed create: %v %s %+v", err, s, cl)
	}
	if s, cl, _ := c.status(t, "c2"); s != ekstypes.ClusterStatusActive || len(cl.Health.Issues) != 0 {
		t.Errorf("the next create: %s %+v", s, cl.Health)
	}
	_, err = c.eks.CreateNodegroup(t.Context(), &eks.CreateNodegroupInput{
		ClusterName: sdkaws.String("c1"), NodegroupName: sdkaws.String("ng"), NodeRole: sdkaws.String(roleArn), Subnets: []string{subnetA},
		ScalingConfig: &ekstypes.NodegroupScalingConfig{MinSize: sdkaws.Int32(0), MaxSize: sdkaws.Int32(1), DesiredSize: sdkaws.Int32(0)},
	})
	var invalid *ekstypes.InvalidRequestException
	if !errors.As(err, &invalid) {
		t.Errorf("a node group on a FAILED cluster: %v", err)
	}
	if _, err := c.eks.DeleteCluster(t.Context(), &eks.DeleteClusterInput{Name: sdkaws.String("c1")}); err != nil {
		t.Fatalf("deleting a FAILED cluster: %v", err)
	}
	_, _, err = c.status(t, "c1")
	var nf *ekstypes.ResourceNotFoundException
	if !errors.As(err, &nf) {
		t.Errorf("after its delete: %v", err)
	}
}

func TestThrottlingAndFaults(t *testing.T) {
	c := start(t, eksemu.Options{})
	c.emu.Throttle("ListClusters", 1, "ThrottlingException", 3*time.Second)
	_, err := c.eks.ListClusters(t.Context(), &eks.ListClustersInput{})
	var thr *ekstypes.ThrottlingException
	var resp *awshttp.ResponseError
	if !errors.As(err, &thr) || !errors.As(err, &resp) || resp.HTTPStatusCode() != 429 || resp.Response.Header.Get("Retry-After") != "3" {
		t.Errorf("modeled throttling: %v", err)
	}
	c.emu.Throttle("ListClusters", 1, "TooManyRequestsException", 0)
	_, err = c.eks.ListClusters(t.Context(), &eks.ListClustersInput{})
	var generic *smithy.GenericAPIError
	if !errors.As(err, &generic) || generic.Code != "TooManyRequestsException" {
		t.Errorf("unmodeled throttling: %v", err)
	}
	c.emu.Throttle("DescribeInstanceTypes", 1, "RequestLimitExceeded", 0)
	_, err = c.ec2.DescribeInstanceTypes(t.Context(), &ec2.DescribeInstanceTypesInput{})
	if code(err) != "RequestLimitExceeded" || !errors.As(err, &resp) || resp.HTTPStatusCode() != 503 {
		t.Errorf("EC2 throttling: %v", err)
	}
	c.emu.DropAfterActing("CreateCluster", 1)
	if _, err := c.createCluster(t, "c1", "a", ekstypes.AuthenticationModeApi); err == nil || code(err) != "" {
		t.Fatalf("a dropped answer: %v", err)
	}
	if s := c.emu.ClusterStatus("c1"); s != "CREATING" {
		t.Errorf("the dropped create did not act: %q", s)
	}
	c.emu.Inject(eksemu.Fault{Op: "DeleteCluster", Status: 500, Code: "ServerException", AfterActing: true})
	c.emu.Inject(eksemu.Fault{Op: "DescribeCluster", Count: 1, Status: 503, Code: "ServiceUnavailableException"})
	if _, _, err := c.status(t, "c1"); code(err) != "ServiceUnavailableException" {
		t.Errorf("an injected 503: %v", err)
	}
	recs := c.emu.Requests()
	last := recs[len(recs)-1]
	if last.Op != "DescribeCluster" || last.Status != 503 || last.Service != "eks" {
		t.Errorf("recorded %+v", last)
	}
	if c.emu.Counts()["CreateCluster"] != 1 {
		t.Errorf("counts %v", c.emu.Counts())
	}
}

func TestSignaturesAndRoles(t *testing.T) {
	c := start(t, eksemu.Options{})
	bad := dial(c.emu, c.clk, c.emu.URL(), akid, "wrong-secret")
	if _, err := bad.eks.ListClusters(t.Context(), &eks.ListClustersInput{}); code(err) != "InvalidSignatureException" {
		t.Errorf("a wrong secret: %v", err)
	}
	unknown := dial(c.emu, c.clk, c.emu.URL(), "AKIDNOBODY", secret)
	if _, err := unknown.sts.GetCallerIdentity(t.Context(), &sts.GetCallerIdentityInput{}); code(err) != "InvalidClientTokenId" {
		t.Errorf("an unknown key: %v", err)
	}
	if _, err := unknown.ec2.DescribeSubnets(t.Context(), &ec2.DescribeSubnetsInput{}); code(err) != "AuthFailure" {
		t.Errorf("an unknown key at EC2: %v", err)
	}
	role := "arn:aws:iam::111111111111:role/ops/deployer"
	if _, err := c.sts.AssumeRole(t.Context(), &sts.AssumeRoleInput{RoleArn: sdkaws.String(role), RoleSessionName: sdkaws.String("s1")}); code(err) != "AccessDenied" {
		t.Errorf("an untrusted AssumeRole: %v", err)
	}
	c.emu.AddRole(role, userArn)
	out, err := c.sts.AssumeRole(t.Context(), &sts.AssumeRoleInput{RoleArn: sdkaws.String(role), RoleSessionName: sdkaws.String("s1"), DurationSeconds: sdkaws.Int32(900)})
	if err != nil {
		t.Fatal(err)
	}
	cfg := c.cfg
	cfg.Credentials = credentials.NewStaticCredentialsProvider(*out.Credentials.AccessKeyId, *out.Credentials.SecretAccessKey, *out.Credentials.SessionToken)
	temp := sts.NewFromConfig(cfg)
	id, err := temp.GetCallerIdentity(t.Context(), &sts.GetCallerIdentityInput{})
	if err != nil || *id.Arn != "arn:aws:sts::111111111111:assumed-role/deployer/s1" {
		t.Fatalf("the session's identity: %v %v", err, id)
	}
	c.clk.Advance(901 * time.Second)
	if _, err := temp.GetCallerIdentity(t.Context(), &sts.GetCallerIdentityInput{}); code(err) != "ExpiredToken" {
		t.Errorf("an expired session: %v", err)
	}
}

func TestEC2Catalogue(t *testing.T) {
	c := start(t, eksemu.Options{})
	out, err := c.ec2.DescribeInstanceTypes(t.Context(), &ec2.DescribeInstanceTypesInput{InstanceTypes: []ec2types.InstanceType{"p5.48xlarge", "g5g.xlarge"}})
	if err != nil {
		t.Fatal(err)
	}
	p5 := out.InstanceTypes[0]
	if *p5.GpuInfo.Gpus[0].Name != "H100" || *p5.GpuInfo.Gpus[0].Count != 8 || *p5.VCpuInfo.DefaultVCpus != 192 || *p5.GpuInfo.TotalGpuMemoryInMiB != 655360 {
		t.Errorf("p5.48xlarge: %+v", p5.GpuInfo)
	}
	if out.InstanceTypes[1].ProcessorInfo.SupportedArchitectures[0] != ec2types.ArchitectureTypeArm64 {
		t.Errorf("g5g.xlarge: %+v", out.InstanceTypes[1].ProcessorInfo)
	}
	_, err = c.ec2.DescribeInstanceTypes(t.Context(), &ec2.DescribeInstanceTypesInput{InstanceTypes: []ec2types.InstanceType{"x9.nope"}})
	var generic *smithy.GenericAPIError
	if !errors.As(err, &generic) || generic.Code != "InvalidInstanceType" {
		t.Errorf("an unknown type: %v", err)
	}
	off, err := c.ec2.DescribeInstanceTypeOfferings(t.Context(), &ec2.DescribeInstanceTypeOfferingsInput{LocationType: ec2types.LocationTypeAvailabilityZone,
		Filters: []ec2types.Filter{{Name: sdkaws.String("instance-type"), Values: []string{"p5.48xlarge"}}}})
	if err != nil || len(off.InstanceTypeOfferings) != 2 {
		t.Errorf("p5 offerings: %v %+v", err, off)
	}
	sn, err := c.ec2.DescribeSubnets(t.Context(), &ec2.DescribeSubnetsInput{SubnetIds: []string{subnetB}})
	if err != nil || *sn.Subnets[0].AvailabilityZone != "us-east-1b" || *sn.Subnets[0].AvailabilityZoneId != "use1-az2" {
		t.Errorf("subnet b: %v %+v", err, sn)
	}
	if _, err := c.ec2.DescribeSubnets(t.Context(), &ec2.DescribeSubnetsInput{SubnetIds: []string{"subnet-nope"}}); code(err) != "InvalidSubnetID.NotFound" {
		t.Errorf("an unknown subnet: %v", err)
	}
	p, err := c.ec2.DescribeInstanceTypes(t.Context(), &ec2.DescribeInstanceTypesInput{MaxResults: sdkaws.Int32(5)})
	if err != nil || len(p.InstanceTypes) != 5 || p.NextToken == nil {
		t.Fatalf("a page: %v", err)
	}
	rest, err := c.ec2.DescribeInstanceTypes(t.Context(), &ec2.DescribeInstanceTypesInput{MaxResults: sdkaws.Int32(5), NextToken: p.NextToken})
	if err != nil || len(rest.InstanceTypes) != len(eksemu.DefaultInstanceTypes())-5 || rest.NextToken != nil {
		t.Errorf("the next page: %v", err)
	}
}

func TestAccessEntries(t *testing.T) {
	c := start(t, eksemu.Options{Steps: &eksemu.Steps{}})
	if _, err := c.createCluster(t, "cm", "a", ekstypes.AuthenticationModeConfigMap); err != nil {
		t.Fatal(err)
	}
	_, err := c.eks.CreateAccessEntry(t.Context(), &eks.CreateAccessEntryInput{ClusterName: sdkaws.String("cm"), PrincipalArn: sdkaws.String(roleArn)})
	if code(err) != "InvalidRequestException" || !strings.Contains(err.Error(), "[API, API_AND_CONFIG_MAP]") {
		t.Errorf("an entry on a CONFIG_MAP cluster: %v", err)
	}
	if _, err := c.createCluster(t, "api", "b", ekstypes.AuthenticationModeApi); err != nil {
		t.Fatal(err)
	}
	// EKS made the creator's entry, admin.
	pol, err := c.eks.ListAssociatedAccessPolicies(t.Context(), &eks.ListAssociatedAccessPoliciesInput{ClusterName: sdkaws.String("api"), PrincipalArn: sdkaws.String(userArn)})
	if err != nil || len(pol.AssociatedAccessPolicies) != 1 || *pol.AssociatedAccessPolicies[0].PolicyArn != eksemu.ClusterAdminPolicy {
		t.Fatalf("the creator's entry: %v %+v", err, pol)
	}
	if _, err := c.eks.CreateAccessEntry(t.Context(), &eks.CreateAccessEntryInput{ClusterName: sdkaws.String("api"), PrincipalArn: sdkaws.String("arn:aws:sts::111111111111:assumed-role/x/y")}); code(err) != "InvalidParameterException" {
		t.Errorf("an STS session as principal: %v", err)
	}
	if _, err := c.eks.CreateAccessEntry(t.Context(), &eks.CreateAccessEntryInput{ClusterName: sdkaws.String("api"), PrincipalArn: sdkaws.String(roleArn)}); err != nil {
		t.Fatal(err)
	}
	_, err = c.eks.CreateAccessEntry(t.Context(), &eks.CreateAccessEntryInput{ClusterName: sdkaws.String("api"), PrincipalArn: sdkaws.String(roleArn)})
	if code(err) != "ResourceInUseException" || !strings.Contains(err.Error(), "already in use on this cluster") {
		t.Errorf("a second entry: %v", err)
	}
	if n := c.emu.Count("CreateAccessEntry"); n != 4 {
		t.Errorf("%d CreateAccessEntry recorded", n)
	}
}

// presign makes a token as aws eks get-token does, with the SDK's
// presigner (signed at the wall clock).
func presign(t *testing.T, c *clients, cluster string) string {
	t.Helper()
	pre, err := sts.NewPresignClient(c.sts).PresignGetCallerIdentity(t.Context(), &sts.GetCallerIdentityInput{}, func(po *sts.PresignOptions) {
		po.ClientOptions = append(po.ClientOptions, func(o *sts.Options) {
			o.APIOptions = append(o.APIOptions, smithyhttp.SetHeaderValue("x-k8s-aws-id", cluster), smithyhttp.SetHeaderValue("X-Amz-Expires", "600"))
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return "k8s-aws-v1." + base64.RawURLEncoding.EncodeToString([]byte(pre.URL))
}

// review posts a TokenReview as kube-apiserver's webhook authenticator
// does.
func review(t *testing.T, url, apiVersion, token string) map[string]any {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"apiVersion": apiVersion, "kind": "TokenReview", "spec": map[string]any{"token": token}})
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("TokenReview answer %d: %s", resp.StatusCode, b)
	}
	if out["apiVersion"] != apiVersion || out["kind"] != "TokenReview" {
		t.Errorf("answered %v %v", out["apiVersion"], out["kind"])
	}
	st := out["status"].(map[string]any)
	// Accepted is 200; refused is 403 with no reason, as
	// aws-iam-authenticator answers.
	if ok := st["authenticated"] == true; (ok && resp.StatusCode != http.StatusOK) || (!ok && (resp.StatusCode != http.StatusForbidden || len(st) != 1)) {
		t.Errorf("TokenReview answer %d: %s", resp.StatusCode, b)
	}
	return st
}

// refusal is why the emulator refused the last TokenReview.
func refusal(c *clients) string {
	reqs := c.emu.Requests()
	return reqs[len(reqs)-1].Refusal
}

func TestTokenReview(t *testing.T) {
	c := start(t, eksemu.Options{Steps: &eksemu.Steps{}, KubeEndpoint: "https://127.0.0.1:6443", KubeCA: []byte("-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n")})
	for _, n := range []string{"c1", "c2"} {
		if _, err := c.createCluster(t, n, n, ekstypes.AuthenticationModeApi); err != nil {
			t.Fatal(err)
		}
	}
	_, cl, _ := c.status(t, "c1")
	if *cl.Endpoint != "https://127.0.0.1:6443" {
		t.Errorf("the fronted endpoint is not handed out: %s", *cl.Endpoint)
	}
	token := presign(t, c, "c1")
	url := c.emu.URL()
	st := review(t, url+"/authenticate/c1", "authentication.k8s.io/v1", token)
	user, _ := st["user"].(map[string]any)
	if st["authenticated"] != true || user["username"] != userArn || !strings.Contains(toJSON(user["groups"]), `"system:masters"`) {
		t.Fatalf("the creator's token: %v", st)
	}
	if st := review(t, url+"/authenticate", "authentication.k8s.io/v1beta1", token); st["authenticated"] != true {
		t.Errorf("without a cluster in the path: %v", st)
	}
	if st := review(t, url+"/authenticate/c2", "authentication.k8s.io/v1", token); st["authenticated"] != false {
		t.Errorf("a token for c1 at c2: %v", st)
	}
	if st := review(t, url+"/authenticate/c1", "authentication.k8s.io/v1", token+"A"); st["authenticated"] != false {
		t.Errorf("a forged token: %v", st)
	}
	// Another principal with a valid signature but no access entry.
	c.emu.AddUser("AKIDOTHER0000000001", "other", "arn:aws:iam::111111111111:user/other")
	other := presign(t, dial(c.emu, c.clk, url, "AKIDOTHER0000000001", "other"), "c1")
	if st := review(t, url+"/authenticate/c1", "authentication.k8s.io/v1", other); st["authenticated"] != false || !strings.Contains(refusal(c), "no access entry") {
		t.Errorf("a principal without an entry: %v", st)
	}
	if !c.emu.Accepts("https://127.0.0.1:6443", token) {
		t.Error("Accepts disagrees with the route")
	}
	c.clk.Advance(599 * time.Second)
	if st := review(t, url+"/authenticate/c1", "authentication.k8s.io/v1", token); st["authenticated"] != true {
		t.Errorf("at 599 s: %v", st)
	}
	c.clk.Advance(2 * time.Second)
	if st := review(t, url+"/authenticate/c1", "authentication.k8s.io/v1", token); st["authenticated"] != false || !strings.Contains(refusal(c), "expired") {
		t.Errorf("at 601 s: %v", st)
	}
	if n := c.emu.Count("TokenReview"); n != 7 {
		t.Errorf("%d TokenReviews recorded", n)
	}
}

func toJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestUnknownRoutesAndMembers(t *testing.T) {
	c := start(t, eksemu.Options{})
	_, err := c.eks.UpdateClusterConfig(t.Context(), &eks.UpdateClusterConfigInput{Name: sdkaws.String("c1")})
	if code(err) != "UnknownOperationException" {
		t.Errorf("an operation the emulator does not serve: %v", err)
	}
	_, err = c.eks.CreateCluster(context.Background(), &eks.CreateClusterInput{Name: sdkaws.String("c1"), RoleArn: sdkaws.String(roleArn),
		ResourcesVpcConfig: &ekstypes.VpcConfigRequest{SubnetIds: []string{subnetA, subnetB}}})
	if err != nil {
		t.Fatalf("a create without token or access config (the SDK fills a token): %v", err)
	}
	d, _ := c.eks.DescribeCluster(t.Context(), &eks.DescribeClusterInput{Name: sdkaws.String("c1")})
	if d.Cluster.AccessConfig.AuthenticationMode != ekstypes.AuthenticationModeConfigMap || len(*d.Cluster.ClientRequestToken) != 36 {
		t.Errorf("defaults: %s %v", d.Cluster.AccessConfig.AuthenticationMode, d.Cluster.ClientRequestToken)
	}
}
