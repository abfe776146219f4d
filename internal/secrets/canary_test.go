package secrets

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

// TestCanary resolves one canary value through every scheme, then does what
// the agent does with values and errors (logs them, formats them, wraps
// them), and asserts the canary appears in none of it.
func TestCanary(t *testing.T) {
	const canary = `canary-7f3a"c\9e`
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "canary"), []byte(canary+"\n"), 0o400); err != nil {
		t.Fatal(err)
	}
	v := startVault(t)
	v.Put("secret/canary", map[string]any{"value": canary})
	v.Put("secret/canary-other", map[string]any{"other": "x"})

	r := NewResolver(Options{
		Env: envOf(map[string]string{
			"CANARY":      canary,
			"VAULT_ADDR":  v.URL,
			"VAULT_TOKEN": v.Token,
		}),
		Dir: dir,
	})
	var logs bytes.Buffer
	log := NewLogger(&logs, r.Redactor(), zerolog.DebugLevel)

	var texts []string
	for _, ref := range []string{"env://CANARY", "secret://canary", "vault://secret/canary#value"} {
		got, err := r.Resolve(t.Context(), ref)
		if err != nil || got != canary {
			t.Fatalf("Resolve(%s) = %q, %v", ref, got, err)
		}
		// Everything a careless caller might do with a value.
		log.Info().Str("ref", ref).Str("value", got).Msg("resolved " + got)
		log.Debug().Interface("creds", map[string]string{"token": got}).Send()
		wrapped := fmt.Errorf("calling provider with %q: %w", got, refusal.New(refusal.Unavailable, "endpoint said %s", got))
		log.Error().Err(wrapped).Msg("call failed")
		texts = append(texts, r.Redactor().Redact(wrapped.Error()), r.Redactor().Redact(fmt.Sprintf("%v %+v %#v", got, got, got)))
	}
	// Errors are built without the value in the first place.
	for _, ref := range []string{"env://NOPE", "secret://nope", "vault://secret/canary#nope", "vault://secret/canary-other#value", canary, "secret://" + canary} {
		_, err := r.Resolve(t.Context(), ref)
		if err == nil {
			t.Fatalf("Resolve(%s) should fail", ref)
		}
		texts = append(texts, err.Error(), fmt.Sprintf("%+v", err))
		var re *refusal.Error
		if errors.As(err, &re) {
			texts = append(texts, re.Message)
		}
		log.Warn().Err(err).Msg("resolve failed")
	}
	texts = append(texts, logs.String())

	for _, f := range forms(canary) {
		for _, text := range texts {
			if strings.Contains(text, f) || strings.Contains(text, "canary-7f3a") {
				t.Errorf("canary (as %q) appears in %q", f, text)
			}
		}
	}
	if !strings.Contains(logs.String(), Mask) {
		t.Error("nothing was masked: is the test logging the value at all?")
	}
}
