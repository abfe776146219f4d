package providers

import (
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"strings"
)

// The labels the substrate puts on what it makes: clusters, node pools (and
// so their Nodes) and the objects inside a cluster. They are this project's
// names; the node daemon's DaemonSet selects on LabelSubstratePool.
const (
	LabelSubstratePool = "fleet-agent.dev/substrate-pool"
	// LabelInstallation carries the installation id of the state file whose
	// substrate made the object: two installations (prod and staging, a DR
	// copy) with the same tenant and pool names in one account compute the
	// same pool id, so the pool label alone cannot tell their objects apart.
	LabelInstallation = "fleet-agent.dev/installation"
	LabelCapacity     = "fleet-agent.dev/capacity"
	CapacitySpot      = "spot"
)

// Owner is who an object at a provider must belong to for a substrate to
// change or delete it: one pool of one installation. Nothing is ours unless
// it carries both labels with these values; the caller also checks that it
// sits where the record says (account and location).
type Owner struct {
	// Installation is the state file's installation id.
	Installation string
	PoolID       string
	// Legacy marks a substrate recorded before installations: its names end
	// in the pool id's last 6 characters, and what it made carries no
	// installation label (an absent one is accepted; another's never is).
	Legacy bool
}

var suffixEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// Suffix is the 6 characters that end the substrate's names: the last 6
// (base 32, lower case) of sha256(installation + ":" + pool id), so that
// two installations never pick the same names; a legacy substrate keeps
// the pool id's last 6.
func (o Owner) Suffix() string {
	if o.Legacy || o.Installation == "" {
		if len(o.PoolID) > 6 {
			return o.PoolID[len(o.PoolID)-6:]
		}
		return o.PoolID
	}
	sum := sha256.Sum256([]byte(o.Installation + ":" + o.PoolID))
	enc := strings.ToLower(suffixEncoding.EncodeToString(sum[:]))
	return enc[len(enc)-6:]
}

// NodePoolName is the name of the node pool of one flavor:
// `fa-<suffix>-<flavor>`. The prefix and the suffix keep it from ever
// matching a node pool the owner made on an adopted cluster, or another
// installation's.
func (o Owner) NodePoolName(flavor string) string {
	return "fa-" + o.Suffix() + "-" + flavor
}

// OwnsNodePoolName reports whether a node pool name is one this owner gives
// its flavors.
func (o Owner) OwnsNodePoolName(name string) bool {
	return strings.HasPrefix(name, "fa-"+o.Suffix()+"-")
}

// Labels are the two ownership labels of everything the substrate makes.
func (o Owner) Labels() map[string]string {
	l := map[string]string{LabelSubstratePool: o.PoolID}
	if o.Installation != "" {
		l[LabelInstallation] = o.Installation
	}
	return l
}

// PoolLabels are the labels of a flavor's node pool: the ownership labels,
// and for a Spot flavor its capacity.
func (o Owner) PoolLabels(spot bool) map[string]string {
	l := o.Labels()
	if spot {
		l[LabelCapacity] = CapacitySpot
	}
	return l
}

// Owns reports whether labels say the object is this owner's: the pool
// label names the pool and the installation label names the installation
// (absent is accepted only of a legacy substrate).
func (o Owner) Owns(labels map[string]string) bool {
	if labels[LabelSubstratePool] != o.PoolID {
		return false
	}
	inst, has := labels[LabelInstallation]
	if !has || inst == "" {
		return o.Legacy || o.Installation == ""
	}
	return inst == o.Installation
}

// Foreign returns the installation id an object's labels name when it is
// not this owner's installation ("" when they name none or ours): such an
// object is reported, never touched.
func (o Owner) Foreign(labels map[string]string) string {
	if inst := labels[LabelInstallation]; inst != "" && inst != o.Installation {
		return inst
	}
	return ""
}

// NodePoolName is Owner.NodePoolName of a substrate without an installation
// (one recorded before installations): `fa-<last 6 of the pool id>-<flavor>`.
func NodePoolName(poolID, flavor string) string {
	return Owner{PoolID: poolID, Legacy: true}.NodePoolName(flavor)
}

// PoolLabels is Owner.PoolLabels of a substrate without an installation.
func PoolLabels(poolID string, spot bool) map[string]string {
	return Owner{PoolID: poolID, Legacy: true}.PoolLabels(spot)
}

// MayConverge checks, before an adapter converges a cluster that already
// has the name a create asks for, that it is the creator's: the pool label
// the spec carries must be on the cluster with the same value, and so must
// the installation label when the cluster has one (a cluster made before
// installations has none, and its substrate converges it). A cluster of
// another pool or installation is never relabelled, upgraded or otherwise
// touched: the create is refused as Terminal (reason "nameTaken"). The
// substrate reads the name before creating, with the stricter rule of
// Owner.Owns, and never gets here with another's cluster; this keeps the
// adapters from doing it for any other caller.
func MayConverge(op string, spec ClusterSpec, existing Cluster) error {
	for _, key := range []string{LabelSubstratePool, LabelInstallation} {
		want, ok := spec.Labels[key]
		if !ok || want == "" {
			continue
		}
		got, has := existing.Labels[key]
		if key == LabelInstallation && !has {
			continue
		}
		if got != want {
			return &Error{Op: op, Class: Terminal, SideEffect: None, Reason: "nameTaken",
				Message: fmt.Sprintf("cluster %s exists and is not this one's to converge: its %s is %q, not %q; remove it or rename the pool", existing.Ref, key, got, want)}
		}
	}
	return nil
}
