package fake

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/fleet-agent/fleet-agent/internal/providers"
)

// KubeConfig backs the fake's clusters by a real kube-apiserver: every cluster of the fake is that API server, its credentials
// carry the server's URL and CA, and the fake registers a Node per node of
// its node pools, the way a cloud's kubelets would, and removes it when the
// pool shrinks or goes.
//
//	providers:
//	  fake:
//	    kube:
//	      url: https://127.0.0.1:6443   # the API server
//	      caFile: /path/ca.crt          # the CA of its serving certificate
//	      tokenFile: /path/cloud.token  # the cloud's own identity there, which registers Nodes
//
// The API server accepts the credentials the fake mints by webhook token
// authentication: its TokenReview endpoint asks Fake.Review (a test's
// kubeplane.SetTokenReviewer), so a credential is checked for real and
// stops working when it expires or the access is revoked.
type KubeConfig struct {
	URL       string `yaml:"url"`
	CAFile    string `yaml:"caFile"`
	TokenFile string `yaml:"tokenFile"`
}

// The labels and annotation of the Nodes the fake registers.
const (
	// LabelFakeCluster and LabelFakeNodePool say which node pool of which
	// cluster a Node belongs to, so that the fake finds its own Nodes.
	LabelFakeCluster  = "fake.fleet-agent.dev/cluster"
	LabelFakeNodePool = "fake.fleet-agent.dev/node-pool"
	// KwokAnnotation has kwok play the Node's kubelet.
	KwokAnnotation = "kwok.x-k8s.io/node"
)

// kube is the API server the fake's clusters are.
type kube struct {
	cfg    KubeConfig
	ca     []byte
	client kubernetes.Interface
	// mu serialises the syncs, so that two calls never register the same
	// Node twice.
	mu sync.Mutex
}

func (c *KubeConfig) open() (*kube, error) {
	if c.URL == "" || c.CAFile == "" || c.TokenFile == "" {
		return nil, fmt.Errorf("kube: url, caFile and tokenFile are all needed")
	}
	ca, err := os.ReadFile(c.CAFile)
	if err != nil {
		return nil, fmt.Errorf("kube.caFile: %w", err)
	}
	tok, err := os.ReadFile(c.TokenFile)
	if err != nil {
		return nil, fmt.Errorf("kube.tokenFile: %w", err)
	}
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: c.URL, BearerToken: string(bytes.TrimRight(tok, "\r\n ")),
		TLSClientConfig: rest.TLSClientConfig{CAData: ca}, UserAgent: "fleet-agent-fake-cloud"})
	if err != nil {
		return nil, fmt.Errorf("kube: %w", err)
	}
	return &kube{cfg: *c, ca: ca, client: cs}, nil
}

// Review answers the API server's TokenReview of a bearer token: whether
// the fake minted it, unexpired and unrevoked, for a cluster that is still
// there, and for which account. Only with kube configured.
func (f *Fake) Review(token string) (user string, ok bool) {
	if f.kube == nil {
		return "", false
	}
	f.lockQuiet()
	defer f.unlock()
	return f.st.review(token, f.clock.Now())
}

// review is the rule of Review and ReviewFile: a token the fake minted,
// unexpired and unrevoked, for a cluster that is still there.
func (st *State) review(token string, now time.Time) (user string, ok bool) {
	ic, found := st.Credentials[tokenHash(token)]
	if !found || ic.Revoked || !now.Before(ic.ExpiresAt) {
		return "", false
	}
	if c := st.Clusters[ic.ClusterID]; c == nil || c.Status == providers.ClusterDeleting {
		return "", false
	}
	return "fake:" + ic.Account, true
}

// desiredNode is one Node a running node pool has.
type desiredNode struct {
	name       string
	labels     map[string]string
	gpus       int
	providerID string
}

// desiredNodes lists the Nodes the node pools have now. Called with the lock held.
func (f *Fake) desiredNodes() map[string]desiredNode {
	out := map[string]desiredNode{}
	for _, c := range f.st.Clusters {
		if c.Status == providers.ClusterDeleting {
			continue
		}
		for _, p := range c.NodePools {
			if p.Status != providers.NodePoolRunning && p.Status != providers.NodePoolUpdating {
				continue
			}
			gpus := 0
			if p.Accelerators != nil {
				gpus = p.Accelerators.Count
			} else if mt := f.machineType(p.MachineType); mt != nil && mt.GPUs != nil {
				gpus = mt.GPUs.Count
			}
			for _, i := range nodeNumbers(p) {
				name := NodeName(c.Name, p.Name, i)
				l := map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
					LabelFakeCluster: c.Name, LabelFakeNodePool: p.Name}
				if z := nodeZone(p, i); z != "" {
					l[LabelZone] = z
				}
				maps.Copy(l, p.Labels)
				out[name] = desiredNode{name: name, labels: l, gpus: gpus, providerID: ProviderID(c.Name, p.Name, i)}
			}
		}
	}
	return out
}

// machineType finds a machine type of the catalogue by name.
func (f *Fake) machineType(name string) *MachineTypeConfig {
	for i := range f.cfg.MachineTypes {
		if f.cfg.MachineTypes[i].Name == name {
			return &f.cfg.MachineTypes[i]
		}
	}
	return nil
}

// syncNodes registers the Nodes the node pools have and removes those
// they no longer have. Called without mu; nothing when kube is off.
func (f *Fake) syncNodes(ctx context.Context) error {
	if f.kube == nil {
		return nil
	}
	f.lockQuiet()
	want := f.desiredNodes()
	f.unlock()
	k := f.kube
	k.mu.Lock()
	defer k.mu.Unlock()
	have, err := k.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: LabelFakeCluster})
	if err != nil {
		return providers.Errorf("", providers.Unavailable, providers.None, "listing the fake's Nodes at %s: %v", k.cfg.URL, err)
	}
	seen := map[string]bool{}
	for _, n := range have.Items {
		seen[n.Name] = true
		if _, ok := want[n.Name]; ok {
			continue
		}
		if err := k.client.CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return providers.Errorf("", providers.Unavailable, providers.None, "removing the Node %s: %v", n.Name, err)
		}
	}
	names := slices.Sorted(maps.Keys(want))
	for _, name := range names {
		if seen[name] {
			continue
		}
		if _, err := k.client.CoreV1().Nodes().Create(ctx, nodeObject(want[name]), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return providers.Errorf("", providers.Unavailable, providers.None, "registering the Node %s: %v", name, err)
		}
	}
	return nil
}

// nodeObject is a Node as a kubelet registers it, for kwok to run.
func nodeObject(d desiredNode) *corev1.Node {
	list := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("32"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	if d.gpus > 0 {
		list["nvidia.com/gpu"] = resource.MustParse(strconv.Itoa(d.gpus))
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: d.name, Labels: d.labels, Annotations: map[string]string{KwokAnnotation: "fake"}},
		Spec:   corev1.NodeSpec{ProviderID: d.providerID},
		Status: corev1.NodeStatus{Capacity: list, Allocatable: list.DeepCopy()}}
	return n
}

// syncNodesQuiet is syncNodes after an observation: an API server that
// does not answer leaves the Nodes for the next one.
func (f *Fake) syncNodesQuiet(ctx context.Context) { _ = f.syncNodes(ctx) }

// WithKube backs the clusters by the API server a client reaches (what
// Config.Kube opens from files), its credentials carrying url and ca: for
// tests over client-go's fake clientset.
func WithKube(client kubernetes.Interface, url string, ca []byte) Option {
	return func(f *Fake) { f.kube = &kube{cfg: KubeConfig{URL: url}, ca: ca, client: client} }
}
