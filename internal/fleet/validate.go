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
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v5"

	"github.com/fleet-agent/fleet-agent/internal/secrets"
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

// anchor says where in the text an error sorts.
type anchor int

const (
	atValue  anchor = iota // the value the pointer names
	atKey                  // the key the pointer names (unknown field, invalid key)
	atParent               // the parent object (a missing field)
)

type finding struct {
	ptr    string
	msg    string
	anchor anchor
}

// Validate parses and validates a document in both stages (the schema, then
// the rules a schema cannot say). It returns the document in normal form, or
// every error, in text order, at most MaxErrors (+1 summing up the rest).
func Validate(file string, data []byte) (*Document, Errors) {
	tree, p := parseDocument(data, false)
	if p.err != nil {
		return nil, finish(file, []Error{{Message: p.err.msg, Path: ""}})
	}
	var found []finding
	found = append(found, schemaFindings(tree)...)
	found = append(found, ruleFindings(tree)...)
	if len(found) == 0 && p.dups == 0 {
		doc, err := decodeDocument(tree)
		if err != nil {
			// The schema and the rules admitted something the model cannot
			// hold: a bug, but the user still gets a refusal, not a panic.
			return nil, finish(file, []Error{{Message: "internal: " + err.Error(), Path: ""}})
		}
		return doc, nil
	}
	// Something is wrong: parse again keeping offsets so that every error
	// sorts where its value stands in the text.
	_, tp := parseDocument(data, true)
	var es []Error
	for _, d := range tp.dupDetails {
		es = append(es, Error{Path: d.pointer, offset: d.off,
			Message: fmt.Sprintf("key %q is repeated in this object; the first value is kept, remove the others", lastToken(d.pointer))})
	}
	for _, f := range found {
		es = append(es, Error{Path: f.ptr, Message: f.msg, offset: offsetOf(tp, f)})
	}
	return nil, finish(file, es)
}

func lastToken(ptr string) string {
	t := splitPointer(ptr)
	if len(t) == 0 {
		return ""
	}
	return t[len(t)-1]
}

func parentPointer(ptr string) string {
	i := strings.LastIndexByte(ptr, '/')
	if i < 0 {
		return ""
	}
	return ptr[:i]
}

func offsetOf(p *parser, f finding) int {
	ptr := f.ptr
	switch f.anchor {
	case atKey:
		if off, ok := p.keyOff[ptr]; ok {
			return off
		}
	case atParent:
		ptr = parentPointer(ptr)
	}
	for {
		if off, ok := p.valueOff[ptr]; ok {
			return off
		}
		if ptr == "" {
			return 0
		}
		ptr = parentPointer(ptr)
	}
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

// instancePointer converts the validator's instance location (its tokens
// are also URL-path-escaped) into an RFC 6901 pointer.
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
	var cur any = raw
	for _, t := range toks[:len(toks)-1] {
		switch c := cur.(type) {
		case map[string]any:
			cur = c[t]
		case []any:
			i, err := strconv.Atoi(t)
			if err != nil || i < 0 || i >= len(c) {
				return nil, keyword
			}
			cur = c[i]
		default:
			return nil, keyword
		}
	}
	sub, _ = cur.(map[string]any)
	return sub, keyword
}

func lookup(tree any, toks []string) (any, bool) {
	cur := tree
	for _, t := range toks {
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[t]
			if !ok {
				return nil, false
			}
			cur = v
		case []any:
			i, err := strconv.Atoi(t)
			if err != nil || i < 0 || i >= len(c) {
				return nil, false
			}
			cur = c[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

func isIndex(s string) bool {
	if s == "" {
		return false
	}
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// fieldName names the value at toks for a message: its key, or list[i].
func fieldName(toks []string) string {
	n := len(toks)
	if n == 0 {
		return "the document"
	}
	last := toks[n-1]
	if isIndex(last) && n >= 2 {
		return toks[n-2] + "[" + last + "]"
	}
	return last
}

func mapSchemaError(e *jsonschema.ValidationError, prefix []string, tree any, raw map[string]any) []finding {
	toks := append(slices.Clip(prefix), instanceTokens(e.InstanceLocation)...)
	ptr := joinPointer("", toks...)
	sub, keyword := schemaAt(raw, e.AbsoluteKeywordLocation)
	inst, _ := lookup(tree, toks)
	name := fieldName(toks)
	if strings.Contains(e.KeywordLocation, "/propertyNames") {
		// The instance location of a propertyNames failure is the key itself.
		return []finding{{ptr: ptr, anchor: atKey,
			msg: fmt.Sprintf("invalid key %s: each key must be %s", quoteShort(lastToken(ptr)), describe(sub))}}
	}
	if strings.Contains(e.KeywordLocation, "/additionalProperties") && len(toks) >= 2 {
		name = toks[len(toks)-2] + "." + toks[len(toks)-1]
	}
	switch keyword {
	case "required":
		obj, _ := inst.(map[string]any)
		var out []finding
		req, _ := sub["required"].([]any)
		for _, r := range req {
			k, _ := r.(string)
			if _, ok := obj[k]; !ok {
				out = append(out, finding{ptr: joinPointer(ptr, k), anchor: atParent,
					msg: fmt.Sprintf("%s is required%s", k, requiredContext(toks))})
			}
		}
		return out
	case "additionalProperties":
		obj, _ := inst.(map[string]any)
		return unknownKeys(ptr, obj, sub)
	case "maxItems":
		n := 0
		if a, ok := inst.([]any); ok {
			n = len(a)
		}
		return []finding{{ptr: ptr, msg: fmt.Sprintf("%s has %d items; at most %s are allowed", name, n, num(sub["maxItems"]))}}
	case "minItems":
		return []finding{{ptr: ptr, msg: fmt.Sprintf("%s needs at least %s item(s)", name, num(sub["minItems"]))}}
	case "minProperties", "maxProperties":
		n := 0
		if m, ok := inst.(map[string]any); ok {
			n = len(m)
		}
		return []finding{{ptr: ptr, msg: fmt.Sprintf("%s must hold %s, got %d field(s)", name, describe(sub), n)}}
	case "type", integerKeyword, "const", "enum", "pattern", "minimum", "maximum", "minLength", "maxLength", "exclusiveMinimum", "exclusiveMaximum":
		return []finding{{ptr: ptr, msg: fmt.Sprintf("%s must be %s, got %s", name, describe(sub), describeValue(inst))}}
	}
	return []finding{{ptr: ptr, msg: fmt.Sprintf("%s is invalid: %s", name, e.Message)}}
}

// requiredContext says what kind of item lacks the field, when the pointer
// names a list item ("in sites[0]").
func requiredContext(toks []string) string {
	if len(toks) == 0 {
		return " in the document"
	}
	return " in " + fieldName(toks)
}

func unknownKeys(ptr string, obj map[string]any, sub map[string]any) []finding {
	props, _ := sub["properties"].(map[string]any)
	patterns, _ := sub["patternProperties"].(map[string]any)
	var allowed []string
	for k := range props {
		allowed = append(allowed, k)
	}
	slices.Sort(allowed)
	var out []finding
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
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
			out = append(out, finding{ptr: joinPointer(ptr, k), anchor: atKey,
				msg: fmt.Sprintf("invalid key %s: each key must be %s", quoteShort(k), what)})
			continue
		}
		msg := fmt.Sprintf("unknown field %s", quoteShort(k))
		if best := closest(k, allowed); best != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", best)
		}
		msg += "; allowed here: " + strings.Join(allowed, ", ")
		out = append(out, finding{ptr: joinPointer(ptr, k), anchor: atKey, msg: msg})
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

// closest returns the allowed name nearest to k when it is a likely typo.
func closest(k string, allowed []string) string {
	best, bestD := "", 3
	for _, a := range allowed {
		if d := editDistance(strings.ToLower(k), strings.ToLower(a)); d < bestD {
			best, bestD = a, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 99
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func num(v any) string {
	switch n := v.(type) {
	case json.Number:
		return n.String()
	case float64:
		return strconv.FormatFloat(n, 'f', -1, 64)
	}
	return fmt.Sprint(v)
}

// describe says in words what a schema allows.
func describe(s map[string]any) string {
	if s == nil {
		return "valid"
	}
	if c, ok := s["const"]; ok {
		if d, ok := s["description"].(string); ok {
			return d
		}
		return describeValue(c)
	}
	if e, ok := s["enum"].([]any); ok {
		var parts []string
		for _, v := range e {
			parts = append(parts, describeValue(v))
		}
		return "one of " + strings.Join(parts, ", ")
	}
	t, _ := s["type"].(string)
	if r, ok := s[integerKeyword].(map[string]any); ok {
		t, s = "integer", r
	}
	switch t {
	case "integer":
		lo, hasLo := s["minimum"]
		hi, hasHi := s["maximum"]
		switch {
		case hasLo && hasHi:
			return fmt.Sprintf("an integer from %s to %s", num(lo), num(hi))
		case hasLo:
			return fmt.Sprintf("an integer of at least %s", num(lo))
		case hasHi:
			return fmt.Sprintf("an integer of at most %s", num(hi))
		}
		return "an integer"
	case "boolean":
		return "true or false"
	case "array":
		return "a list"
	case "object":
		if d, ok := s["description"].(string); ok && strings.HasPrefix(d, "exactly") {
			return d
		}
		return "an object"
	}
	if d, ok := s["description"].(string); ok {
		return d
	}
	if t == "string" {
		return "a string"
	}
	return "valid"
}

// describeValue renders a value for a message, short.
func describeValue(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return strconv.FormatBool(x)
	case json.Number:
		return x.String()
	case string:
		return quoteShort(x)
	case map[string]any:
		return "an object"
	case []any:
		return "a list"
	}
	return fmt.Sprint(v)
}

func quoteShort(s string) string {
	const max = 64
	if utf8.RuneCountInString(s) > max {
		r := []rune(s)
		return strconv.Quote(string(r[:max])) + "…"
	}
	return strconv.Quote(s)
}

// isSecretField reports whether a provider config key must hold a secret
// reference (CONTRACT.md section 1).
func isSecretField(k string) bool {
	switch k {
	case "token", "password", "secret":
		return true
	}
	for _, suf := range []string{"Token", "Password", "Secret", "Key"} {
		if strings.HasSuffix(k, suf) {
			return true
		}
	}
	return false
}

// MaxUserDataBytes bounds a template's inline cloud-init.
const MaxUserDataBytes = 32 << 10

// ruleFindings checks what the schema cannot say. It is written against
// the raw tree and skips anything of the wrong shape: the schema stage has
// already reported that.
func ruleFindings(tree any) []finding {
	root, _ := tree.(map[string]any)
	var out []finding
	list := func(key string) []any { a, _ := root[key].([]any); return a }
	str := func(m map[string]any, k string) (string, bool) { s, ok := m[k].(string); return s, ok }

	// Repeated names: the later item's name is the one reported.
	repeated := func(items []any, base, field string, keyOf func(m map[string]any) (string, bool), subject func(key string) string) {
		first := map[string]int{}
		for i, it := range items {
			m, _ := it.(map[string]any)
			k, ok := keyOf(m)
			if !ok {
				continue
			}
			if j, seen := first[k]; seen {
				out = append(out, finding{ptr: joinPointer(base, strconv.Itoa(i), field),
					msg: fmt.Sprintf("%s is repeated (first at %s); each must be unique", subject(k), joinPointer(base, strconv.Itoa(j), field))})
				continue
			}
			first[k] = i
		}
	}
	byName := func(m map[string]any) (string, bool) { return str(m, "name") }
	subject := func(what string) func(string) string {
		return func(k string) string { return what + " " + strconv.Quote(k) }
	}
	for _, l := range []struct{ key, what string }{{"sites", "site"}, {"providerAccounts", "provider account"}, {"pools", "pool"}, {"sandboxTemplates", "sandbox template"}} {
		repeated(list(l.key), "/"+l.key, "name", byName, subject(l.what))
	}
	repeated(list("flavors"), "/flavors", "name", func(m map[string]any) (string, bool) {
		p, ok1 := str(m, "pool")
		n, ok2 := str(m, "name")
		return p + "/" + n, ok1 && ok2
	}, subject("flavor"))

	for pi, p := range list("pools") {
		pool, _ := p.(map[string]any)
		pbase := joinPointer("/pools", strconv.Itoa(pi))
		offers, _ := pool["offers"].([]any)
		repeated(offers, pbase+"/offers", "tenant", func(m map[string]any) (string, bool) { return str(m, "tenant") }, subject("an offer to tenant"))
		policy, _ := pool["policy"].(map[string]any)
		sub, _ := policy["substrate"].(map[string]any)
		sflavors, _ := sub["flavors"].([]any)
		repeated(sflavors, pbase+"/policy/substrate/flavors", "name", byName, subject("substrate flavor"))
		for fi, f := range sflavors {
			fm, _ := f.(map[string]any)
			as, _ := fm["autoscaling"].(map[string]any)
			lo, ok1 := intOf(as["minNodes"])
			hi, ok2 := intOf(as["maxNodes"])
			if ok1 && ok2 && lo > hi {
				out = append(out, finding{ptr: joinPointer(pbase, "policy", "substrate", "flavors", strconv.Itoa(fi), "autoscaling", "minNodes"),
					msg: fmt.Sprintf("minNodes (%d) must be at most maxNodes (%d)", lo, hi)})
			}
		}
	}

	for ai, a := range list("providerAccounts") {
		acc, _ := a.(map[string]any)
		if cfg, ok := acc["config"].(map[string]any); ok {
			out = append(out, secretFields(joinPointer("/providerAccounts", strconv.Itoa(ai), "config"), cfg)...)
		}
	}

	for ti, t := range list("sandboxTemplates") {
		tpl, _ := t.(map[string]any)
		base := joinPointer("/sandboxTemplates", strconv.Itoa(ti))
		if env, ok := tpl["env"].(map[string]any); ok {
			keys := make([]string, 0, len(env))
			for k := range env {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				v, ok := env[k].(string)
				if !ok {
					continue // the schema reports the type
				}
				if r, err := secrets.ParseRef(v); err != nil || !r.TenantScoped() {
					out = append(out, finding{ptr: joinPointer(base, "env", k),
						msg: fmt.Sprintf("env %s must be a secret://TENANT/ID reference; values are never written in the document", k)})
				}
			}
		}
		if ud, ok := tpl["userData"].(string); ok {
			if secrets.LooksLikeRef(ud) {
				if r, err := secrets.ParseRef(ud); err != nil || !r.TenantScoped() {
					out = append(out, finding{ptr: base + "/userData", msg: "userData must be inline cloud-init or a secret://TENANT/ID reference to it"})
				}
			} else if len(ud) > MaxUserDataBytes {
				out = append(out, finding{ptr: base + "/userData",
					msg: fmt.Sprintf("userData is %d bytes; at most %d (32 KiB) are allowed inline; store it as a secret and write secret://TENANT/ID", len(ud), MaxUserDataBytes)})
			}
		}
		if w, ok := tpl["warm"].(map[string]any); ok {
			lo, ok1 := intOf(w["min"])
			hi, ok2 := intOf(w["max"])
			if ok1 && ok2 && lo > hi {
				out = append(out, finding{ptr: base + "/warm/min", msg: fmt.Sprintf("warm.min (%d) must be at most warm.max (%d)", lo, hi)})
			}
		}
		lo, ok1 := intOf(tpl["defaultTtlSeconds"])
		hi, ok2 := intOf(tpl["maxTtlSeconds"])
		if ok1 && ok2 && lo > hi {
			out = append(out, finding{ptr: base + "/defaultTtlSeconds", msg: fmt.Sprintf("defaultTtlSeconds (%d) must be at most maxTtlSeconds (%d)", lo, hi)})
		}
	}
	return out
}

// secretFields applies the secret rule at every depth of a provider config.
// The message never repeats the value: it may be a secret pasted by mistake.
func secretFields(base string, v any) []finding {
	var out []finding
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			ptr := joinPointer(base, k)
			if isSecretField(k) {
				s, ok := x[k].(string)
				if !ok {
					out = append(out, finding{ptr: ptr, msg: fmt.Sprintf("%s must hold a secret reference (secret://NAME, vault://PATH#FIELD or env://VAR), got %s", k, kindOf(x[k]))})
					continue
				}
				if _, err := secrets.ParseRef(s); err != nil {
					out = append(out, finding{ptr: ptr, msg: fmt.Sprintf("%s must hold a secret reference, not a value: %v", k, err)})
				}
				continue
			}
			out = append(out, secretFields(ptr, x[k])...)
		}
	case []any:
		for i, e := range x {
			out = append(out, secretFields(joinPointer(base, strconv.Itoa(i)), e)...)
		}
	}
	return out
}

func kindOf(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	case string:
		return "a string"
	case map[string]any:
		return "an object"
	case []any:
		return "a list"
	}
	return "a value"
}

// intOf returns an integral number's value (2.0 and 1e2 are integers, as
// JSON Schema says); ok is false for anything else.
func intOf(v any) (int64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	return integer(string(n))
}

// CheckSecrets applies the document's secret rules to one field of one
// object changed outside a document (a break-glass edit): a provider
// account's config keeps references in its secret fields, a template's env
// values are secret://TENANT/ID, its userData inline or such a reference.
// The error never repeats the value.
func CheckSecrets(kind, field string, v any) error {
	var found []finding
	switch {
	case kind == "providerAccount" && field == "config":
		found = secretFields("/config", v)
	case kind == "sandboxTemplate" && field == "env":
		m, ok := v.(map[string]any)
		if !ok {
			break
		}
		for _, k := range slices.Sorted(maps.Keys(m)) {
			s, _ := m[k].(string)
			if r, err := secrets.ParseRef(s); err != nil || !r.TenantScoped() {
				found = append(found, finding{ptr: joinPointer("/env", k), msg: fmt.Sprintf("env %s must be a secret://TENANT/ID reference, not a value", k)})
			}
		}
	case kind == "sandboxTemplate" && field == "userData":
		s, _ := v.(string)
		if secrets.LooksLikeRef(s) {
			if r, err := secrets.ParseRef(s); err != nil || !r.TenantScoped() {
				found = append(found, finding{ptr: "/userData", msg: "userData must be inline cloud-init or a secret://TENANT/ID reference to it"})
			}
		} else if len(s) > MaxUserDataBytes {
			found = append(found, finding{ptr: "/userData", msg: fmt.Sprintf("userData is %d bytes; at most %d inline", len(s), MaxUserDataBytes)})
		}
	}
	if len(found) == 0 {
		return nil
	}
	es := make([]Error, len(found))
	for i, f := range found {
		es[i] = Error{Path: f.ptr, Message: f.msg}
	}
	return finish("edit", es).Refusal()
}
