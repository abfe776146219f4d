package fleet

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/fleet-agent/fleet-agent/schema"
)

// The schema stage: the embedded JSON Schema, compiled by this file into a
// tree of nodes that checks a value and reports each failing keyword, which
// then gets the documented pointer here and its words in messages.go.
//
// It knows the keywords the schema uses, with JSON Schema 2020-12's
// meaning: lengths in code points, patterns as Go regexps that match
// anywhere, "integer" by value (2.0 is one), const and enum by value. A
// schema with any other keyword does not compile (TestSchemaCompiles says
// which). It reports what santhosh-tekuri/jsonschema reports, keyword for
// keyword and in the same order within a value: the tests hold it to that
// library on every document under testdata, on thousands of variants of
// them, and in FuzzValidate (oracle_test.go). The library itself stays out
// of the binary: its package initialiser compiles every draft's
// meta-schema in every process, `version` included (3.4 ms, about what
// the whole of bench/floor takes); it took 20 ms more to compile this
// schema; and it builds a location string and a map for every value of a
// valid document, more than half of a large document's validation.

// inlinedSchema is the embedded schema parsed, its "$ref"s inlined (a
// subschema is compiled where it is used, and a message can describe it
// from its own object) and "type": "integer" with its bounds given to the
// integer keyword (integer.go). It is made on the first document
// validated, never at package initialisation: `fleet-agent version` does
// not pay for it. Read-only. The schema printed for editors is the file as
// written.
var inlinedSchema = sync.OnceValue(func() map[string]any {
	var raw map[string]any
	d := json.NewDecoder(bytes.NewReader(schema.JSON))
	d.UseNumber()
	if err := d.Decode(&raw); err != nil {
		panic(fmt.Sprintf("fleet: embedded schema: %v", err))
	}
	defs, _ := raw["$defs"].(map[string]any)
	inlined := inlineRefs(raw, defs, 0).(map[string]any)
	delete(inlined, "$defs")
	return inlined
})

// compiledSchema is the schema stage, compiled on the first document.
var compiledSchema = sync.OnceValue(func() *node {
	n, err := compileNode(inlinedSchema())
	if err != nil {
		panic(fmt.Sprintf("fleet: embedded schema: %v", err))
	}
	return n
})

// inlineRefs replaces every {"$ref": "#/$defs/X"} with a copy of X. The
// schema has no recursive definitions; depth guards against one anyway.
func inlineRefs(v any, defs map[string]any, depth int) any {
	if depth > 32 {
		panic("fleet: embedded schema: $ref nesting too deep (a recursive definition?)")
	}
	switch x := v.(type) {
	case map[string]any:
		if ref, ok := x["$ref"].(string); ok && len(x) == 1 && strings.HasPrefix(ref, "#/$defs/") {
			target, ok := defs[strings.TrimPrefix(ref, "#/$defs/")]
			if !ok {
				panic("fleet: embedded schema: unknown " + ref)
			}
			return inlineRefs(target, defs, depth+1)
		}
		out := make(map[string]any, len(x))
		for k, e := range x {
			if k == "$defs" {
				continue
			}
			out[k] = inlineRefs(e, defs, depth+1)
		}
		if out["type"] == "integer" {
			// Checked by the integer keyword (integer.go) instead.
			r := map[string]any{}
			for _, k := range []string{"minimum", "maximum"} {
				if v, ok := out[k]; ok {
					r[k] = v
					delete(out, k)
				}
			}
			delete(out, "type")
			out[integerKeyword] = r
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = inlineRefs(e, defs, depth+1)
		}
		return out
	}
	return v
}

// node is one schema object, compiled.
type node struct {
	raw                map[string]any // for messages
	types              uint8          // kind bits; 0 for any
	constant           any
	hasConst           bool
	enum               []any
	minProps, maxProps int // -1 when absent, as the other counts
	required           []string
	props              map[string]*node
	propertyNames      *node
	additional         *node // nil: any additional property
	noAdditional       bool  // "additionalProperties": false
	minItems, maxItems int
	items              *node
	minLen, maxLen     int
	pattern            func() *regexp.Regexp // compiled on first use (see patterns)
	integer            *integerSchema
}

const (
	kindNull uint8 = 1 << iota
	kindBoolean
	kindNumber
	kindInteger
	kindString
	kindArray
	kindObject
)

func kindByName(name string) (uint8, bool) {
	switch name {
	case "null":
		return kindNull, true
	case "boolean":
		return kindBoolean, true
	case "number":
		return kindNumber, true
	case "integer":
		return kindInteger, true
	case "string":
		return kindString, true
	case "array":
		return kindArray, true
	case "object":
		return kindObject, true
	}
	return 0, false
}

func kindOfValue(v any) uint8 {
	switch v.(type) {
	case nil:
		return kindNull
	case bool:
		return kindBoolean
	case json.Number:
		return kindNumber
	case string:
		return kindString
	case []any:
		return kindArray
	case map[string]any:
		return kindObject
	}
	return 0
}

// isAnnotation reports a keyword that never changes a verdict.
func isAnnotation(k string) bool {
	switch k {
	case "$schema", "$id", "$comment", "title", "description", "examples", "default":
		return true
	}
	return false
}

func compileNode(m map[string]any) (*node, error) {
	n := &node{raw: m, minProps: -1, maxProps: -1, minItems: -1, maxItems: -1, minLen: -1, maxLen: -1}
	counts := map[string]*int{"minProperties": &n.minProps, "maxProperties": &n.maxProps,
		"minItems": &n.minItems, "maxItems": &n.maxItems, "minLength": &n.minLen, "maxLength": &n.maxLen}
	subs := map[string]**node{"propertyNames": &n.propertyNames, "items": &n.items}
	for k, v := range m {
		var err error
		switch {
		case counts[k] != nil:
			*counts[k], err = countOf(v)
		case subs[k] != nil:
			*subs[k], err = compileSub(v)
		case k == "type":
			err = n.setTypes(v)
		case k == "const":
			n.constant, n.hasConst, err = v, true, scalar(v)
		case k == "enum":
			n.enum, err = enumOf(v)
		case k == "properties":
			n.props, err = compileProps(v)
		case k == "required":
			n.required, err = namesOf(v)
		case k == "additionalProperties":
			if b, ok := v.(bool); ok {
				n.noAdditional = !b
				continue
			}
			n.additional, err = compileSub(v)
		case k == "pattern":
			p, _ := v.(string)
			n.pattern = patterns.get(p)
		case k == integerKeyword:
			r, ok := v.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("%s must be an object", integerKeyword)
			}
			n.integer = newIntegerSchema(r)
		case !isAnnotation(k):
			return nil, fmt.Errorf("keyword %q is not known to the schema stage (internal/fleet/schema.go): add it there", k)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
	}
	return n, nil
}

// patterns holds each pattern of the schema compiled once, when a value
// first meets it: inlining repeats the same few patterns dozens of times,
// and a document of one field needs none (a {1,128} repeat alone compiles
// to 128 instructions). TestSchemaCompiles compiles them all.
var patterns = patternSet{m: map[string]func() *regexp.Regexp{}}

type patternSet struct {
	mu sync.Mutex
	m  map[string]func() *regexp.Regexp
}

func (ps *patternSet) get(expr string) func() *regexp.Regexp {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if f, ok := ps.m[expr]; ok {
		return f
	}
	f := sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
	ps.m[expr] = f
	return f
}

func compileSub(v any) (*node, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("a subschema must be an object")
	}
	return compileNode(m)
}

func compileProps(v any) (map[string]*node, error) {
	props, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("must be an object")
	}
	out := make(map[string]*node, len(props))
	for name, p := range props {
		n, err := compileSub(p)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out[name] = n
	}
	return out, nil
}

func namesOf(v any) ([]string, error) {
	list, _ := v.([]any)
	var out []string
	for _, r := range list {
		name, ok := r.(string)
		if !ok {
			return nil, fmt.Errorf("must list names")
		}
		out = append(out, name)
	}
	return out, nil
}

func enumOf(v any) ([]any, error) {
	list, ok := v.([]any)
	if !ok || len(list) == 0 {
		return nil, fmt.Errorf("must be a list of values")
	}
	for _, e := range list {
		if err := scalar(e); err != nil {
			return nil, err
		}
	}
	return list, nil
}

func (n *node) setTypes(v any) error {
	names := []any{v}
	if list, ok := v.([]any); ok {
		names = list
	}
	for _, t := range names {
		name, _ := t.(string)
		bit, ok := kindByName(name)
		if !ok {
			return fmt.Errorf("unknown type %v", t)
		}
		n.types |= bit
	}
	return nil
}

func countOf(v any) (int, error) {
	num, ok := v.(json.Number)
	if !ok {
		return 0, fmt.Errorf("not a number")
	}
	i, err := num.Int64()
	if err != nil || i < 0 || i > 1<<31 {
		return 0, fmt.Errorf("not a count: %s", num)
	}
	return int(i), nil
}

// scalar refuses a const or enum value that is an object or a list: the
// schema has none, and sameValue compares scalars only.
func scalar(v any) error {
	switch v.(type) {
	case map[string]any, []any:
		return fmt.Errorf("only scalars are supported in const and enum")
	}
	return nil
}

// schemaError is one failing keyword of the value at toks.
type schemaError struct {
	toks    []string
	keyword string
	sub     map[string]any // the schema object holding the keyword
	// inKey: under propertyNames, toks names a key, not a value.
	inKey bool
	// inMap: under additionalProperties, toks names a map entry.
	inMap bool
}

// walker checks a value against the nodes and collects each failing
// keyword. It keeps where it stands as a stack of steps, turned into tokens
// only for a failing keyword: valid values, the common case, allocate
// nothing for their place.
type walker struct {
	steps []step
	out   []schemaError
}

// step is one token of the place: a key, or a list index.
type step struct {
	key    string
	index  int
	isItem bool
}

func (w *walker) tokens() []string {
	toks := make([]string, len(w.steps))
	for i, s := range w.steps {
		if s.isItem {
			toks[i] = strconv.Itoa(s.index)
		} else {
			toks[i] = s.key
		}
	}
	return toks
}

// fail records keyword of n failing at the current place; under
// propertyNames (inKey) the place names a key, under additionalProperties
// (inMap) a map entry.
func (w *walker) fail(n *node, keyword string, inKey, inMap bool) {
	w.out = append(w.out, schemaError{toks: w.tokens(), keyword: keyword, sub: n.raw, inKey: inKey, inMap: inMap})
}

// walk checks v against n and records each failing keyword, in the order
// the library reports them within one value: type (alone: nothing else is
// checked on a value of the wrong type), const, enum, the keywords of the
// value's kind, then the integer keyword.
func (w *walker) walk(n *node, v any, inKey, inMap bool) {
	if s, ok := v.(string); ok {
		w.walkString(n, s, inKey, inMap)
		return
	}
	if n.types != 0 && !n.admits(v) {
		w.fail(n, "type", inKey, inMap)
		return
	}
	if n.hasConst && !sameValue(v, n.constant) {
		w.fail(n, "const", inKey, inMap)
	}
	if n.enum != nil && !slices.ContainsFunc(n.enum, func(e any) bool { return sameValue(v, e) }) {
		w.fail(n, "enum", inKey, inMap)
	}
	switch x := v.(type) {
	case map[string]any:
		w.walkObject(n, x, inKey, inMap)
	case []any:
		if n.minItems >= 0 && len(x) < n.minItems {
			w.fail(n, "minItems", inKey, inMap)
		}
		if n.maxItems >= 0 && len(x) > n.maxItems {
			w.fail(n, "maxItems", inKey, inMap)
		}
		if n.items != nil {
			for i, e := range x {
				w.steps = append(w.steps, step{index: i, isItem: true})
				w.walk(n.items, e, inKey, inMap)
				w.steps = w.steps[:len(w.steps)-1]
			}
		}
	}
	if n.integer != nil && n.integer.check(v) != "" {
		w.fail(n, integerKeyword, inKey, inMap)
	}
}

// walkString is walk for a string, which it takes unboxed: keys and
// string values are most of a document.
func (w *walker) walkString(n *node, s string, inKey, inMap bool) {
	if n.types != 0 && n.types&kindString == 0 {
		w.fail(n, "type", inKey, inMap)
		return
	}
	if n.hasConst && n.constant != any(s) {
		w.fail(n, "const", inKey, inMap)
	}
	if n.enum != nil && !slices.Contains(n.enum, any(s)) {
		w.fail(n, "enum", inKey, inMap)
	}
	if n.minLen >= 0 || n.maxLen >= 0 {
		runes := utf8.RuneCountInString(s)
		if n.minLen >= 0 && runes < n.minLen {
			w.fail(n, "minLength", inKey, inMap)
		}
		if n.maxLen >= 0 && runes > n.maxLen {
			w.fail(n, "maxLength", inKey, inMap)
		}
	}
	if n.pattern != nil && !n.pattern().MatchString(s) {
		w.fail(n, "pattern", inKey, inMap)
	}
	if n.integer != nil {
		w.fail(n, integerKeyword, inKey, inMap) // a string is never an integer
	}
}

func (w *walker) walkObject(n *node, m map[string]any, inKey, inMap bool) {
	if n.minProps >= 0 && len(m) < n.minProps {
		w.fail(n, "minProperties", inKey, inMap)
	}
	if n.maxProps >= 0 && len(m) > n.maxProps {
		w.fail(n, "maxProperties", inKey, inMap)
	}
	for _, r := range n.required {
		if _, ok := m[r]; !ok {
			w.fail(n, "required", inKey, inMap) // once: its findings name every missing field
			break
		}
	}
	extra := false
	for k, v := range m {
		w.steps = append(w.steps, step{key: k})
		if n.propertyNames != nil {
			w.walkString(n.propertyNames, k, true, inMap)
		}
		if p, ok := n.props[k]; ok {
			w.walk(p, v, inKey, inMap)
		} else {
			extra = true
			if n.additional != nil {
				w.walk(n.additional, v, inKey, true)
			}
		}
		w.steps = w.steps[:len(w.steps)-1]
	}
	if extra && n.noAdditional {
		w.fail(n, "additionalProperties", inKey, inMap) // once: its findings name every unknown key
	}
}

// admits applies "type"; "integer" admits a number of integral value.
func (n *node) admits(v any) bool {
	if n.types&kindOfValue(v) != 0 {
		return true
	}
	num, ok := v.(json.Number)
	return ok && n.types&kindInteger != 0 && integral(num)
}

// sameValue is JSON equality of scalars: numbers by value (1, 1.0, 1e0).
func sameValue(a, b any) bool {
	x, ok1 := a.(json.Number)
	y, ok2 := b.(json.Number)
	if ok1 && ok2 {
		return x == y || equalNumbers(x, y)
	}
	switch a.(type) {
	case nil, bool, string:
		return a == b
	}
	return false
}

// schemaFindings runs the schema stage on tree and gives each failing
// keyword the documented pointers and a message that says what is allowed.
func schemaFindings(tree any) []finding {
	w := &walker{steps: make([]step, 0, 16)}
	w.walk(compiledSchema(), tree, false, false)
	var out []finding
	for _, e := range w.out {
		out = append(out, e.findings(tree)...)
	}
	return out
}

// findings turns one failing keyword into the documented findings: an
// invalid key names the key, a missing field the field (sorted with its
// parent), an unknown field each such key; anything else the value.
func (e schemaError) findings(tree any) []finding {
	ptr := joinPointer("", e.toks...)
	inst, _ := lookup(tree, e.toks)
	name := fieldName(e.toks)
	if e.inKey {
		return []finding{{ptr: ptr, anchor: atKey, msg: invalidKeyMessage(lastToken(ptr), describe(e.sub))}}
	}
	if e.inMap && len(e.toks) >= 2 {
		name = mapEntryName(e.toks[len(e.toks)-2], e.toks[len(e.toks)-1])
	}
	switch e.keyword {
	case "required":
		obj, _ := inst.(map[string]any)
		var out []finding
		req, _ := e.sub["required"].([]any)
		for _, r := range req {
			k, _ := r.(string)
			if _, ok := obj[k]; !ok {
				out = append(out, finding{ptr: joinPointer(ptr, k), anchor: atParent, msg: requiredMessage(k, e.toks)})
			}
		}
		return out
	case "additionalProperties":
		obj, _ := inst.(map[string]any)
		return unknownKeys(ptr, obj, e.sub)
	}
	return []finding{{ptr: ptr, msg: keywordMessage(e.keyword, name, e.sub, inst)}}
}

// unknownKeys names each key of obj that sub does not allow.
func unknownKeys(ptr string, obj map[string]any, sub map[string]any) []finding {
	props, _ := sub["properties"].(map[string]any)
	allowed := slices.Sorted(maps.Keys(props))
	var out []finding
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		if _, ok := props[k]; !ok {
			out = append(out, finding{ptr: joinPointer(ptr, k), anchor: atKey, msg: unknownFieldMessage(k, allowed)})
		}
	}
	return out
}
