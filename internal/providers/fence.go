package providers

import (
	"context"
	"net/http"
)

// A fence travels with a call's context: the check that the agent still
// leads (an etcd store several agents share), made by the adapter as late
// as it can, right before a request leaves, so that an agent paused past
// its lease between its own check and the call does not call once it wakes.

type fenceKey struct{}

// WithFence returns ctx carrying check; Fenced runs it.
func WithFence(ctx context.Context, check func() error) context.Context {
	return context.WithValue(ctx, fenceKey{}, check)
}

// Fenced is nil when ctx carries no fence or its check passes.
func Fenced(ctx context.Context) error {
	if check, ok := ctx.Value(fenceKey{}).(func() error); ok && check != nil {
		return check()
	}
	return nil
}

// FenceTransport checks the request context's fence before each request;
// a refused request is never sent. base nil is http.DefaultTransport.
func FenceTransport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return fenceTransport{base}
}

type fenceTransport struct{ base http.RoundTripper }

func (t fenceTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if err := Fenced(r.Context()); err != nil {
		if r.Body != nil {
			r.Body.Close()
		}
		return nil, &Error{Class: Unavailable, SideEffect: None, Message: "not sent: this agent no longer leads", Err: err}
	}
	return t.base.RoundTrip(r)
}
