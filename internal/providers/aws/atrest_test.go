package aws_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/fleet-agent/fleet-agent/internal/providers"
	awsadapter "github.com/fleet-agent/fleet-agent/internal/providers/aws"
	"github.com/fleet-agent/fleet-agent/internal/providers/aws/eksemu"
	"github.com/fleet-agent/fleet-agent/internal/substrate"
)

// sweep runs the discovery sweep once.
func (e *substrateEnv) sweep() substrate.SweepReport {
	e.t.Helper()
	rep, err := e.rec.Sweep(e.t.Context())
	if err != nil {
		e.t.Fatal(err)
	}
	return rep
}

// rest runs the agent at rest for d on the clock as Run schedules it (a
// pass of every substrate each Every, the sweep each SweepEvery) and
// returns the requests it made, by operation.
func (e *substrateEnv) rest(d time.Duration) map[string]int {
	e.t.Helper()
	before := e.emu.Counts()
	for at := time.Duration(0); at < d; at += substrate.DefaultEvery {
		e.clk.Advance(substrate.DefaultEvery)
		if err := e.rec.ReconcileOnce(e.t.Context()); err != nil {
			e.t.Fatal(err)
		}
		if (at+substrate.DefaultEvery)%substrate.DefaultSweepEvery == 0 {
			if rep := e.sweep(); rep != (substrate.SweepReport{Listed: 1}) {
				e.t.Fatalf("at rest, at %s: sweep %+v", at, rep)
			}
		}
	}
	return since(before, e.emu.Counts())
}

// unit is the requests one read makes.
func (e *substrateEnv) unit(read func() error) map[string]int {
	e.t.Helper()
	before := e.emu.Counts()
	if err := read(); err != nil {
		e.t.Fatal(err)
	}
	return since(before, e.emu.Counts())
}

func sumCalls(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// TestSweepAtRestOnEKS measures what a converged substrate costs at rest
// on the emulator over a day on the injected clock, against the floor: one
// listing of the account per sweep interval (EKS lists cluster names only,
// so the listing is ListClusters, a DescribeCluster per cluster and one
// DescribeAutoScalingGroups of their node groups' groups, which is the
// node pool revision), and one full read of the node groups a day. Before
// the revision the sweep read every node group each interval; that cost is
// measured too, for the record. A node group resized at the provider,
// through EKS (as the console does, UpdateNodegroupConfig) and on its Auto
// Scaling group (as the cluster autoscaler does), is seen by the first
// sweep after, and set back; one deleted is found missing and made again.
func TestSweepAtRestOnEKS(t *testing.T) {
	e := newSubstrateEnv(t, nil)
	ctx := t.Context()
	e.apply(referenceDocument(t, nil), false)
	e.converge(200)
	st := e.status()
	ref := providers.ClusterRef{ID: st.Cluster.ID}

	// What the floor is made of, read through an adapter of its own with
	// nothing cached (as a day later).
	cold := e.open()
	listing := e.unit(func() error { _, err := cold.ListClusters(ctx, e.acct, providers.LabelSubstratePool); return err })
	list := sumCalls(listing)
	if listing["DescribeAutoScalingGroups"] != 1 {
		t.Fatalf("the listing of the account: %v, want one DescribeAutoScalingGroups", listing)
	}
	full := sumCalls(e.unit(func() error { _, err := cold.ListNodePools(ctx, e.acct, ref); return err }))
	// The node groups' own read, caches warm: what each sweep cost before.
	groups := e.unit(func() error { _, err := cold.ListNodePools(ctx, e.acct, ref); return err })
	perInterval := float64(time.Hour / substrate.DefaultSweepEvery)
	daily := float64(full) * float64(time.Hour) / float64(substrate.DefaultNodePoolCheckEvery)
	floor := perInterval*float64(list) + daily
	before := perInterval*float64(list-1+sumCalls(groups)) + daily

	e.sweep()
	day := e.rest(substrate.DefaultNodePoolCheckEvery)
	perHour := float64(sumCalls(day)) / 24
	t.Logf("EKS at rest: %.2f requests per substrate per hour (a day: %v); floor %.2f (listing %d x %.0f per hour + a full read of %d a day); before the revision (the node groups' read %v each interval instead of the Auto Scaling listing) %.2f; ratio to the floor %.2f",
		perHour, day, floor, list, perInterval, full, groups, before, perHour/floor)
	if perHour > floor {
		t.Errorf("at rest the agent makes %.2f requests per hour, above the floor of %.2f: %v", perHour, floor, day)
	}
	if want := 24 * int(perInterval); day["ListClusters"] != want || day["DescribeAutoScalingGroups"] != want {
		t.Errorf("%d listings of the account and %d of its Auto Scaling groups in a day, want one each per sweep (%d)", day["ListClusters"], day["DescribeAutoScalingGroups"], want)
	}

	np := st.NodePools[0].Name
	was := st.NodePools[0].Nodes
	// settle waits on the clock, by minutes, for the node group to be
	// ACTIVE again; a sweep interval is more than any step takes.
	settle := func(what string) {
		t.Helper()
		for range int(substrate.DefaultSweepEvery / time.Minute) {
			e.clk.Advance(time.Minute)
			if p, err := e.adapter.GetNodePool(ctx, e.acct, ref, np); err == nil && p.Status == providers.NodePoolRunning {
				return
			}
		}
		t.Fatalf("%s is not done after %s", what, substrate.DefaultSweepEvery)
	}
	setBack := func(how string) {
		t.Helper()
		e.converge(200)
		if got := fmt.Sprint(e.status().NodePools[0].Nodes); got != fmt.Sprint(was) {
			t.Fatalf("after the passes that follow a resize %s: %s nodes, want %d", how, got, was)
		}
		// The passes' own resize moved the revision: the next sweep reads
		// the node groups once, then an hour costs the listings alone.
		settle("the passes' resize")
		e.sweep()
		again := e.rest(time.Hour)
		if again["ListNodegroups"] != 0 || again["DescribeNodegroup"] != 0 {
			t.Errorf("an hour at rest after the resize %s read the node groups: %v", how, again)
		}
	}

	// Through EKS: the first sweep once the update is done sees it, and
	// the next passes set it back.
	if _, err := e.adapter.ResizeNodePool(ctx, e.acct, ref, np, providers.Size{NodeCount: was + 1}); err != nil {
		t.Fatal(err)
	}
	settle("the resize through EKS")
	if rep := e.sweep(); rep.Moved != 1 {
		t.Fatalf("the sweep after a resize through EKS: %+v, want the group moved", rep)
	}
	setBack("through EKS")

	// On the Auto Scaling group, beside EKS.
	cname := st.Cluster.ID[strings.LastIndex(st.Cluster.ID, "/")+1:] // the ARN's
	group, ok := e.emu.Nodegroup(cname, np)
	if !ok {
		t.Fatalf("node group %s is not at the emulator", np)
	}
	if err := e.emu.UpdateAutoScalingGroup(cname, np, group.MinSize, max(group.MaxSize, group.Size+1), group.Size+1); err != nil {
		t.Fatal(err)
	}
	if rep := e.sweep(); rep.Moved != 1 {
		t.Fatalf("the sweep after a resize on the Auto Scaling group: %+v, want the group moved", rep)
	}
	setBack("on the Auto Scaling group")

	// Deleted at the provider: the first sweep once it is gone finds it
	// missing, and the next passes make it again.
	if _, err := e.adapter.DeleteNodePool(ctx, e.acct, ref, np); err != nil {
		t.Fatal(err)
	}
	gone := false
	for range int(substrate.DefaultSweepEvery / time.Minute) {
		e.clk.Advance(time.Minute)
		if _, err := e.adapter.GetNodePool(ctx, e.acct, ref, np); errors.Is(err, providers.ErrNotFound) {
			gone = true
			break
		}
	}
	if !gone {
		t.Fatalf("the node group is not gone %s after its delete", substrate.DefaultSweepEvery)
	}
	if rep := e.sweep(); rep.Ghosts != 1 {
		t.Fatalf("the sweep after a delete at the provider: %+v, want the group missing", rep)
	}
	e.converge(200)
	if p, err := e.adapter.GetNodePool(ctx, e.acct, ref, np); err != nil || p.NodeCount != was {
		t.Fatalf("after the passes: %+v %v, want the group made again with %d nodes", p, err, was)
	}
}

// TestSweepWithoutAutoScalingReadsNodeGroups: an account whose principal
// may not list Auto Scaling groups, and an install that overrides AWS's
// endpoints without naming Auto Scaling's, get no revision. The sweep then
// reads the node groups at every sweep (what EKS alone allows), still sees
// a resize, and Advise (doctor) says why and what to grant.
func TestSweepWithoutAutoScalingReadsNodeGroups(t *testing.T) {
	e := newSubstrateEnv(t, nil)
	ctx := t.Context()
	e.apply(referenceDocument(t, nil), false)
	e.converge(200)
	st := e.status()
	if adv := e.adapter.Advise(ctx, e.acct); adv != nil {
		t.Fatalf("advice with every permission: %q", adv)
	}

	e.emu.Inject(eksemu.Fault{Op: "DescribeAutoScalingGroups", Count: 1 << 20, Status: 403, Code: "AccessDenied",
		Message: "User: " + userArn + " is not authorized to perform: autoscaling:DescribeAutoScalingGroups"})
	adv := e.adapter.Advise(ctx, e.acct)
	if len(adv) != 1 || !strings.Contains(adv[0], "autoscaling:DescribeAutoScalingGroups") || !strings.Contains(adv[0], "grant") {
		t.Fatalf("advice without the permission: %q", adv)
	}
	e.sweep()
	hour := e.rest(time.Hour)
	perInterval := int(time.Hour / substrate.DefaultSweepEvery)
	if hour["ListNodegroups"] != perInterval || hour["ListClusters"] != perInterval {
		t.Errorf("an hour without the permission: %v, want the node groups read at each of the %d sweeps", hour, perInterval)
	}
	cname := st.Cluster.ID[strings.LastIndex(st.Cluster.ID, "/")+1:]
	np := st.NodePools[0].Name
	group, _ := e.emu.Nodegroup(cname, np)
	if err := e.emu.UpdateAutoScalingGroup(cname, np, group.MinSize, group.MaxSize+1, group.Size+1); err != nil {
		t.Fatal(err)
	}
	if rep := e.sweep(); rep.Moved != 1 {
		t.Fatalf("the sweep after a resize on the Auto Scaling group, without the permission: %+v, want the group moved", rep)
	}
	e.emu.ClearFaults()

	// Endpoints overridden, Auto Scaling's not named: AWS's own is never
	// asked.
	block := strings.Replace(e.block, ", autoscaling: "+e.emu.URL(), "", 1)
	if block == e.block {
		t.Fatalf("the harness block names no autoscaling endpoint: %s", block)
	}
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(block), &n); err != nil {
		t.Fatal(err)
	}
	other, err := awsadapter.Open(&n, e.secrets, awsadapter.WithClock(e.clk))
	if err != nil {
		t.Fatal(err)
	}
	before := e.emu.Count("DescribeAutoScalingGroups")
	cs, err := other.ListClusters(ctx, e.acct, providers.LabelSubstratePool)
	if err != nil || len(cs) != 1 || cs[0].NodePoolsRevision != "" {
		t.Fatalf("listing without an autoscaling endpoint: %+v %v, want the cluster without a revision", cs, err)
	}
	if e.emu.Count("DescribeAutoScalingGroups") != before {
		t.Error("an adapter without an autoscaling endpoint listed Auto Scaling groups")
	}
	if adv := other.Advise(ctx, e.acct); len(adv) != 1 || !strings.Contains(adv[0], "endpoints.autoscaling") {
		t.Errorf("advice without an autoscaling endpoint: %q", adv)
	}
	if cs, err := e.adapter.ListClusters(ctx, e.acct, providers.LabelSubstratePool); err != nil || len(cs) != 1 || !strings.HasPrefix(cs[0].NodePoolsRevision, "asg:") {
		t.Fatalf("listing with the endpoint and the permission: %+v %v, want a revision", cs, err)
	}
}
