package secrets

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

// envOf returns a lookup over a fixed map, so tests never read or change the
// process environment.
func envOf(m map[string]string) LookupEnv {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// wantRefusal checks an error's code, cause and that its message names the
// reference and none of the forbidden strings.
func wantRefusal(t *testing.T, err error, code refusal.Code, cause error, mention string, forbidden ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("want a %s refusal, got none", code)
	}
	var r *refusal.Error
	if !errors.As(err, &r) {
		t.Fatalf("want *refusal.Error, got %T: %v", err, err)
	}
	if r.Code != code {
		t.Errorf("code = %s, want %s (%v)", r.Code, code, err)
	}
	if cause != nil && !errors.Is(err, cause) {
		t.Errorf("cause: %v is not %v", err, cause)
	}
	if mention != "" && !strings.Contains(r.Message, mention) {
		t.Errorf("message %q does not name %q", r.Message, mention)
	}
	for _, f := range forbidden {
		if f != "" && strings.Contains(err.Error(), f) {
			t.Errorf("message %q contains %q", err.Error(), f)
		}
	}
}

func TestResolveEnv(t *testing.T) {
	r := NewResolver(Options{Env: envOf(map[string]string{"GIT_TOKEN": "tok-123456", "EMPTY": ""})})
	v, err := r.Resolve(t.Context(), "env://GIT_TOKEN")
	if err != nil || v != "tok-123456" {
		t.Fatalf("Resolve = %q, %v", v, err)
	}
	if got := r.Redactor().Redact("x tok-123456 y"); got != "x *** y" {
		t.Errorf("resolved value not registered: %q", got)
	}
	_, err = r.Resolve(t.Context(), "env://MISSING")
	wantRefusal(t, err, refusal.InvalidState, ErrNotFound, "env://MISSING")
	_, err = r.Resolve(t.Context(), "env://EMPTY")
	wantRefusal(t, err, refusal.InvalidState, ErrNotFound, "env://EMPTY")
}

func TestResolveDefaultsToProcessEnvironment(t *testing.T) {
	t.Setenv("FLEET_AGENT_TEST_SECRET", "from-process")
	v, err := NewResolver(Options{}).Resolve(t.Context(), "env://FLEET_AGENT_TEST_SECRET")
	if err != nil || v != "from-process" {
		t.Fatalf("Resolve = %q, %v", v, err)
	}
}

func TestResolveMalformed(t *testing.T) {
	r := NewResolver(Options{Env: envOf(nil)})
	for _, in := range []string{
		"hunter2-plain-value",
		"env://lower",
		"secret://bad name",
		"secret://a/b/c",
		"vault://no-field",
		"vault://a/b#bad field",
		"",
	} {
		_, err := r.Resolve(t.Context(), in)
		wantRefusal(t, err, refusal.InvalidInput, ErrMalformed, "", in)
	}
}

// secret://TENANT/ID (a provider account's token as the reference writes
// it) reads TENANT/ID in the secrets directory, and never outside it.
func TestResolveTenantScoped(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "acme"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "acme", "db"), []byte("sandbox-only"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := NewResolver(Options{Env: envOf(nil), Dir: dir})
	v, err := r.Resolve(t.Context(), "secret://acme/db")
	if err != nil || v != "sandbox-only" {
		t.Fatalf("secret://acme/db: %q %v", v, err)
	}
	_, err = r.Resolve(t.Context(), "secret://acme/missing")
	wantRefusal(t, err, refusal.InvalidState, ErrNotFound, "secret://acme/missing", "sandbox-only")
	for _, bad := range []string{"secret://../db", "secret://acme/.."} {
		if _, err := r.Resolve(t.Context(), bad); err == nil {
			t.Errorf("%s resolved", bad)
		}
	}
}

func TestResolveSecretFile(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"plain":    "value-1",
		"newline":  "value-2\n",
		"crlf":     "value-3\r\n",
		"two":      "value-4\n\n",
		"inner":    "line1\nline2\n",
		"empty":    "",
		"only-nl":  "\n",
		"dotted.x": "value-5",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o400); err != nil {
			t.Fatal(err)
		}
	}
	r := NewResolver(Options{Env: envOf(map[string]string{"CREDENTIALS_DIRECTORY": dir})})
	for ref, want := range map[string]string{
		"secret://plain":    "value-1",
		"secret://newline":  "value-2",
		"secret://crlf":     "value-3",
		"secret://two":      "value-4\n",
		"secret://inner":    "line1\nline2",
		"secret://dotted.x": "value-5",
	} {
		got, err := r.Resolve(t.Context(), ref)
		if err != nil || got != want {
			t.Errorf("Resolve(%s) = %q, %v; want %q", ref, got, err, want)
		}
	}
	for _, ref := range []string{"secret://empty", "secret://only-nl"} {
		_, err := r.Resolve(t.Context(), ref)
		wantRefusal(t, err, refusal.InvalidState, ErrNotFound, ref)
	}
	_, err := r.Resolve(t.Context(), "secret://absent")
	wantRefusal(t, err, refusal.InvalidState, ErrNotFound, "secret://absent", "value-")
	if !strings.Contains(err.Error(), "LoadCredential=absent") {
		t.Errorf("missing file error does not say how to provide it: %v", err)
	}
}

func TestResolveSecretDirOptionWins(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(a, "k"), []byte("from-a"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(b, "k"), []byte("from-b"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := NewResolver(Options{Env: envOf(map[string]string{"CREDENTIALS_DIRECTORY": a}), Dir: b})
	if v, err := r.Resolve(t.Context(), "secret://k"); err != nil || v != "from-b" {
		t.Fatalf("Resolve = %q, %v; want from-b", v, err)
	}
}

func TestResolveSecretNoDir(t *testing.T) {
	r := NewResolver(Options{Env: envOf(nil)})
	_, err := r.Resolve(t.Context(), "secret://k")
	wantRefusal(t, err, refusal.InvalidState, ErrNotConfigured, "secret://k")
	if !strings.Contains(err.Error(), "secrets.dir") {
		t.Errorf("error does not say how to fix it: %v", err)
	}
}

func TestResolveSecretEscapes(t *testing.T) {
	outside := t.TempDir()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "target"), []byte("outside-value"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "target"), filepath.Join(dir, "abs-link")); err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(dir, filepath.Join(outside, "target"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(rel, filepath.Join(dir, "rel-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	r := NewResolver(Options{Env: envOf(nil), Dir: dir})
	for _, ref := range []string{"secret://abs-link", "secret://rel-link"} {
		v, err := r.Resolve(t.Context(), ref)
		if err == nil {
			t.Fatalf("Resolve(%s) followed a link out of the directory: %q", ref, v)
		}
		wantRefusal(t, err, refusal.InvalidState, nil, ref, "outside-value")
	}
	for _, ref := range []string{"secret://..", "secret://."} {
		_, err := r.Resolve(t.Context(), ref)
		wantRefusal(t, err, refusal.InvalidInput, ErrMalformed, ref)
	}
	_, err = r.Resolve(t.Context(), "secret://sub")
	wantRefusal(t, err, refusal.InvalidState, ErrUnusable, "secret://sub")
}

func TestResolveSecretTooLarge(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "big"), make([]byte, maxSecretSize+1), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := NewResolver(Options{Env: envOf(nil), Dir: dir}).Resolve(t.Context(), "secret://big")
	wantRefusal(t, err, refusal.InvalidState, ErrUnusable, "secret://big")
}

func TestResolveSecretUnreadable(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads files whatever their mode")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "locked"), []byte("locked-value"), 0o000); err != nil {
		t.Fatal(err)
	}
	_, err := NewResolver(Options{Env: envOf(nil), Dir: dir}).Resolve(t.Context(), "secret://locked")
	wantRefusal(t, err, refusal.InvalidState, ErrPermission, "secret://locked", "locked-value")
}

// TestResolveReadsEachTime checks that nothing is cached: a rotated file is
// seen by the next call.
func TestResolveReadsEachTime(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "rot")
	r := NewResolver(Options{Env: envOf(nil), Dir: dir})
	for _, want := range []string{"first-value", "second-value"} {
		if err := os.WriteFile(p, []byte(want), 0o600); err != nil {
			t.Fatal(err)
		}
		if v, err := r.Resolve(t.Context(), "secret://rot"); err != nil || v != want {
			t.Fatalf("Resolve = %q, %v; want %q", v, err, want)
		}
	}
	if got := r.Redactor().Redact("first-value second-value"); got != "*** ***" {
		t.Errorf("both values should stay masked after rotation: %q", got)
	}
}
