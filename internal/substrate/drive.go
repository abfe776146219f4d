package substrate

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

// The steps: each mutating provider call the substrate makes.
const (
	stepCreateCluster  = "createCluster"
	stepDeleteCluster  = "deleteCluster"
	stepCreateNodePool = "createNodePool"
	stepUpdateNodePool = "updateNodePool"
	stepResizeNodePool = "resizeNodePool"
	stepDeleteNodePool = "deleteNodePool"
)

// Steps lists every step, for tests and metrics.
var Steps = []string{stepCreateCluster, stepCreateNodePool, stepUpdateNodePool, stepResizeNodePool, stepDeleteNodePool, stepDeleteCluster}

func isDelete(step string) bool { return step == stepDeleteCluster || step == stepDeleteNodePool }

// request is an operation's parameters, fixed when it is journaled.
type request struct {
	Cluster  providers.ClusterRef    `json:"cluster"`
	Create   *providers.ClusterSpec  `json:"create,omitempty"`
	NodePool *providers.NodePoolSpec `json:"nodePool,omitempty"`
	Name     string                  `json:"name,omitempty"`
	Size     *providers.Size         `json:"size,omitempty"`
}

func decodeRequest(op *state.JournalOp) (request, error) {
	var r request
	if err := json.Unmarshal(op.Request, &r); err != nil {
		return r, fmt.Errorf("journal %s: request is damaged: %w", op.Key, err)
	}
	return r, nil
}

// phase is what a read-back says of an operation's work.
type phase int

const (
	// phAbsent: the work did not happen (or its object vanished).
	phAbsent phase = iota
	phInProgress
	phDone
	// phFailed: the provider took the call and the work failed there.
	phFailed
)

type observed struct {
	phase   phase
	cluster *providers.Cluster
	pool    *providers.NodePool
	message string
	// doubt: what the operation works on is gone; the next pass must be a
	// full one.
	doubt bool
}

// result is how a drive of an operation ended for the pass.
type result int

const (
	resDone result = iota
	// resWait: in progress, or waiting out a backoff.
	resWait
	// resRefused: refused by the provider in a way a person must fix; the
	// journal tries again on the long schedule.
	resRefused
	// resFailed: refused for good at this generation.
	resFailed
	// resSuperseded: abandoned for a newer generation's operation.
	resSuperseded
	// resLater: in error, looked at again later; nothing in the journal
	// waits (a step's stop, never an operation's).
	resLater
)

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
		return observed{cluster: &c}, err
	case stepDeleteCluster:
		c, err := p.prov.DeleteCluster(ctx, acct, req.Cluster)
		return observed{cluster: &c}, err
	case stepCreateNodePool, stepUpdateNodePool:
		spec := *req.NodePool
		spec.ClientToken = op.ClientToken
		np, err := p.prov.EnsureNodePool(ctx, acct, req.Cluster, spec)
		return observed{pool: &np}, err
	case stepResizeNodePool:
		np, err := p.prov.ResizeNodePool(ctx, acct, req.Cluster, req.Name, *req.Size)
		return observed{pool: &np}, err
	case stepDeleteNodePool:
		np, err := p.prov.DeleteNodePool(ctx, acct, req.Cluster, req.Name)
		return observed{pool: &np}, err
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
	case stepCreateCluster, stepDeleteCluster:
		ref := req.Cluster
		if op.Step == stepCreateCluster {
			ref = providers.ClusterRef{Location: req.Create.Location, Name: req.Create.Name}
		}
		c, err := p.prov.GetCluster(ctx, acct, ref)
		if errors.Is(err, providers.ErrNotFound) {
			if op.Step == stepDeleteCluster {
				return observed{phase: phDone}, nil
			}
			return observed{phase: phAbsent}, nil
		}
		if err != nil {
			return observed{}, err
		}
		o := observed{cluster: &c, message: c.Message}
		if op.Step == stepCreateCluster && !p.owner().Owns(c.Labels) {
			// A cluster under the name that is not ours is never taken
			// for what the create made, nor converged.
			p.foreign(c)
			return observed{phase: phFailed, message: p.whose(c)}, nil
		}
		switch {
		case op.Step == stepDeleteCluster && c.Status == providers.ClusterDeleting:
			o.phase = phInProgress
		case op.Step == stepDeleteCluster:
			o.phase = phAbsent
		case c.Status == providers.ClusterRunning:
			o.phase = phDone
		case c.Status == providers.ClusterError:
			o.phase = phFailed
		default:
			o.phase = phInProgress
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
			return observed{phase: phDone}, nil
		case stepCreateNodePool:
			return observed{phase: phAbsent}, nil
		}
		// An update of a pool that is gone cannot happen; the next pass
		// (a full one: the listing is read again) makes the pool again.
		return observed{phase: phFailed, message: fmt.Sprintf("node pool %s is gone", name), doubt: true}, nil
	}
	if err != nil {
		return observed{}, err
	}
	o := observed{pool: &np, message: np.Message}
	settled := np.Status.Settled()
	switch {
	case op.Step == stepDeleteNodePool && np.Status == providers.NodePoolDeleting:
		o.phase = phInProgress
	case op.Step == stepDeleteNodePool:
		o.phase = phAbsent
	case np.Status == providers.NodePoolError:
		o.phase, o.message = phFailed, fmt.Sprintf("node pool %s is in error at the provider: %s", name, np.Message)
	case np.Status == providers.NodePoolDeleting:
		o.phase = phInProgress // going away: read again, then make it again
	case op.Step != stepCreateNodePool && op.State == state.Verifying && !applied(op.Step, req, np):
		o.phase = phAbsent
	case settled:
		o.phase = phDone
	default:
		o.phase = phInProgress
	}
	return o, nil
}

// applied reports whether a node pool already is what an update asked.
func applied(step string, req request, np providers.NodePool) bool {
	if step == stepResizeNodePool {
		return sizeMatches(np.Size, *req.Size)
	}
	return sizeMatches(np.Size, req.NodePool.Size) && shapeMatches(np.Shape, req.NodePool.Shape) && labelsHold(np.Labels, req.NodePool.Labels)
}

// drive moves an operation as far as it goes now: it makes the call when
// due, settles an unknown outcome by reading back, and observes accepted
// work until it is done. It never sleeps: a backoff or work in progress
// ends it with resWait. stale says a newer generation wants something
// else: the operation is abandoned at the first point where that is safe
// (nothing is in progress at the provider).
func (p *pass) drive(op *state.JournalOp, stale bool) (out outcome, err error) {
	doubted := false
	defer func() { out.doubt = out.doubt || doubted }()
	for range 8 {
		now := p.r.clock.Now()
		due := time.UnixMilli(op.NextAttemptAt)
		switch op.State {
		case state.Succeeded:
			return outcome{res: resDone}, nil
		case state.Failed:
			return outcome{res: resFailed, message: p.describe(op) + ": " + failure(op)}, nil
		case state.InFlight:
			// Found in flight: a previous run died during the call.
			err := p.move(op, Ambiguous, func(o *state.JournalOp) {
				o.NextAttemptAt = 0
				o.LastError = &state.OpError{Class: string(providers.Unknown), SideEffect: string(providers.Maybe),
					Message: "the agent stopped during the call; its outcome is not known"}
			}, nil)
			if err != nil {
				return outcome{}, err
			}
		case state.Journaled:
			if stale {
				return outcome{res: resSuperseded}, p.move(op, Abandon, nil, nil)
			}
			if op.NextAttemptAt > 0 && now.Before(due) {
				return p.waiting(op, due), nil
			}
			if err := p.move(op, Begin, func(o *state.JournalOp) { o.Attempts++ }, nil); err != nil {
				return outcome{}, err
			}
			// Only a leader calls (an etcd store): the journal's write
			// above was fenced by etcd, at() asks the fence again (alive),
			// and the call's context carries it to the provider's side, so
			// a leader paused in between never calls once another took
			// over. The operation stays in flight: whoever leads reads the
			// provider back, as after a crash.
			if err := p.r.at(Point{Kind: PointBeforeCall, PoolID: op.PoolID, Op: op.Key, Step: op.Step, From: state.InFlight}); err != nil {
				return outcome{}, err
			}
			obs, callErr := p.call(op)
			if err := p.r.at(Point{Kind: PointAfterCall, PoolID: op.PoolID, Op: op.Key, Step: op.Step, From: state.InFlight}); err != nil {
				return outcome{}, err // the provider may have acted; nothing is recorded
			}
			if callErr != nil && providers.Cancelled(callErr) && p.ctx.Err() != nil {
				err := p.move(op, Ambiguous, func(o *state.JournalOp) { o.LastError = opError(callErr) }, nil)
				return outcome{res: resWait, until: now}, errors.Join(p.ctx.Err(), err)
			}
			doubt, err := p.settleCall(op, obs, callErr)
			doubted = doubted || doubt
			if err != nil {
				return outcome{}, err
			}
		case state.Verifying:
			obs, end, err := p.look(op, now)
			if err != nil || end != nil {
				return ended(end), err
			}
			doubted = doubted || obs.doubt
			switch obs.phase {
			case phAbsent:
				if stale {
					return outcome{res: resSuperseded}, p.move(op, Abandon, nil, nil)
				}
				// It did not happen: call again, now, with the same key.
				if err := p.move(op, Retry, func(o *state.JournalOp) { o.NextAttemptAt, o.ReadFailures = 0, 0 }, nil); err != nil {
					return outcome{}, err
				}
			case phFailed:
				if err := p.refuseThere(op, obs); err != nil {
					return outcome{}, err
				}
			default:
				if err := p.move(op, Accept, func(o *state.JournalOp) { o.NextAttemptAt, o.ReadFailures = 0, 0 }, p.acceptedTx(op, obs)); err != nil {
					return outcome{}, err
				}
			}
		case state.Accepted:
			obs, end, err := p.look(op, now)
			if err != nil || end != nil {
				return ended(end), err
			}
			doubted = doubted || obs.doubt
			switch obs.phase {
			case phInProgress:
				return outcome{res: resWait, obs: obs, until: now.Add(p.r.opts.Poll), message: p.describe(op) + progress(obs)}, nil
			case phDone:
				err := p.move(op, Succeed, func(o *state.JournalOp) { o.NextAttemptAt, o.LastError = 0, nil }, nil)
				return outcome{res: resDone, obs: obs}, err
			case phFailed:
				if err := p.refuseThere(op, obs); err != nil {
					return outcome{}, err
				}
			case phAbsent:
				// Accepted, then gone before it was done (a provider drops
				// a failed create): make the call again.
				if err := p.move(op, Retry, func(o *state.JournalOp) {
					o.NextAttemptAt = now.Add(RetryWait(o.Attempts)).UnixMilli()
					o.LastError = &state.OpError{Class: string(providers.NotFound), Message: "accepted, then gone at the provider before it was done"}
				}, nil); err != nil {
					return outcome{}, err
				}
			}
		default:
			return outcome{}, fmt.Errorf("journal %s: unknown state %q", op.Key, op.State)
		}
	}
	return outcome{res: resWait, until: p.r.clock.Now().Add(p.r.opts.Poll), message: p.describe(op)}, nil
}

// look reads an operation back once it is due; end is set when the drive
// ends here (a backoff to wait out, a read-back that failed).
func (p *pass) look(op *state.JournalOp, now time.Time) (observed, *outcome, error) {
	if due := time.UnixMilli(op.NextAttemptAt); op.NextAttemptAt > 0 && now.Before(due) {
		w := p.waiting(op, due)
		return observed{}, &w, nil
	}
	// A read-back is a provider call too: only the leader makes it.
	if err := p.alive(); err != nil {
		return observed{}, nil, err
	}
	obs, err := p.readBack(op)
	if err != nil {
		if err := p.deferRead(op, err); err != nil {
			return observed{}, nil, err
		}
		w := p.waiting(op, time.UnixMilli(op.NextAttemptAt))
		return observed{}, &w, nil
	}
	return obs, nil, nil
}

func ended(o *outcome) outcome {
	if o == nil {
		return outcome{}
	}
	return *o
}

// settleCall records a call's answer: the one place that reads a provider
// error's class and side effect. doubt says what the call needs is gone.
func (p *pass) settleCall(op *state.JournalOp, obs observed, err error) (doubt bool, _ error) {
	now := p.r.clock.Now()
	if err == nil && withoutIdentity(op.Step, obs) {
		// "It happened" without the object (a 2xx the client could not
		// read, DOKS accepting without an id): what was made is not known,
		// so it is read back by name like any unknown outcome. Accepting
		// it would leave a create with no result that no later pass can
		// settle.
		return false, p.move(op, Ambiguous, func(o *state.JournalOp) {
			o.NextAttemptAt = 0
			o.LastError = &state.OpError{Class: string(providers.Unknown), SideEffect: string(providers.Done),
				Message: "the provider answered without the object it made; reading it back by name"}
		}, nil)
	}
	if err == nil {
		return false, p.move(op, Accept, func(o *state.JournalOp) {
			o.LastError, o.NextAttemptAt = nil, 0
			o.Result = resultOfCall(obs)
		}, p.acceptedTx(op, obs))
	}
	oe := opError(err)
	side, class := providers.SideEffectOf(err), providers.ClassOf(err)
	switch {
	case side == providers.Done || (class == providers.NotFound && isDelete(op.Step)):
		// It happened (a delete of what is gone is what a delete wants).
		return false, p.move(op, Accept, func(o *state.JournalOp) { o.LastError, o.NextAttemptAt = oe, 0 }, p.acceptedTx(op, obs))
	case side == providers.Maybe:
		// Not known: read back by name before anything else.
		return false, p.move(op, Ambiguous, func(o *state.JournalOp) { o.LastError, o.NextAttemptAt = oe, 0 }, nil)
	case providers.Retryable(err) || class == providers.NotFound:
		wait := max(RetryWait(op.Attempts), providers.RetryAfterOf(err))
		// What the call needs (its cluster) may be gone: look again.
		return class == providers.NotFound, p.move(op, Retry, func(o *state.JournalOp) { o.LastError, o.NextAttemptAt = oe, now.Add(wait).UnixMilli() }, nil)
	case class == providers.Terminal || isDelete(op.Step):
		// A refusal a person must fix (a permission, a quota, a refused
		// delete): tried again on the long schedule; a teardown is never
		// given up.
		return false, p.move(op, Retry, func(o *state.JournalOp) {
			o.Refusals++
			o.LastError = oe
			o.NextAttemptAt = now.Add(max(RefusalWait(o.Refusals), providers.RetryAfterOf(err))).UnixMilli()
		}, nil)
	default:
		return false, p.move(op, Refuse, func(o *state.JournalOp) { o.LastError, o.NextAttemptAt = oe, 0 }, nil)
	}
}

// withoutIdentity reports whether a create's answer lacks what identifies
// what it made: a cluster's id, a node pool's name.
func withoutIdentity(step string, obs observed) bool {
	switch step {
	case stepCreateCluster:
		return obs.cluster == nil || obs.cluster.Ref.ID == ""
	case stepCreateNodePool:
		return obs.pool == nil || obs.pool.Name == ""
	}
	return false
}

// refuseThere ends an operation whose work failed at the provider.
func (p *pass) refuseThere(op *state.JournalOp, obs observed) error {
	msg := obs.message
	if msg == "" {
		msg = "failed at the provider"
	}
	if isDelete(op.Step) {
		return p.move(op, Retry, func(o *state.JournalOp) {
			o.Refusals++
			o.LastError = &state.OpError{Class: string(providers.Terminal), Message: msg}
			o.NextAttemptAt = p.r.clock.Now().Add(RefusalWait(o.Refusals)).UnixMilli()
		}, nil)
	}
	return p.move(op, Refuse, func(o *state.JournalOp) {
		o.LastError = &state.OpError{Class: string(providers.Invalid), Reason: "failedAtProvider", Message: msg}
	}, nil)
}

// deferRead records a failed read-back; the journal tries again later.
func (p *pass) deferRead(op *state.JournalOp, err error) error {
	now := p.r.clock.Now()
	return p.move(op, Defer, func(o *state.JournalOp) {
		o.ReadFailures++
		o.LastError = opError(err)
		o.LastError.Message = "reading it back: " + o.LastError.Message
		o.NextAttemptAt = now.Add(max(RetryWait(o.ReadFailures), providers.RetryAfterOf(err))).UnixMilli()
	}, nil)
}

// resultOfCall is what the journal keeps of an accepted call's answer: the
// provider's id of what it made.
func resultOfCall(obs observed) json.RawMessage {
	var v any
	switch {
	case obs.cluster != nil && obs.cluster.Ref.ID != "":
		v = obs.cluster.Ref
	case obs.pool != nil && obs.pool.ID != "":
		v = map[string]string{"id": obs.pool.ID}
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
	if op.Step != stepCreateCluster || obs.cluster == nil || obs.cluster.Ref.ID == "" {
		return nil
	}
	p.seen.Cluster = seenCluster(*obs.cluster, p.seen.Cluster)
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

// waiting is the outcome of an operation waiting out its backoff.
func (p *pass) waiting(op *state.JournalOp, until time.Time) outcome {
	at := until.UTC().Format(time.RFC3339)
	res := resWait
	var msg string
	switch {
	case op.State == state.Verifying:
		msg = fmt.Sprintf("%s: the outcome is not known (%s); reading it back by name at %s", p.describe(op), lastMessage(op), at)
	case op.Refusals > 0 && op.LastError != nil && (op.LastError.Class == string(providers.Terminal) || op.LastError.Class == string(providers.Invalid) || isDelete(op.Step)):
		res = resRefused
		msg = fmt.Sprintf("%s: the provider refused: %s; %s; the next attempt is at %s (refusal %d)", p.describe(op), lastMessage(op), hint(op), at, op.Refusals)
	case op.LastError != nil:
		msg = fmt.Sprintf("%s: %s; trying again at %s (attempt %d)", p.describe(op), lastMessage(op), at, op.Attempts+1)
	default:
		msg = fmt.Sprintf("%s: next attempt at %s", p.describe(op), at)
	}
	return outcome{res: res, until: until, message: msg}
}

func lastMessage(op *state.JournalOp) string {
	if op.LastError == nil {
		return "no answer"
	}
	return op.LastError.Message
}

func failure(op *state.JournalOp) string {
	return "the provider refused: " + lastMessage(op) + "; " + hint(op)
}

// hint says what a person can do about a refusal.
func hint(op *state.JournalOp) string {
	reason := ""
	if op.LastError != nil {
		reason = op.LastError.Reason
	}
	switch {
	case reason == "shapeChange":
		return "a node pool's machine type, GPUs, Spot, disk and zones never change in place: give the flavor a new name to make a new node pool"
	case reason == "zeroNodes":
		return "this provider needs at least one node in a fixed-size node pool: set nodes to 1 or more, or use autoscaling with minNodes 0"
	case reason == "quota":
		return "raise the quota at the provider"
	case reason == "credentialsRefused" || reason == "secretMissing":
		return "fix the provider account's credentials (the secret its reference names)"
	case reason == "failedAtProvider":
		return "see the provider's console for why; change the flavor in the document to try another shape"
	case isDelete(op.Step):
		return "fix the cause at the provider (a permission, something still using it); the delete is tried again on its own"
	case op.LastError != nil && op.LastError.Class == string(providers.Terminal):
		return "fix the cause at the provider or in the account (a permission, a quota, a credential); it is tried again on its own"
	}
	return "change the substrate in the document"
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
	}
	return op.Step + " " + op.Object
}

func sizeText(s providers.Size) string {
	if s.Autoscaling != nil {
		return fmt.Sprintf("%d to %d nodes (autoscaled)", s.Autoscaling.MinNodes, s.Autoscaling.MaxNodes)
	}
	return fmt.Sprintf("%d nodes", s.NodeCount)
}

func progress(obs observed) string {
	switch {
	case obs.cluster != nil:
		return " (" + string(obs.cluster.Status) + ")"
	case obs.pool != nil:
		return " (" + string(obs.pool.Status) + ")"
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
