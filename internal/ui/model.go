// Package ui is the page: the fleet at a glance for people, served by the
// agent on its ops listener at /ui/. It renders plain data (Fleet) with
// html/template, so every value is escaped by the template, the pages work
// with JavaScript off, and nothing is built outside `go build`.
//
// It reads only: no handler changes the fleet, and every request but GET
// and HEAD is refused. What it shows is what /status, `substrates` and
// `audit` already show, so it holds no token or credential either.
package ui

import (
	"encoding/json"
	"sort"
	"strings"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/doctor"
	"github.com/fleet-agent/fleet-agent/internal/localapi"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/substrate"
	"github.com/fleet-agent/fleet-agent/internal/webhooks"
)

// Fleet is everything the pages show, read at one moment.
type Fleet struct {
	Now    time.Time
	Tenant string
	// Repository is the followed repository as people may see it, and
	// CommitURL the link prefix of a commit in its web view ("" when the
	// remote has none, such as a local path).
	Repository, CommitURL, Branch string
	LastPoll                      time.Time
	PollError                     string
	Applied                       *localapi.AppliedView
	Drift                         *localapi.DriftView
	// Outbox is nil without GitHub (nothing is posted).
	Outbox     *Outbox
	Refused    []localapi.Refused
	Proposals  []localapi.ProposalPage
	Substrates []Substrate
	Audit      []state.AuditRow
	// Store is the etcd store's leadership; nil on a bbolt file.
	Store *localapi.StoreView
	// NoNodeDaemon: substrate.nodeDaemon is not configured, so the Nodes
	// of a Kubernetes substrate never join (doctor's
	// substrate-agent-missing).
	NoNodeDaemon bool
	// Webhooks are the events.webhooks receivers and their deliveries.
	Webhooks []webhooks.Status
}

// Outbox is the posts waiting for GitHub.
type Outbox struct {
	Waiting int
	// Oldest is when the oldest waiting post was queued; zero when none
	// waits or the post was queued before the time was kept.
	Oldest      time.Time
	LastError   string
	LastErrorAt time.Time
	// LastDelivery is when a post was last delivered.
	LastDelivery time.Time
}

// Reachable says GitHub answered since the last failure.
func (o *Outbox) Reachable() bool {
	return o.LastError == "" || o.LastDelivery.After(o.LastErrorAt)
}

// Substrate is one substrate as docs/substrates.md shows it (the JSON of
// `substrates`), with the journal's recent operations. The page declares
// its own copy so that it never imports the substrate room (client-go).
type Substrate struct {
	Pool    string `json:"pool"`
	PoolID  string `json:"poolId"`
	Account string `json:"account"`
	Mode    string `json:"mode"`
	Cluster struct {
		ID       string `json:"id"`
		Location string `json:"location"`
		Version  string `json:"version"`
	} `json:"cluster"`
	State     string `json:"state"`
	Message   string `json:"message"`
	NodePools []struct {
		Flavor string `json:"flavor"`
		Name   string `json:"name"`
		Status string `json:"status"`
		Nodes  int    `json:"nodes"`
	} `json:"nodePools"`
	Nodes struct {
		Listed    int `json:"listed"`
		Joined    int `json:"joined"`
		Connected int `json:"connected"`
	} `json:"nodes"`
	WaitingToJoin struct {
		Count int    `json:"count"`
		Since *int64 `json:"since"`
	} `json:"waitingToJoin"`
	JoinedNodes []JoinedNode      `json:"joinedNodes"`
	Conditions  []Condition       `json:"conditions"`
	UpdatedAt   int64             `json:"updatedAt"`
	Ops         []state.JournalOp `json:"-"`
}

// Condition is one step's verdict on a substrate: a stable reason to match
// and the words for a person.
type Condition struct {
	Type    string `json:"type"`
	Status  string `json:"status"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// storedConditions are the substrate's conditions as the substrate package
// reads them, for its table of what to do.
func (s Substrate) storedConditions() []substrate.StatusCondition {
	out := make([]substrate.StatusCondition, len(s.Conditions))
	for i, c := range s.Conditions {
		out[i] = substrate.StatusCondition{Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message}
	}
	return out
}

// JoinedNode is one node daemon that joined a substrate's pool, connected
// (a heartbeat within 90 s) or not.
type JoinedNode struct {
	Name      string `json:"name"`
	Connected bool   `json:"connected"`
	LastSeen  int64  `json:"lastSeen"` // Unix ms
}

// SubstratesOf reads the substrates of agent.Substrates (whatever list
// the binary passed) through their JSON, the documented shape.
func SubstratesOf(v any) ([]Substrate, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var out []Substrate
	err = json.Unmarshal(b, &out)
	return out, err
}

// Attention is one thing that needs a person, and what to do about it.
type Attention struct {
	What, Do string
	Link     string // the page that shows more
}

// JoinLate is how long listed Nodes may wait to join before a person is
// asked to look (docs/substrates.md: the substrate's message says so then).
const JoinLate = 15 * time.Minute

// Attention lists what needs a person: refused tips, blocked plans,
// substrates in error and nodes not joining after JoinLate.
func (f *Fleet) Attention() []Attention {
	var out []Attention
	for _, r := range f.Refused {
		// The same advice as doctor's tip-refused, by the refusal's cause.
		do := doctor.RefusedAdvice(r)
		out = append(out, Attention{What: "Commit " + short(r.Commit) + " of " + f.Branch + " was not applied: " + r.Code + ": " + r.Reason,
			Do: do, Link: "proposals"})
	}
	if d := f.Drift; d != nil && d.Blocked {
		out = append(out, Attention{What: "The applied document's plan is blocked: the fleet has drifted in a way it cannot converge from.",
			Do: "Read the drifted changes below; fix the fleet or propose a document that unblocks it.", Link: ""})
	}
	for _, p := range f.Proposals {
		if len(p.Errors) > 0 {
			out = append(out, Attention{What: "The document of " + proposalName(p) + " is invalid: " + p.Errors[0],
				Do: "Fix the proposal's fleet.json (fleet-agent validate names every error); the agent plans it again when it moves.", Link: "proposals"})
			continue
		}
		if len(p.Denied) > 0 {
			out = append(out, Attention{What: "The policy denies the plan of " + proposalName(p) + ": " + strings.Join(p.Denied, "; "),
				Do: "Change the proposal until the policy allows it: merged as it is, it is refused. fleet-agent plan --proposal " + strings.TrimPrefix(p.Ref, "refs/heads/") + " shows the verdicts.", Link: "proposals"})
		}
		if p.Blocked {
			out = append(out, Attention{What: "The plan of " + proposalName(p) + " is blocked.",
				Do: "Read its blocked changes on the Proposals page and push a fix to the proposal.", Link: "proposals"})
		}
	}
	for _, s := range f.Substrates {
		if f.NoNodeDaemon && s.State != string(state.SubstrateError) && s.State != "deleted" && s.State != "deleting" {
			out = append(out, Attention{What: "The Nodes of pool " + s.Pool + " never join: substrate.nodeDaemon is not configured.",
				Do: "Set substrate.nodeDaemon (image, joinURL) and substrate.join in the config, then restart the agent (systemctl restart fleet-agent): a reload does not change them.", Link: "substrates"})
			continue
		}
		if s.State == string(state.SubstrateError) {
			out = append(out, Attention{What: "The substrate of pool " + s.Pool + " is in error: " + s.Message,
				Do: substrate.AdviceFor(s.storedConditions()), Link: "substrates"})
		}
		if w := s.WaitingToJoin; w.Count > 0 && w.Since != nil && f.Now.Sub(time.UnixMilli(*w.Since)) >= JoinLate {
			out = append(out, Attention{What: plural(w.Count, "node", "nodes") + " of pool " + s.Pool + " have not joined for " + duration(f.Now.Sub(time.UnixMilli(*w.Since))) + ".",
				Do: "Look at the DaemonSet fleet-node/fleet-node in the cluster: its pods' logs say why they cannot reach the join listener.", Link: "substrates"})
		}
	}
	return out
}

// KindCount is how many changes of one kind.
type KindCount struct {
	Kind string
	N    int
}

// DriftChanges is the drift's changes, each as its plan line: those that
// are drift (plan.Change.Drifts), not the rows kept for a note.
func (f *Fleet) DriftChanges() []plan.Change { return f.driftRows(true) }

// DriftNotes is the rows the drift check kept only for their note: the
// fleet differs from the document there, and no apply changes it.
func (f *Fleet) DriftNotes() []plan.Change { return f.driftRows(false) }

func (f *Fleet) driftRows(drifts bool) []plan.Change {
	if f.Drift == nil {
		return nil
	}
	var cs, out []plan.Change
	_ = json.Unmarshal(f.Drift.Changes, &cs)
	for _, c := range cs {
		if c.Drifts() == drifts {
			out = append(out, c)
		}
	}
	return out
}

// DriftByKind counts the drifted changes by kind, most first.
func (f *Fleet) DriftByKind() []KindCount {
	n := map[string]int{}
	for _, c := range f.DriftChanges() {
		n[string(c.Kind)]++
	}
	out := make([]KindCount, 0, len(n))
	for k, v := range n {
		out = append(out, KindCount{k, v})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].N != out[j].N {
			return out[i].N > out[j].N
		}
		return out[i].Kind < out[j].Kind
	})
	return out
}

// Drifted says the last check found drift.
func (f *Fleet) Drifted() bool {
	return f.Drift != nil && (f.Drift.Blocked || len(f.DriftChanges()) > 0)
}

// AuditKinds are the audit rows' actions, in the order the filter shows them.
var AuditKinds = []string{"apply", "heal", "edit", "call"}

// AuditOf is the audit rows of one kind ("" for all), newest first, at most
// limit of them.
func (f *Fleet) AuditOf(kind string, limit int) []state.AuditRow {
	var out []state.AuditRow
	for i := len(f.Audit) - 1; i >= 0 && len(out) < limit; i-- {
		if kind == "" || f.Audit[i].Action == kind {
			out = append(out, f.Audit[i])
		}
	}
	return out
}

func proposalName(p localapi.ProposalPage) string {
	if p.PR > 0 {
		return "pull request #" + itoa(p.PR)
	}
	return "branch " + strings.TrimPrefix(p.Ref, "refs/heads/")
}

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return itoa(n) + " " + many
}
