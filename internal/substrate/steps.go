package substrate

// What the steps of the pass return. Like Karpenter's node-claim
// reconcilers (launch, registration, initialization, liveness), each step
// is run on its own report and returns one result of its own type (what it
// found for the next steps) and one Condition (conditions.go): its verdict,
// with a reason, a message and when to look again.

import (
	"fmt"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

// stop is where a step stopped the pass (a reconcile.Result for one step).
// The zero stop stops nothing. res says what kind of stop it is: resWait
// (work in progress, looked at again at requeue), resRefused (a refusal
// tried again at requeue; the substrate is in error meanwhile), resFailed
// (only a new document helps), resLater (in error, looked at again at
// requeue, and nothing in the journal is waiting); resDone with stopped
// set is a stop whose reason is filed already (an operation's outcome, a
// read that failed).
type stop struct {
	stopped bool
	res     result
	requeue time.Time
	message string
	reason  string
}

// waitFor stops the pass on work in progress.
func waitFor(reason, msg string, until time.Time) stop {
	return stop{stopped: true, res: resWait, requeue: until, message: msg, reason: reason}
}

// refusedUntil stops the pass on something a person must fix, looked at
// again at until.
func refusedUntil(reason, msg string, until time.Time) stop {
	return stop{stopped: true, res: resRefused, requeue: until, message: msg, reason: reason}
}

// filed is a stop whose reason the step's report holds already.
var filed = stop{stopped: true}

// step is one step's run: the pass's inputs and record, and a report of
// its own, which becomes its condition. Steps never write another step's
// report, and the pass keeps no outcome of its own.
type step struct {
	*pass
	report
}

func (p *pass) step() *step { return &step{pass: p} }

// drive drives an operation for the step, keeping what the drive doubted.
func (p *step) drive(op *state.JournalOp, stale bool) (outcome, error) {
	out, err := p.pass.drive(op, stale)
	if out.doubt {
		p.doubt()
	}
	return out, err
}

// clusterResult is the cluster step's: the running cluster the next steps
// work in, or a stop (none yet, or in error).
type clusterResult struct {
	stop
	cluster *providers.Cluster
}

// claimResult is the claim step's: a stop when another pool holds the
// cluster.
type claimResult struct {
	stop
}

// nodePoolsResult is the node pool step's: making says a flavor's pool is
// still being made (the in-cluster half waits for them all).
type nodePoolsResult struct {
	making bool
	// listed are the flavors' node pools as this pass listed them (nil:
	// not listed), for the upgrade step.
	listed []providers.NodePool
}

// inClusterResult is the in-cluster step's: applied says the node daemon
// was applied this pass, noDaemon that no in-cluster half is configured; a
// stop when it could not be applied.
type inClusterResult struct {
	stop
	applied, noDaemon bool
}

// removeResult is the teardown's, for a cluster or a node pool: gone says
// nothing of it is left to remove.
type removeResult struct {
	gone bool
}

// attempt is what try did with one step on one object: the drive's
// outcome and its operation, or why nothing was driven.
type attempt struct {
	out outcome
	op  *state.JournalOp
	// failed: the last operation of the step failed for good at this
	// generation; out says so and nothing was opened.
	failed bool
	// over is the repeat that would pass maxRepeats (0: none did); nothing
	// was opened, and the caller says why it stops.
	over int
}

// try is the one sequence every repeated step goes through: an operation
// still pending is driven on; else a last one that failed for good ends it
// (failedEnds: deletes are never refused for good); else the step is made
// again, past maxRepeats never; a new operation is opened and driven.
// repeated runs when a previous operation exists (before the cap is
// checked), to say why the step is made again.
func (p *step) try(pending *state.JournalOp, step, object string, req request, failedEnds bool, repeated func()) (attempt, error) {
	op := pending
	if op == nil {
		repeat, last := p.last(step, object)
		if failedEnds && last != nil && last.State == state.Failed {
			return attempt{failed: true, out: outcome{res: resFailed, message: p.describe(last) + ": " + failure(last)}}, nil
		}
		if last != nil {
			repeat++
			if repeated != nil {
				repeated()
			}
		}
		if repeat > maxRepeats {
			return attempt{over: repeat}, nil
		}
		var err error
		if op, err = p.open(step, object, repeat, req); err != nil {
			return attempt{}, err
		}
	}
	out, err := p.drive(op, false)
	return attempt{out: out, op: op}, err
}

// readFail records a provider read that failed: the substrate backs off on
// its own, nothing else waits for it.
func (p *step) readFail(what string, err error) {
	p.readFailed = true
	r, id := p.r, p.want.PoolID
	r.mu.Lock()
	r.reads[id]++
	n := r.reads[id]
	at := r.clock.Now().Add(max(RetryWait(n), providers.RetryAfterOf(err)))
	r.readAt[id] = at
	r.mu.Unlock()
	msg := fmt.Sprintf("reading %s: %v; trying again at %s", what, err, at.UTC().Format(time.RFC3339))
	if providers.ClassOf(err) == providers.Terminal {
		p.problem(ReasonProviderReadRefused, msg+"; fix the provider account (its credentials, a permission)")
	} else {
		p.wait(ReasonProviderReadFailed, msg, at)
	}
	p.schedule(at)
	p.r.log.Warn().Str("pool", p.want.Pool).Str("read", what).Str("class", string(providers.ClassOf(err))).Err(err).Msg("substrate: provider read failed")
}
