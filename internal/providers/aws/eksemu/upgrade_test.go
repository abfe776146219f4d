package eksemu_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"

	"github.com/fleet-agent/fleet-agent/internal/providers/aws/eksemu"
)

// upgradeSteps make every create immediate and every update take ten
// minutes of the emulator's clock (one step a second), so progress is
// read on the clock and not on how often the test looks.
func upgradeSteps(versions ...string) eksemu.Options {
	return eksemu.Options{Steps: &eksemu.Steps{Update: 600}, StepEvery: time.Second, Versions: versions, DefaultVersion: versions[0]}
}

func (c *clients) nodegroup(t *testing.T, cluster, name string) *ekstypes.Nodegroup {
	t.Helper()
	if _, err := c.eks.CreateNodegroup(t.Context(), &eks.CreateNodegroupInput{
		ClusterName: sdkaws.String(cluster), NodegroupName: sdkaws.String(name), NodeRole: sdkaws.String(roleArn),
		Subnets: []string{subnetA, subnetB}, InstanceTypes: []string{"m5.large"},
	}); err != nil {
		t.Fatal(err)
	}
	return c.describeNodegroup(t, cluster, name)
}

func (c *clients) describeNodegroup(t *testing.T, cluster, name string) *ekstypes.Nodegroup {
	t.Helper()
	out, err := c.eks.DescribeNodegroup(t.Context(), &eks.DescribeNodegroupInput{ClusterName: sdkaws.String(cluster), NodegroupName: sdkaws.String(name)})
	if err != nil {
		t.Fatal(err)
	}
	return out.Nodegroup
}

func (c *clients) updateStatus(t *testing.T, cluster, ng, id string) ekstypes.UpdateStatus {
	t.Helper()
	in := &eks.DescribeUpdateInput{Name: sdkaws.String(cluster), UpdateId: sdkaws.String(id)}
	if ng != "" {
		in.NodegroupName = sdkaws.String(ng)
	}
	out, err := c.eks.DescribeUpdate(t.Context(), in)
	if err != nil {
		t.Fatal(err)
	}
	return out.Update.Status
}

func (c *clients) upgradeCluster(t *testing.T, name, version, token string, force bool) (*ekstypes.Update, error) {
	t.Helper()
	out, err := c.eks.UpdateClusterVersion(t.Context(), &eks.UpdateClusterVersionInput{
		Name: sdkaws.String(name), Version: sdkaws.String(version), ClientRequestToken: tok(token), Force: force,
	})
	if err != nil {
		return nil, err
	}
	return out.Update, nil
}

func (c *clients) upgradeNodegroup(t *testing.T, cluster, name string, version *string, token string) (*ekstypes.Update, error) {
	t.Helper()
	out, err := c.eks.UpdateNodegroupVersion(t.Context(), &eks.UpdateNodegroupVersionInput{
		ClusterName: sdkaws.String(cluster), NodegroupName: sdkaws.String(name), Version: version, ClientRequestToken: tok(token),
	})
	if err != nil {
		return nil, err
	}
	return out.Update, nil
}

func refused(t *testing.T, what string, err error, wantCode, wantText string) {
	t.Helper()
	if code(err) != wantCode || !strings.Contains(err.Error(), wantText) {
		t.Errorf("%s: %v, want %s saying %q", what, err, wantCode, wantText)
	}
}

// TestClusterUpgradeOneMinorOnTheClock: a control plane goes up one minor
// per update, the update runs on the clock, a second one while it runs and
// a jump of two minors are refused with EKS's codes.
func TestClusterUpgradeOneMinorOnTheClock(t *testing.T) {
	c := start(t, upgradeSteps("1.33", "1.34", "1.35"))
	if _, err := c.createCluster(t, "c1", "a", ekstypes.AuthenticationModeApi); err != nil {
		t.Fatal(err)
	}
	_, err := c.upgradeCluster(t, "c1", "1.35", "two", false)
	refused(t, "a jump of two minors", err, "InvalidParameterException", "Unsupported Kubernetes minor version update from 1.33 to 1.35")
	up, err := c.upgradeCluster(t, "c1", "1.34", "one", false)
	if err != nil {
		t.Fatal(err)
	}
	if up.Type != ekstypes.UpdateTypeVersionUpdate || up.Status != ekstypes.UpdateStatusInProgress || len(up.Params) == 0 || *up.Params[0].Value != "1.34" {
		t.Fatalf("the update: %+v", up)
	}
	again, err := c.upgradeCluster(t, "c1", "1.34", "one", false)
	if err != nil || *again.Id != *up.Id {
		t.Errorf("the same token again: %v %+v, want the first update %s", err, again, *up.Id)
	}
	_, err = c.upgradeCluster(t, "c1", "1.34", "other", false)
	refused(t, "a second update while one runs", err, "ResourceInUseException", "currently UPDATING")
	c.clk.Advance(5 * time.Minute)
	if s := c.updateStatus(t, "c1", "", *up.Id); s != ekstypes.UpdateStatusInProgress {
		t.Errorf("after 5 of 10 minutes the update is %s", s)
	}
	if s, cl, _ := c.status(t, "c1"); s != ekstypes.ClusterStatusUpdating || *cl.Version != "1.33" {
		t.Errorf("during the update the cluster is %s at %s", s, *cl.Version)
	}
	c.clk.Advance(5 * time.Minute)
	if s := c.updateStatus(t, "c1", "", *up.Id); s != ekstypes.UpdateStatusSuccessful {
		t.Errorf("after 10 minutes the update is %s", s)
	}
	if s, cl, _ := c.status(t, "c1"); s != ekstypes.ClusterStatusActive || *cl.Version != "1.34" {
		t.Errorf("after the update the cluster is %s at %s", s, *cl.Version)
	}
	_, err = c.upgradeCluster(t, "c1", "1.33", "down", false)
	refused(t, "a downgrade", err, "InvalidParameterException", "from 1.34 to 1.33")
}

// TestNodegroupVersionUpdate: a node group goes to its cluster's version
// through UpdateNodegroupVersion, with an update id whose progress
// DescribeUpdate reads on the clock; a version newer than the cluster's, a
// second update while one runs, and an update while the cluster's own runs
// are refused.
func TestNodegroupVersionUpdate(t *testing.T) {
	c := start(t, upgradeSteps("1.33", "1.34", "1.35"))
	if _, err := c.createCluster(t, "c1", "a", ekstypes.AuthenticationModeApi); err != nil {
		t.Fatal(err)
	}
	if ng := c.nodegroup(t, "c1", "ng"); *ng.Version != "1.33" || ng.Status != ekstypes.NodegroupStatusActive {
		t.Fatalf("a new node group: %s %s", *ng.Version, ng.Status)
	}
	_, err := c.upgradeNodegroup(t, "c1", "ng", sdkaws.String("1.34"), "newer")
	refused(t, "a kubelet newer than its API server", err, "InvalidParameterException", "Nodegroup Kubernetes version should be equal to Cluster kubernetes version 1.33")
	_, err = c.upgradeNodegroup(t, "c1", "ng", nil, "same")
	refused(t, "an update to what it runs", err, "InvalidParameterException", "already at version 1.33")

	if _, err := c.upgradeCluster(t, "c1", "1.34", "cp", false); err != nil {
		t.Fatal(err)
	}
	_, err = c.upgradeNodegroup(t, "c1", "ng", nil, "early")
	refused(t, "a node group update while the cluster's runs", err, "ResourceInUseException", "currently UPDATING")
	c.clk.Advance(10 * time.Minute)

	up, err := c.upgradeNodegroup(t, "c1", "ng", nil, "ng1")
	if err != nil {
		t.Fatal(err)
	}
	if up.Type != ekstypes.UpdateTypeVersionUpdate || up.Status != ekstypes.UpdateStatusInProgress {
		t.Fatalf("the node group's update: %+v", up)
	}
	params := map[string]string{}
	for _, p := range up.Params {
		params[string(p.Type)] = *p.Value
	}
	if params["Version"] != "1.34" || params["ReleaseVersion"] != "1.34.0-20260101" {
		t.Errorf("params %v", params)
	}
	_, err = c.upgradeNodegroup(t, "c1", "ng", nil, "ng2")
	refused(t, "a second node group update", err, "ResourceInUseException", "not in Active State")
	c.clk.Advance(5 * time.Minute)
	if s := c.updateStatus(t, "c1", "ng", *up.Id); s != ekstypes.UpdateStatusInProgress {
		t.Errorf("after 5 of 10 minutes the node group's update is %s", s)
	}
	if ng := c.describeNodegroup(t, "c1", "ng"); ng.Status != ekstypes.NodegroupStatusUpdating || *ng.Version != "1.33" {
		t.Errorf("during its update the node group is %s at %s", ng.Status, *ng.Version)
	}
	// The update belongs to the node group: the cluster's reads do not know it.
	if _, err := c.eks.DescribeUpdate(t.Context(), &eks.DescribeUpdateInput{Name: sdkaws.String("c1"), UpdateId: up.Id}); code(err) != "ResourceNotFoundException" {
		t.Errorf("the node group's update read as the cluster's: %v", err)
	}
	c.clk.Advance(5 * time.Minute)
	if s := c.updateStatus(t, "c1", "ng", *up.Id); s != ekstypes.UpdateStatusSuccessful {
		t.Errorf("after 10 minutes the node group's update is %s", s)
	}
	if ng := c.describeNodegroup(t, "c1", "ng"); ng.Status != ekstypes.NodegroupStatusActive || *ng.Version != "1.34" || *ng.ReleaseVersion != "1.34.0-20260101" {
		t.Errorf("after its update the node group is %s at %s (%s)", ng.Status, *ng.Version, *ng.ReleaseVersion)
	}
	list, err := c.eks.ListUpdates(t.Context(), &eks.ListUpdatesInput{Name: sdkaws.String("c1"), NodegroupName: sdkaws.String("ng")})
	if err != nil || len(list.UpdateIds) != 1 || list.UpdateIds[0] != *up.Id {
		t.Errorf("ListUpdates of the node group: %v %v", err, list)
	}
}

// TestClusterUpgradeKeepsTheKubeletSkew: a control plane update that would
// leave a node group's kubelets more than three minors behind is refused,
// naming the node group, unless forced.
func TestClusterUpgradeKeepsTheKubeletSkew(t *testing.T) {
	c := start(t, upgradeSteps("1.30", "1.31", "1.32", "1.33", "1.34"))
	if _, err := c.createCluster(t, "c1", "a", ekstypes.AuthenticationModeApi); err != nil {
		t.Fatal(err)
	}
	c.nodegroup(t, "c1", "old")
	for _, v := range []string{"1.31", "1.32", "1.33"} {
		if _, err := c.upgradeCluster(t, "c1", v, "to-"+v, false); err != nil {
			t.Fatalf("to %s with a 1.30 node group: %v", v, err)
		}
		c.clk.Advance(10 * time.Minute)
	}
	_, err := c.upgradeCluster(t, "c1", "1.34", "to-1.34", false)
	refused(t, "an update four minors past a node group", err, "InvalidParameterException", "Nodegroup old runs Kubernetes 1.30")
	var inv *ekstypes.InvalidParameterException
	if !errors.As(err, &inv) || sdkaws.ToString(inv.NodegroupName) != "old" {
		t.Errorf("the refusal does not name the node group: %v", err)
	}
	if _, err := c.upgradeCluster(t, "c1", "1.34", "forced", true); err != nil {
		t.Errorf("a forced update: %v", err)
	}
}
