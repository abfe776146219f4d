package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/providers/fake"
	"github.com/fleet-agent/fleet-agent/internal/substrate/crashtest"
	"github.com/fleet-agent/fleet-agent/internal/substrate/incluster"
	"github.com/fleet-agent/fleet-agent/internal/testutil/kubeplane"
)

// The in-cluster steps of the crash campaign with a real process: the fake
// provider's clusters are one real kube-apiserver (kubeplane, which checks
// the fake's credentials through its webhook against the fake's own state
// file), `fleet-agent run` applies the node daemon into it and tears it
// down, and is SIGKILLed while it does so: a random moment after the claim
// appears (the in-cluster apply has begun, nothing else is in the cluster
// yet) or after the first Node is cordoned (the in-cluster teardown has
// begun). Started again over the same state file, fake state file and
// cluster, it must converge: the substrate ready with exactly one claim and
// one DaemonSet, then, after the prune, nothing of ours in the cluster and
// nothing at the fake. The trials share the plane, so they run one at a
// time and each checks that it leaves the cluster as it found it.

// kubePlane is the test binary's control plane, started by the first test
// that needs it (TestMain stops it).
var kubePlane = kubeplane.Lazy{LogLines: 60}

// inClusterTrials is how many in-cluster trials run;
// FLEET_AGENT_INCLUSTER_TRIALS and FLEET_AGENT_CHILD_SEED change the run.
func inClusterTrials() (int, uint64) {
	n := 10
	if v, err := strconv.Atoi(os.Getenv("FLEET_AGENT_INCLUSTER_TRIALS")); err == nil && v > 0 {
		n = v
	}
	_, seed := campaignTrials()
	return n, seed
}

// inClusterWorld is a trial world whose fake clusters are the plane and
// whose agent applies the node daemon.
func inClusterWorld(t *testing.T, plane *kubeplane.Plane, ca, token string) *trialWorld {
	t.Helper()
	w := newTrialWorld(t)
	b, err := os.ReadFile(w.config)
	if err != nil {
		t.Fatal(err)
	}
	// No registry serves fleet-agent:test: resolveDigest is off so that no
	// restart of the campaign asks Docker Hub for it.
	cfg := strings.Replace(string(b), "substrate:\n  every: 1s\n",
		"substrate:\n  every: 1s\n  nodeDaemon:\n    image: fleet-agent:test\n    joinURL: http://127.0.0.1:9/\n    resolveDigest: false\n", 1)
	// providers.fake is the file's last block: its keys are indented four.
	cfg += fmt.Sprintf("    kube:\n      url: %s\n      caFile: %s\n      tokenFile: %s\n", plane.URL(), ca, token)
	if err := os.WriteFile(w.config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	plane.SetTokenReviewer(kubeplane.ReviewerFunc(func(tok string, _ []string) (authnv1.UserInfo, []string, bool) {
		user, ok, err := fake.ReviewFile(w.fake, tok, time.Now())
		if err != nil || !ok {
			return authnv1.UserInfo{}, nil, false
		}
		return authnv1.UserInfo{Username: user, Groups: []string{"system:masters"}}, nil, true
	}))
	t.Cleanup(func() { plane.SetTokenReviewer(nil) })
	return w
}

// killWhen SIGKILLs the child delay after cond first holds, unless ctx
// ends first; it reports whether it killed.
func killWhen(ctx context.Context, c *child, delay time.Duration, cond func(context.Context) bool) <-chan bool {
	out := make(chan bool, 1)
	go func() {
		for ctx.Err() == nil && !cond(ctx) {
			time.Sleep(10 * time.Millisecond)
		}
		select {
		case <-ctx.Done():
			out <- false
			return
		case <-time.After(delay):
		}
		if ctx.Err() != nil {
			out <- false
			return
		}
		_ = c.cmd.Process.Signal(syscall.SIGKILL)
		close(c.killed)
		out <- true
	}()
	return out
}

// ours lists what of ours is in the cluster: the claim, the Namespace, the
// Nodes carrying the pool's label.
func ours(ctx context.Context, kc kubernetes.Interface, poolID string) ([]string, error) {
	var found []string
	if _, err := kc.CoreV1().ConfigMaps(incluster.ClaimNamespace).Get(ctx, incluster.ClaimName, metav1.GetOptions{}); err == nil {
		found = append(found, "the claim")
	} else if !apierrors.IsNotFound(err) {
		return nil, err
	}
	if _, err := kc.CoreV1().Namespaces().Get(ctx, incluster.Namespace, metav1.GetOptions{}); err == nil {
		found = append(found, "Namespace "+incluster.Namespace)
	} else if !apierrors.IsNotFound(err) {
		return nil, err
	}
	nodes, err := kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: providers.LabelSubstratePool + "=" + poolID})
	if err != nil {
		return nil, err
	}
	for _, n := range nodes.Items {
		found = append(found, "Node "+n.Name)
	}
	return found, nil
}

func TestCrashCampaignInClusterChildProcess(t *testing.T) {
	plane := kubePlane.Plane(t)
	kc := plane.Client()
	dir := t.TempDir()
	ca := writeFile(t, dir, "ca.crt", string(plane.CA()))
	token := writeFile(t, dir, "admin.token", plane.Config().BearerToken+"\n")
	trials, seed := inClusterTrials()
	killed := map[string]int{}
	late, failed := 0, 0
	t.Cleanup(func() {
		t.Logf("in-cluster child-process campaign: seed %d, %d trials, killed during the in-cluster apply %d, during the in-cluster teardown %d, after the step had converged %d, %d failed",
			seed, trials, killed["apply"], killed["teardown"], late, failed)
	})
	pool := crashtest.Pool{Name: "gpu", Flavors: []crashtest.Flavor{{Name: "h100", MachineType: "fake-h100x8", Nodes: 2}}}
	create := crashtest.Step{Pools: []crashtest.Pool{pool}}
	gone := pool
	gone.Left = true
	teardown := crashtest.Step{Pools: []crashtest.Pool{gone}, Prune: true}
	for i := range trials {
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		phase := []string{"apply", "teardown"}[i%2]
		// The apply's calls take tens of milliseconds after the claim, the
		// teardown's hundreds (it waits for the cordon to be seen).
		delay := time.Duration(rng.IntN(map[string]int{"apply": 40, "teardown": 300}[phase])) * time.Millisecond
		ok := t.Run(fmt.Sprintf("%02d-%s-after-%dms", i, phase, delay.Milliseconds()), func(t *testing.T) {
			defer func() {
				if t.Failed() {
					failed++
					t.Logf("FAILED: rerun with FLEET_AGENT_CHILD_SEED=%d FLEET_AGENT_INCLUSTER_TRIALS=%d (trial %d)", seed, trials, i)
				}
			}()
			w := inClusterWorld(t, plane, ca, token)
			w.want = "ready"
			c := w.start()
			ctx, stop := context.WithCancel(t.Context())
			var did <-chan bool
			if phase == "apply" {
				did = killWhen(ctx, c, delay, func(ctx context.Context) bool {
					_, err := kc.CoreV1().ConfigMaps(incluster.ClaimNamespace).Get(ctx, incluster.ClaimName, metav1.GetOptions{})
					return err == nil
				})
			}
			c, _ = w.waitConverged(c, create, w.push(create, 0), "create")
			stop()
			if phase == "apply" {
				if <-did {
					killed["apply"]++
				} else {
					late++
				}
			}
			// Ready: the claim is the pool's, the DaemonSet is there, once.
			claim, err := kc.CoreV1().ConfigMaps(incluster.ClaimNamespace).Get(t.Context(), incluster.ClaimName, metav1.GetOptions{})
			if err != nil || claim.Labels[providers.LabelSubstratePool] != pool.ID() {
				t.Fatalf("the claim of a ready substrate: %v %v", claim.GetLabels(), err)
			}
			dss, err := kc.AppsV1().DaemonSets(incluster.Namespace).List(t.Context(), metav1.ListOptions{})
			if err != nil || len(dss.Items) != 1 || dss.Items[0].Name != incluster.DaemonSetName {
				t.Fatalf("the DaemonSets of a ready substrate: %d %v", len(dss.Items), err)
			}

			ctx, stop = context.WithCancel(t.Context())
			if phase == "teardown" {
				did = killWhen(ctx, c, delay, func(ctx context.Context) bool {
					nodes, err := kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: providers.LabelSubstratePool + "=" + pool.ID()})
					if err != nil {
						return false
					}
					for _, n := range nodes.Items {
						if n.Spec.Unschedulable {
							return true
						}
					}
					return false
				})
			}
			w.want = "deleted"
			c, _ = w.waitConverged(c, teardown, w.push(teardown, 1), "teardown")
			stop()
			if phase == "teardown" {
				if <-did {
					killed["teardown"]++
				} else {
					late++
				}
			}
			c.stop(t)
			if f := w.check(teardown); !f.OK() {
				t.Fatalf("the fake after the teardown: %+v\n%s", f, c.logs())
			}
			// Nothing of ours is left; the Namespace may take the namespace
			// controller a moment to finalize.
			var left []string
			deadline := time.Now().Add(60 * time.Second)
			for {
				left, err = ours(t.Context(), kc, pool.ID())
				if err == nil && len(left) == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("left in the cluster after the teardown: %v %v", left, err)
				}
				time.Sleep(200 * time.Millisecond)
			}
		})
		if !ok {
			break // the trials share the cluster: a failed one may have left it dirty
		}
	}
	if _, set := os.LookupEnv("FLEET_AGENT_INCLUSTER_TRIALS"); !set && failed == 0 && killed["apply"]+killed["teardown"] < trials/2 {
		t.Errorf("only %d of %d trials killed the agent during an in-cluster step (seed %d)", killed["apply"]+killed["teardown"], trials, seed)
	}
}
