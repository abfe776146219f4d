// Package gcp is the adapter of the `gcp` provider: Google Kubernetes Engine
// through google.golang.org/api (container/v1 for clusters, node pools and
// operations; compute/v1 for regions, zones, machine types and their
// accelerators, and the instance groups that hold a node pool's nodes),
// with service account keys exchanged for OAuth2 tokens through
// golang.org/x/oauth2/google.
//
// It is stateless between calls: each call resolves the account's
// credentials reference, fetches a token from the key's token_uri, makes its
// GKE calls once each (the SDK never retries, and the adapter does not
// either: the substrate's journal is the only retry authority), and forgets
// both. Every error is a providers.Error with a class and side effect.
//
// GKE facts the adapter is built around (GKE's documentation): every mutation is
// an Operation and a cluster takes one at a time (a second is a Conflict);
// names are the idempotency key (a create answered ALREADY_EXISTS, or one
// whose answer was lost, is found by reading the name back); a node pool's
// nodes are per zone, and its live size is in its managed instance groups,
// not in the node pool, so sizes are read from compute; the selfLink is the
// global id.
package gcp

import (
	"net/http"

	"gopkg.in/yaml.v3"

	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

var _ providers.Kubernetes = (*Adapter)(nil)

// Adapter is the GKE adapter. It is safe for concurrent use.
type Adapter struct {
	cfg       Config
	secrets   providers.SecretResolver
	clock     clock.Clock
	client    *http.Client
	inCluster InClusterRevoker
}

// Option changes how an Adapter is made.
type Option func(*Adapter)

// WithClock sets the clock credentials' expiry and operation waits use;
// the default is the wall clock.
func WithClock(c clock.Clock) Option { return func(a *Adapter) { a.clock = c } }

// WithHTTPClient sets the HTTP client every request (token fetches and API
// calls) goes through, for tests that count or break connections.
func WithHTTPClient(c *http.Client) Option { return func(a *Adapter) { a.client = c } }

// WithInClusterRevoker sets what removes the substrate's own objects from
// an adopted cluster at RevokeAccess (see InClusterRevoker).
func WithInClusterRevoker(r InClusterRevoker) Option { return func(a *Adapter) { a.inCluster = r } }

// New makes an adapter from a config. secrets resolves the accounts'
// credentials references at the moment of use.
func New(cfg Config, secrets providers.SecretResolver, opts ...Option) (*Adapter, error) {
	if err := cfg.validate(); err != nil {
		return nil, refusal.New(refusal.InvalidInput, "%v", err)
	}
	a := &Adapter{cfg: cfg, secrets: secrets, clock: clock.Real{}}
	for _, o := range opts {
		o(a)
	}
	return a, nil
}

// Open makes an adapter from its block of the agent config, decoded
// strictly over DefaultConfig: an unknown key is refused with its line.
func Open(block *yaml.Node, secrets providers.SecretResolver, opts ...Option) (*Adapter, error) {
	cfg := DefaultConfig()
	if err := providers.DecodeStrict(block, &cfg); err != nil {
		return nil, err
	}
	return New(cfg, secrets, opts...)
}

// Factory is the adapter's providers.Factory, for the binary's registry.
func Factory(opts ...Option) providers.Factory {
	return func(block *yaml.Node, secrets providers.SecretResolver) (providers.Kubernetes, error) {
		return Open(block, secrets, opts...)
	}
}

// Config returns the config the adapter runs with.
func (a *Adapter) Config() Config { return a.cfg }
