package substrate

// A step of the pass: the teardown (the in-cluster half, our node pools, a
// created cluster) and the removal of orphans.

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

// teardown undoes a substrate: the in-cluster half first, then our node
// pools, then a created cluster; on an adopted cluster only our node pools.
func (p *step) teardown() (gone bool, _ error) {
	// What present passes left open is abandoned: the teardown finds what
	// they made by name and label.
	for _, key := range p.keys() {
		op := p.ops[key]
		if op.State.Terminal() || isDelete(op.Step) {
			continue
		}
		if err := p.move(op, Abandon, nil, nil); err != nil {
			return false, err
		}
	}
	ref := p.clusterRef()
	if ref.Name == "" && ref.ID == "" {
		return true, nil // adopted, never read: nothing of ours is in it
	}
	if p.seen.DaemonApplied || p.seen.DaemonIntent {
		seam := p.r.opts.InCluster
		retry := p.r.clock.Now().Add(AdoptedRetry)
		if seam == nil {
			p.wait(ReasonNodeDaemonNotConfigured, "the node daemon was applied by an agent configured with substrate.nodeDaemon; configure it again so that the teardown can remove it", retry)
			return false, nil
		}
		p.r.mu.Lock()
		held := p.r.daemonRetry[p.want.PoolID]
		p.r.mu.Unlock()
		if p.r.clock.Now().Before(held.at) {
			p.wait(ReasonNodeDaemonRemoval, held.msg, held.at)
			return false, nil
		}
		if err := p.alive(); err != nil {
			return false, err
		}
		if err := seam.Teardown(p.ctx, p.target(ref)); err != nil {
			msg := fmt.Sprintf("removing the node daemon: %v; trying again at %s", err, retry.UTC().Format(time.RFC3339))
			p.r.mu.Lock()
			p.r.daemonRetry[p.want.PoolID] = retryNote{at: retry, msg: msg}
			p.r.mu.Unlock()
			p.wait(ReasonNodeDaemonRemoval, msg, retry)
			return false, nil
		}
		p.seen.DaemonApplied, p.seen.DaemonIntent = false, false
		p.seen.Nodes, p.seen.Waiting = state.SeenNodes{}, state.WaitingToJoin{}
	}
	if p.mode() == "create" {
		if err := p.sayWhoWaits(); err != nil {
			return false, err
		}
	}
	res, err := p.removeCluster(ref, "", p.mode() == "create")
	if err != nil {
		return false, err
	}
	return res.gone, nil
}

// sayWhoWaits tells, before a created cluster is deleted, which other
// pools are waiting to adopt it (their claim refused because this pool
// holds it): the teardown goes on, since the document asks for it, but
// never without saying so.
func (p *step) sayWhoWaits() error {
	key := p.seen.Claim
	if key == "" {
		return nil
	}
	var waiting []string
	err := p.r.store.View(func(tx *state.Tx) error {
		recs, err := tx.Substrates()
		for _, rec := range recs {
			if rec.Want.PoolID == p.want.PoolID || !rec.Want.Present || rec.Want.Spec.Cluster.Adopt == "" || rec.Seen == nil || rec.Seen.Cluster == nil {
				continue
			}
			if rec.Seen.Cluster.GlobalID == key && rec.Seen.Claim != key {
				waiting = append(waiting, rec.Want.Pool)
			}
		}
		return err
	})
	if err != nil || len(waiting) == 0 {
		return err
	}
	sort.Strings(waiting)
	msg := fmt.Sprintf("pool %s waits to adopt this cluster, but pool %s created it, so its teardown deletes it", strings.Join(waiting, ", "), p.want.Pool)
	p.note(msg)
	p.wait(ReasonAdopterWaiting, msg, time.Time{}) // said while it is deleting, too
	p.r.log.Warn().Str("pool", p.want.Pool).Strs("waiting", waiting).Msg("substrate: " + msg)
	return nil
}

// removeCluster deletes what the substrate made in a cluster: its node
// pools (only ours), then, with del, the cluster. Its result says whether
// nothing is left to do.
func (p *step) removeCluster(ref providers.ClusterRef, prefix string, del bool) (removeResult, error) {
	c, err := p.prov.GetCluster(p.ctx, p.acct, ref)
	if errors.Is(err, providers.ErrNotFound) {
		return removeResult{gone: true}, p.settleGone(prefix)
	}
	if err != nil {
		p.readFail("cluster "+cmpOr(ref.Name, ref.ID), err)
		return removeResult{}, nil
	}
	if del && !p.owner().Owns(c.Labels) && !p.deleteAccepted(prefix+c.Ref.Name) {
		// Deleted only when its labels say it is ours: a recorded id or a
		// name is not enough (another installation's cluster, labels taken
		// off by hand). The substrate lets go of it and says so. A delete
		// the provider already accepted is followed to its end instead: it
		// was decided on the labels the cluster had then, and the provider
		// is deleting it whatever they say now.
		p.foreign(c)
		p.note("left " + p.whose(c) + " in place: fleet-agent deletes only clusters carrying its labels")
		for _, key := range p.keys() {
			if op := p.ops[key]; op.Step == stepDeleteCluster && op.Object == prefix+c.Ref.Name && !op.State.Terminal() && op.State != state.InFlight {
				if err := p.move(op, Abandon, nil, nil); err != nil {
					return removeResult{}, err
				}
			}
		}
		return removeResult{gone: true}, nil
	}
	if prefix == "" {
		p.seen.Cluster = seenCluster(c, p.seen.Cluster)
	}
	if c.Status != providers.ClusterDeleting {
		list, err := p.prov.ListNodePools(p.ctx, p.acct, c.Ref)
		if err != nil && !errors.Is(err, providers.ErrNotFound) {
			p.readFail("the node pools of cluster "+c.Ref.Name, err)
			return removeResult{}, nil
		}
		listed := map[string]providers.NodePool{}
		busy := false
		for _, np := range list {
			listed[np.Name] = np
			if !p.ours(np) {
				continue
			}
			np, err := p.deleteNodePool(c.Ref, prefix, np.Name, "teardown")
			if err != nil {
				return removeResult{}, err
			}
			busy = busy || !np.gone
		}
		if err := p.settleUnlisted(prefix, listed, nil); err != nil {
			return removeResult{}, err
		}
		if busy {
			return removeResult{}, nil
		}
		if prefix == "" {
			p.seen.NodePools = nil
		}
	}
	if !del {
		return removeResult{gone: true}, nil
	}
	object := prefix + c.Ref.Name
	a, err := p.try(p.pending(object, stepDeleteCluster), stepDeleteCluster, object, request{Cluster: c.Ref}, false, nil)
	if err != nil {
		return removeResult{}, err
	}
	if a.over > 0 {
		p.problem(ReasonClusterKeepsComingBack, fmt.Sprintf("cluster %s was deleted %d times and keeps coming back at the provider; fleet-agent stops deleting it: find what makes it again (the provider's console or audit log), then apply again to try again",
			c.Ref.Name, a.over))
		p.scheduled = true
		p.schedule(p.r.clock.Now().Add(p.r.opts.Every))
		return removeResult{}, nil
	}
	out, op := a.out, a.op
	if prefix == "" {
		p.seen.Teardown = nil
		if op.Refusals > 0 {
			p.seen.Teardown = &state.TeardownRetry{Refusals: op.Refusals, NextAttemptAt: op.NextAttemptAt}
		}
	}
	if out.res == resDone {
		return removeResult{gone: true}, p.settleGone(prefix)
	}
	p.take(out, "")
	return removeResult{}, nil
}

// deleteAccepted reports whether the delete of object is accepted at the
// provider.
func (p *pass) deleteAccepted(object string) bool {
	op := p.pending(object, stepDeleteCluster)
	return op != nil && op.State == state.Accepted
}

// settleUnlisted finishes the node pool deletes (of objects with prefix)
// whose pool the listing no longer shows: a delete accepted before a crash
// is settled by its read-back, which finds the pool gone. Wanted pools'
// operations are their flavors' business.
func (p *step) settleUnlisted(prefix string, listed map[string]providers.NodePool, wanted map[string]bool) error {
	for _, key := range p.keys() {
		op := p.ops[key]
		name, ok := strings.CutPrefix(op.Object, prefix)
		if op.Step != stepDeleteNodePool || op.State.Terminal() || !ok || wanted[name] {
			continue
		}
		if prefix == "" && strings.HasPrefix(op.Object, orphanPrefix) {
			continue
		}
		if _, isListed := listed[name]; isListed {
			continue
		}
		if err := p.settle(op); err != nil {
			return err
		}
	}
	return nil
}

// settle drives an operation whose object a fresh read showed gone: a wait
// it was holding (a backoff after a failed read-back) no longer applies.
func (p *step) settle(op *state.JournalOp) error {
	if op.NextAttemptAt > 0 && op.State != state.InFlight {
		if err := p.move(op, Defer, func(o *state.JournalOp) { o.NextAttemptAt = 0 }, nil); err != nil {
			return err
		}
	}
	out, err := p.drive(op, false)
	if err != nil {
		return err
	}
	p.take(out, "")
	return nil
}

// settleGone finishes the delete operations of a cluster that is gone
// (their read-backs find it gone).
func (p *step) settleGone(prefix string) error {
	for _, key := range p.keys() {
		op := p.ops[key]
		if !isDelete(op.Step) || op.State.Terminal() || !strings.HasPrefix(op.Object, prefix) {
			continue
		}
		if prefix == "" && strings.HasPrefix(op.Object, orphanPrefix) {
			continue
		}
		if err := p.settle(op); err != nil {
			return err
		}
	}
	return nil
}

// orphanPrefix keeps the objects of an orphan's operations apart from the
// substrate's own.
const orphanPrefix = "orphan-"

// orphans removes the clusters the discovery sweep found carrying this
// pool's label that the substrate does not use.
func (p *step) orphans() error {
	if len(p.seen.Orphans) == 0 || p.prov == nil {
		return nil
	}
	var kept []state.SeenCluster
	for _, o := range p.seen.Orphans {
		ref := providers.ClusterRef{ID: o.ID, Name: o.Name, Location: o.Location}
		res, err := p.removeCluster(ref, orphanPrefix+o.ID+":", true)
		if err != nil {
			return err
		}
		if res.gone {
			p.r.log.Info().Str("pool", p.want.Pool).Str("cluster", o.Name).Str("id", o.ID).Msg("substrate: orphan cluster removed")
			continue
		}
		kept = append(kept, o)
	}
	p.seen.Orphans = kept
	return nil
}
