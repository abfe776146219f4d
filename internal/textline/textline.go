// Package textline is one line of plain printable text: words that come
// from outside (a pull request author's document, a provider's or a
// registry's error) made safe to show in a terminal, a log line or a page,
// where they must be shown and never obeyed.
package textline

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Plain is s as one line of plain printable characters. Each of these
// becomes a space, so the text keeps its length in characters and its
// words stay apart:
//   - control characters: a line break or a carriage return would forge a
//     line of its own in a log or a terminal; an escape or a bell starts a
//     terminal's sequence;
//   - the line and paragraph separators (U+2028, U+2029), line breaks to
//     some readers;
//   - the bidirectional embeddings, overrides and isolates (U+202A-U+202E,
//     U+2066-U+2069) and marks (U+200E, U+200F, U+061C), which turn the
//     text around as it is shown;
//   - bytes that are not UTF-8 (and U+FFFD, which decoding them gives).
//
// Markup (HTML, Markdown) is the renderers' to escape.
func Plain(s string) string {
	return strings.Map(func(r rune) rune {
		if unsafe(r) {
			return ' '
		}
		return r
	}, s)
}

// IsPlain reports whether s is already Plain's answer (Plain(s) == s).
func IsPlain(s string) bool {
	for _, r := range s {
		if unsafe(r) {
			return false
		}
	}
	return true
}

func unsafe(r rune) bool {
	switch {
	case unicode.IsControl(r), r == utf8.RuneError,
		r == '\u2028', r == '\u2029',
		r >= '\u202a' && r <= '\u202e', r >= '\u2066' && r <= '\u2069',
		r == '\u200e', r == '\u200f', r == '\u061c':
		return true
	}
	return false
}

// EscapeJSON writes, in JSON text, each character Plain would blank that
// JSON's encoders leave raw (DEL, C1 controls, the line and paragraph
// separators, the bidi controls and marks) as its \u escape. The encoders
// escape the other ASCII controls and leave these raw, as JSON allows; a
// log reader or terminal showing the line would then obey them. Such characters can
// stand only inside JSON strings, where the escape means the same
// character, so the text parses to what it did. p is not modified; when
// nothing needs escaping, p itself is returned.
func EscapeJSON(p []byte) []byte {
	i := firstEscape(p)
	if i < 0 {
		return p
	}
	out := make([]byte, 0, len(p)+16)
	out = append(out, p[:i]...)
	for i < len(p) {
		r, n := utf8.DecodeRune(p[i:])
		if (r >= utf8.RuneSelf || r == 0x7f) && r != utf8.RuneError && unsafe(r) {
			out = append(out, '\\', 'u', hex[r>>12&0xf], hex[r>>8&0xf], hex[r>>4&0xf], hex[r&0xf])
		} else {
			out = append(out, p[i:i+n]...)
		}
		i += n
	}
	return out
}

const hex = "0123456789abcdef"

// firstEscape is the index of the first character EscapeJSON rewrites, or
// -1: most lines are ASCII and are passed on as they are.
func firstEscape(p []byte) int {
	for i := 0; i < len(p); {
		if p[i] == 0x7f {
			return i
		}
		if p[i] < utf8.RuneSelf {
			i++
			continue
		}
		r, n := utf8.DecodeRune(p[i:])
		if r != utf8.RuneError && unsafe(r) {
			return i
		}
		i += n
	}
	return -1
}
