// Package incluster is the in-cluster half of a substrate
// (docs/substrates.md): with an admin credential minted for the
// run and held in memory only, through client-go, it claims the cluster
// (kube-system/fleet-agent-substrate), applies the node daemon (Namespace,
// ConfigMap and DaemonSet fleet-node, server-side, field manager
// fleet-agent), keeps a join token in the Secret fleet-node/fleet-node-join
// while listed Nodes have not joined (only where Pod tokens cannot join
// them: podTokensJoin), releases the names of daemons silent for 15
// minutes, and counts the Nodes; its teardown
// revokes the token, cordons and waits for the GPU workloads to end (never
// forcing), deletes what it labelled and the claim, and on an adopted
// cluster revokes the access the adapter granted itself.
//
// It satisfies substrate.InCluster; the reconciler decides when to call it
// and what its answers make of the substrate's state.
package incluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/config"
	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/substrate"
	"github.com/fleet-agent/fleet-agent/internal/substrate/drain"
	"github.com/fleet-agent/fleet-agent/internal/substrate/join"
)

// WaitingTooLong is how long listed Nodes may go without a join before the
// substrate's message names the DaemonSet to look at.
const WaitingTooLong = 15 * time.Minute

// RequestTimeout bounds one call to a cluster's API: a cluster that hangs
// costs the pass that long, not the reconciler.
const RequestTimeout = 30 * time.Second

// Options make an InCluster.
type Options struct {
	// Daemon is substrate.nodeDaemon; nil: Apply is an error saying so
	// (Teardown works without it).
	Daemon *config.NodeDaemon
	// Joins keeps the join tokens and the joined nodes (required).
	Joins *join.Store
	// Tenant tells this deployment's claims from another's.
	Tenant string
	Clock  clock.Clock
	Log    zerolog.Logger
	// NewClient reaches a cluster with a credential; nil: client-go over
	// the credential's endpoint, CA and token. Tests pass a fake
	// clientset.
	NewClient func(providers.Credential) (kubernetes.Interface, error)
	// Image is the image the DaemonSet names, asked at each apply of it
	// (internal/imagepin pins the configured tag to its digest and
	// answers from memory after the first); nil: Daemon.Image as it is.
	Image func(ctx context.Context) string
	// PodTokens, when set, is told each pool's target once its claim is
	// held, so that node daemons' Pod tokens are reviewed at its cluster.
	PodTokens *PodTokens
	// Audit records each pod a drain forces off its Node (drain.StateAudit
	// writes the state's audit log); nil: a drain never forces, it says
	// so instead.
	Audit drain.Auditor
}

// InCluster is the in-cluster half. It keeps no credential between calls:
// each Apply and Teardown mints one, uses it and drops it.
type InCluster struct {
	o Options
}

var _ substrate.InCluster = (*InCluster)(nil)

// New makes an InCluster.
func New(o Options) *InCluster {
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.NewClient == nil {
		o.NewClient = NewClient
	}
	return &InCluster{o: o}
}

// NewClient is client-go with nothing but what the credential carries. The
// token goes in the rest.Config, whose String form hides it, and nowhere
// else. Each request asks the fence of its context as it leaves
// (providers.FenceTransport): in a pass that is the term's, so a request
// of a term that ended is never sent.
func NewClient(c providers.Credential) (kubernetes.Interface, error) {
	// A host under .invalid never resolves: a provider names it for a
	// cluster that has no API (the fake provider without its kube block).
	if u, err := url.Parse(c.Endpoint); err == nil && strings.HasSuffix(u.Hostname(), ".invalid") {
		return nil, refusal.New(refusal.InvalidState,
			"the cluster has no Kubernetes API (its endpoint %s is a name that never resolves): a fake provider's clusters have one only when its config has a kube block (docs/configuration.md)", c.Endpoint)
	}
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: c.Endpoint, BearerToken: c.Token, Timeout: RequestTimeout,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.CACert}, UserAgent: "fleet-agent",
		WrapTransport: providers.FenceTransport})
	if err != nil {
		// What fails here is the credential the provider handed over (a
		// CA certificate that does not parse, an endpoint that is not a
		// URL): the next pass asks it for a new one.
		return nil, refusal.Wrap(refusal.Unavailable, err, "the provider's credential for the cluster API at %s cannot be used; the agent asks for a new one on its next pass", c.Endpoint)
	}
	return cs, nil
}

// client mints the run's credential and makes a client with it. Neither
// outlives the call that asked.
func (ic *InCluster) client(ctx context.Context, t substrate.Target) (kubernetes.Interface, error) {
	if t.Credentials == nil {
		return nil, refusal.New(refusal.Internal, "no way to mint a credential for cluster %s", t.Cluster)
	}
	cred, err := t.Credentials(ctx)
	if err != nil {
		return nil, fmt.Errorf("minting a credential for the cluster through the provider: %w", err)
	}
	return ic.o.NewClient(cred)
}

// apiErr words a cluster API error: what was being done, and that the next
// pass tries again. client-go's errors name the URL, never the token.
func apiErr(what string, err error) error {
	code := refusal.Unavailable
	switch {
	case apierrors.IsForbidden(err), apierrors.IsUnauthorized(err):
		code = refusal.InvalidState
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		code = refusal.Internal
	}
	return refusal.Wrap(code, err, "%s", what)
}

func applyOpts() metav1.ApplyOptions {
	// Force: the agent owns these objects; a field someone changed by hand
	// is taken back, which is what re-applying the daemon means.
	return metav1.ApplyOptions{FieldManager: FieldManager, Force: true}
}

// image is what the DaemonSet names.
func (ic *InCluster) image(ctx context.Context) string {
	if ic.o.Image == nil {
		return ic.o.Daemon.Image
	}
	return ic.o.Image(ctx)
}

// claim makes sure the cluster is the pool's: it creates the claim, never
// applies over one, and refuses one that another pool or deployment holds.
// held reports whether the claim is ours (false with a nil error: there
// is none).
func (ic *InCluster) claim(ctx context.Context, kc kubernetes.Interface, t substrate.Target, create bool) (held *corev1.ConfigMap, err error) {
	cms := kc.CoreV1().ConfigMaps(ClaimNamespace)
	cm, err := cms.Get(ctx, ClaimName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		if !create {
			return nil, nil
		}
		obj := claimObject(t.PoolID, t.Pool, ic.o.Tenant)
		maps.Copy(obj.Labels, ownerOf(t).Labels())
		cm, err = cms.Create(ctx, obj, metav1.CreateOptions{FieldManager: FieldManager})
		if apierrors.IsAlreadyExists(err) {
			// Someone created it since the read: whose it is decides.
			cm, err = cms.Get(ctx, ClaimName, metav1.GetOptions{})
		}
	}
	if err != nil {
		return nil, apiErr("reading the claim ConfigMap "+ClaimNamespace+"/"+ClaimName, err)
	}
	o := ownerOf(t)
	if inst := o.Foreign(cm.Labels); inst != "" && cm.Labels[providers.LabelSubstratePool] == t.PoolID {
		return nil, &refusal.Error{Code: refusal.InvalidState, Err: errNotOurs, Message: fmt.Sprintf(
			"the cluster is claimed by pool %q of installation %s, another fleet-agent state file (ConfigMap %s/%s): one cluster backs one pool of one installation; choose another cluster, or tear that installation's substrate down first",
			cm.Data[claimKeyPool], inst, ClaimNamespace, ClaimName)}
	}
	if holder := cm.Labels[providers.LabelSubstratePool]; holder == t.PoolID && cm.Data[claimKeyTenant] == ic.o.Tenant && !o.Owns(cm.Labels) {
		return nil, &refusal.Error{Code: refusal.InvalidState, Err: errNotOurs, Message: fmt.Sprintf(
			"the claim ConfigMap %s/%s names this pool but carries no %s label: a fleet-agent from before installations, or another state file's, holds the cluster; choose another cluster, or delete the ConfigMap by hand once you know no other agent uses it",
			ClaimNamespace, ClaimName, providers.LabelInstallation)}
	}
	if holder := cm.Labels[providers.LabelSubstratePool]; holder != t.PoolID || cm.Data[claimKeyTenant] != ic.o.Tenant {
		return nil, &refusal.Error{Code: refusal.InvalidState, Err: errNotOurs, Message: fmt.Sprintf(
			"the cluster is claimed by pool %q (id %s) of deployment %q (ConfigMap %s/%s): one cluster backs one pool; archive that pool and wait for its substrate to be deleted, or choose another cluster (delete the ConfigMap by hand only if that deployment is gone for good)",
			cm.Data[claimKeyPool], cmpOr(holder, "none"), cm.Data[claimKeyTenant], ClaimNamespace, ClaimName)}
	}
	return cm, nil
}

// ownerOf is who the objects put in the cluster for t belong to. A target
// without an owner (made by hand, in tests) is its pool's without an
// installation.
func ownerOf(t substrate.Target) providers.Owner {
	if t.Owner.PoolID == "" {
		return providers.Owner{PoolID: t.PoolID, Legacy: true}
	}
	return t.Owner
}

// errNotOurs is a claim held by another: Teardown removes nothing then.
var errNotOurs = errors.New("claimed by another")

// Apply claims the cluster, applies the node daemon, keeps the join token
// for the Nodes that have not joined, retires joined nodes whose Node is
// gone and whose daemon is silent, and reports the Nodes.
func (ic *InCluster) Apply(ctx context.Context, t substrate.Target) (substrate.Nodes, error) {
	if ic.o.Daemon == nil {
		return substrate.Nodes{}, refusal.New(refusal.InvalidState, "%s: set its image and joinURL in the agent config", substrate.NoDaemonMessage)
	}
	kc, err := ic.client(ctx, t)
	if err != nil {
		return substrate.Nodes{}, err
	}
	claim, err := ic.claim(ctx, kc, t, true)
	if err != nil {
		return substrate.Nodes{}, err
	}
	if ic.o.PodTokens != nil {
		ic.o.PodTokens.Track(t)
	}
	if _, err := kc.CoreV1().Namespaces().Apply(ctx, namespaceApply(t.PoolID).WithLabels(ownerOf(t).Labels()), applyOpts()); err != nil {
		return substrate.Nodes{}, apiErr("applying the Namespace "+Namespace, err)
	}
	if _, err := kc.CoreV1().ConfigMaps(Namespace).Apply(ctx, configMapApply(t.PoolID, ic.o.Daemon).WithLabels(ownerOf(t).Labels()), applyOpts()); err != nil {
		return substrate.Nodes{}, apiErr("applying the ConfigMap "+Namespace+"/"+ConfigMapName, err)
	}
	if _, err := kc.AppsV1().DaemonSets(Namespace).Apply(ctx, daemonSetApply(t.PoolID, ic.o.Daemon, ic.image(ctx)).WithLabels(ownerOf(t).Labels()), applyOpts()); err != nil {
		return substrate.Nodes{}, apiErr("applying the DaemonSet "+Namespace+"/"+DaemonSetName, err)
	}
	return ic.nodes(ctx, kc, t, claim.CreationTimestamp.Time)
}

// nodeSelector lists the pool's Nodes.
func nodeSelector(poolID string) string {
	return labels.Set{providers.LabelSubstratePool: poolID}.String()
}

// nodes counts the listed and joined Nodes and keeps the join token.
// claimed is when the cluster was claimed (the daemon put there): Nodes
// older than that have waited since then, not since they were made.
func (ic *InCluster) nodes(ctx context.Context, kc kubernetes.Interface, t substrate.Target, claimed time.Time) (substrate.Nodes, error) {
	list, err := kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: nodeSelector(t.PoolID)})
	if err != nil {
		return substrate.Nodes{}, apiErr("listing the Nodes labelled "+nodeSelector(t.PoolID), err)
	}
	listed := map[string]bool{}
	created := map[string]time.Time{}
	for _, n := range list.Items {
		listed[n.Name] = true
		created[n.Name] = n.CreationTimestamp.Time
	}
	// A daemon silent for join.ReleaseAfter loses its name, listed or not.
	released, err := ic.o.Joins.ReleaseSilent(ctx, t.PoolID)
	if err != nil {
		return substrate.Nodes{}, err
	}
	for _, name := range released {
		ic.o.Log.Info().Str("pool", t.Pool).Str("node", name).Str("silentFor", join.ReleaseAfter.String()).
			Msg("released a joined node: its daemon sent no heartbeat; its key is revoked and its name may join again")
	}
	joined, err := ic.o.Joins.Joined(ctx, t.PoolID)
	if err != nil {
		return substrate.Nodes{}, err
	}
	var out substrate.Nodes
	out.Listed = len(listed)
	var lastJoin time.Time
	joinedNames := map[string]bool{}
	for _, j := range joined {
		if !listed[j.Name] {
			// A Node that is gone (or lost the pool's label) and whose
			// daemon stopped beating is retired: its key stops working.
			if !j.Connected {
				if err := ic.o.Joins.Retire(ctx, t.PoolID, j.Name); err != nil {
					return substrate.Nodes{}, err
				}
				ic.o.Log.Info().Str("pool", t.Pool).Str("node", j.Name).Msg("retired a joined node: its Node is gone and its daemon is disconnected")
			}
			continue
		}
		joinedNames[j.Name] = true
		if j.JoinedAt.After(lastJoin) {
			lastJoin = j.JoinedAt
		}
	}
	out.Joined = len(joinedNames)
	var waiting []string
	appeared := claimed // the newest waiting Node's creation, or the claim
	for n := range listed {
		if !joinedNames[n] {
			waiting = append(waiting, n)
			if created[n].After(appeared) {
				appeared = created[n]
			}
		}
	}
	slices.Sort(waiting)
	since, err := ic.token(ctx, kc, t, waiting, appeared)
	if err != nil {
		return substrate.Nodes{}, err
	}
	if len(waiting) > 0 {
		// Since a Node last joined; before any did, since the token for
		// the waiting ones was minted.
		out.WaitingSince = lastJoin
		if lastJoin.IsZero() {
			out.WaitingSince = since
		}
		if !out.WaitingSince.IsZero() && ic.o.Clock.Now().Sub(out.WaitingSince) >= WaitingTooLong {
			out.Message = fmt.Sprintf("%d of %d Nodes have not joined for %s (%s): look at the Pods of the DaemonSet %s/%s "+
				"(kubectl -n %s get pods -l %s=%s -o wide: the image pull, and the join URL and pins in the ConfigMap %s/%s)",
				len(waiting), out.Listed, WaitingTooLong, strings.Join(clip(waiting, 5), ", "), Namespace, DaemonSetName,
				Namespace, labelName, appName, Namespace, ConfigMapName)
		}
	}
	return out, nil
}

// PodTokensFrom is the first Kubernetes version whose Pod tokens name
// their Node (the node-name claim), so that a Pod-token review can tell
// which Node a node daemon is on.
const PodTokensFrom = "1.30"

// token keeps the join Secret: a token for exactly the waiting Nodes while
// there are any, none once all have joined, and none at all where Pod
// tokens join (podTokensJoin). It returns when the current token was
// minted (zero when there is none), or, with no Secret token for Nodes
// that wait, appeared (when the newest waiting Node was created).
func (ic *InCluster) token(ctx context.Context, kc kubernetes.Interface, t substrate.Target, waiting []string, appeared time.Time) (time.Time, error) {
	secrets := kc.CoreV1().Secrets(Namespace)
	sec, err := secrets.Get(ctx, SecretName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		sec, err = nil, nil
	}
	if err != nil {
		return time.Time{}, apiErr("reading the join Secret "+Namespace+"/"+SecretName, err)
	}
	noSecret, why, since := len(waiting) == 0, "every listed Node joined", time.Time{}
	if !noSecret {
		if noSecret, err = ic.podTokensJoin(kc); err != nil {
			return time.Time{}, err
		}
		why, since = "the cluster's Pod tokens name their Node (Kubernetes "+PodTokensFrom+" or later): node daemons join with them", appeared
	}
	if noSecret {
		if err := ic.o.Joins.Revoke(ctx, t.PoolID); err != nil {
			return time.Time{}, err
		}
		if sec != nil {
			if err := deleteOurs(ctx, secrets.Delete, sec.ObjectMeta, ownerOf(t)); err != nil {
				return time.Time{}, apiErr("deleting the join Secret "+Namespace+"/"+SecretName+" ("+why+")", err)
			}
			ic.o.Log.Info().Str("pool", t.Pool).Msg(why + ": the join token is revoked and its Secret deleted")
		}
		return since, nil
	}
	serial, created, ok, err := ic.o.Joins.Current(ctx, t.PoolID)
	if err != nil {
		return time.Time{}, err
	}
	// The Secret holds the current token only if it carries its serial: a
	// crash between minting a token and writing it leaves an older one.
	current := ok && sec != nil && sec.Annotations[annotationSerial] == strconv.FormatUint(serial, 10)
	tok, minted, err := ic.o.Joins.Token(ctx, t.PoolID, waiting, !current)
	if err != nil {
		return time.Time{}, err
	}
	if !minted {
		return created, nil
	}
	serial, created, _, err = ic.o.Joins.Current(ctx, t.PoolID)
	if err != nil {
		return time.Time{}, err
	}
	if _, err := secrets.Apply(ctx, secretApply(t.PoolID, tok, serial).WithLabels(ownerOf(t).Labels()), applyOpts()); err != nil {
		// The token minted is lost with this error; the next pass sees the
		// Secret's serial behind and mints another.
		return time.Time{}, apiErr("writing the join Secret "+Namespace+"/"+SecretName, err)
	}
	ic.o.Log.Info().Str("pool", t.Pool).Uint64("serial", serial).Int("nodes", len(waiting)).Msg("a join token for the Nodes waiting to join")
	return created, nil
}

// podTokensJoin reports whether the pool's node daemons join with their
// Pod tokens alone, so that no pool-wide Secret token is written: Pod
// tokens are reviewed (Options.PodTokens) and the cluster's server is
// Kubernetes PodTokensFrom or later. Elsewhere (an older cluster, or an
// agent that reviews none) the Secret token is how Nodes join.
func (ic *InCluster) podTokensJoin(kc kubernetes.Interface) (bool, error) {
	if ic.o.PodTokens == nil {
		return false, nil
	}
	info, err := kc.Discovery().ServerVersion()
	if err != nil {
		return false, apiErr("reading the cluster's Kubernetes version (whether its Pod tokens name their Node)", err)
	}
	v, err := version.ParseGeneric(info.GitVersion)
	if err != nil {
		// A version that does not parse is taken for an old one: the
		// Secret token still lets its Nodes join.
		ic.o.Log.Warn().Str("version", info.GitVersion).Msg("the cluster's version does not parse: the join Secret is kept")
		return false, nil
	}
	return v.AtLeast(version.MustParseGeneric(PodTokensFrom)), nil
}

// deleteOurs deletes an object only if it carries the pool's and the
// installation's labels, and only the very object read (a precondition on
// its UID).
func deleteOurs(ctx context.Context, del func(context.Context, string, metav1.DeleteOptions) error, m metav1.ObjectMeta, o providers.Owner) error {
	if !o.Owns(m.Labels) {
		return nil
	}
	uid := m.UID
	opts := metav1.DeleteOptions{}
	if uid != "" {
		opts.Preconditions = &metav1.Preconditions{UID: &uid}
	}
	err := del(ctx, m.Name, opts)
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		// Gone, or replaced by another object since the read: not ours
		// to delete.
		return nil
	}
	return err
}

func clip(names []string, n int) []string {
	if len(names) <= n {
		return names
	}
	return append(slices.Clone(names[:n]), fmt.Sprintf("and %d more", len(names)-n))
}

func cmpOr(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// Teardown undoes Apply: the token revoked, the labelled Nodes cordoned,
// then, once no GPU workload runs on them, the objects carrying the pool's
// label and the claim deleted, and last, on an adopted cluster, the access
// the adapter granted itself revoked. A claim held by another removes
// nothing and revokes nothing.
func (ic *InCluster) Teardown(ctx context.Context, t substrate.Target) error {
	// The token first: no Node joins a pool being torn down.
	if err := ic.o.Joins.Revoke(ctx, t.PoolID); err != nil {
		return err
	}
	if ic.o.PodTokens != nil {
		ic.o.PodTokens.Forget(t.PoolID)
	}
	kc, err := ic.client(ctx, t)
	if errors.Is(err, providers.ErrNotFound) {
		// The cluster is gone, and with it everything Apply put in it.
		ic.o.Log.Info().Str("pool", t.Pool).Msg("the cluster is gone: nothing of the node daemon is left to remove")
		return ic.o.Joins.Forget(ctx, t.PoolID)
	}
	if err != nil {
		return err
	}
	claim, err := ic.claim(ctx, kc, t, false)
	if errors.Is(err, errNotOurs) {
		ic.o.Log.Warn().Str("pool", t.Pool).Err(err).Msg("the claim is another's: the teardown removes nothing from the cluster and revokes nothing")
		return ic.o.Joins.Forget(ctx, t.PoolID)
	}
	if err != nil {
		return err
	}
	if err := ic.drain(ctx, kc, t); err != nil {
		return err
	}
	if err := ic.deleteObjects(ctx, kc, t); err != nil {
		return err
	}
	if claim != nil {
		if err := deleteOurs(ctx, kc.CoreV1().ConfigMaps(ClaimNamespace).Delete, claim.ObjectMeta, ownerOf(t)); err != nil {
			return apiErr("deleting the claim ConfigMap "+ClaimNamespace+"/"+ClaimName, err)
		}
	}
	if t.Mode == "adopt" && t.RevokeAccess != nil {
		if err := t.RevokeAccess(ctx); err != nil {
			return fmt.Errorf("revoking the access the agent granted itself in the adopted cluster: %w", err)
		}
	}
	return ic.o.Joins.Forget(ctx, t.PoolID)
}

// drain cordons the pool's Nodes and reports, as an error, the GPU
// workloads still running on them: the teardown waits for them to end and
// never evicts or deletes them.
func (ic *InCluster) drain(ctx context.Context, kc kubernetes.Interface, t substrate.Target) error {
	nodes, err := kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: nodeSelector(t.PoolID)})
	if err != nil {
		return apiErr("listing the Nodes labelled "+nodeSelector(t.PoolID), err)
	}
	cordon := []byte(`{"spec":{"unschedulable":true}}`)
	held := map[string]int{}
	var count int
	for _, n := range nodes.Items {
		if !n.Spec.Unschedulable {
			if _, err := kc.CoreV1().Nodes().Patch(ctx, n.Name, types.StrategicMergePatchType, cordon, metav1.PatchOptions{FieldManager: FieldManager}); err != nil && !apierrors.IsNotFound(err) {
				return apiErr("cordoning the Node "+n.Name, err)
			}
		}
		pods, err := kc.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + n.Name})
		if err != nil {
			return apiErr("listing the Pods on the Node "+n.Name, err)
		}
		for _, p := range pods.Items {
			if p.Spec.NodeName == n.Name && holdsTeardown(&p) {
				held[n.Name]++
				count++
			}
		}
	}
	if count == 0 {
		return nil
	}
	names := make([]string, 0, len(held))
	for n, c := range held {
		names = append(names, fmt.Sprintf("%s (%d)", n, c))
	}
	slices.Sort(names)
	return refusal.New(refusal.Unavailable, "waiting for %d GPU pods to end on %d cordoned Nodes: %s; nothing is forced: let them finish or delete them",
		count, len(held), strings.Join(clip(names, 10), ", "))
}

// holdsTeardown reports whether a pod keeps its Node from being torn down:
// it runs (or may still), is no DaemonSet's, and requests a GPU.
func holdsTeardown(p *corev1.Pod) bool {
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return false
	}
	for _, o := range p.OwnerReferences {
		if o.Kind == "DaemonSet" && o.APIVersion == appsv1.SchemeGroupVersion.String() {
			return false
		}
	}
	for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for _, c := range cs {
			for _, r := range GPUResources {
				// An extended resource's request equals its limit, and
				// either may be the one written.
				if q, ok := c.Resources.Requests[r]; ok && !q.IsZero() {
					return true
				}
				if q, ok := c.Resources.Limits[r]; ok && !q.IsZero() {
					return true
				}
			}
		}
	}
	return false
}

// deleteObjects deletes the node daemon's objects, each only if it carries
// the pool's label: the Secret, the DaemonSet, the ConfigMap, then the
// Namespace. It waits for nothing; a Namespace still terminating is gone
// from the agent's point of view (the namespace controller finishes it).
func (ic *InCluster) deleteObjects(ctx context.Context, kc kubernetes.Interface, t substrate.Target) error {
	core, apps := kc.CoreV1(), kc.AppsV1()
	steps := []struct {
		what string
		get  func() (metav1.ObjectMeta, error)
		del  func(context.Context, string, metav1.DeleteOptions) error
	}{
		{"the join Secret " + Namespace + "/" + SecretName, func() (metav1.ObjectMeta, error) {
			o, err := core.Secrets(Namespace).Get(ctx, SecretName, metav1.GetOptions{})
			return metaOf(o, err)
		}, core.Secrets(Namespace).Delete},
		{"the DaemonSet " + Namespace + "/" + DaemonSetName, func() (metav1.ObjectMeta, error) {
			o, err := apps.DaemonSets(Namespace).Get(ctx, DaemonSetName, metav1.GetOptions{})
			return metaOf(o, err)
		}, apps.DaemonSets(Namespace).Delete},
		{"the ConfigMap " + Namespace + "/" + ConfigMapName, func() (metav1.ObjectMeta, error) {
			o, err := core.ConfigMaps(Namespace).Get(ctx, ConfigMapName, metav1.GetOptions{})
			return metaOf(o, err)
		}, core.ConfigMaps(Namespace).Delete},
		{"the Namespace " + Namespace, func() (metav1.ObjectMeta, error) {
			o, err := core.Namespaces().Get(ctx, Namespace, metav1.GetOptions{})
			return metaOf(o, err)
		}, core.Namespaces().Delete},
	}
	for _, s := range steps {
		m, err := s.get()
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return apiErr("reading "+s.what, err)
		}
		if m.DeletionTimestamp != nil {
			continue
		}
		if err := deleteOurs(ctx, s.del, m, ownerOf(t)); err != nil {
			return apiErr("deleting "+s.what, err)
		}
	}
	return nil
}

// metaOf is the metadata of an object read, for the steps that treat every
// kind alike.
func metaOf[T interface{ GetObjectMeta() metav1.Object }](o T, err error) (metav1.ObjectMeta, error) {
	if err != nil {
		return metav1.ObjectMeta{}, err
	}
	m := o.GetObjectMeta()
	return metav1.ObjectMeta{Name: m.GetName(), UID: m.GetUID(), Labels: m.GetLabels(), DeletionTimestamp: m.GetDeletionTimestamp()}, nil
}
