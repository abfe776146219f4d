package substrate_test

import (
	"encoding/json"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

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
	// nodes.connected and joinedNodes (additions: each node connected or not).
	want := map[string][]string{
		"":              {"account", "cluster", "converged", "joinedNodes", "message", "mode", "nodePools", "nodes", "pool", "poolId", "state", "updatedAt", "waitingToJoin"},
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
	lines := substrate.TextLines(list)
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "gpu creating create ") || !strings.Contains(lines[1], "h100") {
		t.Fatalf("text:\n%s", strings.Join(lines, "\n"))
	}
}
