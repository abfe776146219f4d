package fleet

import (
	"bytes"
	"sort"
	"unicode/utf8"
)

// Position is a place in a document's text, as an editor and GitHub's line
// annotations name it: Line and Column count from 1, the column in Unicode
// code points from the start of the line (a tab is one column). Lines end at
// '\n'; a '\r' before it belongs to the line it ends. The zero Position
// means "no place" (an error about no part of the text, such as the summary
// of errors not shown).
type Position struct {
	Offset int // byte offset from the start of the text
	Line   int
	Column int
}

// IsZero reports whether p names no place.
func (p Position) IsZero() bool { return p.Line == 0 }

// lineIndex maps byte offsets to positions. It is built once per text with
// bytes.IndexByte (no JSON is read), so that mapping many offsets costs a
// binary search and a code point count within one line each.
type lineIndex struct {
	data   []byte
	starts []int // byte offset at which each line starts
}

func newLineIndex(data []byte) *lineIndex {
	starts := []int{0}
	for off := 0; ; {
		i := bytes.IndexByte(data[off:], '\n')
		if i < 0 {
			break
		}
		off += i + 1
		starts = append(starts, off)
	}
	return &lineIndex{data: data, starts: starts}
}

// at returns the position of byte offset off, clamped to the text.
func (x *lineIndex) at(off int) Position {
	off = min(max(off, 0), len(x.data))
	line := sort.Search(len(x.starts), func(i int) bool { return x.starts[i] > off }) - 1
	start := x.starts[line]
	return Position{Offset: off, Line: line + 1, Column: utf8.RuneCount(x.data[start:off]) + 1}
}

// place sets the position of every error but the summary of errors not
// shown, from the offset the parser recorded for it.
func place(data []byte, es Errors) {
	if len(es) == 0 {
		return
	}
	x := newLineIndex(data)
	for i := range es {
		if es[i].summary {
			continue
		}
		es[i].Position = x.at(es[i].offset)
	}
}

// Locator maps the JSON Pointers of a document to the places of their values
// and keys in its text, from the offsets the strict parser records while it
// reads (the same ones that order validation errors); nothing is parsed a
// second way. It serves what is found after validation: the objects a plan
// blocks.
type Locator struct {
	p     *parser
	lines *lineIndex
}

// Locate reads data with the strict parser keeping offsets. It returns nil
// when the text does not parse (then Validate's errors carry the places).
func Locate(data []byte) *Locator {
	_, p := parseDocument(data, true)
	if p.err != nil {
		return nil
	}
	return &Locator{p: p, lines: newLineIndex(data)}
}

// Value is the place of the value ptr names, or of its nearest ancestor that
// stands in the text; ok is false when not even the document does.
func (l *Locator) Value(ptr string) (Position, bool) {
	if l == nil {
		return Position{}, false
	}
	off, ok := l.p.nearestValue(ptr)
	if !ok {
		return Position{}, false
	}
	return l.lines.at(off), true
}

// Key is the place of the key that names ptr's value in its object; for an
// array item or a missing key it is Value(ptr).
func (l *Locator) Key(ptr string) (Position, bool) {
	if l == nil {
		return Position{}, false
	}
	if off, ok := l.p.keyOff[ptr]; ok {
		return l.lines.at(off), true
	}
	return l.Value(ptr)
}

// nearestValue is the offset of ptr's value or of its nearest ancestor's.
func (p *parser) nearestValue(ptr string) (int, bool) {
	for {
		if off, ok := p.valueOff[ptr]; ok {
			return off, true
		}
		if ptr == "" {
			return 0, false
		}
		ptr = parentPointer(ptr)
	}
}
