package drain

// The choice of a scale-down: which Nodes of a node pool go when it is
// made smaller. The choice is written on the Nodes (ChoiceAnnotation), so
// that every pass, and a restart after a kill -9, drains and removes the
// same ones.

import (
	"cmp"
	"context"
	"encoding/json"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// ChoiceAnnotation marks a Node a scale-down chose to remove; its value is
// the owner (Request.Pool).
const ChoiceAnnotation = "fleet-agent.dev/remove"

// ZoneLabel is the well-known label of a Node's zone.
const ZoneLabel = "topology.kubernetes.io/zone"

// Chosen is one Node a scale-down removes.
type Chosen struct {
	Name, ProviderID string
}

// ChoiceRequest is a scale-down's choice.
type ChoiceRequest struct {
	// Pool is the owner, as in Request.
	Pool string
	// PoolNodes are the names of every Node of the node pool.
	PoolNodes []string
	// Keep is how many Nodes stay: per zone when PerZone, else in all
	// (those that go then spread over the zones, the fullest first).
	Keep    int
	PerZone bool
}

// candidate is one Node as the choice ranks it.
type candidate struct {
	obj    *corev1.Node
	chosen bool // chosen before, by this owner
	// gpu: a GPU pod runs on it or it is booked; pods: its evictable pods.
	gpu  bool
	pods int
}

// rank orders the candidates, the first to go first: the ones chosen
// before (the choice holds), then NotReady, then cordoned, then those
// without GPU pods or a booking, then the fewest evictable pods, then by
// name so that the order is the same on every pass.
func rank(a, b candidate) int {
	key := func(c candidate) [5]int {
		return [5]int{b2i(!c.chosen), b2i(ready(c.obj)), b2i(!c.obj.Spec.Unschedulable), b2i(c.gpu), c.pods}
	}
	ka, kb := key(a), key(b)
	for i := range ka {
		if ka[i] != kb[i] {
			return cmp.Compare(ka[i], kb[i])
		}
	}
	return cmp.Compare(a.obj.Name, b.obj.Name)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Choose is the choice step: it reads the node pool's Nodes, keeps the
// Nodes chosen before while the scale-down still needs them, chooses more
// by rank where it needs more, writes the choice on them, and lets go of
// the ones no longer needed (their mark removed, and a drain of theirs
// abandoned: uncordoned). It returns the chosen Nodes by name.
func (d *Drainer) Choose(ctx context.Context, req ChoiceRequest) ([]Chosen, error) {
	var all []candidate
	for _, name := range req.PoolNodes {
		obj, err := d.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, apiErr("reading node "+name, err)
		}
		all = append(all, candidate{obj: obj, chosen: obj.Annotations[ChoiceAnnotation] == req.Pool})
	}
	zones := map[string][]int{}
	for i, c := range all {
		z := c.obj.Labels[ZoneLabel]
		zones[z] = append(zones[z], i)
	}
	need := map[string]int{}
	total := 0
	for z, idx := range zones {
		if req.PerZone {
			need[z] = max(0, len(idx)-req.Keep)
			total += need[z]
		}
	}
	if !req.PerZone {
		total = max(0, len(all)-req.Keep)
	}
	// The pods are read only when the choice grows: a choice that holds
	// costs one read of each Node.
	had := 0
	for _, c := range all {
		if c.chosen {
			had++
		}
	}
	if had < total {
		for i := range all {
			if err := d.weigh(ctx, &all[i]); err != nil {
				return nil, err
			}
		}
	}
	for _, idx := range zones {
		slices.SortFunc(idx, func(a, b int) int { return rank(all[a], all[b]) })
	}
	take := map[int]bool{}
	if req.PerZone {
		for z, idx := range zones {
			for _, i := range idx[:need[z]] {
				take[i] = true
			}
		}
	} else {
		// The ones chosen before first, wherever they are; then one at a
		// time from the zone with the most Nodes left.
		var before []int
		for i, c := range all {
			if c.chosen {
				before = append(before, i)
			}
		}
		slices.SortFunc(before, func(a, b int) int { return rank(all[a], all[b]) })
		for _, i := range before[:min(len(before), total)] {
			take[i] = true
		}
		for len(take) < total {
			best, bestLeft := -1, -1
			for _, z := range slices.Sorted(maps.Keys(zones)) {
				left, first := 0, -1
				for _, i := range zones[z] {
					if !take[i] {
						left++
						if first < 0 {
							first = i
						}
					}
				}
				if first >= 0 && (left > bestLeft || left == bestLeft && rank(all[first], all[best]) < 0) {
					best, bestLeft = first, left
				}
			}
			take[best] = true
		}
	}
	var out []Chosen
	var release []string
	for i, c := range all {
		switch {
		case take[i] && !c.chosen:
			if err := d.annotate(ctx, c.obj.Name, req.Pool); err != nil {
				return nil, err
			}
		case !take[i] && c.chosen:
			release = append(release, c.obj.Name)
		}
		if take[i] {
			out = append(out, Chosen{Name: c.obj.Name, ProviderID: c.obj.Spec.ProviderID})
		}
	}
	if err := d.Unchoose(ctx, req.Pool, release); err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b Chosen) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

// weigh reads what runs on a candidate: GPU pods (or a booking) and how
// many pods a drain would evict.
func (d *Drainer) weigh(ctx context.Context, c *candidate) error {
	pods, err := d.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + c.obj.Name})
	if err != nil {
		return apiErr("listing the pods of node "+c.obj.Name, err)
	}
	c.gpu = c.obj.Annotations[BookingAnnotation] != ""
	for i := range pods.Items {
		p := &pods.Items[i]
		if finished(p) || daemonSetPod(p) || p.Annotations[mirrorAnnotation] != "" {
			continue
		}
		if gpuPod(p) {
			c.gpu = true
			continue
		}
		c.pods++
	}
	return nil
}

// annotate sets (value "" removes) the choice annotation of a Node.
func (d *Drainer) annotate(ctx context.Context, name, value string) error {
	var v any
	if value != "" {
		v = value
	}
	data, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{ChoiceAnnotation: v}}})
	_, err := d.Client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, data, metav1.PatchOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return apiErr("marking node "+name+" for removal", err)
	}
	return nil
}

// Unchoose lets go of a choice: each Node of names chosen by pool loses
// the mark, and a drain of it is abandoned (uncordoned when we cordoned
// it).
func (d *Drainer) Unchoose(ctx context.Context, pool string, names []string) error {
	if len(names) == 0 {
		return nil
	}
	if err := d.Abandon(ctx, pool, names); err != nil {
		return err
	}
	for _, name := range names {
		obj, err := d.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return apiErr("reading node "+name, err)
		}
		if obj.Annotations[ChoiceAnnotation] != pool {
			continue
		}
		if err := d.annotate(ctx, name, ""); err != nil {
			return err
		}
	}
	return nil
}
