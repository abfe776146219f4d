package drain_test

import (
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fleet-agent/fleet-agent/internal/substrate/drain"
	"github.com/fleet-agent/fleet-agent/internal/testutil/kubeplane"
)

// zoned puts a Node in a zone.
func zoned(z string) kubeplane.NodeOption {
	return func(n *corev1.Node) {
		n.Labels[drain.ZoneLabel] = z
		n.Spec.ProviderID = "kwok://" + n.Name
	}
}

func names(cs []drain.Chosen) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

// TestChooseSpreadsOverZonesAndHolds: the Nodes a scale-down removes are
// taken from the zone with the most Nodes left (when the provider counts
// in all), or the size is kept per zone (when it counts per zone); a
// cordoned Node goes before a schedulable one, a GPU job's Node after the
// others; the choice is written on the Nodes and holds when what runs
// changes; a larger size lets go of what it no longer needs (the mark
// removed), and Unchoose drops the rest.
func TestChooseSpreadsOverZonesAndHolds(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	var ns []string
	for i, z := range []string{"a", "a", "a", "b", "b", "c"} {
		name := fmt.Sprintf("%s-z%d", f.prefix, i)
		opts := []kubeplane.NodeOption{zoned(z)}
		if i == 1 {
			opts = append(opts, kubeplane.WithExtended(kubeplane.GPU, 8))
		}
		plane.AddNodeT(t, name, map[string]string{"drain-test": f.prefix}, opts...)
		ns = append(ns, name)
	}
	pool := "pool/np"
	// In all: keep 3 of 6 (zones a:3 b:2 c:1): two from a, one from b.
	// In a, the GPU job's Node stays; in b, the cordoned Node goes.
	f.pod("train", ns[0], nil, 0)
	f.pod("gpu", ns[1], nil, 1)
	if _, err := plane.Client().CoreV1().Nodes().Patch(ctx, ns[4], types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := f.d.Choose(ctx, drain.ChoiceRequest{Pool: pool, PoolNodes: ns, Keep: 3})
	if err != nil {
		t.Fatal(err)
	}
	// a: ns[2] (no pods) and ns[0] or ns[1] (one pod each: by name, ns[0]);
	// b: ns[4] (cordoned).
	want := []string{ns[0], ns[2], ns[4]}
	slices.Sort(want)
	if !slices.Equal(names(got), want) {
		t.Fatalf("chosen %v, want %v", names(got), want)
	}
	for _, c := range got {
		if c.ProviderID != "kwok://"+c.Name {
			t.Fatalf("chosen %+v without its providerID", c)
		}
		if f.node(c.Name).Annotations[drain.ChoiceAnnotation] != pool {
			t.Fatalf("node %s does not carry the choice", c.Name)
		}
	}
	// What runs changes (ns[2] gets a pod, ns[3] is cordoned): the choice
	// holds.
	f.pod("late", ns[2], nil, 0)
	if _, err := plane.Client().CoreV1().Nodes().Patch(ctx, ns[3], types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	again, err := f.d.Choose(ctx, drain.ChoiceRequest{Pool: pool, PoolNodes: ns, Keep: 3})
	if err != nil || !slices.Equal(names(again), want) {
		t.Fatalf("chosen again %v (%v), want %v", names(again), err, want)
	}
	// Keep 5: one goes; the one kept of the choice is the best ranked
	// (cordoned ns[4]), the others are let go of.
	fewer, err := f.d.Choose(ctx, drain.ChoiceRequest{Pool: pool, PoolNodes: ns, Keep: 5})
	if err != nil || !slices.Equal(names(fewer), []string{ns[4]}) {
		t.Fatalf("keeping 5: %v (%v), want [%s]", names(fewer), err, ns[4])
	}
	for _, n := range []string{ns[0], ns[2]} {
		if f.node(n).Annotations[drain.ChoiceAnnotation] != "" {
			t.Fatalf("node %s still carries a choice let go of", n)
		}
	}
	if err := f.d.Unchoose(ctx, pool, ns); err != nil {
		t.Fatal(err)
	}
	// Per zone: keep one in each: two of a, one of b (the cordoned ones
	// first), none of c.
	per, err := f.d.Choose(ctx, drain.ChoiceRequest{Pool: pool, PoolNodes: ns, Keep: 1, PerZone: true})
	if err != nil {
		t.Fatal(err)
	}
	want = []string{ns[0], ns[2], ns[3]}
	slices.Sort(want)
	if !slices.Equal(names(per), want) {
		t.Fatalf("per zone: %v, want %v", names(per), want)
	}
	if err := f.d.Unchoose(ctx, pool, ns); err != nil {
		t.Fatal(err)
	}
	for _, n := range ns {
		if f.node(n).Annotations[drain.ChoiceAnnotation] != "" {
			t.Fatalf("node %s still carries a choice after Unchoose", n)
		}
	}
}
