package incluster

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/fleet-agent/fleet-agent/internal/config"
	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/substrate/join"
)

// TestPoolNodesCountsReadyAndJoinedNodes: on a real API server, a node
// pool's Nodes are those of the substrate its provider label names (not
// another node pool's); Ready counts those whose Ready condition is True;
// joins are reported once a daemon of the substrate joined, and count
// only Ready Nodes.
func TestPoolNodesCountsReadyAndJoinedNodes(t *testing.T) {
	p := kube(t)
	ctx := t.Context()
	kc := p.Client()
	c := newCluster(t, p)
	u := strings.ReplaceAll(p.Unique(t), "-", "")
	pool := "pool_" + u
	if len(pool) > 60 {
		pool = pool[:60]
	}
	np := "fa-" + strings.Trim(u[max(0, len(u)-12):], "-") + "-h100-g2" // its tail is the plane's sequence: a name of its own
	st, err := state.Open(filepath.Join(t.TempDir(), "state.db"), state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	joins := join.NewStore(st, join.StoreOptions{})
	var logs bytes.Buffer
	ic := New(Options{Daemon: &config.NodeDaemon{Image: "registry.example.com/fleet-agent:1.2.0", JoinURL: "https://ops.example.com:9465/"},
		Joins: joins, Tenant: "acme", Log: zerolog.New(&logs)})

	// Nodes no kwok manages (no kwok annotation): their status is the
	// test's.
	node := func(name, nodePool string, ready corev1.ConditionStatus) {
		t.Helper()
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			providers.LabelSubstratePool: pool, "fake.fleet-agent.dev/node-pool": nodePool}}}
		made, err := kc.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = kc.CoreV1().Nodes().Delete(t.Context(), name, metav1.DeleteOptions{}) })
		// The control plane's node controllers write to a new Node too
		// (its taints): a status written over a version they moved is
		// written again on the latest.
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			made.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, Reason: "Test", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
			_, err := kc.CoreV1().Nodes().UpdateStatus(ctx, made, metav1.UpdateOptions{})
			if apierrors.IsConflict(err) {
				if latest, gerr := kc.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); gerr == nil {
					made = latest
				}
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	a, b, other := np+"-a", np+"-b", np+"-other"
	node(a, np, corev1.ConditionTrue)
	node(b, np, corev1.ConditionFalse)
	node(np+"-c", np, corev1.ConditionTrue)
	node(other, "fa-other-pool", corev1.ConditionTrue)

	got, err := ic.PoolNodes(ctx, c.target(pool, "create"), np)
	if err != nil || got.Listed != 3 || got.Ready != 2 || got.Joined != 0 || got.JoinKnown {
		t.Fatalf("before any join: %+v (%v), want 3 listed, 2 Ready, joins not reported", got, err)
	}
	joinNode := func(name string) {
		t.Helper()
		tok, _, err := joins.Token(ctx, pool, []string{name}, true)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := joins.Join(ctx, pool, name, tok); err != nil {
			t.Fatalf("join %s: %v", name, err)
		}
	}
	joinNode(a)
	joinNode(b) // NotReady: joined, yet not counted
	got, err = ic.PoolNodes(ctx, c.target(pool, "create"), np)
	if err != nil || got.Listed != 3 || got.Ready != 2 || got.Joined != 1 || !got.JoinKnown {
		t.Fatalf("after two joins, one of a NotReady Node: %+v (%v), want 3 listed, 2 Ready, 1 of them joined", got, err)
	}
	if _, err := ic.PoolNodes(ctx, c.target(pool, "create"), ""); err == nil {
		t.Fatal("no node pool named: want an error")
	}
}
