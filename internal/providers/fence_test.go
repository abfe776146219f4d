package providers_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/providers"
)

// A request whose context's fence refuses is never sent; one whose fence
// holds, or that carries none, is.
func TestFenceTransport(t *testing.T) {
	var got atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { got.Add(1) }))
	defer srv.Close()
	c := &http.Client{Transport: providers.FenceTransport(nil)}
	leading := true
	ctx := providers.WithFence(context.Background(), func() error {
		if leading {
			return nil
		}
		return errors.New("lost")
	})
	for _, tc := range []struct {
		ctx     context.Context
		leading bool
		sent    bool
	}{{context.Background(), false, true}, {ctx, true, true}, {ctx, false, false}} {
		leading = tc.leading
		before := got.Load()
		req, _ := http.NewRequestWithContext(tc.ctx, "POST", srv.URL, nil)
		resp, err := c.Do(req)
		if resp != nil {
			resp.Body.Close()
		}
		if sent := got.Load() > before; sent != tc.sent {
			t.Fatalf("leading=%v: sent=%v, want %v (err %v)", tc.leading, sent, tc.sent, err)
		}
		var pe *providers.Error
		if !tc.sent && (!errors.As(err, &pe) || pe.SideEffect != providers.None) {
			t.Fatalf("a refused request: %v, want a provider error with no side effect", err)
		}
	}
}
