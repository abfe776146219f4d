package substrate

// A step of the pass: a running cluster handed to the in-cluster half.

import (
	"context"
	"fmt"
	"slices"

	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

// inCluster hands a running cluster to the in-cluster half.
func (p *step) inCluster(ref providers.ClusterRef) (inClusterResult, error) {
	seam := p.r.opts.InCluster
	if seam == nil {
		return inClusterResult{noDaemon: true}, nil
	}
	if err := p.alive(); err != nil {
		return inClusterResult{}, err
	}
	if p.mode() == "adopt" && !p.seen.DaemonApplied && !p.seen.DaemonIntent {
		// The intent first, as the journal does for provider calls: what
		// the call puts in a cluster we do not delete must be found by the
		// teardown even if the agent dies before this pass is recorded.
		seen := p.seen
		seen.DaemonIntent = true
		if err := p.r.store.UpdateIn(p.ctx, func(tx *state.Tx) error { return tx.PutSubstrateSeen(seen) }); err != nil {
			return inClusterResult{}, err
		}
		p.seen.DaemonIntent = true
	}
	n, err := seam.Apply(p.ctx, p.target(ref))
	if err != nil {
		return inClusterResult{stop: stop{stopped: true, res: resLater, requeue: p.r.clock.Now().Add(p.r.opts.Every), message: fmt.Sprintf("node daemon: %v", err), reason: ReasonNodeDaemonApplyFailed}}, nil
	}
	p.seen.DaemonApplied = true
	p.seen.Nodes = state.SeenNodes{Listed: n.Listed, Joined: n.Joined}
	p.seen.Waiting = state.WaitingToJoin{Count: max(n.Listed-n.Joined, 0)}
	if !n.WaitingSince.IsZero() && p.seen.Waiting.Count > 0 {
		p.seen.Waiting.Since = n.WaitingSince.UnixMilli()
	}
	if n.Message != "" {
		p.note(n.Message)
	}
	return inClusterResult{applied: true}, nil
}

func (p *pass) target(ref providers.ClusterRef) Target {
	prov, acct := p.prov, p.acct
	t := Target{PoolID: p.want.PoolID, Pool: p.want.Pool, Tenant: p.want.Tenant, Owner: p.owner(), Mode: p.mode(), Account: acct, Cluster: ref,
		NodePools: slices.Clone(p.seen.NodePools),
		Credentials: func(ctx context.Context) (providers.Credential, error) {
			return prov.Credentials(ctx, acct, ref)
		},
		RevokeAccess: func(ctx context.Context) error { return prov.RevokeAccess(ctx, acct, ref) },
	}
	if p.seen.Cluster != nil {
		t.GlobalID = p.seen.Cluster.GlobalID
	}
	return t
}
