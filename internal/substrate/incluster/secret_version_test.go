package incluster

import (
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/version"
	fakediscovery "k8s.io/client-go/discovery/fake"
	k8stesting "k8s.io/client-go/testing"
)

// TestSecretTokenOnlyWithoutPodTokens: with Pod tokens reviewed and a
// cluster of Kubernetes 1.30 or later (its tokens name the Node), no
// pool-wide Secret token is minted or written, and one of ours left from
// before is deleted and its token revoked; on an older cluster, or with no
// Pod tokens, the Secret is kept as before. Waiting Nodes are still
// reported, since the newest waiting Node appeared.
func TestSecretTokenOnlyWithoutPodTokens(t *testing.T) {
	for _, tc := range []struct {
		name      string
		podTokens bool
		version   string
		secret    bool
	}{
		{"podTokens/1.29", true, "v1.29.4", true},
		{"podTokens/1.30", true, "v1.30.0", false},
		{"podTokens/1.31-gke", true, "v1.31.2-gke.1200000", false},
		{"podTokens/1.33-eks", true, "v1.33.1-eks-7308294", false},
		{"noPodTokens/1.31", false, "v1.31.2", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := node("a", poolID), node("b", poolID)
			u := newUnit(t)
			created := metav1.NewTime(u.clock.Now())
			a.CreationTimestamp, b.CreationTimestamp = created, created
			for _, n := range []metav1.Object{a, b} {
				if _, err := u.kc.CoreV1().Nodes().Create(t.Context(), n.(*corev1.Node), metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			if tc.podTokens {
				u.ic.o.PodTokens = NewPodTokens(nil)
			}
			disc := u.kc.Discovery().(*fakediscovery.FakeDiscovery)
			ctx := t.Context()
			// First an old cluster: the Secret is written.
			disc.FakedServerVersion = &version.Info{Major: "1", Minor: "28", GitVersion: "v1.28.9"}
			if _, err := u.ic.Apply(ctx, u.target("create")); err != nil {
				t.Fatal(err)
			}
			if _, ok := u.secretToken(); !ok {
				t.Fatal("no join Secret on a 1.28 cluster")
			}
			// Then the cluster is upgraded.
			disc.FakedServerVersion = &version.Info{Major: "1", Minor: strings.Split(tc.version, ".")[1], GitVersion: tc.version}
			n, err := u.ic.Apply(ctx, u.target("create"))
			if err != nil || n.Listed != 2 || n.Joined != 0 {
				t.Fatalf("%+v %v", n, err)
			}
			_, ok := u.secretToken()
			_, _, current, err := u.joins.Current(ctx, poolID)
			if err != nil {
				t.Fatal(err)
			}
			if ok != tc.secret || current != tc.secret {
				t.Fatalf("Secret %v, token current %v; want both %v", ok, current, tc.secret)
			}
			if !n.WaitingSince.Equal(created.Time) {
				t.Fatalf("waiting since %v, want %v", n.WaitingSince, created.Time)
			}
			u.clock.Advance(WaitingTooLong)
			if n, _ = u.ic.Apply(ctx, u.target("create")); !strings.Contains(n.Message, "2 of 2 Nodes have not joined") {
				t.Fatalf("message %q", n.Message)
			}
		})
	}
}

// TestPodTokensJoinOnARealControlPlane: the real API server's discovery
// version is read and parsed as the gate wants it: the test plane (1.30 or
// later) needs no Secret token where Pod tokens are reviewed, and one is
// still written where they are not.
func TestPodTokensJoinOnARealControlPlane(t *testing.T) {
	kc := kube(t).Client()
	for _, tc := range []struct {
		podTokens *PodTokens
		want      bool
	}{{NewPodTokens(nil), true}, {nil, false}} {
		ic := New(Options{PodTokens: tc.podTokens, Log: zerolog.Nop()})
		got, err := ic.podTokensJoin(kc)
		if err != nil || got != tc.want {
			info, _ := kc.Discovery().ServerVersion()
			t.Fatalf("Pod tokens %v on %+v: %v %v, want %v", tc.podTokens != nil, info, got, err, tc.want)
		}
	}
}

// TestPodTokensWaitingOnOldNodes: on an adopted cluster whose Nodes are
// older than the claim, Nodes waiting for Pod-token joins are counted from
// the claim (when the agent put the daemon there), not from the Nodes'
// creation: no "not joined for 15m" at the first pass.
func TestPodTokensWaitingOnOldNodes(t *testing.T) {
	u := newUnit(t)
	old := metav1.NewTime(u.clock.Now().Add(-48 * time.Hour))
	n := node("a", poolID)
	n.CreationTimestamp = old
	if _, err := u.kc.CoreV1().Nodes().Create(t.Context(), n, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The fake clientset stamps no creation time: the claim says it was
	// made now, as an API server would.
	u.kc.PrependReactor("create", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		cm := a.(k8stesting.CreateAction).GetObject().(*corev1.ConfigMap)
		cm.CreationTimestamp = metav1.NewTime(u.clock.Now())
		return false, nil, nil
	})
	u.ic.o.PodTokens = NewPodTokens(nil)
	u.kc.Discovery().(*fakediscovery.FakeDiscovery).FakedServerVersion = &version.Info{Major: "1", Minor: "32", GitVersion: "v1.32.1"}
	claimed := u.clock.Now()
	got, err := u.ic.Apply(t.Context(), u.target("adopt"))
	if err != nil || got.Message != "" || !got.WaitingSince.Equal(claimed) {
		t.Fatalf("%+v %v; want waiting since the claim %v", got, err, claimed)
	}
	u.clock.Advance(WaitingTooLong)
	if got, _ = u.ic.Apply(t.Context(), u.target("adopt")); !strings.Contains(got.Message, "1 of 1 Nodes have not joined") {
		t.Fatalf("message %q", got.Message)
	}
}
