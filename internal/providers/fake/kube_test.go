package fake_test

import (
	"os"
	"path/filepath"
	"testing"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/providers/fake"
	"github.com/fleet-agent/fleet-agent/internal/testutil/kubeplane"
)

// The test binary's one control plane, started by the first test that
// needs it (most tests here need no API server), stopped by TestMain.
var shared = kubeplane.Lazy{LogLines: 40}

func TestMain(m *testing.M) {
	// The test binary run again as one of several agents sharing an
	// account (TestSharedAccountProcesses).
	if os.Getenv(childEnv) == "1" {
		os.Exit(sharedAccountChild())
	}
	os.Exit(shared.Run(m))
}

func kube(t *testing.T) *kubeplane.Plane { t.Helper(); return shared.Plane(t) }

// TestBackedByAnAPIServer: with kube configured, the fake's node pools
// have Nodes in a real API server (their labels, kwok's annotation, GPUs
// of the machine type), one less when a pool shrinks, none once it is
// deleted; its credentials carry the server's URL and CA and are accepted
// by the server's webhook token authentication until the access is
// revoked.
func TestBackedByAnAPIServer(t *testing.T) {
	p := kube(t)
	ctx := t.Context()
	dir := t.TempDir()
	caFile, tokFile := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "cloud.token")
	if err := os.WriteFile(caFile, p.CA(), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tokFile, []byte(p.Config().BearerToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := config(t)
	cfg.Steps = fake.Steps{}
	name := p.Unique(t)
	cfg.Adoptable = []fake.SeedCluster{{Name: name, Location: "fake-east",
		NodePools: []fake.SeedNodePool{{Name: "default", MachineType: "fake-cpu-4", NodeCount: 2}}}}
	cfg.Kube = &fake.KubeConfig{URL: p.URL(), CAFile: caFile, TokenFile: tokFile}
	f := open(t, cfg, clock.Real{})
	p.SetTokenReviewer(kubeplane.ReviewerFunc(func(token string, _ []string) (authnv1.UserInfo, []string, bool) {
		user, ok := f.Review(token)
		return authnv1.UserInfo{Username: user, Groups: []string{"system:masters"}}, nil, ok
	}))
	t.Cleanup(func() { p.SetTokenReviewer(nil) })
	kc := p.Client()
	nodes := func(selector string) map[string]int64 {
		t.Helper()
		l, err := kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int64{}
		for _, n := range l.Items {
			if n.Annotations[fake.KwokAnnotation] != "fake" {
				t.Errorf("Node %s is not kwok's: %v", n.Name, n.Annotations)
			}
			if want := "fake://" + name + "/" + n.Labels[fake.LabelFakeNodePool] + "/" + n.Name; n.Spec.ProviderID != want {
				t.Errorf("Node %s has providerID %q, want %q", n.Name, n.Spec.ProviderID, want)
			}
			if n.Labels[fake.LabelZone] == "" {
				t.Errorf("Node %s has no zone: %v", n.Name, n.Labels)
			}
			q := n.Status.Capacity["nvidia.com/gpu"]
			out[n.Name] = q.Value()
		}
		return out
	}
	ref := providers.ClusterRef{Location: "fake-east", Name: name}
	if _, err := f.ListNodePools(ctx, acct, ref); err != nil {
		t.Fatal(err)
	}
	if got := nodes(fake.LabelFakeCluster + "=" + name + "," + fake.LabelFakeNodePool + "=default"); len(got) != 2 {
		t.Fatalf("their node pool's Nodes: %v", got)
	}
	spec := providers.NodePoolSpec{Name: "fa-abcdef-h100", Shape: providers.Shape{MachineType: "fake-h100x8"},
		Size: providers.Size{NodeCount: 3}, Labels: providers.PoolLabels("pool_fakekube", false), ClientToken: "t1"}
	if _, err := f.EnsureNodePool(ctx, acct, ref, spec); err != nil {
		t.Fatal(err)
	}
	if _, err := f.GetNodePool(ctx, acct, ref, spec.Name); err != nil {
		t.Fatal(err)
	}
	ours := providers.LabelSubstratePool + "=pool_fakekube"
	if got := nodes(ours); len(got) != 3 || got[name+"-fa-abcdef-h100-0"] != 8 {
		t.Fatalf("our node pool's Nodes: %v", got)
	}
	if _, err := f.ResizeNodePool(ctx, acct, ref, spec.Name, providers.Size{NodeCount: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.GetNodePool(ctx, acct, ref, spec.Name); err != nil {
		t.Fatal(err)
	}
	if got := nodes(ours); len(got) != 1 {
		t.Fatalf("after shrinking to 1: %v", got)
	}
	// Growing again, then removing one chosen Node: exactly that Node goes.
	if _, err := f.ResizeNodePool(ctx, acct, ref, spec.Name, providers.Size{NodeCount: 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.GetNodePool(ctx, acct, ref, spec.Name); err != nil {
		t.Fatal(err)
	}
	if _, err := f.RemoveNodes(ctx, acct, ref, spec.Name, []string{fake.ProviderID(name, spec.Name, 1)}, providers.Size{NodeCount: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.GetNodePool(ctx, acct, ref, spec.Name); err != nil {
		t.Fatal(err)
	}
	if got := nodes(ours); len(got) != 2 || got[name+"-fa-abcdef-h100-0"] != 8 || got[name+"-fa-abcdef-h100-2"] != 8 {
		t.Fatalf("after removing node 1: %v", got)
	}
	// The credential reaches the API server, as an admin.
	cred, err := f.Credentials(ctx, acct, ref)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: cred.Endpoint, BearerToken: cred.Token, TLSClientConfig: rest.TLSClientConfig{CAData: cred.CACert}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: ours}); err != nil {
		t.Fatalf("the API server refused the fake's credential: %v", err)
	}
	if err := f.RevokeAccess(ctx, acct, ref); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.Review(cred.Token); ok {
		t.Fatal("a revoked credential still passes the review")
	}
	if _, err := f.DeleteNodePool(ctx, acct, ref, spec.Name); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ListNodePools(ctx, acct, ref); err != nil {
		t.Fatal(err)
	}
	if got := nodes(ours); len(got) != 0 {
		t.Fatalf("after the delete: %v", got)
	}
	for n := range nodes(fake.LabelFakeCluster + "=" + name) {
		_ = kc.CoreV1().Nodes().Delete(ctx, n, metav1.DeleteOptions{})
	}
}
