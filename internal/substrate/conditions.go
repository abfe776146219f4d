package substrate

// Conditions: what each step of a pass found, and the one summary of them.
// Each step (account, cluster, claim, node pools, in-cluster half,
// teardown, orphans) returns one Condition of its own type; the step owns
// its negative verdicts (Status False: a person must act; Unknown: work in
// progress). summarize folds the conditions into the substrate's state and
// message through one table (summary), so that the page and an alert match
// a Reason instead of parsing the message.

import (
	"strings"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/state"
)

// Condition statuses.
const (
	ConditionTrue    = "True"
	ConditionUnknown = "Unknown"
	ConditionFalse   = "False"
)

// Condition types: one per step, in the order the steps run.
const (
	CondAccount   = "Account"
	CondCluster   = "Cluster"
	CondClaim     = "Claim"
	CondNodePools = "NodePools"
	CondInCluster = "InCluster"
	CondTeardown  = "Teardown"
	CondOrphans   = "Orphans"
)

// Reasons: stable codes, listed with their meaning in docs/substrates.md
// (the docs test keeps that list and Reasons the same).
const (
	ReasonAccountFound       = "AccountFound"
	ReasonAccountUnavailable = "AccountUnavailable"

	ReasonClusterRunning           = "ClusterRunning"
	ReasonClusterProvisioning      = "ClusterProvisioning"
	ReasonClusterUpdating          = "ClusterUpdating"
	ReasonClusterDeletedElsewhere  = "ClusterDeletedElsewhere"
	ReasonClusterInError           = "ClusterInError"
	ReasonClusterNotOurs           = "ClusterNotOurs"
	ReasonClusterKeepsDisappearing = "ClusterKeepsDisappearing"
	ReasonAdoptedClusterNotFound   = "AdoptedClusterNotFound"

	ReasonClaimed      = "Claimed"
	ReasonClaimRefused = "ClaimRefused"

	ReasonNodePoolsReady            = "NodePoolsReady"
	ReasonNodePoolProvisioning      = "NodePoolProvisioning"
	ReasonNodePoolDeletedElsewhere  = "NodePoolDeletedElsewhere"
	ReasonNodePoolError             = "NodePoolError"
	ReasonNodePoolNotOurs           = "NodePoolNotOurs"
	ReasonNodePoolKeepsDisappearing = "NodePoolKeepsDisappearing"
	ReasonNodePoolKeepsDiffering    = "NodePoolKeepsDiffering"
	ReasonNodePoolKeepsComingBack   = "NodePoolKeepsComingBack"
	// ReasonOutsideWindow: a step that takes running Nodes away waits for
	// the substrate's next maintenance window.
	ReasonOutsideWindow = "OutsideWindow"
	// ReasonDraining: the Nodes a node pool is about to lose are being
	// emptied, nothing blocks; ReasonDrainBlocked: pods or bookings hold
	// the drain (Unknown), or have held it past the drain's timeout with
	// then "wait" (False: a person decides).
	ReasonDraining     = "Draining"
	ReasonDrainBlocked = "DrainBlocked"
	// ReasonReplacing: a blue/green flavor's node pool is being replaced
	// (the step, and the new pool's Nodes against those it needs).
	ReasonReplacing = "Replacing"

	ReasonNodeDaemonApplied       = "NodeDaemonApplied"
	ReasonNodeDaemonNotConfigured = "NodeDaemonNotConfigured"
	ReasonNodeDaemonApplyFailed   = "NodeDaemonApplyFailed"
	ReasonNodeDaemonRemoval       = "NodeDaemonRemovalRetrying"

	ReasonTornDown               = "TornDown"
	ReasonTearingDown            = "TearingDown"
	ReasonAdopterWaiting         = "AdopterWaiting"
	ReasonClusterKeepsComingBack = "ClusterKeepsComingBack"

	ReasonOrphansRemoved   = "OrphansRemoved"
	ReasonOrphansRemaining = "OrphansRemaining"

	ReasonOperationInProgress = "OperationInProgress"
	ReasonOperationRefused    = "OperationRefused"
	ReasonOperationFailed     = "OperationFailed"
	ReasonProviderReadFailed  = "ProviderReadFailed"
	ReasonProviderReadRefused = "ProviderReadRefused"
)

// Reasons lists every reason a condition may carry, for the docs test.
var Reasons = []string{
	ReasonAccountFound, ReasonAccountUnavailable,
	ReasonClusterRunning, ReasonClusterProvisioning, ReasonClusterUpdating, ReasonClusterDeletedElsewhere, ReasonClusterInError,
	ReasonClusterNotOurs, ReasonClusterKeepsDisappearing, ReasonAdoptedClusterNotFound,
	ReasonClaimed, ReasonClaimRefused,
	ReasonNodePoolsReady, ReasonNodePoolProvisioning, ReasonNodePoolDeletedElsewhere, ReasonNodePoolError, ReasonNodePoolNotOurs,
	ReasonNodePoolKeepsDisappearing, ReasonNodePoolKeepsDiffering, ReasonNodePoolKeepsComingBack, ReasonOutsideWindow,
	ReasonDraining, ReasonDrainBlocked, ReasonReplacing,
	ReasonNodeDaemonApplied, ReasonNodeDaemonNotConfigured, ReasonNodeDaemonApplyFailed, ReasonNodeDaemonRemoval,
	ReasonTornDown, ReasonTearingDown, ReasonAdopterWaiting, ReasonClusterKeepsComingBack,
	ReasonOrphansRemoved, ReasonOrphansRemaining,
	ReasonOperationInProgress, ReasonOperationRefused, ReasonOperationFailed, ReasonProviderReadFailed, ReasonProviderReadRefused,
	ReasonVersionCurrent, ReasonUpgradeInProgress, ReasonUpgradeRefused,
}

// Condition is one step's verdict. Its message is made of parts (what
// needs a person, what is in progress, what is merely said) that the
// summary keeps apart, so that the substrate's message reads, across
// steps, problems first, then work in progress, then notes.
type Condition struct {
	Type    string
	Status  string
	Reason  string
	Message string
	// Requeue is when the step wants to look again (zero: no wish).
	Requeue time.Time

	problems, waits, notes []string
	// words is what a True verdict says before its notes.
	words string
	// scheduled: a refusal's retry is due later; readFailed: a provider
	// read failed; doubted: the step learned something that needs a full
	// look. Each keeps the substrate from counting as converged.
	scheduled, readFailed, doubted bool
}

// Stored is the condition as the record keeps it.
func (c Condition) Stored() state.SubstrateCondition {
	return state.SubstrateCondition{Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message}
}

// report collects what one step finds while it runs; verdict turns it into
// the step's condition. Each step has its own: no step writes another's.
type report struct {
	problems, waits, notes    []string
	problemReason, waitReason string
	next                      time.Time
	scheduled                 bool
	readFailed                bool
	doubted                   bool
}

// problem notes something a person must fix.
func (r *report) problem(reason, msg string) {
	if r.problemReason == "" {
		r.problemReason = reason
	}
	r.problems = append(r.problems, msg)
}

// wait notes something in progress, to be looked at again at until.
func (r *report) wait(reason, msg string, until time.Time) {
	if r.waitReason == "" {
		r.waitReason = reason
	}
	r.waits = append(r.waits, msg)
	r.schedule(until)
}

func (r *report) note(msg string) { r.notes = append(r.notes, msg) }

func (r *report) schedule(at time.Time) {
	if !at.IsZero() && (r.next.IsZero() || at.Before(r.next)) {
		r.next = at
	}
}

// doubt makes the next pass a full one.
func (r *report) doubt() { r.doubted = true }

// take files an operation's outcome under waits or problems; it reports
// whether the operation is done.
func (r *report) take(out outcome, label string) bool {
	if out.doubt {
		r.doubt()
	}
	msg := out.message
	if label != "" && msg != "" {
		msg = label + ": " + msg
	}
	reason := out.reason
	switch out.res {
	case resDone, resSuperseded:
		return true
	case resWait:
		r.wait(cmpOr(reason, ReasonOperationInProgress), msg, out.until)
	case resRefused:
		r.problem(cmpOr(reason, ReasonOperationRefused), msg)
		r.scheduled = true
		r.schedule(out.until)
	case resFailed:
		r.problem(cmpOr(reason, ReasonOperationFailed), msg)
	case resLater:
		r.problem(cmpOr(reason, ReasonOperationFailed), msg)
		r.schedule(out.until)
	}
	return false
}

// end files where a step stopped the pass.
func (r *report) end(s stop) {
	if s.stopped {
		r.take(outcome{res: s.res, until: s.requeue, message: s.message, reason: s.reason}, "")
	}
}

// verdict is the step's condition: False with the first problem's reason,
// else Unknown with the first wait's, else True with ok.
func (r *report) verdict(typ, ok, okMessage string) Condition {
	c := Condition{Type: typ, Status: ConditionTrue, Reason: ok, Requeue: r.next,
		problems: r.problems, waits: r.waits, notes: r.notes,
		scheduled: r.scheduled, readFailed: r.readFailed, doubted: r.doubted}
	switch {
	case len(r.problems) > 0:
		c.Status, c.Reason = ConditionFalse, r.problemReason
	case len(r.waits) > 0:
		c.Status, c.Reason = ConditionUnknown, r.waitReason
	}
	parts := append(append(append([]string{}, r.problems...), r.waits...), r.notes...)
	if c.Status == ConditionTrue && okMessage != "" {
		c.words = okMessage
		parts = append([]string{okMessage}, parts...)
	}
	c.Message = strings.Join(parts, "; ")
	return c
}

// quiet reports whether a condition leaves nothing to do: nothing in
// progress, no retry due, every read made, nothing doubted.
func (c Condition) quiet() bool {
	return len(c.waits) == 0 && !c.scheduled && !c.readFailed && !c.doubted
}

// facts is what the summary table reads of a pass's conditions.
type facts struct {
	present               bool
	problems, waits, note []string
	// daemon: the node daemon stands (applied this pass, or as recorded
	// by a pass that did not read the provider); noDaemon: none is
	// configured to hand the cluster to.
	daemon, noDaemon bool
	// gone: the teardown left nothing (orphans included); tornDown is
	// its words.
	gone     bool
	tornDown string
}

func factsOf(present bool, conds []Condition) facts {
	f := facts{present: present}
	orphansLeft := false
	for _, c := range conds {
		f.problems = append(f.problems, c.problems...)
		f.waits = append(f.waits, c.waits...)
		f.note = append(f.note, c.notes...)
		switch {
		case c.Type == CondInCluster && c.Status == ConditionTrue:
			f.daemon = true
		case c.Type == CondInCluster && c.Reason == ReasonNodeDaemonNotConfigured:
			f.noDaemon = true
		case c.Type == CondTeardown && c.Status == ConditionTrue:
			f.gone, f.tornDown = true, c.words
		case c.Type == CondOrphans && c.Reason != ReasonOrphansRemoved:
			orphansLeft = true
		}
	}
	f.gone = f.gone && !orphansLeft
	return f
}

func joined(parts ...[]string) string {
	var all []string
	for _, l := range parts {
		all = append(all, l...)
	}
	return strings.Join(all, "; ")
}

// summary is the one table from conditions to the substrate's state and
// message: the first row whose when holds decides. Any condition False
// counts against Ready (Error); any Unknown with work in progress keeps
// the substrate Creating (or Deleting), or Ready once the node daemon
// stands, since nodes already run.
var summary = []struct {
	name    string
	when    func(f facts) bool
	state   state.SubstrateState
	message func(f facts) string
}{
	{"torn down", func(f facts) bool { return !f.present && f.gone }, state.SubstrateDeleted,
		func(f facts) string { return joined([]string{f.tornDown}, f.note) }},
	{"teardown needs a person", func(f facts) bool { return !f.present && len(f.problems) > 0 }, state.SubstrateError,
		func(f facts) string { return joined(f.problems, f.waits) }},
	{"tearing down", func(f facts) bool { return !f.present }, state.SubstrateDeleting,
		func(f facts) string { return cmpOr(joined(f.waits), "tearing down") }},
	{"needs a person", func(f facts) bool { return len(f.problems) > 0 }, state.SubstrateError,
		func(f facts) string { return joined(f.problems, f.waits, f.note) }},
	{"running, with work in progress", func(f facts) bool { return len(f.waits) > 0 && f.daemon }, state.SubstrateReady,
		func(f facts) string { return joined(f.waits, f.note) }},
	{"work in progress", func(f facts) bool { return len(f.waits) > 0 }, state.SubstrateCreating,
		func(f facts) string { return joined(f.waits) }},
	{"ready", func(f facts) bool { return f.daemon }, state.SubstrateReady,
		func(f facts) string { return joined(f.note) }},
	{"no node daemon", func(f facts) bool { return f.noDaemon }, state.SubstrateCreating,
		func(facts) string {
			return "the cluster and its node pools run; waiting for the node daemon: " + NoDaemonMessage
		}},
	{"waiting for the cluster", func(facts) bool { return true }, state.SubstrateCreating,
		func(facts) string { return "waiting for the cluster" }},
}

// summarize derives a substrate's state and message from its pass's
// conditions (present: the document wants the substrate).
func summarize(present bool, conds []Condition) (state.SubstrateState, string) {
	f := factsOf(present, conds)
	for _, row := range summary {
		if row.when(f) {
			return row.state, row.message(f)
		}
	}
	return state.SubstrateCreating, "waiting for the cluster" // the last row always holds
}

// converged reports whether no condition leaves anything to do.
func converged(conds []Condition) bool {
	for _, c := range conds {
		if !c.quiet() {
			return false
		}
	}
	return true
}

// requeue is the earliest time a condition asks to be looked at again.
func requeue(conds []Condition) time.Time {
	var next time.Time
	for _, c := range conds {
		if !c.Requeue.IsZero() && (next.IsZero() || c.Requeue.Before(next)) {
			next = c.Requeue
		}
	}
	return next
}
