package incluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	authnv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/substrate"
	"github.com/fleet-agent/fleet-agent/internal/substrate/join"
)

// The user-info extras a TokenReview of a Pod-bound service-account token
// carries (the node ones since Kubernetes 1.30).
const (
	extraPodName  = "authentication.kubernetes.io/pod-name"
	extraPodUID   = "authentication.kubernetes.io/pod-uid"
	extraNodeName = "authentication.kubernetes.io/node-name"
)

// PodTokens reviews node daemons' Pod tokens at their pool's cluster
// (join.Reviewer): a TokenReview with the run's credential for that
// cluster, then the node daemon's Pods on the token's Node listed and the
// Node read back. It vouches for a token only when the cluster
// authenticates it for join.PodAudience as the service account of a Pod in
// Namespace, that Pod still runs with the token's uid, carries the node
// daemon's labels of the pool, runs on the Node the token names, and that
// Node is labelled with the pool. The uids of the daemon's other Pods that
// run on the Node come with it (join.PodIdentity.NodePods).
type PodTokens struct {
	newClient func(providers.Credential) (kubernetes.Interface, error)

	mu      sync.Mutex
	targets map[string]substrate.Target
}

// NewPodTokens makes a PodTokens; newClient nil is client-go (NewClient).
func NewPodTokens(newClient func(providers.Credential) (kubernetes.Interface, error)) *PodTokens {
	if newClient == nil {
		newClient = NewClient
	}
	return &PodTokens{newClient: newClient, targets: map[string]substrate.Target{}}
}

var _ join.Reviewer = (*PodTokens)(nil)

// Track is told the pool's target at each pass: how to mint a credential
// for its cluster when a node daemon joins.
func (p *PodTokens) Track(t substrate.Target) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.targets[t.PoolID] = t
}

// Forget drops the pool (its teardown): its tokens are not reviewed again.
func (p *PodTokens) Forget(poolID string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.targets, poolID)
}

// ReviewPodToken is join.Reviewer's. A credential is minted for the call
// and dropped after it, as for every pass of the in-cluster half.
func (p *PodTokens) ReviewPodToken(ctx context.Context, poolID, token string) (join.PodIdentity, error) {
	var id join.PodIdentity
	p.mu.Lock()
	t, ok := p.targets[poolID]
	p.mu.Unlock()
	if !ok || t.Credentials == nil {
		return id, fmt.Errorf("%w: the agent has not reached pool %s's cluster yet", join.ErrCannotReview, poolID)
	}
	ctx, cancel := context.WithTimeout(ctx, RequestTimeout)
	defer cancel()
	cred, err := t.Credentials(ctx)
	if err != nil {
		return id, fmt.Errorf("%w: minting a credential for pool %s's cluster: %v", join.ErrCannotReview, poolID, err)
	}
	kc, err := p.newClient(cred)
	if err != nil {
		return id, fmt.Errorf("%w: %v", join.ErrCannotReview, err)
	}
	rev, err := kc.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: token, Audiences: []string{join.PodAudience}}}, metav1.CreateOptions{})
	if err != nil {
		return id, fmt.Errorf("%w: the TokenReview at pool %s's cluster: %v", join.ErrCannotReview, poolID, err)
	}
	st := rev.Status
	if !st.Authenticated || !slices.Contains(st.Audiences, join.PodAudience) ||
		!strings.HasPrefix(st.User.Username, "system:serviceaccount:"+Namespace+":") {
		return id, join.PodTokenRefused()
	}
	one := func(k string) string {
		if v := st.User.Extra[k]; len(v) == 1 {
			return v[0]
		}
		return ""
	}
	id = join.PodIdentity{NodeName: one(extraNodeName), PodName: one(extraPodName), PodUID: one(extraPodUID)}
	if id.PodName == "" || id.PodUID == "" {
		// A token not bound to a Pod (a TokenRequest without one).
		return join.PodIdentity{}, join.PodTokenRefused()
	}
	if id.NodeName == "" {
		return join.PodIdentity{}, fmt.Errorf("%w: pool %s's cluster puts no Node in its Pod tokens (Kubernetes 1.30 or later does)", join.ErrCannotReview, poolID)
	}
	// The node daemon's Pods of the pool on the Node, in one list: the
	// token's Pod must be among them, and the others that still run hold
	// on to a key the Node has (join.PodIdentity.NodePods).
	pods, err := kc.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labelName + "=" + appName + "," + providers.LabelSubstratePool + "=" + poolID,
		FieldSelector: "spec.nodeName=" + id.NodeName})
	if err != nil {
		return join.PodIdentity{}, fmt.Errorf("%w: listing the node daemon's Pods on Node %s: %v", join.ErrCannotReview, id.NodeName, err)
	}
	found := false
	for _, pod := range pods.Items {
		if pod.DeletionTimestamp != nil || pod.Spec.NodeName != id.NodeName {
			continue
		}
		id.NodePods = append(id.NodePods, string(pod.UID))
		if pod.Name == id.PodName && string(pod.UID) == id.PodUID {
			found = true
		}
	}
	if !found {
		// Gone, being deleted, on another Node, or not the node daemon's.
		return join.PodIdentity{}, join.PodTokenRefused()
	}
	node, err := kc.CoreV1().Nodes().Get(ctx, id.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return join.PodIdentity{}, join.PodTokenRefused()
	}
	if err != nil {
		return join.PodIdentity{}, fmt.Errorf("%w: reading the Node %s: %v", join.ErrCannotReview, id.NodeName, err)
	}
	if node.Labels[providers.LabelSubstratePool] != poolID {
		return join.PodIdentity{}, join.PodTokenRefused()
	}
	return id, nil
}
