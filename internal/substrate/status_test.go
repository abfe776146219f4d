package substrate_test

import (
	"encoding/json"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/substrate"
	"github.com/fleet-agent/fleet-agent/internal/substrate/crashtest"
)

// TestStatusShape: the JSON of a status has exactly the keys of docs/substrates.md,
// at every level, and is readable from the state file alone.
func TestStatusShape(t *testing.T) {
	e := newEnv(t, nil)
	e.applyStep(gpuStep)
	e.converge(10*time.Second, 30)
	e.crash() // no reconciler runs: the surface reads the state file
	e.start()
	list, err := substrate.Statuses(e.store)
	if err != nil || len(list) != 1 {
		t.Fatalf("%v %v", list, err)
	}
	data, _ := json.Marshal(list[0])
	var got map[string]any
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	// docs/substrates.md's keys, and converged (an addition: what a script waits for),
	// nodes.connected and joinedNodes (additions: each node connected or not),
	// conditions (an addition: each step's verdict).
	want := map[string][]string{
		"":              {"account", "cluster", "conditions", "converged", "joinedNodes", "message", "mode", "nodePools", "nodes", "pool", "poolId", "state", "updatedAt", "waitingToJoin"},
		"conditions[0]": {"message", "reason", "status", "type"},
		"cluster":       {"endpoint", "globalId", "id", "location", "version"},
		"nodes":         {"connected", "joined", "listed"},
		"waitingToJoin": {"count", "since"},
		"nodePools[0]":  {"flavor", "name", "nodes", "status"},
	}
	for path, keys := range want {
		obj := got
		switch {
		case path == "nodePools[0]":
			obj = got["nodePools"].([]any)[0].(map[string]any)
		case path == "conditions[0]":
			obj = got["conditions"].([]any)[0].(map[string]any)
		case path != "":
			obj = got[path].(map[string]any)
		}
		var have []string
		for k := range obj {
			have = append(have, k)
		}
		sort.Strings(have)
		if !reflect.DeepEqual(have, keys) {
			t.Errorf("%s: keys %v, want %v", path, have, keys)
		}
	}
	st := list[0]
	if st.Pool != "gpu" || st.Account != crashtest.Account || st.Mode != "create" || st.Cluster.Location != "fake-east" ||
		st.NodePools[0].Status != "running" || st.NodePools[0].Nodes != 1 || st.UpdatedAt == 0 {
		t.Fatalf("%+v", st)
	}
	// Converged without a node daemon: every step done but the in-cluster
	// half, which has none to hand the cluster to.
	var conds []string
	for _, c := range st.Conditions {
		conds = append(conds, c.Type+"="+c.Status+"/"+c.Reason)
	}
	if want := "Account=True/AccountFound Cluster=True/ClusterRunning Claim=True/Claimed NodePools=True/NodePoolsReady InCluster=Unknown/NodeDaemonNotConfigured"; strings.Join(conds, " ") != want {
		t.Errorf("conditions %v, want %s", conds, want)
	}
	lines := substrate.TextLines(list)
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "gpu creating create ") || !strings.Contains(lines[1], "h100") {
		t.Fatalf("text:\n%s", strings.Join(lines, "\n"))
	}
}

// The text lines say how many joined nodes are connected, and each node.
func TestTextLinesShowConnectedNodes(t *testing.T) {
	st := substrate.Status{Pool: "gpu", State: "ready", Mode: "create", UpdatedAt: 1796209200000,
		JoinedNodes: []substrate.StatusJoinedNode{{Name: "n1", Connected: true, LastSeen: 1796209190000}, {Name: "n2", LastSeen: 1796208000000}}}
	st.Nodes.Listed, st.Nodes.Joined, st.Nodes.Connected = 2, 2, 1
	got := strings.Join(substrate.TextLines([]substrate.Status{st}), "\n")
	want := "gpu ready create (no cluster yet) nodes 2/2 joined, 1 connected, updated 2026-12-02T11:00:00Z\n" +
		"  node n1: connected (last seen 2026-12-02T10:59:50Z)\n" +
		"  node n2: not connected (last seen 2026-12-02T10:40:00Z)"
	if got != want {
		t.Fatalf("text:\n%s\nwant\n%s", got, want)
	}
}

// The text lines name each condition that needs a person, by type and
// reason, after the message; the others are in -o json.
func TestTextLinesNameFailingConditions(t *testing.T) {
	st := substrate.Status{Pool: "gpu", State: "error", Mode: "create", UpdatedAt: 1796209200000, Message: "flavor h100: quota",
		Conditions: []substrate.StatusCondition{{Type: "Cluster", Status: "True", Reason: "ClusterRunning"},
			{Type: "NodePools", Status: "False", Reason: "NodePoolError", Message: "flavor h100: quota"},
			{Type: "InCluster", Status: "Unknown", Reason: "NodeDaemonNotConfigured"}}}
	got := strings.Join(substrate.TextLines([]substrate.Status{st}), "\n")
	want := "gpu error create (no cluster yet) nodes 0/0 joined, 0 connected, updated 2026-12-02T11:00:00Z\n" +
		"  flavor h100: quota\n" +
		"  needs a person: NodePools NodePoolError"
	if got != want {
		t.Fatalf("text:\n%s\nwant\n%s", got, want)
	}
}

// TestStatusTextIsPlain: a provider's words in a substrate's message and
// conditions (a node pool's error) reach status, doctor and the terminal as
// one line of printable characters: escape sequences, a bell, carriage
// returns, line breaks and text-direction overrides become spaces; markup is
// the page's to escape (found from outside: ESC and OSC sequences reached
// the terminal through fleet-agent substrates).
func TestStatusTextIsPlain(t *testing.T) {
	hostile := "pool <b>x</b> \x1b[31mRED\x1b[0m\x1b]0;TITLE\x07 line1\nline2\r FAKE \u202eevil"
	rec := state.SubstrateRecord{Want: state.SubstrateWant{Pool: "gpu", PoolID: "p1", Present: true},
		Seen: &state.SubstrateSeen{PoolID: "p1", State: state.SubstrateError, Message: hostile,
			Conditions: []state.SubstrateCondition{{Type: "NodePools", Status: "False", Reason: "NodePoolError", Message: hostile}}}}
	st := substrate.StatusOf(rec)
	for _, got := range []string{st.Message, st.Conditions[0].Message} {
		for _, r := range got {
			if unicode.IsControl(r) || r == '\u202e' {
				t.Fatalf("a control or direction character reached the status: %q", got)
			}
		}
		if !strings.Contains(got, "<b>x</b>") || !strings.Contains(got, "RED") || !strings.Contains(got, "line1 line2") {
			t.Fatalf("the words were lost: %q", got)
		}
	}
}
