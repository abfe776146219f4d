// Package wirecheck holds the GKE emulator to Google's own description of
// the APIs it stands in for: the discovery documents google.golang.org/api
// ships beside its generated clients (container/v1/container-api.json,
// compute/v1/compute-api.json). Every exchange a test made is matched to a
// discovery method by HTTP method and path template, its query parameters
// must be ones the method or the API declares, and its answer is checked
// field by field against the method's response schema (names, JSON types,
// integer and timestamp formats, enum values) or, for an error, against the
// shape of Google's JSON errors. So the emulator cannot drift into answering
// only what the adapter happens to read.
package wirecheck

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/providers/gcp/gkeemu"
)

// Schema is a discovery document's JSON schema, the parts that say what a
// value may be.
type Schema struct {
	ID                   string             `json:"id"`
	Type                 string             `json:"type"`
	Ref                  string             `json:"$ref"`
	Format               string             `json:"format"`
	Enum                 []string           `json:"enum"`
	Properties           map[string]*Schema `json:"properties"`
	AdditionalProperties *Schema            `json:"additionalProperties"`
	Items                *Schema            `json:"items"`
}

type rawMethod struct {
	ID         string                     `json:"id"`
	Path       string                     `json:"path"`
	FlatPath   string                     `json:"flatPath"`
	HTTPMethod string                     `json:"httpMethod"`
	Parameters map[string]json.RawMessage `json:"parameters"`
	Response   *Schema                    `json:"response"`
}

type rawResource struct {
	Methods   map[string]rawMethod   `json:"methods"`
	Resources map[string]rawResource `json:"resources"`
}

type rawDoc struct {
	Name        string                     `json:"name"`
	Version     string                     `json:"version"`
	Revision    string                     `json:"revision"`
	ServicePath string                     `json:"servicePath"`
	Parameters  map[string]json.RawMessage `json:"parameters"`
	Schemas     map[string]*Schema         `json:"schemas"`
	Resources   map[string]rawResource     `json:"resources"`
}

// Method is one discovery method, as a route.
type Method struct {
	ID         string
	HTTPMethod string
	Template   string
	Response   string // schema name, "" when the method answers nothing
	re         *regexp.Regexp
	params     map[string]bool
}

// Doc is one parsed discovery document.
type Doc struct {
	Name     string
	Revision string
	Schemas  map[string]*Schema
	Methods  []*Method
	std      map[string]bool
}

// Load parses a discovery document.
func Load(path string) (*Doc, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var raw rawDoc
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	d := &Doc{Name: raw.Name, Revision: raw.Revision, Schemas: raw.Schemas, std: map[string]bool{}}
	for p := range raw.Parameters {
		d.std[p] = true
	}
	var walk func(map[string]rawResource)
	walk = func(rs map[string]rawResource) {
		for _, r := range rs {
			for _, m := range r.Methods {
				tmpl := m.FlatPath
				if tmpl == "" {
					tmpl = m.Path
				}
				tmpl = "/" + raw.ServicePath + tmpl
				re, err := templateRE(tmpl)
				if err != nil {
					continue
				}
				mm := &Method{ID: m.ID, HTTPMethod: m.HTTPMethod, Template: tmpl, re: re, params: map[string]bool{}}
				if m.Response != nil {
					mm.Response = m.Response.Ref
				}
				for p := range m.Parameters {
					mm.params[p] = true
				}
				d.Methods = append(d.Methods, mm)
			}
			walk(r.Resources)
		}
	}
	walk(raw.Resources)
	slices.SortFunc(d.Methods, func(a, b *Method) int { return strings.Compare(a.ID, b.ID) })
	return d, nil
}

var paramRE = regexp.MustCompile(`\{(\+?)[^}]+\}`)

// templateRE turns "/v1/projects/{projectsId}/clusters/{clustersId}:setSize"
// into a regexp; a {param} is one path segment without ':' (no name the
// APIs take has one), {+param} any run of characters.
func templateRE(t string) (*regexp.Regexp, error) {
	var b strings.Builder
	b.WriteString("^")
	last := 0
	for _, m := range paramRE.FindAllStringSubmatchIndex(t, -1) {
		b.WriteString(regexp.QuoteMeta(t[last:m[0]]))
		if m[3] > m[2] {
			b.WriteString(`.+`)
		} else {
			b.WriteString(`[^/:]+`)
		}
		last = m[1]
	}
	b.WriteString(regexp.QuoteMeta(t[last:]))
	b.WriteString("$")
	return regexp.Compile(b.String())
}

// Match finds the method a request reached.
func (d *Doc) Match(httpMethod, path string) (*Method, bool) {
	for _, m := range d.Methods {
		if m.HTTPMethod == httpMethod && m.re.MatchString(path) {
			return m, true
		}
	}
	return nil, false
}

// Exchange is what the check needs of one request and its answer.
type Exchange struct {
	Method   string
	Path     string // escaped path
	Query    string // raw query
	MethodID string // what the emulator says it served; "" if nothing
	Status   int
	Body     []byte
}

// CheckExchange lists what is wrong with one exchange; nil when nothing.
func (d *Doc) CheckExchange(x Exchange) []string {
	where := x.Method + " " + x.Path
	m, ok := d.Match(x.Method, x.Path)
	if !ok {
		return []string{where + ": no method of " + d.Name + " has this route"}
	}
	var out []string
	if x.MethodID != "" && x.MethodID != m.ID {
		out = append(out, fmt.Sprintf("%s: the emulator served it as %s, discovery says %s", where, x.MethodID, m.ID))
	}
	if q, err := parseQuery(x.Query); err != nil {
		out = append(out, where+": bad query: "+err.Error())
	} else {
		for _, k := range q {
			if !d.std[k] && !m.params[k] {
				out = append(out, fmt.Sprintf("%s: query parameter %q is not one %s takes", where, k, m.ID))
			}
		}
	}
	if x.Status == 0 {
		return out // dropped on purpose: nothing was answered
	}
	v, err := decode(x.Body)
	if err != nil {
		return append(out, fmt.Sprintf("%s: answer %d is not JSON: %v", where, x.Status, err))
	}
	if x.Status < 200 || x.Status > 299 {
		for _, p := range checkError(v, x.Status) {
			out = append(out, where+": error answer: "+p)
		}
		return out
	}
	if m.Response == "" {
		return out
	}
	for _, p := range d.Validate(m.Response, v) {
		out = append(out, where+": "+m.Response+p)
	}
	return out
}

func parseQuery(raw string) ([]string, error) {
	var keys []string
	for _, kv := range strings.Split(raw, "&") {
		if kv == "" {
			continue
		}
		k, _, _ := strings.Cut(kv, "=")
		keys = append(keys, k)
	}
	return keys, nil
}

func decode(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, fmt.Errorf("trailing data")
	}
	return v, nil
}

// Validate checks a decoded JSON value (numbers as json.Number) against a
// named schema and lists the problems, each starting with its JSON path.
func (d *Doc) Validate(schema string, v any) []string {
	s := d.Schemas[schema]
	if s == nil {
		return []string{": no schema " + schema}
	}
	var out []string
	d.check(s, v, "", &out, 0)
	return out
}

func (d *Doc) check(s *Schema, v any, path string, out *[]string, depth int) {
	bad := func(format string, args ...any) { *out = append(*out, path+": "+fmt.Sprintf(format, args...)) }
	if depth > 64 {
		bad("nested too deep")
		return
	}
	if s.Ref != "" {
		r := d.Schemas[s.Ref]
		if r == nil {
			bad("schema %s is not in the document", s.Ref)
			return
		}
		s = r
	}
	if v == nil {
		bad("null: the service leaves a field out rather than send null")
		return
	}
	switch s.Type {
	case "any":
	case "object":
		obj, ok := v.(map[string]any)
		if !ok {
			bad("want an object, got %s", kind(v))
			return
		}
		for _, k := range sortedKeys(obj) {
			if ps, ok := s.Properties[k]; ok {
				d.check(ps, obj[k], path+"."+k, out, depth+1)
				continue
			}
			if s.AdditionalProperties != nil {
				d.check(s.AdditionalProperties, obj[k], path+"."+k, out, depth+1)
				continue
			}
			bad("field %q is not in %s", k, nameOf(s))
		}
	case "array":
		arr, ok := v.([]any)
		if !ok {
			bad("want an array, got %s", kind(v))
			return
		}
		if s.Items != nil {
			for i, x := range arr {
				d.check(s.Items, x, fmt.Sprintf("%s[%d]", path, i), out, depth+1)
			}
		}
	case "string":
		str, ok := v.(string)
		if !ok {
			bad("want a string (format %q), got %s", s.Format, kind(v))
			return
		}
		if len(s.Enum) > 0 && !slices.Contains(s.Enum, str) {
			bad("%q is not one of %s", str, strings.Join(s.Enum, ", "))
		}
		if msg := checkFormat(s.Format, str); msg != "" {
			bad("%q: %s", str, msg)
		}
	case "integer":
		n, ok := v.(json.Number)
		if !ok {
			bad("want an integer, got %s", kind(v))
			return
		}
		i, err := strconv.ParseInt(string(n), 10, 64)
		if err != nil {
			bad("%s is not an integer", n)
			return
		}
		if (s.Format == "int32" && (i < math.MinInt32 || i > math.MaxInt32)) || (s.Format == "uint32" && (i < 0 || i > math.MaxUint32)) {
			bad("%d is out of %s", i, s.Format)
		}
	case "number":
		if _, ok := v.(json.Number); !ok {
			bad("want a number, got %s", kind(v))
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			bad("want a boolean, got %s", kind(v))
		}
	default:
		bad("schema type %q unknown to the check", s.Type)
	}
}

func checkFormat(format, s string) string {
	switch format {
	case "int64":
		if _, err := strconv.ParseInt(s, 10, 64); err != nil {
			return "not an int64"
		}
	case "uint64":
		if _, err := strconv.ParseUint(s, 10, 64); err != nil {
			return "not a uint64"
		}
	case "google-datetime", "date-time":
		if _, err := time.Parse(time.RFC3339Nano, s); err != nil {
			return "not an RFC 3339 time"
		}
	case "google-duration":
		if _, err := time.ParseDuration(s); err != nil || !strings.HasSuffix(s, "s") {
			return "not a duration in seconds"
		}
	case "byte":
		if _, err := base64.StdEncoding.DecodeString(s); err != nil {
			if _, err := base64.URLEncoding.DecodeString(s); err != nil {
				return "not base64"
			}
		}
	}
	return ""
}

func nameOf(s *Schema) string {
	if s.ID != "" {
		return s.ID
	}
	return "the schema"
}

func kind(v any) string {
	switch v.(type) {
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	}
	return fmt.Sprintf("%T", v)
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// rpcCodes are the google.rpc.Code names an error's status may carry.
var rpcCodes = []string{"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",
	"PERMISSION_DENIED", "UNAUTHENTICATED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
	"UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS"}

// checkError holds an error answer to the shape of Google's JSON errors
// (https://cloud.google.com/apis/design/errors): {"error": {code, message,
// status, errors[{message, domain, reason, location, locationType}],
// details[{"@type", ...}]}}, its code the HTTP status. Discovery documents
// do not describe errors, so this shape is written here.
func checkError(v any, status int) []string {
	var out []string
	top, ok := v.(map[string]any)
	if !ok || len(top) != 1 {
		return []string{"want {\"error\": {...}} and nothing else"}
	}
	e, ok := top["error"].(map[string]any)
	if !ok {
		return []string{"want {\"error\": {...}}"}
	}
	for _, k := range sortedKeys(e) {
		switch k {
		case "code":
			n, ok := e[k].(json.Number)
			if !ok || string(n) != strconv.Itoa(status) {
				out = append(out, fmt.Sprintf("code %v is not the HTTP status %d", e[k], status))
			}
		case "message":
			if s, ok := e[k].(string); !ok || s == "" {
				out = append(out, "message must be a non-empty string")
			}
		case "status":
			if s, ok := e[k].(string); !ok || !slices.Contains(rpcCodes, s) {
				out = append(out, fmt.Sprintf("status %v is not a google.rpc.Code name", e[k]))
			}
		case "errors":
			items, ok := e[k].([]any)
			if !ok {
				out = append(out, "errors must be an array")
				continue
			}
			for _, it := range items {
				m, ok := it.(map[string]any)
				if !ok {
					out = append(out, "errors[] must be objects")
					continue
				}
				for _, f := range sortedKeys(m) {
					if !slices.Contains([]string{"message", "domain", "reason", "location", "locationType", "extendedHelp", "sendReport"}, f) {
						out = append(out, "errors[] has unknown field "+f)
					} else if _, ok := m[f].(string); !ok {
						out = append(out, "errors[]."+f+" must be a string")
					}
				}
				if r, _ := m["reason"].(string); r == "" {
					out = append(out, "errors[] without a reason")
				}
			}
		case "details":
			items, ok := e[k].([]any)
			if !ok {
				out = append(out, "details must be an array")
				continue
			}
			for _, it := range items {
				m, ok := it.(map[string]any)
				if t, _ := m["@type"].(string); !ok || !strings.HasPrefix(t, "type.googleapis.com/google.rpc.") {
					out = append(out, "details[] must be google.rpc messages with an @type")
				}
			}
		default:
			out = append(out, "unknown field "+k)
		}
	}
	if _, ok := e["code"]; !ok {
		out = append(out, "no code")
	}
	if _, ok := e["message"]; !ok {
		out = append(out, "no message")
	}
	return out
}

var (
	docsOnce sync.Once
	docs     map[string]*Doc
	docsErr  error
)

// Docs loads the container/v1 and compute/v1 discovery documents of the
// google.golang.org/api module this build uses, found with `go list -m`.
// They are keyed by base path: "/v1/" (container) and "/compute/v1/".
func Docs() (map[string]*Doc, error) {
	docsOnce.Do(func() {
		out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "google.golang.org/api").Output()
		if err != nil {
			docsErr = fmt.Errorf("wirecheck: locating google.golang.org/api: %w", err)
			return
		}
		dir := strings.TrimSpace(string(out))
		docs = map[string]*Doc{}
		for base, rel := range map[string]string{"/v1/": "container/v1/container-api.json", "/compute/v1/": "compute/v1/compute-api.json"} {
			d, err := Load(filepath.Join(dir, rel))
			if err != nil {
				docsErr = fmt.Errorf("wirecheck: %w", err)
				return
			}
			docs[base] = d
		}
	})
	return docs, docsErr
}

// Check checks every exchange of container/v1 and compute/v1 (others, the
// token endpoint and TokenReviews, are not Google APIs with discovery
// documents) and lists the problems.
func Check(xs []Exchange) ([]string, error) {
	ds, err := Docs()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, x := range xs {
		var d *Doc
		switch {
		case strings.HasPrefix(x.Path, "/compute/v1/"):
			d = ds["/compute/v1/"]
		case strings.HasPrefix(x.Path, "/v1/"):
			d = ds["/v1/"]
		default:
			continue
		}
		out = append(out, d.CheckExchange(x)...)
	}
	return out, nil
}

// CheckEmulator checks every exchange an emulator recorded.
func CheckEmulator(e *gkeemu.Emulator) ([]string, error) {
	var xs []Exchange
	for _, x := range e.Exchanges() {
		xs = append(xs, Exchange{Method: x.Method, Path: x.Path, Query: x.Query, MethodID: x.MethodID, Status: x.Status, Body: x.Body})
	}
	return Check(xs)
}

// TB is the part of testing.TB that Register needs.
type TB interface {
	Helper()
	Errorf(format string, args ...any)
	Cleanup(func())
}

// Register checks, when the test ends, every exchange the emulator
// recorded, failing the test on each problem.
func Register(t TB, e *gkeemu.Emulator) {
	t.Cleanup(func() {
		problems, err := CheckEmulator(e)
		if err != nil {
			t.Errorf("wire check: %v", err)
		}
		for _, p := range problems {
			t.Errorf("wire check: %s", p)
		}
	})
}
