package agent

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/imagepin"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/refusal"

	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/substrate"
	"github.com/fleet-agent/fleet-agent/internal/webhooks"
)

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

// orEmpty keeps JSON lists lists: a missing or null list is [].
func orEmpty(raw json.RawMessage, empty string) json.RawMessage {
	if t := strings.TrimSpace(string(raw)); t == "" || t == "null" {
		return json.RawMessage(empty)
	}
	return raw
}

// Status reads the status of a store (joined nodes connected or not by the
// wall clock).
func Status(s *state.Store, tenant string) (StatusView, error) {
	return statusAt(s, tenant, time.Now())
}

// statusAt is Status with joined nodes connected or not at now.
func statusAt(s *state.Store, tenant string, now time.Time) (StatusView, error) {
	v := StatusView{TenantID: tenant, Installation: s.Installation(), Proposals: []Proposal{}, Refused: []Refused{}}
	err := s.View(func(tx *state.Tx) error {
		subs, err := substrate.StatusesAt(tx, now)
		if err != nil {
			return err
		}
		v.Substrates = subs
		ap, err := tx.Applied()
		if err != nil {
			return err
		}
		dr, err := tx.Drift()
		if err != nil {
			return err
		}
		if ap != nil {
			v.Applied = &AppliedView{PlanHash: ap.PlanHash, Commit: ap.Commit, AppliedBy: ap.AppliedBy, AppliedAt: ap.AppliedAt, Prune: ap.Prune, CheckedAt: ap.CheckedAt}
			if dr != nil {
				v.Applied.CheckedAt = dr.CheckedAt
				v.Drift = &DriftView{Changes: orEmpty(dr.Changes, "[]"), Summary: orEmpty(dr.Summary, "{}"), Blocked: dr.Blocked, PlanHash: dr.PlanHash, Error: dr.Error}
				var p DriftProposal
				if ok, err := tx.Get(spaceAgent, keyDriftProposal, &p); err != nil {
					return err
				} else if ok {
					v.Drift.Proposal = &p
				}
			}
		}
		if v.Policy, err = policyView(tx); err != nil {
			return err
		}
		if v.NodeDaemonImage, err = imagepin.Read(tx); err != nil {
			return err
		}
		if err := eachRecord(tx, spaceRefused, func(r Refused) {
			// An apply of the same moment does not overtake it: an apply
			// deletes the refusal of its own commit.
			if ap == nil || r.At >= ap.AppliedAt {
				v.Refused = append(v.Refused, r)
			}
		}); err != nil {
			return err
		}
		return eachRecord(tx, spaceProposals, func(p storedProposal) {
			if p.Errors == nil {
				p.Errors = []string{}
			}
			v.Proposals = append(v.Proposals, p.Proposal)
		})
	})
	sortRefused(v.Refused)
	return v, err
}

// sortRefused puts the newest refusal first.
func sortRefused(list []Refused) {
	sort.SliceStable(list, func(i, j int) bool { return list[i].At > list[j].At })
}

// Drifted reports whether the recorded drift is a drift: calls to make or
// a blocked plan. A failed check is not drift by itself, but it keeps what
// the last good check found, which still counts.
func Drifted(dr *state.Drift) bool {
	if dr == nil {
		return false
	}
	return dr.Blocked || (len(dr.Changes) > 0 && string(dr.Changes) != "[]" && string(dr.Changes) != "null")
}

// StatusNow is the status of a store that no agent follows (the command
// line, with the state file to itself): the applied document is planned
// again now against the fleet, so a break-glass edit shows as drift at once
// rather than at an agent's next check. Nothing is written. A check that
// cannot be made (a provider unreachable) keeps the recorded drift and says
// why.
func StatusNow(ctx context.Context, s *state.Store, live plan.Source, tenant string) (StatusView, error) {
	v, err := Status(s, tenant)
	if err != nil || v.Applied == nil {
		return v, err
	}
	var ap *state.Applied
	var snap *inventory.Snapshot
	err = s.View(func(tx *state.Tx) (err error) {
		if ap, err = tx.Applied(); err != nil {
			return err
		}
		snap, err = tx.Snapshot()
		return err
	})
	if err != nil {
		return v, err
	}
	doc, errs := fleet.Validate("applied", ap.Document)
	if errs != nil {
		return v, errs.Refusal()
	}
	if live == nil {
		live = plan.OfflineSource{}
	}
	p, err := plan.For(ctx, doc, snap, live.For(snap), plan.Options{Tenant: tenant, Prune: ap.Prune})
	if err != nil {
		if v.Drift == nil {
			v.Drift = &DriftView{Changes: json.RawMessage("[]"), Summary: json.RawMessage("{}")}
		}
		v.Drift.Error = "cannot check drift now: " + refusal.Text(err)
		return v, nil
	}
	changes, _ := json.Marshal(p.Doing())
	summary, _ := json.Marshal(p.Summary)
	v.Drift = &DriftView{Changes: orEmpty(changes, "[]"), Summary: summary, Blocked: p.Blocked(), PlanHash: p.PlanHash, Now: true}
	return v, nil
}

// status is the status the agent serves.
func (a *Agent) status() (StatusView, error) {
	v, err := statusAt(a.store, a.cfg.Tenant, a.clock.Now())
	a.mu.Lock()
	v.Warnings = append([]string(nil), a.cfg.Warnings...)
	a.mu.Unlock()
	if len(a.hooks) > 0 && err == nil {
		err = a.store.View(func(tx *state.Tx) (err error) { v.Webhooks, err = webhooks.Statuses(tx, a.hooks); return })
	}
	if a.store.Backend() == "etcd" {
		leader, lerr := a.store.Leader(context.Background())
		if lerr != nil {
			leader = "unknown (" + refusal.Text(lerr) + ")"
		}
		v.Store = &StoreView{Backend: "etcd", Agent: a.store.Name(), Leader: leader, Leading: a.store.Leading()}
	}
	return v, err
}

// Substrates reads the substrates' statuses ([] when none).
func (a *Agent) Substrates() (list []substrate.Status, err error) {
	err = a.store.View(func(tx *state.Tx) (err error) { list, err = substrate.StatusesAt(tx, a.clock.Now()); return })
	return list, err
}

// StatusView is the status the agent serves (/status), for the page.
func (a *Agent) StatusView() (StatusView, error) { return a.status() }

// Following says what the agent follows: its tenant, the repository as
// people may see it (no credentials) and the branch it applies.
func (a *Agent) Following() (tenant, repository, branch string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cfg.Tenant, a.cfg.Repository, a.cfg.Branch
}

// RefusedTips lists the commits of the branch that were not applied and
// why, newest first, including those an apply has overtaken since (status
// shows only the others).
func (a *Agent) RefusedTips() ([]Refused, error) { return RefusedTipsIn(a.store) }

// RefusedTipsIn is RefusedTips read from a store, for the command line.
func RefusedTipsIn(s *state.Store) ([]Refused, error) {
	var out []Refused
	err := s.View(func(tx *state.Tx) error {
		return eachRecord(tx, spaceRefused, func(r Refused) { out = append(out, r) })
	})
	sortRefused(out)
	return out, err
}

// PollError is the last poll's failure, nil after a good poll.
func (a *Agent) PollError() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lastError
}

// eachRecord decodes every record of a kv space, in key order.
func eachRecord[T any](tx *state.Tx, space string, fn func(T)) error {
	return tx.ForEach(space, func(_ string, b []byte) error {
		var v T
		if err := json.Unmarshal(b, &v); err != nil {
			return err
		}
		fn(v)
		return nil
	})
}
