package substrate

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/substrate/join"
	"github.com/fleet-agent/fleet-agent/internal/textline"
)

// Status is one substrate as the surface shows it (docs/substrates.md:
// `fleet-agent substrates -o json`, `substrates` in /status and
// `status -o json`). It never holds a token or a credential.
type Status struct {
	Pool          string           `json:"pool"`
	PoolID        string           `json:"poolId"`
	Account       string           `json:"account"`
	Mode          string           `json:"mode"`
	Cluster       StatusCluster    `json:"cluster"`
	State         string           `json:"state"`
	Message       string           `json:"message"`
	NodePools     []StatusNodePool `json:"nodePools"`
	Nodes         StatusNodes      `json:"nodes"`
	WaitingToJoin StatusWaiting    `json:"waitingToJoin"`
	// JoinedNodes are the node daemons that joined the pool, sorted by
	// Node name, each connected or not ([] when none; an addition).
	JoinedNodes []StatusJoinedNode `json:"joinedNodes"`
	// UpdatedAt is when the record last changed (Unix ms).
	UpdatedAt int64 `json:"updatedAt"`
	// Converged says the reconciler has done all the applied document asks
	// of the substrate and nothing is in progress: what a script waits for
	// (an addition to docs/substrates.md's list).
	Converged bool `json:"converged"`
	// Conditions are the verdicts of the last pass's steps, in the order
	// they ran ([] before the first pass; an addition): what an alert
	// matches on, by type and reason.
	Conditions []StatusCondition `json:"conditions"`
	// Upgrade is the upgrade hop in flight, absent when none is (an
	// addition): what doctor measures a stuck upgrade by.
	Upgrade *StatusUpgrade `json:"upgrade,omitempty"`
}

// StatusCondition is one step's verdict (docs/substrates.md lists the
// types and reasons).
type StatusCondition struct {
	Type    string `json:"type"`
	Status  string `json:"status"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// StatusCluster is the substrate's cluster; its fields are "" until known.
type StatusCluster struct {
	ID       string `json:"id"`
	GlobalID string `json:"globalId"`
	Location string `json:"location"`
	Endpoint string `json:"endpoint"`
	Version  string `json:"version"`
}

// StatusNodePool is one flavor's node pool.
type StatusNodePool struct {
	Flavor string `json:"flavor"`
	Name   string `json:"name"`
	Status string `json:"status"`
	Nodes  int    `json:"nodes"`
}

// StatusNodes counts the Kubernetes Nodes listed and those joined (as the
// reconciler's last pass saw them), and the joined node daemons connected
// now (an addition).
type StatusNodes struct {
	Listed    int `json:"listed"`
	Joined    int `json:"joined"`
	Connected int `json:"connected"`
}

// StatusJoinedNode is one node daemon that joined the pool: connected while
// its last heartbeat is at most join.ConnectedWithin (90 s: three periods
// of 30 s) old, as the state file records heartbeats (at most 30 s late).
type StatusJoinedNode struct {
	Name      string `json:"name"`
	Connected bool   `json:"connected"`
	// LastSeen is its last heartbeat recorded, or its join before any
	// (Unix ms).
	LastSeen int64 `json:"lastSeen"`
}

// StatusWaiting is how many listed Nodes wait to join, and since when (Unix
// ms; null when none waits).
type StatusWaiting struct {
	Count int    `json:"count"`
	Since *int64 `json:"since"`
}

// PendingMessage is a recorded substrate's message before the reconciler
// first looked at it.
const PendingMessage = "recorded; waiting for the substrate reconciler"

// StatusOf is the surface of one record.
func StatusOf(rec state.SubstrateRecord) Status {
	w := rec.Want
	st := Status{Pool: w.Pool, PoolID: w.PoolID, Account: w.Account, Mode: "create",
		State: string(state.SubstratePending), Message: PendingMessage, NodePools: []StatusNodePool{}, UpdatedAt: w.RecordedAt,
		JoinedNodes: []StatusJoinedNode{}, Conditions: []StatusCondition{}}
	if w.Spec.Cluster.Adopt != "" {
		st.Mode = "adopt"
	}
	if cr := w.Spec.Cluster.Create; cr != nil {
		st.Cluster.Location = cr.Location
	}
	s := rec.Seen
	if s == nil {
		return st
	}
	st.State, st.Message = string(s.State), textline.Plain(s.Message)
	st.Converged = s.Converged && s.ObservedGeneration >= w.Generation
	if s.UpdatedAt > st.UpdatedAt {
		st.UpdatedAt = s.UpdatedAt
	}
	if c := s.Cluster; c != nil {
		st.Cluster = StatusCluster{ID: c.ID, GlobalID: c.GlobalID, Location: cmpOr(c.Location, st.Cluster.Location), Endpoint: c.Endpoint, Version: c.Version}
	}
	for _, np := range s.NodePools {
		st.NodePools = append(st.NodePools, StatusNodePool{Flavor: np.Flavor, Name: np.Name, Status: np.Status, Nodes: np.Nodes})
	}
	for _, c := range s.Conditions {
		c.Message = textline.Plain(c.Message)
		st.Conditions = append(st.Conditions, StatusCondition(c))
	}
	st.Nodes = StatusNodes{Listed: s.Nodes.Listed, Joined: s.Nodes.Joined}
	st.WaitingToJoin.Count = s.Waiting.Count
	if s.Waiting.Since > 0 {
		since := s.Waiting.Since
		st.WaitingToJoin.Since = &since
	}
	// A record apply changed since the reconciler last looked is pending
	// again until it does.
	if s.ObservedGeneration < w.Generation && s.State != state.SubstrateError {
		if w.Present {
			st.State, st.Message = string(state.SubstratePending), "the document changed; waiting for the substrate reconciler"
		} else if s.State != state.SubstrateDeleted {
			st.State, st.Message = string(state.SubstrateDeleting), "teardown recorded; waiting for the substrate reconciler"
		}
	}
	return st
}

// Statuses reads every substrate's surface from the state file, sorted by
// pool name; it needs no running reconciler.
func Statuses(store *state.Store) ([]Status, error) {
	var out []Status
	err := store.View(func(tx *state.Tx) error {
		var err error
		out, err = StatusesTx(tx)
		return err
	})
	return out, err
}

// StatusesTx is Statuses inside the caller's transaction, connected by
// the wall clock.
func StatusesTx(tx *state.Tx) ([]Status, error) { return StatusesAt(tx, time.Now()) }

// StatusesAt is StatusesTx with the joined nodes connected or not at now
// (the agent passes its clock).
func StatusesAt(tx *state.Tx, now time.Time) ([]Status, error) {
	recs, err := tx.Substrates()
	if err != nil {
		return nil, err
	}
	out := make([]Status, 0, len(recs))
	for _, r := range recs {
		st := StatusOf(r)
		if st.Upgrade, err = upgradeOf(tx, r.Want.PoolID); err != nil {
			return nil, err
		}
		joined, err := tx.JoinedNodes(r.Want.PoolID)
		if err != nil {
			return nil, err
		}
		for _, n := range joined {
			c := join.Connected(time.UnixMilli(n.LastSeen), now)
			st.JoinedNodes = append(st.JoinedNodes, StatusJoinedNode{Name: n.Name, Connected: c, LastSeen: n.LastSeen})
			if c {
				st.Nodes.Connected++
			}
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Pool < out[j].Pool })
	return out, nil
}

// TextLines renders statuses for `fleet-agent substrates -o text`: one line
// per substrate, then one indented line per node pool and the message.
func TextLines(list []Status) []string {
	if len(list) == 0 {
		return []string{"no substrates"}
	}
	var out []string
	for _, s := range list {
		cluster := cmpOr(s.Cluster.ID, "(no cluster yet)")
		if s.Cluster.Version != "" {
			cluster += " Kubernetes " + s.Cluster.Version
		}
		out = append(out, fmt.Sprintf("%s %s %s %s nodes %d/%d joined, %d connected, updated %s", s.Pool, s.State, s.Mode, cluster,
			s.Nodes.Joined, s.Nodes.Listed, s.Nodes.Connected, time.UnixMilli(s.UpdatedAt).UTC().Format(time.RFC3339)))
		for _, np := range s.NodePools {
			out = append(out, fmt.Sprintf("  %s %s %s %d nodes", np.Flavor, np.Name, np.Status, np.Nodes))
		}
		for _, n := range s.JoinedNodes {
			seen := time.UnixMilli(n.LastSeen).UTC().Format(time.RFC3339)
			if n.Connected {
				out = append(out, fmt.Sprintf("  node %s: connected (last seen %s)", n.Name, seen))
			} else {
				out = append(out, fmt.Sprintf("  node %s: not connected (last seen %s)", n.Name, seen))
			}
		}
		if s.Message != "" {
			out = append(out, "  "+strings.ReplaceAll(s.Message, "\n", " "))
		}
		for _, c := range s.Conditions {
			if c.Status == ConditionFalse {
				out = append(out, "  needs a person: "+c.Type+" "+c.Reason)
			}
		}
	}
	return out
}
