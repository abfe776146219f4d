package agent_test

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/agent"
	"github.com/fleet-agent/fleet-agent/internal/apply"
	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

// substrateDoc is a fleet with one fake-backed substrate pool, "a", when
// withPool; extra is more sites, so that a commit differs from the last.
func substrateDoc(withPool bool, extra string) string {
	pools := ""
	if withPool {
		pools = `,"pools":[{"name":"a","site":"k8s","class":"metal-host","policy":{"substrate":{"kind":"kubernetes","account":"k8s",
		  "cluster":{"create":{"location":"fake-east"}},"flavors":[{"name":"h100","machineType":"fake-h100x8","nodes":1}]}}}]`
	}
	return `{"version":1,"sites":[{"name":"k8s","kind":"shared","region":"fake-east"}` + extra + `],
	  "providerAccounts":[{"name":"k8s","provider":"fake","config":{}}]` + pools + `}`
}

// The loop plans and applies with the agent's apply.maxTeardowns, and a
// reload's value is the one the next tip is planned with.
func TestMaxTeardownsFollowsTheConfig(t *testing.T) {
	none := 0
	w := newWorld(t, agent.Config{Prune: true, MaxTeardowns: &none})
	first := w.commit(t, "main", substrateDoc(true, ""), "a substrate")
	w.tick(t)
	if ap := w.applied(t); ap == nil || ap.Commit != first {
		t.Fatalf("not applied: %+v\n%s", ap, w.log.String())
	}
	w.commit(t, "main", substrateDoc(false, ""), "tear it down")
	w.tick(t)
	if ap := w.applied(t); ap.Commit != first {
		t.Fatalf("a teardown was applied with apply.maxTeardowns 0 (commit %s)", ap.Commit)
	}
	if !strings.Contains(w.log.String(), "apply.maxTeardowns is 0") {
		t.Errorf("the refusal does not name the key:\n%s", w.log.String())
	}
	one := 1
	w.agent.Reconfigure(func(c *agent.Config) { c.MaxTeardowns = &one })
	last := w.commit(t, "main", substrateDoc(false, `,{"name":"k9s","kind":"shared","region":"fake-east"}`), "tear it down, again")
	w.tick(t)
	if ap := w.applied(t); ap.Commit != last {
		t.Fatalf("not applied after the reload: %+v\n%s", ap, w.log.String())
	}
}

// The status read with no agent (StatusNow) plans the drift with the
// config's apply.maxTeardowns, as the agent's own drift check does: a
// drift that tears down two substrates is blocked under the default limit
// and not under a limit of two.
func TestStatusNowDriftUsesMaxTeardowns(t *testing.T) {
	two := `{"version":1,"sites":[{"name":"k8s","kind":"shared","region":"fake-east"}],
	  "providerAccounts":[{"name":"k8s","provider":"fake","config":{}}],"pools":[` +
		`{"name":"a","site":"k8s","class":"metal-host","policy":{"substrate":{"kind":"kubernetes","account":"k8s","cluster":{"create":{"location":"fake-east"}},"flavors":[{"name":"h100","machineType":"fake-h100x8","nodes":1}]}}},` +
		`{"name":"b","site":"k8s","class":"metal-host","policy":{"substrate":{"kind":"kubernetes","account":"k8s","cluster":{"create":{"location":"fake-east"}},"flavors":[{"name":"h100","machineType":"fake-h100x8","nodes":1}]}}}]}`
	st, err := state.Open(filepath.Join(t.TempDir(), "fleet.db"), state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	doc, errs := fleet.Validate("fleet.json", []byte(two))
	if errs != nil {
		t.Fatal(errs)
	}
	limit := 2
	if _, err := apply.Apply(t.Context(), st, doc, apply.Options{Prune: true, MaxTeardowns: &limit}); err != nil {
		t.Fatal(err)
	}
	// The applied document says neither pool: its plan against the fleet
	// tears both substrates down.
	if err := st.Update(func(tx *state.Tx) error {
		ap, err := tx.Applied()
		if err != nil {
			return err
		}
		ap.Document = []byte(substrateDoc(false, ""))
		return tx.SetApplied(*ap)
	}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		limit   *int
		blocked bool
	}{{nil, true}, {&limit, false}} {
		v, err := agent.StatusNow(t.Context(), st, nil, agent.NowOptions{Tenant: "root", MaxTeardowns: c.limit})
		if err != nil {
			t.Fatal(err)
		}
		if v.Drift == nil || v.Drift.Error != "" {
			t.Fatalf("no drift view: %+v", v.Drift)
		}
		if v.Drift.Blocked != c.blocked {
			t.Errorf("maxTeardowns %s: drift blocked %v, want %v; changes %s", limitText(c.limit), v.Drift.Blocked, c.blocked, v.Drift.Changes)
		}
	}
}

func limitText(n *int) string {
	if n == nil {
		return "default"
	}
	return strconv.Itoa(*n)
}
