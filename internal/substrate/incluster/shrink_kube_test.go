package incluster

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/fleet-agent/fleet-agent/internal/substrate"
	"github.com/fleet-agent/fleet-agent/internal/substrate/crashtest"
	"github.com/fleet-agent/fleet-agent/internal/substrate/drain"
	"github.com/fleet-agent/fleet-agent/internal/testutil/kubeplane"
)

// TestShrinkDrainsAndRemovesExactlyTheChosenNodes: on the real control
// plane, a node pool of three Nodes made one: the in-cluster half chooses
// the two that go by what runs on them (the Node with no GPU job first,
// then the GPU Node with the fewest other pods), never the one the
// provider's own scale-in would take; it drains exactly them, a GPU job
// and a pod a PodDisruptionBudget protects each holding it (DrainBlocked
// naming the pod, and the budget), the disruption budget (one Node of
// three) never exceeded at any moment a watch of the Nodes sees; once they
// are empty, exactly they are removed, and the Node kept was never
// cordoned.
func TestShrinkDrainsAndRemovesExactlyTheChosenNodes(t *testing.T) {
	// The disruption controller computes the PodDisruptionBudget's
	// status: without it the API server answers an eviction it has not
	// judged yet with a retry the client waits out.
	w := newDrainWorld(t, kubeplane.Options{Controllers: append(slices.Clone(kubeplane.DefaultControllers), "disruption-controller")})
	ctx, plane, kc := t.Context(), w.plane, w.kc
	h100 := crashtest.Flavor{Name: "h100", MachineType: "fake-h100x8", Nodes: 3}
	pool := crashtest.Pool{Name: "gpu", Flavors: []crashtest.Flavor{h100}}
	doc := func(f crashtest.Flavor) string {
		p := pool
		p.Flavors = []crashtest.Flavor{f}
		return strings.Replace(crashtest.Document(crashtest.Step{Pools: []crashtest.Pool{p}}), `"substrate":`, `"disruptionBudget":0.5,"substrate":`, 1)
	}
	w.applyText(doc(h100), false)
	w.run("three nodes", func(s substrate.Status) bool {
		return len(s.NodePools) == 1 && s.Nodes.Listed == 3 && s.State == "ready"
	})
	list, err := kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: nodeSelector(pool.ID())})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range list.Items {
		if n.Spec.ProviderID == "" {
			t.Fatalf("Node %s has no providerID", n.Name)
		}
		names = append(names, n.Name)
	}
	slices.Sort(names)
	// n0 runs a GPU job; n1 a web pod its PDB protects (the disruption
	// controller does not run on this plane: the PDB allows nothing); n2
	// a GPU job and another pod. The choice: n1 (no GPU job), then n0
	// (a GPU job and nothing else); n2 stays. The provider's own
	// scale-in would have taken n1 and n2.
	ns := plane.Namespace(t)
	gpuPod := func(name, node string, labels map[string]string, gpus int64) {
		t.Helper()
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels}, Spec: corev1.PodSpec{NodeName: node,
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers:  []corev1.Container{{Name: "c", Image: name}}}}
		if gpus > 0 {
			p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(gpus, resource.DecimalSI)}
		}
		if _, err := kc.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	gpuPod("train", names[0], nil, 8)
	gpuPod("web", names[1], map[string]string{"app": "web"}, 0)
	gpuPod("train2", names[2], nil, 4)
	gpuPod("side", names[2], nil, 0)
	one := intstr.FromInt32(1)
	if _, err := kc.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w.run("the PDB counted by the disruption controller", func(substrate.Status) bool {
		b, err := kc.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "web", metav1.GetOptions{})
		return err == nil && b.Status.ObservedGeneration == b.Generation && b.Status.CurrentHealthy == 1
	})

	// Every change to the pool's Nodes is seen: how many are draining
	// (marked by the drain and not yet empty) at once, and which were
	// ever cordoned by it.
	wt, err := kc.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{LabelSelector: nodeSelector(pool.ID()), ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	draining, marked := map[string]bool{}, map[string]bool{}
	most := 0
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for ev := range wt.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			if !ok {
				continue
			}
			mu.Lock()
			var m drain.Mark
			raw, has := n.Annotations[drain.Annotation]
			switch {
			case ev.Type == watch.Deleted:
				delete(draining, n.Name)
			case has && json.Unmarshal([]byte(raw), &m) == nil:
				marked[n.Name] = true
				draining[n.Name] = !m.Done
			default:
				delete(draining, n.Name)
			}
			now := 0
			for _, d := range draining {
				if d {
					now++
				}
			}
			most = max(most, now)
			mu.Unlock()
		}
	}()

	w.applyText(doc(with(h100, 1)), false)
	blocked := func(pod, why string) func(substrate.Status) bool {
		return func(s substrate.Status) bool {
			for _, c := range s.Conditions {
				if c.Type == substrate.CondNodePools && c.Reason == substrate.ReasonDrainBlocked && strings.Contains(c.Message, "pod "+ns+"/"+pod+" on ") &&
					strings.Contains(c.Message, "("+why) && strings.Contains(c.Message, ", since ") {
					return true
				}
			}
			return false
		}
	}
	w.run("the GPU job holds the drain", blocked("train", "GPU job"))
	if got := ours(w.nodePools()); got != 3 {
		t.Fatalf("the node pool has %d nodes while the drain is held", got)
	}
	if err := kc.CoreV1().Pods(ns).Delete(ctx, "train", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	w.run("the PDB holds the drain", blocked("web", "PDB "+ns+"/web"))
	if got := ours(w.nodePools()); got != 3 {
		t.Fatalf("the node pool has %d nodes while the PDB holds", got)
	}
	if err := kc.PolicyV1().PodDisruptionBudgets(ns).Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	w.run("shrunk to one", func(s substrate.Status) bool {
		return s.Converged && s.State == "ready" && len(s.NodePools) == 1 && s.NodePools[0].Nodes == 1
	})
	// The chosen Nodes are gone at the provider and in the cluster; the
	// kept one was never touched.
	w.run("the removed Nodes gone", func(substrate.Status) bool {
		l, err := kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: nodeSelector(pool.ID())})
		return err == nil && len(l.Items) == 1
	})
	kept, err := kc.CoreV1().Nodes().Get(ctx, names[2], metav1.GetOptions{})
	if err != nil || kept.Spec.Unschedulable || kept.Annotations[drain.Annotation] != "" || kept.Annotations[drain.ChoiceAnnotation] != "" {
		t.Fatalf("the kept Node %s: %v %+v", names[2], err, kept)
	}
	for _, n := range names[:2] {
		if _, err := kc.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("chosen Node %s is still there: %v", n, err)
		}
	}
	for _, p := range []string{"train2", "side"} {
		if _, err := kc.CoreV1().Pods(ns).Get(ctx, p, metav1.GetOptions{}); err != nil {
			t.Fatalf("pod %s on the kept Node: %v", p, err)
		}
	}
	wt.Stop()
	<-watched
	mu.Lock()
	defer mu.Unlock()
	if most != 1 {
		t.Fatalf("at most %d Nodes draining at once, want exactly the budget's 1 (of 3 at 0.5)", most)
	}
	if got := slices.Sorted(maps.Keys(marked)); !slices.Equal(got, names[:2]) {
		t.Fatalf("Nodes the drain marked: %v, want the chosen %v", got, names[:2])
	}
}

func with(f crashtest.Flavor, nodes int) crashtest.Flavor { f.Nodes = nodes; return f }

// ours is the node count of the h100 flavor's node pool (-1: none).
func ours(pools map[string]int) int {
	for name, n := range pools {
		if strings.HasSuffix(name, "-h100") {
			return n
		}
	}
	return -1
}
