package incluster

import (
	"bytes"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/fleet-agent/fleet-agent/internal/apply"
	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/config"
	"github.com/fleet-agent/fleet-agent/internal/fleet"
	fakeprov "github.com/fleet-agent/fleet-agent/internal/providers/fake"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/substrate"
	"github.com/fleet-agent/fleet-agent/internal/substrate/crashtest"
	"github.com/fleet-agent/fleet-agent/internal/substrate/drain"
	"github.com/fleet-agent/fleet-agent/internal/substrate/join"
	"github.com/fleet-agent/fleet-agent/internal/testutil/kubeplane"
)

// The fake provider's node pool label is one of those a drain reads.
func TestNodePoolLabelsHoldTheFakes(t *testing.T) {
	found := false
	for _, l := range NodePoolLabels {
		found = found || l == fakeprov.LabelFakeNodePool
	}
	if !found {
		t.Fatalf("NodePoolLabels %v lack the fake's %s", NodePoolLabels, fakeprov.LabelFakeNodePool)
	}
}

// TestRemovedFlavorIsDrainedBeforeItsDelete: on the real control plane,
// with the fake provider registering its node pools' Nodes, a flavor taken
// out of the document has its node pool's Nodes cordoned and emptied
// before the delete: a GPU job on one holds the delete (NodePools Unknown
// DrainBlocked, naming the pod), the other flavor's Nodes are never
// touched; the flavor put back lets the drain go (the Node uncordoned);
// removed again, once the job ends the node pool is deleted.
func TestRemovedFlavorIsDrainedBeforeItsDelete(t *testing.T) {
	w := newDrainWorld(t)
	ctx, plane, kc, applyStep, nodePools, run := t.Context(), w.plane, w.kc, w.apply, w.nodePools, w.run
	cpu := crashtest.Flavor{Name: "cpu", MachineType: "fake-cpu-4", Nodes: 1}
	h100 := crashtest.Flavor{Name: "h100", MachineType: "fake-h100x8", Nodes: 2}
	pool := crashtest.Pool{Name: "gpu", Flavors: []crashtest.Flavor{cpu, h100}}
	applyStep(crashtest.Step{Pools: []crashtest.Pool{pool}})
	run("two node pools", func(s substrate.Status) bool { return len(s.NodePools) == 2 && s.Nodes.Listed == 3 })

	var gpuNode, gpuPool string
	all, err := kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: nodeSelector(pool.ID())})
	if err != nil {
		t.Fatal(err)
	}
	var cpuNodes []string
	for _, n := range all.Items {
		if strings.Contains(n.Labels[fakeprov.LabelFakeNodePool], "h100") {
			gpuNode, gpuPool = n.Name, n.Labels[fakeprov.LabelFakeNodePool]
		} else {
			cpuNodes = append(cpuNodes, n.Name)
		}
	}
	if gpuNode == "" || len(cpuNodes) != 1 {
		t.Fatalf("nodes %v: want two of h100 and one of cpu", all.Items)
	}
	ns := plane.Namespace(t)
	job := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: ns}, Spec: corev1.PodSpec{NodeName: gpuNode,
		Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
		Containers: []corev1.Container{{Name: "c", Image: "train", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")}}}}}}
	if _, err := kc.CoreV1().Pods(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	pool.Flavors = []crashtest.Flavor{cpu}
	applyStep(crashtest.Step{Pools: []crashtest.Pool{pool}, Prune: true})
	run("drain held by the GPU job", func(s substrate.Status) bool {
		for _, c := range s.Conditions {
			if c.Type == substrate.CondNodePools && c.Reason == substrate.ReasonDrainBlocked && c.Status == substrate.ConditionUnknown &&
				strings.Contains(c.Message, "pod "+ns+"/train on "+gpuNode+" (GPU job, since ") {
				return true
			}
		}
		return false
	})
	if _, ok := nodePools()[gpuPool]; !ok {
		t.Fatalf("node pool %s deleted while its GPU job ran: %v", gpuPool, nodePools())
	}
	n, err := kc.CoreV1().Nodes().Get(ctx, gpuNode, metav1.GetOptions{})
	if err != nil || !n.Spec.Unschedulable || n.Annotations[drain.Annotation] == "" {
		t.Fatalf("the GPU job's Node is not cordoned and marked: %v", err)
	}
	for _, name := range cpuNodes {
		if n, err := kc.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); err != nil || n.Spec.Unschedulable || n.Annotations[drain.Annotation] != "" {
			t.Fatalf("the kept flavor's Node %s was touched by the drain: %v", name, err)
		}
	}

	// The flavor put back: its drain is let go, the Node takes pods again.
	pool.Flavors = []crashtest.Flavor{cpu, h100}
	applyStep(crashtest.Step{Pools: []crashtest.Pool{pool}})
	run("drain let go", func(substrate.Status) bool {
		n, err := kc.CoreV1().Nodes().Get(ctx, gpuNode, metav1.GetOptions{})
		return err == nil && !n.Spec.Unschedulable && n.Annotations[drain.Annotation] == ""
	})
	pool.Flavors = []crashtest.Flavor{cpu}
	applyStep(crashtest.Step{Pools: []crashtest.Pool{pool}, Prune: true})
	run("drain held again", func(s substrate.Status) bool { return strings.Contains(s.Message, "pod "+ns+"/train on "+gpuNode) })

	if err := kc.CoreV1().Pods(ns).Delete(ctx, "train", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	run("node pool deleted", func(s substrate.Status) bool { _, ok := nodePools()[gpuPool]; return !ok && s.State == "ready" })

	// The rest of the substrate still tears down.
	pool.Left = true
	applyStep(crashtest.Step{Pools: []crashtest.Pool{pool}, Prune: true})
	run("torn down", func(s substrate.Status) bool { return s.State == "deleted" && s.Converged })
}

// drainWorld is the world of a drain test on the real control plane: a plane
// of its own (the fake's clusters are all this one API server, and the
// other tests of the package expect it unclaimed), the fake provider
// registering its node pools' Nodes there, a reconciler with the
// in-cluster half, and how a test drives them.
type drainWorld struct {
	plane *kubeplane.Plane
	kc    kubernetes.Interface
	apply func(crashtest.Step)
	// applyText applies a document's text (a step's, edited).
	applyText func(text string, prune bool)
	nodePools func() map[string]int
	run       func(what string, done func(substrate.Status) bool)
	// rec, status and advance are run's parts, for a test that drives
	// the passes itself.
	rec     *substrate.Reconciler
	status  func() substrate.Status
	advance func()
}

func newDrainWorld(t *testing.T, opts ...kubeplane.Options) drainWorld {
	t.Helper()
	// A plane of its own: the fake's clusters are all this one API
	// server, and the other tests of the package expect it unclaimed.
	plane := kubeplane.Start(t, append(opts, kubeplane.Options{})[0])
	ctx := t.Context()
	dir := t.TempDir()
	clk := clock.NewFake(time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC))
	kc := plane.Client()
	f, err := fakeprov.New(crashtest.FakeConfig(filepath.Join(dir, "fake.json")), crashtest.DefaultSecrets,
		fakeprov.WithClock(clk), fakeprov.WithKube(kc, plane.URL(), plane.CA()))
	if err != nil {
		t.Fatal(err)
	}
	st, err := state.Open(filepath.Join(dir, "fleet.db"), state.Options{Now: clk.Now, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	plane.SetTokenReviewer(kubeplane.ReviewerFunc(func(token string, _ []string) (authnv1.UserInfo, []string, bool) {
		user, ok := f.Review(token)
		return authnv1.UserInfo{Username: user, Groups: []string{"system:masters"}}, nil, ok
	}))
	t.Cleanup(func() { plane.SetTokenReviewer(nil) })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_ = ln.Close()
	var logs bytes.Buffer
	joins := join.NewStore(st, join.StoreOptions{Clock: clk})
	ic := New(Options{Daemon: &config.NodeDaemon{Image: "registry.example.com/fleet-agent:1.2.0", JoinURL: "http://" + ln.Addr().String() + "/"},
		Joins: joins, Tenant: crashtest.Tenant, Clock: clk, Log: zerolog.New(&logs), Audit: drain.StateAudit{Store: st, Clock: clk}})
	rec := substrate.New(substrate.Options{Store: st, Providers: map[string]substrate.Provider{"fake": f}, Clock: clk,
		Log: zerolog.New(&logs), InCluster: ic})
	applyText := func(text string, prune bool) {
		d, errs := fleet.Validate("test", []byte(text))
		if errs != nil {
			t.Fatal(errs.Text())
		}
		if _, err := apply.Apply(ctx, st, d, apply.Options{Prune: prune, Now: clk.Now}); err != nil {
			t.Fatal(err)
		}
	}
	applyStep := func(s crashtest.Step) { applyText(crashtest.Document(s), s.Prune) }
	status := func() substrate.Status {
		list, err := substrate.Statuses(st)
		if err != nil || len(list) != 1 {
			t.Fatalf("%v %v", list, err)
		}
		return list[0]
	}
	// nodePools are the node pools at the provider, by name.
	nodePools := func() map[string]int {
		out := map[string]int{}
		for _, c := range f.Snapshot().Clusters {
			for name, np := range c.NodePools {
				out[name] = np.NodeCount
			}
		}
		return out
	}
	advance := func() {
		clk.Advance(10 * time.Second)
		time.Sleep(100 * time.Millisecond) // kwok and the controllers run on the wall clock
	}
	// Passes on the reconciler's clock; between them the wall clock lets
	// kwok and the controllers act, bounded by the passes.
	run := func(what string, done func(substrate.Status) bool) {
		t.Helper()
		for range 200 {
			if err := rec.ReconcileOnce(ctx); err != nil {
				t.Fatal(err)
			}
			if s := status(); done(s) {
				return
			}
			advance()
		}
		t.Fatalf("%s: not within 200 passes: %+v", what, status())
	}
	return drainWorld{plane: plane, kc: kc, apply: applyStep, applyText: applyText, nodePools: nodePools, run: run, rec: rec, status: status, advance: advance}
}
