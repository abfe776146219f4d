package substrate

// A step of the pass: a created cluster brought to the Kubernetes minor the
// document names, in place, one minor per hop. A hop is the control plane
// one minor up, then each node pool in turn up to it; the next hop starts
// only once every node pool has caught up, so a kubelet is never newer
// than its API server and never more than providers.MaxKubeletLag minors
// behind it. Each provider call is a journaled operation of its own, read
// back after a crash and never sent twice. A hop is disruptive (the
// providers replace the nodes of a pool they upgrade), so one starts only
// inside a maintenance window; a hop already started is finished.

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

// The upgrade's steps: each is one journaled provider call.
const (
	stepUpgradeControlPlane = "upgradeControlPlane"
	stepUpgradeNodePool     = "upgradeNodePool"
)

// CondUpgrade is the upgrade step's condition type.
const CondUpgrade = "Upgrade"

// The upgrade step's reasons (docs/substrates.md lists them).
const (
	// ReasonVersionCurrent: the control plane and every node pool run the
	// minor the document names (or the document names none).
	ReasonVersionCurrent = "VersionCurrent"
	// ReasonUpgradeInProgress: a hop runs; the message names it and the
	// provider's progress.
	ReasonUpgradeInProgress = "UpgradeInProgress"
	// ReasonUpgradeRefused: the provider refused a hop; the message is its
	// refusal.
	ReasonUpgradeRefused = "UpgradeRefused"
)

// upgradeResult is the upgrade step's: busy says a hop is in flight.
type upgradeResult struct {
	busy bool
}

// hopObject names one hop of one object in the journal: the same hop
// retried keeps its key's object, the next hop gets its own.
func hopObject(name, to string) string { return name + "@" + to }

// pendingHop is the unfinished operation of step on the named object, of
// any hop and any generation: a hop in flight is finished whatever the
// document says meanwhile.
func (p *pass) pendingHop(step, name string) *state.JournalOp {
	var best *state.JournalOp
	for _, key := range p.keys() {
		op := p.ops[key]
		if op.Step != step || op.State.Terminal() || !strings.HasPrefix(op.Object, name+"@") {
			continue
		}
		if best == nil || op.CreatedAt > best.CreatedAt {
			best = op
		}
	}
	return best
}

// minorOf is a version's "major.minor", or "" when it reads as none.
func minorOf(v string) string {
	x, y, ok := providers.Minor(v)
	if !ok {
		return ""
	}
	return fmt.Sprintf("%d.%d", x, y)
}

// newer reports whether minor a is later than minor b (both read).
func newer(a, b string) bool {
	ax, ay, _ := providers.Minor(a)
	bx, by, _ := providers.Minor(b)
	return ax > bx || ax == bx && ay > by
}

// nextMinor is the minor after v.
func nextMinor(v string) string {
	x, y, _ := providers.Minor(v)
	return fmt.Sprintf("%d.%d", x, y+1)
}

// upgrade converges the cluster's version toward the document's, one call
// at a time. cluster is the cluster as this pass saw it; pools are the
// flavors' node pools as listed (nil when the node pools step did not
// list them: then only a control plane hop in flight is followed).
func (p *step) upgrade(cluster *providers.Cluster, pools []providers.NodePool) (upgradeResult, error) {
	cr := p.want.Spec.Cluster.Create
	if p.mode() != "create" || cr == nil || cluster == nil {
		return upgradeResult{}, nil
	}
	name := cluster.Ref.Name
	if op := p.pendingHop(stepUpgradeControlPlane, name); op != nil {
		done, err := p.followHop(op, "control plane")
		if err != nil || !done {
			return upgradeResult{busy: !done}, err
		}
		return upgradeResult{busy: true}, nil
	}
	for _, np := range pools {
		if op := p.pendingHop(stepUpgradeNodePool, np.Name); op != nil {
			done, err := p.followHop(op, "node pool "+np.Name)
			if err != nil || !done {
				return upgradeResult{busy: !done}, err
			}
			return upgradeResult{busy: true}, nil
		}
	}
	want := minorOf(cr.Version)
	have := minorOf(cluster.Outputs.Version)
	if want == "" || pools == nil {
		return upgradeResult{}, nil
	}
	if have == "" {
		p.note(fmt.Sprintf("cluster %s reports no Kubernetes version (%q); no upgrade is started until it does", name, cluster.Outputs.Version))
		return upgradeResult{}, nil
	}
	if newer(have, want) {
		p.note(fmt.Sprintf("cluster %s runs %s, newer than the document's %s; a cluster is never downgraded: write %s in policy.substrate.cluster.create.version", name, have, want, have))
		return upgradeResult{}, nil
	}
	// A hop never starts beside another change of a node pool (a resize,
	// a create, a delete): the provider would refuse it, and a hop's call
	// built from a listing that change made stale could undo it.
	if !p.upgradeDue(pools, have, want) {
		return upgradeResult{}, nil
	}
	if busy := p.nodePoolBusy(pools); busy != "" {
		p.wait(ReasonUpgradeInProgress, fmt.Sprintf("the upgrade of cluster %s to %s waits for node pool %s to settle", name, want, busy), p.r.clock.Now().Add(p.r.opts.Poll))
		return upgradeResult{busy: true}, nil
	}
	// Node pools behind the control plane catch up first, one at a time:
	// the rest of the hop that moved the control plane, finished whatever
	// the windows say.
	for _, np := range pools {
		pv := minorOf(np.Version)
		if pv == "" || !newer(have, pv) || !newer(want, pv) {
			continue // a pool that follows its cluster (DOKS), or caught up
		}
		return p.startPoolHop(cluster.Ref, np, pv, have)
	}
	if have == want {
		return upgradeResult{}, nil
	}
	to := nextMinor(have)
	if op := p.lastHop(stepUpgradeControlPlane, hopObject(name, to)); op == nil || op.State != state.Failed {
		if p.outsideWindow(fmt.Sprintf("the upgrade of cluster %s from %s to %s (control plane, then each node pool)", name, have, to)) {
			return upgradeResult{}, nil
		}
	}
	spec := providers.ClusterSpec{Name: name, Location: cr.Location, PrivateNodes: cr.PrivateNodes, Version: to, Labels: p.owner().Labels()}
	return p.startHop(stepUpgradeControlPlane, hopObject(name, to), request{Cluster: cluster.Ref, Create: &spec, Version: to, From: have}, "control plane")
}

// lastHop is the newest operation of one hop at this generation.
func (p *pass) lastHop(step, object string) *state.JournalOp {
	_, op := p.last(step, object)
	return op
}

// startPoolHop starts one node pool's hop from have to the next minor,
// asking nothing else of the pool than it has (its shape, size and labels
// as listed), so that the call is the version change alone.
func (p *step) startPoolHop(ref providers.ClusterRef, listed providers.NodePool, have, controlPlane string) (upgradeResult, error) {
	to := nextMinor(have)
	if op := p.lastHop(stepUpgradeNodePool, hopObject(listed.Name, to)); op != nil && op.State == state.Failed {
		p.refused("upgrade " + hopOf(op) + " refused: " + p.describe(op) + ": " + failure(op))
		return upgradeResult{}, nil
	}
	// Read right before: the call carries the pool's size and labels, and
	// must carry them as they are now.
	np, err := p.prov.GetNodePool(p.ctx, p.acct, ref, listed.Name)
	if err != nil {
		p.readFail("node pool "+listed.Name, err)
		return upgradeResult{busy: true}, nil
	}
	if np.Status != providers.NodePoolRunning || minorOf(np.Version) != have {
		p.wait(ReasonUpgradeInProgress, fmt.Sprintf("the upgrade of node pool %s to %s waits for it to settle (%s, on %s)", np.Name, to, np.Status, cmpOr(np.Version, "no version")), p.r.clock.Now().Add(p.r.opts.Poll))
		return upgradeResult{busy: true}, nil
	}
	spec := providers.NodePoolSpec{Name: np.Name, Shape: np.Shape, Size: np.Size, Labels: np.Labels, Version: to}
	return p.startHop(stepUpgradeNodePool, hopObject(np.Name, to), request{Cluster: ref, NodePool: &spec, Name: np.Name, Version: to, From: have}, "node pool "+np.Name)
}

// startHop opens one hop's operation and drives it.
func (p *step) startHop(step, object string, req request, what string) (upgradeResult, error) {
	a, err := p.try(nil, step, object, req, true, nil)
	switch {
	case err != nil:
		return upgradeResult{busy: true}, err
	case a.failed:
		p.refused(a.out.message)
		return upgradeResult{}, nil
	case a.over > 0:
		p.problem(ReasonUpgradeRefused, fmt.Sprintf("upgrade %s -> %s (%s) was made %d times and the provider still reports the old version; see the provider's console", req.From, req.Version, what, a.over))
		return upgradeResult{}, nil
	}
	return p.hopOutcome(a.op, a.out, what)
}

// followHop drives a hop in flight; done says it finished.
func (p *step) followHop(op *state.JournalOp, what string) (bool, error) {
	out, err := p.drive(op, false)
	if err != nil {
		return false, err
	}
	res, err := p.hopOutcome(op, out, what)
	return !res.busy && out.res == resDone, err
}

// hopOutcome files what a hop's drive found: the hop and the provider's
// progress while it runs, the provider's refusal when it refused.
func (p *step) hopOutcome(op *state.JournalOp, out outcome, what string) (upgradeResult, error) {
	req, err := decodeRequest(op)
	if err != nil {
		return upgradeResult{}, err
	}
	hop := fmt.Sprintf("%s -> %s (%s)", req.From, req.Version, what)
	switch out.res {
	case resDone, resSuperseded:
		// What comes next (a node pool, the next hop) is decided on the
		// next pass, at once, from a fresh listing.
		p.r.log.Info().Str("pool", p.want.Pool).Str("hop", hop).Msg("substrate: upgrade hop done")
		p.wait(ReasonUpgradeInProgress, "upgrade "+hop+": done; looking at what is next", p.r.clock.Now())
		return upgradeResult{}, nil
	case resWait:
		msg := "upgrade " + hop
		if progress := hopProgress(out.obs); progress != "" {
			msg += ": " + progress
		}
		p.wait(ReasonUpgradeInProgress, msg, out.until)
		return upgradeResult{busy: true}, nil
	case resFailed:
		p.refused("upgrade " + hop + " refused: " + out.message)
		return upgradeResult{}, nil
	}
	out.reason = ReasonUpgradeRefused
	p.take(out, "upgrade "+hop)
	return upgradeResult{busy: out.res == resRefused}, nil
}

// refused files a hop the provider refused for good: only a new document
// (or a fix at the provider) helps.
func (p *step) refused(msg string) {
	p.problem(ReasonUpgradeRefused, msg+"; fix what the provider names (or change the version in the document), then apply again")
}

// hopProgress is what the provider says of a hop while it runs.
func hopProgress(obs observed) string {
	switch {
	case obs.Value.pool != nil:
		return cmpOr(obs.Value.pool.Message, string(obs.Value.pool.Status))
	case obs.Value.cluster != nil:
		return cmpOr(obs.Value.cluster.Message, string(obs.Value.cluster.Status))
	}
	return ""
}

// callHop makes a hop's provider call: the control plane's through
// EnsureCluster, a node pool's through EnsureNodePool, each asking exactly
// one minor.
func (p *pass) callHop(op *state.JournalOp, req request) (observed, error) {
	if op.Step == stepUpgradeControlPlane {
		// No client token: the cluster's is its create's, and asking the
		// same minor again is the same hop at every provider (the one under
		// way, or nothing once reached).
		spec := *req.Create
		c, err := p.prov.EnsureCluster(p.ctx, p.acct, spec)
		return observed{Value: made{cluster: &c}}, err
	}
	spec := *req.NodePool
	spec.ClientToken = op.ClientToken
	np, err := p.prov.EnsureNodePool(p.ctx, p.acct, req.Cluster, spec)
	return observed{Value: made{pool: &np}}, err
}

// readHop reads a hop back: done once the object reports the hop's minor
// (or a later one) and is settled; while verifying (the call may not have
// happened) an object settled below it means the call is to be made; once
// accepted, one settled below it means the provider gave the hop up.
func (p *pass) readHop(op *state.JournalOp, req request) (observed, error) {
	var (
		o       observed
		version string
		settled bool
	)
	if op.Step == stepUpgradeControlPlane {
		c, err := p.prov.GetCluster(p.ctx, p.acct, req.Cluster)
		if errors.Is(err, providers.ErrNotFound) {
			return observed{Phase: phFailed, Message: fmt.Sprintf("cluster %s is gone", req.Cluster.Name), Doubt: true}, nil
		}
		if err != nil {
			return observed{}, err
		}
		o = observed{Value: made{cluster: &c}, Message: c.Message}
		version, settled = c.Outputs.Version, c.Status == providers.ClusterRunning
		if c.Status == providers.ClusterError {
			o.Phase, o.Message = phFailed, fmt.Sprintf("cluster %s is in error at the provider: %s", req.Cluster.Name, cmpOr(c.Message, "no reason given"))
			return o, nil
		}
	} else {
		np, err := p.prov.GetNodePool(p.ctx, p.acct, req.Cluster, req.Name)
		if errors.Is(err, providers.ErrNotFound) {
			return observed{Phase: phFailed, Message: fmt.Sprintf("node pool %s is gone", req.Name), Doubt: true}, nil
		}
		if err != nil {
			return observed{}, err
		}
		o = observed{Value: made{pool: &np}, Message: np.Message}
		version, settled = np.Version, np.Status.Settled() && np.Status != providers.NodePoolError
		if np.Status == providers.NodePoolError {
			o.Phase, o.Message = phFailed, fmt.Sprintf("node pool %s is in error at the provider: %s", req.Name, cmpOr(np.Message, "no reason given"))
			return o, nil
		}
	}
	reached := minorOf(version) != "" && !newer(req.Version, minorOf(version))
	switch {
	case settled && reached:
		o.Phase = phDone
	case !settled:
		o.Phase = phInProgress
	case op.State == state.Verifying:
		o.Phase = phAbsent
	default:
		o.Phase, o.Message = phFailed, fmt.Sprintf("the provider ended the upgrade with %s on %s, not %s", op.Object[:strings.LastIndex(op.Object, "@")], cmpOr(version, "no version"), req.Version)
	}
	return o, nil
}

// hopOf names a hop: "1.33 -> 1.34 (node pool x)".
func hopOf(op *state.JournalOp) string {
	req, _ := decodeRequest(op)
	what := "control plane"
	if op.Step == stepUpgradeNodePool {
		what = "node pool " + req.Name
	}
	return fmt.Sprintf("%s -> %s (%s)", req.From, req.Version, what)
}

// describeHop names a hop, for messages.
func describeHop(op *state.JournalOp, req request) string {
	what := "control plane"
	if op.Step == stepUpgradeNodePool {
		what = "node pool " + req.Name
	}
	return fmt.Sprintf("upgrading %s from %s to %s", what, req.From, req.Version)
}

// withUpgrade appends the upgrade step's condition when the substrate has
// one to show: a created cluster whose document names a version, or a hop
// still in the journal.
func (p *pass) withUpgrade(conds []Condition, cluster *providers.Cluster, pools []providers.NodePool) ([]Condition, error) {
	if cluster == nil || p.mode() != "create" {
		return conds, nil
	}
	cr := p.want.Spec.Cluster.Create
	inFlight := p.pendingHop(stepUpgradeControlPlane, cluster.Ref.Name) != nil || p.anyPoolHop()
	if !inFlight && (cr == nil || cr.Version == "" || pools == nil && p.full) {
		// Nothing to say: no version named, or a pass an earlier step
		// stopped before the node pools were listed.
		return conds, nil
	}
	s := p.step()
	if _, err := s.upgrade(cluster, pools); err != nil {
		return nil, err
	}
	ok := "runs " + cmpOr(minorOf(cluster.Outputs.Version), "its version")
	return append(conds, s.verdict(CondUpgrade, ReasonVersionCurrent, ok)), nil
}

// anyPoolHop reports whether a node pool's hop is unfinished.
func (p *pass) anyPoolHop() bool {
	for _, op := range p.ops {
		if op.Step == stepUpgradeNodePool && !op.State.Terminal() {
			return true
		}
	}
	return false
}

// StatusUpgrade is an unfinished upgrade hop, for the surface: which hop,
// and since when its operation was opened (Unix ms).
type StatusUpgrade struct {
	Hop   string `json:"hop"`
	Since int64  `json:"since"`
}

// upgradeOf is a substrate's unfinished hop as the journal holds it (nil:
// none).
func upgradeOf(tx *state.Tx, poolID string) (*StatusUpgrade, error) {
	ops, err := tx.JournalOps(poolID + "/")
	if err != nil {
		return nil, err
	}
	var out *StatusUpgrade
	for i := range ops {
		op := &ops[i]
		if (op.Step != stepUpgradeControlPlane && op.Step != stepUpgradeNodePool) || op.State.Terminal() {
			continue
		}
		if out == nil || op.CreatedAt < out.Since {
			out = &StatusUpgrade{Hop: hopOf(op), Since: op.CreatedAt}
		}
	}
	return out, nil
}

// nodePoolBusy names a flavor's node pool that is not settled, or that has
// a change of the node pools step unfinished ("": none).
func (p *pass) nodePoolBusy(pools []providers.NodePool) string {
	for _, np := range pools {
		// A pool in error is the node pools step's problem, not a change
		// to wait for: its hop is refused below (or was).
		if np.Status != providers.NodePoolRunning && np.Status != providers.NodePoolError {
			return np.Name
		}
	}
	for _, key := range p.keys() {
		if op := p.ops[key]; !op.State.Terminal() && slices.Contains(nodePoolSteps, op.Step) {
			req, _ := decodeRequest(op)
			if req.NodePool != nil {
				return req.NodePool.Name
			}
			return cmpOr(req.Name, op.Object)
		}
	}
	return ""
}

// upgradeDue reports whether a hop is left to make: the control plane
// below the document's minor, or a node pool below both it and the
// control plane.
func (p *pass) upgradeDue(pools []providers.NodePool, have, want string) bool {
	if have != want {
		return true
	}
	for _, np := range pools {
		if pv := minorOf(np.Version); pv != "" && newer(have, pv) && newer(want, pv) {
			return true
		}
	}
	return false
}

// failedHop is the control plane hop that failed at this generation, if
// one did: a cluster in error after it needs a new document, not a retry.
func (p *pass) failedHop(name string) *state.JournalOp {
	for _, key := range p.keys() {
		op := p.ops[key]
		if op.Step == stepUpgradeControlPlane && op.State == state.Failed && op.Generation == p.want.Generation && strings.HasPrefix(op.Object, name+"@") {
			return op
		}
	}
	return nil
}
