package providers_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

func TestErrorHelpers(t *testing.T) {
	throttled := &providers.Error{Op: "GetCluster", Class: providers.Throttled, SideEffect: providers.None, RetryAfter: 30 * time.Second}
	tests := []struct {
		name       string
		err        error
		class      providers.Class
		side       providers.SideEffect
		retryable  bool
		code       refusal.Code
		retryAfter time.Duration
		notFound   bool
	}{
		{"nil", nil, "", providers.Done, false, "", 0, false},
		{"unknown", errors.New("connection reset"), providers.Unknown, providers.Maybe, true, refusal.Unavailable, 0, false},
		{"cancelled", context.Canceled, providers.Unknown, providers.Maybe, true, refusal.Unavailable, 0, false},
		{"sentinel", providers.ErrNotFound, providers.NotFound, providers.None, false, refusal.PlanBlocked, 0, true},
		{"wrapped not found", fmt.Errorf("reading: %w", providers.NotFoundf("GetCluster", "cluster x")), providers.NotFound, providers.None, false, refusal.PlanBlocked, 0, true},
		{"invalid", providers.Invalidf("EnsureNodePool", "shapeChange", "no"), providers.Invalid, providers.None, false, refusal.PlanBlocked, 0, false},
		{"conflict", providers.Errorf("", providers.Conflict, providers.None, "busy"), providers.Conflict, providers.None, true, refusal.InvalidState, 0, false},
		{"throttled", fmt.Errorf("x: %w", throttled), providers.Throttled, providers.None, true, refusal.Unavailable, 30 * time.Second, false},
		{"unavailable done", providers.Errorf("", providers.Unavailable, providers.Done, "late"), providers.Unavailable, providers.Done, true, refusal.Unavailable, 0, false},
		{"terminal", providers.Errorf("", providers.Terminal, providers.None, "denied"), providers.Terminal, providers.None, false, refusal.InvalidState, 0, false},
		{"no class, no side effect", &providers.Error{Message: "?"}, providers.Unknown, providers.Maybe, true, refusal.Unavailable, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := providers.ClassOf(tt.err); got != tt.class {
				t.Errorf("ClassOf = %q, want %q", got, tt.class)
			}
			if got := providers.SideEffectOf(tt.err); got != tt.side {
				t.Errorf("SideEffectOf = %q, want %q", got, tt.side)
			}
			if got := providers.Retryable(tt.err); got != tt.retryable {
				t.Errorf("Retryable = %v, want %v", got, tt.retryable)
			}
			if got := providers.Code(tt.err); got != tt.code {
				t.Errorf("Code = %q, want %q", got, tt.code)
			}
			if got := providers.RetryAfterOf(tt.err); got != tt.retryAfter {
				t.Errorf("RetryAfterOf = %s, want %s", got, tt.retryAfter)
			}
			if got := errors.Is(tt.err, providers.ErrNotFound); got != tt.notFound {
				t.Errorf("errors.Is(ErrNotFound) = %v, want %v", got, tt.notFound)
			}
		})
	}
}

func TestRefusalKeepsCause(t *testing.T) {
	cause := providers.Invalidf("MachineType", "machineType", "machine type %q does not exist in %s", "x", "l")
	r := providers.Refusal(cause, "pool gpu: flavor h100")
	if r.Code != refusal.PlanBlocked || !errors.Is(r, cause) || !strings.Contains(r.Message, "does not exist") {
		t.Fatalf("Refusal = %+v", r)
	}
	if providers.ReasonOf(r) != "machineType" {
		t.Errorf("ReasonOf through a refusal = %q", providers.ReasonOf(r))
	}
	if !providers.Cancelled(fmt.Errorf("x: %w", context.DeadlineExceeded)) || providers.Cancelled(errors.New("x")) {
		t.Error("Cancelled")
	}
}

func TestCredentialNeverLeaks(t *testing.T) {
	c := providers.Credential{Endpoint: "https://e", Token: "tok-very-secret", ExpiresAt: time.Unix(0, 0)}
	for _, s := range []string{c.String(), fmt.Sprint(c), fmt.Sprintf("%v %+v %#v %s", c, c, c, c), fmt.Sprintf("%v", &c)} {
		if strings.Contains(s, "tok-very-secret") {
			t.Errorf("printed token: %s", s)
		}
	}
	if _, err := json.Marshal(c); err == nil {
		t.Error("json.Marshal of a credential succeeded")
	}
	if _, err := json.Marshal(struct{ C providers.Credential }{c}); err == nil {
		t.Error("json.Marshal of a struct holding a credential succeeded")
	}
}

func TestNodePoolName(t *testing.T) {
	tests := []struct{ pool, flavor, want string }{
		{"pool_abcdefghijklmnopqrstuvwxyz", "h100", "fa-uvwxyz-h100"},
		{"abc", "cpu", "fa-abc-cpu"},
	}
	for _, tt := range tests {
		if got := providers.NodePoolName(tt.pool, tt.flavor); got != tt.want {
			t.Errorf("NodePoolName(%q, %q) = %q, want %q", tt.pool, tt.flavor, got, tt.want)
		}
	}
	l := providers.PoolLabels("pool_x", true)
	if l[providers.LabelSubstratePool] != "pool_x" || l[providers.LabelCapacity] != "spot" || len(providers.PoolLabels("p", false)) != 1 {
		t.Errorf("PoolLabels = %v", l)
	}
}

func TestDecodeAccountConfig(t *testing.T) {
	type cfg struct {
		Region string `json:"region"`
		Count  int    `json:"count"`
	}
	tests := []struct {
		name    string
		raw     string
		wantErr bool
		want    cfg
	}{
		{"empty", "", false, cfg{}},
		{"null", "null", false, cfg{}},
		{"known", `{"region":"r","count":2}`, false, cfg{"r", 2}},
		{"unknown key", `{"region":"r","colour":1}`, true, cfg{}},
		{"wrong type", `{"count":"two"}`, true, cfg{}},
		{"trailing", `{} {}`, true, cfg{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got cfg
			err := providers.DecodeAccountConfig(providers.Account{Name: "a", Config: json.RawMessage(tt.raw)}, &got)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if err != nil && providers.ClassOf(err) != providers.Invalid {
				t.Errorf("class %q", providers.ClassOf(err))
			}
			if err == nil && got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}
