package policy

import (
	"encoding/json"

	"github.com/fleet-agent/fleet-agent/internal/inventory"
)

// decodeValue reads JSON that json.Marshal wrote (no space, valid) into
// the values inventory.Normalize gives for it: maps, lists, strings, bools,
// nil, integers as int64 and other numbers as float64. It is the document's
// one conversion per plan judged, so it reads the text once and builds each
// value once, where a decode into json.Number followed by Normalize builds
// every map twice. ok is false on anything it does not expect; the caller
// then decodes the slow way.
func decodeValue(data []byte) (v any, ok bool) {
	d := valueDecoder{data: data}
	defer func() {
		if recover() != nil {
			v, ok = nil, false
		}
	}()
	v = d.value()
	return v, d.ok && d.off == len(data)
}

type valueDecoder struct {
	data []byte
	off  int
	ok   bool
}

func (d *valueDecoder) fail() { panic(d) }

func (d *valueDecoder) value() any {
	d.ok = true
	switch c := d.data[d.off]; {
	case c == '{':
		d.off++
		m := map[string]any{}
		if d.data[d.off] == '}' {
			d.off++
			return m
		}
		for {
			k := d.str()
			if d.data[d.off] != ':' {
				d.fail()
			}
			d.off++
			m[k] = d.value()
			switch d.data[d.off] {
			case ',':
				d.off++
			case '}':
				d.off++
				return m
			default:
				d.fail()
			}
		}
	case c == '[':
		d.off++
		l := []any{}
		if d.data[d.off] == ']' {
			d.off++
			return l
		}
		for {
			l = append(l, d.value())
			switch d.data[d.off] {
			case ',':
				d.off++
			case ']':
				d.off++
				return l
			default:
				d.fail()
			}
		}
	case c == '"':
		return d.str()
	case c == 't':
		d.word("true")
		return true
	case c == 'f':
		d.word("false")
		return false
	case c == 'n':
		d.word("null")
		return nil
	case c == '-' || c >= '0' && c <= '9':
		start := d.off
		for d.off < len(d.data) {
			c := d.data[d.off]
			if c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E' || c >= '0' && c <= '9' {
				d.off++
				continue
			}
			break
		}
		return inventory.Normalize(json.Number(d.data[start:d.off]))
	}
	d.fail()
	return nil
}

func (d *valueDecoder) word(w string) {
	if d.off+len(w) > len(d.data) || string(d.data[d.off:d.off+len(w)]) != w {
		d.fail()
	}
	d.off += len(w)
}

// str reads a string; one with an escape is read by encoding/json.
func (d *valueDecoder) str() string {
	if d.data[d.off] != '"' {
		d.fail()
	}
	start := d.off
	d.off++
	escaped := false
	for {
		c := d.data[d.off]
		if c == '"' {
			break
		}
		if c == '\\' {
			escaped = true
			d.off++
		}
		d.off++
	}
	d.off++
	if !escaped {
		return string(d.data[start+1 : d.off-1])
	}
	var s string
	if err := json.Unmarshal(d.data[start:d.off], &s); err != nil {
		d.fail()
	}
	return s
}
