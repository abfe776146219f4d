package fleet

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v5"

	"github.com/fleet-agent/fleet-agent/schema"
)

// compiled is the embedded schema, compiled once, with its raw form kept to
// turn the validator's keyword locations into messages.
//
// The schema is compiled with two rewrites that keep its verdicts and cut
// the validator's cost by more than half on large documents: local "$ref"s
// are inlined (the validator enters a value once more for every "$ref"),
// and "type": "integer" with its bounds becomes the integer keyword of
// integer.go (the library checks every integer with big.Rat arithmetic).
// The schema printed for editors is the file as written.
//
// It is compiled in pieces: the top level without the items of its lists,
// and one schema per list item, so that the items of a large document are
// checked on every core.
type compiled struct {
	root  *jsonschema.Schema
	items map[string]*jsonschema.Schema // top-level list name -> its item schema
	raw   map[string]any                // the inlined schema the locations point into
}

var compiledSchema = sync.OnceValue(func() *compiled {
	var raw map[string]any
	d := json.NewDecoder(bytes.NewReader(schema.JSON))
	d.UseNumber()
	if err := d.Decode(&raw); err != nil {
		panic(fmt.Sprintf("fleet: embedded schema: %v", err))
	}
	defs, _ := raw["$defs"].(map[string]any)
	inlined := inlineRefs(raw, defs, 0).(map[string]any)
	delete(inlined, "$defs")

	// The top level alone: the same schema with each list's items left out
	// (the lists' types and lengths are still checked there).
	rootOnly := map[string]any{}
	for k, v := range inlined {
		rootOnly[k] = v
	}
	rootProps := map[string]any{}
	var lists []string
	for name, p := range inlined["properties"].(map[string]any) {
		pm, _ := p.(map[string]any)
		if _, ok := pm["items"]; ok {
			lists = append(lists, name)
			stripped := map[string]any{}
			for k, v := range pm {
				if k != "items" {
					stripped[k] = v
				}
			}
			p = stripped
		}
		rootProps[name] = p
	}
	rootOnly["properties"] = rootProps
	const rootID = schema.ID + "-top-level"
	rootOnly["$id"] = rootID

	c := jsonschema.NewCompiler()
	c.Draft = jsonschema.Draft2020
	registerInteger(c)
	for id, doc := range map[string]any{schema.ID: inlined, rootID: rootOnly} {
		flat, err := json.Marshal(doc)
		if err != nil {
			panic(fmt.Sprintf("fleet: embedded schema: %v", err))
		}
		if err := c.AddResource(id, bytes.NewReader(flat)); err != nil {
			panic(fmt.Sprintf("fleet: embedded schema: %v", err))
		}
	}
	out := &compiled{items: map[string]*jsonschema.Schema{}, raw: inlined}
	var err error
	if out.root, err = c.Compile(rootID); err != nil {
		panic(fmt.Sprintf("fleet: embedded schema: %v", err))
	}
	for _, name := range lists {
		if out.items[name], err = c.Compile(schema.ID + "#/properties/" + name + "/items"); err != nil {
			panic(fmt.Sprintf("fleet: embedded schema: %v", err))
		}
	}
	return out
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

// schemaFindings runs the JSON Schema and turns each failing keyword into
// findings with the contract's pointers and a message that says what is
// allowed.
func schemaFindings(tree any) []finding {
	cs := compiledSchema()
	out := cs.findings(cs.root, tree, nil, tree)
	root, ok := tree.(map[string]any)
	if !ok {
		return out
	}
	// The items of the top-level lists, in chunks, on every core. Findings
	// are sorted by their place in the text afterwards, so the order in
	// which chunks finish does not matter.
	type chunk struct {
		list     string
		from, to int
	}
	var chunks []chunk
	total := 0
	for _, name := range slices.Sorted(maps.Keys(cs.items)) {
		items, ok := root[name].([]any)
		if !ok {
			continue
		}
		total += len(items)
		for from := 0; from < len(items); from += itemsPerChunk {
			chunks = append(chunks, chunk{name, from, min(from+itemsPerChunk, len(items))})
		}
	}
	check := func(c chunk) []finding {
		var found []finding
		items := root[c.list].([]any)
		for i := c.from; i < c.to; i++ {
			found = append(found, cs.findings(cs.items[c.list], items[i], []string{c.list, strconv.Itoa(i)}, tree)...)
		}
		return found
	}
	workers := min(runtime.GOMAXPROCS(0), len(chunks))
	if total < parallelFrom || workers < 2 {
		for _, c := range chunks {
			out = append(out, check(c)...)
		}
		return out
	}
	results := make([][]finding, len(chunks))
	next := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range next {
				results[i] = check(chunks[i])
			}
		})
	}
	for i := range chunks {
		next <- i
	}
	close(next)
	wg.Wait()
	for _, r := range results {
		out = append(out, r...)
	}
	return out
}

// Below parallelFrom list items in all, one goroutine checks everything:
// small documents are done before workers would start.
const (
	parallelFrom  = 256
	itemsPerChunk = 64
)

// findings validates v (found at the pointer tokens prefix of tree)
// against s.
func (cs *compiled) findings(s *jsonschema.Schema, v any, prefix []string, tree any) []finding {
	err := s.Validate(v)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return []finding{{ptr: joinPointer("", prefix...), msg: "could not be checked against the schema: " + err.Error()}}
	}
	var out []finding
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				walk(c)
			}
			return
		}
		out = append(out, mapSchemaError(e, prefix, tree, cs.raw)...)
	}
	walk(ve)
	return out
}

func mapSchemaError(e *jsonschema.ValidationError, prefix []string, tree any, raw map[string]any) []finding {
	toks := append(slices.Clip(prefix), instancePath(e)...)
	ptr := joinPointer("", toks...)
	sub, keyword := schemaAt(raw, e.AbsoluteKeywordLocation)
	inst, _ := lookup(tree, toks)
	name := fieldName(toks)
	if strings.Contains(e.KeywordLocation, "/propertyNames") {
		// The instance location of a propertyNames failure is the key itself.
		return []finding{{ptr: ptr, anchor: atKey, msg: invalidKeyMessage(lastToken(ptr), describe(sub))}}
	}
	if strings.Contains(e.KeywordLocation, "/additionalProperties") && len(toks) >= 2 {
		name = mapEntryName(toks[len(toks)-2], toks[len(toks)-1])
	}
	switch keyword {
	case "required":
		// The validator reports the object; the contract names each missing
		// field, sorted with its parent.
		obj, _ := inst.(map[string]any)
		var out []finding
		req, _ := sub["required"].([]any)
		for _, r := range req {
			k, _ := r.(string)
			if _, ok := obj[k]; !ok {
				out = append(out, finding{ptr: joinPointer(ptr, k), anchor: atParent, msg: requiredMessage(k, toks)})
			}
		}
		return out
	case "additionalProperties":
		obj, _ := inst.(map[string]any)
		return unknownKeys(ptr, obj, sub)
	}
	return []finding{{ptr: ptr, msg: keywordMessage(keyword, name, sub, inst, e.Message)}}
}

// unknownKeys names each key of obj that sub does not allow: the validator
// reports the object, the contract the key itself.
func unknownKeys(ptr string, obj map[string]any, sub map[string]any) []finding {
	props, _ := sub["properties"].(map[string]any)
	patterns, _ := sub["patternProperties"].(map[string]any)
	allowed := slices.Sorted(maps.Keys(props))
	var out []finding
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		if _, ok := props[k]; ok {
			continue
		}
		if matchesAny(k, patterns) {
			continue
		}
		if len(patterns) > 0 {
			what, _ := sub["x-keys"].(string)
			if what == "" {
				what = "a valid key"
			}
			out = append(out, finding{ptr: joinPointer(ptr, k), anchor: atKey, msg: invalidKeyMessage(k, what)})
			continue
		}
		out = append(out, finding{ptr: joinPointer(ptr, k), anchor: atKey, msg: unknownFieldMessage(k, allowed)})
	}
	return out
}

var patternCache sync.Map // string -> *regexp.Regexp

func compileCached(p string) *regexp.Regexp {
	if r, ok := patternCache.Load(p); ok {
		return r.(*regexp.Regexp)
	}
	r := regexp.MustCompile(p)
	patternCache.Store(p, r)
	return r
}

func matchesAny(k string, patterns map[string]any) bool {
	for p := range patterns {
		if compileCached(p).MatchString(k) {
			return true
		}
	}
	return false
}

// instancePath returns the instance tokens of a validator error. The
// validator joins an empty key as no token at all, so that {"": 1} under
// ownerQuota is reported at ownerQuota itself. The keyword location says
// how many tokens the path has: each step into a property, a map entry or
// a list item is one. The tokens missing from the instance location are
// empty keys; where the schema has more than one map step, the innermost
// are taken to be the empty ones (the schema has no nested maps today).
func instancePath(e *jsonschema.ValidationError) []string {
	inst := instanceTokens(e.InstanceLocation)
	kw := instanceTokens(e.KeywordLocation)
	if len(kw) == 0 {
		return inst
	}
	// The last token is the failing keyword: it applies to the value the
	// steps before it reach (additionalProperties: false reports the object).
	kw = kw[:len(kw)-1]
	type step struct {
		name  string
		fixed bool // a named property: its name is the token
	}
	var steps []step
	for i := 0; i < len(kw); i++ {
		switch kw[i] {
		case "properties":
			if i+1 < len(kw) {
				steps = append(steps, step{name: kw[i+1], fixed: true})
			}
			i++
		case "patternProperties", "prefixItems":
			steps = append(steps, step{})
			i++
		case "additionalProperties", "propertyNames", "items", "contains", "unevaluatedProperties", "unevaluatedItems":
			steps = append(steps, step{})
		case "allOf", "anyOf", "oneOf", "dependentSchemas", "$defs":
			i++ // the next token is an index or a name, not a step
		}
	}
	missing := len(steps) - len(inst)
	if missing <= 0 {
		return inst
	}
	variable := 0
	for _, s := range steps {
		if !s.fixed {
			variable++
		}
	}
	out := make([]string, 0, len(steps))
	for _, s := range steps {
		empty := missing > 0 && ((s.fixed && s.name == "") || (!s.fixed && variable <= missing))
		if !s.fixed {
			variable--
		}
		if empty || len(inst) == 0 {
			out = append(out, "")
			missing--
			continue
		}
		out = append(out, inst[0])
		inst = inst[1:]
	}
	return out
}

// instanceTokens converts the validator's instance location (its tokens
// are also URL-path-escaped) into unescaped RFC 6901 tokens.
func instanceTokens(loc string) []string {
	if loc == "" {
		return nil
	}
	parts := strings.Split(strings.TrimPrefix(loc, "/"), "/")
	for i, s := range parts {
		if u, err := url.PathUnescape(s); err == nil {
			s = u
		}
		parts[i] = unescapeToken(s)
	}
	return parts
}

func schemaAt(raw map[string]any, absLoc string) (sub map[string]any, keyword string) {
	_, frag, _ := strings.Cut(absLoc, "#")
	toks := instanceTokens(frag)
	if len(toks) == 0 {
		return raw, ""
	}
	keyword = toks[len(toks)-1]
	cur, _ := lookup(raw, toks[:len(toks)-1])
	sub, _ = cur.(map[string]any)
	return sub, keyword
}
