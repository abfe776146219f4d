package providers

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

// The provider ids of the documented surface (docs/substrates.md).
const (
	AWS          = "aws"
	GCP          = "gcp"
	DigitalOcean = "digitalocean"
	FakeID       = "fake"
)

// KnownIDs are the provider ids a document or a config may name, sorted.
var KnownIDs = []string{AWS, DigitalOcean, FakeID, GCP}

// Known reports whether id is one of KnownIDs.
func Known(id string) bool { return slices.Contains(KnownIDs, id) }

// SecretResolver turns a secret reference into its value. Adapters call it
// at the moment of use and keep the value no longer than the call.
type SecretResolver interface {
	Resolve(ctx context.Context, ref string) (string, error)
}

// Factory opens an adapter from its block of the agent config
// (`providers.<id>`, nil when the config has none) and a resolver for the
// secret references in the block and in accounts. It decodes the block
// strictly (DecodeStrict) and reports a bad block as INVALID_INPUT with the
// line.
type Factory func(block *yaml.Node, secrets SecretResolver) (Kubernetes, error)

// ErrNoAdapter is returned by Registry.Open for a known provider id that has
// no adapter in this build; its accounts are checked offline.
var ErrNoAdapter = errors.New("no adapter for this provider in this build")

// Registry maps provider ids to the factories of their adapters. The binary
// builds one and registers what it links in; nothing registers itself, so a
// package that does not import an adapter cannot reach it.
type Registry struct {
	factories map[string]Factory
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{factories: map[string]Factory{}} }

// Register adds the factory of a provider id. An id outside KnownIDs, a nil
// factory or a second registration of an id is a programming error.
func (r *Registry) Register(id string, f Factory) error {
	switch {
	case !Known(id):
		return fmt.Errorf("providers: unknown provider id %q (known: %s)", id, strings.Join(KnownIDs, ", "))
	case f == nil:
		return fmt.Errorf("providers: nil factory for %q", id)
	case r.factories[id] != nil:
		return fmt.Errorf("providers: %q registered twice", id)
	}
	r.factories[id] = f
	return nil
}

// Has reports whether id has an adapter.
func (r *Registry) Has(id string) bool { return r.factories[id] != nil }

// IDs lists the registered ids, sorted.
func (r *Registry) IDs() []string {
	ids := make([]string, 0, len(r.factories))
	for id := range r.factories {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// Open opens the adapter of id with its config block. An unknown id is
// INVALID_INPUT; a known id without an adapter is ErrNoAdapter; a block the
// adapter refuses is INVALID_INPUT prefixed with `providers.<id>`.
func (r *Registry) Open(id string, block *yaml.Node, secrets SecretResolver) (Kubernetes, error) {
	if !Known(id) {
		return nil, refusal.New(refusal.InvalidInput, "providers: unknown provider id %q (known: %s)", id, strings.Join(KnownIDs, ", "))
	}
	f := r.factories[id]
	if f == nil {
		return nil, fmt.Errorf("providers.%s: %w", id, ErrNoAdapter)
	}
	a, err := f(block, secrets)
	if err != nil {
		var ref *refusal.Error
		if errors.As(err, &ref) {
			return nil, &refusal.Error{Code: ref.Code, Message: "providers." + id + ": " + ref.Message, Err: err}
		}
		return nil, refusal.Wrap(refusal.InvalidInput, err, "providers.%s", id)
	}
	return a, nil
}

// OpenAll opens the adapter of every registered id, giving each its block
// of the config's `providers` mapping (nil when the mapping has none). A key
// of the mapping that is not a known id is INVALID_INPUT with its line; a
// known id without an adapter is left out (checked offline).
func (r *Registry) OpenAll(providersBlock *yaml.Node, secrets SecretResolver) (map[string]Kubernetes, error) {
	blocks := map[string]*yaml.Node{}
	if n := resolveNode(providersBlock); n != nil && n.Tag != "!!null" {
		if n.Kind != yaml.MappingNode {
			return nil, refusal.New(refusal.InvalidInput, "providers: line %d: expected a mapping of provider ids", n.Line)
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if !Known(k.Value) {
				return nil, refusal.New(refusal.InvalidInput, "providers: line %d: unknown provider id %q (known: %s)", k.Line, k.Value, strings.Join(KnownIDs, ", "))
			}
			if _, dup := blocks[k.Value]; dup {
				return nil, refusal.New(refusal.InvalidInput, "providers: line %d: provider %q repeated", k.Line, k.Value)
			}
			blocks[k.Value] = n.Content[i+1]
		}
	}
	out := map[string]Kubernetes{}
	for _, id := range r.IDs() {
		a, err := r.Open(id, blocks[id], secrets)
		if err != nil {
			return nil, err
		}
		out[id] = a
	}
	return out, nil
}

func resolveNode(n *yaml.Node) *yaml.Node {
	for n != nil {
		switch n.Kind {
		case yaml.DocumentNode:
			if len(n.Content) == 0 {
				return nil
			}
			n = n.Content[0]
		case yaml.AliasNode:
			n = n.Alias
		default:
			return n
		}
	}
	return nil
}

// DecodeStrict decodes a config block into v, refusing an unknown or
// repeated key and a value of the wrong type with its line
// (INVALID_INPUT). yaml.v3 checks types and repeated keys on a Node but
// knows nothing of unknown keys there, so they are found here by walking
// the block against v's type. A nil or null block leaves v as it is, so
// that v's defaults stand.
func DecodeStrict(block *yaml.Node, v any) error {
	n := resolveNode(block)
	if n == nil || n.Tag == "!!null" {
		return nil
	}
	var errs []string
	checkKnown(n, reflect.TypeOf(v), "", &errs)
	if len(errs) > 0 {
		return refusal.New(refusal.InvalidInput, "%s", strings.Join(errs, "; "))
	}
	if err := n.Decode(v); err != nil {
		msg := strings.TrimPrefix(err.Error(), "yaml: unmarshal errors:\n")
		msg = strings.Join(strings.Fields(strings.ReplaceAll(msg, "\n", ";")), " ")
		return refusal.New(refusal.InvalidInput, "%s", msg)
	}
	return nil
}

var unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()

func checkKnown(n *yaml.Node, t reflect.Type, path string, errs *[]string) {
	n = resolveNode(n)
	if n == nil || t == nil {
		return
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		return // it decides for itself what it accepts
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return // Decode reports the type error with its line
		}
		fields, anyKey := yamlFields(t)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			ft, ok := fields[k.Value]
			if !ok {
				if !anyKey {
					*errs = append(*errs, fmt.Sprintf("line %d: unknown key %q; known: %s", k.Line, join(path, k.Value), knownKeys(fields)))
				}
				continue
			}
			checkKnown(n.Content[i+1], ft, join(path, k.Value), errs)
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			checkKnown(n.Content[i+1], t.Elem(), join(path, n.Content[i].Value), errs)
		}
	case reflect.Slice, reflect.Array:
		if n.Kind != yaml.SequenceNode {
			return
		}
		for i, item := range n.Content {
			checkKnown(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i), errs)
		}
	}
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// yamlFields maps the keys yaml.v3 decodes into t's fields (its rules: the
// tag's name, else the lower-cased field name; inline structs merged; an
// inline map takes any key).
func yamlFields(t reflect.Type) (map[string]reflect.Type, bool) {
	fields := map[string]reflect.Type{}
	anyKey := false
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("yaml")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if slices.Contains(strings.Split(opts, ","), "inline") {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Map {
				anyKey = true
				continue
			}
			inner, innerAny := yamlFields(ft)
			for k, v := range inner {
				fields[k] = v
			}
			anyKey = anyKey || innerAny
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		fields[name] = f.Type
	}
	return fields, anyKey
}

// knownKeys lists a block's keys, sorted, as the rest of the config's
// errors list them: the typo's neighbour is then in sight.
func knownKeys(fields map[string]reflect.Type) string {
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return strings.Join(keys, ", ")
}
