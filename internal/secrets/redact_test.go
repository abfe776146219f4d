package secrets

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"
)

func TestRedact(t *testing.T) {
	r := NewRedactor()
	r.Add("")
	if r.Len() != 0 {
		t.Fatal("an empty value was registered")
	}
	for _, v := range []string{"abcd", "cdef", "s3cr3t", "x", "s3cr3t"} {
		r.Add(v)
	}
	if r.Len() != 4 {
		t.Errorf("Len = %d, want 4 (duplicates count once)", r.Len())
	}
	cases := map[string]string{
		"nothing here":        "nothing here",
		"s3cr3t":              "***",
		"a s3cr3t and s3cr3t": "a *** and ***",
		// Overlapping values: no part of either survives.
		"abcdef": "***",
		"xyz":    "***yz",
		"ab":     "ab",
		"":       "",
	}
	for in, want := range cases {
		if got := r.Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
	var nilR *Redactor
	if nilR.Redact("abc") != "abc" {
		t.Error("a nil Redactor must pass text through")
	}
}

// TestRedactQuotedForms checks values that change shape when quoted: in a
// zerolog JSON line, in encoding/json output and in %q.
func TestRedactQuotedForms(t *testing.T) {
	for _, v := range []string{
		`pa"ss\word`,
		"-----BEGIN KEY-----\nMIIE\tabc\n-----END KEY-----",
		"ctl\x01\x7fbyte",
		"html<&>value",
		"bad\xffutf8",
		"line\u2028sep",
		"ünïcödé-secret",
	} {
		r := NewRedactor()
		r.Add(v)
		var buf bytes.Buffer
		log := NewLogger(&buf, r, zerolog.DebugLevel)
		log.Info().Str("v", v).Msg(v)
		log.Error().Err(errors.New("wrapped: " + v)).Send()
		log.Info().Interface("obj", map[string]string{"k": v}).Send()
		log.Info().Strs("list", []string{v}).Send()
		out := buf.String()
		outs := []string{
			out,
			r.Redact(fmt.Sprintf("%q", v)),
			r.Redact(fmt.Sprintf("%+q", v)),
			r.Redact(fmt.Sprintf("value: %s", v)),
			r.Redact(string(mustJSON(t, v, true))),
			r.Redact(string(mustJSON(t, v, false))),
		}
		for _, o := range outs {
			for _, f := range forms(v) {
				if strings.Contains(o, f) {
					t.Errorf("value %q leaks as %q in %q", v, f, o)
				}
			}
			if !strings.Contains(o, Mask) {
				t.Errorf("nothing masked in %q", o)
			}
		}
	}
}

func TestWriterKeepsLevelAndLength(t *testing.T) {
	r := NewRedactor()
	r.Add("topsecret")
	var lw levelRecorder
	w := r.Writer(&lw)
	n, err := w.Write([]byte("a topsecret b\n"))
	if err != nil || n != len("a topsecret b\n") {
		t.Fatalf("Write = %d, %v; want the input length", n, err)
	}
	log := zerolog.New(w)
	log.Warn().Msg("topsecret")
	if lw.levels[len(lw.levels)-1] != zerolog.WarnLevel {
		t.Errorf("level not passed on: %v", lw.levels)
	}
	if strings.Contains(lw.buf.String(), "topsecret") {
		t.Errorf("leak: %q", lw.buf.String())
	}
	var plain bytes.Buffer
	var nilR *Redactor
	if _, err := nilR.Writer(&plain).Write([]byte("as is")); err != nil || plain.String() != "as is" {
		t.Errorf("nil Redactor writer: %q, %v", plain.String(), err)
	}
	failing := r.Writer(errWriter{})
	if n, err := failing.Write([]byte("x")); err == nil || n != 0 {
		t.Errorf("a failing writer must report its error: %d, %v", n, err)
	}
}

// TestRedactorConcurrent registers values while other goroutines log; run
// with -race.
func TestRedactorConcurrent(t *testing.T) {
	r := NewRedactor()
	var mu sync.Mutex
	var buf bytes.Buffer
	log := NewLogger(&lockedWriter{mu: &mu, w: &buf}, r, zerolog.InfoLevel)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 50 {
				v := fmt.Sprintf("concurrent-secret-%d-%d", i, j)
				r.Add(v)
				log.Info().Str("v", v).Send()
				_ = r.Redact(v)
			}
		}()
	}
	wg.Wait()
	if strings.Contains(buf.String(), "concurrent-secret-") {
		t.Fatal("a value registered before it was logged leaked")
	}
	if r.Len() != 400 {
		t.Errorf("Len = %d, want 400", r.Len())
	}
}

func mustJSON(t *testing.T, v string, html bool) []byte {
	t.Helper()
	var b bytes.Buffer
	enc := jsonEncoder(&b, html)
	if err := enc.Encode(map[string]string{"v": v}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

type levelRecorder struct {
	buf    bytes.Buffer
	levels []zerolog.Level
}

func (l *levelRecorder) Write(p []byte) (int, error) { return l.buf.Write(p) }
func (l *levelRecorder) WriteLevel(level zerolog.Level, p []byte) (int, error) {
	l.levels = append(l.levels, level)
	return l.buf.Write(p)
}

type errWriter struct{}

func (errWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func jsonEncoder(w *bytes.Buffer, html bool) *json.Encoder {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(html)
	return enc
}

// A log line carries text from outside (a branch name, a provider's
// error): zerolog escapes the ASCII controls, and the logger's writer
// escapes the rest that would turn a line around or break it where it is
// read (bidi overrides, line separators, C1 controls), so the line reads
// as written and still parses to the same string.
func TestLoggerEscapesInvisibleText(t *testing.T) {
	var buf bytes.Buffer
	log := NewLogger(&buf, NewRedactor(), zerolog.InfoLevel)
	hostile := "x\u202eabc\u2028def\u2029\u0085\u009b31m\u2066é€"
	log.Info().Str("ref", hostile).Msg("planned proposal")
	line := buf.Bytes()
	for _, r := range []rune{'\u202e', '\u2028', '\u2029', '\u0085', '\u009b', '\u2066'} {
		if bytes.ContainsRune(line, r) {
			t.Errorf("the log line carries U+%04X raw: %q", r, line)
		}
	}
	var got struct{ Ref string }
	if err := json.Unmarshal(line, &got); err != nil || got.Ref != hostile {
		t.Fatalf("the line does not parse back to the text: %q, %v (%q)", got.Ref, err, line)
	}
	if !bytes.Contains(line, []byte("é€")) {
		t.Errorf("printable text was escaped too: %q", line)
	}
}
