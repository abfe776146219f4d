package agent

import (
	"context"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/apply"
	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/localapi"
	"github.com/fleet-agent/fleet-agent/internal/plan"
)

// The loop as the local API serves it (localapi.Loop): the plans, applies
// and edits a person asks for through the socket.
var _ localapi.Loop = (*Agent)(nil)

// IsProposal says whether name heads a planned proposal, so that a commit
// off the branch is planned as its proposal rather than refused.
func (a *Agent) IsProposal(name string) bool {
	_, err := a.findProposal(name)
	return err == nil
}

// PlanDocument plans a document a client read against the fleet: with the
// agent's apply.prune unless prune is set; live, or offline.
func (a *Agent) PlanDocument(ctx context.Context, doc *fleet.Document, prune *bool, offline bool) (*plan.Plan, error) {
	p, err := a.makePlan(ctx, doc, planHow{prune: prune, offline: offline})
	if err != nil {
		return nil, err
	}
	return p.Plan, nil
}

// Edit makes a break-glass edit. The edit is drift now: the next step
// checks it, not the next drift.every.
func (a *Agent) Edit(e apply.Edit) error {
	if err := apply.ApplyEdit(a.store, e); err != nil {
		return err
	}
	a.mu.Lock()
	a.lastDrift = time.Time{}
	a.mu.Unlock()
	a.Wake()
	return nil
}
