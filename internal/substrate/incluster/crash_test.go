package incluster

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
)

// cutter cuts the agent off at its n-th call to the cluster API: that call
// and every later one fail, as if the process had been killed there (the
// calls before it took effect, that one and the rest never reach the
// server).
type cutter struct {
	mu    sync.Mutex
	at    int // 1-based; 0: never
	calls int
}

var errKilled = errors.New("killed")

func (c *cutter) react(k8stesting.Action) (bool, runtime.Object, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	if c.at > 0 && c.calls >= c.at {
		return true, nil, errKilled
	}
	return false, nil, nil
}

// joinAll joins every listed Node waiting with the token in the Secret, as
// their node daemons would.
func (u *unit) joinAll(names ...string) {
	u.t.Helper()
	tok, ok := u.secretToken()
	if !ok {
		u.t.Fatal("no join Secret to join with")
	}
	for _, n := range names {
		if _, err := u.joins.Join(u.t.Context(), poolID, n, tok); err != nil {
			u.t.Fatalf("join %s: %v", n, err)
		}
	}
}

// TestCrashAtEveryCall kills the in-cluster half at each of its calls to
// the cluster API in turn, during the apply and during the teardown, and
// restarts it over the same state file and cluster: the restart converges
// (the claim, the objects, a join token that works for the waiting Nodes,
// all joined and the Secret gone; then nothing of ours left and the claim
// gone), whatever was cut off.
func TestCrashAtEveryCall(t *testing.T) {
	// How many calls a whole apply and a whole teardown make, counted on a
	// run without a crash.
	count := func(teardown bool) int {
		u := newUnit(t, node("a", poolID), node("b", poolID))
		c := &cutter{}
		if teardown {
			if _, err := u.ic.Apply(t.Context(), u.target("adopt")); err != nil {
				t.Fatal(err)
			}
		}
		u.kc.PrependReactor("*", "*", c.react)
		var err error
		if teardown {
			err = u.ic.Teardown(t.Context(), u.target("adopt"))
		} else {
			_, err = u.ic.Apply(t.Context(), u.target("adopt"))
		}
		if err != nil {
			t.Fatal(err)
		}
		return c.calls
	}
	applyCalls, teardownCalls := count(false), count(true)
	if applyCalls < 8 || teardownCalls < 8 {
		t.Fatalf("apply %d calls, teardown %d: the count is wrong", applyCalls, teardownCalls)
	}
	trials := 0
	for _, phase := range []string{"apply", "teardown"} {
		n := map[string]int{"apply": applyCalls, "teardown": teardownCalls}[phase]
		for at := 1; at <= n; at++ {
			t.Run(fmt.Sprintf("%s-call-%d", phase, at), func(t *testing.T) {
				trials++
				u := newUnit(t, node("a", poolID), node("b", poolID))
				ctx := t.Context()
				if phase == "teardown" {
					if _, err := u.ic.Apply(ctx, u.target("adopt")); err != nil {
						t.Fatal(err)
					}
					u.joinAll("a")
				}
				c := &cutter{at: at}
				u.kc.PrependReactor("*", "*", c.react)
				var err error
				if phase == "teardown" {
					err = u.ic.Teardown(ctx, u.target("adopt"))
				} else {
					_, err = u.ic.Apply(ctx, u.target("adopt"))
				}
				if !errors.Is(err, errKilled) && !strings.Contains(fmt.Sprint(err), errKilled.Error()) {
					t.Fatalf("the cut call did not fail the run: %v", err)
				}
				// The restart: a new in-cluster half over the same state
				// file and cluster; the cut is healed.
				c.mu.Lock()
				c.at = 0
				c.mu.Unlock()
				u.ic = New(u.ic.o)
				if phase == "teardown" {
					if err := u.ic.Teardown(ctx, u.target("adopt")); err != nil {
						t.Fatal(err)
					}
					u.checkGone()
					return
				}
				n, err := u.ic.Apply(ctx, u.target("adopt"))
				if err != nil || n.Listed != 2 {
					t.Fatalf("%+v %v", n, err)
				}
				u.joinAll("a", "b")
				if n, err = u.ic.Apply(ctx, u.target("adopt")); err != nil || n.Joined != 2 {
					t.Fatalf("%+v %v", n, err)
				}
				if _, ok := u.secretToken(); ok {
					t.Fatal("the Secret is still there with all joined")
				}
				if err := u.ic.Teardown(ctx, u.target("adopt")); err != nil {
					t.Fatal(err)
				}
				u.checkGone()
			})
		}
	}
	t.Logf("%d crash trials: %d calls of an apply, %d of a teardown", trials, applyCalls, teardownCalls)
}

// checkGone: nothing labelled with the pool is left, nor the claim, and
// the access was revoked at least once.
func (u *unit) checkGone() {
	u.t.Helper()
	ctx := u.t.Context()
	if _, err := u.kc.CoreV1().ConfigMaps(ClaimNamespace).Get(ctx, ClaimName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		u.t.Errorf("claim: %v", err)
	}
	if _, err := u.kc.CoreV1().Namespaces().Get(ctx, Namespace, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		u.t.Errorf("Namespace: %v", err)
	}
	if _, err := u.kc.AppsV1().DaemonSets(Namespace).Get(ctx, DaemonSetName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		u.t.Errorf("DaemonSet: %v", err)
	}
	if _, ok := u.secretToken(); ok {
		u.t.Error("the join Secret is left")
	}
	if u.revoked == 0 {
		u.t.Error("the access was never revoked")
	}
	if j, _ := u.joins.Joined(ctx, poolID); len(j) != 0 {
		u.t.Errorf("joined nodes remembered: %v", j)
	}
}
