package incluster

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fakeprov "github.com/fleet-agent/fleet-agent/internal/providers/fake"
	"github.com/fleet-agent/fleet-agent/internal/substrate"
	"github.com/fleet-agent/fleet-agent/internal/substrate/crashtest"
	"github.com/fleet-agent/fleet-agent/internal/substrate/drain"
)

// TestBlueGreenDrainsTheOldPool: on the real control plane, with the fake
// provider registering its node pools' Nodes, a blue/green flavor whose
// machine type changes gets its new node pool; the old one's Nodes are
// then drained through the drain room, a GPU job on one holding the delete
// (NodePools DrainBlocked naming the pod), never more of the old pool's
// Nodes unavailable at once than its budget (measured after every pass);
// once the job ends the old pool is deleted and one node pool is left, of
// the new shape, its Nodes untouched by the drain.
func TestBlueGreenDrainsTheOldPool(t *testing.T) {
	w := newDrainWorld(t)
	ctx, plane, kc, applyStep, nodePools, run := t.Context(), w.plane, w.kc, w.apply, w.nodePools, w.run
	h100 := crashtest.Flavor{Name: "h100", MachineType: "fake-h100x8", Nodes: 2, Replace: true}
	pool := crashtest.Pool{Name: "gpu", Flavors: []crashtest.Flavor{h100}}
	applyStep(crashtest.Step{Pools: []crashtest.Pool{pool}})
	run("one node pool", func(s substrate.Status) bool { return len(s.NodePools) == 1 && s.Nodes.Listed == 2 })
	all, err := kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: nodeSelector(pool.ID())})
	if err != nil || len(all.Items) != 2 {
		t.Fatalf("nodes %v %v", all, err)
	}
	oldPool := all.Items[0].Labels[fakeprov.LabelFakeNodePool]
	gpuNode := all.Items[0].Name
	ns := plane.Namespace(t)
	job := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: ns}, Spec: corev1.PodSpec{NodeName: gpuNode,
		Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
		Containers: []corev1.Container{{Name: "c", Image: "train", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")}}}}}}
	if _, err := kc.CoreV1().Pods(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// worst is the most of the old pool's Nodes unavailable at once
	// (cordoned and not yet emptied, or NotReady), looked at after every
	// pass.
	worst := 0
	measure := func() {
		list, err := kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: fakeprov.LabelFakeNodePool + "=" + oldPool})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, node := range list.Items {
			done := strings.Contains(node.Annotations[drain.Annotation], `"done":true`)
			if node.Spec.Unschedulable && !done {
				n++
			}
		}
		worst = max(worst, n)
	}
	h100.MachineType = "fake-cpu-8"
	pool.Flavors = []crashtest.Flavor{h100}
	applyStep(crashtest.Step{Pools: []crashtest.Pool{pool}})
	run("drain held by the GPU job", func(s substrate.Status) bool {
		measure()
		for _, c := range s.Conditions {
			if c.Type == substrate.CondNodePools && c.Reason == substrate.ReasonDrainBlocked &&
				strings.Contains(c.Message, "pod "+ns+"/train on "+gpuNode+" (GPU job, since ") {
				return true
			}
		}
		return false
	})
	ours := func() (n int) {
		for name := range nodePools() {
			if strings.Contains(name, "-h100") {
				n++
			}
		}
		return n
	}
	if _, ok := nodePools()[oldPool]; !ok || ours() != 2 {
		t.Fatalf("node pools while the GPU job runs: %v", nodePools())
	}
	// The shape taken back before the delete: the old pool is kept, its
	// drain let go (the Node takes pods again), the new one deleted.
	h100.MachineType = "fake-h100x8"
	pool.Flavors = []crashtest.Flavor{h100}
	applyStep(crashtest.Step{Pools: []crashtest.Pool{pool}})
	run("drain let go, the new pool deleted", func(s substrate.Status) bool {
		measure()
		n, err := kc.CoreV1().Nodes().Get(ctx, gpuNode, metav1.GetOptions{})
		return err == nil && !n.Spec.Unschedulable && n.Annotations[drain.Annotation] == "" && ours() == 1 && s.Converged
	})
	if _, ok := nodePools()[oldPool]; !ok {
		t.Fatalf("the old pool is not the one kept: %v", nodePools())
	}
	// Changed again: generation 3 is made, and the old pool's drain is
	// held by the job once more until it ends.
	h100.MachineType = "fake-cpu-8"
	pool.Flavors = []crashtest.Flavor{h100}
	applyStep(crashtest.Step{Pools: []crashtest.Pool{pool}})
	run("drain held again", func(s substrate.Status) bool {
		measure()
		return strings.Contains(s.Message, "pod "+ns+"/train on "+gpuNode)
	})
	if err := kc.CoreV1().Pods(ns).Delete(ctx, "train", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	run("old node pool deleted", func(s substrate.Status) bool {
		measure()
		_, ok := nodePools()[oldPool]
		return !ok && s.Converged
	})
	if ours() != 1 {
		t.Fatalf("node pools after the replacement: %v", nodePools())
	}
	budget := drain.Budget(nil, 2)
	t.Logf("blue/green drain of a 2-node pool: at most %d of its Nodes unavailable at once (budget %d)", worst, budget)
	if worst < 1 || worst > budget {
		t.Fatalf("at most %d of the old pool's Nodes unavailable at once; budget %d (and the drain must have run)", worst, budget)
	}
	list, err := kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: nodeSelector(pool.ID())})
	if err != nil {
		t.Fatal(err)
	}
	for _, node := range list.Items {
		if node.Labels[fakeprov.LabelFakeNodePool] != oldPool && (node.Spec.Unschedulable || node.Annotations[drain.Annotation] != "") {
			t.Fatalf("the new pool's Node %s was touched by the drain", node.Name)
		}
	}
}
