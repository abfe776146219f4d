package fake

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/providers"
)

// stateVersion is the layout of the state file; a file of another version
// is refused rather than misread.
const stateVersion = 1

// State is the fake's provider-side truth: what a real provider would hold.
// Tests read it through Fake.Snapshot.
type State struct {
	Version int `json:"version"`
	// Seq counts the objects and credentials made; ids derive from it, so
	// the same calls give the same ids.
	Seq      int                       `json:"seq"`
	Clusters map[string]*ClusterRecord `json:"clusters"`
	// Credentials are the credentials issued, by the SHA-256 of the token:
	// the token itself is not kept, even by the fake.
	Credentials map[string]IssuedCredential `json:"credentials"`
	// Grants are the access the fake granted inside clusters through
	// Credentials (the service account and binding of a real provider), by
	// cluster id; RevokeAccess removes them.
	Grants map[string]Grant `json:"grants"`
	Faults []Fault          `json:"faults,omitempty"`
	// History is what the listings showed of each cluster and from when,
	// by cluster id, kept only with listLag (see record).
	History map[string][]ListEntry `json:"history,omitempty"`
}

// ClusterRecord is one cluster.
type ClusterRecord struct {
	ID           string                     `json:"id"`
	Project      string                     `json:"project"`
	Location     string                     `json:"location"`
	Name         string                     `json:"name"`
	CreatedAt    time.Time                  `json:"createdAt,omitzero"`
	PrivateNodes bool                       `json:"privateNodes,omitempty"`
	Version      string                     `json:"version"`
	NodeVersion  string                     `json:"nodeVersion"`
	Labels       map[string]string          `json:"labels,omitempty"`
	Status       providers.ClusterStatus    `json:"status"`
	Message      string                     `json:"message,omitempty"`
	Op           *Operation                 `json:"op,omitempty"`
	ClientTokens []string                   `json:"clientTokens,omitempty"`
	Seeded       bool                       `json:"seeded,omitempty"`
	NodePools    map[string]*NodePoolRecord `json:"nodePools"`
}

// NodePoolRecord is one node pool.
type NodePoolRecord struct {
	providers.NodePool
	Op           *Operation `json:"op,omitempty"`
	ClientTokens []string   `json:"clientTokens,omitempty"`
	// Seeded marks the owner's own pools of an adoptable cluster.
	Seeded bool `json:"seeded,omitempty"`
	// Removed are the node numbers RemoveNodes took away: a node's number
	// is never given again, so a providerID names one machine for ever.
	Removed []int `json:"removed,omitempty"`
}

// Operation is an asynchronous operation in flight.
type Operation struct {
	Kind string `json:"kind"` // create, update, upgrade (a node pool's), delete
	// Target is the version an update or upgrade moves to.
	Target string `json:"target,omitempty"`
	// ID names an upgrade (a control plane's or a node pool's), as the
	// providers' update ids do.
	ID    string `json:"id,omitempty"`
	Steps int    `json:"steps"`
	// Done is how many steps had passed when the operation was last
	// looked at: its progress.
	Done       int       `json:"done,omitempty"`
	Observed   int       `json:"observed"`
	AcceptedAt time.Time `json:"acceptedAt"`
}

// IssuedCredential is a credential the fake minted.
type IssuedCredential struct {
	ClusterID string    `json:"clusterId"`
	Account   string    `json:"account"`
	ExpiresAt time.Time `json:"expiresAt"`
	Revoked   bool      `json:"revoked,omitempty"`
}

// Grant is access the fake holds inside a cluster.
type Grant struct {
	Account string    `json:"account"`
	Since   time.Time `json:"since"`
}

func newState() State {
	return State{
		Version:     stateVersion,
		Clusters:    map[string]*ClusterRecord{},
		Credentials: map[string]IssuedCredential{},
		Grants:      map[string]Grant{},
	}
}

// load reads the state file; ok is false when there is none yet.
func load(path string) (st State, ok bool, err error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return newState(), false, nil
	}
	if err != nil {
		return State{}, false, err
	}
	st = newState()
	if err := json.Unmarshal(b, &st); err != nil {
		return State{}, false, fmt.Errorf("fake state %s: %w", path, err)
	}
	if st.Version != stateVersion {
		return State{}, false, fmt.Errorf("fake state %s: version %d, want %d", path, st.Version, stateVersion)
	}
	for _, c := range st.Clusters {
		if c.NodePools == nil {
			c.NodePools = map[string]*NodePoolRecord{}
		}
	}
	return st, true, nil
}

// save writes the state next to its final place, syncs it and renames it
// over the old one, then syncs the directory, so that a kill at any moment
// leaves either the old file or the new one, never half of one.
func save(path string, st *State) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	// The provider's truth may be opened before anything else made its
	// directory (a plan before the agent's first run).
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after a successful rename there is nothing left to remove
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// clone deep-copies a state through JSON: the fake is not fast code, and
// a copy that shares nothing is what a test must read.
func (st *State) clone() State {
	b, err := json.Marshal(st)
	if err != nil {
		panic(err) // only plain data in State
	}
	out := newState()
	if err := json.Unmarshal(b, &out); err != nil {
		panic(err)
	}
	return out
}

// The state file is one cloud account, and several agents (processes,
// installations) may use it at once: every call reads it and writes it back
// under an exclusive flock(2) of the sibling `<statePath>.lock`. The lock is
// on the sibling because save renames a new file over the state file, and a
// lock on a file that has been renamed away guards nothing.
//
// The lock file also holds a generation, a big-endian uint64 that every
// write bumps before it renames: a user whose last read or write was that
// generation has the state in memory already and need not parse the file
// again, so a single user pays for the lock and not for a reload per call.
// A writer killed between the bump and the rename costs the others one
// needless reload, never a stale read.

// lockPath is the account's lock file.
func lockPath(statePath string) string { return statePath + ".lock" }

// lockAccount opens the lock file and takes its exclusive lock, waiting for
// the other users. Closing the file releases the lock (as does the death of
// the process).
func lockAccount(statePath string) (*os.File, error) {
	// The provider's truth may be opened before anything else made its
	// directory (a plan before the agent's first run).
	if err := os.MkdirAll(filepath.Dir(statePath), 0o700); err != nil {
		return nil, err
	}
	lf, err := os.OpenFile(lockPath(statePath), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(lf.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		lf.Close()
		return nil, fmt.Errorf("locking %s: %w", lf.Name(), err)
	}
	return lf, nil
}

// readGeneration reads the generation a locked lock file holds; a new
// (empty) lock file is generation 0.
func readGeneration(lf *os.File) (uint64, error) {
	var b [8]byte
	n, err := lf.ReadAt(b[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, err
	}
	if n < len(b) {
		return 0, nil
	}
	return binary.BigEndian.Uint64(b[:]), nil
}

// writeGeneration records a new generation in a locked lock file.
func writeGeneration(lf *os.File, gen uint64) error {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], gen)
	_, err := lf.WriteAt(b[:], 0)
	return err
}
