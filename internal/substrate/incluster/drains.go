package incluster

// The in-cluster half of a node pool's drain: which Nodes are the node
// pool's, and the drain room run over them with the run's credential.

import (
	"context"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/substrate"
	"github.com/fleet-agent/fleet-agent/internal/substrate/drain"
)

var _ substrate.Drainer = (*InCluster)(nil)

// NodePoolLabels are the labels by which each provider says which node
// pool a Node belongs to (GKE, EKS managed node groups, DOKS, and the fake
// provider's): a Node of the substrate whose value of one of them is the
// node pool's name is that node pool's.
var NodePoolLabels = []string{
	"cloud.google.com/gke-nodepool",
	"eks.amazonaws.com/nodegroup",
	"doks.digitalocean.com/node-pool",
	"fake.fleet-agent.dev/node-pool",
}

// Drain runs one pass of the drain of a node pool's Nodes.
func (ic *InCluster) Drain(ctx context.Context, t substrate.Target, ask substrate.DrainAsk) (substrate.DrainReport, error) {
	kc, err := ic.client(ctx, t)
	if err != nil {
		return substrate.DrainReport{}, err
	}
	names, err := nodePoolNodes(ctx, kc, t, ask.NodePool)
	if err != nil {
		return substrate.DrainReport{}, err
	}
	then := drain.Wait
	if ask.Force {
		then = drain.Force
	}
	d := &drain.Drainer{Client: kc, Clock: ic.o.Clock, Audit: ic.o.Audit}
	empty := names
	var chosen []drain.Chosen
	if ask.Shrink != nil {
		if chosen, err = d.Choose(ctx, drain.ChoiceRequest{Pool: owner(t, ask.NodePool), PoolNodes: names, Keep: ask.Shrink.Keep, PerZone: ask.Shrink.PerZone}); err != nil {
			return substrate.DrainReport{}, err
		}
		empty = make([]string, len(chosen))
		for i, c := range chosen {
			empty[i] = c.Name
		}
	}
	res, err := d.Pass(ctx, drain.Request{Pool: owner(t, ask.NodePool), PoolNodes: names, Empty: empty,
		MaxUnavailable: drain.Budget(ask.Budget, len(names)), Settings: drain.Settings{Timeout: ask.Timeout, Then: then}})
	if err != nil {
		return substrate.DrainReport{}, err
	}
	rep := substrate.DrainReport{Finished: res.Finished(), Blocked: len(res.Blockers) > 0, Overdue: res.Overdue, Message: res.Message()}
	if ask.Shrink != nil && rep.Finished {
		if rep.ProviderIDs, err = providerIDs(chosen); err != nil {
			return substrate.DrainReport{}, err
		}
	}
	return rep, nil
}

// providerIDs are the chosen Nodes' providerIDs, by which the provider
// removes exactly them. A Node without one cannot be named to the
// provider: the scale-down stops there rather than let it choose.
func providerIDs(chosen []drain.Chosen) ([]string, error) {
	out := make([]string, 0, len(chosen))
	for _, c := range chosen {
		if c.ProviderID == "" {
			return nil, refusal.New(refusal.InvalidState, "node %s has no spec.providerID, so the provider cannot be told to remove it; the scale-down waits: set the node pool's size back, or remove the Node by hand", c.Name)
		}
		out = append(out, c.ProviderID)
	}
	slices.Sort(out)
	return out, nil
}

// Undrain uncordons what a node pool's drain cordoned.
func (ic *InCluster) Undrain(ctx context.Context, t substrate.Target, nodePool string) error {
	kc, err := ic.client(ctx, t)
	if err != nil {
		return err
	}
	names, err := nodePoolNodes(ctx, kc, t, nodePool)
	if err != nil {
		return err
	}
	d := &drain.Drainer{Client: kc, Clock: ic.o.Clock}
	if err := d.Abandon(ctx, owner(t, nodePool), names); err != nil {
		return err
	}
	return d.Unchoose(ctx, owner(t, nodePool), names)
}

// owner is the drain's mark owner: this installation's pool and the node
// pool.
func owner(t substrate.Target, nodePool string) string {
	return t.PoolID + "/" + nodePool
}

// nodePoolNodes are the names of the substrate's Nodes that belong to the
// node pool.
func nodePoolNodes(ctx context.Context, kc kubernetes.Interface, t substrate.Target, nodePool string) ([]string, error) {
	if nodePool == "" {
		return nil, refusal.New(refusal.Internal, "a drain asked for no node pool")
	}
	nodes, err := kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: nodeSelector(t.PoolID)})
	if err != nil {
		return nil, apiErr("listing the Nodes labelled "+nodeSelector(t.PoolID), err)
	}
	var names []string
	for _, n := range nodes.Items {
		for _, k := range NodePoolLabels {
			if n.Labels[k] == nodePool {
				names = append(names, n.Name)
				break
			}
		}
	}
	slices.Sort(names)
	return names, nil
}
