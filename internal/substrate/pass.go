package substrate

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/canon"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

// maxRepeats bounds how often one step is made again within a generation
// (a node pool that keeps vanishing, a change the provider keeps undoing):
// past it the substrate says so instead of calling forever.
const maxRepeats = 3

// NoDaemonMessage is what a substrate whose cluster and node pools run says
// while no in-cluster half is configured (docs/substrates.md).
const NoDaemonMessage = "no node daemon configured (substrate.nodeDaemon)"

// pass is one look at one substrate: what it read, what it decided.
type pass struct {
	r    *Reconciler
	ctx  context.Context
	want state.SubstrateWant
	seen state.SubstrateSeen
	ops  map[string]*state.JournalOp
	acct providers.Account
	prov Provider
	// full: observe the provider; otherwise only the in-cluster half runs
	// (a converged substrate's pass with one configured).
	full bool

	next       time.Time
	problems   []string
	waits      []string
	notes      []string
	scheduled  bool // a refusal's retry is due later
	readFailed bool
	doubted    bool // the pass learned something that needs a full look
	noDaemon   bool // all runs, no in-cluster half to hand it to
	applied    bool // the in-cluster half applied this pass
	gone       bool // teardown finished
	refused    bool // the teardown's cluster delete is refused
}

func (p *pass) problem(format string, args ...any) {
	p.problems = append(p.problems, fmt.Sprintf(format, args...))
}

func (p *pass) schedule(at time.Time) {
	if !at.IsZero() && (p.next.IsZero() || at.Before(p.next)) {
		p.next = at
	}
}

// wait notes something in progress, to be looked at again at until.
func (p *pass) wait(msg string, until time.Time) {
	p.waits = append(p.waits, msg)
	p.schedule(until)
}

// take files an operation's outcome under waits or problems; it reports
// whether the operation is done.
func (p *pass) take(out outcome, label string) bool {
	msg := out.message
	if label != "" && msg != "" {
		msg = label + ": " + msg
	}
	switch out.res {
	case resDone, resSuperseded:
		return true
	case resWait:
		p.wait(msg, out.until)
	case resRefused:
		p.problems = append(p.problems, msg)
		p.scheduled = true
		p.schedule(out.until)
	case resFailed:
		p.problems = append(p.problems, msg)
	case resLater:
		p.problems = append(p.problems, msg)
		p.schedule(out.until)
	}
	return false
}

// doubt makes the next pass a full one.
func (p *pass) doubt() { p.doubted = true }

// readFail records a provider read that failed: the substrate backs off on
// its own, nothing else waits for it.
func (p *pass) readFail(what string, err error) {
	p.readFailed = true
	r, id := p.r, p.want.PoolID
	r.mu.Lock()
	r.reads[id]++
	n := r.reads[id]
	at := r.clock.Now().Add(max(RetryWait(n), providers.RetryAfterOf(err)))
	r.readAt[id] = at
	r.mu.Unlock()
	msg := fmt.Sprintf("reading %s: %v; trying again at %s", what, err, at.UTC().Format(time.RFC3339))
	if providers.ClassOf(err) == providers.Terminal {
		p.problems = append(p.problems, msg+"; fix the provider account (its credentials, a permission)")
	} else {
		p.waits = append(p.waits, msg)
	}
	p.schedule(at)
	p.r.log.Warn().Str("pool", p.want.Pool).Str("read", what).Str("class", string(providers.ClassOf(err))).Err(err).Msg("substrate: provider read failed")
}

// pending returns the newest unfinished operation on object among steps.
func (p *pass) pending(object string, steps ...string) *state.JournalOp {
	var best *state.JournalOp
	for _, op := range p.ops {
		if op.Object != object || op.State.Terminal() || !slices.Contains(steps, op.Step) {
			continue
		}
		if best == nil || op.CreatedAt > best.CreatedAt || (op.CreatedAt == best.CreatedAt && op.Key > best.Key) {
			best = op
		}
	}
	return best
}

// last returns the highest repeat of a step on object at this generation
// and its operation (nil when there is none yet). Every operation of the
// pass is looked at, not a fixed number of repeats: a step repeated more
// often than a scan would reach (a node pool deleted again and again) must
// never reuse a key already in the journal.
func (p *pass) last(step, object string) (int, *state.JournalOp) {
	base := opKey(p.want.PoolID, step, object, p.want.Generation, 0)
	best, bestOp := -1, (*state.JournalOp)(nil)
	for key, op := range p.ops {
		n := -1
		if key == base {
			n = 0
		} else if rest, ok := strings.CutPrefix(key, base+".r"); ok {
			if v, err := strconv.Atoi(rest); err == nil && v > 0 {
				n = v
			}
		}
		if n > best {
			best, bestOp = n, op
		}
	}
	if bestOp == nil {
		return 0, nil
	}
	return best, bestOp
}

// load reads a pool's records and operations in one transaction; nil when
// apply never recorded a substrate for it.
func (r *Reconciler) load(ctx context.Context, poolID string) (*pass, error) {
	// Each provider call asks the fence as it leaves (providers.WithFence).
	p := &pass{r: r, ctx: providers.WithFence(ctx, func() error { return r.store.FencedIn(ctx) }), ops: map[string]*state.JournalOp{}}
	found := false
	err := r.store.View(func(tx *state.Tx) error {
		want, err := tx.SubstrateWant(poolID)
		if err != nil || want == nil {
			return err
		}
		found = true
		p.want = *want
		seen, err := tx.SubstrateSeen(poolID)
		if err != nil {
			return err
		}
		if seen != nil {
			p.seen = *seen
		} else {
			p.seen = state.SubstrateSeen{PoolID: poolID, State: state.SubstratePending}
		}
		ops, err := tx.JournalOps(poolID + "/")
		for i := range ops {
			p.ops[ops[i].Key] = &ops[i]
		}
		return err
	})
	if err != nil || !found {
		return nil, err
	}
	if p.want.Tenant == "" {
		p.want.Tenant = "root"
	}
	return p, nil
}

// pass looks at one substrate once and returns when it wants to look again
// (zero: Every).
func (r *Reconciler) pass(ctx context.Context, poolID string) (time.Time, error) {
	p, err := r.load(ctx, poolID)
	if err != nil || p == nil {
		return time.Time{}, err
	}
	r.mu.Lock()
	readAt, verified := r.readAt[poolID], r.verified[poolID]
	r.mu.Unlock()
	if now := r.clock.Now(); now.Before(readAt) {
		return readAt, nil
	}
	s := p.seen
	p.full = !(verified && s.Converged && s.ObservedGeneration == p.want.Generation && len(s.Orphans) == 0)
	// What a run that died left in flight is not known: it is verified
	// (read back by name) before anything else is done with it.
	for _, key := range p.keys() {
		if op := p.ops[key]; op.State == state.InFlight {
			if err := p.move(op, Ambiguous, func(o *state.JournalOp) {
				o.NextAttemptAt = 0
				o.LastError = &state.OpError{Class: string(providers.Unknown), SideEffect: string(providers.Maybe),
					Message: "the agent stopped during the call; its outcome is not known"}
			}, nil); err != nil {
				return time.Time{}, err
			}
		}
	}
	if aerr := p.account(); aerr != nil {
		p.problem("%v", aerr)
		p.scheduled = true
	} else if p.want.Present {
		err = p.present()
	} else {
		err = p.teardown()
	}
	if err != nil {
		return time.Time{}, err
	}
	if err := p.orphans(); err != nil {
		return time.Time{}, err
	}
	return p.finish()
}

func (p *pass) keys() []string {
	keys := make([]string, 0, len(p.ops))
	for k := range p.ops {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// account finds the substrate's provider account (the live object, else the
// copy apply kept) and its adapter.
func (p *pass) account() error {
	var acct *providers.Account
	err := p.r.store.View(func(tx *state.Tx) error {
		o, ok, err := tx.GetObject(inventory.ProviderAccount, inventory.ID(p.want.Tenant, inventory.ProviderAccount, p.want.Account))
		if err != nil || !ok {
			return err
		}
		provider, _ := o.Spec["provider"].(string)
		cfg, err := canon.Marshal(o.Spec["config"])
		acct = &providers.Account{Name: p.want.Account, Provider: provider, Config: cfg}
		return err
	})
	if err != nil {
		return err
	}
	if acct == nil && p.want.AccountCopy != nil {
		acct = &providers.Account{Name: p.want.Account, Provider: p.want.AccountCopy.Provider, Config: p.want.AccountCopy.Config}
	}
	if acct == nil {
		return fmt.Errorf("provider account %q is not in the fleet; add it to the document", p.want.Account)
	}
	p.acct = *acct
	if p.prov = p.r.opts.Providers[acct.Provider]; p.prov == nil {
		return fmt.Errorf("provider account %q is a %s account and this build of fleet-agent has no %s adapter (providers.%s)", acct.Name, acct.Provider, acct.Provider, acct.Provider)
	}
	return nil
}

// owner is who what this substrate makes belongs to: its pool in this
// installation.
func (p *pass) owner() providers.Owner {
	return providers.Owner{Installation: p.r.installation, PoolID: p.want.PoolID, Legacy: p.want.LegacyNames}
}

func (p *pass) mode() string {
	if p.want.Spec.Cluster.Adopt != "" {
		return "adopt"
	}
	return "create"
}

// present converges a substrate the document wants: the cluster, its claim,
// the node pools, then the in-cluster half.
func (p *pass) present() error {
	var (
		cr  clusterResult
		err error
	)
	if p.mode() == "adopt" {
		cr, err = p.adopted()
	} else {
		cr, err = p.created()
	}
	if err != nil {
		return err
	}
	if cr.stopped || cr.cluster == nil {
		p.end(cr.stop)
		return nil
	}
	ref := cr.cluster.Ref
	claim, err := p.claim()
	if err != nil {
		return err
	}
	if claim.stopped {
		p.end(claim.stop)
		return nil
	}
	pools, err := p.nodePools(ref)
	if err != nil || pools.making {
		return err
	}
	in, err := p.inCluster(ref)
	p.end(in.stop)
	return err
}

// finish decides the substrate's state and message, writes what changed of
// the reconciler's half, and drops finished operations no generation needs.
func (p *pass) finish() (time.Time, error) {
	r, id := p.r, p.want.PoolID
	// A pass cut off by our own stop learned nothing about the provider: it
	// must not leave a read it never made as the substrate's message (a
	// stopped agent showing "cancelled before the call" as the state of a
	// converged substrate). What the journal recorded stands; the next start
	// looks again.
	if p.ctx.Err() != nil {
		return time.Time{}, p.ctx.Err()
	}
	s := p.seen
	s.PoolID = id
	s.Mode = p.mode()
	s.ObservedGeneration = p.want.Generation
	state0, msg := p.decide()
	if notes := r.foreignNotes(id); len(notes) > 0 {
		msg = strings.Join(append([]string{msg}, notes...), "; ")
	}
	s.State, s.Message = state0, msg
	s.Converged = len(p.waits) == 0 && !p.scheduled && !p.readFailed && !p.doubted && len(s.Orphans) == 0
	if p.gone {
		s.NodePools, s.Teardown = nil, nil
		if s.Cluster != nil {
			s.Cluster.Status = string(state.SubstrateDeleted)
		}
	}
	if err := r.alive(); err != nil {
		return time.Time{}, err
	}
	now := r.clock.Now()
	var old *state.SubstrateSeen
	var drop []string
	for _, key := range p.keys() {
		op := p.ops[key]
		if op.State.Terminal() && (op.Generation < p.want.Generation || (p.gone && len(s.Orphans) == 0)) && s.Converged {
			drop = append(drop, key)
		}
	}
	err := r.store.UpdateIn(p.ctx, func(tx *state.Tx) error {
		var err error
		if old, err = tx.SubstrateSeen(id); err != nil {
			return err
		}
		if p.gone && s.Claim != "" {
			if err := tx.ReleaseCluster(s.Claim, id); err != nil {
				return err
			}
			s.Claim = ""
		}
		for _, k := range drop {
			if err := tx.DeleteJournalOp(k); err != nil {
				return err
			}
		}
		if old != nil && sameSeen(*old, s) {
			return nil
		}
		if old == nil || old.State != s.State {
			s.StateSince = now.UnixMilli()
		} else {
			s.StateSince = old.StateSince
		}
		s.UpdatedAt = now.UnixMilli()
		if err := r.stateEvent(tx, old, s); err != nil {
			return err
		}
		return tx.PutSubstrateSeen(s)
	})
	if err != nil {
		return time.Time{}, err
	}
	was := state.SubstratePending
	if old != nil {
		was = old.State
	}
	if was != s.State || (old != nil && old.Message != s.Message) {
		ev := r.log.Info()
		if s.State == state.SubstrateError {
			ev = r.log.Warn()
		}
		ev.Str("pool", p.want.Pool).Str("poolId", id).Str("from", string(was)).Str("to", string(s.State)).
			Str("message", s.Message).Msg("substrate: state")
	}
	r.mu.Lock()
	if p.full && !p.readFailed && !p.doubted {
		r.verified[id] = true
	}
	if p.doubted {
		r.verified[id] = false
	}
	if !p.readFailed {
		delete(r.reads, id)
		delete(r.readAt, id)
	}
	r.mu.Unlock()
	if p.next.IsZero() && !s.Converged {
		p.next = now.Add(r.opts.Poll)
	}
	return p.next, nil
}

// decide is the state and message the pass leaves.
func (p *pass) decide() (state.SubstrateState, string) {
	join := func(parts ...[]string) string {
		var all []string
		for _, l := range parts {
			all = append(all, l...)
		}
		return strings.Join(all, "; ")
	}
	if !p.want.Present {
		switch {
		case p.gone && len(p.seen.Orphans) == 0:
			why := "the pool was archived"
			if p.want.Teardown == state.TeardownRemoved {
				why = "policy.substrate was removed (with prune)"
			}
			return state.SubstrateDeleted, join([]string{"torn down: " + why}, p.notes)
		case p.refused || len(p.problems) > 0:
			return state.SubstrateError, join(p.problems, p.waits)
		}
		return state.SubstrateDeleting, cmpOr(join(p.waits), "tearing down")
	}
	daemon := p.applied || (p.seen.DaemonApplied && !p.full)
	switch {
	case len(p.problems) > 0:
		return state.SubstrateError, join(p.problems, p.waits, p.notes)
	case len(p.waits) > 0:
		if daemon {
			return state.SubstrateReady, join(p.waits, p.notes)
		}
		return state.SubstrateCreating, join(p.waits)
	case daemon:
		return state.SubstrateReady, join(p.notes)
	case p.noDaemon:
		return state.SubstrateCreating, "the cluster and its node pools run; waiting for the node daemon: " + NoDaemonMessage
	}
	return state.SubstrateCreating, "waiting for the cluster"
}

// sameSeen compares two records but for their times.
func sameSeen(a, b state.SubstrateSeen) bool {
	a.UpdatedAt, b.UpdatedAt, a.StateSince, b.StateSince = 0, 0, 0, 0
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}
