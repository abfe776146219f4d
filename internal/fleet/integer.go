package fleet

import (
	"encoding/json"
	"math/big"
	"strconv"

	"github.com/santhosh-tekuri/jsonschema/v5"
)

// integerKeyword replaces "type": "integer" with "minimum"/"maximum" in the
// compiled schema. It keeps JSON Schema's rule (2.0 and 1e2 are integers,
// 1.5 is not) and answers the common case, a plain decimal literal, with
// strconv instead of big.Rat.
const integerKeyword = "x-fleet-integer"

type integerExt struct{}

type integerSchema struct {
	min, max *big.Rat
	// minI and maxI are the bounds as int64 when they fit, for the fast path.
	minI, maxI       int64
	hasMin, hasMax   bool
	fastMin, fastMax bool
}

func registerInteger(c *jsonschema.Compiler) {
	meta := jsonschema.MustCompileString("fleet-integer-meta.json", `{"properties":{"`+integerKeyword+`":{"type":"object"}}}`)
	c.RegisterExtension(integerKeyword, meta, integerExt{})
}

func (integerExt) Compile(_ jsonschema.CompilerContext, m map[string]any) (jsonschema.ExtSchema, error) {
	r, ok := m[integerKeyword].(map[string]any)
	if !ok {
		return nil, nil
	}
	s := &integerSchema{}
	bound := func(v any) (*big.Rat, int64, bool) {
		var lit string
		switch n := v.(type) {
		case json.Number:
			lit = n.String()
		case float64:
			lit = strconv.FormatFloat(n, 'f', -1, 64)
		default:
			return nil, 0, false
		}
		rat, _ := new(big.Rat).SetString(lit)
		i, err := strconv.ParseInt(lit, 10, 64)
		return rat, i, err == nil
	}
	if v, ok := r["minimum"]; ok {
		s.hasMin = true
		s.min, s.minI, s.fastMin = bound(v)
	}
	if v, ok := r["maximum"]; ok {
		s.hasMax = true
		s.max, s.maxI, s.fastMax = bound(v)
	}
	return s, nil
}

func (s *integerSchema) Validate(ctx jsonschema.ValidationContext, v any) error {
	n, ok := v.(json.Number)
	if !ok {
		return ctx.Error(integerKeyword, "expected an integer")
	}
	if i, err := strconv.ParseInt(string(n), 10, 64); err == nil && (!s.hasMin || s.fastMin) && (!s.hasMax || s.fastMax) {
		if (s.hasMin && i < s.minI) || (s.hasMax && i > s.maxI) {
			return ctx.Error(integerKeyword, "out of range")
		}
		return nil
	}
	// 2.0, 1e2, or beyond int64: exact arithmetic (literals are short, with
	// bounded exponents, so this stays cheap).
	r, ok := new(big.Rat).SetString(string(n))
	if !ok || !r.IsInt() {
		return ctx.Error(integerKeyword, "expected an integer")
	}
	if (s.hasMin && r.Cmp(s.min) < 0) || (s.hasMax && r.Cmp(s.max) > 0) {
		return ctx.Error(integerKeyword, "out of range")
	}
	return nil
}
