package fake

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/providers"
)

// maxHistory bounds what the fake keeps of one cluster for listLag: the
// entries within the window and the one before it are enough, and a
// cluster that changes more often than this within one window is listed a
// little fresher than it should be rather than growing the file.
const maxHistory = 16

// ListEntry is what a listing showed of one cluster from At on. With
// listLag the fake keeps these (State.History) so that a listing can
// answer the account as it was listLag ago.
type ListEntry struct {
	At time.Time `json:"at"`
	// Gone: the cluster no longer existed from At on.
	Gone    bool                 `json:"gone,omitempty"`
	Project string               `json:"project,omitempty"`
	Seeded  bool                 `json:"seeded,omitempty"`
	Cluster providers.Cluster    `json:"cluster,omitzero"`
	Pools   []providers.NodePool `json:"pools,omitempty"`
}

// entryOf is what a listing shows of a cluster now.
func (f *Fake) entryOf(c *ClusterRecord, at time.Time) ListEntry {
	e := ListEntry{At: at, Project: c.Project, Seeded: c.Seeded, Cluster: f.view(c), Pools: []providers.NodePool{}}
	for _, name := range sortedKeys(c.NodePools) {
		e.Pools = append(e.Pools, poolView(c.NodePools[name]))
	}
	return e
}

// sameShown reports whether two entries show the same, whenever.
func sameShown(a, b ListEntry) bool {
	a.At, b.At = time.Time{}, time.Time{}
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}

// settled notes that an operation of a cluster (or of one of its pools)
// finished, and when on the clock: with stepEvery, when its steps ran out,
// which may be before the call that saw it; else now. Called with the lock
// held.
func (f *Fake) settled(clusterID string, op *Operation) {
	if f.cfg.ListLag <= 0 {
		return
	}
	at := f.clock.Now()
	if f.cfg.StepEvery > 0 && op.Observed < op.Steps {
		if t := op.AcceptedAt.Add(time.Duration(op.Steps-op.Observed) * f.cfg.StepEvery); t.Before(at) {
			at = t
		}
	}
	if f.settledAt == nil {
		f.settledAt = map[string]time.Time{}
	}
	if t, ok := f.settledAt[clusterID]; !ok || at.After(t) {
		f.settledAt[clusterID] = at
	}
}

// changedAt is when a change of a cluster's listing happened: when the
// operations it settled since the last write finished, else now; never
// before the entry it follows.
func (f *Fake) changedAt(id string, h []ListEntry, now time.Time) time.Time {
	at, ok := f.settledAt[id]
	if !ok {
		at = now
	}
	if len(h) > 0 && at.Before(h[len(h)-1].At) {
		at = h[len(h)-1].At
	}
	return at
}

// record notes what changed in the listings since the last write and
// prunes what the window no longer needs. Called by persist, with the lock
// held; nothing without listLag.
func (f *Fake) record() {
	lag := f.cfg.ListLag
	if lag <= 0 {
		return
	}
	defer clear(f.settledAt)
	now := f.clock.Now()
	if f.st.History == nil {
		f.st.History = map[string][]ListEntry{}
	}
	for id, c := range f.st.Clusters {
		h := f.st.History[id]
		if len(h) == 0 {
			// First seen: shown from when it was made (a cluster from before
			// listLag was on, or a seed, has no time and is shown at once).
			f.st.History[id] = []ListEntry{f.entryOf(c, c.CreatedAt)}
			continue
		}
		if e := f.entryOf(c, f.changedAt(id, h, now)); !sameShown(h[len(h)-1], e) {
			f.st.History[id] = append(h, e)
		}
	}
	horizon := now.Add(-lag)
	for id, h := range f.st.History {
		if f.st.Clusters[id] == nil && !h[len(h)-1].Gone {
			h = append(h, ListEntry{At: f.changedAt(id, h, now), Gone: true})
		}
		// Keep the entry in force at the horizon and every later one.
		if i := entryAt(h, horizon); i > 0 {
			h = h[i:]
		}
		if len(h) > maxHistory {
			h = h[len(h)-maxHistory:]
		}
		if len(h) == 1 && h[0].Gone && !h[0].At.After(horizon) {
			delete(f.st.History, id)
			continue
		}
		f.st.History[id] = h
	}
}

// entryAt is the index of the entry in force at t, or -1 when the cluster
// did not exist yet.
func entryAt(h []ListEntry, t time.Time) int {
	i := -1
	for j, e := range h {
		if e.At.After(t) {
			break
		}
		i = j
	}
	return i
}

// shownAt is what a listing lagging listLag shows of a cluster, or nil
// when it shows none.
func (f *Fake) shownAt(id string) *ListEntry {
	h := f.st.History[id]
	i := entryAt(h, f.clock.Now().Add(-f.cfg.ListLag))
	if i < 0 || h[i].Gone {
		return nil
	}
	e := h[i]
	return &e
}

// laggedClusters is ListClusters' answer with listLag: the account's
// clusters as they were, sorted by Ref.
func (f *Fake) laggedClusters(a account, labelKey string) []providers.Cluster {
	var out []providers.Cluster
	for _, id := range sortedKeys(f.st.History) {
		e := f.shownAt(id)
		if e == nil || (!e.Seeded && e.Project != a.Project) {
			continue
		}
		if _, ok := e.Cluster.Labels[labelKey]; ok {
			c := e.Cluster
			c.Labels = maps.Clone(c.Labels)
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(x, y providers.Cluster) int { return strings.Compare(x.Ref.String(), y.Ref.String()) })
	return out
}

// laggedPools is ListNodePools' answer with listLag for a cluster the
// account has now (c) or had listLag ago: its pools as they were, none
// when the cluster is newer than that; ok is false when the listing knows
// no such cluster.
func (f *Fake) laggedPools(a account, ref providers.ClusterRef, c *ClusterRecord) (pools []providers.NodePool, ok bool) {
	var e *ListEntry
	if c != nil {
		if e = f.shownAt(c.ID); e == nil {
			return []providers.NodePool{}, true
		}
	} else {
		// Gone now, perhaps still listed.
		for _, id := range sortedKeys(f.st.History) {
			x := f.shownAt(id)
			if x != nil && shownMatches(x, a, ref) {
				e = x
				break
			}
		}
		if e == nil {
			return nil, false
		}
	}
	out := make([]providers.NodePool, 0, len(e.Pools))
	for _, p := range e.Pools {
		out = append(out, poolView(&NodePoolRecord{NodePool: p}))
	}
	return out, true
}

// shownMatches is find's rule for a listed cluster.
func shownMatches(e *ListEntry, a account, ref providers.ClusterRef) bool {
	r := e.Cluster.Ref
	switch {
	case !e.Seeded && e.Project != a.Project, ref.Location != "" && r.Location != ref.Location:
		return false
	case ref.ID != "":
		return r.ID == ref.ID && (ref.Name == "" || r.Name == ref.Name)
	}
	return r.Name == ref.Name && (!e.Seeded || ref.Location != "")
}
