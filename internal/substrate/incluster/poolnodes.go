package incluster

// How far a node pool's Nodes have come in the cluster, for a blue/green
// replacement that waits until the new node pool's Nodes joined before it
// drains the old one.

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/substrate"
)

var _ substrate.PoolNodeReader = (*InCluster)(nil)

// PoolNodes counts the node pool's Nodes, those Ready, and the Ready ones
// whose node daemon joined the pool. Joins are reported (JoinKnown) once
// some node daemon of the substrate joined: on a substrate where none ever
// did, the old node pool's Nodes had not joined either, and waiting for
// the new one's would hold the replacement for ever; the Nodes' message
// (Apply's) already says why they do not join.
func (ic *InCluster) PoolNodes(ctx context.Context, t substrate.Target, nodePool string) (substrate.PoolNodes, error) {
	if nodePool == "" {
		return substrate.PoolNodes{}, refusal.New(refusal.Internal, "the Nodes of no node pool were asked for")
	}
	kc, err := ic.client(ctx, t)
	if err != nil {
		return substrate.PoolNodes{}, err
	}
	list, err := kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: nodeSelector(t.PoolID)})
	if err != nil {
		return substrate.PoolNodes{}, apiErr("listing the Nodes labelled "+nodeSelector(t.PoolID), err)
	}
	joined, err := ic.o.Joins.Joined(ctx, t.PoolID)
	if err != nil {
		return substrate.PoolNodes{}, err
	}
	isJoined := map[string]bool{}
	for _, j := range joined {
		isJoined[j.Name] = true
	}
	out := substrate.PoolNodes{JoinKnown: len(joined) > 0}
	for _, n := range list.Items {
		if !inNodePool(&n, nodePool) {
			continue
		}
		out.Listed++
		if nodeReady(&n) {
			out.Ready++
			if isJoined[n.Name] {
				out.Joined++
			}
		}
	}
	return out, nil
}

// inNodePool reports whether a Node says it is the node pool's (one of
// NodePoolLabels names it).
func inNodePool(n *corev1.Node, nodePool string) bool {
	for _, k := range NodePoolLabels {
		if n.Labels[k] == nodePool {
			return true
		}
	}
	return false
}

// nodeReady reports whether a Node's Ready condition is True.
func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
