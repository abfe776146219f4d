package fake_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/providers/fake"
)

// TestReviewFile: another process reviewing tokens from the fake's state
// file accepts what the fake minted, until it expires or is revoked, and
// refuses anything else; a missing file refuses, without error.
func TestReviewFile(t *testing.T) {
	cfg := config(t)
	f := open(t, cfg, clock.Real{})
	ref := providers.ClusterRef{Location: "fake-east", Name: "theirs"}
	cred, err := f.Credentials(t.Context(), acct, ref)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if user, ok, err := fake.ReviewFile(cfg.StatePath, cred.Token, now); err != nil || !ok || user != "fake:managed-k8s" {
		t.Fatalf("the minted token: %q %v %v", user, ok, err)
	}
	if _, ok, err := fake.ReviewFile(cfg.StatePath, cred.Token+"x", now); err != nil || ok {
		t.Fatalf("another token: %v %v", ok, err)
	}
	if _, ok, _ := fake.ReviewFile(cfg.StatePath, cred.Token, cred.ExpiresAt); ok {
		t.Fatal("an expired token is accepted")
	}
	if err := f.RevokeAccess(t.Context(), acct, ref); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := fake.ReviewFile(cfg.StatePath, cred.Token, now); err != nil || ok {
		t.Fatalf("a revoked token: %v %v", ok, err)
	}
	if _, ok, err := fake.ReviewFile(filepath.Join(t.TempDir(), "none.json"), cred.Token, now); err != nil || ok {
		t.Fatalf("no state file: %v %v", ok, err)
	}
}
