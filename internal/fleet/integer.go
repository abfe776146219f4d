package fleet

import (
	"encoding/json"
	"math/big"
	"strconv"
)

// integerKeyword replaces "type": "integer" with "minimum"/"maximum" in the
// compiled schema. It keeps JSON Schema's rule (2.0 and 1e2 are integers,
// 1.5 is not) and answers the common case, a plain decimal literal, with
// strconv instead of big.Rat. The test oracle registers it in
// santhosh-tekuri/jsonschema as an extension keyword of the same meaning.
const integerKeyword = "x-fleet-integer"

type integerSchema struct {
	min, max *big.Rat
	// minI and maxI are the bounds as int64 when they fit, for the fast path.
	minI, maxI       int64
	hasMin, hasMax   bool
	fastMin, fastMax bool
}

// newIntegerSchema compiles the keyword's {"minimum", "maximum"}.
func newIntegerSchema(r map[string]any) *integerSchema {
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
	return s
}

// check says why v is not an integer within the bounds, or "" when it is.
func (s *integerSchema) check(v any) string {
	n, ok := v.(json.Number)
	if !ok {
		return "expected an integer"
	}
	if i, err := strconv.ParseInt(string(n), 10, 64); err == nil && (!s.hasMin || s.fastMin) && (!s.hasMax || s.fastMax) {
		if (s.hasMin && i < s.minI) || (s.hasMax && i > s.maxI) {
			return "out of range"
		}
		return ""
	}
	// 2.0, 1e2, or beyond int64: exact arithmetic (literals are short, with
	// bounded exponents, so this stays cheap).
	r, ok := new(big.Rat).SetString(string(n))
	if !ok || !r.IsInt() {
		return "expected an integer"
	}
	if (s.hasMin && r.Cmp(s.min) < 0) || (s.hasMax && r.Cmp(s.max) > 0) {
		return "out of range"
	}
	return ""
}

// integral reports whether a number literal has an integral value (2.0 and
// 1e2 do: JSON Schema's rule).
func integral(n json.Number) bool {
	if _, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return true
	}
	r, ok := new(big.Rat).SetString(string(n))
	return ok && r.IsInt()
}

// equalNumbers compares two number literals by value.
func equalNumbers(x, y json.Number) bool {
	rx, ok1 := new(big.Rat).SetString(string(x))
	ry, ok2 := new(big.Rat).SetString(string(y))
	return ok1 && ok2 && rx.Cmp(ry) == 0
}
