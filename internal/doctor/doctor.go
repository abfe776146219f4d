// Package doctor is the health check of one installation, `fleet-agent
// doctor`: a list of findings, each with a stable code, what was found and
// what to do about it. The probes that reach outside (git, GitHub, the
// providers) are made by the command's wiring, which may import adapters;
// this package holds the findings, the rules over the fleet's own records
// and the renderers, so that the agent can answer the same report through
// its socket.
package doctor

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/imagepin"
	"github.com/fleet-agent/fleet-agent/internal/localapi"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/substrate"
	"github.com/fleet-agent/fleet-agent/internal/textline"
	"github.com/fleet-agent/fleet-agent/internal/webhooks"
)

// Severity says whether a finding needs a person.
type Severity string

const (
	// OK: the part works.
	OK Severity = "ok"
	// Note: worth knowing, nothing to do (a part not configured on purpose).
	Note Severity = "note"
	// Fail: a person must act; doctor exits 1.
	Fail Severity = "fail"
)

// Finding is one line of the report.
type Finding struct {
	// Check is the part looked at: config, state, git, github, provider,
	// nodeDaemon, fleet.
	Check string `json:"check"`
	// Code is stable, for scripts and alerts: `git-unreachable`,
	// `substrate-agent-missing`, ...
	Code     string   `json:"code"`
	Severity Severity `json:"severity"`
	// Found says what was found, Do what to do (empty when nothing).
	Found string `json:"found"`
	Do    string `json:"do,omitempty"`
}

// Report is every finding, in the order the checks ran.
type Report struct {
	// Through says who made the report: "agent" (the running agent,
	// through its socket) or "command" (this process, on the files).
	Through  string    `json:"through"`
	Findings []Finding `json:"findings"`
}

// Add appends a finding.
func (r *Report) Add(check, code string, sev Severity, found, do string) {
	r.Findings = append(r.Findings, Finding{Check: check, Code: code, Severity: sev, Found: found, Do: do})
}

// NeedsPerson says whether any finding needs a person.
func (r Report) NeedsPerson() bool {
	return slices.ContainsFunc(r.Findings, func(f Finding) bool { return f.Severity == Fail })
}

// Codes lists the findings' codes, for tests and logs.
func (r Report) Codes() []string {
	out := make([]string, 0, len(r.Findings))
	for _, f := range r.Findings {
		out = append(out, f.Code)
	}
	return out
}

// WriteText prints one line per finding, `SEVERITY CODE: found`, with what
// to do indented below, then a last line saying whether anything needs a
// person.
func WriteText(w io.Writer, r Report) {
	for _, f := range r.Findings {
		// A finding quotes paths and errors from outside: one plain line.
		fmt.Fprintf(w, "%-4s %s: %s\n", f.Severity, f.Code, textline.Plain(f.Found))
		if f.Do != "" {
			fmt.Fprintf(w, "     do: %s\n", textline.Plain(f.Do))
		}
	}
	n := 0
	for _, f := range r.Findings {
		if f.Severity == Fail {
			n++
		}
	}
	switch n {
	case 0:
		fmt.Fprintf(w, "nothing needs a person (%d checks, through the %s)\n", len(r.Findings), r.Through)
	default:
		fmt.Fprintf(w, "%d of %d checks need a person (through the %s)\n", n, len(r.Findings), r.Through)
	}
}

// NotJoiningAfter is how long listed Nodes may wait for their node daemon
// before doctor says so.
const NotJoiningAfter = 15 * time.Minute

// UpgradeStuckAfter is how long one upgrade hop's operation may run before
// doctor says so: longer than a managed provider takes to replace a large
// node pool while respecting its PodDisruptionBudgets (GKE waits up to an
// hour per node).
const UpgradeStuckAfter = 6 * time.Hour

// Fleet is what the fleet's records say, as the agent's status shows them.
type Fleet struct {
	Refused    []localapi.Refused
	Proposals  []localapi.Proposal
	Substrates []substrate.Status
	// NodeDaemon says whether substrate.nodeDaemon is configured.
	NodeDaemon bool
	// NodeDaemonImage is substrate.nodeDaemon.image as configured, and
	// NodeDaemonPin what the agent last made of it (nil: nothing yet).
	NodeDaemonImage string
	NodeDaemonPin   *imagepin.Pin
	// DriftProposal is the agent's drift proposal, nil when none was made.
	DriftProposal *localapi.DriftProposal
	// Webhooks are the events.webhooks receivers' deliveries.
	Webhooks []webhooks.Status
}

// CheckFleet adds the findings of the fleet's own records: refused tips,
// blocked proposals, substrates in error, Nodes not joining, substrates
// without a node daemon.
func CheckFleet(r *Report, f Fleet, now time.Time) {
	before := len(r.Findings)
	if len(f.Refused) > 0 {
		t := f.Refused[0]
		r.Add("fleet", "tip-refused", Fail,
			fmt.Sprintf("the commit %s of the branch was refused (%s): %s", short(t.Commit), t.Code, t.Reason), RefusedAdvice(t))
	}
	for _, p := range f.Proposals {
		if len(p.Denied) > 0 && len(p.Errors) == 0 {
			r.Add("fleet", "proposal-denied", Fail, fmt.Sprintf("%s (%s): the policy denies its plan: %s", p.Ref, short(p.Commit), strings.Join(p.Denied, "; ")),
				"change the proposal until the policy allows it (merged as it is, it is refused); fleet-agent plan --proposal "+strings.TrimPrefix(p.Ref, "refs/heads/")+" shows the verdicts")
		}
		if p.Blocked || len(p.Errors) > 0 {
			why := "its plan is blocked"
			if len(p.Errors) > 0 {
				why = "its document is invalid: " + p.Errors[0]
			}
			r.Add("fleet", "proposal-blocked", Fail, fmt.Sprintf("%s (%s): %s", p.Ref, short(p.Commit), why),
				"fix the proposal's fleet.json; the agent plans it again when it moves")
		}
	}
	for _, s := range f.Substrates {
		if u := s.Upgrade; u != nil && now.Sub(time.UnixMilli(u.Since)) >= UpgradeStuckAfter {
			r.Add("fleet", "substrate-upgrade-stuck", Fail,
				fmt.Sprintf("pool %s: the upgrade hop %s has run for %s (since %s)", s.Pool, u.Hop,
					now.Sub(time.UnixMilli(u.Since)).Round(time.Minute), time.UnixMilli(u.Since).UTC().Format(time.RFC3339)),
				"look at the hop at the provider (its console, aws eks describe-update, gcloud container operations list): a PodDisruptionBudget that allows no eviction, or a pod that never leaves, holds a node pool's upgrade; fleet-agent never sends the hop again (docs/substrates.md, Upgrades)")
		}
		switch {
		case drainOverdue(s):
			r.Add("fleet", "substrate-drain-blocked", Fail, fmt.Sprintf("pool %s: %s%s", s.Pool, s.Message, failing(s)),
				"the drain is past its timeout and waits (drain.then is wait): let the named pods finish or delete them, end the booking, "+
					"or set the flavor's drain.then to force, which evicts them (and deletes what a PodDisruptionBudget holds), each in the audit log")
		case s.State == "error":
			r.Add("fleet", "substrate-error", Fail, fmt.Sprintf("pool %s: %s%s", s.Pool, s.Message, failing(s)),
				substrate.AdviceFor(s.Conditions))
		case !f.NodeDaemon && s.State != "deleted" && s.State != "deleting":
			r.Add("fleet", "substrate-agent-missing", Fail,
				fmt.Sprintf("pool %s has a Kubernetes substrate and substrate.nodeDaemon is not configured: its Nodes never join", s.Pool),
				"set substrate.nodeDaemon (image, joinURL) and substrate.join in the config, then restart the agent (systemctl restart fleet-agent): a reload does not change them")
		case s.WaitingToJoin.Count > 0 && s.WaitingToJoin.Since != nil &&
			now.Sub(time.UnixMilli(*s.WaitingToJoin.Since)) >= NotJoiningAfter:
			r.Add("fleet", "substrate-nodes-not-joining", Fail,
				fmt.Sprintf("pool %s: %d Nodes have waited %s for their node daemon", s.Pool, s.WaitingToJoin.Count,
					now.Sub(time.UnixMilli(*s.WaitingToJoin.Since)).Round(time.Minute)),
				"kubectl -n fleet-node get daemonset fleet-node, and the pods' logs; check that substrate.nodeDaemon.joinURL is reachable from the Nodes")
		}
	}
	if len(r.Findings) == before {
		r.Add("fleet", "fleet-ok", OK, fmt.Sprintf("no refused tip, %d proposals, %d substrates, none needing a person",
			len(f.Proposals), len(f.Substrates)), "")
	}
	checkNodeDaemonImage(r, f)
	checkDriftProposal(r, f.DriftProposal, now)
	checkWebhooks(r, f.Webhooks)
}

// checkNodeDaemonImage says whether the node daemon's DaemonSet names a
// digest. A record of another image than the configured one is an agent
// not restarted since the config changed: it says nothing of the new one.
func checkNodeDaemonImage(r *Report, f Fleet) {
	p := f.NodeDaemonPin
	if !f.NodeDaemon || p == nil || p.Ref != f.NodeDaemonImage {
		return
	}
	switch {
	case p.Pinned && p.Reason == "":
		r.Add("fleet", "node-daemon-pinned", OK, "the node daemon's DaemonSet names "+p.Image+" (from the "+p.Source+")", "")
	case p.Pinned:
		r.Add("fleet", "node-daemon-pinned-from-record", Note,
			fmt.Sprintf("the node daemon's DaemonSet keeps the digest recorded for its tag, %s; the registry could not be asked (%s): %s", p.Image, p.Reason, p.Detail),
			"nothing moves meanwhile; fix the registry's reach to follow the tag again")
	case p.Reason == imagepin.ReasonOff:
		r.Add("fleet", "node-daemon-not-pinned", Note,
			"the node daemon's DaemonSet names the tag "+p.Image+" (substrate.nodeDaemon.resolveDigest is false): Nodes may run different images under it",
			"configure the digest form name:tag@sha256:..., or let the agent resolve it (remove resolveDigest: false)")
	default:
		r.Add("fleet", "node-daemon-not-pinned", Fail,
			fmt.Sprintf("the node daemon's DaemonSet names the tag %s, not a digest (%s): %s", p.Image, p.Reason, p.Detail),
			"fix what the message names, then restart the agent (it asks again every 10 minutes by itself); or configure the digest form name:tag@sha256:...")
	}
}

// checkDriftProposal notes an open drift proposal (a person chooses), or
// a drift no proposal can stand for, and why.
func checkDriftProposal(r *Report, p *localapi.DriftProposal, now time.Time) {
	if p != nil && p.State == "none" {
		r.Add("fleet", "drift-proposal-none", Note, "no drift proposal stands for the drift: "+p.Waiting,
			"fleet-agent status lists what is not written and why; keep it by writing it into the document by hand, or undo it by applying the document again (docs/drift.md)")
		return
	}
	if p == nil || p.State != "open" {
		return
	}
	where := "branch " + p.Branch
	if p.PR > 0 {
		where = fmt.Sprintf("pull request #%d (branch %s)", p.PR, p.Branch)
	}
	since := ""
	if p.OpenedAt > 0 {
		since = " for " + now.Sub(time.UnixMilli(p.OpenedAt)).Round(time.Minute).String()
	}
	r.Add("fleet", "drift-proposal-open", Note,
		fmt.Sprintf("the drift is proposed as %s, open%s: %d value(s) written, %d the document cannot hold%s", where, since, p.Fields, p.Unwritten, proposalNotes(p)),
		"merge it to keep the fleet as it is; close it (without GitHub: delete the branch) to revert with drift.revertOnClose, or to leave the drift reported (docs/drift.md)")
}

// proposalNotes says why an open proposal waits, and a refusal of its merge.
func proposalNotes(p *localapi.DriftProposal) string {
	out := ""
	if p.MergeRefused != "" {
		out += "; its merge was refused: " + p.MergeRefused
	}
	if p.Waiting != "" {
		out += "; waiting: " + p.Waiting
	}
	return out
}

// checkWebhooks notes a webhook whose receiver fails or dropped events.
func checkWebhooks(r *Report, hooks []webhooks.Status) {
	for _, h := range hooks {
		if h.HeldUntil != nil && h.Queued > 0 {
			r.Add("events", "webhook-failing", Note,
				fmt.Sprintf("webhook %s (%s) fails (%s); %d event(s) wait, retried at %s", h.Receiver, h.ID, h.LastError, h.Queued, h.HeldUntil.UTC().Format(time.RFC3339)),
				"check the receiver; the events are kept and delivered when it answers 2xx (fleet-agent status lists its failures)")
		}
		if h.Dropped > 0 {
			r.Add("events", "webhook-dropped", Note,
				fmt.Sprintf("webhook %s (%s) refused %d event(s) with a 4xx; they were dropped", h.Receiver, h.ID, h.Dropped),
				"check the receiver's signature check and the webhook's secret; the agent's log has a line per dropped event")
		}
	}
}

// RefusedAdvice says what to do about a refused tip, by its cause. Only
// a commit whose plan can be right as it is (its review was the fault, or
// something outside it failed for the while) is adopted with plan
// --commit and apply --commit; a commit a policy denies, whose plan has a
// blocked change or whose document or history is wrong stays refused
// whatever is planned, and the way on is a new commit, proposed.
func RefusedAdvice(t localapi.Refused) string {
	plan := "fleet-agent plan --commit " + t.Commit
	switch {
	case len(t.Adopt) == 2:
		return "read its plan with " + t.Adopt[0] + ", then adopt it with " + t.Adopt[1] + " (refused if the plan changed since)"
	case t.Code == string(refusal.PlanBlocked) && strings.Contains(t.Reason, "denies the plan"):
		return "a policy rule denies this commit's plan, and no apply takes it: make a new commit that the policy allows and propose it (a branch or pull request; " +
			"fleet-agent plan --proposal BRANCH shows its verdict before the merge). " + plan + " prints the rule's verdict"
	case t.Code == string(refusal.PlanBlocked):
		return "its plan has a blocked change, which no apply of this commit can take: fix fleet.json in a new commit and propose it; " +
			plan + " shows each blocked change and why"
	case t.Code == string(refusal.InvalidInput):
		return "the document at this commit is invalid: fix it in a new commit and propose it (fleet-agent validate names every error)"
	case t.Code == string(refusal.InvalidState):
		return "do what the reason says: it names the fix (a new commit on top of the applied one, a signed commit, a re-queue); an apply by hand of this commit helps only where the reason says so"
	}
	return plan + ", then apply it with the printed --plan-hash once the plan is right (the cause was outside the commit; the agent also retries)"
}

func short(c string) string {
	if len(c) > 12 {
		return c[:12]
	}
	return strings.TrimSpace(c)
}

// drainOverdue: a condition says a drain has been blocked past its
// timeout and waits for a person.
func drainOverdue(s substrate.Status) bool {
	for _, c := range s.Conditions {
		if c.Reason == substrate.ReasonDrainBlocked && c.Status == substrate.ConditionFalse {
			return true
		}
	}
	return false
}

// failing names a substrate's conditions that need a person, by type and
// reason (" [Cluster ClusterInError]"; "" when none does).
func failing(s substrate.Status) string {
	var out []string
	for _, c := range s.Conditions {
		if c.Status == substrate.ConditionFalse {
			out = append(out, c.Type+" "+c.Reason)
		}
	}
	if len(out) == 0 {
		return ""
	}
	return " [" + strings.Join(out, ", ") + "]"
}
