package substrate

import (
	"context"
	"errors"
	"fmt"
	"github.com/rs/zerolog"
	"slices"
	"sort"

	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

// SweepReport counts the discovery sweep's decisions.
type SweepReport struct {
	// Listed counts the clusters carrying our label the accounts hold.
	Listed int
	// Adopted: an orphan matching a substrate that had no cluster recorded,
	// taken back as its cluster.
	Adopted int
	// Orphans: clusters certainly ours (our label, our name, a pool this
	// state file knows) that no substrate wants: handed to that pool's
	// substrate to remove.
	Orphans int
	// Reported: clusters or node pools with our label that this state file
	// cannot explain (another deployment's, or a name that is not ours):
	// logged and left alone.
	Reported int
	// Ghosts: recorded clusters or node pools gone at the provider; the
	// substrate's next pass makes them again or says they are gone.
	Ghosts int
	// NodePoolOrphans: our node pools of no wanted flavor.
	NodePoolOrphans int
	// Foreign: clusters carrying another installation's label (another
	// state file using the same account): logged, counted and, when a pool
	// of the same id is recorded here, said in its status; never touched.
	Foreign int
	// Moved: our node pools whose size or labels differ from the
	// document's (set at the provider by hand, or by a late request of a
	// leader whose term ended); their substrate's next pass is a full one.
	Moved int
	// Errors: listings that failed (tried again at the next sweep).
	Errors int
}

// Sweep compares what each provider account in use holds under our label
// with the records and the journal (Fleetplane's discovery sweep). Every
// decision is logged and counted; what it decides to change is done by the
// substrate's own next pass, under the same lock, so a sweep never races a
// pass. Run calls it every SweepEvery.
func (r *Reconciler) Sweep(ctx context.Context) (SweepReport, error) {
	var rep SweepReport
	// Its lists and reads ask the fence as they leave, as a pass's calls do.
	ctx = providers.WithFence(ctx, func() error { return r.store.FencedIn(ctx) })
	if err := r.alive(); err != nil {
		return rep, err
	}
	recs, err := r.records()
	if err != nil {
		return rep, err
	}
	r.mu.Lock()
	r.foreignNext = map[string][]string{}
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.foreign, r.foreignNext = r.foreignNext, nil
		r.mu.Unlock()
	}()
	byPool := map[string]state.SubstrateRecord{}
	type acctUse struct {
		acct providers.Account
		prov Provider
		recs []state.SubstrateRecord
	}
	accounts := map[string]*acctUse{}
	for _, rec := range recs {
		byPool[rec.Want.PoolID] = rec
		p := &pass{r: r, ctx: ctx, want: rec.Want}
		if p.want.Tenant == "" {
			p.want.Tenant = "root"
		}
		if p.account() != nil {
			continue // its passes say why
		}
		key := p.acct.Provider + "\x00" + p.acct.Name + "\x00" + string(p.acct.Config)
		if accounts[key] == nil {
			accounts[key] = &acctUse{acct: p.acct, prov: p.prov}
		}
		accounts[key].recs = append(accounts[key].recs, rec)
	}
	keys := make([]string, 0, len(accounts))
	for k := range accounts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	decide := func(name string, n *int) {
		*n++
		r.metrics.SweepDecision(name)
	}
	for _, k := range keys {
		use := accounts[k]
		list, err := use.prov.ListClusters(ctx, use.acct, providers.LabelSubstratePool)
		if err != nil {
			if err := r.alive(); err != nil {
				return rep, err
			}
			decide("error", &rep.Errors)
			r.log.Warn().Err(err).Str("account", use.acct.Name).Msg("substrate sweep: cannot list the account's clusters; the next sweep tries again")
			continue
		}
		rep.Listed += len(list)
		listed := map[string]bool{}
		byID := map[string]providers.Cluster{}
		for _, c := range list {
			listed[c.Ref.ID] = true
			byID[c.Ref.ID] = c
		}
		for _, c := range list {
			poolID := c.Labels[providers.LabelSubstratePool]
			rec, known := byPool[poolID]
			if inst := c.Labels[providers.LabelInstallation]; inst != "" && inst != r.installation {
				// Another installation's (prod and staging in one
				// account): never an orphan of ours, whatever its name.
				decide("foreign", &rep.Foreign)
				r.log.Warn().Str("account", use.acct.Name).Str("cluster", c.Ref.Name).Str("id", c.Ref.ID).Str("poolId", poolID).
					Str("installation", inst).Msg("substrate sweep: a cluster of another fleet-agent installation (another state file) in this account; left alone")
				if known {
					r.noteForeign(poolID, fmt.Sprintf("account %s also holds cluster %s of installation %s (another state file) for a pool of the same id; fleet-agent leaves it alone", use.acct.Name, c.Ref.Name, inst))
				}
				continue
			}
			if !known || !r.ownerOf(rec.Want).Owns(c.Labels) || !ownName(c.Ref.Name, r.ownerOf(rec.Want)) || !atRecordedPlace(rec.Want, c) {
				decide("reported", &rep.Reported)
				r.log.Warn().Str("account", use.acct.Name).Str("cluster", c.Ref.Name).Str("id", c.Ref.ID).Str("poolId", poolID).
					Msg("substrate sweep: a cluster carries fleet-agent's label but this state file does not know it (made by hand, or by a state file that was replaced), or it is not where the record says; left alone")
				continue
			}
			d, err := r.sweepCluster(ctx, use.prov, use.acct, rec.Want.PoolID, c, listed)
			if err != nil {
				return rep, err
			}
			switch d {
			case "adopted":
				decide(d, &rep.Adopted)
			case "orphan":
				decide(d, &rep.Orphans)
			}
		}
		for _, rec := range use.recs {
			n, err := r.sweepRecorded(ctx, use.prov, use.acct, rec, byID)
			if err != nil {
				return rep, err
			}
			for range n.ghosts {
				decide("ghost", &rep.Ghosts)
			}
			for range n.orphans {
				decide("nodePoolOrphan", &rep.NodePoolOrphans)
			}
			for range n.reported {
				decide("reported", &rep.Reported)
			}
			for range n.moved {
				decide("moved", &rep.Moved)
			}
		}
	}
	r.log.Info().Int("listed", rep.Listed).Int("adopted", rep.Adopted).Int("orphans", rep.Orphans).Int("reported", rep.Reported).
		Int("foreign", rep.Foreign).Int("ghosts", rep.Ghosts).Int("nodePoolOrphans", rep.NodePoolOrphans).Int("moved", rep.Moved).Int("errors", rep.Errors).Msg("substrate sweep: done")
	return rep, r.alive()
}

// sweepCluster decides about one listed cluster carrying a known pool's
// label and name, under that pool's lock.
func (r *Reconciler) sweepCluster(ctx context.Context, prov Provider, acct providers.Account, poolID string, c providers.Cluster, listed map[string]bool) (string, error) {
	l := r.lock(poolID)
	l.Lock()
	defer l.Unlock()
	if err := r.alive(); err != nil {
		return "", err
	}
	// A cluster the substrate records as its own, and not torn down, is
	// known: nothing to decide, nothing to read again.
	known, changed := false, false
	if err := r.store.View(func(tx *state.Tx) error {
		seen, err := tx.SubstrateSeen(poolID)
		if err != nil || seen == nil {
			return err
		}
		known = (seen.Cluster != nil && seen.Cluster.ID == c.Ref.ID && seen.State != state.SubstrateDeleted) ||
			slices.ContainsFunc(seen.Orphans, func(o state.SeenCluster) bool { return o.ID == c.Ref.ID })
		changed = seen.Cluster == nil || seen.Cluster.ID != c.Ref.ID || seen.Cluster.Status != string(c.Status)
		return nil
	}); err != nil {
		return "", err
	}
	if known {
		// Known: its next pass reads the provider back in full only when
		// the listing shows it changed (a cluster gone to error, being
		// deleted behind our back); a converged substrate at rest costs
		// the sweep's listings and nothing more.
		if changed {
			r.mu.Lock()
			r.verified[poolID] = false
			r.mu.Unlock()
		}
		return "", nil
	}
	// The listing was taken before the pool's lock: a pass may have torn
	// the cluster down meanwhile (found by the child-process campaign: a
	// cluster deleted a moment after the listing was declared an orphan of
	// its own, finished teardown). Read it again under the lock; a cluster
	// gone, or going, is no orphan.
	fresh, err := prov.GetCluster(ctx, acct, c.Ref)
	switch {
	case errors.Is(err, providers.ErrNotFound):
		return "", nil
	case err != nil:
		return "", nil // unknown now: the next sweep looks again
	case fresh.Status == providers.ClusterDeleting:
		return "", nil
	}
	c.Status = fresh.Status
	decision := ""
	err = r.store.UpdateIn(ctx, func(tx *state.Tx) error {
		want, err := tx.SubstrateWant(poolID)
		if err != nil || want == nil {
			return err
		}
		seen, err := tx.SubstrateSeen(poolID)
		if err != nil {
			return err
		}
		if seen == nil {
			seen = &state.SubstrateSeen{PoolID: poolID, State: state.SubstratePending}
		}
		var recorded string
		if seen.Cluster != nil {
			recorded = seen.Cluster.ID
		}
		if slices.ContainsFunc(seen.Orphans, func(o state.SeenCluster) bool { return o.ID == c.Ref.ID }) {
			return nil // known, being removed
		}
		if recorded == c.Ref.ID {
			if seen.State != state.SubstrateDeleted || c.Status == providers.ClusterDeleting {
				return nil // known, or torn down and still going away
			}
			// Torn down, and still there: the teardown runs again.
			decision = "orphan"
			seen.Converged = false
			return tx.PutSubstrateSeen(*seen)
		}
		creates := want.Present && want.Spec.Cluster.Create != nil && c.Ref.Name == ClusterName(want.Pool, r.ownerOf(*want)) && atRecordedPlace(*want, c)
		if creates && (recorded == "" || !listed[recorded]) {
			// The substrate's own cluster, made but never recorded (a
			// crash between create and record on a provider without
			// client tokens, a state file restored from a backup), or
			// recorded under an id that is gone: taken back.
			seen.Cluster = seenCluster(c, nil)
			decision = "adopted"
		} else {
			seen.Orphans = append(seen.Orphans, state.SeenCluster{ID: c.Ref.ID, Name: c.Ref.Name, Location: c.Ref.Location, GlobalID: c.Outputs.GlobalID})
			decision = "orphan"
		}
		seen.Converged = false
		return tx.PutSubstrateSeen(*seen)
	})
	if err != nil {
		return "", err
	}
	r.mu.Lock()
	r.verified[poolID] = false
	r.mu.Unlock()
	switch decision {
	case "adopted":
		r.log.Warn().Str("poolId", poolID).Str("cluster", c.Ref.Name).Str("id", c.Ref.ID).Msg("substrate sweep: an unrecorded cluster of this substrate was taken back as its cluster")
	case "orphan":
		r.log.Warn().Str("poolId", poolID).Str("cluster", c.Ref.Name).Str("id", c.Ref.ID).Msg("substrate sweep: a cluster of ours no substrate wants; its pool's substrate removes it")
	}
	return decision, nil
}

type recordedFindings struct{ ghosts, orphans, reported, moved int }

// sweepRecorded looks for a substrate's recorded cluster and node pools at
// the provider; what is missing or extra makes its next pass a full one.
//
// At rest it costs nothing but the account's cluster listing: a converged
// substrate's node pools are listed only when its cluster's node pool
// revision moved since they were last found as wanted, when the provider
// gives no revision, or once per NodePoolCheckEvery whatever it says.
func (r *Reconciler) sweepRecorded(ctx context.Context, prov Provider, acct providers.Account, rec state.SubstrateRecord, listed map[string]providers.Cluster) (recordedFindings, error) {
	var f recordedFindings
	s := rec.Seen
	if s == nil || s.Cluster == nil || s.Cluster.ID == "" || s.State == state.SubstrateDeleted {
		return f, nil
	}
	ref := providers.ClusterRef{ID: s.Cluster.ID, Name: s.Cluster.Name, Location: s.Cluster.Location}
	id := rec.Want.PoolID
	doubt := func() {
		r.mu.Lock()
		r.verified[id] = false
		r.mu.Unlock()
	}
	// A fresh event per line: a zerolog event is spent by its Msg.
	log := func() *zerolog.Event {
		return r.log.Warn().Str("pool", rec.Want.Pool).Str("cluster", ref.Name).Str("id", ref.ID)
	}
	adopted := rec.Want.Spec.Cluster.Adopt != ""
	shown, isListed := listed[ref.ID]
	if adopted || !isListed {
		// A created cluster carries our label, so missing from the listing
		// is a ghost unless the read says otherwise; an adopted one never
		// carries it and is read.
		c, err := prov.GetCluster(ctx, acct, ref)
		shown = c
		if errors.Is(err, providers.ErrNotFound) {
			f.ghosts++
			log().Msg("substrate sweep: a recorded cluster is gone at the provider")
			doubt()
			return f, nil
		}
		if err != nil {
			return f, r.alive()
		}
	}
	if !rec.Want.Present {
		return f, nil
	}
	if r.poolsUnchanged(rec, shown.NodePoolsRevision) {
		return f, nil
	}
	pools, err := prov.ListNodePools(ctx, acct, ref)
	if err != nil {
		return f, r.alive()
	}
	have := map[string]bool{}
	wanted := map[string]bool{}
	specs := map[string]providers.NodePoolSpec{}
	o := r.ownerOf(rec.Want)
	for _, fl := range rec.Want.Spec.Flavors {
		wanted[o.NodePoolName(fl.Name)] = true
		specs[o.NodePoolName(fl.Name)] = nodePoolSpec(o, fl)
	}
	for _, np := range pools {
		// A blue/green flavor's pools are under its generations' names.
		if fl, ok := generationFlavor(o, rec.Want.Spec.Flavors, np.Name); ok && !wanted[np.Name] {
			spec := nodePoolSpec(o, fl)
			spec.Name = np.Name
			wanted[np.Name], specs[np.Name] = true, spec
		}
	}
	for _, np := range pools {
		have[np.Name] = true
		label := np.Labels[providers.LabelSubstratePool]
		switch {
		case o.Foreign(np.Labels) != "":
			f.reported++
			r.log.Warn().Str("pool", rec.Want.Pool).Str("nodePool", np.Name).Str("installation", o.Foreign(np.Labels)).
				Msg("substrate sweep: a node pool in this substrate's cluster belongs to another installation; left alone")
		case o.Owns(np.Labels) && o.OwnsNodePoolName(np.Name) && !wanted[np.Name]:
			f.orphans++
			log().Str("nodePool", np.Name).Msg("substrate sweep: a node pool of ours that no flavor wants")
		case label != "" && label != id:
			f.reported++
			r.log.Warn().Str("pool", rec.Want.Pool).Str("nodePool", np.Name).Str("label", label).
				Msg("substrate sweep: a node pool in this substrate's cluster carries another pool's label; left alone")
		case o.Owns(np.Labels) && wanted[np.Name] && np.Status == providers.NodePoolRunning &&
			(!sizeMatches(np.Size, specs[np.Name].Size) || !labelsHold(np.Labels, specs[np.Name].Labels)):
			// A size or labels set at the provider (by hand, or by a
			// leader whose term ended, its request late): the next pass is
			// a full one and sets the document's again.
			f.moved++
			log().Str("nodePool", np.Name).Int("nodes", np.NodeCount).Msg("substrate sweep: a node pool of ours differs from the document in size or labels; its next pass sets them again")
		}
	}
	for _, np := range s.NodePools {
		if wanted[np.Name] && np.Status != "missing" && !have[np.Name] {
			f.ghosts++
			r.log.Warn().Str("pool", rec.Want.Pool).Str("nodePool", np.Name).Msg("substrate sweep: a recorded node pool is gone at the provider")
		}
	}
	if f.ghosts+f.orphans+f.moved > 0 {
		doubt()
	}
	r.markPools(rec, shown.NodePoolsRevision, f.ghosts+f.orphans+f.reported+f.moved == 0)
	return f, nil
}

// poolsUnchanged reports whether the sweep may skip listing a substrate's
// node pools: it is converged at its generation and verified, its cluster
// shows the node pool revision the last listing found as wanted, and that
// listing is younger than NodePoolCheckEvery.
func (r *Reconciler) poolsUnchanged(rec state.SubstrateRecord, revision string) bool {
	s := rec.Seen
	if revision == "" || s == nil || !s.Converged || s.ObservedGeneration != rec.Want.Generation {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	m, ok := r.pools[rec.Want.PoolID]
	return ok && r.verified[rec.Want.PoolID] && m.revision == revision && r.clock.Now().Sub(m.at) < r.opts.NodePoolCheckEvery
}

// markPools keeps what a listing of a substrate's node pools found: clean
// (nothing to say, the substrate converged) under the cluster's revision,
// else nothing, so that the next sweep lists them again.
func (r *Reconciler) markPools(rec state.SubstrateRecord, revision string, clean bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := rec.Seen
	if !clean || revision == "" || s == nil || !s.Converged || s.ObservedGeneration != rec.Want.Generation {
		delete(r.pools, rec.Want.PoolID)
		return
	}
	r.pools[rec.Want.PoolID] = poolsMark{revision: revision, at: r.clock.Now()}
}

// ownerOf is who a recorded substrate's objects belong to.
func (r *Reconciler) ownerOf(w state.SubstrateWant) providers.Owner {
	return providers.Owner{Installation: r.installation, PoolID: w.PoolID, Legacy: w.LegacyNames}
}

// atRecordedPlace reports whether a listed cluster sits where the record
// says the substrate's cluster is created (its location): one elsewhere is
// not taken for it, whatever its labels.
func atRecordedPlace(w state.SubstrateWant, c providers.Cluster) bool {
	cr := w.Spec.Cluster.Create
	if cr == nil {
		return false
	}
	loc := cmpOr(c.Ref.Location, c.Outputs.Location)
	return loc == "" || loc == cr.Location
}

// noteForeign keeps, until the next sweep, what the sweep found of another
// installation for a pool: its passes add it to the status message.
func (r *Reconciler) noteForeign(poolID, msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.foreignNext[poolID] = append(r.foreignNext[poolID], msg)
	if !slices.Contains(r.foreign[poolID], msg) {
		r.verified[poolID] = false // its next pass says it
	}
}

// foreignNotes are what the last sweep found of other installations for a
// pool.
func (r *Reconciler) foreignNotes(poolID string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.foreign[poolID])
}
