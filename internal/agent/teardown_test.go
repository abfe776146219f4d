package agent_test

import (
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/agent"
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
