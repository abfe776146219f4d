package localapi

import (
	"encoding/json"
	"github.com/fleet-agent/fleet-agent/internal/imagepin"

	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/substrate"
	"github.com/fleet-agent/fleet-agent/internal/webhooks"
)

// The wire types: what the socket's routes read and answer, and what status
// -o json prints. The loop records some of them as they are (a refusal of a
// tip, a proposal's last plan, the drift proposal).

// apiError is the error body of the local API.
type apiError struct {
	Code    refusal.Code `json:"code"`
	Message string       `json:"message"`
	// Plan is the plan that explains a refused apply, in text: apart from
	// the message, which stays one line a person (or a log) can read.
	Plan string `json:"plan,omitempty"`
}

// PlanRefusal is a refusal the agent answered with the plan that explains
// it: the command line prints the plan, then the one-line refusal.
type PlanRefusal struct {
	Refusal *refusal.Error
	Plan    string
}

func (e *PlanRefusal) Error() string { return e.Refusal.Error() }
func (e *PlanRefusal) Unwrap() error { return e.Refusal }

// PlanRequest asks for the plan of a commit of the branch.
type PlanRequest struct {
	Commit string `json:"commit"`
	// Proposal names a planned proposal (a branch, #N, or its head) to
	// plan as its pull request comment shows it, instead of Commit.
	Proposal string `json:"proposal,omitempty"`
	Output   string `json:"output,omitempty"` // text (default), json, markdown
	Calls    bool   `json:"calls,omitempty"`
}

// PlanDocumentRequest asks for the plan of a document the client read.
type PlanDocumentRequest struct {
	Name     string `json:"name"`
	Document []byte `json:"document"`
	// Prune overrides the agent's apply.prune when set.
	Prune   *bool  `json:"prune,omitempty"`
	Calls   bool   `json:"calls,omitempty"`
	Output  string `json:"output,omitempty"`
	Offline bool   `json:"offline,omitempty"`
}

// ApplyRequest applies a commit of the branch by hand.
type ApplyRequest struct {
	Commit   string `json:"commit"`
	PlanHash string `json:"planHash"`
	// By is accepted from older command lines and ignored: the apply is
	// recorded under the socket peer's credentials (see Peer).
	By string `json:"by,omitempty"`
}

// EditRequest is a break-glass edit.
type EditRequest struct {
	Kind   string         `json:"kind"`
	Name   string         `json:"name"`
	Set    map[string]any `json:"set,omitempty"`
	Delete bool           `json:"delete,omitempty"`
	// Who is accepted from older command lines and ignored: the edit is
	// recorded under the socket peer's credentials (see Peer), and the
	// answer's who says which.
	Who string `json:"who,omitempty"`
}

// PlanResponse carries a rendered plan.
type PlanResponse struct {
	Commit   string `json:"commit"`
	Output   string `json:"output"`
	PlanHash string `json:"planHash"`
	// Blocked: a change is blocked or a policy rule denies the plan; no
	// apply takes it.
	Blocked bool `json:"blocked"`
	// Denied: a policy rule denies the plan (its verdict is in Output).
	Denied bool `json:"denied,omitempty"`
	// Proposal: the plan is a proposal's, applied by merging it.
	Proposal bool `json:"proposal,omitempty"`
	Calls    int  `json:"calls"`
	Applied  int  `json:"applied,omitempty"`
}

// StatusView is the status JSON of docs/commands.md (status -o json).
type StatusView struct {
	TenantID string `json:"tenantId"`
	// Installation is the state file's installation id: what tells this
	// agent's clusters from another installation's in the same account.
	// Empty only for an old file no agent has opened for writing yet.
	Installation string       `json:"installation,omitempty"`
	Applied      *AppliedView `json:"applied,omitempty"`
	Drift        *DriftView   `json:"drift,omitempty"`
	// Proposals and Substrates are lists, [] when empty, so that
	// `jq '.substrates[]'` works on any fleet.
	Proposals []Proposal `json:"proposals"`
	// Substrates are the Kubernetes substrates (contract section 5.4), as
	// the substrate reconciler recorded them.
	Substrates []substrate.Status `json:"substrates"`
	// Refused are the commits of the branch the loop refused since the
	// last apply, newest first, each with its reason and, when adopting it
	// by hand is the way out, the commands that do it; [] when none.
	Refused []Refused `json:"refused"`
	// Policy is the policy plans are judged by (policy.path): where it was
	// read, and why the applied one is not in use when it is not.
	Policy *PolicyView `json:"policy,omitempty"`
	// Warnings are what the running agent wants a person to know about its
	// own set-up (a listener exposed by an opt-in); absent when none.
	Warnings []string `json:"warnings,omitempty"`
	// Store is where the state lives and, on etcd, who leads; absent for a
	// bbolt file.
	Store *StoreView `json:"store,omitempty"`
	// Webhooks are the events.webhooks receivers, each with its last
	// deliveries and failures; absent when none is configured.
	Webhooks []webhooks.Status `json:"webhooks,omitempty"`
	// NodeDaemonImage is the image the node daemon's DaemonSet names: the
	// configured tag pinned to its digest, or why it is not; absent until
	// an agent applied a DaemonSet.
	NodeDaemonImage *imagepin.Pin `json:"nodeDaemonImage,omitempty"`
}

// StoreView is the store of an agent on etcd: several agents share it and
// one leads.
type StoreView struct {
	Backend string `json:"backend"`
	// Agent is this agent's name, Leader the leading agent's ("" when
	// none leads now), Leading whether this agent is it.
	Agent   string `json:"agent"`
	Leader  string `json:"leader"`
	Leading bool   `json:"leading"`
}

// AppliedView is the applied record as status shows it.
type AppliedView struct {
	PlanHash  string `json:"planHash"`
	Commit    string `json:"commit,omitempty"`
	AppliedBy string `json:"appliedBy"`
	AppliedAt int64  `json:"appliedAt"`
	Prune     bool   `json:"prune"`
	CheckedAt int64  `json:"checkedAt,omitempty"`
}

// DriftView is the last drift check as status shows it.
type DriftView struct {
	Changes  json.RawMessage `json:"changes"`
	Summary  json.RawMessage `json:"summary"`
	Blocked  bool            `json:"blocked"`
	PlanHash string          `json:"planHash"`
	Error    string          `json:"error,omitempty"`
	// Now says the drift was checked by this status itself (no agent
	// running) rather than read from the agent's last check.
	Now bool `json:"checkedNow,omitempty"`
	// Proposal is the drift proposal (drift.pullRequests), if one was made.
	Proposal *DriftProposal `json:"proposal,omitempty"`
}

// Proposal is the last plan of a proposal, shown by status.
type Proposal struct {
	Ref      string       `json:"ref"`
	Commit   string       `json:"commit"`
	PlanHash string       `json:"planHash,omitempty"`
	Summary  plan.Summary `json:"summary"`
	Blocked  bool         `json:"blocked"`
	Errors   []string     `json:"errors"`
	// Denied are the policy rules that deny the proposal's plan, each as
	// its verdict line: merged, the commit is refused.
	Denied []string `json:"denied,omitempty"`
	// Tip and Applied are the branch tip and applied commit the plan was
	// made against: when either moves, the proposal is planned again.
	Tip     string `json:"-"`
	Applied string `json:"-"`
	PR      int    `json:"-"`
}

// ProposalPage is a proposal as the page shows it: with its pull request
// and the plan's text lines, which status leaves out (they can be long).
type ProposalPage struct {
	Proposal
	PR    int
	Lines []string
}

// Refused is why a commit of the branch was not applied.
type Refused struct {
	Commit string `json:"commit"`
	Code   string `json:"code"`
	Reason string `json:"reason"`
	PR     int    `json:"pr,omitempty"`
	At     int64  `json:"at"`
	// PlanHash and Adopt are set when the only fault is the review (a tip
	// never proposed, pushed directly, or whose plan moved since review):
	// the commit's plan hash now, and the commands that adopt it by hand,
	// with the full commit and hash.
	PlanHash string   `json:"planHash,omitempty"`
	Adopt    []string `json:"adopt,omitempty"`
}

// PolicyView is the policy as status shows it.
type PolicyView struct {
	Path string `json:"path"`
	// Commit is the applied commit the policy in use was read at.
	Commit string `json:"commit,omitempty"`
	Hash   string `json:"hash,omitempty"`
	Rules  int    `json:"rules"`
	// Problem says why the policy at the applied commit is not the one in
	// use (it does not compile: the last good one judges), or why none is.
	Problem string `json:"problem,omitempty"`
}

// DriftProposal is the agent's record of its drift proposal, as status
// shows it.
type DriftProposal struct {
	State     string `json:"state"`
	Branch    string `json:"branch"`
	PR        int    `json:"pr,omitempty"`
	DriftHash string `json:"driftHash"` // the drift now written on the branch
	Base      string `json:"base"`      // the tip of git.branch it is built on
	Head      string `json:"head"`      // the commit pushed
	Written   string `json:"written"`   // sha256 of the file pushed
	Fields    int    `json:"fields"`
	Unwritten int    `json:"unwritten"`
	FirstSeen int64  `json:"firstSeen"`
	OpenedAt  int64  `json:"openedAt"`
	UpdatedAt int64  `json:"updatedAt"`
	// Seen: a poll saw the branch on the remote, so its absence later
	// means a person deleted it (without GitHub, that is the close).
	Seen bool `json:"seen,omitempty"`
	// PushedAt is when Head was pushed: a poll that listed the refs after
	// it and lacks the branch saw it deleted, even if no poll saw it.
	PushedAt int64 `json:"pushedAt,omitempty"`
	// Dismissed is the drift hash of a proposal closed without revert: the
	// same drift is not proposed again.
	Dismissed string `json:"dismissed,omitempty"`
	// Values and NotWritten are the proposal's description in short, for
	// status: without GitHub nobody else shows it.
	Values     []DriftValue      `json:"values,omitempty"`
	NotWritten []DriftNotWritten `json:"notWritten,omitempty"`
	// Waiting says why the proposal does not follow the drift now: its
	// merge is not applied yet, git.branch's tip carries a change nobody
	// applied, nothing in the drift can be written. Empty while it does.
	Waiting string `json:"waiting,omitempty"`
	// MergeRefused is the refusal of a merge of this proposal: the branch
	// is kept and rewritten, to be merged again.
	MergeRefused string `json:"mergeRefused,omitempty"`
}

// DriftValue is one value a drift proposal writes.
type DriftValue struct {
	Object   string `json:"object"` // "flavor gpu-fra/h100x1"
	Field    string `json:"field"`
	Document string `json:"document,omitempty"` // as the file spells it; absent when it leaves the field out
	Fleet    string `json:"fleet,omitempty"`    // absent when the fleet has none
	Source   string `json:"source"`
}

// DriftNotWritten is a drift a drift proposal leaves to a person, and why.
type DriftNotWritten struct {
	Object string `json:"object"`
	// Field is the one field left out when the object's others are
	// written; absent when the whole object's drift is.
	Field   string `json:"field,omitempty"`
	Reason  string `json:"reason"`
	Blocked bool   `json:"blocked,omitempty"`
	Source  string `json:"source"`
}
