package substrate

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/substrate/opjournal"
)

// The defaults of Options.
const (
	DefaultEvery      = time.Minute
	DefaultPoll       = 10 * time.Second
	DefaultSweepEvery = 10 * time.Minute
	// DefaultNodePoolCheckEvery bounds how long the sweep trusts a
	// cluster's node pool revision: each converged substrate's node pools
	// are listed at least this often, whatever the revision says.
	DefaultNodePoolCheckEvery = 24 * time.Hour
	DefaultConcurrency        = 4
	// AdoptedRetry is how soon a teardown the in-cluster half could not
	// finish is tried again (reference "Adopt a cluster you already run").
	AdoptedRetry = 2 * time.Minute
)

// Options make a Reconciler.
type Options struct {
	Store *state.Store
	// Providers are the adapters by provider id (providers.KnownIDs); an
	// account of a provider without one is an error of its substrates.
	Providers map[string]Provider
	// InCluster is the in-cluster half; nil runs the cloud side alone
	// (tests of the cloud steps).
	InCluster InCluster
	Clock     clock.Clock
	Log       zerolog.Logger
	Metrics   Metrics
	// Every is how often Run looks at every substrate (substrate.every).
	Every time.Duration
	// Poll is how soon a pass looks again at an operation in progress.
	Poll time.Duration
	// SweepEvery is how often Run runs the discovery sweep.
	SweepEvery time.Duration
	// NodePoolCheckEvery is how long the sweep may skip listing a
	// converged substrate's node pools while its cluster's node pool
	// revision (in the account's cluster listing) stays the same.
	NodePoolCheckEvery time.Duration
	// Concurrency bounds the passes running at once.
	Concurrency int
	// crashAt, set only by tests (export_test.go), is asked at every
	// point between journal steps; true stops the reconciler there as a
	// kill would. Unexported so that no caller of the package can reach it.
	crashAt func(opjournal.Point) bool
	// Events hears, inside the transaction that records it, a substrate
	// becoming ready or going into error (events.webhooks); nil for none.
	Events StateEvents
}

// StateEvents is told of a substrate's state change in the transaction
// that records it.
type StateEvents interface {
	SubstrateChanged(tx *state.Tx, poolID string, to state.SubstrateState, message string) error
}

// stateEvent tells Events of a change into ready or error.
func (r *Reconciler) stateEvent(tx *state.Tx, from *state.SubstrateSeen, to state.SubstrateSeen) error {
	if r.opts.Events == nil || (to.State != state.SubstrateReady && to.State != state.SubstrateError) {
		return nil
	}
	if from != nil && from.State == to.State {
		return nil
	}
	return r.opts.Events.SubstrateChanged(tx, to.PoolID, to.State, to.Message)
}

// Reconciler converges the substrates recorded in one state file.
type Reconciler struct {
	opts    Options
	store   *state.Store
	clock   clock.Clock
	log     zerolog.Logger
	metrics Metrics
	// installation is the state file's installation id: with the pool id
	// it names and labels everything the substrates make.
	installation string
	sem          chan struct{}
	wake         chan struct{}
	done         chan struct{}
	crashed      atomic.Bool
	wg           sync.WaitGroup

	mu sync.Mutex
	// running are the pools with a pass in progress.
	running map[string]bool
	// locks keep a pool's pass and the sweep's decisions about it apart.
	locks map[string]*sync.Mutex
	// verified are the pools a full pass looked at since the start (and no
	// sweep doubted since): only those may be left alone when converged.
	verified map[string]bool
	// next is when each pool wants its next pass; lastPass when it had one.
	next     map[string]time.Time
	lastPass map[string]time.Time
	// reads counts each pool's failed provider reads in a row, for its
	// backoff; readAt is when it may read again.
	reads  map[string]int
	readAt map[string]time.Time
	// daemonRetry holds a teardown of the in-cluster half that failed until
	// it is due again, with what it said.
	daemonRetry map[string]retryNote
	// foreign holds, per pool, what the last sweep found of other
	// installations (said in the pool's status); foreignNext fills during a
	// sweep.
	foreign, foreignNext map[string][]string
	// sweeping is set while a sweep runs; nextSweep when the next is due.
	sweeping  bool
	nextSweep time.Time
	// pools is, per pool, the node pool revision of its cluster when the
	// sweep last listed its node pools and found them as wanted, and when.
	pools map[string]poolsMark
}

// poolsMark is what the sweep last found of a substrate's node pools.
type poolsMark struct {
	revision string
	at       time.Time
}

// New makes a reconciler. It does nothing until Run or ReconcileOnce.
func New(opts Options) *Reconciler {
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.Metrics == nil {
		opts.Metrics = nopMetrics{}
	}
	if opts.Every <= 0 {
		opts.Every = DefaultEvery
	}
	if opts.Poll <= 0 {
		opts.Poll = DefaultPoll
	}
	if opts.SweepEvery <= 0 {
		opts.SweepEvery = DefaultSweepEvery
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = DefaultConcurrency
	}
	if opts.NodePoolCheckEvery <= 0 {
		opts.NodePoolCheckEvery = DefaultNodePoolCheckEvery
	}
	var installation string
	if opts.Store != nil {
		installation = opts.Store.Installation()
	}
	return &Reconciler{opts: opts, store: opts.Store, installation: installation, clock: opts.Clock, log: opts.Log, metrics: opts.Metrics,
		sem: make(chan struct{}, opts.Concurrency), wake: make(chan struct{}, 1), done: make(chan struct{}, 1),
		running: map[string]bool{}, locks: map[string]*sync.Mutex{}, verified: map[string]bool{},
		next: map[string]time.Time{}, lastPass: map[string]time.Time{}, reads: map[string]int{}, readAt: map[string]time.Time{},
		daemonRetry: map[string]retryNote{}, pools: map[string]poolsMark{}}
}

type retryNote struct {
	at  time.Time
	msg string
}

// Wake makes Run look at every substrate now (after an apply).
func (r *Reconciler) Wake() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// alive is checked before every write and every call.
func (r *Reconciler) alive() error {
	if r.crashed.Load() {
		return errCrashed
	}
	// On an etcd store, only the leader acts: every step point and every
	// in-cluster call asks, so a leader that lost its lease stops at the
	// next one instead of acting as if it still led.
	return r.store.Fenced()
}

// alive, in a pass, also asks the term the pass started in: a pass of a
// term that ended stops, even when this agent leads again.
func (p *pass) alive() error {
	if err := p.r.alive(); err != nil {
		return err
	}
	return p.r.store.FencedIn(p.ctx)
}

// at is a point between journal steps: a test may crash there.
func (r *Reconciler) at(p opjournal.Point) error {
	if err := r.alive(); err != nil {
		return err
	}
	if r.opts.crashAt != nil && r.opts.crashAt(p) {
		r.crashed.Store(true)
		return errCrashed
	}
	return nil
}

func (r *Reconciler) lock(poolID string) *sync.Mutex {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := r.locks[poolID]
	if l == nil {
		l = &sync.Mutex{}
		r.locks[poolID] = l
	}
	return l
}

// records reads every substrate record in one transaction.
func (r *Reconciler) records() ([]state.SubstrateRecord, error) {
	var recs []state.SubstrateRecord
	err := r.store.View(func(tx *state.Tx) error {
		var err error
		recs, err = tx.Substrates()
		return err
	})
	return recs, err
}

// idle reports whether a substrate can be left alone: a full pass looked at
// it since the start, it converged at the wanted generation, nothing of the
// sweep's waits for it, and (with an in-cluster half, which runs every pass)
// its last pass is recent.
func (r *Reconciler) idle(rec state.SubstrateRecord, now time.Time, force bool) bool {
	s := rec.Seen
	if s == nil || !s.Converged || s.ObservedGeneration != rec.Want.Generation || len(s.Orphans) > 0 {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.verified[rec.Want.PoolID] {
		return false
	}
	if r.opts.InCluster != nil && s.State != state.SubstrateDeleted && (force || now.Sub(r.lastPass[rec.Want.PoolID]) >= r.opts.Every) {
		return false
	}
	return true
}

// start marks a pool's pass as running, unless one is.
func (r *Reconciler) start(poolID string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.running[poolID] {
		return false
	}
	r.running[poolID] = true
	return true
}

func (r *Reconciler) finished(poolID string, next time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.running, poolID)
	r.next[poolID] = next
	r.lastPass[poolID] = r.clock.Now()
}

// ReconcileOnce runs one pass over every substrate that is not idle, all at
// once within the concurrency bound, and returns when they end. Passes wait
// for nothing: an operation in progress or a backoff ends a pass, and the
// next one picks it up. The error is the state file's, or that of a crash.
func (r *Reconciler) ReconcileOnce(ctx context.Context) error {
	if err := r.alive(); err != nil {
		return err
	}
	recs, err := r.records()
	if err != nil {
		return err
	}
	now := r.clock.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	ran := false
	for _, rec := range recs {
		id := rec.Want.PoolID
		if r.idle(rec, now, true) || !r.start(id) {
			continue
		}
		ran = true
		wg.Add(1)
		r.wg.Add(1)
		go func() {
			defer wg.Done()
			defer r.wg.Done()
			if err := r.runPass(ctx, id); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if ran {
		r.report()
	}
	if err := r.alive(); err != nil {
		return err
	}
	return errors.Join(errs...)
}

// runPass runs one pass for a pool within the concurrency bound.
func (r *Reconciler) runPass(ctx context.Context, poolID string) error {
	next := r.clock.Now().Add(r.opts.Every)
	defer func() { r.finished(poolID, next) }()
	select {
	case r.sem <- struct{}{}:
	case <-ctx.Done():
		return nil
	}
	defer func() { <-r.sem }()
	l := r.lock(poolID)
	l.Lock()
	defer l.Unlock()
	n, err := r.pass(ctx, poolID)
	if !n.IsZero() {
		next = n
	}
	if err != nil && !isCrashed(err) && ctx.Err() == nil {
		r.log.Error().Err(err).Str("poolId", poolID).Msg("substrate: a pass failed; it is tried again")
		r.passFailed(poolID, err, next)
	}
	if ctx.Err() != nil && !isCrashed(err) {
		return nil
	}
	return err
}

// Run reconciles until ctx ends: each substrate that is not idle when it is
// due (its operations' waits, Poll while something is in progress, Every
// otherwise), every substrate at once when woken, and the discovery sweep
// every SweepEvery (the first at the start). A slow or throttled provider
// holds only its own substrates' passes.
func (r *Reconciler) Run(ctx context.Context) error {
	defer r.wg.Wait()
	for {
		if err := r.alive(); err != nil {
			return nil
		}
		if ctx.Err() != nil {
			return nil
		}
		wait := r.dispatch(ctx, false)
		select {
		case <-ctx.Done():
			return nil
		case <-r.wake:
			r.dispatchAll(ctx)
		case <-r.done:
		case <-r.clock.After(wait):
		}
	}
}

// dispatchAll starts a pass for every substrate that is not idle, whatever
// its schedule (a wake after an apply).
func (r *Reconciler) dispatchAll(ctx context.Context) {
	r.mu.Lock()
	for id := range r.next {
		r.next[id] = time.Time{}
	}
	r.mu.Unlock()
	r.dispatch(ctx, true)
}

// dispatch starts the passes that are due and the sweep when it is, and
// returns how long Run may sleep.
func (r *Reconciler) dispatch(ctx context.Context, woken bool) time.Duration {
	now := r.clock.Now()
	wait := r.opts.Every
	r.mu.Lock()
	sweepDue := !r.sweeping && !now.Before(r.nextSweep)
	if sweepDue {
		r.sweeping = true
		r.nextSweep = now.Add(r.opts.SweepEvery)
	}
	if d := r.nextSweep.Sub(now); d < wait {
		wait = d
	}
	r.mu.Unlock()
	if sweepDue {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			if _, err := r.Sweep(ctx); err != nil && !isCrashed(err) && ctx.Err() == nil {
				r.log.Error().Err(err).Msg("substrate: discovery sweep failed; it runs again later")
			}
			r.mu.Lock()
			r.sweeping = false
			r.mu.Unlock()
			r.poke()
		}()
	}
	recs, err := r.records()
	if err != nil {
		r.log.Error().Err(err).Msg("substrate: cannot read the substrate records")
		return min(wait, RetryBase)
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].Want.PoolID < recs[j].Want.PoolID })
	for _, rec := range recs {
		id := rec.Want.PoolID
		if r.idle(rec, now, false) {
			continue
		}
		r.mu.Lock()
		due, running := r.next[id], r.running[id]
		r.mu.Unlock()
		if running {
			continue
		}
		if !woken && now.Before(due) {
			wait = min(wait, due.Sub(now))
			continue
		}
		if !r.start(id) {
			continue
		}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			_ = r.runPass(ctx, id)
			r.report()
			r.poke()
		}()
	}
	return max(wait, time.Millisecond)
}

// poke makes Run look at its schedule again (a pass or the sweep ended).
func (r *Reconciler) poke() {
	select {
	case r.done <- struct{}{}:
	default:
	}
}

// report sets the gauges from the records.
func (r *Reconciler) report() {
	if r.alive() != nil {
		return
	}
	list, err := Statuses(r.store)
	if err != nil {
		return
	}
	counts := map[string]int{}
	for _, s := range state.SubstrateStates {
		counts[string(s)] = 0
	}
	listed, joined := map[string]int{}, map[string]int{}
	for _, s := range list {
		counts[s.State]++
		if s.State != string(state.SubstrateDeleted) {
			listed[s.Pool], joined[s.Pool] = s.Nodes.Listed, s.Nodes.Joined
		}
	}
	r.metrics.SubstrateStates(counts)
	r.metrics.SubstrateNodes(listed, joined)
}

// passFailed writes a pass's failure into the substrate's status, so that
// what the log says (a wedge on the state file, a damaged record) is also
// what status and the page say, and counts it. The record is written in a
// transaction of its own; if even that fails, the log is all there is.
func (r *Reconciler) passFailed(poolID string, err error, next time.Time) {
	var pool string
	werr := r.store.Update(func(tx *state.Tx) error {
		want, err2 := tx.SubstrateWant(poolID)
		if err2 != nil || want == nil {
			return err2
		}
		pool = want.Pool
		seen, err2 := tx.SubstrateSeen(poolID)
		if err2 != nil {
			return err2
		}
		s := state.SubstrateSeen{PoolID: poolID, State: state.SubstratePending}
		if seen != nil {
			s = *seen
		}
		now := r.clock.Now()
		msg := fmt.Sprintf("a pass failed: %v; it is tried again at %s (see the agent's log)", err, next.UTC().Format(time.RFC3339))
		if s.Message == msg && s.State == state.SubstrateError {
			return nil
		}
		if s.State != state.SubstrateError {
			s.StateSince = now.UnixMilli()
		}
		prev := s
		s.State, s.Message, s.Converged, s.UpdatedAt = state.SubstrateError, msg, false, now.UnixMilli()
		if err := r.stateEvent(tx, &prev, s); err != nil {
			return err
		}
		return tx.PutSubstrateSeen(s)
	})
	if werr != nil {
		r.log.Error().Err(werr).Str("poolId", poolID).Msg("substrate: cannot write a failed pass into the status")
	}
	r.metrics.PassFailed(cmpOr(pool, poolID))
}
