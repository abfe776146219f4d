package wirecheck

import (
	"bytes"
	"flag"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// openapiSrc points at a checkout of github.com/digitalocean/openapi. With
// it, TestSubset rewrites testdata/openapi from that checkout: the routes of
// Routes, every file their $refs reach (unmodified), and a root document
// naming only those routes.
var openapiSrc = flag.String("openapi-src", "", "rewrite testdata/openapi from this checkout of digitalocean/openapi")

// rootName is the root document written for the subset.
const rootName = "specification/fleet-agent-subset.yaml"

func TestSubset(t *testing.T) {
	if *openapiSrc != "" {
		extract(t, *openapiSrc)
	}
	// Whether regenerated or not, the subset must load with every $ref
	// resolved and hold every route the emulator serves.
	c, err := Load()
	if err != nil {
		t.Fatalf("the OpenAPI subset does not load: %v", err)
	}
	for _, r := range Routes {
		method, p, _ := strings.Cut(r, " ")
		item := c.doc.Paths.Find(p)
		if item == nil || item.GetOperation(method) == nil {
			t.Errorf("the subset lacks %s", r)
		}
	}
}

func extract(t *testing.T, src string) {
	t.Helper()
	spec := filepath.Join(src, "specification")
	rootBytes, err := os.ReadFile(filepath.Join(spec, "DigitalOcean-public.v2.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(rootBytes, &root); err != nil {
		t.Fatal(err)
	}
	doc := root.Content[0]
	want := map[string][]string{}
	for _, r := range Routes {
		m, p, _ := strings.Cut(r, " ")
		want[p] = append(want[p], strings.ToLower(m))
	}
	// The subset's root: the original's header, its paths filtered to ours,
	// and only the security scheme of its components.
	out := &yaml.Node{Kind: yaml.MappingNode}
	var files []string
	for i := 0; i+1 < len(doc.Content); i += 2 {
		k, v := doc.Content[i], doc.Content[i+1]
		switch k.Value {
		case "openapi", "info", "servers", "security":
			out.Content = append(out.Content, k, v)
		case "paths":
			paths := &yaml.Node{Kind: yaml.MappingNode}
			for j := 0; j+1 < len(v.Content); j += 2 {
				pk, pv := v.Content[j], v.Content[j+1]
				methods, ok := want[pk.Value]
				if !ok {
					continue
				}
				item := &yaml.Node{Kind: yaml.MappingNode}
				for m := 0; m+1 < len(pv.Content); m += 2 {
					if slices.Contains(methods, pv.Content[m].Value) {
						// The description $refs whole operations, which
						// OpenAPI 3.0 does not allow and kin-openapi does
						// not follow: the subset's root holds them inline,
						// their $refs made relative to the root.
						op := inline(t, spec, pv.Content[m+1])
						item.Content = append(item.Content, pv.Content[m], op)
						files = append(files, refsOf(op)...)
					}
				}
				paths.Content = append(paths.Content, pk, item)
			}
			out.Content = append(out.Content, k, paths)
		case "components":
			comp := &yaml.Node{Kind: yaml.MappingNode}
			for j := 0; j+1 < len(v.Content); j += 2 {
				if v.Content[j].Value == "securitySchemes" {
					comp.Content = append(comp.Content, v.Content[j], v.Content[j+1])
				}
			}
			out.Content = append(out.Content, k, comp)
		}
	}
	// Every file the kept operations reach, by their $refs, one file at a
	// time (code samples are extensions nobody validates: left out).
	seen := map[string]bool{}
	for len(files) > 0 {
		f := files[0]
		files = files[1:]
		if seen[f] {
			continue
		}
		seen[f] = true
		b, err := os.ReadFile(filepath.Join(spec, filepath.FromSlash(f)))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		var n yaml.Node
		if err := yaml.Unmarshal(b, &n); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, r := range refsOf(&n) {
			files = append(files, path.Join(path.Dir(f), r))
		}
	}
	dst := filepath.Join("testdata", "openapi")
	// SOURCE.md is ours and stays; what came from the repository goes.
	if err := os.RemoveAll(filepath.Join(dst, "specification")); err != nil {
		t.Fatal(err)
	}
	for f := range seen {
		b, _ := os.ReadFile(filepath.Join(spec, filepath.FromSlash(f)))
		write(t, filepath.Join(dst, "specification", filepath.FromSlash(f)), b)
	}
	var buf bytes.Buffer
	buf.WriteString("# Written by fleet-agent's wirecheck (go test -openapi-src): the header, the\n" +
		"# security scheme and the paths fleet-agent uses, copied from\n" +
		"# specification/DigitalOcean-public.v2.yaml of digitalocean/openapi (see SOURCE.md).\n")
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(out); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dst, filepath.FromSlash(rootName)), buf.Bytes())
	lic, err := os.ReadFile(filepath.Join(src, "LICENSE"))
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dst, "LICENSE"), lic)
	t.Logf("wrote %d files of the description under %s", len(seen)+1, dst)
}

// inline reads the operation file an operation $refs, drops its code
// samples and rebases its $refs on the specification directory.
func inline(t *testing.T, spec string, op *yaml.Node) *yaml.Node {
	t.Helper()
	if op.Kind != yaml.MappingNode || len(op.Content) != 2 || op.Content[0].Value != "$ref" {
		return op
	}
	file := op.Content[1].Value
	b, err := os.ReadFile(filepath.Join(spec, filepath.FromSlash(file)))
	if err != nil {
		t.Fatal(err)
	}
	var n yaml.Node
	if err := yaml.Unmarshal(b, &n); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	body := n.Content[0]
	kept := body.Content[:0]
	for i := 0; i+1 < len(body.Content); i += 2 {
		if body.Content[i].Value != "x-codeSamples" {
			kept = append(kept, body.Content[i], body.Content[i+1])
		}
	}
	body.Content = kept
	var rebase func(*yaml.Node)
	rebase = func(n *yaml.Node) {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Kind == yaml.MappingNode && n.Content[i].Value == "$ref" {
				f, frag, _ := strings.Cut(n.Content[i+1].Value, "#")
				if f != "" {
					v := path.Join(path.Dir(file), f)
					if frag != "" {
						v += "#" + frag
					}
					n.Content[i+1].Value = v
				}
			}
		}
		for _, c := range n.Content {
			rebase(c)
		}
	}
	rebase(body)
	return body
}

// refsOf lists the file parts of the $refs in n, outside x-codeSamples.
func refsOf(n *yaml.Node) []string {
	var out []string
	var walk func(*yaml.Node)
	walk = func(n *yaml.Node) {
		switch n.Kind {
		case yaml.DocumentNode, yaml.SequenceNode:
			for _, c := range n.Content {
				walk(c)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				switch {
				case k.Value == "x-codeSamples":
				case k.Value == "$ref" && v.Kind == yaml.ScalarNode:
					if f, _, _ := strings.Cut(v.Value, "#"); f != "" {
						out = append(out, f)
					}
				default:
					walk(v)
				}
			}
		}
	}
	walk(n)
	return out
}

func write(t *testing.T, p string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
