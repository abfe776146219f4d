package secrets

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/secrets/vaultemu"
)

func startVault(t *testing.T) *vaultemu.Server {
	t.Helper()
	v := vaultemu.Start()
	t.Cleanup(v.Close)
	return v
}

func vaultResolver(v *vaultemu.Server, extra map[string]string) *Resolver {
	env := map[string]string{"VAULT_ADDR": v.URL, "VAULT_TOKEN": v.Token}
	for k, val := range extra {
		env[k] = val
	}
	return NewResolver(Options{Env: envOf(env), Vault: VaultOptions{Timeout: 2 * time.Second}})
}

func TestVaultRead(t *testing.T) {
	v := startVault(t)
	v.Put("secret/fleet/aws", map[string]any{"accessKey": "AKIA-VALUE-1", "n": 5, "nested": map[string]any{"a": "b"}})
	r := vaultResolver(v, nil)

	got, err := r.Resolve(t.Context(), "vault://secret/fleet/aws#accessKey")
	if err != nil || got != "AKIA-VALUE-1" {
		t.Fatalf("Resolve = %q, %v", got, err)
	}
	reqs := v.Requests()
	if len(reqs) != 1 || reqs[0].Path != "/v1/secret/data/fleet/aws" || !reqs[0].HasToken || reqs[0].Method != "GET" {
		t.Errorf("requests = %+v", reqs)
	}
	if reqs[0].Namespace != "" {
		t.Errorf("namespace header sent without a namespace: %+v", reqs[0])
	}
	if r.Redactor().Redact(v.Token) != Mask {
		t.Error("the Vault token is not registered with the redactor")
	}

	// A new version is read on the next call: nothing is cached.
	v.Put("secret/fleet/aws", map[string]any{"accessKey": "AKIA-VALUE-2"})
	if got, err := r.Resolve(t.Context(), "vault://secret/fleet/aws#accessKey"); err != nil || got != "AKIA-VALUE-2" {
		t.Fatalf("after rotation Resolve = %q, %v", got, err)
	}

	_, err = r.Resolve(t.Context(), "vault://secret/fleet/aws#secretKey")
	wantRefusal(t, err, refusal.InvalidState, ErrNotFound, "vault://secret/fleet/aws#secretKey", "AKIA")
	if !strings.Contains(err.Error(), "fields: accessKey") {
		t.Errorf("missing field error should list the field names: %v", err)
	}
}

func TestVaultNonStringField(t *testing.T) {
	v := startVault(t)
	v.Put("kv/app", map[string]any{"n": 12345, "obj": map[string]any{"k": "inner-value"}})
	r := vaultResolver(v, nil)
	for _, ref := range []string{"vault://kv/app#n", "vault://kv/app#obj"} {
		_, err := r.Resolve(t.Context(), ref)
		wantRefusal(t, err, refusal.InvalidState, ErrUnusable, ref, "12345", "inner-value")
	}
}

func TestVaultOptionsOverrideEnvironment(t *testing.T) {
	v := startVault(t)
	v.Put("secret/x", map[string]any{"f": "val-x"})
	r := NewResolver(Options{
		Env:   envOf(map[string]string{"VAULT_ADDR": "http://127.0.0.1:1", "VAULT_TOKEN": "wrong"}),
		Vault: VaultOptions{Addr: v.URL + "/", Token: v.Token},
	})
	if got, err := r.Resolve(t.Context(), "vault://secret/x#f"); err != nil || got != "val-x" {
		t.Fatalf("Resolve = %q, %v", got, err)
	}
}

func TestVaultNamespace(t *testing.T) {
	v := startVault(t)
	v.PutIn("team-a", "secret/x", map[string]any{"f": "ns-value"})
	_, err := vaultResolver(v, nil).Resolve(t.Context(), "vault://secret/x#f")
	wantRefusal(t, err, refusal.InvalidState, ErrNotFound, "vault://secret/x#f")

	for _, r := range []*Resolver{
		vaultResolver(v, map[string]string{"VAULT_NAMESPACE": "team-a"}),
		NewResolver(Options{Env: envOf(map[string]string{"VAULT_ADDR": v.URL, "VAULT_TOKEN": v.Token}), Vault: VaultOptions{Namespace: "team-a"}}),
	} {
		got, err := r.Resolve(t.Context(), "vault://secret/x#f")
		if err != nil || got != "ns-value" {
			t.Fatalf("Resolve = %q, %v", got, err)
		}
	}
	reqs := v.Requests()
	if reqs[len(reqs)-1].Namespace != "team-a" {
		t.Errorf("namespace header not sent: %+v", reqs)
	}
}

func TestVaultErrors(t *testing.T) {
	v := startVault(t)
	v.Put("secret/app", map[string]any{"f": "app-value"})
	v.Put("secret/other", map[string]any{"f": "other-value"})
	v.Put("secret/gone", map[string]any{"f": "gone-value"})
	v.Delete("secret/gone")
	limited := v.AddToken("secret/app")

	cases := []struct {
		name  string
		env   map[string]string
		ref   string
		setup func()
		code  refusal.Code
		cause error
		hint  string
	}{
		{name: "bad token", env: map[string]string{"VAULT_TOKEN": "hvs.nope-token"}, ref: "vault://secret/app#f", code: refusal.InvalidState, cause: ErrPermission, hint: "403: permission denied"},
		{name: "policy", env: map[string]string{"VAULT_TOKEN": limited}, ref: "vault://secret/other#f", code: refusal.InvalidState, cause: ErrPermission, hint: "secret/data/other"},
		{name: "missing path", ref: "vault://secret/nothing#f", code: refusal.InvalidState, cause: ErrNotFound, hint: "KV version 2"},
		{name: "missing mount", ref: "vault://nomount/x#f", code: refusal.InvalidState, cause: ErrNotFound, hint: "no handler for route"},
		{name: "deleted", ref: "vault://secret/gone#f", code: refusal.InvalidState, cause: ErrNotFound, hint: "deleted"},
		{name: "503", ref: "vault://secret/app#f", setup: func() { v.FailNext(1, 503) }, code: refusal.Unavailable, cause: ErrUnavailable, hint: "503"},
		{name: "500", ref: "vault://secret/app#f", setup: func() { v.FailNext(1, 500) }, code: refusal.Unavailable, cause: ErrUnavailable, hint: "500"},
		{name: "429", ref: "vault://secret/app#f", setup: func() { v.FailNext(1, 429) }, code: refusal.Unavailable, cause: ErrUnavailable, hint: "429"},
		{name: "400", ref: "vault://secret/app#f", setup: func() { v.FailNext(1, 400) }, code: refusal.InvalidState, hint: "400"},
		{name: "sealed", ref: "vault://secret/app#f", setup: v.Seal, code: refusal.Unavailable, cause: ErrUnavailable, hint: "Vault is sealed"},
		{name: "no addr", env: map[string]string{"VAULT_ADDR": ""}, ref: "vault://secret/app#f", code: refusal.InvalidState, cause: ErrNotConfigured, hint: "VAULT_ADDR"},
		{name: "bad addr", env: map[string]string{"VAULT_ADDR": "vault.example:8200"}, ref: "vault://secret/app#f", code: refusal.InvalidState, cause: ErrNotConfigured, hint: "VAULT_ADDR"},
		{name: "no token", env: map[string]string{"VAULT_TOKEN": ""}, ref: "vault://secret/app#f", code: refusal.InvalidState, cause: ErrNotConfigured, hint: "VAULT_TOKEN"},
		{name: "no mount", ref: "vault://app#f", code: refusal.InvalidInput, cause: ErrMalformed, hint: "MOUNT/SECRET"},
		{name: "dotdot", ref: "vault://secret/../sys#f", code: refusal.InvalidInput, cause: ErrMalformed},
		{name: "empty segment", ref: "vault://secret//app#f", code: refusal.InvalidInput, cause: ErrMalformed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			defer v.Unseal()
			if c.setup != nil {
				c.setup()
			}
			_, err := vaultResolver(v, c.env).Resolve(t.Context(), c.ref)
			wantRefusal(t, err, c.code, c.cause, c.ref, "app-value", "other-value", "gone-value", v.Token, limited)
			if c.hint != "" && !strings.Contains(err.Error(), c.hint) {
				t.Errorf("error %q does not say %q", err, c.hint)
			}
		})
	}
	// After the failures, the same resolver works again: errors are not
	// remembered either.
	if got, err := vaultResolver(v, nil).Resolve(t.Context(), "vault://secret/app#f"); err != nil || got != "app-value" {
		t.Fatalf("Resolve = %q, %v", got, err)
	}
}

func TestVaultDeadline(t *testing.T) {
	v := startVault(t)
	v.Put("secret/slow", map[string]any{"f": "slow-value"})
	v.SetDelay(5 * time.Second)
	r := NewResolver(Options{
		Env:   envOf(map[string]string{"VAULT_ADDR": v.URL, "VAULT_TOKEN": v.Token}),
		Vault: VaultOptions{Timeout: 100 * time.Millisecond},
	})
	start := time.Now()
	_, err := r.Resolve(t.Context(), "vault://secret/slow#f")
	wantRefusal(t, err, refusal.Unavailable, ErrUnavailable, "vault://secret/slow#f")
	if !strings.Contains(err.Error(), "did not answer within 100ms") {
		t.Errorf("error = %v", err)
	}
	if time.Since(start) > 3*time.Second {
		t.Errorf("the deadline was not applied: %s", time.Since(start))
	}
}

func TestVaultUnreachable(t *testing.T) {
	v := vaultemu.Start()
	addr := v.URL
	v.Close()
	r := NewResolver(Options{Env: envOf(map[string]string{"VAULT_ADDR": addr, "VAULT_TOKEN": "hvs.tok-unreachable"})})
	_, err := r.Resolve(t.Context(), "vault://secret/x#f")
	wantRefusal(t, err, refusal.Unavailable, ErrUnavailable, "vault://secret/x#f", "hvs.tok-unreachable")
}

// TestVaultRedirectNotFollowed checks that the token is never sent to the
// host a redirect names.
func TestVaultRedirectNotFollowed(t *testing.T) {
	var leaked atomic.Bool
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Vault-Token") != "" {
			leaked.Store(true)
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(other.Close)
	standby := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	t.Cleanup(standby.Close)
	r := NewResolver(Options{Env: envOf(map[string]string{"VAULT_ADDR": standby.URL, "VAULT_TOKEN": "hvs.redirect-token"})})
	_, err := r.Resolve(t.Context(), "vault://secret/x#f")
	wantRefusal(t, err, refusal.InvalidState, ErrNotConfigured, "vault://secret/x#f", "hvs.redirect-token")
	if leaked.Load() {
		t.Fatal("the token followed the redirect")
	}
}

func TestVaultCallerCancel(t *testing.T) {
	v := startVault(t)
	v.Put("secret/x", map[string]any{"f": "val"})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := vaultResolver(v, nil).Resolve(ctx, "vault://secret/x#f")
	wantRefusal(t, err, refusal.Unavailable, ErrUnavailable, "vault://secret/x#f")
}
