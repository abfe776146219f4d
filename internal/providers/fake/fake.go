// Package fake is a deterministic, in-process provider of managed
// Kubernetes for tests and the demo. It behaves like GKE, EKS or DOKS where
// the substrate can tell: operations are asynchronous, node pool shapes
// never change in place, credentials expire, and clusters made by someone
// else can be adopted. Its truth lives in a small JSON file written
// atomically, so it survives a kill -9 of the agent; operations advance per
// observation or on an injected clock, never on wall time; and tests can
// inject faults, read the truth and count calls.
package fake

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"

	"gopkg.in/yaml.v3"

	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/providers"
)

var _ providers.Kubernetes = (*Fake)(nil)

// Fake is the fake provider. It is safe for concurrent use.
type Fake struct {
	cfg     Config
	secrets providers.SecretResolver
	clock   clock.Clock

	// kube is the API server the clusters are (Config.Kube); nil: none.
	kube *kube

	mu    sync.Mutex
	st    State
	calls map[string]int
}

// Option changes how a Fake is made.
type Option func(*Fake)

// WithClock sets the clock of expiries, latency and StepEvery; the default
// is the wall clock.
func WithClock(c clock.Clock) Option { return func(f *Fake) { f.clock = c } }

// New makes a fake from a config, opening its state file when it has one.
// secrets may be nil when no account or config names a reference.
func New(cfg Config, secrets providers.SecretResolver, opts ...Option) (*Fake, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("fake: %w", err)
	}
	f := &Fake{cfg: cfg, secrets: secrets, clock: clock.Real{}, calls: map[string]int{}}
	for _, o := range opts {
		o(f)
	}
	st, existed := newState(), false
	if cfg.StatePath != "" {
		var err error
		if st, existed, err = load(cfg.StatePath); err != nil {
			return nil, err
		}
	}
	f.st = st
	if cfg.Kube != nil && f.kube == nil {
		k, err := cfg.Kube.open()
		if err != nil {
			return nil, fmt.Errorf("fake: %w", err)
		}
		f.kube = k
	}
	if !existed {
		for _, ft := range cfg.Faults {
			if ft.Count == 0 {
				ft.Count = 1
			}
			f.st.Faults = append(f.st.Faults, ft)
		}
	}
	for _, s := range cfg.Adoptable {
		if _, err := f.seed(s); err != nil {
			return nil, err
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.persist(); err != nil {
		return nil, err
	}
	return f, nil
}

// Open makes a fake from its block of the agent config, decoded strictly
// over DefaultConfig.
func Open(block *yaml.Node, secrets providers.SecretResolver, opts ...Option) (*Fake, error) {
	cfg := DefaultConfig()
	if err := providers.DecodeStrict(block, &cfg); err != nil {
		return nil, err
	}
	return New(cfg, secrets, opts...)
}

// Factory is the fake's providers.Factory, for the binary's registry.
func Factory(opts ...Option) providers.Factory {
	return func(block *yaml.Node, secrets providers.SecretResolver) (providers.Kubernetes, error) {
		return Open(block, secrets, opts...)
	}
}

// persist writes the state when there is a file. Called with mu held.
func (f *Fake) persist() error {
	if f.cfg.StatePath == "" {
		return nil
	}
	if err := save(f.cfg.StatePath, &f.st); err != nil {
		// The fake's own disk failing is not the provider's answer; say that
		// nothing is known of what happened.
		return &providers.Error{Class: providers.Unavailable, SideEffect: providers.Maybe, Message: "fake state not written", Err: err}
	}
	return nil
}

// Calls reports how many times method was called on this Fake (not counted
// across a restart).
func (f *Fake) Calls(method string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[method]
}

// Snapshot returns a deep copy of the provider-side truth.
func (f *Fake) Snapshot() State {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st.clone()
}

// Config returns the config the fake runs with.
func (f *Fake) Config() Config { return f.cfg }

// nextID derives the next id from the sequence and what it names, so the
// same calls in the same order give the same ids. Called with mu held.
func (f *Fake) nextID(kind, what string) string {
	f.st.Seq++
	return deriveID(fmt.Sprintf("%s:%s:%d", kind, what, f.st.Seq))
}

// deriveID shapes a hash like a UUID, as DOKS ids are.
func deriveID(s string) string {
	h := sha256.Sum256([]byte("fleet-agent-fake:" + s))
	x := hex.EncodeToString(h[:16])
	return x[0:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:32]
}

// call is the prologue of every provider method: count the call, apply the
// first armed fault's latency, check the account, and tell the method
// whether to fail (and whether to act first). The returned func turns the
// method's own result error into the one the caller sees.
func (f *Fake) call(ctx context.Context, method string, acct *providers.Account) (account, func(error) error, error) {
	if err := ctx.Err(); err != nil {
		return account{}, nil, &providers.Error{Op: method, Class: providers.Unavailable, SideEffect: providers.None, Message: "cancelled before the call", Err: err}
	}
	f.mu.Lock()
	f.calls[method]++
	ft, err := f.takeFault(method)
	f.mu.Unlock()
	if err != nil {
		return account{}, nil, err
	}
	if ft != nil {
		if err := f.wait(ctx, method, ft.Latency); err != nil {
			return account{}, nil, err
		}
	}
	var a account
	if acct != nil {
		if a, err = f.authorize(ctx, method, *acct); err != nil {
			return account{}, nil, err
		}
	}
	failing := ft != nil && (ft.Class != "" || ft.Drop)
	if failing && !ft.acts() {
		return account{}, nil, ft.err(method)
	}
	finish := func(err error) error {
		if err == nil && failing {
			return ft.err(method)
		}
		return opErr(method, err)
	}
	return a, finish, nil
}

// opErr names the method in an error that does not name one yet.
func opErr(method string, err error) error {
	if e, ok := err.(*providers.Error); ok && e.Op == "" {
		c := *e
		c.Op = method
		return &c
	}
	return err
}
