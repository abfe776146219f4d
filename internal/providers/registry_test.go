package providers_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

func parse(t *testing.T, text string) *yaml.Node {
	t.Helper()
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(text), &n); err != nil {
		t.Fatal(err)
	}
	return &n
}

type inner struct {
	Zones []string `yaml:"zones"`
}

type block struct {
	Endpoint string            `yaml:"endpoint"`
	Steps    int               `yaml:"steps"`
	Every    time.Duration     `yaml:"every"`
	Inner    inner             `yaml:"inner"`
	List     []inner           `yaml:"list"`
	Map      map[string]inner  `yaml:"map"`
	Free     map[string]string `yaml:"free"`
	Embedded `yaml:",inline"`
	Default  string
}

type Embedded struct {
	Shared bool `yaml:"shared"`
}

func TestDecodeStrict(t *testing.T) {
	tests := []struct {
		name    string
		text    string
		wantErr string // substring; "" for success
		check   func(t *testing.T, b block)
	}{
		{"all known", "endpoint: http://x\nsteps: 2\nevery: 5s\ninner: {zones: [a]}\nlist: [{zones: [b]}]\nmap: {k: {zones: [c]}}\nfree: {anything: goes}\nshared: true\ndefault: d\n", "", func(t *testing.T, b block) {
			if b.Endpoint != "http://x" || b.Steps != 2 || b.Every != 5*time.Second || b.Inner.Zones[0] != "a" || b.List[0].Zones[0] != "b" || b.Map["k"].Zones[0] != "c" || b.Free["anything"] != "goes" || !b.Shared || b.Default != "d" {
				t.Errorf("decoded %+v", b)
			}
		}},
		{"null keeps defaults", "~\n", "", func(t *testing.T, b block) {
			if b.Steps != 7 {
				t.Errorf("defaults lost: %+v", b)
			}
		}},
		{"partial keeps other defaults", "endpoint: e\n", "", func(t *testing.T, b block) {
			if b.Steps != 7 || b.Endpoint != "e" {
				t.Errorf("defaults lost: %+v", b)
			}
		}},
		{"unknown top key", "endpoint: x\ncolour: red\n", `line 2: unknown key "colour"; known: default, endpoint, every, free, inner, list, map, shared, steps`, nil},
		{"unknown nested key", "inner:\n  zones: []\n  size: 3\n", `line 3: unknown key "inner.size"; known: zones`, nil},
		{"unknown key in list item", "list:\n  - zones: []\n  - zonez: []\n", `line 3: unknown key "list[1].zonez"; known: zones`, nil},
		{"unknown key in map value", "map:\n  k:\n    z: 1\n", `line 3: unknown key "map.k.z"; known: zones`, nil},
		{"wrong type", "steps: many\n", "line 1: cannot unmarshal", nil},
		{"repeated key", "steps: 1\nsteps: 2\n", `line 2: mapping key "steps" already defined at line 1`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := block{Steps: 7}
			err := providers.DecodeStrict(parse(t, tt.text), &b)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("DecodeStrict: %v", err)
				}
				tt.check(t, b)
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
			}
			if refusal.CodeOf(err) != refusal.InvalidInput {
				t.Errorf("code %q", refusal.CodeOf(err))
			}
		})
	}
	if err := providers.DecodeStrict(nil, &block{}); err != nil {
		t.Errorf("nil block: %v", err)
	}
}

// stub is an adapter that only remembers its block.
type stub struct {
	providers.Kubernetes
	endpoint string
}

func stubFactory(block *yaml.Node, _ providers.SecretResolver) (providers.Kubernetes, error) {
	var cfg struct {
		Endpoint string `yaml:"endpoint"`
	}
	if err := providers.DecodeStrict(block, &cfg); err != nil {
		return nil, err
	}
	return &stub{endpoint: cfg.Endpoint}, nil
}

func TestRegistry(t *testing.T) {
	r := providers.NewRegistry()
	if err := r.Register("hetzner", stubFactory); err == nil {
		t.Error("registered an unknown id")
	}
	if err := r.Register(providers.FakeID, nil); err == nil {
		t.Error("registered a nil factory")
	}
	if err := r.Register(providers.FakeID, stubFactory); err != nil {
		t.Fatal(err)
	}
	if err := r.Register(providers.FakeID, stubFactory); err == nil {
		t.Error("registered an id twice")
	}
	if !r.Has("fake") || r.Has("aws") || strings.Join(r.IDs(), ",") != "fake" {
		t.Errorf("Has/IDs: %v", r.IDs())
	}

	if _, err := r.Open("aws", nil, nil); !errors.Is(err, providers.ErrNoAdapter) {
		t.Errorf("Open(aws) = %v, want ErrNoAdapter", err)
	}
	if _, err := r.Open("hetzner", nil, nil); refusal.CodeOf(err) != refusal.InvalidInput {
		t.Errorf("Open(hetzner) = %v, want INVALID_INPUT", err)
	}
	_, err := r.Open("fake", parse(t, "endpoint: x\nbogus: 1\n"), nil)
	if refusal.CodeOf(err) != refusal.InvalidInput || !strings.Contains(err.Error(), `providers.fake: line 2: unknown key "bogus"`) {
		t.Errorf("Open with a bad block = %v", err)
	}

	all, err := r.OpenAll(parse(t, "fake:\n  endpoint: http://e\naws:\n  region: x\n"), nil)
	if err != nil {
		t.Fatalf("OpenAll: %v", err)
	}
	if len(all) != 1 || all["fake"].(*stub).endpoint != "http://e" {
		t.Errorf("OpenAll = %v", all)
	}
	if all, err := r.OpenAll(nil, nil); err != nil || all["fake"] == nil {
		t.Errorf("OpenAll without a providers block: %v, %v", all, err)
	}
	_, err = r.OpenAll(parse(t, "fake: {}\nhetzner: {}\n"), nil)
	if refusal.CodeOf(err) != refusal.InvalidInput || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("OpenAll with an unknown provider id = %v", err)
	}
	_, err = r.OpenAll(parse(t, "- fake\n"), nil)
	if refusal.CodeOf(err) != refusal.InvalidInput {
		t.Errorf("OpenAll of a list = %v", err)
	}
}
