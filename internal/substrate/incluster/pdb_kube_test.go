package incluster

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	fakeprov "github.com/fleet-agent/fleet-agent/internal/providers/fake"
	"github.com/fleet-agent/fleet-agent/internal/substrate"
	"github.com/fleet-agent/fleet-agent/internal/substrate/crashtest"
)

// TestUnprocessedBudgetIsNamedNotWaitedOn: a PodDisruptionBudget whose
// status the cluster's disruption controller has not computed (this plane
// runs none, as a cluster whose controller-manager lags) makes the eviction
// API answer 429 with a Retry-After. The drain takes that answer as the
// budget's refusal at once and names the budget: it does not let the
// client retry the eviction until the pass's deadline, which froze the
// drain and every substrate behind it without naming anything.
func TestUnprocessedBudgetIsNamedNotWaitedOn(t *testing.T) {
	w := newDrainWorld(t)
	ctx, plane, kc, applyStep, rec, status := t.Context(), w.plane, w.kc, w.apply, w.rec, w.status
	cpu := crashtest.Flavor{Name: "cpu", MachineType: "fake-cpu-4", Nodes: 1}
	big := crashtest.Flavor{Name: "big", MachineType: "fake-cpu-8", Nodes: 1}
	pool := crashtest.Pool{Name: "web", Flavors: []crashtest.Flavor{cpu, big}}
	applyStep(crashtest.Step{Pools: []crashtest.Pool{pool}})
	w.run("two node pools", func(s substrate.Status) bool { return len(s.NodePools) == 2 && s.Nodes.Listed == 2 })

	all, err := kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: nodeSelector(pool.ID())})
	if err != nil {
		t.Fatal(err)
	}
	var bigNode string
	for _, n := range all.Items {
		if strings.Contains(n.Labels[fakeprov.LabelFakeNodePool], "-big") {
			bigNode = n.Name
		}
	}
	if bigNode == "" {
		t.Fatalf("no Node of the big flavor among %d", len(all.Items))
	}
	ns := plane.Namespace(t)
	web := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: ns, Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{NodeName: bigNode, Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{Name: "c", Image: "web"}}}}
	if _, err := kc.CoreV1().Pods(ns).Create(ctx, web, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	one := intstr.FromInt32(1)
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}
	if _, err := kc.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	pool.Flavors = []crashtest.Flavor{cpu}
	applyStep(crashtest.Step{Pools: []crashtest.Pool{pool}, Prune: true})
	// Within a few passes the pod is reached; the first pass that reaches
	// it must name the budget, not report the client's give-up.
	want := "pod " + ns + "/web-1 on " + bigNode + " (PDB " + ns + "/web"
	for i := range 20 {
		if err := rec.ReconcileOnce(ctx); err != nil {
			t.Fatal(err)
		}
		s := status()
		if strings.Contains(s.Message, "web-1") {
			if !strings.Contains(s.Message, want) {
				t.Fatalf("pass %d: the drain does not name the budget: %q (want it to contain %q)", i, s.Message, want)
			}
			if !strings.Contains(s.Message, "not yet computed") {
				t.Fatalf("pass %d: the drain does not say the budget is unprocessed: %q", i, s.Message)
			}
			if _, err := kc.CoreV1().Pods(ns).Get(ctx, "web-1", metav1.GetOptions{}); err != nil {
				t.Fatalf("the pod the budget protects is gone: %v", err)
			}
			return
		}
		w.advance()
	}
	t.Fatalf("the drain never reached pod web-1: %+v", status())
}
