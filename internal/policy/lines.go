package policy

import (
	"bytes"
	"encoding/json"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// jsonLines finds the line of the value each wanted JSON Pointer names in
// a document's JSON text. The lines of the objects that break a rule are
// part of every report, and fleet.Locate, which records the place of every
// value down to the leaves, costs as much as making the plan; this reads
// the text once, building pointers only as deep as the deepest wanted (an
// object of the document is at most four tokens deep) and skipping the
// values below. A value's place is where fleet's parser puts it: its first
// byte after space. It gives false for a text it does not read as JSON
// (then fleet.Locate decides), and leaves out a pointer the text lacks.
// TestJSONLinesAgree holds it to fleet.Locate.
func jsonLines(data []byte, wanted []string) (map[string]int, bool) {
	if !utf8.Valid(data) {
		return nil, false
	}
	s := lineScanner{data: data, offsets: make(map[string]int, len(wanted))}
	for _, w := range wanted {
		s.offsets[w] = -1
		if d := strings.Count(w, "/"); d > s.maxDepth {
			s.maxDepth = d
		}
	}
	if !s.value(0) {
		return nil, false
	}
	s.space()
	if s.pos != len(data) {
		return nil, false
	}
	starts := []int{0}
	for off := 0; ; {
		i := bytes.IndexByte(data[off:], '\n')
		if i < 0 {
			break
		}
		off += i + 1
		starts = append(starts, off)
	}
	lines := make(map[string]int, len(s.offsets))
	for ptr, off := range s.offsets {
		if off >= 0 {
			lines[ptr] = sort.Search(len(starts), func(i int) bool { return starts[i] > off })
		}
	}
	return lines, true
}

type lineScanner struct {
	data     []byte
	pos      int
	path     []byte
	maxDepth int
	offsets  map[string]int // wanted pointer -> offset of its value (-1: not seen)
}

func (s *lineScanner) space() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// value reads the value at s.pos, whose pointer is s.path, depth tokens
// deep.
func (s *lineScanner) value(depth int) bool {
	s.space()
	if s.pos >= len(s.data) {
		return false
	}
	if _, ok := s.offsets[string(s.path)]; ok {
		s.offsets[string(s.path)] = s.pos
	}
	if depth >= s.maxDepth {
		return s.skip()
	}
	switch s.data[s.pos] {
	case '{':
		s.pos++
		s.space()
		if s.pos < len(s.data) && s.data[s.pos] == '}' {
			s.pos++
			return true
		}
		for {
			s.space()
			k, ok := s.key()
			if !ok {
				return false
			}
			s.space()
			if s.pos >= len(s.data) || s.data[s.pos] != ':' {
				return false
			}
			s.pos++
			n := len(s.path)
			s.path = append(s.path, '/')
			s.path = append(s.path, escape(k)...)
			if !s.value(depth + 1) {
				return false
			}
			s.path = s.path[:n]
			s.space()
			if s.pos >= len(s.data) {
				return false
			}
			switch s.data[s.pos] {
			case ',':
				s.pos++
			case '}':
				s.pos++
				return true
			default:
				return false
			}
		}
	case '[':
		s.pos++
		s.space()
		if s.pos < len(s.data) && s.data[s.pos] == ']' {
			s.pos++
			return true
		}
		for i := 0; ; i++ {
			n := len(s.path)
			s.path = append(s.path, '/')
			s.path = strconv.AppendInt(s.path, int64(i), 10)
			if !s.value(depth + 1) {
				return false
			}
			s.path = s.path[:n]
			s.space()
			if s.pos >= len(s.data) {
				return false
			}
			switch s.data[s.pos] {
			case ',':
				s.pos++
			case ']':
				s.pos++
				return true
			default:
				return false
			}
		}
	}
	return s.skip()
}

// key reads an object's key (one with an escape by encoding/json).
func (s *lineScanner) key() (string, bool) {
	start := s.pos
	if !s.skipString() {
		return "", false
	}
	raw := s.data[start+1 : s.pos-1]
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw), true
	}
	var k string
	if json.Unmarshal(s.data[start:s.pos], &k) != nil {
		return "", false
	}
	return k, true
}

func (s *lineScanner) skipString() bool {
	if s.pos >= len(s.data) || s.data[s.pos] != '"' {
		return false
	}
	for i := s.pos + 1; i < len(s.data); i++ {
		switch s.data[i] {
		case '\\':
			i++
		case '"':
			s.pos = i + 1
			return true
		}
	}
	return false
}

// skip passes over one value without reading it: a string, a container
// (brackets counted outside strings) or a scalar.
func (s *lineScanner) skip() bool {
	switch c := s.data[s.pos]; c {
	case '"':
		return s.skipString()
	case '{', '[':
		depth := 0
		for s.pos < len(s.data) {
			switch s.data[s.pos] {
			case '"':
				if !s.skipString() {
					return false
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					s.pos++
					return true
				}
			}
			s.pos++
		}
		return false
	}
	start := s.pos
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return s.pos > start
		}
		s.pos++
	}
	return s.pos > start
}
