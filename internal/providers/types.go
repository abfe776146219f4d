package providers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Account is a provider account of the document: its name, its provider id
// and its config object.
//
// Config is kept as the raw JSON of the document's object rather than a
// map[string]any: each adapter decodes it into its own type (see
// DecodeAccountConfig), so numbers keep their written form and an unknown
// key can be refused by the adapter that knows the keys. Secret fields hold
// references (secret://, vault://, env://), resolved by the adapter at the
// moment of use and never kept.
type Account struct {
	Name     string          `json:"name"`
	Provider string          `json:"provider"`
	Config   json.RawMessage `json:"config,omitempty"`
}

// DecodeAccountConfig decodes an account's config strictly into v: an
// unknown key or a value of the wrong type is an Invalid error naming the
// account. An empty config decodes as {}.
func DecodeAccountConfig(acct Account, v any) error {
	raw := bytes.TrimSpace(acct.Config)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		raw = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return Invalidf("", "accountConfig", "provider account %q: config: %v", acct.Name, err)
	}
	if dec.More() {
		return Invalidf("", "accountConfig", "provider account %q: config: trailing data", acct.Name)
	}
	return nil
}

// ClusterRef names a cluster at a provider. Name and Location identify a
// cluster the substrate created, before the provider has answered with an
// ID; that is what lets the journal read a cluster back after a crash in the
// middle of EnsureCluster. ID, when known, is the provider's own id (the
// DOKS UUID, the GKE/EKS name path); adapters use it first.
type ClusterRef struct {
	Location string `json:"location"`
	Name     string `json:"name"`
	ID       string `json:"id,omitempty"`
}

func (r ClusterRef) String() string {
	if r.ID != "" {
		return r.ID
	}
	return r.Location + "/" + r.Name
}

// ClusterSpec is what the substrate asks of a cluster it creates.
//
// Location and PrivateNodes are the cluster's mode: they never change in
// place, and EnsureCluster refuses a change with Invalid (reason
// "modeChange"). Version changes in place (an upgrade; a downgrade is
// Invalid).
type ClusterSpec struct {
	// Name is derived from the pool, never random, so that a retry after a
	// lost answer finds the first attempt's cluster.
	Name         string `json:"name"`
	Location     string `json:"location"`
	PrivateNodes bool   `json:"privateNodes,omitempty"`
	// Version is the Kubernetes minor version wanted; "" is the provider's
	// default.
	Version string            `json:"version,omitempty"`
	Labels  map[string]string `json:"labels,omitempty"`
	// ClientToken is the journal's idempotency key for this operation, passed
	// where the provider has one (EKS clientRequestToken) and recorded by the
	// fake. Idempotency does not rest on it alone: Name does.
	ClientToken string `json:"clientToken,omitempty"`
}

// ClusterStatus is where a cluster is in its life at the provider.
type ClusterStatus string

// Cluster statuses. Ensure and delete are asynchronous: they return the
// cluster in Provisioning, Updating or Deleting and the caller observes it
// with GetCluster until Running (or NotFound after a delete).
const (
	ClusterProvisioning ClusterStatus = "provisioning"
	ClusterRunning      ClusterStatus = "running"
	ClusterUpdating     ClusterStatus = "updating"
	ClusterDeleting     ClusterStatus = "deleting"
	ClusterError        ClusterStatus = "error"
)

// Settled reports whether no operation is in progress on the cluster.
func (s ClusterStatus) Settled() bool { return s == ClusterRunning || s == ClusterError }

// ClusterOutputs are what a ready cluster tells the substrate. They are set
// once the cluster is running (GlobalID may be set earlier).
type ClusterOutputs struct {
	// Endpoint is the API server's https URL.
	Endpoint string `json:"endpoint,omitempty"`
	// Version is the control plane's Kubernetes version.
	Version  string `json:"version,omitempty"`
	Location string `json:"location,omitempty"`
	// NodeVersion is the Kubernetes version of the cluster's nodes.
	NodeVersion string `json:"nodeVersion,omitempty"`
	// GlobalID is the provider-global id of the cluster (GKE selfLink, EKS
	// ARN, DOKS UUID): the same string whichever account reads the cluster,
	// so that two accounts adopting one cluster can be told apart.
	GlobalID string `json:"globalId,omitempty"`
}

// Cluster is a cluster's state as the provider reports it.
type Cluster struct {
	Ref          ClusterRef        `json:"ref"`
	Status       ClusterStatus     `json:"status"`
	Message      string            `json:"message,omitempty"`
	PrivateNodes bool              `json:"privateNodes,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
	Outputs      ClusterOutputs    `json:"outputs"`
	// NodePoolsRevision changes whenever what a listing of the cluster's
	// node pools shows changes (a pool made, gone, resized, relabelled, its
	// status); "" when the provider cannot tell without listing them. The
	// discovery sweep lists a converged substrate's node pools only when it
	// moved (or is "").
	NodePoolsRevision string `json:"nodePoolsRevision,omitempty"`
	// Operation is the provider's id of the control plane upgrade an
	// EnsureCluster started (the EKS update id, the GKE operation name),
	// for the journal to record; "" when the call started none (DOKS gives
	// its upgrade no id).
	Operation string `json:"operation,omitempty"`
}

// KubernetesVersions are the Kubernetes minors an account offers for a
// cluster at a location, as the provider lists them (GKE's server config,
// EKS's DescribeClusterVersions, DOKS's options).
type KubernetesVersions struct {
	// Offered are the minors ("1.33"), oldest first, each once.
	Offered []string `json:"offered"`
	// Default is the minor a cluster created without a version gets; ""
	// when the provider does not say.
	Default string `json:"default,omitempty"`
}

// Accelerators are the GPUs of a node or a machine type.
type Accelerators struct {
	Type  string `json:"type"`
	Count int    `json:"count"`
}

// Autoscaling bounds a node pool's size.
type Autoscaling struct {
	MinNodes int `json:"minNodes"`
	MaxNodes int `json:"maxNodes"`
}

// Size is the part of a node pool that changes in place.
type Size struct {
	// NodeCount is the fixed size, or the initial size under Autoscaling.
	// Its meaning per provider (per zone or total) is in Rules.NodesPerZone.
	NodeCount   int          `json:"nodeCount"`
	Autoscaling *Autoscaling `json:"autoscaling,omitempty"`
}

// Shape is the part of a node pool that never changes in place: a change is
// refused with Invalid (reason "shapeChange"); make a new node pool instead.
type Shape struct {
	MachineType  string        `json:"machineType"`
	Accelerators *Accelerators `json:"accelerators,omitempty"`
	Spot         bool          `json:"spot,omitempty"`
	// DiskGiB 0 is the provider's default for the machine type.
	DiskGiB int `json:"diskGiB,omitempty"`
	// Zones empty is the cluster's default node zones.
	Zones []string `json:"zones,omitempty"`
}

// NodePoolSpec is what the substrate asks of one node pool (one flavor).
type NodePoolSpec struct {
	// Name is derived (NodePoolName), never random, for the same reason as
	// ClusterSpec.Name.
	Name string `json:"name"`
	Shape
	Size
	// Labels go on the pool's Kubernetes Nodes. They change in place.
	Labels map[string]string `json:"labels,omitempty"`
	// Version is the Kubernetes minor wanted for the pool's kubelets; ""
	// leaves them as they are (a new pool takes its cluster's). A later
	// version is reached in place, one minor per call and never past the
	// control plane (see NextPoolVersion).
	Version     string `json:"version,omitempty"`
	ClientToken string `json:"clientToken,omitempty"`
}

// NodePoolStatus is where a node pool is in its life at the provider.
type NodePoolStatus string

// Node pool statuses; the same rules as for clusters.
const (
	NodePoolProvisioning NodePoolStatus = "provisioning"
	NodePoolRunning      NodePoolStatus = "running"
	NodePoolUpdating     NodePoolStatus = "updating"
	NodePoolDeleting     NodePoolStatus = "deleting"
	NodePoolError        NodePoolStatus = "error"
)

// Settled reports whether no operation is in progress on the node pool.
func (s NodePoolStatus) Settled() bool { return s == NodePoolRunning || s == NodePoolError }

// NodePool is a node pool's state as the provider reports it.
type NodePool struct {
	Name string `json:"name"`
	// ID is the provider's id of the pool, when it has one apart from Name.
	ID string `json:"id,omitempty"`
	Shape
	Size
	Labels  map[string]string `json:"labels,omitempty"`
	Status  NodePoolStatus    `json:"status"`
	Message string            `json:"message,omitempty"`
	// Version is the Kubernetes version of the pool's kubelets as the
	// provider reports it ("1.34", "1.34.3-gke.1100000"); "" where the
	// provider does not say per pool (DOKS: its nodes follow the cluster).
	Version string `json:"version,omitempty"`
	// Operation is the provider's id of the upgrade an EnsureNodePool
	// started (the EKS update id, the GKE operation name), for the journal
	// to record and read back; "" when the call started none.
	Operation string `json:"operation,omitempty"`
}

// CredentialTTL is how long an admin credential lives: long enough for one
// run of the substrate, short enough that a leak expires on its own.
const CredentialTTL = 600 * time.Second

// Credential reaches a cluster's API as an admin. It is held in memory for
// one run: it is never stored, logged or published, so its String form
// hides the token and it refuses to be marshalled.
type Credential struct {
	Endpoint string
	// CACert is the PEM of the API server's certificate authority.
	CACert    []byte
	Token     string
	ExpiresAt time.Time
}

// String hides the token, so that a credential printed by mistake leaks
// nothing.
func (c Credential) String() string {
	return fmt.Sprintf("credential{endpoint: %s, expires: %s, token: [redacted]}", c.Endpoint, c.ExpiresAt.UTC().Format(time.RFC3339))
}

// GoString hides the token from %#v too.
func (c Credential) GoString() string { return c.String() }

// errCredentialNotStored is returned when something tries to marshal a
// credential, which would be the first step to storing it.
var errCredentialNotStored = errors.New("a credential is never stored or published")

// MarshalJSON refuses: credentials never leave memory.
func (c Credential) MarshalJSON() ([]byte, error) { return nil, errCredentialNotStored }

// MarshalText refuses, for encoders other than JSON.
func (c Credential) MarshalText() ([]byte, error) { return nil, errCredentialNotStored }

// MachineType is one of a provider's machine types at a location.
type MachineType struct {
	Name      string `json:"name"`
	Location  string `json:"location"`
	VCPU      int    `json:"vcpu,omitempty"`
	MemoryGiB int    `json:"memoryGiB,omitempty"`
	// Accelerators is nil for a machine type without GPUs of its own.
	Accelerators *Accelerators `json:"accelerators,omitempty"`
	// Attachable are the GPUs a machine type without its own can be given
	// at the location, each with the most one machine takes as its Count
	// (GKE's N1 machine types); empty where GPUs come built in or not at
	// all.
	Attachable []Accelerators `json:"attachable,omitempty"`
}

// LocationKind says whether a location is a region or a zone.
type LocationKind string

// Location kinds.
const (
	Region LocationKind = "region"
	Zone   LocationKind = "zone"
)

// Location is a place a provider account can put a cluster or nodes.
type Location struct {
	Name string       `json:"name"`
	Kind LocationKind `json:"kind"`
	// Region is the enclosing region of a zone; "" for a region.
	Region string `json:"region,omitempty"`
	// Zones are a region's zones, when the provider has them.
	Zones []string `json:"zones,omitempty"`
}

// Rules are where a provider differs (reference "Provider differences").
// Adapters answer them per account, since an account's options can change
// them (DOKS Spot needs allowSpot and previews).
type Rules struct {
	// ClusterLocations are the kinds of location a cluster may be put in:
	// GKE region and zone, EKS and DOKS region only.
	ClusterLocations []LocationKind `json:"clusterLocations"`
	// NodePoolZones: a node pool may be pinned to zones (GKE, EKS; not DOKS).
	NodePoolZones bool `json:"nodePoolZones"`
	// DiskSize: a node pool's disk size may be chosen (GKE, EKS; not DOKS).
	DiskSize bool `json:"diskSize"`
	// NodesPerZone: NodeCount is per zone of the node pool (GKE, EKS) rather
	// than the total (DOKS).
	NodesPerZone bool `json:"nodesPerZone"`
	// ZeroNodes: a fixed-size node pool may have NodeCount 0. Without it,
	// only an autoscaled pool may have a minimum of 0.
	ZeroNodes bool `json:"zeroNodes"`
	// Spot: Spot node pools are available to this account.
	Spot bool `json:"spot"`
}

// AllowsClusterIn reports whether a cluster may be put in a location of kind k.
func (r Rules) AllowsClusterIn(k LocationKind) bool {
	for _, c := range r.ClusterLocations {
		if c == k {
			return true
		}
	}
	return false
}
