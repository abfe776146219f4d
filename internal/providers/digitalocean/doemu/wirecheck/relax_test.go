package wirecheck

import (
	"net/http"
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/providers/digitalocean/doemu"
)

// TestRelaxations: each relaxation lifts exactly its field (a PUT without
// a name passes, a misspelt member is still caught), and one the
// description no longer needs is refused at load.
func TestRelaxations(t *testing.T) {
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	put := func(path, body string) []error {
		return c.Check(doemu.Exchange{Method: "PUT", Path: path, Header: http.Header{"Content-Type": {"application/json"}},
			Body: []byte(body), Dropped: true})
	}
	const cluster = "/v2/kubernetes/clusters/bd5f5959-5e1e-4205-a714-a914373942af"
	const pool = cluster + "/node_pools/cdda885e-7663-40c8-bc74-3a036c66545d"
	cases := []struct {
		name, path, body, want string
	}{
		{"cluster update without a name", cluster, `{"auto_upgrade":true}`, ""},
		{"cluster update with a policy's duration", cluster, `{"maintenance_policy":{"start_time":"03:00","duration":"","day":"any"}}`, ""},
		{"pool update without name or count", pool, `{"labels":{"a":"b"}}`, ""},
		{"a firewall update with enabled null", cluster, `{"control_plane_firewall":{"enabled":null,"allowed_addresses":["10.0.0.0/8"]}}`, ""},
		{"a null elsewhere is still caught", cluster, `{"routing_agent":{"enabled":null}}`, "nullable"},
		{"a misspelt member is still caught", cluster, `{"auto_upgrad":true}`, "/auto_upgrad is not declared"},
		{"a wrong type is still caught", pool, `{"count":"2"}`, "count"},
	}
	for _, tc := range cases {
		errs := put(tc.path, tc.body)
		var all strings.Builder
		for _, e := range errs {
			all.WriteString(e.Error())
		}
		switch {
		case tc.want == "" && len(errs) > 0:
			t.Errorf("%s: %s", tc.name, all.String())
		case tc.want != "" && !strings.Contains(all.String(), tc.want):
			t.Errorf("%s: want an error about %q, got %q", tc.name, tc.want, all.String())
		}
	}
	c2, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, stale := range []Relaxation{
		{Route: "PUT /v2/kubernetes/clusters/{cluster_id}", Field: "tags", Kind: Required, Why: "not required anyway"},
		{Route: "PUT /v2/kubernetes/clusters/{cluster_id}", Field: "tags", Kind: ReadOnly, Why: "not read-only anyway"},
		{Route: "PUT /v2/kubernetes/clusters/{cluster_id}", Field: "maintenance_policy", Kind: Nullable, Why: "nullable anyway"},
	} {
		if err := relax(c2.doc, []Relaxation{stale}); err == nil || !strings.Contains(err.Error(), "no longer holds "+stale.Field) {
			t.Errorf("a stale relaxation %+v: %v", stale, err)
		}
	}
}
