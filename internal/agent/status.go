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
	"github.com/fleet-agent/fleet-agent/internal/localapi"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/refusal"

	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/substrate"
	"github.com/fleet-agent/fleet-agent/internal/webhooks"
)

// orEmpty keeps JSON lists lists: a missing or null list is [].
func orEmpty(raw json.RawMessage, empty string) json.RawMessage {
	if t := strings.TrimSpace(string(raw)); t == "" || t == "null" {
		return json.RawMessage(empty)
	}
	return raw
}

// Status reads the status of a store (joined nodes connected or not by the
// wall clock).
func Status(s *state.Store, tenant string) (localapi.StatusView, error) {
	return statusAt(s, tenant, time.Now())
}

// statusAt is Status with joined nodes connected or not at now.
func statusAt(s *state.Store, tenant string, now time.Time) (localapi.StatusView, error) {
	v := localapi.StatusView{TenantID: tenant, Installation: s.Installation(), Proposals: []localapi.Proposal{}, Refused: []localapi.Refused{}}
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
			v.Applied = &localapi.AppliedView{PlanHash: ap.PlanHash, Commit: ap.Commit, AppliedBy: ap.AppliedBy, AppliedAt: ap.AppliedAt, Prune: ap.Prune, CheckedAt: ap.CheckedAt}
			if dr != nil {
				v.Applied.CheckedAt = dr.CheckedAt
				v.Drift = &localapi.DriftView{Changes: orEmpty(dr.Changes, "[]"), Summary: orEmpty(dr.Summary, "{}"), Blocked: dr.Blocked, PlanHash: dr.PlanHash, Error: dr.Error}
				var p localapi.DriftProposal
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
		if err := eachRecord(tx, spaceRefused, func(r localapi.Refused) {
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
func sortRefused(list []localapi.Refused) {
	sort.SliceStable(list, func(i, j int) bool { return list[i].At > list[j].At })
}

// Drifted reports whether the recorded drift is a drift: calls to make or
// a blocked plan. A failed check is not drift by itself, but it keeps what
// the last good check found, which still counts.
func Drifted(dr *state.Drift) bool {
	if dr == nil {
		return false
	}
	return dr.Blocked || DriftCount(dr.Changes) > 0
}

// DriftCount is how many of a drift record's changes are drift: rows kept
// only for a note are not (plan.Change.Drifts).
func DriftCount(changes json.RawMessage) int {
	var cs []plan.Change
	if err := json.Unmarshal(changes, &cs); err != nil {
		return 0
	}
	n := 0
	for _, c := range cs {
		if c.Drifts() {
			n++
		}
	}
	return n
}

// NowOptions are what StatusNow plans the drift with: the config's tenant
// and apply.maxTeardowns (nil is the default), as the agent's drift check
// plans it.
type NowOptions struct {
	Tenant       string
	MaxTeardowns *int
}

// StatusNow is the status of a store that no agent follows (the command
// line, with the state file to itself): the applied document is planned
// again now against the fleet, so a break-glass edit shows as drift at once
// rather than at an agent's next check. Nothing is written. A check that
// cannot be made (a provider unreachable) keeps the recorded drift and says
// why.
func StatusNow(ctx context.Context, s *state.Store, live plan.Source, o NowOptions) (localapi.StatusView, error) {
	v, err := Status(s, o.Tenant)
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
	p, err := plan.For(ctx, doc, snap, live.For(snap), plan.Options{Tenant: o.Tenant, Prune: ap.Prune, MaxTeardowns: o.MaxTeardowns})
	if err != nil {
		if v.Drift == nil {
			v.Drift = &localapi.DriftView{Changes: json.RawMessage("[]"), Summary: json.RawMessage("{}")}
		}
		v.Drift.Error = "cannot check drift now: " + refusal.Text(err)
		return v, nil
	}
	changes, _ := json.Marshal(p.Doing())
	summary, _ := json.Marshal(p.Summary)
	v.Drift = &localapi.DriftView{Changes: orEmpty(changes, "[]"), Summary: summary, Blocked: p.Blocked(), PlanHash: p.PlanHash, Now: true}
	return v, nil
}

// status is the status the agent serves.
func (a *Agent) status() (localapi.StatusView, error) {
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
		v.Store = &localapi.StoreView{Backend: "etcd", Agent: a.store.Name(), Leader: leader, Leading: a.store.Leading()}
	}
	return v, err
}

// Substrates reads the substrates' statuses ([] when none).
func (a *Agent) Substrates() (list []substrate.Status, err error) {
	err = a.store.View(func(tx *state.Tx) (err error) { list, err = substrate.StatusesAt(tx, a.clock.Now()); return })
	return list, err
}

// StatusView is the status the agent serves (/status), for the page.
func (a *Agent) StatusView() (localapi.StatusView, error) { return a.status() }

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
func (a *Agent) RefusedTips() ([]localapi.Refused, error) { return RefusedTipsIn(a.store) }

// RefusedTipsIn is RefusedTips read from a store, for the command line.
func RefusedTipsIn(s *state.Store) ([]localapi.Refused, error) {
	var out []localapi.Refused
	err := s.View(func(tx *state.Tx) error {
		return eachRecord(tx, spaceRefused, func(r localapi.Refused) { out = append(out, r) })
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
