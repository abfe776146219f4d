// Package plan is the plan: the diff of a document against a snapshot of
// the fleet and the live facts, as plain data (changes, the ordered calls,
// counts and the planHash), with one renderer per format beside it.
//
// Make is a pure function of its inputs: the same document, snapshot and
// facts give the same plan, byte for byte, on any machine. Live facts are
// gathered before (Gather), so that an apply can plan again inside its write
// transaction without calling out.
package plan

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/fleet-agent/fleet-agent/internal/canon"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
)

// Action is what a change does.
type Action string

// The actions.
const (
	Create    Action = "create"
	Update    Action = "update"
	Delete    Action = "delete"
	Unchanged Action = "unchanged"
	// Upgrade is one hop of a cluster's Kubernetes version (Hop). It is
	// no object of the document: it makes no call and counts in no total;
	// the pool's update records the version and the substrate runs the
	// hops after the apply.
	Upgrade Action = "upgrade"
)

// KindSubstrate is the kind of a change about a pool's substrate itself
// rather than an object of the document: an upgrade hop.
const KindSubstrate inventory.Kind = "substrate"

// Hop is one step of a version upgrade: one minor, one part of the
// cluster. The control plane goes first, then every node pool, so no
// kubelet is ever newer than its API server.
type Hop struct {
	Pool string `json:"pool"`
	From string `json:"from"`
	To   string `json:"to"`
	// Part is HopControlPlane or HopNodePool; Flavor names the node
	// pool's flavor.
	Part   string `json:"part"`
	Flavor string `json:"flavor,omitempty"`
}

// The parts of a cluster a hop upgrades.
const (
	HopControlPlane = "control plane"
	HopNodePool     = "node pool"
)

// Change is one object's entry in a plan.
type Change struct {
	Kind   inventory.Kind `json:"kind"`
	Name   string         `json:"name"`
	Action Action         `json:"action"`
	// Fields are the differing fields, in alphabetical order.
	Fields []string `json:"fields,omitempty"`
	// Blocked gives the reasons the change cannot be applied ("; "-joined).
	Blocked string `json:"blocked,omitempty"`
	// Note is information for the reviewer ("; "-joined).
	Note string `json:"note,omitempty"`
	// Hop is set on an upgrade hop (kind substrate, action upgrade).
	Hop *Hop `json:"hop,omitempty"`
	// Window is set on a change with a step that waits for the substrate's
	// maintenance windows (an upgrade hop, a shrink, a node pool drained
	// and deleted, a blue/green replacement).
	Window *Window `json:"window,omitempty"`

	notes   []string // the notes one by one (a note may itself hold "; ")
	counted bool     // an object of the document (counts in the summary)
	group   int      // call group (call order)
	order   string   // order within the group
}

// Symbol is the change's mark in text and markdown: + ~ - for what it does,
// ! when blocked, = for an unchanged object that carries a note.
func (c Change) Symbol() string {
	switch {
	case c.Blocked != "":
		return "!"
	case c.Action == Create:
		return "+"
	case c.Action == Update, c.Action == Upgrade:
		return "~"
	case c.Action == Delete:
		return "-"
	}
	return "="
}

// addNotes appends notes to the change.
func (c *Change) addNotes(notes ...string) {
	if len(notes) == 0 {
		return
	}
	c.notes = append(c.notes, notes...)
	c.Note = strings.Join(c.notes, "; ")
}

// NoteLines are the change's notes, one per line of text and markdown.
func (c Change) NoteLines() []string {
	if c.notes == nil && c.Note != "" {
		return []string{c.Note}
	}
	return c.notes
}

// Shown reports whether the change has a line in text and markdown: it does
// something, is blocked, or carries a note.
func (c Change) Shown() bool { return c.Action != Unchanged || c.Blocked != "" || c.Note != "" }

// Drifts reports whether the change, found by a drift check, is drift: it
// does something or is blocked. An unchanged row shown only for its note
// (a substrate kept because removing it needs prune) is a note: the fleet
// differs from the document in a way no apply without prune changes.
func (c Change) Drifts() bool { return c.Action != Unchanged || c.Blocked != "" }

// Call is one operation an apply makes: a method and its canonical params
// (the object's id and the fields it sets).
type Call struct {
	Method string         `json:"method"`
	Params map[string]any `json:"params"`

	kind inventory.Kind
	name string // fleet name, recorded when the call creates the object
}

// Kind and Name say which object the call is about.
func (c Call) Kind() inventory.Kind { return c.kind }

// Name is the object's fleet name.
func (c Call) Name() string { return c.name }

// ID is the object's id.
func (c Call) ID() string { id, _ := c.Params["id"].(string); return id }

// Summary counts the changes (docs/plan-format.md).
type Summary struct {
	Create    int `json:"create"`
	Update    int `json:"update"`
	Delete    int `json:"delete"`
	Unchanged int `json:"unchanged"`
	Blocked   int `json:"blocked"`
}

// Plan is a document planned against a fleet.
type Plan struct {
	Changes  []Change `json:"changes"`
	Calls    []Call   `json:"calls"`
	Summary  Summary  `json:"summary"`
	PlanHash string   `json:"planHash"`
	// Policy is what a policy said of the plan (nil when none judged it).
	// It is not part of the planHash: the hash says what an apply does.
	Policy *PolicyReport `json:"policy,omitempty"`

	// held is what the fleet holds where it differs (planner.held), for
	// DriftHash.
	held []any

	// opts are what the plan was made with (the live facts included), so
	// Again can plan once more without calling out.
	opts Options
}

// Blocked reports whether any change is blocked.
func (p *Plan) Blocked() bool { return p.Summary.Blocked > 0 }

// Empty reports whether the plan makes no call.
func (p *Plan) Empty() bool { return len(p.Calls) == 0 }

// hashCalls is the planHash: SHA-256 over the canonical call list.
func hashCalls(calls []Call) string {
	list := make([]any, len(calls))
	for i, c := range calls {
		list[i] = map[string]any{"method": c.Method, "params": c.Params}
	}
	sum := sha256.Sum256(canon.MustMarshal(list))
	return hex.EncodeToString(sum[:])
}

// DriftHash tells drifts apart: the hash over the calls, the blocked
// (kind, name, reason) list and the fleet's values where it differs from
// the document, so that a drift to another value is another drift.
func (p *Plan) DriftHash() string {
	calls := make([]any, len(p.Calls))
	for i, c := range p.Calls {
		calls[i] = map[string]any{"method": c.Method, "params": c.Params}
	}
	var blocked []any
	for _, c := range p.Changes {
		if c.Blocked != "" {
			blocked = append(blocked, []any{string(c.Kind), c.Name, c.Blocked})
		}
	}
	sum := sha256.Sum256(canon.MustMarshal(map[string]any{"calls": calls, "blocked": blocked, "fleet": p.held}))
	return hex.EncodeToString(sum[:])
}

// Doing returns the changes that do something, are blocked or carry a note:
// what text, markdown and a drift report show.
func (p *Plan) Doing() []Change {
	out := []Change{} // a list in JSON even when empty
	for _, c := range p.Changes {
		if c.Shown() {
			out = append(out, c)
		}
	}
	return out
}
