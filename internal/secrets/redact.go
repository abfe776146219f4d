package secrets

import (
	"bytes"
	"encoding/json"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/rs/zerolog"

	"github.com/fleet-agent/fleet-agent/internal/textline"
)

// Mask is what stands in an output where a secret value was.
const Mask = "***"

// Redactor is the set of secret values this process has seen. Outputs pass
// through it so that a value can never be written down, whatever path it took
// to reach a log line, an error, a plan or a comment. It is safe for
// concurrent use; reads take no lock.
//
// Every non-empty value is masked, however short. A short value masks too
// much (a one-byte secret turns every log line into asterisks) and the
// pattern of masks can hint at what it was, but both are visible and both
// are better than printing the secret; the fix is a longer secret, not a
// quieter redactor. Resolver refuses empty values, so nothing resolves to a
// value that cannot be masked.
//
// Besides the value itself, the Redactor masks the forms the value takes
// once or twice quoted: inside a JSON string (as zerolog and encoding/json
// escape it) and inside a Go quoted string (%q), since a value with a quote,
// a backslash, a newline (a PEM key) or a control byte shows up only in that
// form in a JSON log line or in an error message, and an error quoting it
// is itself quoted when logged.
type Redactor struct {
	mu     sync.Mutex // serialises Add; readers use the snapshot
	needle atomic.Pointer[[]string]
	seen   map[string]struct{}
}

// NewRedactor returns an empty Redactor.
func NewRedactor() *Redactor {
	r := &Redactor{seen: map[string]struct{}{}}
	empty := []string{}
	r.needle.Store(&empty)
	return r
}

// Add registers a value to mask from now on. Empty values are ignored.
func (r *Redactor) Add(value string) {
	if value == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.seen[value]; ok {
		return
	}
	r.seen[value] = struct{}{}
	next := slices.Clone(*r.needle.Load())
	for _, form := range forms(value) {
		if !slices.Contains(next, form) {
			next = append(next, form)
		}
	}
	// Longest first: when two forms start at the same place the longer one
	// decides the span, though spans are merged anyway (see mask).
	slices.SortStableFunc(next, func(a, b string) int { return len(b) - len(a) })
	r.needle.Store(&next)
}

// Len reports how many distinct values are registered.
func (r *Redactor) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen)
}

// Redact returns s with every registered value masked. Outputs that do not go
// through the logger (errors, plan text, comments, statuses) call it last,
// as a line of defence behind code that never puts a value there.
func (r *Redactor) Redact(s string) string {
	if r == nil {
		return s
	}
	out, changed := mask([]byte(s), *r.needle.Load())
	if !changed {
		return s
	}
	return string(out)
}

// Writer wraps w so that every registered value is masked in what is
// written through it.
//
// Masking is per Write call: a value split across two calls is not seen.
// zerolog writes each event with a single Write, so a logger whose writer is
// this wrapper (NewLogger) is covered; put any buffering (bufio, diodes)
// between the logger and this wrapper, never after it. If w is a
// zerolog.LevelWriter the level is passed on. A nil Redactor returns a
// writer that masks nothing, so that tests may pass none.
func (r *Redactor) Writer(w io.Writer) io.Writer {
	if r == nil {
		r = NewRedactor()
	}
	return &redactingWriter{r: r, w: w}
}

type redactingWriter struct {
	r *Redactor
	w io.Writer
}

var _ zerolog.LevelWriter = (*redactingWriter)(nil)

func (rw *redactingWriter) Write(p []byte) (int, error) {
	out := rw.line(p)
	if _, err := rw.w.Write(out); err != nil {
		// The number of masked bytes written says nothing about p.
		return 0, err
	}
	return len(p), nil
}

func (rw *redactingWriter) WriteLevel(level zerolog.Level, p []byte) (int, error) {
	lw, ok := rw.w.(zerolog.LevelWriter)
	if !ok {
		return rw.Write(p)
	}
	out := rw.line(p)
	if _, err := lw.WriteLevel(level, out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// line is what reaches w for p: the secrets masked, and the characters
// that would turn the line around or break it where it is read written as
// JSON escapes (textline.EscapeJSON), so text from outside, a branch
// name or a provider's error, shows as written.
func (rw *redactingWriter) line(p []byte) []byte {
	out, _ := mask(p, *rw.r.needle.Load())
	return textline.EscapeJSON(out)
}

// NewLogger returns a JSON zerolog logger, with timestamps, at the given
// level, whose every line passes through r before reaching w.
func NewLogger(w io.Writer, r *Redactor, level zerolog.Level) zerolog.Logger {
	return zerolog.New(r.Writer(w)).Level(level).With().Timestamp().Logger()
}

// mask replaces every occurrence of every needle in p by Mask. Occurrences
// may overlap (one secret ending where another begins): they are merged
// into one span so that no part of either is left in clear, which a
// left-to-right replacer would not guarantee. p is not modified.
func mask(p []byte, needles []string) ([]byte, bool) {
	type span struct{ from, to int }
	var spans []span
	for _, n := range needles {
		nb := []byte(n)
		for at := 0; at < len(p); {
			i := bytes.Index(p[at:], nb)
			if i < 0 {
				break
			}
			spans = append(spans, span{at + i, at + i + len(n)})
			at += i + 1
		}
	}
	if len(spans) == 0 {
		return p, false
	}
	slices.SortFunc(spans, func(a, b span) int { return a.from - b.from })
	out := make([]byte, 0, len(p))
	last := 0
	for i := 0; i < len(spans); {
		from, to := spans[i].from, spans[i].to
		for i++; i < len(spans) && spans[i].from <= to; i++ {
			to = max(to, spans[i].to)
		}
		out = append(out, p[last:from]...)
		out = append(out, Mask...)
		last = to
	}
	return append(out, p[last:]...), true
}

// forms returns the value and the ways it is spelled once quoted, and once
// quoted twice: an error that says %q, logged as a JSON string, holds the
// value escaped by Go and then by JSON.
func forms(v string) []string {
	uniq := []string{v}
	add := func(f string) {
		if f != "" && !slices.Contains(uniq, f) {
			uniq = append(uniq, f)
		}
	}
	for _, once := range escapes(v) {
		add(once)
		for _, twice := range escapes(once) {
			add(twice)
		}
	}
	return uniq
}

// escapes spells v as it stands between the quotes of a zerolog JSON string,
// an encoding/json string (with and without HTML escapes) and a Go quoted
// string (%q and %+q).
func escapes(v string) []string {
	out := []string{zerologEscape(v)}
	for _, html := range []bool{false, true} {
		var b strings.Builder
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(html)
		if enc.Encode(v) == nil {
			s := strings.TrimSuffix(b.String(), "\n")
			out = append(out, s[1:len(s)-1])
		}
	}
	q := strconv.Quote(v)
	out = append(out, q[1:len(q)-1])
	q = strconv.QuoteToASCII(v)
	return append(out, q[1:len(q)-1])
}

// zerologEscape spells v the way zerolog's JSON encoder does inside a string
// (it differs from encoding/json: no HTML escapes, no \u2028, DEL escaped).
func zerologEscape(v string) string {
	const hex = "0123456789abcdef"
	var b strings.Builder
	for i := 0; i < len(v); {
		c := v[i]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(v[i:])
			if r == utf8.RuneError && size == 1 {
				b.WriteString(`\ufffd`)
			} else {
				b.WriteString(v[i : i+size])
			}
			i += size
			continue
		}
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c == '\b':
			b.WriteString(`\b`)
		case c == '\f':
			b.WriteString(`\f`)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\r':
			b.WriteString(`\r`)
		case c == '\t':
			b.WriteString(`\t`)
		case c < 0x20 || c == 0x7f:
			b.WriteString(`\u00`)
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&0xf])
		default:
			b.WriteByte(c)
		}
		i++
	}
	return b.String()
}
