// Package fake is a deterministic, in-process provider of managed
// Kubernetes for tests and the demo. It behaves like GKE, EKS or DOKS where
// the substrate can tell: operations are asynchronous, node pool shapes
// never change in place, credentials expire, and clusters made by someone
// else can be adopted. Its truth lives in a small JSON file written
// atomically, so it survives a kill -9 of the agent, and that file is one
// cloud account that several agents (processes) may share at once, each
// call holding the account's file lock; operations advance per
// observation or on an injected clock, never on wall time; and tests can
// inject faults, read the truth and count calls.
package fake

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

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

	// mu guards what follows; with a state file, lock also holds the
	// account's file lock (lockFile) and reloads st from the file.
	mu       sync.Mutex
	st       State
	calls    map[string]int
	lockFile *os.File
	// gen is the generation of the state file st was read at or written
	// as; known is false until it was read once; existed says whether the
	// file was there.
	gen     uint64
	known   bool
	existed bool
	// settledAt is when the operations settled since the last write
	// finished, by cluster id, for listLag's history (see settled).
	settledAt map[string]time.Time
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
	f := &Fake{cfg: cfg, secrets: secrets, clock: clock.Real{}, calls: map[string]int{}, st: newState()}
	for _, o := range opts {
		o(f)
	}
	if cfg.Kube != nil && f.kube == nil {
		k, err := cfg.Kube.open()
		if err != nil {
			return nil, fmt.Errorf("fake: %w", err)
		}
		f.kube = k
	}
	// One locked section, so that two agents starting on one account agree
	// on whether the file was new and seed each adoptable cluster once.
	if err := f.lock(); err != nil {
		return nil, err
	}
	defer f.unlock()
	if !f.existed {
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

// lock takes the fake's mutex and, with a state file, the account's
// exclusive lock, and brings the state in memory up to the file (another
// user of the account may have written it). Every call that reads or
// writes the state holds it; unlock releases both. On an error nothing is
// held.
func (f *Fake) lock() error {
	f.mu.Lock()
	if f.cfg.StatePath == "" {
		return nil
	}
	lf, err := lockAccount(f.cfg.StatePath)
	if err == nil {
		if err = f.reload(lf); err != nil {
			lf.Close()
		}
	}
	if err != nil {
		f.mu.Unlock()
		// The fake's own disk failing is not the provider's answer; nothing
		// was done.
		return &providers.Error{Class: providers.Unavailable, SideEffect: providers.None, Message: "fake state not read: " + err.Error(), Err: err}
	}
	f.lockFile = lf
	return nil
}

// lockFor is lock for a call on behalf of an agent: once the account is
// held, the call's fence (providers.WithFence) is asked, so an agent that
// no longer leads is refused before anything is read or done, however long
// it was paused before it got here.
//
// A refusal is appended to the account's refusal log (beside its state
// file, one method name per line), as a cloud's audit log records the
// calls it denied: what a stale caller tried can be read after the fact.
func (f *Fake) lockFor(ctx context.Context, method string) error {
	if err := f.lock(); err != nil {
		return err
	}
	if err := providers.Fenced(ctx); err != nil {
		if f.cfg.StatePath != "" {
			if lf, ferr := os.OpenFile(RefusedLog(f.cfg.StatePath), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600); ferr == nil {
				_, _ = lf.WriteString(method + "\n")
				lf.Close()
			}
		}
		f.unlock()
		return &providers.Error{Class: providers.Unavailable, SideEffect: providers.None, Message: "not called: this agent no longer leads", Err: err}
	}
	return nil
}

// lockQuiet is lock for the reads that cannot report an error (Snapshot,
// Accepts, Review): when the account cannot be locked or read they answer
// from the state this Fake last knew.
func (f *Fake) lockQuiet() {
	if err := f.lock(); err != nil {
		f.mu.Lock()
	}
}

// unlock releases what lock took.
func (f *Fake) unlock() {
	// What settled without a write is forgotten with it.
	clear(f.settledAt)
	if f.lockFile != nil {
		f.lockFile.Close() // releases the flock
		f.lockFile = nil
	}
	f.mu.Unlock()
}

// reload reads the state file unless the state in memory is already the
// generation the lock file holds. Called with the account locked.
func (f *Fake) reload(lf *os.File) error {
	gen, err := readGeneration(lf)
	if err != nil {
		return err
	}
	if f.known && gen == f.gen {
		return nil
	}
	st, existed, err := load(f.cfg.StatePath)
	if err != nil {
		return err
	}
	f.st, f.gen, f.known, f.existed = st, gen, true, existed
	return nil
}

// persist writes the state when there is a file. Called with the lock held.
func (f *Fake) persist() error {
	f.record()
	if f.cfg.StatePath == "" {
		return nil
	}
	err := errors.New("the account is not locked") // a bug of the fake, said rather than written unlocked
	gen := f.gen + 1
	if f.lockFile != nil {
		// The generation first: a kill between the two costs the other users
		// one needless reload, where the other order would let them keep a
		// stale state.
		if err = writeGeneration(f.lockFile, gen); err == nil {
			err = save(f.cfg.StatePath, &f.st)
		}
	}
	if err != nil {
		// The fake's own disk failing is not the provider's answer; say that
		// nothing is known of what happened.
		return &providers.Error{Class: providers.Unavailable, SideEffect: providers.Maybe, Message: "fake state not written", Err: err}
	}
	f.gen, f.existed = gen, true
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
	f.lockQuiet()
	defer f.unlock()
	return f.st.clone()
}

// Config returns the config the fake runs with.
func (f *Fake) Config() Config { return f.cfg }

// nextID derives the next id from the sequence and what it names, so the
// same calls in the same order give the same ids. Called with the lock held.
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
	a, _, finish, err := f.callFault(ctx, method, acct)
	return a, finish, err
}

// callFault is call that also says whether the answer must lose its
// object (a doneWithoutObject fault fired: the method acts, then answers
// success with a zero value).
func (f *Fake) callFault(ctx context.Context, method string, acct *providers.Account) (account, effects, func(error) error, error) {
	if err := ctx.Err(); err != nil {
		return account{}, effects{}, nil, &providers.Error{Op: method, Class: providers.Unavailable, SideEffect: providers.None, Message: "cancelled before the call", Err: err}
	}
	if err := f.lock(); err != nil {
		return account{}, effects{}, nil, opErr(method, err)
	}
	f.calls[method]++
	ft, err := f.takeFault(method)
	f.unlock()
	if err != nil {
		return account{}, effects{}, nil, err
	}
	if ft != nil {
		if err := f.wait(ctx, method, ft.Latency); err != nil {
			return account{}, effects{}, nil, err
		}
	}
	var a account
	fx := ft.effects()
	if acct != nil {
		if a, err = f.authorize(ctx, method, *acct); err != nil {
			return account{}, effects{}, nil, err
		}
	}
	failing := ft != nil && (ft.Class != "" || ft.Drop)
	if failing && !ft.acts() {
		return a, fx, nil, ft.err(method)
	}
	finish := func(err error) error {
		if err == nil && failing {
			return ft.err(method)
		}
		return opErr(method, err)
	}
	return a, fx, finish, nil
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

// RefusedLog is the file where the account at statePath logs the calls it
// refused because the caller's term of leadership had ended.
func RefusedLog(statePath string) string { return statePath + ".refused" }
