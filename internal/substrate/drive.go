package substrate

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/substrate/opjournal"
)

// The steps: each mutating provider call the substrate makes.
const (
	stepCreateCluster  = "createCluster"
	stepDeleteCluster  = "deleteCluster"
	stepCreateNodePool = "createNodePool"
	stepUpdateNodePool = "updateNodePool"
	stepResizeNodePool = "resizeNodePool"
	stepDeleteNodePool = "deleteNodePool"
	// stepRemoveNodes removes the Nodes a drained scale-down chose
	// (providers.NodeRemover) and leaves the node pool at its new size.
	stepRemoveNodes = "removeNodes"
)

// Steps lists every step, for tests and metrics.
var Steps = []string{stepCreateCluster, stepCreateNodePool, stepUpdateNodePool, stepResizeNodePool, stepDeleteNodePool, stepDeleteCluster,
	stepUpgradeControlPlane, stepUpgradeNodePool, stepRemoveNodes}

func isDelete(step string) bool { return step == stepDeleteCluster || step == stepDeleteNodePool }

// request is an operation's parameters, fixed when it is journaled.
type request struct {
	Cluster  providers.ClusterRef    `json:"cluster"`
	Create   *providers.ClusterSpec  `json:"create,omitempty"`
	NodePool *providers.NodePoolSpec `json:"nodePool,omitempty"`
	Name     string                  `json:"name,omitempty"`
	Size     *providers.Size         `json:"size,omitempty"`
	// Version is the minor an upgrade hop goes to, From the one it leaves.
	Version string `json:"version,omitempty"`
	From    string `json:"from,omitempty"`
	// ProviderIDs are the Nodes a removeNodes takes away.
	ProviderIDs []string `json:"providerIDs,omitempty"`
}

func decodeRequest(op *state.JournalOp) (request, error) {
	var r request
	if err := json.Unmarshal(op.Request, &r); err != nil {
		return r, fmt.Errorf("journal %s: request is damaged: %w", op.Key, err)
	}
	return r, nil
}

// made is what a call or a read-back of the substrate's operations finds:
// a cluster or a node pool.
type made struct {
	cluster *providers.Cluster
	pool    *providers.NodePool
}

// observed is what the journal's driver hands back of a call or a read-back.
type observed = opjournal.Observed[made]

// The phases of a read-back, and how a drive ended.
const (
	phAbsent     = opjournal.Absent
	phInProgress = opjournal.InProgress
	phDone       = opjournal.Finished
	phFailed     = opjournal.FailedThere
)

type result = opjournal.Result

const (
	resDone       = opjournal.Done
	resWait       = opjournal.Wait
	resRefused    = opjournal.Refused
	resFailed     = opjournal.Failed
	resSuperseded = opjournal.Superseded
	resLater      = opjournal.Later
)

// outcome is how a drive or a step's stop ended, for the step's report.
type outcome struct {
	res     result
	obs     observed
	until   time.Time
	message string
	// reason overrides the condition reason res implies (a step's stop).
	reason string
	// doubt: the drive learned something that needs a full look (what
	// the operation works on is gone).
	doubt bool
}

// call makes an operation's provider call, with its client token.
func (p *pass) call(op *state.JournalOp) (observed, error) {
	req, err := decodeRequest(op)
	if err != nil {
		return observed{}, err
	}
	ctx, acct := p.ctx, p.acct
	switch op.Step {
	case stepCreateCluster:
		spec := *req.Create
		spec.ClientToken = op.ClientToken
		c, err := p.prov.EnsureCluster(ctx, acct, spec)
		return observed{Value: made{cluster: &c}}, err
	case stepDeleteCluster:
		c, err := p.prov.DeleteCluster(ctx, acct, req.Cluster)
		return observed{Value: made{cluster: &c}}, err
	case stepCreateNodePool, stepUpdateNodePool:
		spec := *req.NodePool
		spec.ClientToken = op.ClientToken
		np, err := p.prov.EnsureNodePool(ctx, acct, req.Cluster, spec)
		return observed{Value: made{pool: &np}}, err
	case stepResizeNodePool:
		np, err := p.prov.ResizeNodePool(ctx, acct, req.Cluster, req.Name, *req.Size)
		return observed{Value: made{pool: &np}}, err
	case stepDeleteNodePool:
		np, err := p.prov.DeleteNodePool(ctx, acct, req.Cluster, req.Name)
		return observed{Value: made{pool: &np}}, err
	case stepRemoveNodes:
		return p.callRemoveNodes(req)
	case stepUpgradeControlPlane, stepUpgradeNodePool:
		return p.callHop(op, req)
	}
	return observed{}, fmt.Errorf("journal %s: unknown step %q", op.Key, op.Step)
}

// readBack reads the provider back by name to learn what an operation did.
// While verifying (the call may not have happened) an update counts as
// done only when the object already is what it asked; once accepted, a
// settled object is done.
func (p *pass) readBack(op *state.JournalOp) (observed, error) {
	req, err := decodeRequest(op)
	if err != nil {
		return observed{}, err
	}
	ctx, acct := p.ctx, p.acct
	switch op.Step {
	case stepUpgradeControlPlane, stepUpgradeNodePool:
		return p.readHop(op, req)
	case stepCreateCluster, stepDeleteCluster:
		ref := req.Cluster
		if op.Step == stepCreateCluster {
			ref = providers.ClusterRef{Location: req.Create.Location, Name: req.Create.Name}
		}
		c, err := p.prov.GetCluster(ctx, acct, ref)
		if errors.Is(err, providers.ErrNotFound) {
			if op.Step == stepDeleteCluster {
				return observed{Phase: phDone}, nil
			}
			return observed{Phase: phAbsent}, nil
		}
		if err != nil {
			return observed{}, err
		}
		o := observed{Value: made{cluster: &c}, Message: c.Message}
		if op.Step == stepCreateCluster && !p.owner().Owns(c.Labels) {
			// A cluster under the name that is not ours is never taken
			// for what the create made, nor converged.
			p.foreign(c)
			return observed{Phase: phFailed, Message: p.whose(c)}, nil
		}
		switch {
		case op.Step == stepDeleteCluster && c.Status == providers.ClusterDeleting:
			o.Phase = phInProgress
		case op.Step == stepDeleteCluster:
			o.Phase = phAbsent
		case c.Status == providers.ClusterRunning:
			o.Phase = phDone
		case c.Status == providers.ClusterError:
			o.Phase = phFailed
		default:
			o.Phase = phInProgress
		}
		return o, nil
	}
	name := req.Name
	if req.NodePool != nil {
		name = req.NodePool.Name
	}
	np, err := p.prov.GetNodePool(ctx, acct, req.Cluster, name)
	if errors.Is(err, providers.ErrNotFound) {
		switch op.Step {
		case stepDeleteNodePool:
			return observed{Phase: phDone}, nil
		case stepCreateNodePool:
			return observed{Phase: phAbsent}, nil
		}
		// An update of a pool that is gone cannot happen; the next pass
		// (a full one: the listing is read again) makes the pool again.
		return observed{Phase: phFailed, Message: fmt.Sprintf("node pool %s is gone", name), Doubt: true}, nil
	}
	if err != nil {
		return observed{}, err
	}
	o := observed{Value: made{pool: &np}, Message: np.Message}
	settled := np.Status.Settled()
	switch {
	case op.Step == stepDeleteNodePool && np.Status == providers.NodePoolDeleting:
		o.Phase = phInProgress
	case op.Step == stepDeleteNodePool:
		o.Phase = phAbsent
	case np.Status == providers.NodePoolError:
		o.Phase, o.Message = phFailed, fmt.Sprintf("node pool %s is in error at the provider: %s", name, np.Message)
	case np.Status == providers.NodePoolDeleting:
		o.Phase = phInProgress // going away: read again, then make it again
	case op.Step != stepCreateNodePool && op.State == state.Verifying && !applied(op.Step, req, np):
		o.Phase = phAbsent
	case settled:
		o.Phase = phDone
	default:
		o.Phase = phInProgress
	}
	return o, nil
}

// applied reports whether a node pool already is what an update asked.
func applied(step string, req request, np providers.NodePool) bool {
	switch step {
	case stepResizeNodePool:
		return sizeMatches(np.Size, *req.Size)
	case stepRemoveNodes:
		// The pool at the size asked: the call was taken (a caller that
		// lost its answer never sends it again).
		return sizeMatches(np.Size, *req.Size) && np.NodeCount <= req.Size.NodeCount
	}
	return sizeMatches(np.Size, req.NodePool.Size) && shapeMatches(np.Shape, req.NodePool.Shape) && labelsHold(np.Labels, req.NodePool.Labels)
}

// withoutIdentity reports whether a create's answer lacks what identifies
// what it made: a cluster's id, a node pool's name.
func withoutIdentity(step string, obs observed) bool {
	switch step {
	case stepCreateCluster:
		return obs.Value.cluster == nil || obs.Value.cluster.Ref.ID == ""
	case stepCreateNodePool:
		return obs.Value.pool == nil || obs.Value.pool.Name == ""
	}
	return false
}

// resultOfCall is what the journal keeps of an accepted call's answer: the
// provider's id of what it made.
func resultOfCall(obs observed) json.RawMessage {
	var v any
	switch {
	case obs.Value.pool != nil && obs.Value.pool.Operation != "":
		// The provider's id of the upgrade the call started (an EKS
		// update id, a GKE operation).
		v = map[string]string{"id": obs.Value.pool.ID, "operation": obs.Value.pool.Operation}
	case obs.Value.cluster != nil && obs.Value.cluster.Ref.ID != "" && obs.Value.cluster.Operation != "":
		v = struct {
			providers.ClusterRef
			Operation string `json:"operation"`
		}{obs.Value.cluster.Ref, obs.Value.cluster.Operation}
	case obs.Value.cluster != nil && obs.Value.cluster.Ref.ID != "":
		v = obs.Value.cluster.Ref
	case obs.Value.pool != nil && obs.Value.pool.ID != "":
		v = map[string]string{"id": obs.Value.pool.ID}
	default:
		return nil
	}
	data, _ := json.Marshal(v)
	return data
}

// acceptedTx writes what must land with an operation's acceptance: a
// created cluster's id and global id, so that no node pool is made before
// the cluster's identity is recorded.
func (p *pass) acceptedTx(op *state.JournalOp, obs observed) func(*state.Tx) error {
	if op.Step != stepCreateCluster || obs.Value.cluster == nil || obs.Value.cluster.Ref.ID == "" {
		return nil
	}
	p.seen.Cluster = seenCluster(*obs.Value.cluster, p.seen.Cluster)
	seen := p.seen
	return func(tx *state.Tx) error { return tx.PutSubstrateSeen(seen) }
}

func seenCluster(c providers.Cluster, old *state.SeenCluster) *state.SeenCluster {
	s := &state.SeenCluster{ID: c.Ref.ID, Name: c.Ref.Name, Location: c.Ref.Location, GlobalID: c.Outputs.GlobalID,
		Endpoint: c.Outputs.Endpoint, Version: c.Outputs.Version, Status: string(c.Status)}
	if old != nil && old.ID == s.ID {
		// Outputs arrive once the cluster runs; what was seen stays.
		s.GlobalID = cmpOr(s.GlobalID, old.GlobalID)
		s.Endpoint = cmpOr(s.Endpoint, old.Endpoint)
		s.Version = cmpOr(s.Version, old.Version)
	}
	if s.Location == "" {
		s.Location = c.Outputs.Location
	}
	return s
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// describe names what an operation does, for messages.
func (p *pass) describe(op *state.JournalOp) string {
	req, _ := decodeRequest(op)
	switch op.Step {
	case stepCreateCluster:
		if req.Create != nil {
			return "creating cluster " + req.Create.Name
		}
	case stepDeleteCluster:
		return "deleting cluster " + cmpOr(req.Cluster.Name, req.Cluster.ID)
	case stepCreateNodePool:
		if req.NodePool != nil {
			return "making node pool " + req.NodePool.Name
		}
	case stepUpdateNodePool:
		if req.NodePool != nil {
			return "changing node pool " + req.NodePool.Name
		}
	case stepResizeNodePool:
		if req.Size != nil {
			return fmt.Sprintf("resizing node pool %s to %s", req.Name, sizeText(*req.Size))
		}
	case stepDeleteNodePool:
		return "deleting node pool " + req.Name
	case stepRemoveNodes:
		if req.Size != nil {
			return fmt.Sprintf("removing %d drained nodes of node pool %s (to %s)", len(req.ProviderIDs), req.Name, sizeText(*req.Size))
		}
	case stepUpgradeControlPlane, stepUpgradeNodePool:
		return describeHop(op, req)
	}
	return op.Step + " " + op.Object
}

func sizeText(s providers.Size) string {
	if s.Autoscaling != nil {
		return fmt.Sprintf("%d to %d nodes (autoscaled)", s.Autoscaling.MinNodes, s.Autoscaling.MaxNodes)
	}
	return fmt.Sprintf("%d nodes", s.NodeCount)
}

// drive moves an operation as far as it goes now (opjournal.Drive), with
// the pass's calls and journal; stale: a newer generation wants something
// else.
func (p *pass) drive(op *state.JournalOp, stale bool) (outcome, error) {
	o, err := opjournal.Drive(op, opjournal.Inputs[made]{Ctx: p.ctx, Now: p.r.clock.Now, Poll: p.r.opts.Poll,
		Journal: passJournal{p}, Calls: passCalls{p}, Describe: p.describe(op), Delete: isDelete(op.Step), Stale: stale})
	return outcome{res: o.Result, obs: o.Obs, until: o.Until, message: o.Message, doubt: o.Doubt}, err
}

// failure says why an operation failed and what a person can do.
func failure(op *state.JournalOp) string { return opjournal.Failure(op, isDelete(op.Step)) }

// passJournal is the pass's journal, for the driver.
type passJournal struct{ p *pass }

func (j passJournal) Move(op *state.JournalOp, ev Event, change func(*state.JournalOp), also func(*state.Tx) error) error {
	return j.p.move(op, ev, change, also)
}
func (j passJournal) At(pt opjournal.Point) error { return j.p.r.at(pt) }
func (j passJournal) Alive() error                { return j.p.alive() }

// passCalls are the pass's provider calls, for the driver.
type passCalls struct{ p *pass }

func (c passCalls) Call(op *state.JournalOp) (observed, error)     { return c.p.call(op) }
func (c passCalls) ReadBack(op *state.JournalOp) (observed, error) { return c.p.readBack(op) }
func (c passCalls) Identified(op *state.JournalOp, obs observed) bool {
	return !withoutIdentity(op.Step, obs)
}
func (c passCalls) Result(obs observed) json.RawMessage { return resultOfCall(obs) }
func (c passCalls) OnAccept(op *state.JournalOp, obs observed) func(*state.Tx) error {
	return c.p.acceptedTx(op, obs)
}

// Progress is the status of what an accepted operation works on.
func (c passCalls) Progress(obs observed) string {
	switch {
	case obs.Value.cluster != nil:
		return " (" + string(obs.Value.cluster.Status) + ")"
	case obs.Value.pool != nil:
		return " (" + string(obs.Value.pool.Status) + ")"
	}
	return ""
}

// sizeMatches reports whether a node pool has the size wanted: a fixed
// count, or with autoscaling only the bounds (the current count is the
// autoscaler's).
func sizeMatches(have, want providers.Size) bool {
	if want.Autoscaling == nil {
		return have.Autoscaling == nil && have.NodeCount == want.NodeCount
	}
	return have.Autoscaling != nil && *have.Autoscaling == *want.Autoscaling
}

// shapeMatches compares what the document says of a node pool's shape; what
// it leaves to the provider (the disk, the zones, the GPUs of the machine
// type) is not compared.
func shapeMatches(have, want providers.Shape) bool {
	if have.MachineType != want.MachineType || have.Spot != want.Spot {
		return false
	}
	if want.Accelerators != nil && (have.Accelerators == nil || *have.Accelerators != *want.Accelerators) {
		return false
	}
	if want.DiskGiB != 0 && have.DiskGiB != want.DiskGiB {
		return false
	}
	if len(want.Zones) > 0 {
		a, b := slices.Clone(have.Zones), slices.Clone(want.Zones)
		slices.Sort(a)
		slices.Sort(b)
		if !slices.Equal(slices.Compact(a), slices.Compact(b)) {
			return false
		}
	}
	return true
}

// labelsHold reports whether have carries every label of want.
func labelsHold(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}
