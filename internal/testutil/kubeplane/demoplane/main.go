// Command demoplane is the Kubernetes side of `make demo` (scripts/demo.sh),
// never part of the fleet-agent binary: it starts a real control plane
// (internal/testutil/kubeplane, from the cache `make kube` builds) behind
// the fake provider's clusters, and plays what a managed cluster would do
// around it:
//
//   - the cloud's token authenticator: the apiserver's TokenReviews are
//     answered from the fake's state file (fake.ReviewFile), so the
//     credentials the agent's fake mints work, and stop working when
//     revoked or their cluster goes;
//   - the kubelets' containers: for every Running Pod of the DaemonSet
//     fleet-node/fleet-node (kwok marks them Running) it runs a
//     `fleet-agent node` with that Pod's Node name, its config directory
//     written from the ConfigMap fleet-node/fleet-node and its token file
//     from the Secret fleet-node/fleet-node-join (where the agent writes
//     one), and a Pod token bound to that Pod (as the DaemonSet's projected
//     token), as the kubelet would mount them; it stops it when the Pod
//     or its Node goes.
//
// It writes into -out: ca.crt and admin.token (the fake's kube block:
// caFile, tokenFile), url, joinport (a free port for the agent's join
// listener), ours (what of the agent's is in the cluster, one
// object a line, rewritten on each pass), cordoned (each substrate Node
// seen cordoned, once, as it happens) and, last, ready. It runs from the
// repository (the plane finds its cache from the working directory) until
// SIGTERM or SIGINT, then stops the node daemons and the plane.
//
// Run from the module root:
//
//	go run ./internal/testutil/kubeplane/demoplane -fake-state demo/state/fake.json -out demo/kube -fleet-agent bin/fleet-agent
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/providers/fake"
	"github.com/fleet-agent/fleet-agent/internal/substrate/join"
	"github.com/fleet-agent/fleet-agent/internal/testutil/kubeplane"
)

// The names of the in-cluster half (internal/substrate/incluster/objects.go).
const (
	namespace      = "fleet-node"
	configMapName  = "fleet-node"
	secretName     = "fleet-node-join"
	secretKeyToken = "token"
	podSelector    = "app.kubernetes.io/name=fleet-node"
	claimNamespace = "kube-system"
	claimName      = "fleet-agent-substrate"
)

func main() {
	statePath := flag.String("fake-state", "", "the fake provider's state file (providers.fake.statePath)")
	out := flag.String("out", "", "the directory to write ca.crt, admin.token, url, ours and ready into")
	bin := flag.String("fleet-agent", "", "the fleet-agent binary the node daemons run (`fleet-agent node`)")
	every := flag.Duration("every", 500*time.Millisecond, "how often the node daemon Pods are looked at")
	flag.Parse()
	if *statePath == "" || *out == "" || *bin == "" {
		fmt.Fprintln(os.Stderr, "demoplane: -fake-state, -out and -fleet-agent are all needed")
		os.Exit(2)
	}
	if err := run(*statePath, *out, *bin, *every); err != nil {
		fmt.Fprintln(os.Stderr, "demoplane:", err)
		os.Exit(1)
	}
}

func run(statePath, out, bin string, every time.Duration) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := os.MkdirAll(out, 0o700); err != nil {
		return err
	}
	began := time.Now()
	// The disruption controller computes PodDisruptionBudgets' status, as
	// in any cluster: without it every budget refuses every eviction.
	p, err := kubeplane.New(kubeplane.Options{Controllers: append(slices.Clone(kubeplane.DefaultControllers), "disruption-controller")})
	if err != nil {
		return err
	}
	defer p.Close()
	fmt.Printf("demoplane: control plane up in %s (%s)\n", time.Since(began).Round(100*time.Millisecond), p.StartSteps())
	p.SetTokenReviewer(kubeplane.ReviewerFunc(func(token string, _ []string) (authnv1.UserInfo, []string, bool) {
		user, ok, err := fake.ReviewFile(statePath, token, time.Now())
		if err != nil {
			fmt.Fprintln(os.Stderr, "demoplane: token review:", err)
		}
		// A managed cluster's cloud admin: what the fake's credentials grant.
		return authnv1.UserInfo{Username: user, Groups: []string{"system:masters"}}, nil, ok
	}))
	files := map[string][]byte{
		"ca.crt":      p.CA(),
		"admin.token": []byte(p.Config().BearerToken + "\n"),
		"url":         []byte(p.URL() + "\n"),
	}
	for _, name := range []string{"ca.crt", "admin.token", "url"} {
		if err := os.WriteFile(filepath.Join(out, name), files[name], 0o600); err != nil {
			return err
		}
	}
	fmt.Printf("demoplane: url %s\ndemoplane: caFile %s\ndemoplane: tokenFile %s\n", p.URL(),
		filepath.Join(out, "ca.crt"), filepath.Join(out, "admin.token"))
	// A free port for the agent's join listener (substrate.join.listen),
	// which the demo's config names before the agent starts.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	if err := os.WriteFile(filepath.Join(out, "joinport"), []byte(strconv.Itoa(port)+"\n"), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "ready"), nil, 0o600); err != nil {
		return err
	}

	go cordons(ctx, p.Client(), filepath.Join(out, "cordoned"))

	d := &daemons{kc: p.Client(), bin: bin, dir: filepath.Join(out, "nodes"), running: map[string]*exec.Cmd{}, exited: map[string]chan struct{}{},
		tokens: map[string]podToken{}}
	defer d.stopAll()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := d.sync(ctx); err != nil && ctx.Err() == nil {
			fmt.Fprintln(os.Stderr, "demoplane:", err)
		}
		if err := ours(ctx, p.Client(), filepath.Join(out, "ours")); err != nil && ctx.Err() == nil {
			fmt.Fprintln(os.Stderr, "demoplane:", err)
		}
		select {
		case <-ctx.Done():
			fmt.Println("demoplane: stopping")
			return nil
		case <-t.C:
		}
	}
}

// daemons are the `fleet-agent node` processes, by Node name.
type daemons struct {
	kc      kubernetes.Interface
	bin     string
	dir     string
	running map[string]*exec.Cmd
	exited  map[string]chan struct{}
	// tokens are the Pod tokens written, by Node: for which Pod and when.
	tokens map[string]podToken
}

type podToken struct {
	uid types.UID
	at  time.Time
}

// podTokenRenew is when the kubelet renews a projected token: at 80% of
// its life (join.PodTokenSeconds).
const podTokenRenew = join.PodTokenSeconds * time.Second * 8 / 10

// writePodToken does what the kubelet does for the DaemonSet's projected
// token: a token of the Pod's service account for join.PodAudience, bound
// to the Pod, renewed at 80% of its life and for each new Pod. On a
// cluster of 1.30 or later the agent writes no Secret token: this is how
// the demo's nodes join.
func (d *daemons) writePodToken(ctx context.Context, pod *corev1.Pod, file string) error {
	node := pod.Spec.NodeName
	if have, ok := d.tokens[node]; ok && have.uid == pod.UID && time.Since(have.at) < podTokenRenew {
		return nil
	}
	sa := cmpOr(pod.Spec.ServiceAccountName, "default")
	exp := int64(join.PodTokenSeconds)
	tr, err := d.kc.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, sa, &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
		Audiences: []string{join.PodAudience}, ExpirationSeconds: &exp,
		BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("the Pod token of %s/%s (service account %s): %w", namespace, pod.Name, sa, err)
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(file, []byte(tr.Status.Token), 0o600); err != nil {
		return err
	}
	d.tokens[node] = podToken{uid: pod.UID, at: time.Now()}
	return nil
}

func cmpOr(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func (d *daemons) sync(ctx context.Context) error {
	pods, err := d.kc.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: podSelector})
	if err != nil {
		return err
	}
	cm, err := d.kc.CoreV1().ConfigMaps(namespace).Get(ctx, configMapName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		cm = nil
	} else if err != nil {
		return err
	}
	sec, err := d.kc.CoreV1().Secrets(namespace).Get(ctx, secretName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		sec = nil
	} else if err != nil {
		return err
	}
	// A Pod whose Node is gone has no machine left to run on (the fake
	// deleted its node pool): its daemon stops with the Node, although the
	// Pod object stays until the pod garbage collector removes it.
	nodes, err := d.kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	machines := map[string]bool{}
	for _, n := range nodes.Items {
		machines[n.Name] = true
	}
	want := map[string]bool{}
	for _, pod := range pods.Items {
		if pod.Status.Phase != corev1.PodRunning || pod.DeletionTimestamp != nil || pod.Spec.NodeName == "" || cm == nil ||
			!machines[pod.Spec.NodeName] {
			continue
		}
		node := pod.Spec.NodeName
		want[node] = true
		root := filepath.Join(d.dir, node)
		cfgDir, tokFile := filepath.Join(root, "config"), filepath.Join(root, "join", secretKeyToken)
		podFile := filepath.Join(root, "pod", "token")
		if err := d.writePodToken(ctx, &pod, podFile); err != nil {
			// The service account may not be made yet: the next pass.
			fmt.Fprintln(os.Stderr, "demoplane:", err)
			continue
		}
		if sec != nil {
			// The kubelet refreshes a mounted Secret: a new token reaches a
			// daemon still waiting to join.
			if err := os.MkdirAll(filepath.Dir(tokFile), 0o700); err != nil {
				return err
			}
			if err := os.WriteFile(tokFile, sec.Data[secretKeyToken], 0o600); err != nil {
				return err
			}
		}
		if done, ok := d.exited[node]; ok {
			select {
			case <-done: // it stopped by itself: the kubelet restarts a container
				delete(d.running, node)
				delete(d.exited, node)
			default:
				continue
			}
		}
		if err := os.MkdirAll(cfgDir, 0o700); err != nil {
			return err
		}
		for k, v := range cm.Data {
			if err := os.WriteFile(filepath.Join(cfgDir, k), []byte(v), 0o600); err != nil {
				return err
			}
		}
		if err := d.start(node, string(pod.UID), cfgDir, tokFile, podFile, filepath.Join(root, "state"), filepath.Join(root, "node.log")); err != nil {
			return err
		}
	}
	for node := range d.running {
		if !want[node] {
			why := "its Pod is gone"
			if !machines[node] {
				why = "its Node is gone"
			}
			d.stop(node, why)
		}
	}
	return nil
}

func (d *daemons) start(node, podUID, cfgDir, tokFile, podFile, stateDir, logPath string) error {
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return err
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(d.bin, "node", "--config-dir", cfgDir, "--token-file", tokFile, "--pod-token-file", podFile,
		"--state-dir", stateDir, "--node-name", node, "--pod-uid", podUID)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "FLEET_NODE_") || strings.HasPrefix(kv, "NODE_NAME=") || strings.HasPrefix(kv, "POD_UID=")
	})
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(done)
	}()
	d.running[node], d.exited[node] = cmd, done
	fmt.Printf("demoplane: node daemon started on %s (pid %d)\n", node, cmd.Process.Pid)
	return nil
}

// stop ends a node daemon: SIGTERM, SIGKILL after 10 s.
func (d *daemons) stop(node, why string) {
	cmd, done := d.running[node], d.exited[node]
	delete(d.running, node)
	delete(d.exited, node)
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
	fmt.Printf("demoplane: node daemon on %s stopped (%s)\n", node, why)
}

func (d *daemons) stopAll() {
	for node := range d.running {
		d.stop(node, "the demo ends")
	}
}

// cordons appends to path `node NAME` for each Node of a substrate the
// first time it is seen cordoned (unschedulable), until ctx ends. It
// watches rather than polls: the last Node a drain empties is cordoned only
// for the moments before its node pool is deleted, which a poll can miss,
// and the demo tells a drained node pool from one deleted outright by it.
func cordons(ctx context.Context, kc kubernetes.Interface, path string) {
	seen := map[string]bool{}
	for ctx.Err() == nil {
		// A watch without a resource version begins with every Node as
		// it is, so one opened again after a break misses only a Node
		// cordoned and deleted in between.
		w, err := kc.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{LabelSelector: providers.LabelSubstratePool})
		if err != nil {
			if ctx.Err() == nil {
				fmt.Fprintln(os.Stderr, "demoplane: watching Nodes:", err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		for ev := range w.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			if !ok || !n.Spec.Unschedulable || seen[n.Name] {
				continue
			}
			seen[n.Name] = true
			if err := appendLine(path, "node "+n.Name); err != nil {
				fmt.Fprintln(os.Stderr, "demoplane:", err)
			}
		}
		w.Stop()
	}
}

// appendLine adds one line to the file at path, making it if need be.
func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(line + "\n"); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// ours writes what of the agent's is in the cluster, one object a line:
// the claim, the Namespace fleet-node and what is in it, the Nodes of the
// fake's node pools that carry a substrate pool's label. Empty once the
// substrate is torn down and its cluster deleted.
func ours(ctx context.Context, kc kubernetes.Interface, path string) error {
	var lines []string
	if _, err := kc.CoreV1().ConfigMaps(claimNamespace).Get(ctx, claimName, metav1.GetOptions{}); err == nil {
		lines = append(lines, "configmap "+claimNamespace+"/"+claimName)
	} else if !apierrors.IsNotFound(err) {
		return err
	}
	if _, err := kc.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{}); err == nil {
		lines = append(lines, "namespace "+namespace)
	} else if !apierrors.IsNotFound(err) {
		return err
	}
	pods, err := kc.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, p := range pods.Items {
		lines = append(lines, "pod "+namespace+"/"+p.Name+" "+string(p.Status.Phase))
	}
	nodes, err := kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: providers.LabelSubstratePool})
	if err != nil {
		return err
	}
	for _, n := range nodes.Items {
		lines = append(lines, "node "+n.Name)
	}
	slices.Sort(lines)
	body := strings.Join(lines, "\n")
	if body != "" {
		body += "\n"
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(body), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
