package gkeemu_test

import (
	"testing"
)

// TestLegacyZoneRoutes: the projects.zones routes reach the same handlers
// as projects.locations, under their own method ids (which the wire check
// matches to the discovery document's).
func TestLegacyZoneRoutes(t *testing.T) {
	v := start(t, nil)
	z := "projects/" + project + "/zones/us-central1-a"
	steps := []struct {
		method, path, body string
		code               int
		method2            string // the method id it must reach
	}{
		{"GET", z + "/serverconfig", "", 200, "container.projects.zones.getServerconfig"},
		{"POST", z + "/clusters", `{"projectId":"` + project + `","zone":"us-central1-a","cluster":{"name":"c1","initialNodeCount":1}}`, 200, "container.projects.zones.clusters.create"},
		{"GET", z + "/clusters/c1", "", 200, "container.projects.zones.clusters.get"},
		{"GET", z + "/clusters", "", 200, "container.projects.zones.clusters.list"},
		{"GET", z + "/operations", "", 200, "container.projects.zones.operations.list"},
	}
	for _, s := range steps {
		code, out := v.raw(t, s.method, s.path, s.body)
		if code != s.code {
			t.Fatalf("%s %s: %d %s", s.method, s.path, code, js(out))
		}
		if x := v.emu.Exchanges(); x[len(x)-1].MethodID != s.method2 {
			t.Fatalf("%s %s reached %s, want %s", s.method, s.path, x[len(x)-1].MethodID, s.method2)
		}
	}
	v.awaitRunning(t, "us-central1-a", "c1")
	later := []struct {
		method, path, body string
		code               int
		method2            string
	}{
		{"POST", z + "/clusters/c1/nodePools", `{"nodePool":{"name":"p2","initialNodeCount":1}}`, 200, "container.projects.zones.clusters.nodePools.create"},
		{"GET", z + "/clusters/c1/nodePools/p2", "", 200, "container.projects.zones.clusters.nodePools.get"},
		{"GET", z + "/clusters/c1/nodePools", "", 200, "container.projects.zones.clusters.nodePools.list"},
		{"GET", z + "/clusters/c1", "", 200, "container.projects.zones.clusters.get"},
		{"POST", z + "/clusters/c1/nodePools/p2/setSize", `{"nodeCount":3}`, 200, "container.projects.zones.clusters.nodePools.setSize"},
		{"GET", z + "/clusters/c1", "", 200, "container.projects.zones.clusters.get"},
		{"DELETE", z + "/clusters/c1/nodePools/p2", "", 200, "container.projects.zones.clusters.nodePools.delete"},
		{"GET", z + "/clusters/c1", "", 200, "container.projects.zones.clusters.get"},
		{"DELETE", z + "/clusters/c1", "", 200, "container.projects.zones.clusters.delete"},
		{"GET", z + "/clusters/nope", "", 404, "container.projects.zones.clusters.get"},
	}
	for _, s := range later {
		code, out := v.raw(t, s.method, s.path, s.body)
		if code != s.code {
			t.Fatalf("%s %s: %d %s", s.method, s.path, code, js(out))
		}
		if x := v.emu.Exchanges(); x[len(x)-1].MethodID != s.method2 {
			t.Fatalf("%s %s reached %s, want %s", s.method, s.path, x[len(x)-1].MethodID, s.method2)
		}
		if s.method != "GET" {
			if name, _ := out["name"].(string); name != "" {
				code, _ := v.raw(t, "GET", z+"/operations/"+name, "")
				if code != 200 {
					t.Fatalf("operations.get %s: %d", name, code)
				}
			}
		}
	}
}
