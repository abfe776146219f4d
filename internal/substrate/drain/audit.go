package drain

import (
	"context"
	"encoding/json"

	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

// AuditAction is the audit log's action of a forced removal; its method is
// "evict" or "delete" (a pod) or "release" (a Node's booking let go) and
// its params the pod, the Node and why it blocked.
const AuditAction = "drain-force"

// StateAudit records forced removals in the state's audit log.
type StateAudit struct {
	Store *state.Store
	Clock clock.Clock
}

// auditParams are an audit row's params: names only, never a pod's spec.
type auditParams struct {
	Pod    string `json:"pod,omitempty"`
	Node   string `json:"node"`
	Reason string `json:"reason"`
}

// Forced appends one row.
func (a StateAudit) Forced(_ context.Context, f Forced) error {
	params, err := json.Marshal(auditParams{Pod: f.Pod, Node: f.Node, Reason: f.Reason})
	if err != nil {
		return err
	}
	return a.Store.Update(func(tx *state.Tx) error {
		return tx.AppendAudit(state.AuditRow{At: a.Clock.Now().UnixMilli(), Who: "agent", Action: AuditAction, Method: f.Action, Params: params})
	})
}
