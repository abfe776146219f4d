package substrate_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleet-agent/fleet-agent/internal/apply"
	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/metrics"
	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/providers/fake"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/state/statetest"
	"github.com/fleet-agent/fleet-agent/internal/substrate"
	"github.com/fleet-agent/fleet-agent/internal/substrate/crashtest"
)

var _ substrate.Metrics = (*metrics.Metrics)(nil)

var epoch = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

// syncBuffer is a log sink the passes write to concurrently.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// env is one agent's worth of real parts: a bbolt state file, the fake
// provider with its own state file, an injected clock, and a reconciler
// over them that can be crashed and started again over the same files.
type env struct {
	t         testing.TB
	statePath string
	fakeCfg   fake.Config
	clock     *clock.Fake
	logs      *syncBuffer
	// tune changes the reconciler's options at every start.
	tune func(*substrate.Options)
	// installation is the state file's installation id ("":
	// testInstallation).
	installation string
	// onEtcd puts the store on the test etcd server (a prefix named after
	// statePath) instead of the file: make test-etcd runs the package so.
	onEtcd bool

	store *state.Store
	fake  *fake.Fake
	rec   *substrate.Reconciler
}

func newEnv(t testing.TB, tune func(*substrate.Options)) *env {
	t.Helper()
	return newEnvOn(t, tune, statetest.Backend() == "etcd")
}

// newEnvOn is newEnv on the backend chosen: the tests that copy the state
// file itself (a restore from a backup) choose the file.
func newEnvOn(t testing.TB, tune func(*substrate.Options), onEtcd bool) *env {
	t.Helper()
	dir := t.TempDir()
	e := &env{t: t, statePath: filepath.Join(dir, "fleet.db"), fakeCfg: crashtest.FakeConfig(filepath.Join(dir, "fake.json")),
		clock: clock.NewFake(epoch), logs: &syncBuffer{}, tune: tune, onEtcd: onEtcd}
	e.start()
	t.Cleanup(func() {
		if e.rec != nil {
			e.rec.Crash()
		}
		if e.store != nil {
			_ = e.store.Close()
		}
	})
	return e
}

// start opens the files and makes a reconciler over them.
func (e *env) start() {
	e.t.Helper()
	var err error
	if e.onEtcd {
		e.store = e.openEtcd()
	} else if e.store, err = state.Open(e.statePath, state.Options{Now: e.clock.Now, NoSync: true, Installation: e.owner()}); err != nil {
		e.t.Fatal(err)
	}
	if e.fake, err = fake.New(e.fakeCfg, crashtest.DefaultSecrets, fake.WithClock(e.clock)); err != nil {
		e.t.Fatal(err)
	}
	opts := substrate.Options{Store: e.store, Providers: map[string]substrate.Provider{"fake": e.fake}, Clock: e.clock,
		Log: zerolog.New(e.logs)}
	if e.tune != nil {
		e.tune(&opts)
	}
	e.rec = substrate.New(opts)
}

// crash kills the reconciler where it stands and closes the files without
// any cleanup; restart starts over the same files.
func (e *env) crash() {
	e.rec.Crash()
	if err := e.store.Close(); err != nil {
		e.t.Fatal(err)
	}
	e.rec, e.store, e.fake = nil, nil, nil
}

func (e *env) restart() {
	e.crash()
	e.start()
}

// anyTeardowns lifts apply.maxTeardowns: these suites tear down as many
// substrates in one apply as their steps list, to drive the reconciler
// through them together; the limit itself is the plan's (internal/plan,
// internal/apply) and is tested there.
var anyTeardowns = func() *int { n := 1 << 20; return &n }()

// apply applies a document as the agent does.
func (e *env) apply(text string, prune bool) {
	e.t.Helper()
	d, errs := fleet.Validate("test", []byte(text))
	if errs != nil {
		e.t.Fatal(errs.Text())
	}
	if _, err := apply.Apply(e.t.Context(), e.store, d, apply.Options{Prune: prune, Now: e.clock.Now, MaxTeardowns: anyTeardowns}); err != nil {
		e.t.Fatalf("apply: %v", err)
	}
}

func (e *env) applyStep(s crashtest.Step) { e.apply(crashtest.Document(s), s.Prune) }

func (e *env) records() []state.SubstrateRecord {
	e.t.Helper()
	var recs []state.SubstrateRecord
	if err := e.store.View(func(tx *state.Tx) (err error) { recs, err = tx.Substrates(); return }); err != nil {
		e.t.Fatal(err)
	}
	return recs
}

// converged reports whether every substrate converged at its generation.
func (e *env) converged() bool {
	for _, r := range e.records() {
		if r.Seen == nil || !r.Seen.Converged || r.Seen.ObservedGeneration != r.Want.Generation {
			return false
		}
	}
	return true
}

// converge reconciles, moving the clock on by step between passes, until
// every substrate converged; it fails after max passes.
func (e *env) converge(step time.Duration, max int) int {
	e.t.Helper()
	for i := range max {
		if err := e.rec.ReconcileOnce(e.t.Context()); err != nil {
			e.t.Fatalf("pass %d: %v", i, err)
		}
		if e.converged() {
			return i + 1
		}
		e.clock.Advance(step)
	}
	e.t.Fatalf("not converged after %d passes:\n%s", max, e.describe())
	return max
}

func (e *env) describe() string {
	var b bytes.Buffer
	for _, r := range e.records() {
		if r.Seen == nil {
			b.WriteString(r.Want.Pool + ": no seen record\n")
			continue
		}
		b.WriteString(r.Want.Pool + ": " + string(r.Seen.State) + ": " + r.Seen.Message + "\n")
	}
	return b.String()
}

func (e *env) status(pool string) substrate.Status {
	e.t.Helper()
	list, err := substrate.Statuses(e.store)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, s := range list {
		if s.Pool == pool {
			return s
		}
	}
	e.t.Fatalf("no substrate for pool %s", pool)
	return substrate.Status{}
}

// check fails unless the fake's truth matches the step and the records,
// and the journal holds no unfinished operation.
func (e *env) check(last crashtest.Step) {
	e.t.Helper()
	if f := crashtest.Check(e.fake.Snapshot(), last, e.records(), testInstallation); !f.OK() {
		e.t.Fatalf("ground truth: %+v\n%s", f.Problems, e.describe())
	}
	if open := e.openOps(); len(open) > 0 {
		e.t.Fatalf("converged with unfinished operations: %v", open)
	}
}

// openOps lists the journal's unfinished operations.
func (e *env) openOps() []string {
	e.t.Helper()
	var open []string
	if err := e.store.View(func(tx *state.Tx) error {
		ops, err := tx.JournalOps("")
		for _, op := range ops {
			if !op.State.Terminal() {
				open = append(open, op.Key+" "+string(op.State))
			}
		}
		return err
	}); err != nil {
		e.t.Fatal(err)
	}
	return open
}

func fakeFault(method string, n int, class providers.Class, msg string) fake.Fault {
	return fake.Fault{Method: method, Count: n, Class: class, SideEffect: providers.None, Message: msg}
}

// trialWorkers is how many trials run at once. They wait on fsync more than
// on the CPU, so more than the cores keeps both busy; t.Run may be called
// from several goroutines, and a subtest run so is not held by -parallel.
const trialWorkers = 6

// inParallel calls fn(0..n-1) from trialWorkers goroutines.
func inParallel(t *testing.T, n int, fn func(i int)) {
	var wg sync.WaitGroup
	next := make(chan int)
	for range trialWorkers {
		wg.Go(func() {
			for i := range next {
				fn(i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

// owner is the env's installation id.
func (e *env) owner() string { return cmpOr(e.installation, testInstallation) }

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// testInstallation is the installation id of the state files these tests
// make, so that the names they expect are fixed.
const testInstallation = "5eed0000000000000000000000000002"

// testOwner is who a test substrate's objects belong to.
func testOwner(poolID string) providers.Owner {
	return providers.Owner{Installation: testInstallation, PoolID: poolID}
}

// openEtcd opens (and leads) the env's store on the test etcd server: the
// prefix follows statePath, so a restart finds the same store.
func (e *env) openEtcd() *state.Store {
	e.t.Helper()
	opts := statetest.EtcdOptions(e.t)
	sum := sha256.Sum256([]byte(e.statePath))
	opts.Prefix = "/substrate-test/" + hex.EncodeToString(sum[:8])
	opts.Now, opts.Installation = e.clock.Now, e.owner()
	s, err := state.OpenEtcd(context.Background(), opts)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.Lead(ctx); err != nil {
		e.t.Fatal(err)
	}
	return s
}

// storeBytes is everything the store holds, as bytes to search: the file,
// or a bbolt copy of the etcd store.
func (e *env) storeBytes() []byte {
	e.t.Helper()
	path := e.statePath
	if e.onEtcd {
		path = filepath.Join(e.t.TempDir(), "copy.db")
		if err := e.store.Backup(path); err != nil {
			e.t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		e.t.Fatal(err)
	}
	return b
}
