package substrate

// A step of the pass: the cluster of a created or adopted substrate, made or
// found again, and told apart from clusters that are not ours.

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

func (p *pass) clusterRef() providers.ClusterRef {
	if c := p.seen.Cluster; c != nil && c.ID != "" {
		return providers.ClusterRef{Location: c.Location, Name: c.Name, ID: c.ID}
	}
	if cr := p.want.Spec.Cluster.Create; cr != nil {
		return providers.ClusterRef{Location: cr.Location, Name: ClusterName(p.want.Pool, p.owner())}
	}
	return providers.ClusterRef{}
}

// created makes (or finds again) the cluster a create-mode substrate owns
// and returns it once it runs; a stop while it is not there yet.
func (p *step) created() (clusterResult, error) {
	cr := p.want.Spec.Cluster.Create
	name := ClusterName(p.want.Pool, p.owner())
	// The version is asked for at create only: a running cluster's version
	// changes through upgrade hops, never through a create's request.
	spec := providers.ClusterSpec{Name: name, Location: cr.Location, PrivateNodes: cr.PrivateNodes,
		Version: cr.Version, Labels: p.owner().Labels()}
	// A delete left from a teardown the document took back is abandoned
	// where nothing runs at the provider yet, else followed until the
	// cluster is gone, and made again then.
	if op := p.pending(name, stepDeleteCluster); op != nil {
		out, err := p.drive(op, true)
		if err != nil {
			return clusterResult{}, err
		}
		if !p.take(out, "") {
			return clusterResult{stop: filed}, nil
		}
	}
	for range 2 {
		var obs *providers.Cluster
		op := p.pending(name, stepCreateCluster)
		if old := p.ops[opKey(p.want.PoolID, stepCreateCluster, name, p.want.Generation, p.seen.Recreated)]; op == nil && old != nil && old.State == state.Failed {
			// Refused for good at this generation, whether or not the
			// cluster it made (one in error at the provider) is recorded:
			// only a new document helps. The same after a restart as in
			// the pass that refused it (found by the exhaustive campaign:
			// a crash after the refusal read the failed cluster again and
			// never converged).
			return clusterResult{stop: stop{stopped: true, res: resFailed, message: p.describe(old) + ": " + failure(old)}}, nil
		}
		if op == nil && (p.seen.Cluster == nil || p.seen.Cluster.ID == "") {
			repeat := p.seen.Recreated
			if p.seen.GhostGeneration == p.want.Generation && p.seen.Ghosts > maxRepeats {
				// Like a node pool that keeps disappearing: made again a
				// few times, then the substrate says so instead of making
				// clusters without bound.
				return clusterResult{stop: refusedUntil(ReasonClusterKeepsDisappearing, fmt.Sprintf("cluster %s was made %d times since the document last changed and keeps disappearing at the provider; fleet-agent stops making it again: find what deletes it (the provider's console or audit log), then change the substrate in the document to try again",
					name, p.seen.Ghosts+1), p.r.clock.Now().Add(p.r.opts.Every))}, nil
			}
			if old := p.ops[opKey(p.want.PoolID, stepCreateCluster, name, p.want.Generation, repeat)]; old != nil {
				// Succeeded but its record was lost: its result says
				// which cluster it made; the read below confirms it.
				var ref providers.ClusterRef
				if json.Unmarshal(old.Result, &ref) == nil && ref.ID != "" {
					p.seen.Cluster = &state.SeenCluster{ID: ref.ID, Name: ref.Name, Location: ref.Location}
				}
			}
			if p.seen.Cluster == nil || p.seen.Cluster.ID == "" {
				met, end := p.meet(providers.ClusterRef{Location: cr.Location, Name: name})
				if end.stopped {
					return clusterResult{stop: end}, nil
				}
				if obs = met; obs == nil {
					var err error
					if op, err = p.open(stepCreateCluster, name, repeat, request{Create: &spec}); err != nil {
						return clusterResult{}, err
					}
				}
			}
		}
		if op != nil {
			out, err := p.drive(op, false)
			if err != nil {
				return clusterResult{}, err
			}
			if !p.take(out, "") {
				return clusterResult{stop: filed}, nil
			}
			obs = out.obs.Value.cluster
		}
		if !p.full && obs == nil && p.seen.Cluster != nil {
			return clusterResult{cluster: p.recorded()}, nil
		}
		if obs == nil || obs.Ref.ID == "" {
			c, err := p.prov.GetCluster(p.ctx, p.acct, p.clusterRef())
			if errors.Is(err, providers.ErrNotFound) {
				if err := p.ghost(); err != nil {
					return clusterResult{}, err
				}
				continue // make it again
			}
			if err != nil {
				p.readFail("cluster "+name, err)
				return clusterResult{stop: filed}, nil
			}
			obs = &c
		}
		return p.settledCluster(*obs), nil
	}
	return clusterResult{stop: filed}, nil
}

// recorded is the cluster as the record has it, for a pass that does not
// read the provider.
func (p *pass) recorded() *providers.Cluster {
	c := p.seen.Cluster
	return &providers.Cluster{Ref: p.clusterRef(), Status: providers.ClusterStatus(c.Status),
		Outputs: providers.ClusterOutputs{GlobalID: c.GlobalID, Endpoint: c.Endpoint, Version: c.Version, Location: c.Location}}
}

// meet reads, before the substrate creates its cluster, what already
// holds the name at the location: nothing (create it), a cluster of ours
// (taken back: a state file restored from a backup, a record lost), or a
// cluster that is not ours, which is never converged: the pass stops and
// says whose it is.
func (p *step) meet(ref providers.ClusterRef) (*providers.Cluster, stop) {
	c, err := p.prov.GetCluster(p.ctx, p.acct, ref)
	switch {
	case errors.Is(err, providers.ErrNotFound):
		return nil, stop{}
	case err != nil:
		p.readFail("cluster "+ref.Name, err)
		return nil, filed
	case !p.owner().Owns(c.Labels) || (c.Ref.Location != "" && c.Ref.Location != ref.Location):
		p.foreign(c)
		return nil, refusedUntil(ReasonClusterNotOurs, fmt.Sprintf("cannot create cluster %s in %s: %s; fleet-agent never changes or deletes a cluster that is not its own. Delete or rename that cluster, or rename this pool",
			ref.Name, ref.Location, p.whose(c)), p.r.clock.Now().Add(p.r.opts.Every))
	}
	return &c, stop{}
}

// whose says why a cluster is not this substrate's.
func (p *pass) whose(c providers.Cluster) string {
	o := p.owner()
	name := cmpOr(c.Ref.Name, c.Ref.ID)
	switch inst := o.Foreign(c.Labels); {
	case inst != "":
		return fmt.Sprintf("cluster %s belongs to installation %s (another fleet-agent state file using this account)", name, inst)
	case c.Labels[providers.LabelSubstratePool] == "":
		return fmt.Sprintf("cluster %s carries no %s label (not made by fleet-agent)", name, providers.LabelSubstratePool)
	case c.Labels[providers.LabelSubstratePool] != o.PoolID:
		return fmt.Sprintf("cluster %s belongs to pool id %s, not %s", name, c.Labels[providers.LabelSubstratePool], o.PoolID)
	case !o.Owns(c.Labels):
		return fmt.Sprintf("cluster %s carries no %s label", name, providers.LabelInstallation)
	}
	return fmt.Sprintf("cluster %s is in %s, not where the record says", name, cmpOr(c.Ref.Location, c.Outputs.Location))
}

// foreign logs and counts a cluster the pass found that is not its own and
// leaves alone.
func (p *pass) foreign(c providers.Cluster) {
	p.r.metrics.SweepDecision("foreign")
	p.r.log.Warn().Str("pool", p.want.Pool).Str("cluster", c.Ref.Name).Str("id", c.Ref.ID).
		Str("installation", c.Labels[providers.LabelInstallation]).Str("reason", p.whose(c)).
		Msg("substrate: a cluster that is not this substrate's; left alone")
}

// ghost forgets a created cluster that is gone at the provider, so that
// the pass makes it again (its claim goes with it).
func (p *pass) ghost() error {
	old := p.seen.Cluster
	if old == nil {
		old = &state.SeenCluster{Name: ClusterName(p.want.Pool, p.owner())}
	}
	p.r.log.Warn().Str("pool", p.want.Pool).Str("cluster", old.Name).Str("id", old.ID).
		Msg("substrate: the recorded cluster is gone at the provider; making it again")
	p.r.metrics.SweepDecision("ghost")
	claim := p.seen.Claim
	p.seen.Cluster, p.seen.Claim, p.seen.NodePools = nil, "", nil
	p.seen.Recreated++
	if p.seen.GhostGeneration != p.want.Generation {
		p.seen.GhostGeneration, p.seen.Ghosts = p.want.Generation, 0
	}
	p.seen.Ghosts++
	if err := p.alive(); err != nil {
		return err
	}
	seen := p.seen
	return p.r.store.UpdateIn(p.ctx, func(tx *state.Tx) error {
		if claim != "" {
			if err := tx.ReleaseCluster(claim, p.want.PoolID); err != nil {
				return err
			}
		}
		seen.Converged = false
		return tx.PutSubstrateSeen(seen)
	})
}

// settledCluster records an observed cluster and returns it when it runs.
func (p *pass) settledCluster(c providers.Cluster) clusterResult {
	p.seen.Cluster = seenCluster(c, p.seen.Cluster)
	name := c.Ref.Name
	poll := p.r.clock.Now().Add(p.r.opts.Poll)
	switch c.Status {
	case providers.ClusterRunning:
		return clusterResult{cluster: &c}
	case providers.ClusterUpdating:
		// An upgrade keeps the API up; node pools wait for it to settle.
		return clusterResult{cluster: &c, stop: waitFor(ReasonClusterUpdating, fmt.Sprintf("cluster %s is updating", name), poll)}
	case providers.ClusterError:
		if op := p.failedHop(name); op != nil {
			// Our own upgrade left it so: only a new document helps,
			// the same after a restart as in the pass that saw it fail.
			return clusterResult{stop: stop{stopped: true, res: resFailed, reason: ReasonUpgradeRefused,
				message: fmt.Sprintf("cluster %s is in error at the provider after its upgrade %s: %s; see the provider's console", name, hopOf(op), cmpOr(c.Message, failure(op)))}}
		}
		// A control plane hop still open is followed to its end (the
		// upgrade step reads it failed) rather than left open.
		var followed *providers.Cluster
		if p.pendingHop(stepUpgradeControlPlane, name) != nil {
			followed = &c
		}
		return clusterResult{cluster: followed, stop: refusedUntil(ReasonClusterInError, fmt.Sprintf("cluster %s is in error at the provider: %s; see the provider's console", name, cmpOr(c.Message, "no reason given")),
			p.r.clock.Now().Add(p.r.opts.Every))}
	case providers.ClusterDeleting:
		return clusterResult{stop: waitFor(ReasonClusterDeletedElsewhere, fmt.Sprintf("cluster %s is being deleted at the provider (not by fleet-agent); it is made again once it is gone", name), poll)}
	}
	return clusterResult{stop: waitFor(ReasonClusterProvisioning, fmt.Sprintf("cluster %s is %s", name, c.Status), poll)}
}

// adopted reads the cluster an adopt-mode substrate names; it is never
// created, changed or deleted.
func (p *step) adopted() (clusterResult, error) {
	id := p.want.Spec.Cluster.Adopt
	if !p.full && p.seen.Cluster != nil && p.seen.Cluster.ID != "" {
		return clusterResult{cluster: p.recorded()}, nil
	}
	c, err := p.prov.ReadAdoptable(p.ctx, p.acct, id)
	if errors.Is(err, providers.ErrNotFound) {
		msg := fmt.Sprintf("cluster %q not found through provider account %q; check policy.substrate.cluster.adopt and the account's permissions", id, p.acct.Name)
		if p.seen.Cluster != nil {
			p.r.metrics.SweepDecision("ghost")
			p.r.log.Warn().Str("pool", p.want.Pool).Str("adopt", id).Msg("substrate: the adopted cluster is gone at the provider")
			msg = fmt.Sprintf("the adopted cluster %q is gone at the provider; adopt another cluster or remove policy.substrate (with prune)", id)
		}
		return clusterResult{stop: refusedUntil(ReasonAdoptedClusterNotFound, msg, p.r.clock.Now().Add(p.r.opts.Every))}, nil
	}
	if err != nil {
		p.readFail("cluster "+id, err)
		return clusterResult{stop: filed}, nil
	}
	return p.settledCluster(c), nil
}
