package docgen

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/fleet-agent/fleet-agent/schema"
)

// DocumentSections are the generated sections of docs/document.md: "fields"
// (every list of fleet.json with its fields, from the embedded schema) and
// "fake-catalog" (the fake provider's regions, zones and machine types as
// it is without a config block). The catalogue is given by the caller:
// only a command may import a provider adapter (cmd/fleet-docs does).
func DocumentSections(fake Catalogue) (map[string]string, error) {
	fields, err := Fields(schema.JSON)
	if err != nil {
		return nil, err
	}
	return map[string]string{"fields": fields, "fake-catalog": FakeCatalog(fake)}, nil
}

// Fields renders a table per object of the schema: the document itself,
// each list's items and each nested object, in the schema's order, each
// field with its type, whether it is required, its default (the schema's
// "default" keyword) and the values it allows.
func Fields(schemaJSON []byte) (string, error) {
	root, err := parseOrdered(schemaJSON)
	if err != nil {
		return "", fmt.Errorf("the schema: %w", err)
	}
	defs := root.get("$defs")
	var b strings.Builder
	var walk func(title string, o *object) error
	walk = func(title string, o *object) error {
		o = resolve(o, defs)
		props := o.get("properties")
		if props == nil {
			return nil
		}
		required := map[string]bool{}
		for _, r := range o.list("required") {
			required[fmt.Sprint(r)] = true
		}
		fmt.Fprintf(&b, "### `%s`\n\n", title)
		if d, ok := o.str("description"); ok && title != "the document" {
			fmt.Fprintf(&b, "%s.\n\n", capitalise(d))
		}
		b.WriteString("| field | type | required | default | allowed |\n| --- | --- | --- | --- | --- |\n")
		type child struct {
			title string
			o     *object
		}
		var children []child
		for _, k := range props.keys {
			p := resolve(props.get(k), defs)
			req := ""
			if required[k] {
				req = "yes"
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", k, cell(typeOf(p, defs)), req, cell(defaultOf(p)), cell(allowed(p, defs)))
			switch {
			case p.get("properties") != nil:
				children = append(children, child{title + "." + k, p})
			case p.get("items") != nil && resolve(p.get("items"), defs).get("properties") != nil:
				children = append(children, child{title + "." + k + "[]", p.get("items")})
			}
		}
		b.WriteString("\n")
		for _, c := range children {
			if err := walk(strings.TrimPrefix(c.title, "the document."), c.o); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk("the document", root); err != nil {
		return "", err
	}
	return strings.TrimSuffix(b.String(), "\n"), nil
}

// typeOf names a value's type as a reader needs it.
func typeOf(o *object, defs *object) string {
	if v, ok := o.vals["const"]; ok {
		return jsonType(v)
	}
	if e := o.list("enum"); e != nil {
		return jsonType(e[0])
	}
	t, _ := o.str("type")
	switch t {
	case "array":
		it := resolve(o.get("items"), defs)
		if it.get("properties") != nil {
			return "list of objects (below)"
		}
		return "list of " + typeOf(it, defs) + "s"
	case "object":
		switch {
		case o.get("properties") != nil && o.get("additionalProperties") == nil && o.vals["additionalProperties"] == nil:
			return "object (free-form; some fields below)"
		case o.get("properties") != nil:
			return "object (below)"
		case o.get("additionalProperties") != nil:
			return "map of string to " + typeOf(resolve(o.get("additionalProperties"), defs), defs)
		}
		return "object (free-form)"
	case "":
		return "any"
	}
	return t
}

func jsonType(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case bool:
		return "boolean"
	case json.Number:
		return "integer"
	}
	return "any"
}

func defaultOf(o *object) string {
	v, ok := o.vals["default"]
	if !ok {
		return ""
	}
	return "`" + literal(v) + "`"
}

// allowed lists the values a field takes: enumerations, bounds, lengths,
// patterns and the schema's own words for them.
func allowed(o *object, defs *object) string {
	var parts []string
	if v, ok := o.vals["const"]; ok {
		parts = append(parts, "exactly `"+literal(v)+"`")
	}
	if e := o.list("enum"); e != nil {
		var vs []string
		for _, v := range e {
			vs = append(vs, "`"+literal(v)+"`")
		}
		parts = append(parts, "one of "+strings.Join(vs, ", "))
	}
	if r := bounds(o, "minimum", "maximum", ""); r != "" {
		parts = append(parts, r)
	}
	if r := bounds(o, "minLength", "maxLength", " characters"); r != "" {
		parts = append(parts, r)
	}
	if r := bounds(o, "minItems", "maxItems", " items"); r != "" {
		parts = append(parts, r)
	}
	if r := bounds(o, "minProperties", "maxProperties", " fields"); r != "" {
		parts = append(parts, r)
	}
	if p, ok := o.str("pattern"); ok {
		parts = append(parts, "pattern `"+p+"`")
	}
	if pn := o.get("propertyNames"); pn != nil {
		if p, ok := pn.str("pattern"); ok {
			parts = append(parts, "keys match `"+p+"`")
		}
	}
	if it := o.get("items"); it != nil {
		it = resolve(it, defs)
		if it.get("properties") == nil {
			if a := allowed(it, defs); a != "" {
				parts = append(parts, "each item: "+a)
			}
		}
	}
	if ap := o.get("additionalProperties"); ap != nil && o.get("properties") == nil {
		if a := allowed(resolve(ap, defs), defs); a != "" {
			parts = append(parts, "each value: "+a)
		}
	}
	if d, ok := o.str("description"); ok && o.get("properties") == nil {
		parts = append(parts, "("+d+")")
	}
	return strings.Join(parts, "; ")
}

func bounds(o *object, lo, hi, unit string) string {
	l, hasL := o.vals[lo]
	h, hasH := o.vals[hi]
	switch {
	case hasL && hasH && literal(l) == "1" && literal(h) == "1" && unit == " fields":
		return "exactly one field"
	case hasL && hasH && literal(l) == literal(h):
		return "exactly " + literal(l) + unit
	case hasL && hasH:
		return literal(l) + " to " + literal(h) + unit
	case hasL:
		return "at least " + literal(l) + unit
	case hasH:
		return "at most " + literal(h) + unit
	}
	return ""
}

func literal(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// cell makes text safe inside a markdown table cell.
func cell(s string) string {
	if s == "" {
		return "—"
	}
	return strings.ReplaceAll(s, "|", `\|`)
}

func capitalise(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// resolve follows a {"$ref": "#/$defs/X"}.
func resolve(o *object, defs *object) *object {
	for o != nil {
		ref, ok := o.str("$ref")
		if !ok || defs == nil {
			return o
		}
		o = defs.get(strings.TrimPrefix(ref, "#/$defs/"))
	}
	return &object{vals: map[string]any{}}
}

// object is a JSON object that remembers its keys' order, so that the
// tables follow the schema as written.
type object struct {
	keys []string
	vals map[string]any
}

func (o *object) get(k string) *object {
	if o == nil {
		return nil
	}
	c, _ := o.vals[k].(*object)
	return c
}

func (o *object) str(k string) (string, bool) {
	if o == nil {
		return "", false
	}
	s, ok := o.vals[k].(string)
	return s, ok
}

func (o *object) list(k string) []any {
	if o == nil {
		return nil
	}
	l, _ := o.vals[k].([]any)
	return l
}

func (o *object) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		vb, err := json.Marshal(o.vals[k])
		if err != nil {
			return nil, err
		}
		b.Write(kb)
		b.WriteByte(':')
		b.Write(vb)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

func parseOrdered(data []byte) (*object, error) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	v, err := decodeOrdered(d)
	if err != nil {
		return nil, err
	}
	o, ok := v.(*object)
	if !ok {
		return nil, fmt.Errorf("not an object")
	}
	return o, nil
}

func decodeOrdered(d *json.Decoder) (any, error) {
	tok, err := d.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			o := &object{vals: map[string]any{}}
			for d.More() {
				kt, err := d.Token()
				if err != nil {
					return nil, err
				}
				k := kt.(string)
				v, err := decodeOrdered(d)
				if err != nil {
					return nil, err
				}
				if _, dup := o.vals[k]; !dup {
					o.keys = append(o.keys, k)
				}
				o.vals[k] = v
			}
			_, err := d.Token()
			return o, err
		case '[':
			l := []any{}
			for d.More() {
				v, err := decodeOrdered(d)
				if err != nil {
					return nil, err
				}
				l = append(l, v)
			}
			_, err := d.Token()
			return l, err
		}
	}
	return tok, nil
}

// Catalogue is what a provider offers, as the page shows it.
type Catalogue struct {
	Locations      []Location
	MachineTypes   []MachineType
	Versions       []string
	DefaultVersion string
	ZeroNodes      bool
	Spot           bool
}

// Location is a region and its zones.
type Location struct {
	Name  string
	Zones []string
}

// MachineType is one machine type: its GPUs built in, or those it may be
// given, and the regions it exists in (none: every region).
type MachineType struct {
	Name       string
	VCPU       int
	MemoryGiB  int
	GPUs       *GPU
	Attachable []GPU
	Locations  []string
}

// GPU is a type of accelerator and how many.
type GPU struct {
	Type  string
	Count int
}

// FakeCatalog renders the fake provider's regions with their zones and its
// machine types, as the fake is without a config block (a config's
// providers.fake block may replace them).
func FakeCatalog(c Catalogue) string {
	var b strings.Builder
	b.WriteString("| region | zones |\n| --- | --- |\n")
	for _, l := range c.Locations {
		fmt.Fprintf(&b, "| `%s` | %s |\n", l.Name, codes(l.Zones))
	}
	b.WriteString("\n| machine type | vCPU | memory GiB | GPUs | regions |\n| --- | --- | --- | --- | --- |\n")
	for _, m := range c.MachineTypes {
		gpus := "—"
		switch {
		case m.GPUs != nil:
			gpus = fmt.Sprintf("%d × `%s`, built in: a substrate flavor books them with `\"gpus\": {\"type\": \"%s\", \"count\": %d}`", m.GPUs.Count, m.GPUs.Type, m.GPUs.Type, m.GPUs.Count)
		case len(m.Attachable) > 0:
			var as []string
			for _, a := range m.Attachable {
				as = append(as, fmt.Sprintf("up to %d × `%s` per machine", a.Count, a.Type))
			}
			gpus = "attachable: " + strings.Join(as, ", ")
		}
		regions := "every region"
		if len(m.Locations) > 0 {
			regions = codes(m.Locations)
		}
		fmt.Fprintf(&b, "| `%s` | %d | %d | %s | %s |\n", m.Name, m.VCPU, m.MemoryGiB, gpus, regions)
	}
	fmt.Fprintf(&b, "\nKubernetes versions: %s (default `%s`). A fixed-size node pool may have 0 nodes: %v. Spot node pools: %v.",
		codes(c.Versions), c.DefaultVersion, c.ZeroNodes, c.Spot)
	return b.String()
}

func codes(s []string) string {
	if len(s) == 0 {
		return "—"
	}
	s = slices.Clone(s)
	for i := range s {
		s[i] = "`" + s[i] + "`"
	}
	return strings.Join(s, ", ")
}
