package fleet

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

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

// numberRangeMessage words a number literal beyond a double. It does not
// repeat the literal: the value may stand where a secret belongs.
const numberRangeMessage = "this number is out of range; numbers must fit a 64-bit float (about ±1e308)"

// invalidKeyMessage words a map key that its schema refuses; what says what
// each key must be.
func invalidKeyMessage(key, what string) string {
	return fmt.Sprintf("invalid key %s: each key must be %s", quoteShort(key), what)
}

// requiredMessage words a missing field k of the object at toks.
func requiredMessage(k string, toks []string) string {
	return fmt.Sprintf("%s is required%s", k, requiredContext(toks))
}

// unknownFieldMessage words a field its object does not allow, with the
// nearest allowed name when it looks like a typo.
func unknownFieldMessage(k string, allowed []string) string {
	msg := fmt.Sprintf("unknown field %s", quoteShort(k))
	if best := closest(k, allowed); best != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", best)
	}
	return msg + "; allowed here: " + strings.Join(allowed, ", ")
}

// keywordMessage words a failing keyword at the value inst named name; sub
// is the schema holding the keyword.
func keywordMessage(keyword, name string, sub map[string]any, inst any) string {
	switch keyword {
	case "maxItems":
		n := 0
		if a, ok := inst.([]any); ok {
			n = len(a)
		}
		return fmt.Sprintf("%s has %d items; at most %s are allowed", name, n, num(sub["maxItems"]))
	case "minItems":
		return fmt.Sprintf("%s needs at least %s item(s)", name, num(sub["minItems"]))
	case "minProperties", "maxProperties":
		n := 0
		if m, ok := inst.(map[string]any); ok {
			n = len(m)
		}
		return fmt.Sprintf("%s must hold %s, got %d field(s)", name, describe(sub), n)
	case "type", integerKeyword, "const", "enum", "pattern", "minimum", "maximum", "minLength", "maxLength", "exclusiveMinimum", "exclusiveMaximum":
		return fmt.Sprintf("%s must be %s, got %s", name, describe(sub), describeValue(inst))
	}
	return fmt.Sprintf("%s is invalid (%s)", name, keyword)
}

// mapEntryName names an entry of the map parent for a message
// ("ownerQuota.gpu"; an empty key is quoted).
func mapEntryName(parent, key string) string {
	if key == "" {
		return parent + `[""]`
	}
	return parent + "." + key
}

// requiredContext says what kind of item lacks the field, when the pointer
// names a list item ("in sites[0]").
func requiredContext(toks []string) string {
	if len(toks) == 0 {
		return " in the document"
	}
	return " in " + fieldName(toks)
}

// Closest returns the candidate nearest to k when k looks like a typo of
// it ("" when none is near), for the "did you mean" of a message.
func Closest(k string, candidates []string) string { return closest(k, candidates) }

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
