package drain_test

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/state/statetest"
	"github.com/fleet-agent/fleet-agent/internal/substrate/drain"
	"github.com/fleet-agent/fleet-agent/internal/testutil/kubeplane"
)

var plane *kubeplane.Plane

// The disruption controller computes a PodDisruptionBudget's status; without
// it every eviction of a pod a budget selects is refused.
func TestMain(m *testing.M) {
	controllers := append(slices.Clone(kubeplane.DefaultControllers), "disruption-controller")
	os.Exit(kubeplane.Main(m, kubeplane.Options{Controllers: controllers}, &plane))
}

// settle bounds every wait for the cluster to act (kwok runs and deletes
// pods in milliseconds; the controllers react within a second or two on
// this machine's shared cores).
const settle = 60 * time.Second

var t0 = time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)

type fixture struct {
	t      *testing.T
	ns     string
	prefix string
	clock  *clock.Fake
	store  *state.Store
	d      *drain.Drainer
}

// TestBudgetRounding: a share of the node pool rounded down, at least one;
// one without a budget, none with a zero one.
func TestBudgetRounding(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	for _, c := range []struct {
		share *float64
		n     int
		want  int
	}{{nil, 10, 1}, {f(0), 10, 0}, {f(0.1), 4, 1}, {f(0.1), 30, 3}, {f(1), 4, 4}, {f(0.5), 5, 2}} {
		if got := drain.Budget(c.share, c.n); got != c.want {
			t.Errorf("Budget(%v, %d) = %d, want %d", c.share, c.n, got, c.want)
		}
	}
}

func newFixture(t *testing.T) *fixture {
	f := &fixture{t: t, ns: plane.Namespace(t), prefix: plane.Unique(t), clock: clock.NewFake(t0), store: statetest.Open(t)}
	f.d = &drain.Drainer{Client: plane.Client(), Clock: f.clock, Audit: drain.StateAudit{Store: f.store, Clock: f.clock}}
	return f
}

// nodes adds n Nodes of the test's own and returns their names.
func (f *fixture) nodes(n int, opts ...kubeplane.NodeOption) []string {
	var names []string
	for i := range n {
		name := fmt.Sprintf("%s-n%d", f.prefix, i)
		plane.AddNodeT(f.t, name, map[string]string{"drain-test": f.prefix}, opts...)
		names = append(names, name)
	}
	return names
}

// pod runs a bare pod on a Node and waits until kwok says it is ready.
func (f *fixture) pod(name, node string, labels map[string]string, gpus int64) *corev1.Pod {
	f.t.Helper()
	c := corev1.Container{Name: "main", Image: "example.invalid/job"}
	if gpus > 0 {
		q := *resource.NewQuantity(gpus, resource.DecimalSI)
		c.Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{kubeplane.GPU: q}, Limits: corev1.ResourceList{kubeplane.GPU: q}}
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns, Labels: labels},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{c},
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}},
	}
	if _, err := plane.Client().CoreV1().Pods(f.ns).Create(f.t.Context(), p, metav1.CreateOptions{}); err != nil {
		f.t.Fatalf("create pod %s: %v", name, err)
	}
	f.until("pod "+name+" ready", func() (bool, error) {
		got, err := plane.Client().CoreV1().Pods(f.ns).Get(f.t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range got.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				p = got
				return true, nil
			}
		}
		return false, nil
	})
	return p
}

// pdb makes a PodDisruptionBudget and waits until the disruption
// controller has counted the pods it selects.
func (f *fixture) pdb(name string, labels map[string]string, minAvailable, healthy int32) {
	f.t.Helper()
	ma := intstr.FromInt32(minAvailable)
	b := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: &ma, Selector: &metav1.LabelSelector{MatchLabels: labels}},
	}
	if _, err := plane.Client().PolicyV1().PodDisruptionBudgets(f.ns).Create(f.t.Context(), b, metav1.CreateOptions{}); err != nil {
		f.t.Fatal(err)
	}
	f.pdbHealthy(name, healthy)
}

func (f *fixture) pdbHealthy(name string, healthy int32) {
	f.t.Helper()
	f.until(fmt.Sprintf("PDB %s counting %d healthy pods", name, healthy), func() (bool, error) {
		got, err := plane.Client().PolicyV1().PodDisruptionBudgets(f.ns).Get(f.t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return got.Status.ObservedGeneration == got.Generation && got.Status.CurrentHealthy == healthy, nil
	})
}

// until polls cond every 50 ms for at most settle.
func (f *fixture) until(what string, cond func() (bool, error)) {
	f.t.Helper()
	deadline := time.Now().Add(settle)
	for {
		ok, err := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("%s: not within %s (last error: %v)", what, settle, err)
		}
		select {
		case <-f.t.Context().Done():
			f.t.Fatal(f.t.Context().Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// drive runs passes until done says the result is what the test waits for.
func (f *fixture) drive(req drain.Request, what string, done func(drain.Result) bool) drain.Result {
	f.t.Helper()
	var res drain.Result
	f.until(what, func() (bool, error) {
		var err error
		res, err = f.d.Pass(f.t.Context(), req)
		if err != nil {
			f.t.Fatalf("pass: %v", err)
		}
		return done(res), nil
	})
	return res
}

func (f *fixture) pass(req drain.Request) drain.Result {
	f.t.Helper()
	res, err := f.d.Pass(f.t.Context(), req)
	if err != nil {
		f.t.Fatalf("pass: %v", err)
	}
	return res
}

func (f *fixture) request(pool, empty []string, s drain.Settings) drain.Request {
	return drain.Request{Pool: "pool-" + f.prefix, PoolNodes: pool, Empty: empty, MaxUnavailable: 1, Settings: s}
}

// present says whether the pod is there and not being deleted.
func (f *fixture) present(name string) bool {
	f.t.Helper()
	p, err := plane.Client().CoreV1().Pods(f.ns).Get(f.t.Context(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false
	}
	if err != nil {
		f.t.Fatal(err)
	}
	return p.DeletionTimestamp == nil
}

func (f *fixture) node(name string) *corev1.Node {
	f.t.Helper()
	n, err := plane.Client().CoreV1().Nodes().Get(f.t.Context(), name, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return n
}

func (f *fixture) mark(name string) *drain.Mark {
	f.t.Helper()
	raw, ok := f.node(name).Annotations[drain.Annotation]
	if !ok {
		return nil
	}
	var m drain.Mark
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		f.t.Fatal(err)
	}
	return &m
}

func (f *fixture) audit() []state.AuditRow {
	f.t.Helper()
	var rows []state.AuditRow
	if err := f.store.View(func(tx *state.Tx) error {
		all, err := tx.Audit()
		for _, r := range all {
			if r.Action == drain.AuditAction {
				rows = append(rows, r)
			}
		}
		return err
	}); err != nil {
		f.t.Fatal(err)
	}
	return rows
}

func blockerOf(res drain.Result, pod string) *drain.Blocker {
	for i, b := range res.Blockers {
		if b.Pod == pod {
			return &res.Blockers[i]
		}
	}
	return nil
}

func TestPDBBlocksTheDrainByNameUntilItAllows(t *testing.T) {
	f := newFixture(t)
	nodes := f.nodes(2)
	app := map[string]string{"app": "web-" + f.prefix}
	f.pod("web-a", nodes[0], app, 0)
	f.pdb("web", app, 1, 1)
	req := f.request(nodes, nodes[:1], drain.Settings{})

	res := f.pass(req)
	b := blockerOf(res, f.ns+"/web-a")
	if b == nil || b.Why != drain.WhyPDB || b.Detail != f.ns+"/web" || !b.Since.Equal(t0) {
		t.Fatalf("blockers %+v: want web-a blocked by PDB %s/web since %s", res.Blockers, f.ns, t0)
	}
	if !strings.Contains(res.Message(), "pod "+f.ns+"/web-a on "+nodes[0]+" (PDB "+f.ns+"/web, since 2026-12-06T03:00:00Z)") {
		t.Errorf("message %q does not name the pod, the PDB and since when", res.Message())
	}
	if !f.node(nodes[0]).Spec.Unschedulable || res.Finished() {
		t.Fatalf("node not cordoned or drain finished: %+v", res)
	}
	if !f.present("web-a") {
		t.Fatal("a pod the PDB protects was removed")
	}

	// A second replica elsewhere: the budget now allows one disruption.
	f.pod("web-b", nodes[1], app, 0)
	f.pdbHealthy("web", 2)
	res = f.drive(req, "drain after the PDB allows", drain.Result.Finished)
	if len(res.Blockers) != 0 || f.present("web-a") || !f.present("web-b") {
		t.Fatalf("after the PDB allowed: blockers %v, web-a present %v, web-b present %v", res.Blockers, f.present("web-a"), f.present("web-b"))
	}
	if m := f.mark(nodes[0]); m == nil || !m.Done || !m.Cordoned {
		t.Fatalf("mark %+v: want done, cordoned by us", m)
	}
}

func TestGPUPodIsWaitedForNotEvicted(t *testing.T) {
	f := newFixture(t)
	nodes := f.nodes(1, kubeplane.WithExtended(kubeplane.GPU, 8))
	f.pod("train", nodes[0], nil, 8)
	f.pod("side", nodes[0], nil, 0)
	req := f.request(nodes, nodes, drain.Settings{Timeout: time.Hour, Then: drain.Wait})

	// The side pod goes; the GPU job stays however many passes run.
	res := f.drive(req, "side pod evicted", func(r drain.Result) bool { return !f.present("side") })
	for range 3 {
		f.clock.Advance(10 * time.Minute)
		res = f.pass(req)
	}
	b := blockerOf(res, f.ns+"/train")
	if b == nil || b.Why != drain.WhyGPU || !b.Since.Equal(t0) || res.Finished() || res.Overdue {
		t.Fatalf("result %+v: want train blocking as a GPU job since %s, not overdue", res, t0)
	}
	if !f.present("train") {
		t.Fatal("the GPU job was evicted")
	}

	if err := plane.Client().CoreV1().Pods(f.ns).Delete(t.Context(), "train", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	res = f.drive(req, "drain after the GPU job ended", drain.Result.Finished)
	if len(res.Blockers) != 0 || len(f.audit()) != 0 {
		t.Fatalf("blockers %v, audit %v: want none", res.Blockers, f.audit())
	}
}

func TestBookedNodeWaitsForItsBooking(t *testing.T) {
	f := newFixture(t)
	nodes := f.nodes(1)
	patchAnnotation(t, nodes[0], drain.BookingAnnotation, "rsv-7")
	f.pod("web", nodes[0], nil, 0)
	req := f.request(nodes, nodes, drain.Settings{})

	res := f.pass(req)
	var booking *drain.Blocker
	for i, b := range res.Blockers {
		if b.Pod == "" && b.Why == drain.WhyBooking {
			booking = &res.Blockers[i]
		}
	}
	if booking == nil || booking.Detail != "rsv-7" || res.Finished() || !f.present("web") {
		t.Fatalf("result %+v: want the node held by booking rsv-7 and its pod kept", res)
	}

	patchAnnotation(t, nodes[0], drain.BookingAnnotation, "")
	res = f.drive(req, "drain after the booking ended", drain.Result.Finished)
	if f.present("web") {
		t.Fatal("pod still there after the drain finished")
	}
}

// patchAnnotation sets (or, with "", removes) an annotation of a Node.
func patchAnnotation(t *testing.T, node, key, value string) {
	t.Helper()
	var v any = value
	if value == "" {
		v = nil
	}
	data, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{key: v}}})
	if _, err := plane.Client().CoreV1().Nodes().Patch(t.Context(), node, types.MergePatchType, data, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// The budget is measured from outside: a watch on the Nodes counts, at
// every change, the Nodes cordoned by the drain and not yet empty.
func TestBudgetNeverExceeded(t *testing.T) {
	for _, c := range []struct {
		share float64
		nodes int
	}{{0.25, 1}, {0.5, 2}} {
		t.Run(fmt.Sprint(c.share), func(t *testing.T) { budgetNeverExceeded(t, c.share, c.nodes) })
	}
}

func budgetNeverExceeded(t *testing.T, share float64, budget int) {
	f := newFixture(t)
	nodes := f.nodes(4)
	for i, n := range nodes {
		f.pod(fmt.Sprintf("w%d", i), n, nil, 0)
	}
	req := f.request(nodes, nodes, drain.Settings{})
	req.MaxUnavailable = drain.Budget(&share, len(nodes))
	if req.MaxUnavailable != budget {
		t.Fatalf("Budget(%g, 4) = %d, want %d", share, req.MaxUnavailable, budget)
	}

	w, err := plane.Client().CoreV1().Nodes().Watch(t.Context(), metav1.ListOptions{LabelSelector: "drain-test=" + f.prefix})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	most, seen := 0, 0
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		draining := map[string]bool{}
		for ev := range w.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			raw, marked := n.Annotations[drain.Annotation]
			var m drain.Mark
			_ = json.Unmarshal([]byte(raw), &m)
			draining[n.Name] = marked && n.Spec.Unschedulable && !m.Done
			count := 0
			for _, d := range draining {
				if d {
					count++
				}
			}
			mu.Lock()
			most, seen = max(most, count), seen+1
			mu.Unlock()
		}
	}()

	res := f.drive(req, "all four nodes empty", func(r drain.Result) bool {
		if len(r.Draining) > req.MaxUnavailable {
			t.Errorf("a pass reports %d draining: %v", len(r.Draining), r.Draining)
		}
		return r.Finished()
	})
	w.Stop()
	<-watched
	mu.Lock()
	defer mu.Unlock()
	t.Logf("most nodes cordoned and not empty at once: %d (budget %d, %d node events watched)", most, req.MaxUnavailable, seen)
	if most > req.MaxUnavailable || most == 0 {
		t.Fatalf("most draining at once %d, budget %d (0 means the watch saw no drain)", most, req.MaxUnavailable)
	}
	if len(res.Done) != 4 {
		t.Fatalf("done %v", res.Done)
	}
}

func TestTimeoutForceEvictsAndAudits(t *testing.T) {
	f := newFixture(t)
	nodes := f.nodes(1, kubeplane.WithExtended(kubeplane.GPU, 8))
	app := map[string]string{"app": "db-" + f.prefix}
	f.pod("train", nodes[0], nil, 8)
	f.pod("db", nodes[0], app, 0)
	f.pdb("db", app, 1, 1)
	req := f.request(nodes, nodes, drain.Settings{Timeout: time.Hour, Then: drain.Force})

	res := f.pass(req)
	if len(res.Blockers) != 2 {
		t.Fatalf("blockers %v: want train and db", res.Blockers)
	}
	f.clock.Advance(time.Hour - time.Second)
	if res = f.pass(req); len(res.Forced) != 0 || !f.present("train") || !f.present("db") || len(f.audit()) != 0 {
		t.Fatalf("forced before the timeout: %+v", res.Forced)
	}

	f.clock.Advance(time.Second)
	res = f.drive(req, "forced drain", drain.Result.Finished)
	if f.present("train") || f.present("db") {
		t.Fatal("forced drain finished with the pods still there")
	}
	rows := f.audit()
	got := map[string]string{}
	for _, r := range rows {
		var p struct{ Pod, Node, Reason string }
		if err := json.Unmarshal(r.Params, &p); err != nil {
			t.Fatal(err)
		}
		if p.Node != nodes[0] || r.At != t0.Add(time.Hour).UnixMilli() {
			t.Errorf("audit row %+v: want node %s at %s", r, nodes[0], t0.Add(time.Hour))
		}
		got[p.Pod] = r.Method + " " + p.Reason
	}
	want := map[string]string{f.ns + "/train": "evict GPU job", f.ns + "/db": "delete PDB " + f.ns + "/db"}
	if len(rows) != 2 || got[f.ns+"/train"] != want[f.ns+"/train"] || got[f.ns+"/db"] != want[f.ns+"/db"] {
		t.Fatalf("audit %v, want %v", got, want)
	}
}

func TestTimeoutWaitKeepsWaiting(t *testing.T) {
	f := newFixture(t)
	nodes := f.nodes(1, kubeplane.WithExtended(kubeplane.GPU, 8))
	f.pod("train", nodes[0], nil, 8)
	req := f.request(nodes, nodes, drain.Settings{Timeout: time.Hour, Then: drain.Wait})

	f.pass(req)
	f.clock.Advance(2 * time.Hour)
	res := f.pass(req)
	if !res.Overdue || res.Finished() || len(res.Forced) != 0 || !f.present("train") || len(f.audit()) != 0 {
		t.Fatalf("result %+v: want overdue, still waiting, nothing forced", res)
	}
	if !strings.Contains(res.Message(), "past the drain timeout, still waiting") {
		t.Errorf("message %q does not say the drain is past its timeout", res.Message())
	}
}

// A new Drainer (the agent after a kill -9) picks the drain up from the
// Node: the blocker's clock and the cordon are not started again, and an
// abandoned drain uncordons only what it cordoned.
func TestRestartResumesAndAbandonUncordons(t *testing.T) {
	f := newFixture(t)
	nodes := f.nodes(2)
	app := map[string]string{"app": "web-" + f.prefix}
	f.pod("web", nodes[0], app, 0)
	f.pdb("web", app, 1, 1)
	// Someone else cordoned the second Node before the drain.
	data := []byte(`{"spec":{"unschedulable":true}}`)
	if _, err := plane.Client().CoreV1().Nodes().Patch(t.Context(), nodes[1], types.MergePatchType, data, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	req := f.request(nodes, nodes, drain.Settings{Timeout: 2 * time.Hour})
	req.MaxUnavailable = 2
	f.pass(req)
	before := f.mark(nodes[0])

	later := clock.NewFake(t0.Add(30 * time.Minute))
	again := &drain.Drainer{Client: plane.Client(), Clock: later, Audit: drain.StateAudit{Store: f.store, Clock: later}}
	res, err := again.Pass(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	after := f.mark(nodes[0])
	if b := blockerOf(res, f.ns+"/web"); b == nil || !b.Since.Equal(t0) {
		t.Fatalf("blockers %v: want web blocked since %s after the restart", res.Blockers, t0)
	}
	if !after.Began.Equal(before.Began) || !after.Cordoned {
		t.Fatalf("mark before %+v, after %+v: the restart began the drain again", before, after)
	}
	if m := f.mark(nodes[1]); m == nil || m.Cordoned {
		t.Fatalf("mark of the node cordoned by someone else %+v: want ours, not cordoned by us", m)
	}

	if err := again.Abandon(t.Context(), req.Pool, nodes); err != nil {
		t.Fatal(err)
	}
	n0, n1 := f.node(nodes[0]), f.node(nodes[1])
	if n0.Spec.Unschedulable || n0.Annotations[drain.Annotation] != "" {
		t.Errorf("node we cordoned: unschedulable %v, mark %q after abandon", n0.Spec.Unschedulable, n0.Annotations[drain.Annotation])
	}
	if !n1.Spec.Unschedulable || n1.Annotations[drain.Annotation] != "" {
		t.Errorf("node cordoned by someone else: unschedulable %v, mark %q after abandon", n1.Spec.Unschedulable, n1.Annotations[drain.Annotation])
	}
	if !f.present("web") {
		t.Error("the pod the PDB protects is gone")
	}
}

// DaemonSet pods stay: a Node holding only them is empty.
func TestDaemonSetPodsAreLeft(t *testing.T) {
	f := newFixture(t)
	nodes := f.nodes(1)
	sel := map[string]string{"ds": f.prefix}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: f.ns},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: sel},
				Spec: corev1.PodSpec{NodeSelector: map[string]string{"drain-test": f.prefix},
					Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					Containers:  []corev1.Container{{Name: "a", Image: "example.invalid/agent"}}},
			},
		},
	}
	if _, err := plane.Client().AppsV1().DaemonSets(f.ns).Create(t.Context(), ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var dsPod string
	f.until("the DaemonSet's pod running", func() (bool, error) {
		pods, err := plane.Client().CoreV1().Pods(f.ns).List(t.Context(), metav1.ListOptions{LabelSelector: "ds=" + f.prefix})
		if err != nil || len(pods.Items) != 1 || pods.Items[0].Status.Phase != corev1.PodRunning {
			return false, err
		}
		dsPod = pods.Items[0].Name
		return true, nil
	})
	f.pod("web", nodes[0], nil, 0)
	req := f.request(nodes, nodes, drain.Settings{})
	res := f.drive(req, "node empty but for the DaemonSet", drain.Result.Finished)
	if !f.present(dsPod) || f.present("web") || len(res.Blockers) != 0 {
		t.Fatalf("DaemonSet pod present %v, web present %v, blockers %v", f.present(dsPod), f.present("web"), res.Blockers)
	}
}

// TestBudgetWaitKeepsItsSince: a Node waiting for the disruption budget
// waits since the drain that holds the budget began, on every pass and in
// a fresh Drainer (the agent killed and started again: a pass keeps
// nothing in memory), not since the pass that looked.
func TestBudgetWaitKeepsItsSince(t *testing.T) {
	f := newFixture(t)
	nodes := f.nodes(2, kubeplane.WithExtended(kubeplane.GPU, 8))
	f.pod("train", nodes[0], nil, 8)
	req := f.request(nodes, nodes, drain.Settings{Timeout: time.Hour, Then: drain.Wait})
	budgetBlocker := func(res drain.Result) *drain.Blocker {
		for i, b := range res.Blockers {
			if b.Why == drain.WhyBudget {
				return &res.Blockers[i]
			}
		}
		return nil
	}
	res := f.pass(req)
	if b := budgetBlocker(res); b == nil || !b.Since.Equal(t0) {
		t.Fatalf("first pass: %+v: want the second Node waiting for the budget since %s", res.Blockers, t0)
	}
	for range 3 {
		f.clock.Advance(10 * time.Minute)
		f.d = &drain.Drainer{Client: plane.Client(), Clock: f.clock, Audit: f.d.Audit}
		res = f.pass(req)
		if b := budgetBlocker(res); b == nil || !b.Since.Equal(t0) {
			t.Fatalf("at %s: %+v: want the budget wait since %s", f.clock.Now(), res.Blockers, t0)
		}
	}
}

// TestBookedEmptyNodeWaitsForItsBooking: a booked Node holds its drain
// while the booking is set, pods or none (a booking is GPUs reserved for
// a job not started yet: deleting the Node drops it); the Node is
// cordoned meanwhile, so nothing lands on it. Forced after the timeout,
// the booking is let go once, audited.
func TestBookedEmptyNodeWaitsForItsBooking(t *testing.T) {
	f := newFixture(t)
	nodes := f.nodes(2)
	patchAnnotation(t, nodes[0], drain.BookingAnnotation, "rsv-8")
	patchAnnotation(t, nodes[1], drain.BookingAnnotation, "rsv-9")
	wait := f.request(nodes[:1], nodes[:1], drain.Settings{})
	res := f.pass(wait)
	var booking *drain.Blocker
	for i, b := range res.Blockers {
		if b.Why == drain.WhyBooking {
			booking = &res.Blockers[i]
		}
	}
	if booking == nil || booking.Detail != "rsv-8" || res.Finished() {
		t.Fatalf("result %+v: want the empty node held by booking rsv-8", res)
	}
	n, err := plane.Client().CoreV1().Nodes().Get(t.Context(), nodes[0], metav1.GetOptions{})
	if err != nil || !n.Spec.Unschedulable {
		t.Fatalf("the booked Node is not cordoned while it waits: %v", err)
	}
	f.clock.Advance(time.Hour)
	if res = f.pass(wait); res.Finished() {
		t.Fatalf("result %+v: finished while the booking is set", res)
	}
	patchAnnotation(t, nodes[0], drain.BookingAnnotation, "")
	f.drive(wait, "drain after the booking ended", drain.Result.Finished)

	force := drain.Request{Pool: "pool-force-" + f.prefix, PoolNodes: nodes[1:], Empty: nodes[1:], MaxUnavailable: 1,
		Settings: drain.Settings{Timeout: time.Minute, Then: drain.Force}}
	if res = f.pass(force); res.Finished() {
		t.Fatalf("result %+v: a forced drain finished before its timeout", res)
	}
	f.clock.Advance(2 * time.Minute)
	f.drive(force, "forced drain past the booking", drain.Result.Finished)
	f.pass(force)
	rows := f.audit()
	if len(rows) != 1 || !strings.Contains(string(rows[0].Params), "rsv-9") {
		t.Fatalf("audit %+v: want one row letting go of booking rsv-9", rows)
	}
}
