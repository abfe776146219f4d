package kubeplane

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// One plane for the package's tests, as other packages are expected to do.
var plane *Plane

func TestMain(m *testing.M) { os.Exit(Main(m, Options{}, &plane)) }

const poolLabel = "fleet-agent.dev/pool"

// eventually polls cond every 50 ms until it holds or limit passes, and
// returns how long it took.
func eventually(t *testing.T, limit time.Duration, what string, cond func() (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	last := ""
	for {
		ok, state := cond()
		if ok {
			return time.Since(start)
		}
		last = state
		if time.Since(start) > limit {
			t.Fatalf("%s: not within %s; last seen: %s", what, limit, last)
		}
		select {
		case <-t.Context().Done():
			t.Fatalf("%s: %v; last seen: %s", what, t.Context().Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// runningOn maps each Node to the running, ready Pods on it that match sel.
func runningOn(t *testing.T, c kubernetes.Interface, ns, sel string) (map[string]int, int) {
	t.Helper()
	pods, err := c.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil && podReady(&p) {
			out[p.Spec.NodeName]++
		}
	}
	return out, len(pods.Items)
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func exactlyOneEach(got map[string]int, want []string) bool {
	if len(got) != len(want) {
		return false
	}
	for _, n := range want {
		if got[n] != 1 {
			return false
		}
	}
	return true
}

func TestDaemonSetCordonAndGarbageCollection(t *testing.T) {
	t.Parallel() // shares the plane: own namespace, own Nodes and labels
	c := plane.Client()
	ns := plane.Namespace(t)
	u := plane.Unique(t)
	pool := map[string]string{poolLabel: u}
	var labelled []string
	for i := range 3 {
		name := fmt.Sprintf("%s-n%d", u, i)
		plane.AddNodeT(t, name, pool)
		labelled = append(labelled, name)
	}
	other := u + "-other"
	plane.AddNodeT(t, other, map[string]string{poolLabel: u + "-not"})

	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "daemon", Namespace: ns},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "daemon"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "daemon"}},
				Spec: corev1.PodSpec{
					NodeSelector: pool,
					Containers:   []corev1.Container{{Name: "daemon", Image: "registry.invalid/daemon:1"}},
				},
			},
		},
	}
	start := time.Now()
	if _, err := c.AppsV1().DaemonSets(ns).Create(t.Context(), ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "one running Pod per labelled Node", func() (bool, string) {
		got, total := runningOn(t, c, ns, "app=daemon")
		return exactlyOneEach(got, labelled) && total == 3, fmt.Sprintf("%v of %d pods", got, total)
	})
	t.Logf("DaemonSet: 3 Pods running on the 3 labelled Nodes after %s", time.Since(start).Round(time.Millisecond))
	eventually(t, 30*time.Second, "DaemonSet status 3/3 ready", func() (bool, string) {
		d, err := c.AppsV1().DaemonSets(ns).Get(t.Context(), "daemon", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		s := d.Status
		return s.DesiredNumberScheduled == 3 && s.NumberReady == 3, fmt.Sprintf("%+v", s)
	})

	// Labelling one more Node adds a Pod there.
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, poolLabel, u)
	if _, err := c.CoreV1().Nodes().Patch(t.Context(), other, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	labelled = append(labelled, other)
	took := eventually(t, 30*time.Second, "a Pod on the newly labelled Node", func() (bool, string) {
		got, total := runningOn(t, c, ns, "app=daemon")
		return exactlyOneEach(got, labelled) && total == 4, fmt.Sprintf("%v of %d pods", got, total)
	})
	t.Logf("label added: Pod running on it after %s", took.Round(time.Millisecond))

	// Cordon: the Node is unschedulable, the node lifecycle controller
	// taints it so, and a Pod pinned to it stays Pending while the
	// DaemonSet's Pod (which tolerates the taint) keeps running.
	cordoned := labelled[0]
	if _, err := c.CoreV1().Nodes().Patch(t.Context(), cordoned, types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "cordoned Node tainted unschedulable", func() (bool, string) {
		n, err := c.CoreV1().Nodes().Get(t.Context(), cordoned, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, taint := range n.Spec.Taints {
			if taint.Key == corev1.TaintNodeUnschedulable && taint.Effect == corev1.TaintEffectNoSchedule {
				return n.Spec.Unschedulable, ""
			}
		}
		return false, fmt.Sprintf("taints %v", n.Spec.Taints)
	})
	pinned := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pinned", Namespace: ns},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{"kubernetes.io/hostname": cordoned},
			Containers:   []corev1.Container{{Name: "w", Image: "registry.invalid/w:1"}},
		},
	}
	if _, err := c.CoreV1().Pods(ns).Create(t.Context(), pinned, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "Pod pinned to the cordoned Node unschedulable", func() (bool, string) {
		p, err := c.CoreV1().Pods(ns).Get(t.Context(), "pinned", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
				return p.Spec.NodeName == "", ""
			}
		}
		return false, fmt.Sprintf("node %q conditions %v", p.Spec.NodeName, p.Status.Conditions)
	})
	if got, _ := runningOn(t, c, ns, "app=daemon"); got[cordoned] != 1 {
		t.Fatalf("the DaemonSet's Pod left the cordoned Node: %v", got)
	}

	// Deleting the DaemonSet: the garbage collector deletes its Pods and
	// kwok confirms each deletion as a kubelet would.
	start = time.Now()
	if err := c.AppsV1().DaemonSets(ns).Delete(t.Context(), "daemon", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the DaemonSet's Pods gone", func() (bool, string) {
		_, total := runningOn(t, c, ns, "app=daemon")
		return total == 0, fmt.Sprintf("%d pods left", total)
	})
	t.Logf("DaemonSet deleted: its Pods gone after %s", time.Since(start).Round(time.Millisecond))
}

func TestGPUPodOnlyWhereOffered(t *testing.T) {
	t.Parallel() // shares the plane: own namespace, own Nodes and labels
	c := plane.Client()
	ns := plane.Namespace(t)
	u := plane.Unique(t)
	pool := map[string]string{poolLabel: u}
	gpuNode := u + "-gpu"
	plane.AddNodeT(t, u+"-cpu", pool)
	plane.AddNodeT(t, gpuNode, pool, WithExtended(GPU, 1))

	pod := func(name string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.PodSpec{
				NodeSelector: pool,
				Containers: []corev1.Container{{
					Name: "train", Image: "registry.invalid/train:1",
					Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{GPU: resource.MustParse("1")}},
				}},
			},
		}
	}
	for _, name := range []string{"first", "second"} {
		if _, err := c.CoreV1().Pods(ns).Create(t.Context(), pod(name), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// One GPU in the pool: one Pod runs on the Node offering it, the other
	// waits for a GPU (the scheduler counts what is allocated).
	eventually(t, 30*time.Second, "one GPU Pod running on the GPU Node, one unschedulable", func() (bool, string) {
		pods, err := c.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var running, waiting int
		var state []string
		for _, p := range pods.Items {
			state = append(state, fmt.Sprintf("%s:%s@%q", p.Name, p.Status.Phase, p.Spec.NodeName))
			switch {
			case p.Status.Phase == corev1.PodRunning && p.Spec.NodeName == gpuNode:
				running++
			case p.Spec.NodeName == "" && unschedulableFor(&p, string(GPU)):
				waiting++
			}
		}
		return running == 1 && waiting == 1, strings.Join(state, " ")
	})
}

func unschedulableFor(p *corev1.Pod, resource string) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonUnschedulable && strings.Contains(c.Message, resource) {
			return true
		}
	}
	return false
}

func TestNamespaceDeletionEmptiesIt(t *testing.T) {
	t.Parallel() // shares the plane: own namespace, own Nodes and labels
	c := plane.Client()
	u := plane.Unique(t)
	plane.AddNodeT(t, u+"-n", map[string]string{poolLabel: u})
	ns := u + "-ns"
	if _, err := c.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "default ServiceAccount in the new namespace", func() (bool, string) {
		_, err := c.CoreV1().ServiceAccounts(ns).Get(t.Context(), "default", metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "tenant", Namespace: ns},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{poolLabel: u},
			Containers:   []corev1.Container{{Name: "w", Image: "registry.invalid/w:1"}},
		},
	}
	if _, err := c.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "tenant Pod running", func() (bool, string) {
		got, _ := runningOn(t, c, ns, "")
		return got[u+"-n"] == 1, fmt.Sprint(got)
	})
	if err := c.CoreV1().Namespaces().Delete(t.Context(), ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	took := eventually(t, 60*time.Second, "namespace gone with its Pod", func() (bool, string) {
		_, err := c.CoreV1().Namespaces().Get(t.Context(), ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	t.Logf("namespace with a running Pod deleted in %s", took.Round(time.Millisecond))
}

// tokenClient is a client that authenticates with a bearer token only.
func tokenClient(t *testing.T, p *Plane, token string) kubernetes.Interface {
	t.Helper()
	cfg := &rest.Config{Host: p.URL(), BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: p.CA()}}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// tokens is a reviewer's view of what it minted: the tokens it accepts now,
// as the user "tenant-a" in group "fleet:tenants".
type tokens struct{ valid sync.Map }

func (k *tokens) set(tok string, ok bool) {
	if ok {
		k.valid.Store(tok, true)
	} else {
		k.valid.Delete(tok)
	}
}

func (k *tokens) reviewer() ReviewerFunc {
	return func(tok string, _ []string) (authnv1.UserInfo, []string, bool) {
		if _, ok := k.valid.Load(tok); !ok {
			return authnv1.UserInfo{}, nil, false
		}
		return authnv1.UserInfo{Username: "tenant-a", UID: "a-1", Groups: []string{"fleet:tenants"}}, nil, true
	}
}

func whoAmI(ctx context.Context, c kubernetes.Interface) (string, error) {
	r, err := c.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return r.Status.UserInfo.Username, nil
}

// On the shared plane (webhook cache TTL 0): a token the reviewer accepts
// gets through as its user (and is then only as authorized as RBAC says), a
// token it refuses gets 401, and a token it stops accepting is refused
// within kube-apiserver's own 10 s cache of successful token
// authentications (TokenSuccessCacheTTL, which no flag changes), not
// sooner. A refusal is never cached at TTL 0: a token refused before the
// reviewer knew it works as soon as it does.
func TestWebhookTokens(t *testing.T) {
	var minted tokens
	plane.SetTokenReviewer(minted.reviewer())
	t.Cleanup(func() { plane.SetTokenReviewer(nil) })
	tokA, tokB, tokC := "minted-a-"+token(), "forged-b-"+token(), "late-c-"+token()
	minted.set(tokA, true)
	a, b, c := tokenClient(t, plane, tokA), tokenClient(t, plane, tokB), tokenClient(t, plane, tokC)

	reviews := plane.TokenReviews()
	acceptedAt := time.Now()
	if user, err := whoAmI(t.Context(), a); err != nil || user != "tenant-a" {
		t.Fatalf("token A: user %q, err %v; want tenant-a", user, err)
	}
	if n := plane.TokenReviews() - reviews; n != 1 {
		t.Fatalf("token A's first request: %d TokenReviews, want 1", n)
	}
	// Authenticated is not authorized: RBAC grants tenant-a nothing. This
	// second request is answered from the apiserver's success cache.
	reviews = plane.TokenReviews()
	if _, err := a.CoreV1().Namespaces().List(t.Context(), metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("token A listing namespaces: %v, want 403 Forbidden", err)
	}
	if n := plane.TokenReviews() - reviews; n != 0 {
		t.Errorf("token A's second request: %d TokenReviews, want 0 (kube-apiserver caches a success for 10 s)", n)
	}

	reviews = plane.TokenReviews()
	if _, err := whoAmI(t.Context(), b); !apierrors.IsUnauthorized(err) {
		t.Fatalf("token B: %v, want 401 Unauthorized", err)
	}
	if _, err := b.CoreV1().Namespaces().List(t.Context(), metav1.ListOptions{}); !apierrors.IsUnauthorized(err) {
		t.Fatalf("token B listing namespaces: %v, want 401 Unauthorized", err)
	}
	if n := plane.TokenReviews() - reviews; n != 2 {
		t.Errorf("token B's two requests: %d TokenReviews, want 2 (a refusal is not cached)", n)
	}

	if _, err := whoAmI(t.Context(), c); !apierrors.IsUnauthorized(err) {
		t.Fatalf("token C before it is minted: %v, want 401", err)
	}
	minted.set(tokC, true)
	if user, err := whoAmI(t.Context(), c); err != nil || user != "tenant-a" {
		t.Fatalf("token C right after it is minted: user %q, err %v; want accepted at once", user, err)
	}

	// Revocation (or expiry) of A.
	minted.set(tokA, false)
	eventually(t, 20*time.Second, "token A refused after revocation", func() (bool, string) {
		_, err := whoAmI(t.Context(), a)
		return apierrors.IsUnauthorized(err), fmt.Sprint(err)
	})
	took := time.Since(acceptedAt)
	t.Logf("revoked token refused %s after it was first accepted", took.Round(time.Millisecond))
	if took < SuccessCacheTTL {
		t.Errorf("refused %s after its first acceptance, before kube-apiserver's %s success cache expired: the cache is not what this package documents", took, SuccessCacheTTL)
	}
	if took > SuccessCacheTTL+5*time.Second {
		t.Errorf("refused only %s after its first acceptance: more than the documented %s bound (+5 s slack)", took, SuccessCacheTTL)
	}
}

// A plane of its own with a 2 s webhook cache: a refusal is then cached
// too, so a token refused before the reviewer minted it stays refused for
// up to the TTL, without another TokenReview. This is why the default TTL
// is zero. Its processes are all gone once the test using it ends.
func TestWebhookCacheTTLAndCleanup(t *testing.T) {
	const ttl = 2 * time.Second
	var pids []int
	var stopping time.Time
	t.Run("plane", func(t *testing.T) {
		p := Start(t, Options{TokenCacheTTL: ttl})
		for _, pr := range p.procs {
			pids = append(pids, pr.cmd.Process.Pid)
		}
		var minted tokens
		p.SetTokenReviewer(minted.reviewer())
		tok := "late-" + token()
		c := tokenClient(t, p, tok)
		if _, err := whoAmI(t.Context(), c); !apierrors.IsUnauthorized(err) {
			t.Fatalf("token before it is minted: %v, want 401", err)
		}
		refusedAt := time.Now()
		minted.set(tok, true)
		reviews := p.TokenReviews()
		if _, err := whoAmI(t.Context(), c); !apierrors.IsUnauthorized(err) {
			t.Fatalf("within the TTL the cached refusal should still hold: %v", err)
		}
		if n := p.TokenReviews() - reviews; n != 0 {
			t.Fatalf("a request within the TTL sent %d TokenReviews: no cache at TTL %s", n, ttl)
		}
		eventually(t, ttl+5*time.Second, "token accepted once the cached refusal expired", func() (bool, string) {
			_, err := whoAmI(t.Context(), c)
			return err == nil, fmt.Sprint(err)
		})
		took := time.Since(refusedAt)
		t.Logf("TTL %s: a refusal held for %s", ttl, took.Round(time.Millisecond))
		if took < ttl-100*time.Millisecond {
			t.Errorf("accepted after %s, before the %s TTL", took, ttl)
		}
		t.Logf("own plane started in %s", p.StartTime().Round(time.Millisecond))
		stopping = time.Now() // Start's cleanup stops it once this returns
	})
	t.Logf("own plane stopped in %s", time.Since(stopping).Round(time.Millisecond))
	if len(pids) != len(Binaries) {
		t.Fatalf("plane ran %d processes, want %d", len(pids), len(Binaries))
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process %d still there after the plane's test ended (kill 0: %v)", pid, err)
		}
	}
}

func TestPlaneFigures(t *testing.T) {
	var total int64
	mem := plane.Memory()
	var parts []string
	for _, b := range Binaries {
		if mem[b] == 0 {
			t.Errorf("no resident memory read for %s: not running?", b)
		}
		total += mem[b]
		parts = append(parts, fmt.Sprintf("%s %d MiB", b, mem[b]>>20))
	}
	t.Logf("plane started in %s (%s); resident %d MiB (%s)", plane.StartTime().Round(time.Millisecond), plane.StartSteps(), total>>20, strings.Join(parts, ", "))
}

// The script and this package find the same directory, and a cache that is
// missing or of another recipe is refused with the way to build it.
func TestCacheLocation(t *testing.T) {
	const standIn = "#!/bin/sh\nexit 0\n"
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	scriptPath := filepath.Join(root, script)
	for _, env := range []string{"", t.TempDir()} {
		t.Run(fmt.Sprintf("env=%q", env), func(t *testing.T) {
			t.Setenv(CacheEnv, env)
			cmd := exec.CommandContext(t.Context(), "bash", scriptPath, "--print-dir")
			out, err := cmd.Output()
			if err != nil {
				t.Fatal(err)
			}
			c, ferr := findCache(scriptPath)
			if got, want := c.Dir, strings.TrimSpace(string(out)); got != want {
				t.Fatalf("kubeplane looks in %s, the script builds %s", got, want)
			}
			if env != "" {
				// Empty root: refused, saying what to run.
				if ferr == nil || !strings.Contains(ferr.Error(), "make kube") {
					t.Fatalf("empty cache: %v, want an error naming `make kube`", ferr)
				}
				// A cache of another recipe: refused too.
				if err := os.MkdirAll(filepath.Join(c.Dir, "bin"), 0o755); err != nil {
					t.Fatal(err)
				}
				for _, b := range Binaries {
					if err := os.WriteFile(c.Bin(b), []byte(standIn), 0o755); err != nil {
						t.Fatal(err)
					}
				}
				if err := os.WriteFile(filepath.Join(c.Dir, "stamp"), []byte("recipe 000000000000\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				if _, err := findCache(scriptPath); err == nil || !strings.Contains(err.Error(), "stamp says") {
					t.Fatalf("stale stamp: %v, want refused", err)
				}
				// The stamp the script writes: the recipe, the size of every
				// file, its checksum.
				stamp := "recipe " + c.Recipe + "\n"
				for _, b := range Binaries {
					stamp += fmt.Sprintf("size %d bin/%s\n", len(standIn), b)
				}
				for _, b := range Binaries {
					stamp += fmt.Sprintf("%x  bin/%s\n", sha256.Sum256([]byte(standIn)), b)
				}
				if err := os.WriteFile(filepath.Join(c.Dir, "stamp"), []byte(stamp), 0o644); err != nil {
					t.Fatal(err)
				}
				if _, err := findCache(scriptPath); err != nil {
					t.Fatalf("complete cache refused: %v", err)
				}
				script := func(arg string) error { return exec.CommandContext(t.Context(), "bash", scriptPath, arg).Run() }
				if err := script("--check"); err != nil {
					t.Fatalf("the script's --check refused a complete cache: %v", err)
				}
				if err := script("--verify"); err != nil {
					t.Fatalf("the script's --verify refused a complete cache: %v", err)
				}
				// Same size, other bytes: only --verify sees it.
				if err := os.WriteFile(c.Bin("etcd"), []byte(strings.ToUpper(standIn)), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := script("--check"); err != nil {
					t.Fatalf("--check looks at sizes only, yet refused: %v", err)
				}
				if err := script("--verify"); err == nil {
					t.Fatal("--verify accepted a binary that is not the one it stamped")
				}
				// Truncated: both sides see it.
				if err := os.WriteFile(c.Bin("etcd"), []byte("#!"), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := script("--check"); err == nil {
					t.Fatal("--check accepted a truncated binary")
				}
				if _, err := findCache(scriptPath); err == nil || !strings.Contains(err.Error(), "not the file the build stamped") {
					t.Fatalf("truncated binary: %v, want refused", err)
				}
			}
		})
	}
}

func TestRecipeHash(t *testing.T) {
	src := []byte("x\n# recipe: begin\nK8S_VERSION=" + Version + "\n# recipe: end\ny\n")
	h1, err := recipeHash(src)
	if err != nil {
		t.Fatal(err)
	}
	// Outside the block: same key. Inside: another.
	h2, _ := recipeHash([]byte("changed\n" + string(src) + "more\n"))
	h3, _ := recipeHash([]byte(strings.Replace(string(src), "# recipe: end", "A=1\n# recipe: end", 1)))
	if h1 != h2 || h1 == h3 || len(h1) != 12 {
		t.Fatalf("hashes %s %s %s", h1, h2, h3)
	}
	if _, err := recipeHash([]byte("# recipe: begin\nK8S_VERSION=v9.9.9\n# recipe: end\n")); err == nil {
		t.Fatal("a recipe for another version was accepted")
	}
	if _, err := recipeHash([]byte("# recipe: begin\n")); err == nil {
		t.Fatal("an unterminated recipe was accepted")
	}
}
