package incluster

import (
	"context"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleet-agent/fleet-agent/internal/providers"
)

// Every request client-go sends into a cluster asks the fence its context
// carries (the term's, in a pass) as it leaves: once the term ended the
// request is refused here and never reaches the cluster's API server.
func TestClusterRequestsAskTheFence(t *testing.T) {
	var reached atomic.Int64
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`))
	}))
	defer srv.Close()
	ca := srv.Certificate()
	kc, err := NewClient(providers.Credential{Endpoint: srv.URL, Token: "t", CACert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw})})
	if err != nil {
		t.Fatal(err)
	}
	var ended atomic.Bool
	ctx := providers.WithFence(context.Background(), func() error {
		if ended.Load() {
			return errors.New("the term ended")
		}
		return nil
	})
	if _, err := kc.CoreV1().ConfigMaps(ClaimNamespace).Get(ctx, ClaimName, metav1.GetOptions{}); err == nil {
		t.Fatal("the test server answers 404; the get succeeded")
	}
	if got := reached.Load(); got != 1 {
		t.Fatalf("a request within the term: %d reached the cluster, want 1", got)
	}
	ended.Store(true)
	_, err = kc.CoreV1().ConfigMaps(ClaimNamespace).Get(ctx, ClaimName, metav1.GetOptions{})
	var perr *providers.Error
	if !errors.As(err, &perr) || perr.SideEffect != providers.None {
		t.Fatalf("a request after the term ended: %v, want refused with no side effect", err)
	}
	if got := reached.Load(); got != 1 {
		t.Fatalf("a request after the term ended reached the cluster (%d requests)", got)
	}
}
