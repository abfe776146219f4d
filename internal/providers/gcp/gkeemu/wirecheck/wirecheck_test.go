package wirecheck_test

import (
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/providers/gcp/gkeemu/wirecheck"
)

// TestDocsLoad: both documents are the ones google.golang.org/api ships, with the
// methods the emulator serves.
func TestDocsLoad(t *testing.T) {
	ds, err := wirecheck.Docs()
	if err != nil {
		t.Fatal(err)
	}
	c := ds["/v1/"]
	if c.Name != "container" || c.Revision != "20261027" || len(c.Schemas) < 200 {
		t.Errorf("container document: %s rev %s, %d schemas", c.Name, c.Revision, len(c.Schemas))
	}
	if ds["/compute/v1/"].Name != "compute" {
		t.Errorf("compute document: %s", ds["/compute/v1/"].Name)
	}
	for _, r := range []struct{ method, path, id string }{
		{"POST", "/v1/projects/p/locations/us-central1/clusters", "container.projects.locations.clusters.create"},
		{"POST", "/v1/projects/p/locations/l/clusters/c/nodePools/np:setSize", "container.projects.locations.clusters.nodePools.setSize"},
		{"GET", "/v1/projects/p/locations/l/clusters/c/nodePools/np", "container.projects.locations.clusters.nodePools.get"},
		{"GET", "/compute/v1/projects/p/zones/z/machineTypes/a3-highgpu-8g", "compute.machineTypes.get"},
	} {
		d := ds["/v1/"]
		if strings.HasPrefix(r.path, "/compute/") {
			d = ds["/compute/v1/"]
		}
		m, ok := d.Match(r.method, r.path)
		if !ok || m.ID != r.id {
			t.Errorf("%s %s matched %+v", r.method, r.path, m)
		}
	}
}

// TestCheckCatches: the check finds each kind of drift it exists for; a
// faithful answer passes.
func TestCheckCatches(t *testing.T) {
	pool := "/v1/projects/p/locations/l/clusters/c/nodePools/np"
	op := "/v1/projects/p/locations/l/operations/op"
	cases := []struct {
		name string
		x    wirecheck.Exchange
		want string // "" when the exchange is faithful
	}{
		{"faithful node pool", wirecheck.Exchange{Method: "GET", Path: pool, Query: "alt=json&prettyPrint=false", Status: 200,
			Body: []byte(`{"name":"np","status":"RUNNING","initialNodeCount":1,"config":{"machineType":"a3-highgpu-8g","accelerators":[{"acceleratorCount":"8","acceleratorType":"nvidia-h100-80gb"}],"labels":{"a":"b"}}}`)}, ""},
		{"unknown field", wirecheck.Exchange{Method: "GET", Path: pool, Status: 200, Body: []byte(`{"name":"np","nodeCount":3}`)}, `field "nodeCount" is not in NodePool`},
		{"enum", wirecheck.Exchange{Method: "GET", Path: pool, Status: 200, Body: []byte(`{"status":"READY"}`)}, `"READY" is not one of`},
		{"int64 as a number", wirecheck.Exchange{Method: "GET", Path: pool, Status: 200, Body: []byte(`{"config":{"accelerators":[{"acceleratorCount":8}]}}`)}, `.config.accelerators[0].acceleratorCount: want a string (format "int64")`},
		{"int32 as a string", wirecheck.Exchange{Method: "GET", Path: pool, Status: 200, Body: []byte(`{"initialNodeCount":"1"}`)}, "want an integer"},
		{"null", wirecheck.Exchange{Method: "GET", Path: pool, Status: 200, Body: []byte(`{"locations":null}`)}, "null"},
		{"timestamp", wirecheck.Exchange{Method: "GET", Path: op, Status: 200, Body: []byte(`{"name":"op","startTime":"yesterday"}`)}, ""},
		{"no such route", wirecheck.Exchange{Method: "POST", Path: pool + ":resize", Status: 200, Body: []byte(`{}`)}, "no method of container"},
		{"wrong id", wirecheck.Exchange{Method: "GET", Path: pool, MethodID: "container.projects.locations.clusters.get", Status: 200, Body: []byte(`{}`)}, "the emulator served it as"},
		{"unknown query", wirecheck.Exchange{Method: "GET", Path: pool, Query: "alt=json&verbose=1", Status: 200, Body: []byte(`{}`)}, `query parameter "verbose"`},
		{"error code mismatch", wirecheck.Exchange{Method: "GET", Path: pool, Status: 404, Body: []byte(`{"error":{"code":400,"message":"x","errors":[{"message":"x","domain":"global","reason":"notFound"}],"status":"NOT_FOUND"}}`)}, "is not the HTTP status 404"},
		{"error status", wirecheck.Exchange{Method: "GET", Path: pool, Status: 404, Body: []byte(`{"error":{"code":404,"message":"x","errors":[{"message":"x","domain":"global","reason":"notFound"}],"status":"MISSING"}}`)}, "not a google.rpc.Code"},
		{"error without reason", wirecheck.Exchange{Method: "GET", Path: pool, Status: 404, Body: []byte(`{"error":{"code":404,"message":"x","errors":[{"message":"x"}]}}`)}, "without a reason"},
		{"faithful error", wirecheck.Exchange{Method: "GET", Path: pool, Status: 404, Body: []byte(`{"error":{"code":404,"message":"Not found: x.","errors":[{"message":"Not found: x.","domain":"global","reason":"notFound"}],"status":"NOT_FOUND"}}`)}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := wirecheck.Check([]wirecheck.Exchange{c.x})
			if err != nil {
				t.Fatal(err)
			}
			joined := strings.Join(got, "\n")
			switch {
			case c.want == "" && c.name == "timestamp":
				// Operation.startTime is a plain string in the document: the
				// check holds the emulator to the document, no more.
				if len(got) != 0 {
					t.Errorf("want nothing, got %s", joined)
				}
			case c.want == "" && len(got) != 0:
				t.Errorf("a faithful exchange was refused: %s", joined)
			case c.want != "" && !strings.Contains(joined, c.want):
				t.Errorf("want a problem containing %q, got %q", c.want, joined)
			}
		})
	}
}
