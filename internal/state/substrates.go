package state

import (
	"encoding/json"
	"fmt"

	"github.com/fleet-agent/fleet-agent/internal/fleet"
)

// The substrates bucket holds one record per pool id in two halves, each in
// its own inner bucket: what apply wants (want) and what the substrate
// reconciler saw and did (seen). The agent's apply and the reconciler both
// write, each in its own short transaction, and each writes only its half,
// so neither can overwrite a field of the other however their transactions
// interleave. The claims bucket maps a cluster's provider-global id to the
// pool whose substrate holds it: one cluster backs one pool.
var (
	bucketSubstrates = []byte("substrates")
	substratesWant   = []byte("want")
	substratesSeen   = []byte("seen")
	substratesClaims = []byte("claims")
)

// TeardownReason says why apply asked for a substrate's teardown.
type TeardownReason string

// The teardown reasons (docs/substrates.md: prune, archive, or
// policy.substrate removed with prune).
const (
	// TeardownArchived: the pool was archived (left out of the document
	// and applied with prune).
	TeardownArchived TeardownReason = "archived"
	// TeardownRemoved: the pool stays but its policy.substrate was removed
	// and applied with prune.
	TeardownRemoved TeardownReason = "removed"
)

// AccountCopy is a provider account as apply last saw it: its provider id
// and its config, whose secret fields hold references (never values). The
// reconciler reads the live account object first; the copy is what lets a
// teardown reach the provider after the same apply pruned the account too.
type AccountCopy struct {
	Provider string          `json:"provider"`
	Config   json.RawMessage `json:"config,omitempty"`
}

// SubstrateWant is apply's half of a substrate record: what the document
// asks of the pool's Kubernetes substrate.
type SubstrateWant struct {
	PoolID string `json:"poolId"`
	// Pool is the pool's fleet name; the created cluster's name derives
	// from it (docs/substrates.md).
	Pool   string `json:"pool"`
	Tenant string `json:"tenant"`
	// Account is the provider account's name, as the document names it.
	Account     string       `json:"account"`
	AccountCopy *AccountCopy `json:"accountCopy,omitempty"`
	// Spec is policy.substrate as the document says it. A torn-down
	// substrate keeps its last spec: the teardown needs its mode and place.
	Spec fleet.Substrate `json:"spec"`
	// Generation counts the changes apply made to what is wanted (the spec,
	// or present and torn down). The reconciler's operations are keyed by
	// it, so a changed document gets new idempotency keys and a retry of the
	// same change reuses the old ones.
	Generation uint64 `json:"generation"`
	// LegacyNames marks a substrate recorded before its state file had an
	// installation id: its names end in the pool id's last 6 characters and
	// what it made carries no installation label. It keeps them; every
	// substrate recorded since derives its names from the installation.
	LegacyNames bool `json:"legacyNames,omitempty"`
	// Present is false once a teardown was asked for.
	Present  bool           `json:"present"`
	Teardown TeardownReason `json:"teardown,omitempty"`
	// Commit is the commit of the apply that last changed the record, when
	// there was one; RecordedAt when (Unix ms).
	Commit     string `json:"commit,omitempty"`
	RecordedAt int64  `json:"recordedAt"`
}

// SubstrateState is where a substrate is (docs/substrates.md).
type SubstrateState string

// The states of a substrate.
const (
	SubstratePending  SubstrateState = "pending"
	SubstrateCreating SubstrateState = "creating"
	SubstrateReady    SubstrateState = "ready"
	SubstrateError    SubstrateState = "error"
	SubstrateDeleting SubstrateState = "deleting"
	SubstrateDeleted  SubstrateState = "deleted"
)

// SubstrateStates lists the states in the order of their lives, for
// metrics that report every state (zeros included).
var SubstrateStates = []SubstrateState{SubstratePending, SubstrateCreating, SubstrateReady, SubstrateError, SubstrateDeleting, SubstrateDeleted}

// SeenCluster is a cluster as the reconciler last saw it at the provider.
type SeenCluster struct {
	// ID is the provider's id; Name and Location are what the cluster was
	// created or adopted as. Together they are the providers.ClusterRef.
	ID       string `json:"id,omitempty"`
	Name     string `json:"name,omitempty"`
	Location string `json:"location,omitempty"`
	// GlobalID is the provider-global id (GKE selfLink, EKS ARN, DOKS UUID).
	GlobalID string `json:"globalId,omitempty"`
	Endpoint string `json:"endpoint,omitempty"`
	Version  string `json:"version,omitempty"`
	Status   string `json:"status,omitempty"`
}

// SeenNodePool is one flavor's node pool as last seen.
type SeenNodePool struct {
	Flavor string `json:"flavor"`
	Name   string `json:"name"`
	// Status is the provider's status, or "missing" when the pool does not
	// exist (yet).
	Status string `json:"status"`
	// Nodes is the node count the provider reports.
	Nodes   int    `json:"nodes"`
	Message string `json:"message,omitempty"`
}

// SeenNodes counts the substrate's Kubernetes Nodes and the joined ones (the
// in-cluster half fills them; zero until then).
type SeenNodes struct {
	Listed int `json:"listed"`
	Joined int `json:"joined"`
}

// WaitingToJoin is how many listed Nodes have no joined node daemon, and
// since when (Unix ms) none joined.
type WaitingToJoin struct {
	Count int   `json:"count"`
	Since int64 `json:"since,omitempty"`
}

// TeardownRetry is the schedule of a refused cluster delete: how many times
// the provider refused, and when the next attempt is due (Unix ms).
type TeardownRetry struct {
	Refusals      int   `json:"refusals"`
	NextAttemptAt int64 `json:"nextAttemptAt,omitempty"`
}

// SubstrateCondition is one step's verdict on a substrate: Type names the
// step, Status is "True" (done), "Unknown" (in progress) or "False" (needs
// a person), Reason a stable CamelCase code an alert can match
// (docs/substrates.md lists them) and Message the words for a person.
type SubstrateCondition struct {
	Type    string `json:"type"`
	Status  string `json:"status"`
	Reason  string `json:"reason"`
	Message string `json:"message,omitempty"`
}

// SubstrateSeen is the reconciler's half of a substrate record.
type SubstrateSeen struct {
	PoolID  string         `json:"poolId"`
	State   SubstrateState `json:"state"`
	Message string         `json:"message,omitempty"`
	// ObservedGeneration is the want generation the last pass worked from;
	// Converged says that pass left nothing to do for it.
	ObservedGeneration uint64 `json:"observedGeneration"`
	Converged          bool   `json:"converged,omitempty"`
	// Mode is "create" or "adopt".
	Mode      string         `json:"mode,omitempty"`
	Cluster   *SeenCluster   `json:"cluster,omitempty"`
	NodePools []SeenNodePool `json:"nodePools,omitempty"`
	Nodes     SeenNodes      `json:"nodes"`
	Waiting   WaitingToJoin  `json:"waitingToJoin"`
	// Claim is the key the substrate claimed in the claims bucket (the
	// cluster's provider-global id), "" before the claim.
	Claim string `json:"claim,omitempty"`
	// DaemonApplied records that the in-cluster half put the node daemon in
	// the cluster, so that a teardown knows it has something to remove.
	DaemonApplied bool `json:"daemonApplied,omitempty"`
	// DaemonIntent records, before the in-cluster half is first called on
	// an adopted cluster, that it may put things there: a kill during that
	// call followed by a prune must still hand the cluster to its teardown
	// (a created cluster is deleted whole instead).
	DaemonIntent bool `json:"daemonIntent,omitempty"`
	// Recreated counts the times the cluster was found gone at the provider
	// and made again; it keeps the operations of each incarnation apart.
	Recreated int `json:"recreated,omitempty"`
	// Ghosts counts the times the cluster was found gone since the want
	// generation GhostGeneration: past a few, it is not made again until
	// the document changes.
	Ghosts          int    `json:"ghosts,omitempty"`
	GhostGeneration uint64 `json:"ghostGeneration,omitempty"`
	// Orphans are clusters the discovery sweep found carrying this pool's
	// label that the substrate does not use: its passes remove them.
	Orphans  []SeenCluster  `json:"orphans,omitempty"`
	Teardown *TeardownRetry `json:"teardown,omitempty"`
	// Conditions are what each step of the last pass found, in the order
	// the steps ran; State and Message are summarized from them.
	Conditions []SubstrateCondition `json:"conditions,omitempty"`
	// StateSince is when State last changed, UpdatedAt when the record last
	// changed (Unix ms).
	StateSince int64 `json:"stateSince,omitempty"`
	UpdatedAt  int64 `json:"updatedAt,omitempty"`
}

// SubstrateRecord is both halves of one pool's record; Seen is nil before
// the reconciler first wrote.
type SubstrateRecord struct {
	Want SubstrateWant
	Seen *SubstrateSeen
}

// substrateBucket returns an inner bucket of substrates (innerBucket).
func (t *Tx) substrateBucket(name []byte) (kvBucket, error) {
	return t.innerBucket(bucketSubstrates, name)
}

// innerBucket returns the bucket name inside the top-level bucket root,
// creating both in a write transaction; nil in a read transaction that
// finds none (a file written before root existed).
func (t *Tx) innerBucket(root, name []byte) (kvBucket, error) {
	b := t.tx.Bucket(root)
	if b == nil {
		if !t.tx.Writable() {
			return nil, nil
		}
		var err error
		if b, err = t.tx.CreateBucketIfNotExists(root); err != nil {
			return nil, err
		}
	}
	if !t.tx.Writable() {
		return b.Bucket(name), nil
	}
	return b.CreateBucketIfNotExists(name)
}

func getRecord[T any](t *Tx, bucket []byte, key string) (*T, error) {
	b, err := t.substrateBucket(bucket)
	if err != nil || b == nil {
		return nil, err
	}
	data := b.Get([]byte(key))
	if data == nil {
		return nil, nil
	}
	var v T
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, fmt.Errorf("substrate record %s/%s is damaged: %w", bucket, key, err)
	}
	return &v, nil
}

func putRecord(t *Tx, bucket []byte, key string, v any) error {
	if key == "" {
		return fmt.Errorf("substrate record %s without a pool id", bucket)
	}
	b, err := t.substrateBucket(bucket)
	if err != nil {
		return err
	}
	return putIn(b, key, v)
}

// SubstrateWant returns apply's half of a pool's substrate record, or nil.
func (t *Tx) SubstrateWant(poolID string) (*SubstrateWant, error) {
	return getRecord[SubstrateWant](t, substratesWant, poolID)
}

// PutSubstrateWant writes apply's half of a record. Only apply calls it.
func (t *Tx) PutSubstrateWant(w SubstrateWant) error {
	return putRecord(t, substratesWant, w.PoolID, w)
}

// SubstrateSeen returns the reconciler's half of a pool's record, or nil.
func (t *Tx) SubstrateSeen(poolID string) (*SubstrateSeen, error) {
	return getRecord[SubstrateSeen](t, substratesSeen, poolID)
}

// PutSubstrateSeen writes the reconciler's half of a record. Only the
// reconciler calls it.
func (t *Tx) PutSubstrateSeen(s SubstrateSeen) error {
	return putRecord(t, substratesSeen, s.PoolID, s)
}

// Substrates returns every record that apply wrote, by pool id, with the
// reconciler's half when it has one.
func (t *Tx) Substrates() ([]SubstrateRecord, error) {
	wants, err := t.substrateBucket(substratesWant)
	if err != nil || wants == nil {
		return nil, err
	}
	seen, err := t.substrateBucket(substratesSeen)
	if err != nil {
		return nil, err
	}
	var out []SubstrateRecord
	err = wants.ForEach(func(k, v []byte) error {
		var r SubstrateRecord
		if err := json.Unmarshal(v, &r.Want); err != nil {
			return fmt.Errorf("substrate record want/%s is damaged: %w", k, err)
		}
		if seen != nil {
			if data := seen.Get(k); data != nil {
				r.Seen = &SubstrateSeen{}
				if err := json.Unmarshal(data, r.Seen); err != nil {
					return fmt.Errorf("substrate record seen/%s is damaged: %w", k, err)
				}
			}
		}
		out = append(out, r)
		return nil
	})
	return out, err
}

// clusterVersions reads the version each substrate's cluster last ran, by
// pool id, from the reconciler's records: a plan compares a document that
// names no version (or the one the provider chose) against it. It never
// creates a bucket, so a snapshot inside a write transaction changes
// nothing.
func (t *Tx) clusterVersions() (map[string]string, error) {
	root := t.tx.Bucket(bucketSubstrates)
	if root == nil {
		return nil, nil
	}
	seen := root.Bucket(substratesSeen)
	if seen == nil {
		return nil, nil
	}
	out := map[string]string{}
	err := seen.ForEach(func(k, v []byte) error {
		var r struct {
			Cluster *struct {
				Version string `json:"version"`
			} `json:"cluster"`
		}
		if err := json.Unmarshal(v, &r); err != nil {
			return fmt.Errorf("substrate record seen/%s is damaged: %w", k, err)
		}
		if r.Cluster != nil && r.Cluster.Version != "" {
			out[string(k)] = r.Cluster.Version
		}
		return nil
	})
	return out, err
}

// ClaimCluster claims a cluster (by its provider-global id) for a pool's
// substrate. It returns the pool that holds the claim: poolID when the claim
// is now (or already was) this pool's, another pool's id when that pool holds
// it; then nothing is written.
func (t *Tx) ClaimCluster(globalID, poolID string) (string, error) {
	if globalID == "" || poolID == "" {
		return "", fmt.Errorf("a cluster claim needs a global id and a pool id")
	}
	b, err := t.substrateBucket(substratesClaims)
	if err != nil {
		return "", err
	}
	if holder := b.Get([]byte(globalID)); holder != nil && string(holder) != poolID {
		return string(holder), nil
	}
	return poolID, b.Put([]byte(globalID), []byte(poolID))
}

// ClusterClaim returns the pool that holds the claim on a cluster, or "".
func (t *Tx) ClusterClaim(globalID string) (string, error) {
	b, err := t.substrateBucket(substratesClaims)
	if err != nil || b == nil {
		return "", err
	}
	return string(b.Get([]byte(globalID))), nil
}

// ReleaseCluster drops poolID's claim on a cluster; a claim another pool
// holds is left alone.
func (t *Tx) ReleaseCluster(globalID, poolID string) error {
	b, err := t.substrateBucket(substratesClaims)
	if err != nil {
		return err
	}
	if string(b.Get([]byte(globalID))) == poolID {
		return b.Delete([]byte(globalID))
	}
	return nil
}

// markLegacyNames marks every substrate a file recorded before it had an
// installation id (SubstrateWant.LegacyNames), in the transaction that
// gives it one: those substrates' clusters and node pools exist under the
// names they were given, and renaming them would make new ones.
func markLegacyNames(tx kvTx) error {
	root := tx.Bucket(bucketSubstrates)
	if root == nil {
		return nil
	}
	b := root.Bucket(substratesWant)
	if b == nil {
		return nil
	}
	var wants []SubstrateWant
	err := b.ForEach(func(k, v []byte) error {
		var w SubstrateWant
		if err := json.Unmarshal(v, &w); err != nil {
			return fmt.Errorf("substrate record want/%s is damaged: %w", k, err)
		}
		wants = append(wants, w)
		return nil
	})
	if err != nil {
		return err
	}
	for _, w := range wants {
		w.LegacyNames = true
		if err := putIn(b, w.PoolID, w); err != nil {
			return err
		}
	}
	return nil
}
