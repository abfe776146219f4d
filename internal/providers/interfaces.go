package providers

import "context"

// Verifier checks that an account's credentials work. A refusal is Terminal
// with reason "credentialsRefused"; a secret that cannot be resolved is
// Terminal with reason "secretMissing".
type Verifier interface {
	Verify(ctx context.Context, acct Account) error
}

// Catalog answers the live checks of a plan: where clusters may go, which
// machine types exist there and what GPUs they carry, and the provider's
// rules. It only reads.
type Catalog interface {
	// Locations lists the account's regions (and zones, with their region).
	Locations(ctx context.Context, acct Account) ([]Location, error)
	// MachineType describes a machine type at a location, or ErrNotFound
	// when it does not exist there.
	MachineType(ctx context.Context, acct Account, location, name string) (MachineType, error)
	// Rules are the provider's differences for this account.
	Rules(ctx context.Context, acct Account) (Rules, error)
	// Versions lists the Kubernetes minors the account offers for a
	// cluster at a location (a region or zone), and its default; the
	// location ErrNotFound when it does not exist.
	Versions(ctx context.Context, acct Account, location string) (KubernetesVersions, error)
}

// Clusters creates, reads and deletes clusters. Every call is idempotent:
// EnsureCluster of an existing cluster with the same mode returns it (and
// upgrades its version in place); DeleteCluster of a cluster already being
// deleted returns it in ClusterDeleting; one already gone is ErrNotFound,
// which the caller counts as done.
type Clusters interface {
	// EnsureCluster creates the cluster or converges the existing one of the
	// same Location and Name. The cluster returned is usually still
	// provisioning or updating; observe it with GetCluster.
	EnsureCluster(ctx context.Context, acct Account, spec ClusterSpec) (Cluster, error)
	// GetCluster reads a cluster by ref (ID if set, else Location and Name),
	// or ErrNotFound. It is the read-back that settles an ambiguous outcome.
	GetCluster(ctx context.Context, acct Account, ref ClusterRef) (Cluster, error)
	// DeleteCluster starts deleting the cluster and its node pools.
	DeleteCluster(ctx context.Context, acct Account, ref ClusterRef) (Cluster, error)
	// ReadAdoptable reads a cluster the substrate did not create, by the id
	// the owner wrote in `cluster.adopt` (GKE and EKS `<location>/<name>`,
	// DOKS the UUID), or ErrNotFound. Its Ref is what the other calls take.
	ReadAdoptable(ctx context.Context, acct Account, adoptID string) (Cluster, error)
	// ListClusters lists every cluster of the account that carries the label
	// key (with any value), sorted by Ref.String(), walking every page. It is
	// the substrate's discovery sweep: a cluster it made but never recorded
	// (a crash between create and record on a provider without client
	// tokens) is found here by the label it was made with. Adapters whose
	// provider spells labels differently (GKE resource labels, DOKS tags)
	// translate both ways, so Cluster.Labels holds this project's keys.
	ListClusters(ctx context.Context, acct Account, labelKey string) ([]Cluster, error)
}

// NodePools creates, resizes, lists and deletes a cluster's node pools, with
// the same idempotency as Clusters. A change of Shape is refused with
// Invalid (reason "shapeChange"); Size and Labels change in place.
type NodePools interface {
	// EnsureNodePool creates the pool or converges the existing one of the
	// same name (size and labels in place).
	EnsureNodePool(ctx context.Context, acct Account, cluster ClusterRef, spec NodePoolSpec) (NodePool, error)
	// GetNodePool reads one pool by name, or ErrNotFound.
	GetNodePool(ctx context.Context, acct Account, cluster ClusterRef, name string) (NodePool, error)
	// ResizeNodePool changes a pool's size in place.
	ResizeNodePool(ctx context.Context, acct Account, cluster ClusterRef, name string, size Size) (NodePool, error)
	// ListNodePools lists every pool of the cluster, ours and (on an adopted
	// cluster) the owner's, sorted by name.
	ListNodePools(ctx context.Context, acct Account, cluster ClusterRef) ([]NodePool, error)
	// DeleteNodePool starts deleting a pool; ErrNotFound when it is gone.
	DeleteNodePool(ctx context.Context, acct Account, cluster ClusterRef, name string) (NodePool, error)
}

// NodeRemover removes chosen nodes of a node pool and shrinks the pool by
// them, so that a scale-down takes the Nodes the substrate drained rather
// than the ones the provider would pick (EKS: Auto Scaling's
// TerminateInstanceInAutoScalingGroup with the desired capacity lowered;
// GKE: the instance group's deleteInstances; DOKS: a node delete without
// replacement). Optional: an adapter without it shrinks by ResizeNodePool
// and the provider chooses.
type NodeRemover interface {
	// RemoveNodes deletes the nodes whose Kubernetes Node carries one of
	// providerIDs (the Node's spec.providerID) and leaves the pool at size.
	// A providerID that is not a node of this pool is refused with Invalid
	// before anything is deleted; a node already gone is not an error;
	// ErrNotFound when the pool is gone. It may return before the nodes are
	// gone (the pool then reads Updating); reading the pool back shows size
	// once the call was taken, which is how a caller that crashed after
	// sending it knows not to send it again.
	RemoveNodes(ctx context.Context, acct Account, cluster ClusterRef, pool string, providerIDs []string, size Size) (NodePool, error)
}

// Access mints and withdraws the substrate's admin access to a cluster.
type Access interface {
	// Credentials mints an admin credential for the cluster's endpoint that
	// lives CredentialTTL. The caller holds it for one run, never stores it.
	Credentials(ctx context.Context, acct Account, cluster ClusterRef) (Credential, error)
	// RevokeAccess removes what Credentials granted inside an adopted
	// cluster (service account, binding, its namespace when empty), so that
	// no admin identity outlives the substrate. Revoking twice is not an
	// error.
	RevokeAccess(ctx context.Context, acct Account, cluster ClusterRef) error
}

// Kubernetes is everything a Kubernetes substrate asks of a provider. Every
// adapter satisfies it; consumers declare the parts they call.
type Kubernetes interface {
	Verifier
	Catalog
	Clusters
	NodePools
	Access
}
