package incluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleet-agent/fleet-agent/internal/config"
	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/substrate"
	"github.com/fleet-agent/fleet-agent/internal/substrate/join"
	"github.com/fleet-agent/fleet-agent/internal/testutil/kubeplane"
)

// The test binary's one control plane, started by the first test that
// needs it (most tests here need no API server), stopped by TestMain.
var shared = kubeplane.Lazy{LogLines: 60}

func TestMain(m *testing.M) { os.Exit(shared.Run(m)) }

func kube(t *testing.T) *kubeplane.Plane { t.Helper(); return shared.Plane(t) }

// cluster is a managed cluster as the in-cluster half meets it: a real
// API server whose webhook token authentication accepts the credentials
// its "provider" minted, until the access is revoked.
type cluster struct {
	t       *testing.T
	p       *kubeplane.Plane
	mu      sync.Mutex
	tokens  []string // every credential minted
	revoked atomic.Bool
	// revokedAfterClaim: RevokeAccess came after the claim was gone.
	revokes, revokedAfterClaim atomic.Int32
}

func newCluster(t *testing.T, p *kubeplane.Plane) *cluster {
	c := &cluster{t: t, p: p}
	p.SetTokenReviewer(kubeplane.ReviewerFunc(func(token string, _ []string) (authnv1.UserInfo, []string, bool) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.revoked.Load() || !slices.Contains(c.tokens, token) {
			return authnv1.UserInfo{}, nil, false
		}
		return authnv1.UserInfo{Username: "fleet-agent", Groups: []string{"system:masters"}}, nil, true
	}))
	t.Cleanup(func() { p.SetTokenReviewer(nil) })
	return c
}

func (c *cluster) target(poolID, mode string) substrate.Target {
	return substrate.Target{PoolID: poolID, Pool: "gpu", Tenant: "acme", Mode: mode,
		Credentials: func(context.Context) (providers.Credential, error) {
			b := make([]byte, 24)
			_, _ = rand.Read(b)
			tok := "canary-" + hex.EncodeToString(b)
			c.mu.Lock()
			c.tokens = append(c.tokens, tok)
			c.mu.Unlock()
			return providers.Credential{Endpoint: c.p.URL(), CACert: c.p.CA(), Token: tok, ExpiresAt: time.Now().Add(providers.CredentialTTL)}, nil
		},
		RevokeAccess: func(ctx context.Context) error {
			c.revokes.Add(1)
			if _, err := c.p.Client().CoreV1().ConfigMaps(ClaimNamespace).Get(ctx, ClaimName, metav1.GetOptions{}); apierrors.IsNotFound(err) {
				c.revokedAfterClaim.Add(1)
			}
			c.revoked.Store(true)
			return nil
		}}
}

// daemons runs one `fleet-agent node` (join.RunDaemon) per node daemon Pod
// kwok reports running, with that Pod's Node name, its config directory
// written from the ConfigMap and its token file from the join Secret, as
// the kubelet would mount them.
type daemons struct {
	t       *testing.T
	p       *kubeplane.Plane
	dir     string
	running map[string]context.CancelFunc
	joined  map[string]bool
	mu      sync.Mutex
}

func (d *daemons) sync(ctx context.Context) {
	t := d.t
	kc := d.p.Client()
	pods, err := kc.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{LabelSelector: labelName + "=" + appName})
	if err != nil {
		t.Fatal(err)
	}
	cm, err := kc.CoreV1().ConfigMaps(Namespace).Get(ctx, ConfigMapName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return // torn down meanwhile (the namespace controller empties it)
	}
	if err != nil {
		t.Fatal(err)
	}
	sec, err := kc.CoreV1().Secrets(Namespace).Get(ctx, SecretName, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
			continue
		}
		node := p.Spec.NodeName
		root := filepath.Join(d.dir, node)
		cfgDir, tokFile := filepath.Join(root, "config"), filepath.Join(root, "join", secretKeyToken)
		if sec != nil {
			_ = os.MkdirAll(filepath.Dir(tokFile), 0o700)
			if err := os.WriteFile(tokFile, sec.Data[secretKeyToken], 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if d.running[node] != nil {
			continue
		}
		_ = os.MkdirAll(cfgDir, 0o700)
		for k, v := range cm.Data {
			if err := os.WriteFile(filepath.Join(cfgDir, k), []byte(v), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		dctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		d.running[node] = cancel
		t.Cleanup(cancel)
		go func() {
			_ = join.RunDaemon(dctx, join.DaemonOptions{ConfigDir: cfgDir, TokenFile: tokFile, StateDir: filepath.Join(root, "state"),
				NodeName: node, Log: zerolog.Nop(), MinBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
				Poll: 50 * time.Millisecond,
				OnStatus: func(s join.Status) {
					if s.Phase == join.PhaseJoined {
						d.mu.Lock()
						d.joined[node] = true
						d.mu.Unlock()
					}
				}})
		}()
	}
}

// TestOnARealControlPlane runs the in-cluster half against a real
// kube-apiserver with its controllers, scheduler and kwok: a claim of
// another refused with nothing made; the claim and the objects; the
// DaemonSet's Pods on exactly the labelled Nodes; two node daemons join
// through a real join listener, 2 of 2 and the Secret gone; a third Node, a
// new token, it joins; a GPU pod holds the teardown until it is deleted;
// then nothing of ours is left, the cluster's own objects are, and the
// access is revoked last. No credential or token is in the state file, the
// logs or an error.
func TestOnARealControlPlane(t *testing.T) {
	p := kube(t)
	ctx := t.Context()
	kc := p.Client()
	c := newCluster(t, p)
	u := p.Unique(t)
	pool := "pool_" + strings.ReplaceAll(u, "-", "")
	if len(pool) > 60 {
		pool = pool[:60]
	}

	statePath := filepath.Join(t.TempDir(), "state.db")
	st, err := state.Open(statePath, state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	joins := join.NewStore(st, join.StoreOptions{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis := join.NewListener(join.ListenerOptions{Store: joins, HeartbeatEvery: time.Second})
	lctx, stopLis := context.WithCancel(ctx)
	defer stopLis()
	go func() { _ = lis.ServeOn(lctx, ln, config.Join{Listen: ln.Addr().String(), Insecure: true}) }()
	var logs bytes.Buffer
	ic := New(Options{Daemon: &config.NodeDaemon{Image: "registry.example.com/fleet-agent:1.2.0", JoinURL: "http://" + ln.Addr().String() + "/"},
		Joins: joins, Tenant: "acme", Log: zerolog.New(&logs)})
	var errs []string
	apply := func() (substrate.Nodes, error) {
		n, err := ic.Apply(ctx, c.target(pool, "adopt"))
		if err != nil {
			errs = append(errs, err.Error())
		}
		return n, err
	}

	// Their own objects, which nothing may touch.
	theirs := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: u + "-theirs", Namespace: ClaimNamespace}}
	if _, err := kc.CoreV1().ConfigMaps(ClaimNamespace).Create(ctx, theirs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer kc.CoreV1().ConfigMaps(ClaimNamespace).Delete(context.Background(), theirs.Name, metav1.DeleteOptions{})

	// Another pool's claim: an error, nothing else made.
	other := claimObject("pool_other", "other", "acme")
	if _, err := kc.CoreV1().ConfigMaps(ClaimNamespace).Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := apply(); err == nil || !strings.Contains(err.Error(), `claimed by pool "other"`) {
		t.Fatalf("another's claim: %v", err)
	}
	if _, err := kc.CoreV1().Namespaces().Get(ctx, Namespace, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the Namespace was made under another's claim: %v", err)
	}
	if err := kc.CoreV1().ConfigMaps(ClaimNamespace).Delete(ctx, ClaimName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	label := map[string]string{providers.LabelSubstratePool: pool}
	a, b := u+"-a", u+"-b"
	p.AddNodeT(t, a, label)
	p.AddNodeT(t, b, label)
	p.AddNodeT(t, u+"-x", nil)

	d := &daemons{t: t, p: p, dir: t.TempDir(), running: map[string]context.CancelFunc{}, joined: map[string]bool{}}
	converge := func(what string, done func(substrate.Nodes) bool) substrate.Nodes {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			n, err := apply()
			if err == nil && done(n) {
				return n
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 60 s: last %+v, %v", what, n, err)
			}
			d.sync(ctx)
			time.Sleep(200 * time.Millisecond)
		}
	}
	started := time.Now()
	n := converge("listed", func(n substrate.Nodes) bool { return n.Listed == 2 })
	claim, err := kc.CoreV1().ConfigMaps(ClaimNamespace).Get(ctx, ClaimName, metav1.GetOptions{})
	if err != nil || claim.Labels[providers.LabelSubstratePool] != pool {
		t.Fatalf("claim %v %v", claim, err)
	}
	if _, err := kc.CoreV1().Secrets(Namespace).Get(ctx, SecretName, metav1.GetOptions{}); err != nil || n.Joined != 0 {
		t.Fatalf("no join Secret while 2 wait: %v, %+v", err, n)
	}
	// The DaemonSet's Pods run on exactly the labelled Nodes.
	podsOn := func() []string {
		pods, err := kc.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{LabelSelector: labelName + "=" + appName})
		if err != nil {
			t.Fatal(err)
		}
		var on []string
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				on = append(on, p.Spec.NodeName)
			}
		}
		slices.Sort(on)
		return on
	}
	n = converge("two joined", func(n substrate.Nodes) bool { return n.Joined == 2 })
	t.Logf("2 of 2 joined %s after the first apply", time.Since(started).Round(time.Millisecond))
	if on := podsOn(); !slices.Equal(on, []string{a, b}) {
		t.Fatalf("node daemon Pods on %v, want exactly %v", on, []string{a, b})
	}
	if _, err := kc.CoreV1().Secrets(Namespace).Get(ctx, SecretName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the join Secret is still there with 2 of 2 joined: %v", err)
	}
	var joinTokens []string

	// Resize to 3: a GPU Node, tainted as GPU pools are; a new token, it joins.
	cName := u + "-c"
	p.AddNodeT(t, cName, label, kubeplane.WithExtended(kubeplane.GPU, 8),
		kubeplane.WithTaints(corev1.Taint{Key: string(kubeplane.GPU), Value: "present", Effect: corev1.TaintEffectNoSchedule}))
	converge("a token for the third", func(n substrate.Nodes) bool {
		s, err := kc.CoreV1().Secrets(Namespace).Get(ctx, SecretName, metav1.GetOptions{})
		if err == nil {
			joinTokens = append(joinTokens, string(s.Data[secretKeyToken]))
		}
		return n.Listed == 3 && n.Joined == 2 && err == nil
	})
	converge("three joined", func(n substrate.Nodes) bool { return n.Joined == 3 })
	if on := podsOn(); !slices.Equal(on, []string{a, b, cName}) {
		t.Fatalf("node daemon Pods on %v", on)
	}

	// A tenant's GPU pod on the third Node holds the teardown.
	ns := p.Namespace(t)
	gpu := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: ns}, Spec: corev1.PodSpec{
		NodeName:    cName,
		Tolerations: []corev1.Toleration{{Key: string(kubeplane.GPU), Operator: corev1.TolerationOpExists}},
		Containers: []corev1.Container{{Name: "train", Image: "train", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{kubeplane.GPU: resource.MustParse("1")}}}}}}
	if _, err := kc.CoreV1().Pods(ns).Create(ctx, gpu, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = ic.Teardown(ctx, c.target(pool, "adopt"))
	if err == nil || !strings.Contains(err.Error(), "waiting for 1 GPU pods to end on 1 cordoned Nodes: "+cName+" (1)") {
		t.Fatalf("teardown with a GPU pod running: %v", err)
	}
	errs = append(errs, err.Error())
	for _, name := range []string{a, b, cName} {
		if n, _ := kc.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); !n.Spec.Unschedulable {
			t.Errorf("Node %s not cordoned", name)
		}
	}
	if x, _ := kc.CoreV1().Nodes().Get(ctx, u+"-x", metav1.GetOptions{}); x.Spec.Unschedulable {
		t.Error("a Node of no pool was cordoned")
	}
	if _, err := kc.AppsV1().DaemonSets(Namespace).Get(ctx, DaemonSetName, metav1.GetOptions{}); err != nil || c.revokes.Load() != 0 {
		t.Fatalf("removed before the GPU pod ended: %v, revoked %d", err, c.revokes.Load())
	}
	if err := kc.CoreV1().Pods(ns).Delete(ctx, "train", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := ic.Teardown(ctx, c.target(pool, "adopt"))
		if err == nil {
			break
		}
		errs = append(errs, err.Error())
		if time.Now().After(deadline) {
			t.Fatalf("teardown: %v", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if c.revokes.Load() != 1 || c.revokedAfterClaim.Load() != 1 {
		t.Fatalf("access revoked %d times, %d after the claim was gone", c.revokes.Load(), c.revokedAfterClaim.Load())
	}
	// Nothing of ours is left once the namespace controller finished.
	deadline = time.Now().Add(60 * time.Second)
	for {
		_, nsErr := kc.CoreV1().Namespaces().Get(ctx, Namespace, metav1.GetOptions{})
		_, claimErr := kc.CoreV1().ConfigMaps(ClaimNamespace).Get(ctx, ClaimName, metav1.GetOptions{})
		if apierrors.IsNotFound(nsErr) && apierrors.IsNotFound(claimErr) && len(podsOn()) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still there: namespace %v, claim %v, pods on %v", nsErr, claimErr, podsOn())
		}
		time.Sleep(250 * time.Millisecond)
	}
	if _, err := kc.CoreV1().ConfigMaps(ClaimNamespace).Get(ctx, theirs.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("their ConfigMap: %v", err)
	}
	for _, name := range []string{a, b, cName, u + "-x"} {
		if _, err := kc.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("Node %s: %v", name, err)
		}
	}
	if j, _ := joins.Joined(ctx, pool); len(j) != 0 {
		t.Errorf("joined nodes remembered after the teardown: %v", j)
	}

	// The canary: no credential, no join token in the state file, the logs
	// or an error.
	stopLis()
	if err := joins.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(statePath)
	if err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	secrets := append(slices.Clone(c.tokens), joinTokens...)
	c.mu.Unlock()
	if len(c.tokens) < 5 || len(joinTokens) == 0 {
		t.Fatalf("%d credentials, %d join tokens seen: the canary proves nothing", len(c.tokens), len(joinTokens))
	}
	places := map[string]string{"state file": string(raw), "logs": logs.String(), "errors": strings.Join(errs, "\n")}
	for where, text := range places {
		for _, s := range secrets {
			if s != "" && strings.Contains(text, s) {
				t.Errorf("the %s holds a secret (%.12s...)", where, s)
			}
		}
	}
}
