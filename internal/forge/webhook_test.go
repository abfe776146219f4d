package forge_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/forge"
	"github.com/fleet-agent/fleet-agent/internal/forge/githubemu"
	"github.com/fleet-agent/fleet-agent/internal/refs"
)

type failingResolver struct{}

func (failingResolver) Resolve(context.Context, string) (string, error) {
	return "", errors.New("vault sealed")
}

func TestWebhookSignature(t *testing.T) {
	e := newEnv(t, githubemu.Options{})
	var woken atomic.Int32
	h := e.forge.WebhookHandler(func() { woken.Add(1) })
	body := []byte(`{"action":"synchronize","number":7}`)
	good := forge.Sign([]byte("hook-secret"), body)

	for _, tc := range []struct {
		name   string
		method string
		sig    string
		body   []byte
		status int
		wakes  bool
	}{
		{"good", http.MethodPost, good, body, http.StatusNoContent, true},
		{"missing", http.MethodPost, "", body, http.StatusUnauthorized, false},
		{"other secret", http.MethodPost, forge.Sign([]byte("guess"), body), body, http.StatusUnauthorized, false},
		{"body changed", http.MethodPost, good, append([]byte(`{"x":1}`), body...), http.StatusUnauthorized, false},
		{"sha1 form", http.MethodPost, "sha1=" + strings.TrimPrefix(good, "sha256="), body, http.StatusUnauthorized, false},
		{"not hex", http.MethodPost, "sha256=zz", body, http.StatusUnauthorized, false},
		{"GET", http.MethodGet, good, nil, http.StatusMethodNotAllowed, false},
		{"too large", http.MethodPost, good, bytes.Repeat([]byte("a"), forge.MaxWebhookBody+1), http.StatusRequestEntityTooLarge, false},
	} {
		woken.Store(0)
		req := httptest.NewRequest(tc.method, "/hooks/github", bytes.NewReader(tc.body))
		if tc.sig != "" {
			req.Header.Set(forge.SignatureHeader, tc.sig)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != tc.status || (woken.Load() == 1) != tc.wakes {
			t.Errorf("%s: status %d woke %d; want %d, wake %v", tc.name, rec.Code, woken.Load(), tc.status, tc.wakes)
		}
	}

	// The secret is resolved for each delivery: a rotation takes effect.
	e.sec.set("secret://hook", "rotated")
	req := httptest.NewRequest(http.MethodPost, "/hooks/github", bytes.NewReader(body))
	req.Header.Set(forge.SignatureHeader, good)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusUnauthorized {
		t.Errorf("old secret after rotation: %d", rec.Code)
	}

	// A secret that does not resolve: 503, not a wake.
	woken.Store(0)
	bad := forge.WebhookHandler(failingResolver{}, "vault://hooks#secret", func() { woken.Add(1) }, nil)
	req = httptest.NewRequest(http.MethodPost, "/hooks/github", bytes.NewReader(body))
	req.Header.Set(forge.SignatureHeader, good)
	rec = httptest.NewRecorder()
	bad.ServeHTTP(rec, req)
	if rec.Code != http.StatusServiceUnavailable || woken.Load() != 0 {
		t.Errorf("unresolvable secret: %d, woke %d", rec.Code, woken.Load())
	}
	if strings.Contains(e.logs.String(), "hook-secret") {
		t.Error("webhook secret in the logs")
	}

	// Without a webhook secret, there is no hook.
	e.cfg.WebhookSecret = ""
	rec = httptest.NewRecorder()
	e.restart(t).WebhookHandler(func() { t.Error("woken without a secret") }).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/hooks/github", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("no secret configured: %d", rec.Code)
	}
}

func TestVerifySignatureKnownVector(t *testing.T) {
	// GitHub's documented example: secret "It's a Secret to Everybody",
	// payload "Hello, World!".
	const want = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
	if !forge.VerifySignature([]byte("It's a Secret to Everybody"), []byte("Hello, World!"), want) {
		t.Error("GitHub's example does not verify")
	}
	if forge.Sign([]byte("It's a Secret to Everybody"), []byte("Hello, World!")) != want {
		t.Error("Sign differs from GitHub's example")
	}
}

// A merge_group delivery wakes the agent like any other: the queue's ref is
// learned from git, and its name is the one the agent follows.
func TestMergeGroupEventWakes(t *testing.T) {
	e := newEnv(t, githubemu.Options{})
	var woken atomic.Int32
	h := e.forge.WebhookHandler(func() { woken.Add(1) })
	body := e.repo.MergeGroupEvent("main", 7, sha(1), sha(2))
	req := httptest.NewRequest(http.MethodPost, "/hooks/github", bytes.NewReader(body))
	req.Header.Set(forge.SignatureHeader, forge.Sign([]byte("hook-secret"), body))
	req.Header.Set("X-GitHub-Event", "merge_group")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusNoContent || woken.Load() != 1 {
		t.Fatalf("status %d, woken %d", rec.Code, woken.Load())
	}
	if n, ok := refs.QueuePull(githubemu.QueueRef("main", 7, sha(1)), "main"); !ok || n != 7 {
		t.Errorf("the emulator's queue ref is not one the agent follows: %d %v", n, ok)
	}
}
