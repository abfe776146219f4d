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
