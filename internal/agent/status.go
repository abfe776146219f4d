package agent

import (
	"encoding/json"

	"github.com/fleet-agent/fleet-agent/internal/state"
)

// StatusView is the status JSON of the contract (section 2).
type StatusView struct {
	TenantID  string       `json:"tenantId"`
	Applied   *AppliedView `json:"applied,omitempty"`
	Drift     *DriftView   `json:"drift,omitempty"`
	Proposals []Proposal   `json:"proposals,omitempty"`
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
}

// Status reads the status of a store.
func Status(s *state.Store, tenant string) (StatusView, error) {
	v := StatusView{TenantID: tenant}
	err := s.View(func(tx *state.Tx) error {
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
				v.Drift = &DriftView{Changes: dr.Changes, Summary: dr.Summary, Blocked: dr.Blocked, PlanHash: dr.PlanHash, Error: dr.Error}
			}
		}
		return tx.ForEach(spaceProposals, func(_ string, b []byte) error {
			var p storedProposal
			if err := json.Unmarshal(b, &p); err != nil {
				return err
			}
			if p.Errors == nil {
				p.Errors = []string{}
			}
			v.Proposals = append(v.Proposals, p.Proposal)
			return nil
		})
	})
	return v, err
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
