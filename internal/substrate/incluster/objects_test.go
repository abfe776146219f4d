package incluster

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/config"
	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/substrate"
	"github.com/fleet-agent/fleet-agent/internal/substrate/join"
)

// These tests run the object builders and the decisions over client-go's
// fake clientset (which does server-side apply); the real API server, the
// controllers and kwok are in kube_test.go.

const poolID = "pool_unit0000000000000000001"

type unit struct {
	t       *testing.T
	kc      *fake.Clientset
	clock   *clock.Fake
	joins   *join.Store
	ic      *InCluster
	minted  int
	revoked int
}

func newUnit(t *testing.T, objs ...metav1.Object) *unit {
	t.Helper()
	st, err := state.Open(filepath.Join(t.TempDir(), "state.db"), state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	u := &unit{t: t, kc: fake.NewClientset(), clock: clock.NewFake(time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC))}
	for _, o := range objs {
		var err error
		switch o := o.(type) {
		case *corev1.ConfigMap:
			_, err = u.kc.CoreV1().ConfigMaps(o.Namespace).Create(t.Context(), o, metav1.CreateOptions{})
		case *corev1.Node:
			_, err = u.kc.CoreV1().Nodes().Create(t.Context(), o, metav1.CreateOptions{})
		case *corev1.Pod:
			_, err = u.kc.CoreV1().Pods(o.Namespace).Create(t.Context(), o, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	u.joins = join.NewStore(st, join.StoreOptions{Clock: u.clock})
	u.ic = New(Options{Daemon: &config.NodeDaemon{Image: "registry.example.com/fleet-agent:1.2.0", JoinURL: "https://ops.example.com:9465/",
		CAPins: []string{"sha256/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="}, RuntimeClass: "nvidia"},
		Joins: u.joins, Tenant: "acme", Clock: u.clock, Log: zerolog.Nop(),
		NewClient: func(c providers.Credential) (kubernetes.Interface, error) {
			if c.Token != "minted" {
				return nil, errors.New("not the minted credential")
			}
			return u.kc, nil
		}})
	return u
}

// unitOwner is who the unit's target's objects belong to.
var unitOwner = providers.Owner{Installation: "0a0a0000000000000000000000000001", PoolID: poolID}

func (u *unit) target(mode string) substrate.Target {
	return substrate.Target{PoolID: poolID, Pool: "gpu.a", Tenant: "acme", Mode: mode, Owner: unitOwner,
		Credentials: func(context.Context) (providers.Credential, error) {
			u.minted++
			return providers.Credential{Endpoint: "https://unit", Token: "minted"}, nil
		},
		RevokeAccess: func(context.Context) error { u.revoked++; return nil }}
}

func node(name string, pool string) *corev1.Node {
	n := &corev1.Node{}
	n.Name = name
	if pool != "" {
		n.Labels = map[string]string{providers.LabelSubstratePool: pool}
	}
	return n
}

func gpuPod(name, nodeName string, daemonSet bool) *corev1.Pod {
	p := &corev1.Pod{}
	p.Name, p.Namespace, p.Spec.NodeName = name, "tenant", nodeName
	p.Spec.Containers = []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
		Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}}}
	p.Status.Phase = corev1.PodRunning
	if daemonSet {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "dcgm", UID: "u"}}
	}
	return p
}

func (u *unit) secretToken() (string, bool) {
	s, err := u.kc.CoreV1().Secrets(Namespace).Get(u.t.Context(), SecretName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", false
	}
	if err != nil {
		u.t.Fatal(err)
	}
	return string(s.Data[secretKeyToken]), true
}

// TestDaemonSetShape: the DaemonSet the apply leaves selects exactly the
// pool's label, tolerates GPU taints, takes NODE_NAME from spec.nodeName,
// mounts the join Secret optional where the daemon reads it, and every
// object carries the labels.
func TestDaemonSetShape(t *testing.T) {
	u := newUnit(t)
	if _, err := u.ic.Apply(t.Context(), u.target("create")); err != nil {
		t.Fatal(err)
	}
	ds, err := u.kc.AppsV1().DaemonSets(Namespace).Get(t.Context(), DaemonSetName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	spec := ds.Spec.Template.Spec
	if len(spec.NodeSelector) != 1 || spec.NodeSelector[providers.LabelSubstratePool] != poolID {
		t.Errorf("nodeSelector %v", spec.NodeSelector)
	}
	var tol []string
	for _, x := range spec.Tolerations {
		tol = append(tol, x.Key+"/"+string(x.Operator))
	}
	if strings.Join(tol, ",") != "nvidia.com/gpu/Exists,amd.com/gpu/Exists" {
		t.Errorf("tolerations %v", tol)
	}
	c := spec.Containers[0]
	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			env[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	if c.Image != "registry.example.com/fleet-agent:1.2.0" || len(c.Env) != 2 || env[join.NodeNameEnv] != "spec.nodeName" || env[join.PodUIDEnv] != "metadata.uid" {
		t.Errorf("container %+v", c)
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	if mounts["config"] != join.DefaultConfigDir || mounts["join"]+"/"+secretKeyToken != join.DefaultTokenFile || mounts["state"] != join.DefaultStateDir {
		t.Errorf("mounts %v", mounts)
	}
	for _, v := range spec.Volumes {
		if v.Name == "join" && (v.Secret == nil || v.Secret.SecretName != SecretName || v.Secret.Optional == nil || !*v.Secret.Optional) {
			t.Errorf("the join volume %+v", v)
		}
	}
	if spec.RuntimeClassName == nil || *spec.RuntimeClassName != "nvidia" {
		t.Errorf("runtimeClassName %v", spec.RuntimeClassName)
	}
	cm, err := u.kc.CoreV1().ConfigMaps(Namespace).Get(t.Context(), ConfigMapName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cm.Data[join.KeyPoolID] != poolID || cm.Data[join.KeyJoinURL] != "https://ops.example.com:9465/" || !strings.HasPrefix(cm.Data[join.KeyCAPins], `["sha256/`) {
		t.Errorf("config %v", cm.Data)
	}
	ns, err := u.kc.CoreV1().Namespaces().Get(t.Context(), Namespace, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	claim, err := u.kc.CoreV1().ConfigMaps(ClaimNamespace).Get(t.Context(), ClaimName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []metav1.ObjectMeta{ds.ObjectMeta, cm.ObjectMeta, ns.ObjectMeta, claim.ObjectMeta, ds.Spec.Template.ObjectMeta} {
		if m.Labels[providers.LabelSubstratePool] != poolID || m.Labels[LabelManagedBy] != ManagedBy {
			t.Errorf("%s: labels %v", m.Name, m.Labels)
		}
	}
	// What the agent puts in the cluster names the installation too (the
	// pods are the DaemonSet's: its selector stays the pool label alone,
	// since a selector never changes in place).
	for _, m := range []metav1.ObjectMeta{ds.ObjectMeta, cm.ObjectMeta, ns.ObjectMeta, claim.ObjectMeta} {
		if m.Labels[providers.LabelInstallation] != unitOwner.Installation {
			t.Errorf("%s: labels %v, want %s=%s", m.Name, m.Labels, providers.LabelInstallation, unitOwner.Installation)
		}
	}
	for _, f := range ds.ManagedFields {
		if f.Manager != FieldManager {
			t.Errorf("field manager %q", f.Manager)
		}
	}
	// A dropped option is pruned by the next apply.
	u.ic.o.Daemon.RuntimeClass = ""
	if _, err := u.ic.Apply(t.Context(), u.target("create")); err != nil {
		t.Fatal(err)
	}
	ds, _ = u.kc.AppsV1().DaemonSets(Namespace).Get(t.Context(), DaemonSetName, metav1.GetOptions{})
	if ds.Spec.Template.Spec.RuntimeClassName != nil {
		t.Errorf("runtimeClassName kept after it was dropped: %v", *ds.Spec.Template.Spec.RuntimeClassName)
	}
}

// TestClaimRefused: a claim held by another pool or another deployment is
// an error and nothing else is put in the cluster; a claim of ours is
// taken again.
func TestClaimRefused(t *testing.T) {
	claim := func(pool, tenant string) *corev1.ConfigMap {
		cm := claimObject(pool, "other", tenant)
		cm.Labels[providers.LabelInstallation] = unitOwner.Installation
		return cm
	}
	withInstallation := func(cm *corev1.ConfigMap, inst string) *corev1.ConfigMap {
		if inst == "" {
			delete(cm.Labels, providers.LabelInstallation)
		} else {
			cm.Labels[providers.LabelInstallation] = inst
		}
		return cm
	}
	for _, tc := range []struct {
		name  string
		claim *corev1.ConfigMap
		want  string
	}{
		{"another pool", claim("pool_other", "acme"), `claimed by pool "other" (id pool_other) of deployment "acme"`},
		{"another deployment", claim(poolID, "globex"), `of deployment "globex"`},
		{"unlabelled", func() *corev1.ConfigMap { c := claim(poolID, "acme"); c.Labels = nil; return c }(), "id none"},
		{"another installation", withInstallation(claim(poolID, "acme"), "0ther000000000000000000000000000"), `of installation 0ther000000000000000000000000000, another fleet-agent state file`},
		{"no installation", withInstallation(claim(poolID, "acme"), ""), "carries no " + providers.LabelInstallation},
		{"ours", claim(poolID, "acme"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := newUnit(t, tc.claim)
			_, err := u.ic.Apply(t.Context(), u.target("adopt"))
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "INVALID_STATE: ") {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
			if _, err := u.kc.CoreV1().Namespaces().Get(t.Context(), Namespace, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("the Namespace was made despite the claim: %v", err)
			}
			// Its teardown removes nothing and revokes nothing.
			if err := u.ic.Teardown(t.Context(), u.target("adopt")); err != nil {
				t.Fatal(err)
			}
			if _, err := u.kc.CoreV1().ConfigMaps(ClaimNamespace).Get(t.Context(), ClaimName, metav1.GetOptions{}); err != nil || u.revoked != 0 {
				t.Errorf("another's claim: %v, revoked %d", err, u.revoked)
			}
		})
	}
}

// TestJoinTokenLifecycle: a token in the Secret for exactly the waiting
// Nodes; joins counted; all joined: the token revoked and the Secret gone;
// a new Node: a new token; a Secret left with an older token is replaced;
// a joined node whose Node is gone and which is silent is retired.
func TestJoinTokenLifecycle(t *testing.T) {
	u := newUnit(t, node("a", poolID), node("b", poolID), node("elsewhere", "pool_other"), node("plain", ""))
	ctx := t.Context()
	n, err := u.ic.Apply(ctx, u.target("create"))
	if err != nil {
		t.Fatal(err)
	}
	if n.Listed != 2 || n.Joined != 0 || n.WaitingSince.IsZero() || n.Message != "" {
		t.Fatalf("%+v", n)
	}
	tok, ok := u.secretToken()
	if !ok || tok == "" {
		t.Fatal("no join Secret")
	}
	if _, err := u.joins.Join(ctx, poolID, "elsewhere", tok); err == nil {
		t.Fatal("a Node of another pool joined")
	}
	keyA, err := u.joins.Join(ctx, poolID, "a", tok)
	if err != nil {
		t.Fatal(err)
	}
	u.clock.Advance(time.Minute)
	n, err = u.ic.Apply(ctx, u.target("create"))
	if err != nil || n.Listed != 2 || n.Joined != 1 {
		t.Fatalf("%+v %v", n, err)
	}
	if again, _ := u.secretToken(); again != tok {
		t.Fatal("the token changed while the same Node waits")
	}
	// 15 minutes without a join: the message names the DaemonSet (a's
	// daemon beats meanwhile, or it would be released).
	u.clock.Advance(WaitingTooLong)
	if err := u.joins.Heartbeat(ctx, poolID, "a", keyA, ""); err != nil {
		t.Fatal(err)
	}
	if n, _ = u.ic.Apply(ctx, u.target("create")); !strings.Contains(n.Message, "1 of 2 Nodes have not joined") || !strings.Contains(n.Message, "DaemonSet fleet-node/fleet-node") {
		t.Fatalf("message %q", n.Message)
	}
	// A crash between minting and writing: the Secret holds an older token.
	if _, _, err := u.joins.Token(ctx, poolID, []string{"b"}, true); err != nil {
		t.Fatal(err)
	}
	if _, err = u.ic.Apply(ctx, u.target("create")); err != nil {
		t.Fatal(err)
	}
	fresh, _ := u.secretToken()
	if fresh == tok {
		t.Fatal("the Secret kept a token that is no longer current")
	}
	if _, err := u.joins.Join(ctx, poolID, "b", fresh); err != nil {
		t.Fatal(err)
	}
	if n, _ = u.ic.Apply(ctx, u.target("create")); n.Joined != 2 || !n.WaitingSince.IsZero() {
		t.Fatalf("%+v", n)
	}
	if _, ok := u.secretToken(); ok {
		t.Fatal("the Secret is still there once all joined")
	}
	if _, _, ok, _ := u.joins.Current(ctx, poolID); ok {
		t.Fatal("the token is not revoked once all joined")
	}
	// A third Node: a new token for it alone.
	if _, err := u.kc.CoreV1().Nodes().Create(ctx, node("c", poolID), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if n, _ = u.ic.Apply(ctx, u.target("create")); n.Listed != 3 || n.Joined != 2 {
		t.Fatalf("%+v", n)
	}
	third, ok := u.secretToken()
	if !ok || third == fresh {
		t.Fatal("no new token for the new Node")
	}
	// Node a is gone; its daemon is silent past 90 s: retired.
	if err := u.kc.CoreV1().Nodes().Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	u.clock.Advance(2 * join.ConnectedWithin)
	if n, _ = u.ic.Apply(ctx, u.target("create")); n.Listed != 2 || n.Joined != 1 {
		t.Fatalf("%+v", n)
	}
	if j, _ := u.joins.Joined(ctx, poolID); len(j) != 1 || j[0].Name != "b" {
		t.Fatalf("joined %+v", j)
	}
}

// TestTeardown: GPU pods that are no DaemonSet's hold the teardown (the
// message says how many and where), the Nodes are cordoned, nothing is
// forced; then our labelled objects and the claim go, others' stay, and an
// adopted cluster's access is revoked last.
func TestTeardown(t *testing.T) {
	for _, mode := range []string{"create", "adopt"} {
		t.Run(mode, func(t *testing.T) {
			theirs := &corev1.ConfigMap{}
			theirs.Name, theirs.Namespace = "theirs", ClaimNamespace
			u := newUnit(t, node("a", poolID), node("b", poolID), node("other", ""), theirs,
				gpuPod("train", "a", false), gpuPod("dcgm", "b", true), gpuPod("elsewhere", "other", false))
			ctx := t.Context()
			if _, err := u.ic.Apply(ctx, u.target(mode)); err != nil {
				t.Fatal(err)
			}
			err := u.ic.Teardown(ctx, u.target(mode))
			if err == nil || !strings.Contains(err.Error(), "waiting for 1 GPU pods to end on 1 cordoned Nodes: a (1)") {
				t.Fatalf("teardown: %v", err)
			}
			for _, name := range []string{"a", "b"} {
				n, _ := u.kc.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
				if !n.Spec.Unschedulable {
					t.Errorf("node %s not cordoned", name)
				}
			}
			if n, _ := u.kc.CoreV1().Nodes().Get(ctx, "other", metav1.GetOptions{}); n.Spec.Unschedulable {
				t.Error("a Node of no pool was cordoned")
			}
			if _, err := u.kc.AppsV1().DaemonSets(Namespace).Get(ctx, DaemonSetName, metav1.GetOptions{}); err != nil || u.revoked != 0 {
				t.Fatalf("removed before the GPU pod ended: %v, revoked %d", err, u.revoked)
			}
			if err := u.kc.CoreV1().Pods("tenant").Delete(ctx, "train", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := u.ic.Teardown(ctx, u.target(mode)); err != nil {
				t.Fatal(err)
			}
			if _, err := u.kc.AppsV1().DaemonSets(Namespace).Get(ctx, DaemonSetName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("DaemonSet: %v", err)
			}
			for _, cm := range []struct{ ns, name string }{{Namespace, ConfigMapName}, {ClaimNamespace, ClaimName}} {
				if _, err := u.kc.CoreV1().ConfigMaps(cm.ns).Get(ctx, cm.name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					t.Errorf("ConfigMap %s/%s: %v", cm.ns, cm.name, err)
				}
			}
			if _, err := u.kc.CoreV1().Namespaces().Get(ctx, Namespace, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("Namespace: %v", err)
			}
			if _, err := u.kc.CoreV1().ConfigMaps(ClaimNamespace).Get(ctx, "theirs", metav1.GetOptions{}); err != nil {
				t.Errorf("their ConfigMap: %v", err)
			}
			if want := map[string]int{"create": 0, "adopt": 1}[mode]; u.revoked != want {
				t.Errorf("revoked %d, want %d", u.revoked, want)
			}
			// Again: nothing left, nothing fails.
			if err := u.ic.Teardown(ctx, u.target(mode)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestHoldsTeardown: which pods hold a Node's teardown.
func TestHoldsTeardown(t *testing.T) {
	amd := gpuPod("x", "a", false)
	amd.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{"amd.com/gpu": resource.MustParse("2")}}
	done := gpuPod("x", "a", false)
	done.Status.Phase = corev1.PodSucceeded
	cpu := gpuPod("x", "a", false)
	cpu.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}}
	init := gpuPod("x", "a", false)
	init.Spec.InitContainers, init.Spec.Containers = init.Spec.Containers, []corev1.Container{{Name: "c"}}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"nvidia limit", gpuPod("x", "a", false), true},
		{"amd request", amd, true},
		{"init container", init, true},
		{"a DaemonSet's", gpuPod("x", "a", true), false},
		{"finished", done, false},
		{"no GPU", cpu, false},
	} {
		if got := holdsTeardown(tc.pod); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestNoDaemon: without substrate.nodeDaemon the apply is an error saying
// so, and mints nothing.
func TestNoDaemon(t *testing.T) {
	u := newUnit(t)
	u.ic.o.Daemon = nil
	_, err := u.ic.Apply(t.Context(), u.target("create"))
	if err == nil || !strings.Contains(err.Error(), substrate.NoDaemonMessage) || u.minted != 0 {
		t.Fatalf("%v, minted %d", err, u.minted)
	}
}

// TestTeardownOfAClusterGone: a cluster the provider no longer has holds
// nothing of ours: the teardown is done, the joins forgotten.
func TestTeardownOfAClusterGone(t *testing.T) {
	u := newUnit(t)
	tg := u.target("create")
	tg.Credentials = func(context.Context) (providers.Credential, error) {
		return providers.Credential{}, providers.NotFoundf("Credentials", "cluster gone")
	}
	if _, _, err := u.joins.Token(t.Context(), poolID, []string{"a"}, false); err != nil {
		t.Fatal(err)
	}
	if err := u.ic.Teardown(t.Context(), tg); err != nil {
		t.Fatal(err)
	}
	if _, _, ok, _ := u.joins.Current(t.Context(), poolID); ok {
		t.Error("the join token outlived the cluster")
	}
}
