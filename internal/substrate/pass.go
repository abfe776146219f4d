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

// pass is one look at one substrate: what it read, and the record it
// fills. What each step found is its condition, never a field here.
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
	conds, err := p.steps()
	if err != nil {
		return time.Time{}, err
	}
	return p.finish(conds)
}

// steps runs the steps in order, each on its own report, and returns
// their conditions: the account, then the substrate's own steps (present
// or teardown), then the orphans the sweep handed it.
func (p *pass) steps() ([]Condition, error) {
	acct := p.accountStep()
	conds := []Condition{acct}
	if acct.Status == ConditionTrue {
		var more []Condition
		var err error
		if p.want.Present {
			more, err = p.present()
		} else {
			more, err = p.teardownStep()
		}
		if err != nil {
			return nil, err
		}
		conds = append(conds, more...)
	}
	orphans, ok, err := p.orphansStep()
	if err != nil {
		return nil, err
	}
	if ok {
		conds = append(conds, orphans)
	}
	return conds, nil
}

// accountStep finds the provider account and its adapter.
func (p *pass) accountStep() Condition {
	s := p.step()
	if err := p.account(); err != nil {
		s.problem(ReasonAccountUnavailable, err.Error())
		s.scheduled = true
	}
	return s.verdict(CondAccount, ReasonAccountFound, "")
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
		// Every provider of this build has an adapter; one is open only
		// when the agent's config has its block.
		return fmt.Errorf("provider account %q is an account of provider %s and the agent's config has no providers.%s block, so no %s adapter is open: add a providers.%s block to the agent's config (docs/configuration.md) and restart the agent", acct.Name, acct.Provider, acct.Provider, acct.Provider, acct.Provider)
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
// the node pools, then the in-cluster half; a step that stops the pass
// leaves the later ones unrun.
func (p *pass) present() ([]Condition, error) {
	cs := p.step()
	var (
		cr  clusterResult
		err error
	)
	if p.mode() == "adopt" {
		cr, err = cs.adopted()
	} else {
		cr, err = cs.created()
	}
	if err != nil {
		return nil, err
	}
	cs.end(cr.stop)
	conds := []Condition{cs.verdict(CondCluster, ReasonClusterRunning, "")}
	if cr.stopped || cr.cluster == nil {
		// A control plane hop keeps the cluster updating: it is followed
		// here, the node pools not listed meanwhile.
		if conds, err = p.withUpgrade(conds, cr.cluster, nil); err != nil {
			return nil, err
		}
		if cr.cluster != nil && cr.cluster.Status == providers.ClusterUpdating {
			return append(conds, p.lastInCluster()...), nil
		}
		return p.withInCluster(conds, nil)
	}
	ref := cr.cluster.Ref
	ks := p.step()
	claim, err := ks.claim()
	if err != nil {
		return nil, err
	}
	ks.end(claim.stop)
	conds = append(conds, ks.verdict(CondClaim, ReasonClaimed, ""))
	if claim.stopped {
		return p.withInCluster(conds, nil)
	}
	ns := p.step()
	pools, err := ns.nodePools(ref)
	if err != nil {
		return nil, err
	}
	conds = append(conds, ns.verdict(CondNodePools, ReasonNodePoolsReady, ""))
	if pools.making {
		return p.withInCluster(conds, nil)
	}
	if conds, err = p.withUpgrade(conds, cr.cluster, pools.listed); err != nil {
		return nil, err
	}
	return p.withInCluster(conds, &ref)
}

// withInCluster appends the in-cluster step's condition: the step run on
// ref, or, when an earlier step stopped the pass (ref nil), the node daemon
// as the record has it while this pass did not read the provider.
func (p *pass) withInCluster(conds []Condition, ref *providers.ClusterRef) ([]Condition, error) {
	recorded := p.seen.DaemonApplied && !p.full
	if ref == nil {
		if recorded {
			conds = append(conds, Condition{Type: CondInCluster, Status: ConditionTrue, Reason: ReasonNodeDaemonApplied})
		}
		return conds, nil
	}
	s := p.step()
	in, err := s.inCluster(*ref)
	if err != nil {
		return nil, err
	}
	s.end(in.stop)
	c := s.verdict(CondInCluster, ReasonNodeDaemonApplied, "")
	if in.noDaemon && !recorded && c.Status == ConditionTrue {
		c.Status, c.Reason, c.Message = ConditionUnknown, ReasonNodeDaemonNotConfigured, NoDaemonMessage
	}
	return append(conds, c), nil
}

// lastInCluster is the in-cluster step's verdict as the last pass left it,
// for a pass that cannot run the step because the cluster is being
// upgraded: its Nodes run through the hop, and what needed a person there
// still does.
func (p *pass) lastInCluster() []Condition {
	for _, sc := range p.seen.Conditions {
		if sc.Type != CondInCluster {
			continue
		}
		c := Condition{Type: sc.Type, Status: sc.Status, Reason: sc.Reason, Message: sc.Message}
		switch sc.Status {
		case ConditionFalse:
			c.problems = []string{sc.Message}
		case ConditionUnknown:
			c.waits = []string{sc.Message}
		}
		return []Condition{c}
	}
	return nil
}

// teardownStep undoes the substrate: True (TornDown) once nothing of it is
// left, whatever it still says meanwhile.
func (p *pass) teardownStep() ([]Condition, error) {
	s := p.step()
	gone, err := s.teardown()
	if err != nil {
		return nil, err
	}
	if !gone {
		c := s.verdict(CondTeardown, ReasonTearingDown, "")
		if c.Status == ConditionTrue {
			c.Status = ConditionUnknown
		}
		return []Condition{c}, nil
	}
	why := "the pool was archived"
	if p.want.Teardown == state.TeardownRemoved {
		why = "policy.substrate was removed (with prune)"
	}
	c := s.verdict(CondTeardown, ReasonTornDown, "")
	c.Status, c.Reason, c.words = ConditionTrue, ReasonTornDown, "torn down: "+why
	c.Message = joined([]string{c.words}, c.notes)
	return []Condition{c}, nil
}

// orphansStep removes the orphans the sweep found (ok false: there are
// none): True (OrphansRemoved) once none is left.
func (p *pass) orphansStep() (c Condition, ok bool, err error) {
	if len(p.seen.Orphans) == 0 || p.prov == nil {
		return Condition{}, false, nil
	}
	s := p.step()
	if err := s.orphans(); err != nil {
		return Condition{}, false, err
	}
	c = s.verdict(CondOrphans, ReasonOrphansRemoved, "")
	switch {
	case len(p.seen.Orphans) == 0:
		c.Status, c.Reason = ConditionTrue, ReasonOrphansRemoved
	case c.Status == ConditionTrue:
		c.Status, c.Reason = ConditionUnknown, ReasonOrphansRemaining
	}
	return c, true, nil
}

// finish decides the substrate's state and message, writes what changed of
// the reconciler's half, and drops finished operations no generation needs.
func (p *pass) finish(conds []Condition) (time.Time, error) {
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
	state0, msg := summarize(p.want.Present, conds)
	if notes := r.foreignNotes(id); len(notes) > 0 {
		msg = strings.Join(append([]string{msg}, notes...), "; ")
	}
	s.State, s.Message = state0, msg
	s.Conditions = make([]state.SubstrateCondition, 0, len(conds))
	gone, readFailed, doubted := false, false, false
	for _, c := range conds {
		s.Conditions = append(s.Conditions, c.Stored())
		gone = gone || (c.Type == CondTeardown && c.Status == ConditionTrue)
		readFailed, doubted = readFailed || c.readFailed, doubted || c.doubted
	}
	s.Converged = converged(conds) && len(s.Orphans) == 0
	if gone {
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
		if op.State.Terminal() && (op.Generation < p.want.Generation || (gone && len(s.Orphans) == 0)) && s.Converged {
			drop = append(drop, key)
		}
	}
	err := r.store.UpdateIn(p.ctx, func(tx *state.Tx) error {
		var err error
		if old, err = tx.SubstrateSeen(id); err != nil {
			return err
		}
		if gone && s.Claim != "" {
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
			Str("detail", s.Message).Msg("substrate: state")
	}
	r.mu.Lock()
	if p.full && !readFailed && !doubted {
		r.verified[id] = true
	}
	if doubted {
		r.verified[id] = false
	}
	if !readFailed {
		delete(r.reads, id)
		delete(r.readAt, id)
	}
	r.mu.Unlock()
	next := requeue(conds)
	if next.IsZero() && !s.Converged {
		next = now.Add(r.opts.Poll)
	}
	return next, nil
}

// sameSeen compares two records but for their times.
func sameSeen(a, b state.SubstrateSeen) bool {
	a.UpdatedAt, b.UpdatedAt, a.StateSince, b.StateSince = 0, 0, 0, 0
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}
