// Package wirecheck holds the emulator and the requests godo sends against
// DigitalOcean's own description of its API: the OpenAPI 3.0 documents of
// github.com/digitalocean/openapi (Apache 2.0, see testdata/openapi/SOURCE.md)
// for the routes doemu serves, validated with kin-openapi.
//
// Beyond what a schema says (types, required fields, enums, formats), Check
// also refuses a property no schema of the exchange declares, so that the
// emulator cannot drift into answering, or the adapter into sending, fields
// the service does not have. The one field allowed without a declaration is
// listed in Undeclared, with why. Where DigitalOcean's own shipped clients
// (godo, doctl) show the service taking more than the description allows,
// Looser lifts exactly that rule for that field, with why.
//
// It is a test helper: only tests import it, and nothing of it reaches the
// binary.
package wirecheck

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/fleet-agent/fleet-agent/internal/providers/digitalocean/doemu"
)

//go:embed testdata/openapi
var files embed.FS

// Routes are the routes the subset must describe: the emulator's.
var Routes = doemu.Routes

// Undeclared are the properties Check takes although the description
// declares none of that name there, each with the reason.
var Undeclared = map[string]string{
	// The Spot preview has no public wire form (godo v1.237.0 and the
	// description name none); doemu and the adapter both guess `spot` on a
	// node pool.
	"spot": "the Spot preview's guessed node pool field",
}

// Looser are the places where the service, as DigitalOcean's own shipped
// clients show it, takes more than the description allows. Check holds
// requests to the description with exactly these lifted, and Load fails
// once the description no longer has one (then drop it here).
var Looser = []Relaxation{
	{
		Route: "PUT /v2/kubernetes/clusters/{cluster_id}", Field: "name", Kind: Required,
		Why: "godo marks name omitempty on a cluster update and doctl's `kubernetes cluster update` sends it only with --cluster-name (doemu/doctl's transcript)",
	},
	{
		Route: "PUT /v2/kubernetes/clusters/{cluster_id}/node_pools/{node_pool_id}", Field: "name", Kind: Required,
		Why: "godo marks name omitempty on a node pool update and doctl's `node-pool update` sends it only with --name",
	},
	{
		Route: "PUT /v2/kubernetes/clusters/{cluster_id}/node_pools/{node_pool_id}", Field: "count", Kind: Required,
		Why: "godo's count is an omitempty pointer and doctl's `node-pool update` sends it only with --count",
	},
	{
		Route: "POST /v2/kubernetes/clusters", Field: "maintenance_policy.duration", Kind: ReadOnly,
		Why: "godo's KubernetesMaintenancePolicy has no omitempty on it: every create with a policy (doctl's always has one) sends \"duration\":\"\"",
	},
	{
		Route: "PUT /v2/kubernetes/clusters/{cluster_id}", Field: "maintenance_policy.duration", Kind: ReadOnly,
		Why: "godo sends \"duration\":\"\" with every maintenance policy, and doctl's updates always carry one",
	},
	{
		Route: "PUT /v2/kubernetes/clusters/{cluster_id}", Field: "control_plane_firewall.enabled", Kind: Nullable,
		Why: "doctl's `cluster update --control-plane-firewall-allowed-addresses` without --enable-control-plane-firewall sends \"enabled\":null (godo's Enabled is a *bool without omitempty)",
	},
}

// Kind is what a relaxation lifts.
type Kind int

const (
	// Required: the field may be left out.
	Required Kind = iota
	// ReadOnly: a request may carry the field.
	ReadOnly
	// Nullable: the field may be null.
	Nullable
)

// Relaxation is a request field (a dotted path) of one route that Check
// does not hold to the description in one respect, and why.
type Relaxation struct {
	Route, Field string
	Kind         Kind
	Why          string
}

// relax lifts rs from doc's request bodies.
func relax(doc *openapi3.T, rs []Relaxation) error {
	// A schema shared by two routes is lifted once for both.
	lifted := map[*openapi3.Schema]bool{}
	for _, r := range rs {
		method, p, _ := strings.Cut(r.Route, " ")
		item := doc.Paths.Find(p)
		if item == nil || item.GetOperation(method) == nil || item.GetOperation(method).RequestBody == nil {
			return fmt.Errorf("wirecheck: relaxation of %s: no such request body", r.Route)
		}
		mt := item.GetOperation(method).RequestBody.Value.Content.Get("application/json")
		if mt == nil || mt.Schema == nil {
			return fmt.Errorf("wirecheck: relaxation of %s: no JSON body", r.Route)
		}
		s := mt.Schema.Value
		segs := strings.Split(r.Field, ".")
		for _, seg := range segs[:len(segs)-1] {
			prop := s.Properties[seg]
			if prop == nil {
				return fmt.Errorf("wirecheck: relaxation of %s: no property %s", r.Route, r.Field)
			}
			s = prop.Value
		}
		last := segs[len(segs)-1]
		prop := s.Properties[last]
		stale := fmt.Errorf("wirecheck: the description of %s no longer holds %s so: drop its relaxation", r.Route, r.Field)
		switch r.Kind {
		case Required:
			if !slices.Contains(s.Required, last) {
				return stale
			}
			s.Required = slices.DeleteFunc(slices.Clone(s.Required), func(f string) bool { return f == last })
		case ReadOnly:
			if prop == nil || !(prop.Value.ReadOnly || lifted[prop.Value]) {
				return stale
			}
			prop.Value.ReadOnly, lifted[prop.Value] = false, true
		case Nullable:
			if prop == nil || (prop.Value.Nullable && !lifted[prop.Value]) {
				return stale
			}
			prop.Value.Nullable, lifted[prop.Value] = true, true
		}
	}
	return nil
}

// Checker validates exchanges against the description.
type Checker struct {
	doc    *openapi3.T
	router routers.Router
}

var shared struct {
	once sync.Once
	c    *Checker
	err  error
}

// Shared is one Checker for a whole test binary: loading and validating
// the description takes about a second.
func Shared() (*Checker, error) {
	shared.once.Do(func() { shared.c, shared.err = Load() })
	return shared.c, shared.err
}

// Load reads the embedded description.
func Load() (*Checker, error) {
	root, err := fs.Sub(files, "testdata/openapi")
	if err != nil {
		return nil, err
	}
	loader := openapi3.NewLoader()
	loader.IsExternalRefsAllowed = true
	loader.ReadFromURIFunc = func(_ *openapi3.Loader, u *url.URL) ([]byte, error) {
		return fs.ReadFile(root, strings.TrimPrefix(path.Clean(u.Path), "/"))
	}
	doc, err := loader.LoadFromURI(&url.URL{Path: "specification/fleet-agent-subset.yaml"})
	if err != nil {
		return nil, fmt.Errorf("wirecheck: load: %w", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("wirecheck: the description itself is invalid: %w", err)
	}
	if err := relax(doc, Looser); err != nil {
		return nil, err
	}
	// Route on paths alone: the description's server is the real API's.
	doc.Servers = nil
	router, err := legacy.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("wirecheck: router: %w", err)
	}
	return &Checker{doc: doc, router: router}, nil
}

// Check validates one exchange: the request (path, query, body) and, unless
// it was dropped, the answer (status, headers, body). Exchanges outside the
// DigitalOcean API (the TokenReview route) are not its business.
func (c *Checker) Check(x doemu.Exchange) []error {
	if !strings.HasPrefix(x.Path, "/v2/") {
		return nil
	}
	ctx := context.Background()
	u := &url.URL{Scheme: "http", Host: "doemu", Path: x.Path, RawQuery: x.RawQuery}
	req, err := http.NewRequestWithContext(ctx, x.Method, u.String(), bytes.NewReader(x.Body))
	if err != nil {
		return []error{err}
	}
	req.Header = x.Header.Clone()
	route, params, err := c.router.FindRoute(req)
	if err != nil {
		return []error{fmt.Errorf("%s %s: no such route in the description: %w", x.Method, x.Path, err)}
	}
	in := &openapi3filter.RequestValidationInput{
		Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true},
	}
	var errs []error
	where := x.Method + " " + route.Path
	if err := openapi3filter.ValidateRequest(ctx, in); err != nil {
		errs = append(errs, fmt.Errorf("%s: request: %w", where, err))
	}
	if op := route.Operation; op.RequestBody != nil && len(x.Body) > 0 {
		if mt := op.RequestBody.Value.Content.Get("application/json"); mt != nil {
			errs = append(errs, undeclared(where+": request", x.Body, mt.Schema)...)
		}
	}
	if x.Dropped {
		return errs
	}
	resp := route.Operation.Responses.Status(x.Status)
	if resp == nil {
		resp = route.Operation.Responses.Default()
	}
	if resp == nil {
		return append(errs, fmt.Errorf("%s: status %d is not in the description", where, x.Status))
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: x.Status, Header: x.RespHeader,
		Body:    io.NopCloser(bytes.NewReader(x.RespBody)),
		Options: &openapi3filter.Options{MultiError: true, IncludeResponseStatus: true},
	}
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		errs = append(errs, fmt.Errorf("%s: answer %d: %w", where, x.Status, err))
	}
	for name := range resp.Value.Headers {
		if x.RespHeader.Get(name) == "" {
			errs = append(errs, fmt.Errorf("%s: answer %d lacks the header %s", where, x.Status, name))
		}
	}
	if mt := resp.Value.Content.Get("application/json"); mt != nil && len(bytes.TrimSpace(x.RespBody)) > 0 {
		errs = append(errs, undeclared(fmt.Sprintf("%s: answer %d", where, x.Status), x.RespBody, mt.Schema)...)
	} else if mt == nil && len(resp.Value.Content) == 0 && len(bytes.TrimSpace(x.RespBody)) > 0 {
		errs = append(errs, fmt.Errorf("%s: answer %d has a body the description does not have", where, x.Status))
	}
	return errs
}

// undeclared finds properties of body that no schema at their place
// declares.
//
// In a request, a taint's members may come capitalised: godo's Taint has no
// JSON tags, so godo (and doctl through it) sends Key, Value and Effect, and
// the service, which those clients are tested against, reads either case.
// Answers are held to the description's lower case.
func undeclared(where string, body []byte, s *openapi3.SchemaRef) []error {
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return []error{fmt.Errorf("%s: not JSON: %w", where, err)}
	}
	var errs []error
	fold := strings.HasSuffix(where, ": request")
	walk(v, []*openapi3.Schema{derefSchema(s)}, "", fold, func(p string) {
		errs = append(errs, fmt.Errorf("%s: %s is not declared by the description", where, p))
	})
	return errs
}

func derefSchema(s *openapi3.SchemaRef) *openapi3.Schema {
	if s == nil {
		return nil
	}
	return s.Value
}

// flatten gathers a schema and the schemas it is composed of.
func flatten(ss []*openapi3.Schema) []*openapi3.Schema {
	var out []*openapi3.Schema
	var add func(*openapi3.Schema)
	add = func(s *openapi3.Schema) {
		if s == nil || slices.Contains(out, s) {
			return
		}
		out = append(out, s)
		for _, group := range []openapi3.SchemaRefs{s.AllOf, s.AnyOf, s.OneOf} {
			for _, r := range group {
				add(r.Value)
			}
		}
	}
	for _, s := range ss {
		add(s)
	}
	return out
}

var taintAt = regexp.MustCompile(`/taints/[0-9]+$`)

func walk(v any, schemas []*openapi3.Schema, at string, fold bool, report func(string)) {
	schemas = flatten(schemas)
	switch x := v.(type) {
	case map[string]any:
		declared := map[string][]*openapi3.Schema{}
		open := len(schemas) == 0
		for _, s := range schemas {
			for name, p := range s.Properties {
				declared[name] = append(declared[name], p.Value)
			}
			if ap := s.AdditionalProperties; ap.Schema != nil || (ap.Has != nil && *ap.Has) {
				open = true
			}
		}
		if len(declared) == 0 {
			open = true // a free-form object (labels): any key
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			sub, ok := declared[k]
			if !ok && fold && taintAt.MatchString(at) {
				sub, ok = declared[strings.ToLower(k)]
			}
			if !ok {
				if !open {
					if _, allowed := Undeclared[k]; !allowed {
						report(at + "/" + k)
					}
				}
				continue
			}
			walk(x[k], sub, at+"/"+k, fold, report)
		}
	case []any:
		var items []*openapi3.Schema
		for _, s := range schemas {
			if s.Items != nil {
				items = append(items, s.Items.Value)
			}
		}
		for i, item := range x {
			walk(item, items, fmt.Sprintf("%s/%d", at, i), fold, report)
		}
	}
}
