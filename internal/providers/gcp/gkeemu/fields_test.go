package gkeemu_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/providers/gcp/gkeemu"
	"github.com/fleet-agent/fleet-agent/internal/testutil/golden"
)

type discoveryProp struct {
	Type                 string         `json:"type"`
	Format               string         `json:"format"`
	Ref                  string         `json:"$ref"`
	Items                *discoveryProp `json:"items"`
	AdditionalProperties *discoveryProp `json:"additionalProperties"`
	ReadOnly             bool           `json:"readOnly"`
}

func (p *discoveryProp) spec() *gkeemu.FieldSpec {
	if p == nil {
		return nil
	}
	s := &gkeemu.FieldSpec{Type: p.Type, Format: p.Format, Ref: p.Ref, ReadOnly: p.ReadOnly, Items: p.Items.spec(), Values: p.AdditionalProperties.spec()}
	if s.Ref != "" {
		s.Type = "object"
	}
	if s.Type == "" {
		s.Type = "any"
	}
	return s
}

// TestFieldsFollowDiscovery: the fields the request check knows are those
// of container/v1's discovery document, for every request schema and every
// schema they reach. -update rewrites fields.json from the document.
func TestFieldsFollowDiscovery(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "google.golang.org/api").Output()
	if err != nil {
		t.Fatalf("locating google.golang.org/api: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "container/v1/container-api.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Schemas map[string]struct {
			Properties map[string]*discoveryProp `json:"properties"`
		} `json:"schemas"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]*gkeemu.FieldSpec{}
	var reach func(name string)
	reach = func(name string) {
		if _, done := got[name]; done {
			return
		}
		s, ok := doc.Schemas[name]
		if !ok {
			t.Fatalf("schema %s is not in the discovery document", name)
		}
		got[name] = map[string]*gkeemu.FieldSpec{}
		for k, p := range s.Properties {
			got[name][k] = p.spec()
		}
		for _, p := range s.Properties {
			for q := p; q != nil; {
				if q.Ref != "" {
					reach(q.Ref)
				}
				switch {
				case q.Items != nil:
					q = q.Items
				case q.AdditionalProperties != nil:
					q = q.AdditionalProperties
				default:
					q = nil
				}
			}
		}
	}
	for _, r := range gkeemu.RequestSchemas {
		reach(r)
	}
	js, err := json.MarshalIndent(got, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "fields.json", append(js, '\n'))
}
