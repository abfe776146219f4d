package fleet

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Limits of the strict parser (docs/document.md).
const (
	MaxDocumentBytes = 16 << 20
	MaxDepth         = 64
	MaxNumberLen     = 64
	// MaxExponent bounds a number's written exponent.
	MaxExponent = 400
)

// bom is U+FEFF in UTF-8, the byte-order mark.
var bom = []byte{0xef, 0xbb, 0xbf}

// syntaxError is a refusal of the whole text: its pointer is always "".
type syntaxError struct {
	off int
	msg string
}

// dupKey is a repeated key in an object; the first value is kept.
type dupKey struct {
	pointer string // pointer of the key (same as the first occurrence's)
	off     int    // offset of the repeated key
}

// badNumber is a number literal beyond a double: short enough to read, but
// with no canonical form. It is refused at its own pointer and validation
// goes on; the tree holds a stand-in (see number).
type badNumber struct {
	pointer string
	off     int
}

// parser is a strict JSON parser producing the value tree that the schema
// validator takes (map[string]any, []any, string, json.Number, bool, nil).
//
// It runs in two modes. The fast mode builds the tree and notices problems.
// When a document has any problem, the caller parses again with track set:
// then the parser keeps the JSON Pointer path and records the byte offset of
// every value and key, so that errors can be reported in text order. Valid
// documents, the common case, never pay for pointers.
type parser struct {
	data  []byte
	pos   int
	depth int
	err   *syntaxError
	dups  int
	bad   int // numbers beyond a double (fast mode)

	// keys interns object keys: a document repeats a few dozen names
	// thousands of times, and a map lookup by []byte does not allocate.
	keys map[string]string

	track      bool
	path       []string
	valueOff   map[string]int
	keyOff     map[string]int
	dupDetails []dupKey
	badNumbers []badNumber
}

func (p *parser) fail(off int, format string, args ...any) {
	if p.err == nil {
		p.err = &syntaxError{off: off, msg: fmt.Sprintf(format, args...)}
	}
}

// parseDocument parses data; it returns the tree, or a syntax error.
func parseDocument(data []byte, track bool) (any, *parser) {
	p := &parser{data: data, track: track, keys: make(map[string]string, 64)}
	if track {
		p.valueOff = map[string]int{}
		p.keyOff = map[string]int{}
	}
	if len(data) > MaxDocumentBytes {
		p.fail(0, "the document is %d bytes; at most %d (16 MiB) are allowed", len(data), MaxDocumentBytes)
		return nil, p
	}
	if !utf8.Valid(data) {
		off := 0
		for off < len(data) {
			r, size := utf8.DecodeRune(data[off:])
			if r == utf8.RuneError && size <= 1 {
				break
			}
			off += size
		}
		p.fail(off, "the document is not valid UTF-8 (first bad byte at offset %d)", off)
		return nil, p
	}
	p.skipSpace()
	if p.pos >= len(p.data) {
		p.fail(0, "the document is empty; it must be one JSON object")
		return nil, p
	}
	v := p.value()
	if p.err != nil {
		return nil, p
	}
	p.skipSpace()
	if p.pos < len(p.data) {
		p.fail(p.pos, "unexpected data after the JSON value at offset %d%s; the document must be one JSON value", p.pos, p.found())
		return nil, p
	}
	return v, p
}

func (p *parser) pointer() string {
	if len(p.path) == 0 {
		return ""
	}
	return "/" + strings.Join(p.path, "/")
}

func (p *parser) skipSpace() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *parser) value() any {
	if p.err != nil {
		return nil
	}
	p.skipSpace()
	if p.pos >= len(p.data) {
		p.fail(p.pos, "unexpected end of the document; the JSON is cut short")
		return nil
	}
	if p.track {
		p.valueOff[p.pointer()] = p.pos
	}
	switch c := p.data[p.pos]; {
	case c == '{':
		return p.object()
	case c == '[':
		return p.array()
	case c == '"':
		s, ok := p.str()
		if !ok {
			return nil
		}
		return s
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	case c == 't':
		return p.literal("true", true)
	case c == 'f':
		return p.literal("false", false)
	case c == 'n':
		return p.literal("null", nil)
	case c == bom[0] && bytes.HasPrefix(p.data[p.pos:], bom):
		// Editors on Windows add one; RFC 8259 forbids it, and "0xef" tells
		// nobody what to do.
		if p.pos == 0 {
			p.fail(0, "the document starts with a UTF-8 byte-order mark (EF BB BF); JSON text must not carry one: save the file as UTF-8 without a BOM")
		} else {
			p.fail(p.pos, "a UTF-8 byte-order mark (EF BB BF) at offset %d; JSON text must not carry one: remove it", p.pos)
		}
		return nil
	default:
		p.fail(p.pos, "invalid character %s at offset %d; expected a JSON value", quoteByte(c), p.pos)
		return nil
	}
}

// found names the byte at the current position for a syntax message.
func (p *parser) found() string {
	if p.pos >= len(p.data) {
		return ", found the end of the document"
	}
	return ", found " + quoteByte(p.data[p.pos])
}

func quoteByte(c byte) string {
	if c >= 0x20 && c < 0x7f {
		return strconv.Quote(string(rune(c)))
	}
	return fmt.Sprintf("0x%02x", c)
}

func (p *parser) literal(word string, v any) any {
	if len(p.data)-p.pos >= len(word) && string(p.data[p.pos:p.pos+len(word)]) == word {
		p.pos += len(word)
		return v
	}
	p.fail(p.pos, "invalid literal at offset %d; expected %s", p.pos, word)
	return nil
}

func (p *parser) enter() bool {
	p.depth++
	if p.depth > MaxDepth {
		p.fail(p.pos, "the document nests deeper than %d levels", MaxDepth)
		return false
	}
	return true
}

func (p *parser) object() any {
	if !p.enter() {
		return nil
	}
	defer func() { p.depth-- }()
	m := map[string]any{}
	if p.opensEmpty('}') {
		return m
	}
	for {
		p.skipSpace()
		if p.pos >= len(p.data) || p.data[p.pos] != '"' {
			p.fail(p.pos, "expected a quoted key at offset %d%s", p.pos, p.found())
			return nil
		}
		keyAt := p.pos
		k, ok := p.key()
		if !ok {
			return nil
		}
		p.skipSpace()
		if p.pos >= len(p.data) || p.data[p.pos] != ':' {
			p.fail(p.pos, "expected ':' after a key at offset %d%s", p.pos, p.found())
			return nil
		}
		p.pos++
		_, dup := m[k]
		if p.track {
			p.path = append(p.path, escapeToken(k))
			ptr := p.pointer()
			if dup {
				p.dupDetails = append(p.dupDetails, dupKey{pointer: ptr, off: keyAt})
				// Parse the repeated value without letting it overwrite the
				// offsets of the first one, which is the value kept.
				// Problems inside the discarded value are moot: the error
				// on its key already says to remove it.
				saved, savedKeys, dups, bad := p.valueOff, p.keyOff, len(p.dupDetails), len(p.badNumbers)
				p.valueOff, p.keyOff = map[string]int{}, map[string]int{}
				p.value()
				p.valueOff, p.keyOff, p.dupDetails, p.badNumbers = saved, savedKeys, p.dupDetails[:dups], p.badNumbers[:bad]
			} else {
				p.keyOff[ptr] = keyAt
				m[k] = p.value()
			}
			p.path = p.path[:len(p.path)-1]
		} else {
			v := p.value()
			if dup {
				p.dups++
			} else {
				m[k] = v
			}
		}
		if p.err != nil {
			return nil
		}
		if more, ok := p.afterMember('}', "an object"); !more {
			if !ok {
				return nil
			}
			return m
		}
	}
}

func (p *parser) array() any {
	if !p.enter() {
		return nil
	}
	defer func() { p.depth-- }()
	a := []any{}
	if p.opensEmpty(']') {
		return a
	}
	for {
		if p.track {
			p.path = append(p.path, strconv.Itoa(len(a)))
		}
		v := p.value()
		if p.track {
			p.path = p.path[:len(p.path)-1]
		}
		if p.err != nil {
			return nil
		}
		a = append(a, v)
		if more, ok := p.afterMember(']', "a list"); !more {
			if !ok {
				return nil
			}
			return a
		}
	}
}

// opensEmpty steps over the opening bracket at p.pos and reports whether
// closing follows at once (an empty object or list).
func (p *parser) opensEmpty(closing byte) bool {
	p.pos++
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == closing {
		p.pos++
		return true
	}
	return false
}

// afterMember steps over what follows a member of an object or a list: a
// comma (more is true) or the closing bracket. ok is false, with the
// syntax error recorded, on anything else.
func (p *parser) afterMember(closing byte, inside string) (more, ok bool) {
	p.skipSpace()
	if p.pos >= len(p.data) {
		p.fail(p.pos, "unexpected end of the document inside %s", inside)
		return false, false
	}
	switch p.data[p.pos] {
	case ',':
		p.pos++
		return true, true
	case closing:
		p.pos++
		return false, true
	}
	p.fail(p.pos, "expected ',' or '%c' at offset %d%s", closing, p.pos, p.found())
	return false, false
}

func (p *parser) number() any {
	start := p.pos
	d := p.data
	i := p.pos
	if i < len(d) && d[i] == '-' {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
			n++
		}
		return n
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case digits() == 0:
		p.fail(start, "invalid number at offset %d", start)
		return nil
	}
	if i < len(d) && d[i] == '.' {
		i++
		if digits() == 0 {
			p.fail(start, "invalid number at offset %d: a digit must follow '.'", start)
			return nil
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if digits() == 0 {
			p.fail(start, "invalid number at offset %d: a digit must follow the exponent", start)
			return nil
		}
	}
	// Refuse long literals before anything does arithmetic on them: a
	// 1e1000000-style literal must not cost big-number work.
	if i-start > MaxNumberLen {
		p.fail(start, "a number literal at offset %d is %d characters long; at most %d are allowed", start, i-start, MaxNumberLen)
		return nil
	}
	// A short literal can still carry a huge exponent; beyond what a double
	// holds it has no canonical form, and big-number code would pay for it.
	// Within that bound a positive exponent can still carry the value past
	// the largest double (1e309): it has no canonical form either. Such a
	// number is an error of its value, not of the text: it is noted, and
	// the tree holds a stand-in of the same sign that is cheap to check, no
	// integer, and no bound (so that a rule comparing it with a sibling,
	// warm.min against warm.max, stays silent).
	p.pos = i
	if exp := exponentOf(d[start:i]); exp > MaxExponent || exp < -MaxExponent || (exp > 0 && overflows(d[start:i])) {
		if p.track {
			p.badNumbers = append(p.badNumbers, badNumber{pointer: p.pointer(), off: start})
		} else {
			p.bad++
		}
		standIn := "1e309"
		if exp < 0 {
			standIn = "1e-401"
		}
		if d[start] == '-' {
			standIn = "-" + standIn
		}
		return json.Number(standIn)
	}
	return json.Number(d[start:i])
}

// key parses an object key, interned when it has no escapes.
func (p *parser) key() (string, bool) {
	d := p.data
	for i := p.pos + 1; i < len(d); i++ {
		c := d[i]
		if c == '"' {
			raw := d[p.pos+1 : i]
			if k, ok := p.keys[string(raw)]; ok {
				p.pos = i + 1
				return k, true
			}
			if len(p.keys) < 4096 {
				k := string(raw)
				p.keys[k] = k
				p.pos = i + 1
				return k, true
			}
			break
		}
		if c == '\\' || c < 0x20 {
			break
		}
	}
	return p.str()
}

// str parses a JSON string at p.pos (which holds '"').
func (p *parser) str() (string, bool) {
	start := p.pos
	p.pos++
	d := p.data
	i := p.pos
	for i < len(d) {
		c := d[i]
		if c == '"' {
			s := string(d[p.pos:i])
			p.pos = i + 1
			return s, true
		}
		if c == '\\' {
			break
		}
		if c < 0x20 {
			p.fail(i, "a control character (0x%02x) inside a string at offset %d must be escaped", c, i)
			return "", false
		}
		i++
	}
	if i >= len(d) {
		p.fail(start, "a string starting at offset %d is never closed", start)
		return "", false
	}
	// Slow path with escapes.
	var b strings.Builder
	b.Write(d[p.pos:i])
	for i < len(d) {
		c := d[i]
		switch {
		case c == '"':
			p.pos = i + 1
			return b.String(), true
		case c < 0x20:
			p.fail(i, "a control character (0x%02x) inside a string at offset %d must be escaped", c, i)
			return "", false
		case c != '\\':
			b.WriteByte(c)
			i++
			continue
		}
		i++
		if i >= len(d) {
			break
		}
		switch d[i] {
		case '"', '\\', '/':
			b.WriteByte(d[i])
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'u':
			r, ok := p.hex4(i + 1)
			if !ok {
				return "", false
			}
			i += 4
			if utf16.IsSurrogate(r) {
				if i+6 < len(d) && d[i+1] == '\\' && d[i+2] == 'u' {
					if r2, ok := p.hex4(i + 3); ok {
						if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
							i += 6
							b.WriteRune(dec)
							break
						}
					} else {
						return "", false
					}
				}
				// A lone half of a pair stands for no character: read as
				// U+FFFD, as decoders do, the text would change unseen.
				p.fail(i-5, "a lone UTF-16 surrogate \\u%04X at offset %d stands for no character: pair a high surrogate (D800-DBFF) with a low one (DC00-DFFF), or write the character itself", r, i-5)
				return "", false
			}
			b.WriteRune(r)
		default:
			p.fail(i, "invalid escape '\\%c' at offset %d", d[i], i)
			return "", false
		}
		i++
	}
	p.fail(start, "a string starting at offset %d is never closed", start)
	return "", false
}

func (p *parser) hex4(at int) (rune, bool) {
	if at+4 > len(p.data) {
		p.fail(at, "a \\u escape at offset %d needs four hex digits", at)
		return 0, false
	}
	var r rune
	for _, c := range p.data[at : at+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			p.fail(at, "a \\u escape at offset %d needs four hex digits", at)
			return 0, false
		}
	}
	return r, true
}

// overflows reports whether a number literal is beyond the largest double.
func overflows(lit []byte) bool {
	f, err := strconv.ParseFloat(string(lit), 64)
	return err != nil && math.IsInf(f, 0)
}

// exponentOf returns the written exponent of a number literal (0 if none),
// saturating instead of overflowing.
func exponentOf(lit []byte) int {
	i := 0
	for i < len(lit) && lit[i] != 'e' && lit[i] != 'E' {
		i++
	}
	if i == len(lit) {
		return 0
	}
	i++
	neg := false
	if i < len(lit) && (lit[i] == '+' || lit[i] == '-') {
		neg = lit[i] == '-'
		i++
	}
	n := 0
	for ; i < len(lit); i++ {
		n = n*10 + int(lit[i]-'0')
		if n > 1_000_000 {
			n = 1_000_000
		}
	}
	if neg {
		return -n
	}
	return n
}
