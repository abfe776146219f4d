package kubeplane

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// KwokAnnotation marks the Nodes kwok manages (value "fake"). An annotation,
// not a label: a test selects Nodes by labels, and a label the plane relied
// on could be removed by the code under test (kwok then stops managing the
// Node and its Pods stay Terminating).
const KwokAnnotation = "kwok.x-k8s.io/node"

// GPU is the extended resource NVIDIA's device plugin advertises.
const GPU corev1.ResourceName = "nvidia.com/gpu"

// NodeReadyTimeout bounds AddNode's wait for a Node to become usable
// (about 1 s when the plane works).
const NodeReadyTimeout = 30 * time.Second

// NodeOption shapes a Node before it is registered.
type NodeOption func(*corev1.Node)

// WithExtended advertises n of an extended resource (GPU, "amd.com/gpu")
// in the Node's capacity and allocatable, as a device plugin would.
func WithExtended(name corev1.ResourceName, n int64) NodeOption {
	return func(node *corev1.Node) {
		q := *resource.NewQuantity(n, resource.DecimalSI)
		node.Status.Capacity[name] = q
		node.Status.Allocatable[name] = q
	}
}

// WithTaints registers the Node with taints (a GPU pool's
// nvidia.com/gpu=present:NoSchedule, say).
func WithTaints(taints ...corev1.Taint) NodeOption {
	return func(node *corev1.Node) { node.Spec.Taints = append(node.Spec.Taints, taints...) }
}

// AddNode registers a Node the way a cloud machine's kubelet does (the
// standard hostname/os/arch labels, capacity in status, plus labels), for
// kwok to run, and waits until it is Ready and the node lifecycle
// controller has lifted its not-ready taint, so Pods can be placed on it.
// Labels given override the standard ones.
func (p *Plane) AddNode(ctx context.Context, name string, labels map[string]string, opts ...NodeOption) (*corev1.Node, error) {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			Labels: map[string]string{
				"kubernetes.io/hostname": name,
				"kubernetes.io/os":       "linux",
				"kubernetes.io/arch":     "amd64",
			},
			Annotations: map[string]string{KwokAnnotation: "fake"},
		},
		Status: corev1.NodeStatus{
			Capacity: corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse("32"),
				corev1.ResourceMemory: resource.MustParse("256Gi"),
				corev1.ResourcePods:   resource.MustParse("110"),
			},
			Allocatable: corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse("32"),
				corev1.ResourceMemory: resource.MustParse("256Gi"),
				corev1.ResourcePods:   resource.MustParse("110"),
			},
		},
	}
	maps.Copy(node.Labels, labels)
	for _, o := range opts {
		o(node)
	}
	want := node.Status.Allocatable
	if _, err := p.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("kubeplane: register node %s: %w", name, err)
	}
	// Bounded even when ctx is not: a Node that never gets Ready (kwok not
	// managing it, the node lifecycle controller not running) would
	// otherwise hang the test until go test's timeout.
	wctx, cancel := context.WithTimeout(ctx, NodeReadyTimeout)
	defer cancel()
	var ready *corev1.Node
	err := poll(wctx, func() (bool, error) {
		n, err := p.client.CoreV1().Nodes().Get(wctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		ready = n
		return nodeReady(n), nil
	})
	if err != nil {
		state := "never read"
		if ready != nil {
			state = fmt.Sprintf("conditions %v, taints %v", conditionSummary(ready), ready.Spec.Taints)
		}
		return ready, fmt.Errorf("kubeplane: node %s not Ready and untainted within %s (%s): kwok marks it Ready, "+
			"the node lifecycle controller lifts its not-ready taint; see their logs: %w", name, NodeReadyTimeout, state, err)
	}
	for r, q := range want {
		if got := ready.Status.Allocatable[r]; got.Cmp(q) != 0 {
			return ready, fmt.Errorf("kubeplane: node %s allocatable %s is %s, registered %s", name, r, got.String(), q.String())
		}
	}
	return ready, nil
}

// AddNodeT is AddNode for one test: it fails the test on error and removes
// the Node when the test ends.
func (p *Plane) AddNodeT(t testing.TB, name string, labels map[string]string, opts ...NodeOption) *corev1.Node {
	t.Helper()
	n, err := p.AddNode(t.Context(), name, labels, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.RemoveNode(context.Background(), name); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("kubeplane: remove node %s: %v", name, err)
		}
	})
	return n
}

// RemoveNode deletes a Node, as a cloud's node controller does when the
// machine is gone, and waits until the API no longer has it. Its Pods stay
// until the pod garbage collector removes them (about 40 s, as in a
// cluster). A missing Node is apierrors.IsNotFound.
func (p *Plane) RemoveNode(ctx context.Context, name string) error {
	if err := p.client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return err
	}
	return poll(ctx, func() (bool, error) {
		_, err := p.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}

func conditionSummary(n *corev1.Node) []string {
	var out []string
	for _, c := range n.Status.Conditions {
		out = append(out, string(c.Type)+"="+string(c.Status))
	}
	return out
}

func nodeReady(n *corev1.Node) bool {
	ready := false
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			ready = true
		}
	}
	for _, t := range n.Spec.Taints {
		if t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable {
			return false
		}
	}
	return ready
}
