// Package splice is a minimal JSON value splicer: it changes the value at a
// JSON Pointer (RFC 6901) inside a JSON text by rewriting only that value's
// bytes, so everything else in the file (member order, spacing, line breaks,
// number spellings, escapes) stays byte for byte as the person wrote it. A
// drift pull request uses it to write what the fleet now is into fleet.json
// without reformatting the file a reviewer has to read.
//
// A text with duplicate member names is refused: which of the two a pointer
// names would be a guess.
package splice

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

// node is one JSON value with the span of its bytes in the text.
type node struct {
	start, end int  // value bytes: text[start:end]
	kind       byte // '{', '[', '"', or 'v' for numbers and literals
	members    []member
	items      []*node
}

// member is one name/value pair of an object; start is where its name's
// opening quote sits.
type member struct {
	name  string
	start int
	value *node
}

// Span is where the value at a pointer sits: text[Start:End].
type Span struct {
	Start, End int
}

// Doc is a parsed JSON text that remembers where each value sits.
type Doc struct {
	src  []byte
	root *node
}

// Parse reads a JSON text. It refuses invalid JSON and duplicate names.
func Parse(src []byte) (*Doc, error) {
	if !json.Valid(src) {
		return nil, refusal.New(refusal.InvalidInput, "the file is not valid JSON: fix it in git before a drift can be written into it")
	}
	p := &parser{src: src}
	p.ws()
	root, err := p.value()
	if err != nil {
		return nil, err
	}
	return &Doc{src: src, root: root}, nil
}

// Bytes is the text the Doc was parsed from.
func (d *Doc) Bytes() []byte { return d.src }

// Lookup says where the value at ptr sits, or false when there is none.
func (d *Doc) Lookup(ptr string) (Span, bool) {
	n, err := d.find(ptr)
	if err != nil || n == nil {
		return Span{}, false
	}
	return Span{n.start, n.end}, true
}

// Pointers lists the pointer of every value in the text, in text order.
func (d *Doc) Pointers() []string {
	var out []string
	var walk func(n *node, at string)
	walk = func(n *node, at string) {
		out = append(out, at)
		for _, m := range n.members {
			walk(m.value, at+"/"+Escape(m.name))
		}
		for i, it := range n.items {
			walk(it, at+"/"+strconv.Itoa(i))
		}
	}
	walk(d.root, "")
	return out
}

// Escape makes one reference token of a pointer (~ and / escaped).
func Escape(token string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(token)
}

func tokens(ptr string) ([]string, error) {
	if ptr == "" {
		return nil, nil
	}
	if ptr[0] != '/' {
		return nil, refusal.New(refusal.InvalidInput, "%q is not a JSON Pointer: it must start with /", ptr)
	}
	parts := strings.Split(ptr[1:], "/")
	for i, p := range parts {
		parts[i] = strings.NewReplacer("~1", "/", "~0", "~").Replace(p)
	}
	return parts, nil
}

// find walks to the node at ptr; nil without error when the last step is
// missing in an object that exists (so Set can add it).
func (d *Doc) find(ptr string) (*node, error) {
	toks, err := tokens(ptr)
	if err != nil {
		return nil, err
	}
	n := d.root
	for i, t := range toks {
		next := child(n, t)
		if next == nil {
			if i == len(toks)-1 && n.kind == '{' {
				return nil, nil
			}
			return nil, refusal.New(refusal.InvalidInput, "%s: no such value in the file", ptr)
		}
		n = next
	}
	return n, nil
}

func child(n *node, tok string) *node {
	switch n.kind {
	case '{':
		for _, m := range n.members {
			if m.name == tok {
				return m.value
			}
		}
	case '[':
		i, err := strconv.Atoi(tok)
		if err == nil && i >= 0 && i < len(n.items) && strconv.Itoa(i) == tok {
			return n.items[i]
		}
	}
	return nil
}

// Replace returns the text with the value at ptr replaced by value (itself a
// JSON text). Only the old value's bytes change. A value that spans lines is
// indented to the line it starts on.
func Replace(src []byte, ptr string, value []byte) ([]byte, error) {
	d, err := Parse(src)
	if err != nil {
		return nil, err
	}
	return d.Replace(ptr, value)
}

// Replace is the package's Replace on a parsed text.
func (d *Doc) Replace(ptr string, value []byte) ([]byte, error) {
	n, err := d.find(ptr)
	if err != nil {
		return nil, err
	}
	if n == nil {
		return nil, refusal.New(refusal.InvalidInput, "%s: no such value in the file", ptr)
	}
	v, err := d.render(value, n.start, !bytes.Contains(d.src[n.start:n.end], []byte("\n")))
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(d.src)-(n.end-n.start)+len(v))
	out = append(out, d.src[:n.start]...)
	out = append(out, v...)
	return append(out, d.src[n.end:]...), nil
}

// Set replaces the value at ptr, or adds it as the last member of its
// object when the object has no such member. An added member copies the
// spacing between the object's last two members (or of its first), so it
// reads like its neighbours.
func (d *Doc) Set(ptr string, value []byte) ([]byte, error) {
	n, err := d.find(ptr)
	if err != nil {
		return nil, err
	}
	if n != nil {
		return d.Replace(ptr, value)
	}
	toks, _ := tokens(ptr)
	parent, _ := d.find(ptrOf(toks[:len(toks)-1]))
	name, _ := json.Marshal(toks[len(toks)-1])
	if len(parent.members) == 0 {
		v, err := d.render(value, parent.start, true)
		if err != nil {
			return nil, err
		}
		ins := append(append(append([]byte{}, name...), ':'), v...)
		return splice(d.src, parent.start+1, parent.end-1, ins), nil
	}
	last := parent.members[len(parent.members)-1]
	// The separator before a member: what lies between the previous value's
	// end and the member's name (", \n    " and the like).
	sep := []byte(",")
	if k := len(parent.members); k >= 2 {
		sep = d.src[parent.members[k-2].value.end:last.start]
	} else {
		sep = append(sep, d.src[parent.start+1:last.start]...)
	}
	colon := d.src[last.start+len(quoted(d.src, last.start)) : last.value.start]
	v, err := d.render(value, last.start, !bytes.Contains(d.src[parent.start:parent.end], []byte("\n")))
	if err != nil {
		return nil, err
	}
	var ins []byte
	ins = append(ins, sep...)
	ins = append(ins, name...)
	ins = append(ins, colon...)
	ins = append(ins, v...)
	return splice(d.src, last.value.end, last.value.end, ins), nil
}

// Remove drops the member at ptr from its object, with the separator that
// joined it to its neighbour.
func (d *Doc) Remove(ptr string) ([]byte, error) {
	toks, err := tokens(ptr)
	if err != nil {
		return nil, err
	}
	if len(toks) == 0 {
		return nil, refusal.New(refusal.InvalidInput, "the whole file cannot be removed")
	}
	parent, err := d.find(ptrOf(toks[:len(toks)-1]))
	if err != nil || parent == nil || parent.kind != '{' {
		return nil, refusal.New(refusal.InvalidInput, "%s: only a member of an object can be removed", ptr)
	}
	for i, m := range parent.members {
		if m.name != toks[len(toks)-1] {
			continue
		}
		switch {
		case len(parent.members) == 1:
			return splice(d.src, m.start, m.value.end, nil), nil
		case i == 0: // up to the next member's name
			return splice(d.src, m.start, parent.members[1].start, nil), nil
		default: // from the previous value's end
			return splice(d.src, parent.members[i-1].value.end, m.value.end, nil), nil
		}
	}
	return d.src, nil // nothing to remove
}

func ptrOf(toks []string) string {
	var b strings.Builder
	for _, t := range toks {
		b.WriteString("/" + Escape(t))
	}
	return b.String()
}

func splice(src []byte, from, to int, ins []byte) []byte {
	out := make([]byte, 0, len(src)-(to-from)+len(ins))
	out = append(out, src[:from]...)
	out = append(out, ins...)
	return append(out, src[to:]...)
}

// render checks value and, when it is an object or an array, writes it on
// one line where what it replaces did (compact), else indents it to the line
// at which it will start (in the file's indentation step).
func (d *Doc) render(value []byte, at int, compact bool) ([]byte, error) {
	if !json.Valid(value) {
		return nil, refusal.New(refusal.InvalidInput, "the new value is not JSON")
	}
	value = bytes.Trim(value, " \t\r\n")
	if value[0] != '{' && value[0] != '[' {
		return value, nil
	}
	lineStart := bytes.LastIndexByte(d.src[:at], '\n') + 1
	indent := leading(d.src[lineStart:])
	if compact {
		var b bytes.Buffer
		if err := json.Compact(&b, value); err != nil {
			return nil, err
		}
		return b.Bytes(), nil
	}
	var b bytes.Buffer
	if err := json.Indent(&b, value, string(indent), d.unit()); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// unit is the file's indentation step: the leading space of the first
// indented line (two spaces when none is).
func (d *Doc) unit() string {
	for _, line := range bytes.Split(d.src, []byte("\n")) {
		if l := leading(line); len(l) > 0 && len(l) < len(line) {
			return string(l)
		}
	}
	return "  "
}

func leading(line []byte) []byte {
	i := 0
	for i < len(line) && (line[i] == ' ' || line[i] == '\t') {
		i++
	}
	return line[:i]
}

// quoted returns the string literal that starts at i (quotes included).
func quoted(src []byte, i int) []byte {
	j := i + 1
	for j < len(src) && src[j] != '"' {
		if src[j] == '\\' {
			j++
		}
		j++
	}
	return src[i : j+1]
}

// parser walks a text json.Valid accepted, so it only records spans.
type parser struct {
	src []byte
	i   int
}

func (p *parser) ws() {
	for p.i < len(p.src) {
		switch p.src[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *parser) value() (*node, error) {
	n := &node{start: p.i}
	switch c := p.src[p.i]; c {
	case '{':
		n.kind = '{'
		p.i++
		p.ws()
		seen := map[string]bool{}
		for p.src[p.i] != '}' {
			start := p.i
			lit := quoted(p.src, p.i)
			p.i += len(lit)
			var name string
			if err := json.Unmarshal(lit, &name); err != nil {
				return nil, refusal.Wrap(refusal.InvalidInput, err, "a member name at byte %d cannot be read", start)
			}
			if seen[name] {
				return nil, refusal.New(refusal.InvalidInput, "the member %q appears twice in one object (byte %d): remove one in git first", name, start)
			}
			seen[name] = true
			p.ws()
			p.i++ // ':'
			p.ws()
			v, err := p.value()
			if err != nil {
				return nil, err
			}
			n.members = append(n.members, member{name: name, start: start, value: v})
			p.ws()
			if p.src[p.i] == ',' {
				p.i++
				p.ws()
			}
		}
		p.i++
	case '[':
		n.kind = '['
		p.i++
		p.ws()
		for p.src[p.i] != ']' {
			v, err := p.value()
			if err != nil {
				return nil, err
			}
			n.items = append(n.items, v)
			p.ws()
			if p.src[p.i] == ',' {
				p.i++
				p.ws()
			}
		}
		p.i++
	case '"':
		n.kind = '"'
		p.i += len(quoted(p.src, p.i))
	default:
		n.kind = 'v'
		for p.i < len(p.src) && !strings.ContainsRune(" \t\r\n,]}", rune(p.src[p.i])) {
			p.i++
		}
	}
	n.end = p.i
	return n, nil
}
