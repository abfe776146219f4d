package substrate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/canon"
	"github.com/fleet-agent/fleet-agent/internal/fleet"
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
	p := &pass{r: r, ctx: ctx, ops: map[string]*state.JournalOp{}}
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

func (p *pass) clusterRef() providers.ClusterRef {
	if c := p.seen.Cluster; c != nil && c.ID != "" {
		return providers.ClusterRef{Location: c.Location, Name: c.Name, ID: c.ID}
	}
	if cr := p.want.Spec.Cluster.Create; cr != nil {
		return providers.ClusterRef{Location: cr.Location, Name: ClusterName(p.want.Pool, p.owner())}
	}
	return providers.ClusterRef{}
}

// present converges a substrate the document wants: the cluster, its claim,
// the node pools, then the in-cluster half.
func (p *pass) present() error {
	var (
		c   *providers.Cluster
		err error
	)
	if p.mode() == "adopt" {
		c, err = p.adopted()
	} else {
		c, err = p.created()
	}
	if err != nil || c == nil {
		return err
	}
	if ok, err := p.claim(); err != nil || !ok {
		return err
	}
	making, err := p.nodePools(c.Ref)
	if err != nil || making {
		return err
	}
	return p.inCluster(c.Ref)
}

// created makes (or finds again) the cluster a create-mode substrate owns
// and returns it once it runs; nil while it is not there yet.
func (p *pass) created() (*providers.Cluster, error) {
	cr := p.want.Spec.Cluster.Create
	name := ClusterName(p.want.Pool, p.owner())
	spec := providers.ClusterSpec{Name: name, Location: cr.Location, PrivateNodes: cr.PrivateNodes,
		Labels: p.owner().Labels()}
	// A delete left from a teardown the document took back is abandoned
	// where nothing runs at the provider yet, else followed until the
	// cluster is gone, and made again then.
	if op := p.pending(name, stepDeleteCluster); op != nil {
		out, err := p.drive(op, true)
		if err != nil || !p.take(out, "") {
			return nil, err
		}
	}
	for range 2 {
		var obs *providers.Cluster
		op := p.pending(name, stepCreateCluster)
		if op == nil && (p.seen.Cluster == nil || p.seen.Cluster.ID == "") {
			repeat := p.seen.Recreated
			if p.seen.GhostGeneration == p.want.Generation && p.seen.Ghosts > maxRepeats {
				// Like a node pool that keeps disappearing: made again a
				// few times, then the substrate says so instead of making
				// clusters without bound.
				p.problem("cluster %s was made %d times since the document last changed and keeps disappearing at the provider; fleet-agent stops making it again: find what deletes it (the provider's console or audit log), then change the substrate in the document to try again",
					name, p.seen.Ghosts+1)
				p.scheduled = true
				p.schedule(p.r.clock.Now().Add(p.r.opts.Every))
				return nil, nil
			}
			if old := p.ops[opKey(p.want.PoolID, stepCreateCluster, name, p.want.Generation, repeat)]; old != nil {
				if old.State == state.Failed {
					p.take(outcome{res: resFailed, message: p.describe(old) + ": " + failure(old)}, "")
					return nil, nil
				}
				// Succeeded but its record was lost: its result says
				// which cluster it made; the read below confirms it.
				var ref providers.ClusterRef
				if json.Unmarshal(old.Result, &ref) == nil && ref.ID != "" {
					p.seen.Cluster = &state.SeenCluster{ID: ref.ID, Name: ref.Name, Location: ref.Location}
				}
			}
			if p.seen.Cluster == nil || p.seen.Cluster.ID == "" {
				met, stop := p.meet(providers.ClusterRef{Location: cr.Location, Name: name})
				if stop {
					return nil, nil
				}
				if obs = met; obs == nil {
					var err error
					if op, err = p.open(stepCreateCluster, name, repeat, request{Create: &spec}); err != nil {
						return nil, err
					}
				}
			}
		}
		if op != nil {
			out, err := p.drive(op, false)
			if err != nil {
				return nil, err
			}
			if !p.take(out, "") {
				return nil, nil
			}
			obs = out.obs.cluster
		}
		if !p.full && obs == nil && p.seen.Cluster != nil {
			c := p.seen.Cluster
			return &providers.Cluster{Ref: p.clusterRef(), Status: providers.ClusterStatus(c.Status),
				Outputs: providers.ClusterOutputs{GlobalID: c.GlobalID, Endpoint: c.Endpoint, Version: c.Version, Location: c.Location}}, nil
		}
		if obs == nil || obs.Ref.ID == "" {
			c, err := p.prov.GetCluster(p.ctx, p.acct, p.clusterRef())
			if errors.Is(err, providers.ErrNotFound) {
				if err := p.ghost(); err != nil {
					return nil, err
				}
				continue // make it again
			}
			if err != nil {
				p.readFail("cluster "+name, err)
				return nil, nil
			}
			obs = &c
		}
		return p.settledCluster(*obs), nil
	}
	return nil, nil
}

// meet reads, before the substrate creates its cluster, what already
// holds the name at the location: nothing (create it), a cluster of ours
// (taken back: a state file restored from a backup, a record lost), or a
// cluster that is not ours, which is never converged: the pass stops and
// says whose it is.
func (p *pass) meet(ref providers.ClusterRef) (*providers.Cluster, bool) {
	c, err := p.prov.GetCluster(p.ctx, p.acct, ref)
	switch {
	case errors.Is(err, providers.ErrNotFound):
		return nil, false
	case err != nil:
		p.readFail("cluster "+ref.Name, err)
		return nil, true
	case !p.owner().Owns(c.Labels) || (c.Ref.Location != "" && c.Ref.Location != ref.Location):
		p.foreign(c)
		p.problem("cannot create cluster %s in %s: %s; fleet-agent never changes or deletes a cluster that is not its own. Delete or rename that cluster, or rename this pool",
			ref.Name, ref.Location, p.whose(c))
		p.scheduled = true
		p.schedule(p.r.clock.Now().Add(p.r.opts.Every))
		return nil, true
	}
	return &c, false
}

// whose says why a cluster is not this substrate's.
func (p *pass) whose(c providers.Cluster) string {
	o := p.owner()
	name := cmpOr(c.Ref.Name, c.Ref.ID)
	switch inst := o.Foreign(c.Labels); {
	case inst != "":
		return fmt.Sprintf("cluster %s belongs to installation %s (another fleet-agent state file using this account)", name, inst)
	case c.Labels[providers.LabelSubstratePool] == "":
		return fmt.Sprintf("cluster %s carries no %s label (not made by fleet-agent)", name, providers.LabelSubstratePool)
	case c.Labels[providers.LabelSubstratePool] != o.PoolID:
		return fmt.Sprintf("cluster %s belongs to pool id %s, not %s", name, c.Labels[providers.LabelSubstratePool], o.PoolID)
	case !o.Owns(c.Labels):
		return fmt.Sprintf("cluster %s carries no %s label", name, providers.LabelInstallation)
	}
	return fmt.Sprintf("cluster %s is in %s, not where the record says", name, cmpOr(c.Ref.Location, c.Outputs.Location))
}

// foreign logs and counts a cluster the pass found that is not its own and
// leaves alone.
func (p *pass) foreign(c providers.Cluster) {
	p.r.metrics.SweepDecision("foreign")
	p.r.log.Warn().Str("pool", p.want.Pool).Str("cluster", c.Ref.Name).Str("id", c.Ref.ID).
		Str("installation", c.Labels[providers.LabelInstallation]).Str("reason", p.whose(c)).
		Msg("substrate: a cluster that is not this substrate's; left alone")
}

// ghost forgets a created cluster that is gone at the provider, so that
// the pass makes it again (its claim goes with it).
func (p *pass) ghost() error {
	old := p.seen.Cluster
	if old == nil {
		old = &state.SeenCluster{Name: ClusterName(p.want.Pool, p.owner())}
	}
	p.r.log.Warn().Str("pool", p.want.Pool).Str("cluster", old.Name).Str("id", old.ID).
		Msg("substrate: the recorded cluster is gone at the provider; making it again")
	p.r.metrics.SweepDecision("ghost")
	claim := p.seen.Claim
	p.seen.Cluster, p.seen.Claim, p.seen.NodePools = nil, "", nil
	p.seen.Recreated++
	if p.seen.GhostGeneration != p.want.Generation {
		p.seen.GhostGeneration, p.seen.Ghosts = p.want.Generation, 0
	}
	p.seen.Ghosts++
	if err := p.r.alive(); err != nil {
		return err
	}
	seen := p.seen
	return p.r.store.Update(func(tx *state.Tx) error {
		if claim != "" {
			if err := tx.ReleaseCluster(claim, p.want.PoolID); err != nil {
				return err
			}
		}
		seen.Converged = false
		return tx.PutSubstrateSeen(seen)
	})
}

// settledCluster records an observed cluster and returns it when it runs.
func (p *pass) settledCluster(c providers.Cluster) *providers.Cluster {
	p.seen.Cluster = seenCluster(c, p.seen.Cluster)
	name := c.Ref.Name
	switch c.Status {
	case providers.ClusterRunning:
		return &c
	case providers.ClusterUpdating:
		// An upgrade keeps the API up; node pools wait for it to settle.
		p.wait(fmt.Sprintf("cluster %s is updating", name), p.r.clock.Now().Add(p.r.opts.Poll))
	case providers.ClusterError:
		p.problem("cluster %s is in error at the provider: %s; see the provider's console", name, cmpOr(c.Message, "no reason given"))
		p.scheduled = true
		p.schedule(p.r.clock.Now().Add(p.r.opts.Every))
	case providers.ClusterDeleting:
		p.wait(fmt.Sprintf("cluster %s is being deleted at the provider (not by fleet-agent); it is made again once it is gone", name), p.r.clock.Now().Add(p.r.opts.Poll))
	default:
		p.wait(fmt.Sprintf("cluster %s is %s", name, c.Status), p.r.clock.Now().Add(p.r.opts.Poll))
	}
	return nil
}

// adopted reads the cluster an adopt-mode substrate names; it is never
// created, changed or deleted.
func (p *pass) adopted() (*providers.Cluster, error) {
	id := p.want.Spec.Cluster.Adopt
	if !p.full && p.seen.Cluster != nil && p.seen.Cluster.ID != "" {
		c := p.seen.Cluster
		return &providers.Cluster{Ref: p.clusterRef(), Status: providers.ClusterStatus(c.Status),
			Outputs: providers.ClusterOutputs{GlobalID: c.GlobalID, Endpoint: c.Endpoint, Version: c.Version, Location: c.Location}}, nil
	}
	c, err := p.prov.ReadAdoptable(p.ctx, p.acct, id)
	if errors.Is(err, providers.ErrNotFound) {
		if p.seen.Cluster != nil {
			p.r.metrics.SweepDecision("ghost")
			p.r.log.Warn().Str("pool", p.want.Pool).Str("adopt", id).Msg("substrate: the adopted cluster is gone at the provider")
			p.problem("the adopted cluster %q is gone at the provider; adopt another cluster or remove policy.substrate (with prune)", id)
		} else {
			p.problem("cluster %q not found through provider account %q; check policy.substrate.cluster.adopt and the account's permissions", id, p.acct.Name)
		}
		p.scheduled = true
		p.schedule(p.r.clock.Now().Add(p.r.opts.Every))
		return nil, nil
	}
	if err != nil {
		p.readFail("cluster "+id, err)
		return nil, nil
	}
	return p.settledCluster(c), nil
}

// claim records the cluster's provider-global id as this pool's before any
// node pool is made: a second pool reaching the same cluster (through
// another account) is refused here and makes nothing.
func (p *pass) claim() (bool, error) {
	c := p.seen.Cluster
	key := c.GlobalID
	if key == "" {
		// A provider without a global id: the claim holds per account.
		key = p.acct.Provider + ":" + p.acct.Name + ":" + c.ID
	}
	if p.seen.Claim == key {
		return true, nil
	}
	if err := p.r.alive(); err != nil {
		return false, err
	}
	var holder, holderPool string
	holderCreated := false
	seen := p.seen
	err := p.r.store.Update(func(tx *state.Tx) error {
		var err error
		if holder, err = tx.ClaimCluster(key, p.want.PoolID); err != nil {
			return err
		}
		if holder != p.want.PoolID {
			if w, err := tx.SubstrateWant(holder); err == nil && w != nil {
				holderPool, holderCreated = w.Pool, w.Spec.Cluster.Create != nil
			}
			return nil
		}
		if seen.Claim != "" {
			if err := tx.ReleaseCluster(seen.Claim, p.want.PoolID); err != nil {
				return err
			}
		}
		seen.Claim = key
		return tx.PutSubstrateSeen(seen)
	})
	if err != nil {
		return false, err
	}
	if holder != p.want.PoolID {
		// What archiving the holder would do decides the advice: a
		// cluster the holder created is deleted with it, so it can never
		// be handed over that way.
		advice := "archiving that pool (leave it out of the document and apply with prune) removes only what fleet-agent put in the cluster and hands it over; or choose another cluster"
		if holderCreated {
			advice = "that pool created it, so archiving that pool deletes the cluster: choose another cluster (or create one with cluster.create)"
		}
		p.problem("cluster %s (%s) already backs pool %q; one cluster backs one pool: %s",
			cmpOr(c.Name, c.ID), key, cmpOr(holderPool, holder), advice)
		p.scheduled = true
		p.schedule(p.r.clock.Now().Add(p.r.opts.Every))
		p.r.log.Warn().Str("pool", p.want.Pool).Str("globalId", key).Str("holder", holder).Msg("substrate: cluster claimed by another pool; nothing is made in it")
		return false, nil
	}
	p.seen.Claim = key
	p.r.log.Info().Str("pool", p.want.Pool).Str("globalId", key).Msg("substrate: cluster claimed")
	return true, p.r.at(Point{Kind: PointTransition, PoolID: p.want.PoolID, Step: "claim"})
}

// nodePoolSpec is what a flavor asks of its node pool.
func nodePoolSpec(o providers.Owner, f fleet.SubstrateFlavor) providers.NodePoolSpec {
	s := providers.NodePoolSpec{
		Name:   o.NodePoolName(f.Name),
		Shape:  providers.Shape{MachineType: f.MachineType, Spot: f.Spot, Zones: slices.Clone(f.Zones)},
		Labels: o.PoolLabels(f.Spot),
	}
	if f.GPUs != nil {
		s.Accelerators = &providers.Accelerators{Type: f.GPUs.Type, Count: int(f.GPUs.Count)}
	}
	if f.DiskGiB != nil {
		s.DiskGiB = int(*f.DiskGiB)
	}
	switch {
	case f.Nodes != nil:
		s.NodeCount = int(*f.Nodes)
	case f.Autoscaling != nil:
		s.NodeCount = int(f.Autoscaling.MinNodes)
	default:
		// The documented surface leaves nodes optional without a default; one node
		// is the least every provider accepts for a fixed-size pool.
		s.NodeCount = 1
	}
	if a := f.Autoscaling; a != nil {
		s.Autoscaling = &providers.Autoscaling{MinNodes: int(a.MinNodes), MaxNodes: int(a.MaxNodes)}
	}
	return s
}

// sizeFor is the size to ask of an existing node pool: the wanted one, and
// with autoscaling the autoscaler's current count kept within the bounds.
func sizeFor(have providers.NodePool, want providers.Size) providers.Size {
	if want.Autoscaling == nil {
		return want
	}
	a := *want.Autoscaling
	return providers.Size{NodeCount: min(max(have.NodeCount, a.MinNodes), a.MaxNodes), Autoscaling: &a}
}

// nodePools converges one node pool per flavor and deletes those of
// removed flavors; making reports that a flavor's pool is still being made.
func (p *pass) nodePools(ref providers.ClusterRef) (bool, error) {
	if !p.full {
		return false, nil
	}
	list, err := p.prov.ListNodePools(p.ctx, p.acct, ref)
	if err != nil {
		if errors.Is(err, providers.ErrNotFound) {
			p.doubt()
		}
		p.readFail("the node pools of cluster "+ref.Name, err)
		return true, nil
	}
	listed := map[string]providers.NodePool{}
	for _, np := range list {
		listed[np.Name] = np
	}
	wanted := map[string]bool{}
	var seen []state.SeenNodePool
	making := false
	for _, f := range p.want.Spec.Flavors {
		sp, m, err := p.flavor(ref, f, listed)
		if err != nil {
			return true, err
		}
		wanted[sp.Name] = true
		seen = append(seen, sp)
		making = making || m
	}
	// What a removed flavor's node pool had in flight (its create, a
	// resize, when the document changed under it) is finished first:
	// abandoned where nothing runs at the provider yet, else followed to its
	// end; the delete below then finds the pool, never an operation left
	// open for ever (found by the exhaustive campaign).
	for _, key := range p.keys() {
		op := p.ops[key]
		if op.State.Terminal() || isDelete(op.Step) || !slices.Contains(nodePoolSteps, op.Step) || wanted[op.Object] || strings.HasPrefix(op.Object, orphanPrefix) {
			continue
		}
		out, err := p.drive(op, true)
		if err != nil {
			return true, err
		}
		if out.res == resWait {
			p.take(out, "flavor removed")
		}
	}
	for _, np := range list {
		if wanted[np.Name] || !p.ours(np) {
			continue
		}
		gone, err := p.deleteNodePool(ref, "", np.Name, "flavor removed")
		if err != nil {
			return true, err
		}
		if !gone {
			seen = append(seen, state.SeenNodePool{Name: np.Name, Status: string(providers.NodePoolDeleting), Nodes: np.NodeCount, Message: "flavor removed; deleting"})
		}
	}
	if err := p.settleUnlisted("", listed, wanted); err != nil {
		return true, err
	}
	p.seen.NodePools = seen
	return making, nil
}

// ours reports whether a node pool is one this substrate made: its labels
// name the pool and the installation, and its name has the substrate's
// prefix. A pool of the owner's own on an adopted cluster is never either,
// nor one another installation made.
func (p *pass) ours(np providers.NodePool) bool {
	o := p.owner()
	return o.Owns(np.Labels) && o.OwnsNodePoolName(np.Name)
}

var nodePoolSteps = []string{stepCreateNodePool, stepUpdateNodePool, stepResizeNodePool, stepDeleteNodePool}

// flavor converges one flavor's node pool. A refusal is this flavor's
// error; the others go on.
func (p *pass) flavor(ref providers.ClusterRef, f fleet.SubstrateFlavor, listed map[string]providers.NodePool) (state.SeenNodePool, bool, error) {
	want := nodePoolSpec(p.owner(), f)
	name := want.Name
	sp := state.SeenNodePool{Flavor: f.Name, Name: name, Status: "missing"}
	label := "flavor " + f.Name
	np, exists := listed[name]
	fileOut := func(out outcome) {
		if out.message != "" {
			sp.Message = out.message
		}
		p.take(out, label)
	}
	if op := p.pending(name, nodePoolSteps...); op != nil {
		stale := op.Generation < p.want.Generation && op.Step != stepCreateNodePool && op.Step != stepDeleteNodePool
		out, err := p.drive(op, stale)
		if err != nil {
			return sp, true, err
		}
		switch out.res {
		case resDone:
			if out.obs.pool != nil && op.Step != stepDeleteNodePool {
				np, exists = *out.obs.pool, true
			} else if op.Step == stepDeleteNodePool {
				exists = false
			}
		case resSuperseded:
		case resFailed:
			if op.Generation == p.want.Generation {
				fileOut(out)
				return sp, false, nil
			}
		default:
			if exists {
				sp.Status, sp.Nodes = string(np.Status), np.NodeCount
			}
			fileOut(out)
			return sp, out.res == resWait && op.Step == stepCreateNodePool, nil
		}
	}
	if !exists {
		repeat, last := p.last(stepCreateNodePool, name)
		if last != nil && last.State == state.Failed {
			fileOut(outcome{res: resFailed, message: p.describe(last) + ": " + failure(last)})
			return sp, false, nil
		}
		if last != nil {
			// Made at this generation and gone since: a ghost.
			repeat++
			p.r.metrics.SweepDecision("nodePoolGhost")
			p.r.log.Warn().Str("pool", p.want.Pool).Str("nodePool", name).Msg("substrate: a node pool made before is gone at the provider; making it again")
		}
		if repeat > maxRepeats {
			p.problem("%s: node pool %s was made %d times and keeps disappearing at the provider; see the provider's console", label, name, repeat)
			return sp, false, nil
		}
		op, err := p.open(stepCreateNodePool, name, repeat, request{Cluster: ref, NodePool: &want})
		if err != nil {
			return sp, true, err
		}
		out, err := p.drive(op, false)
		if err != nil {
			return sp, true, err
		}
		if out.res != resDone {
			fileOut(out)
			return sp, out.res == resWait, nil
		}
		if out.obs.pool == nil {
			return sp, true, nil
		}
		np = *out.obs.pool
	}
	sp.Status, sp.Nodes = string(np.Status), np.NodeCount
	now := p.r.clock.Now()
	switch np.Status {
	case providers.NodePoolProvisioning, providers.NodePoolUpdating:
		p.wait(fmt.Sprintf("%s: node pool %s is %s", label, name, np.Status), now.Add(p.r.opts.Poll))
		return sp, np.Status == providers.NodePoolProvisioning, nil
	case providers.NodePoolDeleting:
		p.wait(fmt.Sprintf("%s: node pool %s is being deleted at the provider (not by fleet-agent); it is made again once it is gone", label, name), now.Add(p.r.opts.Poll))
		return sp, true, nil
	case providers.NodePoolError:
		sp.Message = cmpOr(np.Message, "in error at the provider")
		p.problem("%s: node pool %s is in error at the provider: %s; see the provider's console", label, name, sp.Message)
		return sp, false, nil
	}
	var (
		step string
		req  request
	)
	switch {
	case !shapeMatches(np.Shape, want.Shape) || !labelsHold(np.Labels, want.Labels):
		upd := want
		upd.Size = sizeFor(np, want.Size)
		step, req = stepUpdateNodePool, request{Cluster: ref, NodePool: &upd}
	case !sizeMatches(np.Size, want.Size):
		size := sizeFor(np, want.Size)
		step, req = stepResizeNodePool, request{Cluster: ref, Name: name, Size: &size}
	default:
		return sp, false, nil
	}
	repeat, last := p.last(step, name)
	if last != nil && last.State == state.Failed {
		fileOut(outcome{res: resFailed, message: p.describe(last) + ": " + failure(last)})
		return sp, false, nil
	}
	if last != nil {
		repeat++
	}
	if repeat > maxRepeats {
		p.problem("%s: node pool %s still differs from the document after %d changes; the provider keeps another value (see its console)", label, name, repeat)
		return sp, false, nil
	}
	op, err := p.open(step, name, repeat, req)
	if err != nil {
		return sp, true, err
	}
	out, err := p.drive(op, false)
	if err != nil {
		return sp, true, err
	}
	if out.obs.pool != nil {
		sp.Status, sp.Nodes = string(out.obs.pool.Status), out.obs.pool.NodeCount
	}
	if out.res != resDone {
		fileOut(out)
	}
	return sp, false, nil
}

// deleteNodePool deletes one of our node pools; gone reports it is.
func (p *pass) deleteNodePool(ref providers.ClusterRef, prefix, name, why string) (bool, error) {
	object := prefix + name
	op := p.pending(object, stepDeleteNodePool)
	if op == nil {
		repeat, last := p.last(stepDeleteNodePool, object)
		if last != nil {
			repeat++
		}
		if repeat > maxRepeats {
			p.problem("node pool %s was deleted %d times and keeps coming back at the provider (%s); fleet-agent stops deleting it: find what makes it again (the provider's console or audit log), then change the substrate in the document to try again",
				name, repeat, why)
			return false, nil
		}
		var err error
		if op, err = p.open(stepDeleteNodePool, object, repeat, request{Cluster: ref, Name: name}); err != nil {
			return false, err
		}
	}
	out, err := p.drive(op, false)
	if err != nil {
		return false, err
	}
	if out.res == resDone {
		p.r.log.Info().Str("pool", p.want.Pool).Str("nodePool", name).Str("why", why).Msg("substrate: node pool deleted")
		return true, nil
	}
	p.take(out, why)
	return false, nil
}

// inCluster hands a running cluster to the in-cluster half.
func (p *pass) inCluster(ref providers.ClusterRef) error {
	seam := p.r.opts.InCluster
	if seam == nil {
		p.noDaemon = true
		return nil
	}
	if err := p.r.alive(); err != nil {
		return err
	}
	if p.mode() == "adopt" && !p.seen.DaemonApplied && !p.seen.DaemonIntent {
		// The intent first, as the journal does for provider calls: what
		// the call puts in a cluster we do not delete must be found by the
		// teardown even if the agent dies before this pass is recorded.
		seen := p.seen
		seen.DaemonIntent = true
		if err := p.r.store.Update(func(tx *state.Tx) error { return tx.PutSubstrateSeen(seen) }); err != nil {
			return err
		}
		p.seen.DaemonIntent = true
	}
	n, err := seam.Apply(p.ctx, p.target(ref))
	if err != nil {
		p.problem("node daemon: %v", err)
		p.schedule(p.r.clock.Now().Add(p.r.opts.Every))
		return nil
	}
	p.applied = true
	p.seen.DaemonApplied = true
	p.seen.Nodes = state.SeenNodes{Listed: n.Listed, Joined: n.Joined}
	p.seen.Waiting = state.WaitingToJoin{Count: max(n.Listed-n.Joined, 0)}
	if !n.WaitingSince.IsZero() && p.seen.Waiting.Count > 0 {
		p.seen.Waiting.Since = n.WaitingSince.UnixMilli()
	}
	if n.Message != "" {
		p.notes = append(p.notes, n.Message)
	}
	return nil
}

func (p *pass) target(ref providers.ClusterRef) Target {
	prov, acct := p.prov, p.acct
	t := Target{PoolID: p.want.PoolID, Pool: p.want.Pool, Tenant: p.want.Tenant, Owner: p.owner(), Mode: p.mode(), Account: acct, Cluster: ref,
		NodePools: slices.Clone(p.seen.NodePools),
		Credentials: func(ctx context.Context) (providers.Credential, error) {
			return prov.Credentials(ctx, acct, ref)
		},
		RevokeAccess: func(ctx context.Context) error { return prov.RevokeAccess(ctx, acct, ref) },
	}
	if p.seen.Cluster != nil {
		t.GlobalID = p.seen.Cluster.GlobalID
	}
	return t
}

// teardown undoes a substrate: the in-cluster half first, then our node
// pools, then a created cluster; on an adopted cluster only our node pools.
func (p *pass) teardown() error {
	// What present passes left open is abandoned: the teardown finds what
	// they made by name and label.
	for _, key := range p.keys() {
		op := p.ops[key]
		if op.State.Terminal() || isDelete(op.Step) {
			continue
		}
		if err := p.move(op, Abandon, nil, nil); err != nil {
			return err
		}
	}
	ref := p.clusterRef()
	if ref.Name == "" && ref.ID == "" {
		p.gone = true // adopted, never read: nothing of ours is in it
		return nil
	}
	if p.seen.DaemonApplied || p.seen.DaemonIntent {
		seam := p.r.opts.InCluster
		retry := p.r.clock.Now().Add(AdoptedRetry)
		if seam == nil {
			p.wait("the node daemon was applied by an agent configured with substrate.nodeDaemon; configure it again so that the teardown can remove it", retry)
			return nil
		}
		p.r.mu.Lock()
		held := p.r.daemonRetry[p.want.PoolID]
		p.r.mu.Unlock()
		if p.r.clock.Now().Before(held.at) {
			p.wait(held.msg, held.at)
			return nil
		}
		if err := p.r.alive(); err != nil {
			return err
		}
		if err := seam.Teardown(p.ctx, p.target(ref)); err != nil {
			msg := fmt.Sprintf("removing the node daemon: %v; trying again at %s", err, retry.UTC().Format(time.RFC3339))
			p.r.mu.Lock()
			p.r.daemonRetry[p.want.PoolID] = retryNote{at: retry, msg: msg}
			p.r.mu.Unlock()
			p.wait(msg, retry)
			return nil
		}
		p.seen.DaemonApplied, p.seen.DaemonIntent = false, false
		p.seen.Nodes, p.seen.Waiting = state.SeenNodes{}, state.WaitingToJoin{}
	}
	if p.mode() == "create" {
		if err := p.sayWhoWaits(); err != nil {
			return err
		}
	}
	gone, err := p.removeCluster(ref, "", p.mode() == "create")
	if err != nil {
		return err
	}
	p.gone = gone
	return nil
}

// sayWhoWaits tells, before a created cluster is deleted, which other
// pools are waiting to adopt it (their claim refused because this pool
// holds it): the teardown goes on, since the document asks for it, but
// never without saying so.
func (p *pass) sayWhoWaits() error {
	key := p.seen.Claim
	if key == "" {
		return nil
	}
	var waiting []string
	err := p.r.store.View(func(tx *state.Tx) error {
		recs, err := tx.Substrates()
		for _, rec := range recs {
			if rec.Want.PoolID == p.want.PoolID || !rec.Want.Present || rec.Want.Spec.Cluster.Adopt == "" || rec.Seen == nil || rec.Seen.Cluster == nil {
				continue
			}
			if rec.Seen.Cluster.GlobalID == key && rec.Seen.Claim != key {
				waiting = append(waiting, rec.Want.Pool)
			}
		}
		return err
	})
	if err != nil || len(waiting) == 0 {
		return err
	}
	sort.Strings(waiting)
	msg := fmt.Sprintf("pool %s waits to adopt this cluster, but pool %s created it, so its teardown deletes it", strings.Join(waiting, ", "), p.want.Pool)
	p.notes = append(p.notes, msg)
	p.waits = append(p.waits, msg) // said while it is deleting, too
	p.r.log.Warn().Str("pool", p.want.Pool).Strs("waiting", waiting).Msg("substrate: " + msg)
	return nil
}

// removeCluster deletes what the substrate made in a cluster: its node
// pools (only ours), then, with del, the cluster. gone reports that nothing
// is left to do.
func (p *pass) removeCluster(ref providers.ClusterRef, prefix string, del bool) (bool, error) {
	c, err := p.prov.GetCluster(p.ctx, p.acct, ref)
	if errors.Is(err, providers.ErrNotFound) {
		return true, p.settleGone(prefix)
	}
	if err != nil {
		p.readFail("cluster "+cmpOr(ref.Name, ref.ID), err)
		return false, nil
	}
	if del && !p.owner().Owns(c.Labels) {
		// Deleted only when its labels say it is ours: a recorded id or a
		// name is not enough (another installation's cluster, labels taken
		// off by hand). The substrate lets go of it and says so.
		p.foreign(c)
		p.notes = append(p.notes, "left "+p.whose(c)+" in place: fleet-agent deletes only clusters carrying its labels")
		for _, key := range p.keys() {
			if op := p.ops[key]; op.Step == stepDeleteCluster && op.Object == prefix+c.Ref.Name && !op.State.Terminal() && op.State != state.InFlight {
				if err := p.move(op, Abandon, nil, nil); err != nil {
					return false, err
				}
			}
		}
		return true, nil
	}
	if prefix == "" {
		p.seen.Cluster = seenCluster(c, p.seen.Cluster)
	}
	if c.Status != providers.ClusterDeleting {
		list, err := p.prov.ListNodePools(p.ctx, p.acct, c.Ref)
		if err != nil && !errors.Is(err, providers.ErrNotFound) {
			p.readFail("the node pools of cluster "+c.Ref.Name, err)
			return false, nil
		}
		listed := map[string]providers.NodePool{}
		busy := false
		for _, np := range list {
			listed[np.Name] = np
			if !p.ours(np) {
				continue
			}
			gone, err := p.deleteNodePool(c.Ref, prefix, np.Name, "teardown")
			if err != nil {
				return false, err
			}
			busy = busy || !gone
		}
		if err := p.settleUnlisted(prefix, listed, nil); err != nil {
			return false, err
		}
		if busy {
			return false, nil
		}
		if prefix == "" {
			p.seen.NodePools = nil
		}
	}
	if !del {
		return true, nil
	}
	object := prefix + c.Ref.Name
	op := p.pending(object, stepDeleteCluster)
	if op == nil {
		repeat, last := p.last(stepDeleteCluster, object)
		if last != nil {
			repeat++
		}
		if repeat > maxRepeats {
			p.problem("cluster %s was deleted %d times and keeps coming back at the provider; fleet-agent stops deleting it: find what makes it again (the provider's console or audit log), then apply again to try again",
				c.Ref.Name, repeat)
			p.scheduled = true
			p.schedule(p.r.clock.Now().Add(p.r.opts.Every))
			return false, nil
		}
		if op, err = p.open(stepDeleteCluster, object, repeat, request{Cluster: c.Ref}); err != nil {
			return false, err
		}
	}
	out, err := p.drive(op, false)
	if err != nil {
		return false, err
	}
	if prefix == "" {
		p.seen.Teardown = nil
		if op.Refusals > 0 {
			p.seen.Teardown = &state.TeardownRetry{Refusals: op.Refusals, NextAttemptAt: op.NextAttemptAt}
		}
		p.refused = out.res == resRefused
	}
	if out.res == resDone {
		return true, p.settleGone(prefix)
	}
	p.take(out, "")
	return false, nil
}

// settleUnlisted finishes the node pool deletes (of objects with prefix)
// whose pool the listing no longer shows: a delete accepted before a crash
// is settled by its read-back, which finds the pool gone. Wanted pools'
// operations are their flavors' business.
func (p *pass) settleUnlisted(prefix string, listed map[string]providers.NodePool, wanted map[string]bool) error {
	for _, key := range p.keys() {
		op := p.ops[key]
		name, ok := strings.CutPrefix(op.Object, prefix)
		if op.Step != stepDeleteNodePool || op.State.Terminal() || !ok || wanted[name] {
			continue
		}
		if prefix == "" && strings.HasPrefix(op.Object, orphanPrefix) {
			continue
		}
		if _, isListed := listed[name]; isListed {
			continue
		}
		if err := p.settle(op); err != nil {
			return err
		}
	}
	return nil
}

// settle drives an operation whose object a fresh read showed gone: a wait
// it was holding (a backoff after a failed read-back) no longer applies.
func (p *pass) settle(op *state.JournalOp) error {
	if op.NextAttemptAt > 0 && op.State != state.InFlight {
		if err := p.move(op, Defer, func(o *state.JournalOp) { o.NextAttemptAt = 0 }, nil); err != nil {
			return err
		}
	}
	out, err := p.drive(op, false)
	if err != nil {
		return err
	}
	p.take(out, "")
	return nil
}

// settleGone finishes the delete operations of a cluster that is gone
// (their read-backs find it gone).
func (p *pass) settleGone(prefix string) error {
	for _, key := range p.keys() {
		op := p.ops[key]
		if !isDelete(op.Step) || op.State.Terminal() || !strings.HasPrefix(op.Object, prefix) {
			continue
		}
		if prefix == "" && strings.HasPrefix(op.Object, orphanPrefix) {
			continue
		}
		if err := p.settle(op); err != nil {
			return err
		}
	}
	return nil
}

// orphanPrefix keeps the objects of an orphan's operations apart from the
// substrate's own.
const orphanPrefix = "orphan-"

// orphans removes the clusters the discovery sweep found carrying this
// pool's label that the substrate does not use.
func (p *pass) orphans() error {
	if len(p.seen.Orphans) == 0 || p.prov == nil {
		return nil
	}
	var kept []state.SeenCluster
	for _, o := range p.seen.Orphans {
		ref := providers.ClusterRef{ID: o.ID, Name: o.Name, Location: o.Location}
		gone, err := p.removeCluster(ref, orphanPrefix+o.ID+":", true)
		if err != nil {
			return err
		}
		if gone {
			p.r.log.Info().Str("pool", p.want.Pool).Str("cluster", o.Name).Str("id", o.ID).Msg("substrate: orphan cluster removed")
			continue
		}
		kept = append(kept, o)
	}
	p.seen.Orphans = kept
	return nil
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
	err := r.store.Update(func(tx *state.Tx) error {
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
