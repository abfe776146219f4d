// Package canon is the one canonical JSON encoding of fleet-agent: keys
// sorted by their UTF-16 code units as RFC 8785 asks (for the ASCII keys of
// the document this is byte order), no white space, no HTML escaping,
// integers as integers and other numbers in their shortest round-trip form.
// Plans, plan hashes, applied documents and comparisons all go through it,
// so the same inputs give the same bytes on any machine.
package canon

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf16"
	"unicode/utf8"
)

// Marshal returns the canonical encoding of v. v may be built of nil, bool,
// strings, integers, floats, json.Number, maps with string keys, slices,
// pointers, interfaces and structs with json tags (omitempty and omitzero
// honoured as encoding/json does, "-" skipped).
func Marshal(v any) ([]byte, error) {
	return Append(make([]byte, 0, 256), v)
}

// MustMarshal is Marshal for values built by this program, where an error is
// a bug.
func MustMarshal(v any) []byte {
	b, err := Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("canon: %v", err))
	}
	return b
}

// Append appends the canonical encoding of v to dst.
func Append(dst []byte, v any) ([]byte, error) {
	// The plain JSON types take a path without reflection: plans and specs
	// are made of them, and a plan of thousands of objects encodes its
	// whole call list to hash it.
	switch x := v.(type) {
	case nil:
		return append(dst, "null"...), nil
	case string:
		return AppendString(dst, x), nil
	case bool:
		return strconv.AppendBool(dst, x), nil
	case int64:
		return appendInt(dst, x)
	case int:
		return appendInt(dst, int64(x))
	case float64:
		return AppendFloat(dst, x)
	case json.Number:
		return AppendNumber(dst, string(x))
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		return appendObject(dst, keys, func(dst []byte, k string) ([]byte, error) { return Append(dst, x[k]) })
	case []any:
		dst = append(dst, '[')
		for i, e := range x {
			if i > 0 {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = Append(dst, e); err != nil {
				return dst, err
			}
		}
		return append(dst, ']'), nil
	}
	return appendValue(dst, reflect.ValueOf(v))
}

var numberType = reflect.TypeFor[json.Number]()
var rawType = reflect.TypeFor[json.RawMessage]()

func appendValue(dst []byte, v reflect.Value) ([]byte, error) {
	switch v.Kind() {
	case reflect.Invalid:
		return append(dst, "null"...), nil
	case reflect.Pointer:
		if v.IsNil() {
			return append(dst, "null"...), nil
		}
		return appendValue(dst, v.Elem())
	case reflect.Interface:
		if v.IsNil() {
			return append(dst, "null"...), nil
		}
		return Append(dst, v.Elem().Interface())
	case reflect.Bool:
		return strconv.AppendBool(dst, v.Bool()), nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return appendInt(dst, v.Int())
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if u := v.Uint(); u > maxSafe {
			return AppendFloat(dst, float64(u))
		}
		return appendInt(dst, int64(v.Uint()))
	case reflect.Float32, reflect.Float64:
		return AppendFloat(dst, v.Float())
	case reflect.String:
		if v.Type() == numberType {
			return AppendNumber(dst, v.String())
		}
		return AppendString(dst, v.String()), nil
	case reflect.Slice:
		if v.Type() == rawType {
			var x any
			d := json.NewDecoder(strings.NewReader(string(v.Bytes())))
			d.UseNumber()
			if err := d.Decode(&x); err != nil {
				return dst, err
			}
			return Append(dst, x)
		}
		if v.IsNil() {
			return append(dst, "null"...), nil
		}
		fallthrough
	case reflect.Array:
		dst = append(dst, '[')
		for i := range v.Len() {
			if i > 0 {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = appendValue(dst, v.Index(i)); err != nil {
				return dst, err
			}
		}
		return append(dst, ']'), nil
	case reflect.Map:
		if v.Type().Key().Kind() != reflect.String {
			return dst, fmt.Errorf("map key type %s is not a string", v.Type().Key())
		}
		if v.IsNil() {
			return append(dst, "null"...), nil
		}
		keys := make([]string, 0, v.Len())
		for _, k := range v.MapKeys() {
			keys = append(keys, k.String())
		}
		return appendObject(dst, keys, func(dst []byte, k string) ([]byte, error) {
			return appendValue(dst, v.MapIndex(reflect.ValueOf(k).Convert(v.Type().Key())))
		})
	case reflect.Struct:
		return appendStruct(dst, v)
	}
	return dst, fmt.Errorf("cannot encode %s", v.Type())
}

type field struct {
	name      string
	index     []int
	omitEmpty bool
	omitZero  bool
}

var fieldCache sync.Map // reflect.Type -> []field

func structFields(t reflect.Type) []field {
	if f, ok := fieldCache.Load(t); ok {
		return f.([]field)
	}
	var fields []field
	for sf := range t.Fields() {
		if !sf.IsExported() {
			continue
		}
		tag := sf.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" {
			name = sf.Name
		}
		o := strings.Split(opts, ",")
		fields = append(fields, field{name: name, index: sf.Index, omitEmpty: slices.Contains(o, "omitempty"), omitZero: slices.Contains(o, "omitzero")})
	}
	slices.SortFunc(fields, func(a, b field) int { return compareKeys(a.name, b.name) })
	fieldCache.Store(t, fields)
	return fields
}

func isEmpty(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return v.Len() == 0
	case reflect.Bool:
		return !v.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return v.Int() == 0
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return v.Uint() == 0
	case reflect.Float32, reflect.Float64:
		return v.Float() == 0
	case reflect.Interface, reflect.Pointer:
		return v.IsNil()
	}
	return false
}

func appendStruct(dst []byte, v reflect.Value) ([]byte, error) {
	dst = append(dst, '{')
	first := true
	for _, f := range structFields(v.Type()) {
		fv := v.FieldByIndex(f.index)
		if (f.omitEmpty && isEmpty(fv)) || (f.omitZero && fv.IsZero()) {
			continue
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = AppendString(dst, f.name)
		dst = append(dst, ':')
		var err error
		if dst, err = appendValue(dst, fv); err != nil {
			return dst, err
		}
	}
	return append(dst, '}'), nil
}

// appendObject writes an object whose members are keys, in RFC 8785's
// order; value appends the value of one key.
func appendObject(dst []byte, keys []string, value func(dst []byte, k string) ([]byte, error)) ([]byte, error) {
	sortKeys(keys)
	dst = append(dst, '{')
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = AppendString(dst, k)
		dst = append(dst, ':')
		var err error
		if dst, err = value(dst, k); err != nil {
			return dst, err
		}
	}
	return append(dst, '}'), nil
}

// sortKeys sorts by UTF-16 code units, RFC 8785's order.
func sortKeys(keys []string) { slices.SortFunc(keys, compareKeys) }

func compareKeys(a, b string) int {
	if isASCII(a) && isASCII(b) {
		return strings.Compare(a, b)
	}
	return slices.Compare(utf16.Encode([]rune(a)), utf16.Encode([]rune(b)))
}

func isASCII(s string) bool {
	for i := range len(s) {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

const hex = "0123456789abcdef"

// AppendString appends s as a JSON string: only '"', '\\' and control
// characters are escaped, as RFC 8785 asks; invalid UTF-8 becomes U+FFFD.
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				dst = append(dst, s[start:i]...)
				dst = append(dst, "\ufffd"...)
				i += size
				start = i
				continue
			}
			i += size
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"':
			dst = append(dst, '\\', '"')
		case '\\':
			dst = append(dst, '\\', '\\')
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		i++
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// ErrNotFinite is returned for NaN and infinities, which JSON cannot carry.
var ErrNotFinite = errors.New("canon: NaN and infinities have no JSON form")

// AppendFloat appends f the way ECMAScript's Number.prototype.toString
// prints it (RFC 8785 section 3.2.2.3).
func AppendFloat(dst []byte, f float64) ([]byte, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return dst, ErrNotFinite
	}
	if f == 0 {
		return append(dst, '0'), nil
	}
	if f < 0 {
		dst = append(dst, '-')
		f = -f
	}
	// Shortest digits that round-trip, then ECMAScript's layout.
	e := strconv.FormatFloat(f, 'e', -1, 64)
	mant, expStr, _ := strings.Cut(e, "e")
	digits := strings.Replace(mant, ".", "", 1)
	exp, _ := strconv.Atoi(expStr)
	k := len(digits)
	n := exp + 1
	switch {
	case k <= n && n <= 21:
		dst = append(dst, digits...)
		for range n - k {
			dst = append(dst, '0')
		}
	case 0 < n && n <= 21:
		dst = append(dst, digits[:n]...)
		dst = append(dst, '.')
		dst = append(dst, digits[n:]...)
	case -6 < n && n <= 0:
		dst = append(dst, '0', '.')
		for range -n {
			dst = append(dst, '0')
		}
		dst = append(dst, digits...)
	default:
		dst = append(dst, digits[0])
		if k > 1 {
			dst = append(dst, '.')
			dst = append(dst, digits[1:]...)
		}
		dst = append(dst, 'e')
		if n-1 >= 0 {
			dst = append(dst, '+')
		}
		dst = strconv.AppendInt(dst, int64(n-1), 10)
	}
	return dst, nil
}

// AppendNumber appends a JSON number literal in canonical form: integers
// within ±(2^53-1) print as integers, anything else as the ECMAScript form
// of the nearest double.
func AppendNumber(dst []byte, lit string) ([]byte, error) {
	if i, err := strconv.ParseInt(lit, 10, 64); err == nil && i <= maxSafe && i >= -maxSafe {
		return strconv.AppendInt(dst, i, 10), nil
	}
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return dst, fmt.Errorf("canon: bad number %q", lit)
	}
	return AppendFloat(dst, f)
}

const maxSafe = 1<<53 - 1

// appendInt prints an integer; beyond ±(2^53-1) a JSON number is a double in
// RFC 8785, so it prints as one, the same as the json.Number of that value.
func appendInt(dst []byte, i int64) ([]byte, error) {
	if i > maxSafe || i < -maxSafe {
		return AppendFloat(dst, float64(i))
	}
	return strconv.AppendInt(dst, i, 10), nil
}
