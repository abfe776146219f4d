package incluster

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/fleet-agent/fleet-agent/internal/apply"
	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/config"
	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/providers"
	fakeprov "github.com/fleet-agent/fleet-agent/internal/providers/fake"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/substrate"
	"github.com/fleet-agent/fleet-agent/internal/substrate/crashtest"
	"github.com/fleet-agent/fleet-agent/internal/substrate/join"
	"github.com/fleet-agent/fleet-agent/internal/testutil/kubeplane"
)

// TestWithTheReconciler runs the whole substrate in one process: the
// reconciler over the fake provider, whose clusters are one API server
// (client-go's fake clientset here; kube_test.go has the real one) where
// the fake registers its node pools' Nodes, and this in-cluster half. A
// merge of a pool with a substrate reaches ready with 2 of 2 joined; a
// resize to 3 gets a new token and 3 of 3; a GPU pod holds the prune's
// teardown (deleting, the message says where) until it is deleted; then
// the substrate is deleted, nothing of ours is left in the cluster, and
// no credential or join token reached the state file or the log.
func TestWithTheReconciler(t *testing.T) { wholeSubstrate(t, nil) }

// TestWithTheReconcilerOnARealControlPlane is TestWithTheReconciler with
// the fake's clusters backed by the real API server (providers.fake.kube):
// the fake registers its node pools' Nodes, kwok runs them and the node
// daemon's Pods, a `fleet-agent node` per Pod joins through a real join
// listener, and the API server checks every credential with the fake.
func TestWithTheReconcilerOnARealControlPlane(t *testing.T) { wholeSubstrate(t, kube(t)) }

func wholeSubstrate(t *testing.T, plane *kubeplane.Plane) {
	dir := t.TempDir()
	ctx := t.Context()
	clk := clock.NewFake(time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC))
	var (
		kc      kubernetes.Interface = fake.NewClientset()
		url, ca                      = "https://api.fake.test", []byte("ca")
		joinURL                      = "https://ops.example.com:9465/"
		pause   time.Duration
	)
	if plane != nil {
		kc, url, ca, pause = plane.Client(), plane.URL(), plane.CA(), 200*time.Millisecond
	}
	f, err := fakeprov.New(crashtest.FakeConfig(filepath.Join(dir, "fake.json")), crashtest.DefaultSecrets,
		fakeprov.WithClock(clk), fakeprov.WithKube(kc, url, ca))
	if err != nil {
		t.Fatal(err)
	}
	statePath := filepath.Join(dir, "fleet.db")
	st, err := state.Open(statePath, state.Options{Now: clk.Now, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var logs bytes.Buffer
	joins := join.NewStore(st, join.StoreOptions{Clock: clk})
	var daemonPods *daemons
	if plane != nil {
		plane.SetTokenReviewer(kubeplane.ReviewerFunc(func(token string, _ []string) (authnv1.UserInfo, []string, bool) {
			user, ok := f.Review(token)
			return authnv1.UserInfo{Username: user, Groups: []string{"system:masters"}}, nil, ok
		}))
		t.Cleanup(func() { plane.SetTokenReviewer(nil) })
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lis := join.NewListener(join.ListenerOptions{Store: joins, HeartbeatEvery: time.Second})
		go func() { _ = lis.ServeOn(ctx, ln, config.Join{Listen: ln.Addr().String(), Insecure: true}) }()
		joinURL = "http://" + ln.Addr().String() + "/"
		daemonPods = &daemons{t: t, p: plane, dir: t.TempDir(), running: map[string]context.CancelFunc{}, joined: map[string]bool{}}
	}
	var creds []string
	ic := New(Options{Daemon: &config.NodeDaemon{Image: "registry.example.com/fleet-agent:1.2.0", JoinURL: joinURL},
		Joins: joins, Tenant: crashtest.Tenant, Clock: clk, Log: zerolog.New(&logs),
		NewClient: func(c providers.Credential) (kubernetes.Interface, error) {
			creds = append(creds, c.Token)
			if plane != nil {
				// The API server checks the token with the fake itself.
				return NewClient(c)
			}
			// The API server's webhook token authentication, asking the fake.
			if _, ok := f.Review(c.Token); !ok || c.Endpoint != url {
				return nil, apierrors.NewUnauthorized("the API server refused the token")
			}
			return kc, nil
		}})
	rec := substrate.New(substrate.Options{Store: st, Providers: map[string]substrate.Provider{"fake": f}, Clock: clk,
		Log: zerolog.New(&logs), InCluster: ic})
	applyStep := func(s crashtest.Step) {
		d, errs := fleet.Validate("test", []byte(crashtest.Document(s)))
		if errs != nil {
			t.Fatal(errs.Text())
		}
		if _, err := apply.Apply(ctx, st, d, apply.Options{Prune: s.Prune, Now: clk.Now}); err != nil {
			t.Fatal(err)
		}
	}
	status := func() substrate.Status {
		list, err := substrate.Statuses(st)
		if err != nil || len(list) != 1 {
			t.Fatalf("%v %v", list, err)
		}
		return list[0]
	}
	var joinTokens []string
	// The node daemons: on the real plane one `fleet-agent node` per Pod
	// kwok runs; over the fake clientset every listed Node joins with the
	// Secret's token.
	joinWaiting := func() {
		s, err := kc.CoreV1().Secrets(Namespace).Get(ctx, SecretName, metav1.GetOptions{})
		if err == nil {
			joinTokens = append(joinTokens, string(s.Data[secretKeyToken]))
		}
		if daemonPods != nil {
			daemonPods.sync(ctx)
			return
		}
		if err != nil {
			return
		}
		nodes, _ := kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		for _, n := range nodes.Items {
			_, _ = joins.Join(ctx, n.Labels[providers.LabelSubstratePool], n.Name, string(s.Data[secretKeyToken]))
		}
	}
	run := func(what string, done func(substrate.Status) bool) (int, time.Duration) {
		t.Helper()
		start := clk.Now()
		for i := range 200 {
			if err := rec.ReconcileOnce(ctx); err != nil {
				t.Fatal(err)
			}
			if s := status(); done(s) {
				return i + 1, clk.Now().Sub(start)
			}
			joinWaiting()
			clk.Advance(10 * time.Second)
			time.Sleep(pause) // the controllers and kwok run on the wall clock
		}
		t.Fatalf("%s: not within 200 passes: %+v", what, status())
		return 0, 0
	}
	pool := crashtest.Pool{Name: "gpu", Flavors: []crashtest.Flavor{{Name: "h100", MachineType: "fake-h100x8", Nodes: 2}}}
	merged := time.Now()
	applyStep(crashtest.Step{Pools: []crashtest.Pool{pool}})
	passes, took := run("ready 2 of 2", func(s substrate.Status) bool {
		return s.State == "ready" && s.Nodes == substrate.StatusNodes{Listed: 2, Joined: 2}
	})
	t.Logf("merge to ready with 2 of 2 joined: %d passes, %s on the reconciler's clock (10 s between passes), %s on the wall clock (fake steps: %+v)",
		passes, took, time.Since(merged).Round(time.Millisecond), crashtest.FakeConfig("").Steps)
	if _, err := kc.CoreV1().Secrets(Namespace).Get(ctx, SecretName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the Secret with 2 of 2 joined: %v", err)
	}
	ds, err := kc.AppsV1().DaemonSets(Namespace).Get(ctx, DaemonSetName, metav1.GetOptions{})
	if err != nil || ds.Spec.Template.Spec.NodeSelector[providers.LabelSubstratePool] != pool.ID() {
		t.Fatalf("DaemonSet %v", err)
	}

	pool.Flavors[0].Nodes = 3
	applyStep(crashtest.Step{Pools: []crashtest.Pool{pool}})
	before := len(slices.Compact(slices.Clone(joinTokens)))
	run("ready 3 of 3", func(s substrate.Status) bool {
		return s.State == "ready" && s.Nodes == substrate.StatusNodes{Listed: 3, Joined: 3}
	})
	if len(slices.Compact(slices.Clone(joinTokens))) <= before {
		t.Fatal("no new token for the third Node")
	}

	// A tenant's GPU pod holds the teardown.
	nodes, _ := kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: nodeSelector(pool.ID())})
	tenantNS := "tenant"
	if plane != nil {
		tenantNS = plane.Namespace(t)
	}
	gpu := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: tenantNS}, Spec: corev1.PodSpec{NodeName: nodes.Items[0].Name,
		Containers: []corev1.Container{{Name: "c", Image: "train", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	if _, err := kc.CoreV1().Pods(tenantNS).Create(ctx, gpu, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pool.Left = true
	applyStep(crashtest.Step{Pools: []crashtest.Pool{pool}, Prune: true})
	run("held", func(s substrate.Status) bool {
		return s.State == "deleting" && strings.Contains(s.Message, "waiting for 1 GPU pods to end on 1 cordoned Nodes: "+nodes.Items[0].Name)
	})
	if err := kc.CoreV1().Pods(tenantNS).Delete(ctx, "train", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	passes, took = run("deleted", func(s substrate.Status) bool { return s.State == "deleted" && s.Converged })
	if took < 90*time.Second {
		t.Errorf("the teardown was tried again after %s, not two minutes", took)
	}
	t.Logf("teardown after the GPU pod ended: %d passes, %s", passes, took)
	if plane != nil {
		// The namespace controller empties and removes the Namespace.
		deadline := time.Now().Add(60 * time.Second)
		for {
			_, err := kc.CoreV1().Namespaces().Get(ctx, Namespace, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the Namespace %s is still there: %v", Namespace, err)
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	for _, check := range []error{
		func() error {
			_, err := kc.CoreV1().ConfigMaps(ClaimNamespace).Get(ctx, ClaimName, metav1.GetOptions{})
			return err
		}(),
		func() error { _, err := kc.CoreV1().Namespaces().Get(ctx, Namespace, metav1.GetOptions{}); return err }(),
		func() error {
			_, err := kc.AppsV1().DaemonSets(Namespace).Get(ctx, DaemonSetName, metav1.GetOptions{})
			return err
		}(),
	} {
		if !apierrors.IsNotFound(check) {
			t.Errorf("left in the cluster: %v", check)
		}
	}
	if left, _ := kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: nodeSelector(pool.ID())}); len(left.Items) != 0 {
		t.Errorf("%d Nodes of the deleted node pool are left", len(left.Items))
	}

	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(statePath)
	if err != nil {
		t.Fatal(err)
	}
	if len(creds) == 0 || len(joinTokens) == 0 {
		t.Fatal("nothing minted: the canary proves nothing")
	}
	for _, s := range append(creds, joinTokens...) {
		if strings.Contains(string(raw), s) || strings.Contains(logs.String(), s) {
			t.Fatalf("a secret (%.12s...) is in the state file or the log", s)
		}
	}
}

// TestAdoptedCutMidApplyThenPruned: on an adopted cluster the in-cluster
// half's first apply is cut off after the claim, Namespace and ConfigMap
// were made (its DaemonSet apply fails, as a kill there would leave it),
// and the pool is pruned before it ever succeeded: the teardown still
// removes what it made, the claim last, and revokes the access.
func TestAdoptedCutMidApplyThenPruned(t *testing.T) {
	dir := t.TempDir()
	ctx := t.Context()
	clk := clock.NewFake(time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC))
	kc := fake.NewClientset()
	kc.PrependReactor("patch", "daemonsets", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, errKilled })
	f, err := fakeprov.New(crashtest.FakeConfig(filepath.Join(dir, "fake.json")), crashtest.DefaultSecrets,
		fakeprov.WithClock(clk), fakeprov.WithKube(kc, "https://api.fake.test", []byte("ca")))
	if err != nil {
		t.Fatal(err)
	}
	st, err := state.Open(filepath.Join(dir, "fleet.db"), state.Options{Now: clk.Now, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ic := New(Options{Daemon: &config.NodeDaemon{Image: "registry.example.com/fleet-agent:1.2.0", JoinURL: "https://ops.example.com:9465/"},
		Joins: join.NewStore(st, join.StoreOptions{Clock: clk}), Tenant: crashtest.Tenant, Clock: clk, Log: zerolog.Nop(),
		NewClient: func(providers.Credential) (kubernetes.Interface, error) { return kc, nil }})
	rec := substrate.New(substrate.Options{Store: st, Providers: map[string]substrate.Provider{"fake": f}, Clock: clk, Log: zerolog.Nop(), InCluster: ic})
	pool := crashtest.Pool{Name: "own", Adopt: true, Flavors: []crashtest.Flavor{{Name: "h100", MachineType: "fake-h100x8", Nodes: 1}}}
	for _, step := range []crashtest.Step{{Pools: []crashtest.Pool{pool}}, {Pools: []crashtest.Pool{{Name: "own", Adopt: true, Left: true}}, Prune: true}} {
		d, errs := fleet.Validate("test", []byte(crashtest.Document(step)))
		if errs != nil {
			t.Fatal(errs.Text())
		}
		if _, err := apply.Apply(ctx, st, d, apply.Options{Prune: step.Prune, Now: clk.Now}); err != nil {
			t.Fatal(err)
		}
		for i := 0; ; i++ {
			if err := rec.ReconcileOnce(ctx); err != nil {
				t.Fatal(err)
			}
			list, _ := substrate.Statuses(st)
			_, claimErr := kc.CoreV1().ConfigMaps(ClaimNamespace).Get(ctx, ClaimName, metav1.GetOptions{})
			if !step.Prune && claimErr == nil && list[0].State == "error" || step.Prune && list[0].State == "deleted" {
				break
			}
			if i == 100 {
				t.Fatalf("%+v, claim %v", list, claimErr)
			}
			clk.Advance(10 * time.Second)
		}
	}
	for what, err := range map[string]error{
		"claim": func() error {
			_, err := kc.CoreV1().ConfigMaps(ClaimNamespace).Get(ctx, ClaimName, metav1.GetOptions{})
			return err
		}(),
		"Namespace": func() error { _, err := kc.CoreV1().Namespaces().Get(ctx, Namespace, metav1.GetOptions{}); return err }(),
		"ConfigMap": func() error {
			_, err := kc.CoreV1().ConfigMaps(Namespace).Get(ctx, ConfigMapName, metav1.GetOptions{})
			return err
		}(),
	} {
		if !apierrors.IsNotFound(err) {
			t.Errorf("the %s is left in the adopted cluster: %v", what, err)
		}
	}
	for _, c := range f.Snapshot().Clusters {
		if f.HasAccess(c.ID) {
			t.Errorf("the access to %s is not revoked", c.Name)
		}
	}
}
