package substrate

// A step of the pass: the claim, by which one cluster backs one pool.

import (
	"fmt"

	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/substrate/opjournal"
)

// claim records the cluster's provider-global id as this pool's before any
// node pool is made: a second pool reaching the same cluster (through
// another account) is refused here and makes nothing.
func (p *pass) claim() (claimResult, error) {
	c := p.seen.Cluster
	key := c.GlobalID
	if key == "" {
		// A provider without a global id: the claim holds per account.
		key = p.acct.Provider + ":" + p.acct.Name + ":" + c.ID
	}
	if p.seen.Claim == key {
		return claimResult{}, nil
	}
	if err := p.alive(); err != nil {
		return claimResult{}, err
	}
	var holder, holderPool string
	holderCreated := false
	seen := p.seen
	err := p.r.store.UpdateIn(p.ctx, func(tx *state.Tx) error {
		var err error
		if holder, err = tx.ClaimCluster(key, p.want.PoolID); err != nil {
			return err
		}
		if holder != p.want.PoolID {
			if w, err := tx.SubstrateWant(holder); err == nil && w != nil {
				holderPool, holderCreated = w.Pool, w.Spec.Cluster.Create != nil
			}
			return nil
		}
		if seen.Claim != "" {
			if err := tx.ReleaseCluster(seen.Claim, p.want.PoolID); err != nil {
				return err
			}
		}
		seen.Claim = key
		return tx.PutSubstrateSeen(seen)
	})
	if err != nil {
		return claimResult{}, err
	}
	if holder != p.want.PoolID {
		// What archiving the holder would do decides the advice: a
		// cluster the holder created is deleted with it, so it can never
		// be handed over that way.
		advice := "archiving that pool (leave it out of the document and apply with prune) removes only what fleet-agent put in the cluster and hands it over; or choose another cluster"
		if holderCreated {
			advice = "that pool created it, so archiving that pool deletes the cluster: choose another cluster (or create one with cluster.create)"
		}
		p.r.log.Warn().Str("pool", p.want.Pool).Str("globalId", key).Str("holder", holder).Msg("substrate: cluster claimed by another pool; nothing is made in it")
		return claimResult{refusedUntil(ReasonClaimRefused, fmt.Sprintf("cluster %s (%s) already backs pool %q; one cluster backs one pool: %s",
			cmpOr(c.Name, c.ID), key, cmpOr(holderPool, holder), advice), p.r.clock.Now().Add(p.r.opts.Every))}, nil
	}
	p.seen.Claim = key
	p.r.log.Info().Str("pool", p.want.Pool).Str("globalId", key).Msg("substrate: cluster claimed")
	return claimResult{}, p.r.at(opjournal.Point{Kind: opjournal.PointTransition, PoolID: p.want.PoolID, Step: "claim"})
}
