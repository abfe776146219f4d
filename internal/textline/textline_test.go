package textline_test

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/fleet-agent/fleet-agent/internal/textline"
)

func TestPlain(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"plain text stays", "node pool h100: quota exceeded (8 GPUs)", "node pool h100: quota exceeded (8 GPUs)"},
		{"empty", "", ""},
		{"letters of every script stay", "ノードプール ✓ Größe", "ノードプール ✓ Größe"},
		{"a line break forges no line", "refused\nINFO all good", "refused INFO all good"},
		{"carriage return", "bad\r\x1b[2Kfine", "bad  [2Kfine"},
		{"terminal title escape", "\x1b]0;owned\x07", " ]0;owned "},
		{"tab and DEL and C1", "a\tb\x7fc\u0085d", "a b c d"},
		{"line and paragraph separators", "a\u2028b\u2029c", "a b c"},
		{"bidi override turns nothing around", "exe.\u202etxt", "exe. txt"},
		{"bidi isolates and embeddings", "\u2066a\u2069\u202ab\u202c", " a  b "},
		{"marks", "\u200ea\u200fb\u061cc", " a b c"},
		{"not UTF-8", "a\xffb\xc3", "a b "},
		{"replacement character", "a\ufffdb", "a b"},
		{"zero width joiner stays (emoji)", "👩\u200d💻", "👩\u200d💻"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := textline.Plain(tc.in); got != tc.want {
				t.Fatalf("Plain(%q) = %q, want %q", tc.in, got, tc.want)
			}
			if got := textline.IsPlain(tc.in); got != (tc.in == tc.want) {
				t.Fatalf("IsPlain(%q) = %v", tc.in, got)
			}
		})
	}
}

func FuzzPlain(f *testing.F) {
	for _, s := range []string{"", "ok", "a\nb", "\x1b[31mred", "x\u202ey", "\xff\xfe", "a\u2028b", "日本\u0000"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := textline.Plain(s)
		if !utf8.ValidString(got) {
			t.Fatalf("Plain(%q) = %q: not UTF-8", s, got)
		}
		if !textline.IsPlain(got) {
			t.Fatalf("Plain(%q) = %q: not plain", s, got)
		}
		if textline.Plain(got) != got {
			t.Fatalf("Plain is not idempotent on %q", s)
		}
		if strings.ContainsAny(got, "\n\r\x1b\u2028\u2029\u202e") {
			t.Fatalf("Plain(%q) = %q keeps a line break or an escape", s, got)
		}
		// One character out per character in (each invalid byte is one).
		if n, m := len([]rune(s)), utf8.RuneCountInString(got); n != m {
			t.Fatalf("Plain(%q) has %d characters, want %d", s, m, n)
		}
		for _, r := range got {
			if unicode.IsControl(r) {
				t.Fatalf("Plain(%q) = %q keeps the control character %U", s, got, r)
			}
		}
		if textline.IsPlain(s) && got != s {
			t.Fatalf("Plain changed the plain text %q to %q", s, got)
		}
	})
}

// EscapeJSON keeps a JSON text's meaning and leaves none of the characters
// it escapes raw; text with none of them is returned as it was.
func FuzzEscapeJSON(f *testing.F) {
	for _, s := range []string{"", "plain", "x\u202eabc\u2028d\u2029\u0085\u009b", "é€\U0001F600", "\xff\xfe", `"\u202e"`, "del\x7f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		in, err := json.Marshal(map[string]string{"s": s})
		if err != nil {
			t.Skip()
		}
		out := textline.EscapeJSON(in)
		var back map[string]string
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("%q is not JSON: %v", out, err)
		}
		var want map[string]string
		_ = json.Unmarshal(in, &want)
		if back["s"] != want["s"] {
			t.Fatalf("escaping changed the text: %q, want %q", back["s"], want["s"])
		}
		for _, r := range string(out) {
			if r != utf8.RuneError && !textline.IsPlain(string(r)) {
				t.Fatalf("U+%04X left raw in %q", r, out)
			}
		}
	})
}
