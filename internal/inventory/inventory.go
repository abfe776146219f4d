// Package inventory is the fleet as objects: the seven kinds, their derived
// ids, the stored object and the snapshot a plan reads. It sits between the
// store (which persists objects) and the plan (which diffs a document
// against them) so that neither has to import the other, and the plan never
// reaches bbolt.
package inventory

import (
	"crypto/sha256"
	"encoding/base32"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/fleet-agent/fleet-agent/internal/canon"
)

// Kind is one of the seven kinds of the fleet, in the words used everywhere.
type Kind string

// The kinds, and the order they are listed in (state, export, status).
const (
	ProviderAccount Kind = "providerAccount"
	Site            Kind = "site"
	Pool            Kind = "pool"
	OwnerQuota      Kind = "ownerQuota"
	Offer           Kind = "offer"
	Flavor          Kind = "flavor"
	SandboxTemplate Kind = "sandboxTemplate"
)

// emptyWhenLeftOut are the object fields a document always holds as an
// object: left out (or null), the document means an empty one, and the
// stored spec holds {} as an apply of such a document would.
var emptyWhenLeftOut = map[Kind]string{Pool: "policy", ProviderAccount: "config"}

// EmptyWhenLeftOut reports whether a kind's field, left out of the
// document, means an empty object rather than no value.
func EmptyWhenLeftOut(k Kind, field string) bool { return emptyWhenLeftOut[k] == field }

// Kinds lists every kind.
var Kinds = []Kind{ProviderAccount, Site, Pool, OwnerQuota, Offer, Flavor, SandboxTemplate}

// Valid reports whether k is a kind.
func (k Kind) Valid() bool { return slices.Contains(Kinds, k) }

// Prefix is the id prefix of a kind (docs/plan-format.md).
func (k Kind) Prefix() string {
	switch k {
	case ProviderAccount:
		return "pacc"
	case Site:
		return "site"
	case Pool:
		return "pool"
	case OwnerQuota:
		return "quota"
	case Offer:
		return "offer"
	case Flavor:
		return "flv"
	case SandboxTemplate:
		return "tpl"
	}
	return "obj"
}

var b32 = base32.StdEncoding.WithPadding(base32.NoPadding)

// ID derives an object's id from its idempotency key
// fleet:<tenant>:<kind>:<name>: the prefix, "_", and the first 26
// characters of the lowercase unpadded base32 of the key's SHA-256. The same
// name always gets the same id, so an apply retried after a failure
// converges instead of creating duplicates.
func ID(tenant string, kind Kind, name string) string {
	sum := sha256.Sum256([]byte("fleet:" + tenant + ":" + string(kind) + ":" + name))
	return kind.Prefix() + "_" + strings.ToLower(b32.EncodeToString(sum[:]))[:26]
}

// Names of the sub-objects (docs/plan-format.md).
func FlavorName(pool, name string) string         { return pool + "/" + name }
func OfferName(pool, tenant string) string        { return pool + " -> " + tenant }
func OwnerQuotaName(pool, resource string) string { return pool + ":" + resource }

// Object is one stored object. Spec holds its fields in the document's
// shape, except that references to sites, pools and provider accounts are
// ids; values are normalised JSON (int64 for integers, float64 for other
// numbers, string, bool, nil, map[string]any, []any).
type Object struct {
	Kind Kind   `json:"kind"`
	ID   string `json:"id"`
	// Name is the fleet name: the one fleet gave it (for objects an apply
	// created), else the id, which is how an export names objects fleet did
	// not create.
	Name     string         `json:"name"`
	Spec     map[string]any `json:"spec"`
	Archived bool           `json:"archived,omitempty"`
}

// Clone returns a deep copy, so a snapshot's objects can be changed freely.
func (o Object) Clone() Object {
	o.Spec = CloneValue(o.Spec).(map[string]any)
	return o
}

// CloneValue deep-copies normalised JSON.
func CloneValue(v any) any {
	switch x := v.(type) {
	case map[string]any:
		if x == nil {
			return map[string]any{}
		}
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = CloneValue(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = CloneValue(e)
		}
		return out
	}
	return v
}

// Snapshot is the fleet at one moment, as one read transaction saw it.
type Snapshot struct {
	byKind map[Kind][]Object
	byName map[Kind]map[string]int
	byID   map[string]Object
	// running is the Kubernetes version each substrate's cluster last ran,
	// by pool id, as its reconciler recorded it: the provider's choice
	// when the document named none, which a plan and an export compare
	// the document against.
	running map[string]string
}

// WithClusterVersions sets the running cluster versions (pool id to the
// version the provider reports) and returns s. It is set once, by the
// reader that made the snapshot.
func (s *Snapshot) WithClusterVersions(running map[string]string) *Snapshot {
	s.running = running
	return s
}

// ClusterVersion is the version the substrate of the pool with this id
// last ran, as the provider reports it ("1.33.5-gke.1200"); "" when no
// cluster of it was seen running.
func (s *Snapshot) ClusterVersion(poolID string) string { return s.running[poolID] }

// ClusterVersions returns every running cluster version by pool id (a
// copy), for a snapshot derived from this one.
func (s *Snapshot) ClusterVersions() map[string]string { return maps.Clone(s.running) }

// NewSnapshot indexes objects.
func NewSnapshot(objects []Object) *Snapshot {
	s := &Snapshot{byKind: map[Kind][]Object{}, byName: map[Kind]map[string]int{}, byID: map[string]Object{}}
	for _, o := range objects {
		s.byKind[o.Kind] = append(s.byKind[o.Kind], o)
	}
	for k, list := range s.byKind {
		slices.SortFunc(list, func(a, b Object) int { return strings.Compare(a.Name, b.Name) })
		idx := make(map[string]int, len(list))
		for i, o := range list {
			idx[o.Name] = i
			s.byID[o.ID] = o
		}
		s.byName[k] = idx
	}
	return s
}

// Objects returns a kind's objects sorted by name (archived pools included).
func (s *Snapshot) Objects(k Kind) []Object { return s.byKind[k] }

// ByName finds an object by kind and fleet name.
func (s *Snapshot) ByName(k Kind, name string) (Object, bool) {
	i, ok := s.byName[k][name]
	if !ok {
		return Object{}, false
	}
	return s.byKind[k][i], true
}

// ByID finds an object by id.
func (s *Snapshot) ByID(id string) (Object, bool) {
	o, ok := s.byID[id]
	return o, ok
}

// Len counts objects of every kind.
func (s *Snapshot) Len() int {
	n := 0
	for _, l := range s.byKind {
		n += len(l)
	}
	return n
}

// All returns every object, kind by kind in the order of Kinds.
func (s *Snapshot) All() []Object {
	var out []Object
	for _, k := range Kinds {
		out = append(out, s.byKind[k]...)
	}
	return out
}

// Equal reports whether two normalised values are the same JSON.
func Equal(a, b any) bool {
	ca, err1 := canon.Marshal(a)
	cb, err2 := canon.Marshal(b)
	return err1 == nil && err2 == nil && string(ca) == string(cb)
}

// Normalize turns decoded JSON (json.Number, map[string]any, []any) into
// normalised values, the form specs are compared and hashed in.
func Normalize(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = Normalize(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = Normalize(e)
		}
		return out
	case json.Number:
		if i, err := x.Int64(); err == nil && i <= 1<<53-1 && i >= -(1<<53-1) {
			return i
		}
		f, _ := x.Float64()
		if f == float64(int64(f)) && f <= 1<<53-1 && f >= -(1<<53-1) {
			return int64(f)
		}
		return f
	case int:
		return int64(x)
	case float64:
		if x == float64(int64(x)) && x <= 1<<53-1 && x >= -(1<<53-1) {
			return int64(x)
		}
		return x
	}
	return v
}

// SortedKeys returns a map's keys in byte order.
func SortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// DescribeID is a short human form of a kind and name, for messages.
func DescribeID(k Kind, name string) string { return fmt.Sprintf("%s %s", k, name) }
