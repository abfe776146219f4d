package state

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

// Leadership is one term of this store's hold on the election of its
// prefix: etcd's election recipe on a lease of our own. While it holds,
// Update commits; every commit compares the election key's create revision
// with the one won here in the same etcd transaction, so a leader that was
// paused past its lease, or cut off, can never write after another agent
// took over.
//
// A write is fenced by etcd itself. A call to a provider or a post to
// GitHub is not: the agent asks the term's fence (FencedIn) right before
// each. It answers from the last lease renewal: a renewal is good for two
// thirds of the lease from when it was sent (etcd renewed the lease after
// that, so etcd's lease outlives the hold by a third of the lease), on a
// clock that counts a suspended machine's time (CLOCK_BOOTTIME), so a
// process that was stopped or suspended finds its hold expired on waking,
// before etcd could have handed the leadership on. A side effect started in
// one term is refused once that term ended, even when the same process
// leads again: the next term is another Leadership.
type Leadership struct {
	be    *etcdBackend
	key   string
	rev   int64
	lease clientv3.LeaseID

	mu         sync.Mutex
	validUntil time.Duration // on be.clock
	wonAt      time.Duration // on be.clock: when the store began to act as the leader
	lost       chan struct{}
	lostWhy    string
	cancel     context.CancelFunc
	election   *concurrency.Election
}

// Lead blocks until this store leads its prefix, or ctx ends. On bbolt it
// returns at once (one process holds the file: it leads).
func (s *Store) Lead(ctx context.Context) (*Leadership, error) { return s.be.campaign(ctx) }

// Leading reports whether this store may write now.
func (s *Store) Leading() bool { return s.be.mayWrite() }

func (be *etcdBackend) mayWrite() bool {
	l := be.leading()
	return l != nil && l.valid()
}

// Fenced is nil while this store leads with a lease that holds now: the
// check before an action outside the store made outside a term (FencedIn
// is the check inside one).
func (s *Store) Fenced() error { return s.be.fence(nil) }

type termKey struct{}

// WithTerm returns ctx carrying the term l: the side effects made under
// ctx are fenced by that term (FencedIn), not by whichever term the store
// is in when they run.
func WithTerm(ctx context.Context, l *Leadership) context.Context {
	return context.WithValue(ctx, termKey{}, l)
}

// FencedIn is nil while the term ctx carries (WithTerm) is this store's
// current term and its hold is good now. Without a term in ctx it is
// Fenced.
func (s *Store) FencedIn(ctx context.Context) error { return s.be.fence(termOf(ctx)) }

// termOf is the term ctx carries (WithTerm); nil when none.
func termOf(ctx context.Context) *Leadership {
	l, _ := ctx.Value(termKey{}).(*Leadership)
	return l
}

func (be *etcdBackend) fence(l *Leadership) error {
	if l == nil && be.mayWrite() || l != nil && be.leading() == l && l.valid() {
		return nil
	}
	be.stats.FencedRefused.Add(1)
	return be.notLeader()
}

// Term is the term's number: the election key's create revision, which
// grows with every term of the prefix (0 on bbolt).
func (l *Leadership) Term() int64 { return l.rev }

// Leader names the agent that leads the store's prefix ("" when none); on
// bbolt, "".
func (s *Store) Leader(ctx context.Context) (string, error) { return s.be.leaderName(ctx) }

func (be *etcdBackend) leaderName(context.Context) (string, error) {
	r, err := be.get(be.leaderPfx(), clientv3.WithFirstCreate()...)
	if err != nil {
		return "", err
	}
	if len(r.Kvs) == 0 {
		return "", nil
	}
	return string(r.Kvs[0].Value), nil
}

// Name is this agent's name in the election ("" on bbolt).
func (s *Store) Name() string { return s.be.agentName() }

func (be *etcdBackend) agentName() string { return be.name }

func (be *etcdBackend) leading() *Leadership {
	be.mu.Lock()
	defer be.mu.Unlock()
	return be.lead
}

func (be *etcdBackend) campaign(ctx context.Context) (*Leadership, error) {
	// Whole seconds, rounded up: etcd's lease never ends before the hold
	// it backs (two thirds of state.etcd.lease).
	ttl := int64((be.lease + time.Second - 1) / time.Second)
	// The hold counts from before the grant was asked for: etcd's lease
	// started after that, however long the answer took to come back.
	asked := be.clock()
	gctx, gcancel := be.ctx()
	grant, err := be.cli.Grant(gctx, ttl)
	gcancel()
	if err != nil {
		return nil, refusal.Wrap(refusal.Unavailable, err, "cannot take a lease from etcd")
	}
	lctx, cancel := context.WithCancel(context.Background())
	l := &Leadership{be: be, lease: grant.ID, lost: make(chan struct{}), cancel: cancel}
	l.renewed(asked)
	session, err := concurrency.NewSession(be.cli, concurrency.WithLease(grant.ID), concurrency.WithContext(lctx))
	if err != nil {
		l.lose("cannot open an etcd session")
		return nil, refusal.Wrap(refusal.Unavailable, err, "cannot open an etcd session")
	}
	l.election = concurrency.NewElection(session, be.leaderPfx())
	// Renewals keep the hold valid while campaigning, too: a campaign can
	// wait for as long as another agent leads.
	go l.renew(lctx)
	// A campaign whose lease lapsed (etcd unreachable for longer than the
	// hold) stops: its key is revoked, and waiting on would only win a
	// leadership it no longer holds.
	cctx, ccancel := context.WithCancel(ctx)
	defer ccancel()
	go func() {
		select {
		case <-l.lost:
			ccancel()
		case <-cctx.Done():
		}
	}()
	// A campaign waits on the key before its own with a watch from the
	// revision it read; a compaction between that read and the watch
	// fails the wait (ErrCompacted). The campaign is taken up again on the
	// same key: its place in the queue is kept, the wait starts afresh.
	be.warnSameName(grant.ID)
	err = l.election.Campaign(cctx, be.name)
	for errors.Is(err, rpctypes.ErrCompacted) && cctx.Err() == nil {
		be.stats.CampaignsResumed.Add(1)
		err = l.election.Campaign(cctx, be.name)
	}
	if err != nil {
		why := l.Why()
		l.lose("the campaign ended")
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if why != "" {
			return nil, refusal.New(refusal.Unavailable, "the lease lapsed while campaigning (%s); check that a quorum of etcd members is up", why)
		}
		return nil, refusal.Wrap(refusal.Unavailable, err, "the etcd election failed")
	}
	l.key, l.rev = l.election.Key(), l.election.Rev()
	// The watch starts from a read made now, not from the revision the
	// campaign started at: a campaign that waited through a compaction
	// would watch from a revision etcd no longer has.
	from, err := l.check()
	if err != nil {
		l.lose("cannot read the election key after winning: " + err.Error())
		return nil, err
	}
	if !l.valid() {
		l.lose("the lease lapsed while campaigning")
		return nil, be.notLeader()
	}
	go l.watch(lctx, from)
	go l.expire(lctx)
	// A commit a previous leader made visible but did not finish is
	// finished first, so nothing is written over it. The store answers as
	// the leader (Leading, the leader metric) only once that is done: an
	// agent that won the key but cannot finish (etcd too slow) never said
	// it led.
	if err := be.finishPending(l); err != nil {
		l.lose("cannot finish the previous leader's commit: " + err.Error())
		return nil, err
	}
	be.mu.Lock()
	select {
	case <-l.lost:
		be.mu.Unlock()
		return nil, refusal.New(refusal.Unavailable, "the leadership was lost as it began (%s); check that a quorum of etcd members is up", l.Why())
	default:
	}
	l.mu.Lock()
	l.wonAt = be.clock()
	l.mu.Unlock()
	be.lead = l
	be.mu.Unlock()
	be.stats.Transitions.Add(1)
	return l, nil
}

// check reads the election key: an error when it is gone or no longer
// ours (the leadership is then lost), else the revision to watch from.
func (l *Leadership) check() (int64, error) {
	r, err := l.be.get(l.key)
	if err != nil {
		return 0, err
	}
	if len(r.Kvs) == 0 || r.Kvs[0].CreateRevision != l.rev || r.Kvs[0].Lease != int64(l.lease) {
		l.lose("the election key is gone or no longer ours")
		return 0, l.be.notLeader()
	}
	return r.Header.Revision + 1, nil
}

// finishPending rolls forward the commit a previous leader made visible,
// then drops the chunks no head names (a leader that died, or failed,
// before its commit point): at the start of a term no other writer of
// this prefix is fenced in, so every such chunk is an orphan.
func (be *etcdBackend) finishPending(l *Leadership) error {
	be.writeMu.Lock()
	defer be.writeMu.Unlock()
	tx, err := be.begin(true)
	if err != nil {
		return err
	}
	if tx.head.Pending != "" {
		if err := be.rollForward(tx, l); err != nil {
			return err
		}
		if tx, err = be.begin(true); err != nil {
			return err
		}
	}
	if be.prepareLater != nil {
		if err := be.commit(be.prepareLater, l); err != nil {
			return err
		}
		be.prepareLater = nil
		if tx, err = be.begin(true); err != nil {
			return err
		}
	}
	r, err := be.get(be.pendingPfx(), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || r.Count == 0 {
		return err
	}
	// The head is written with the sweep: an unfenced writer (a copy into
	// an empty prefix) whose chunks were swept then fails at its commit
	// point on the head it read, instead of pointing the head at nothing.
	tr, err := be.txn(be.guards(tx.headRev, l), []clientv3.Op{
		clientv3.OpDelete(be.pendingPfx(), clientv3.WithPrefix()),
		clientv3.OpPut(be.headKey(), be.headValue(etcdHead{})),
	})
	if err != nil {
		return err
	}
	if !tr.Succeeded {
		return be.whyRefused(l)
	}
	return nil
}

// renewed records a renewal sent at a time on be.clock and answered: the
// hold is good for two thirds of the lease from then. A renewal answered
// after the hold lapsed revives it: etcd renewed the lease when it got the
// request, after it was sent, so the lease (and the election key with it)
// outlives the hold counted from the sending, and no other agent can have
// won meanwhile. A hold that lapsed refused every side effect while it
// was lapsed; the term goes on.
func (l *Leadership) renewed(sent time.Duration) {
	l.mu.Lock()
	if u := sent + l.be.lease*2/3; u > l.validUntil {
		l.validUntil = u
	}
	l.mu.Unlock()
}

// renew sends a renewal of the lease every sixth of it, each its own
// request with a deadline of half the lease, without waiting for the one
// before: a renewal that hangs (an etcd member stopped with its connection
// up) does not hold back the next, which the client sends to another
// member, and a slow answer on a busy machine still counts from when it
// was sent. The hold (two thirds of the lease from the latest renewal
// sent and answered) outlasts three renewals lost in a row.
func (l *Leadership) renew(ctx context.Context) {
	every := l.be.lease / 6
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		sent := l.be.clock()
		go func() {
			rctx, cancel := context.WithTimeout(ctx, l.be.lease/2)
			defer cancel()
			r, err := l.be.cli.KeepAliveOnce(rctx, l.lease)
			switch {
			case errors.Is(err, rpctypes.ErrLeaseNotFound), err == nil && r.TTL <= 0:
				l.lose("etcd says the lease expired")
			case err == nil:
				l.renewed(sent)
			}
		}()
		select {
		case <-ctx.Done():
			return
		case <-l.lost:
			return
		case <-t.C:
		}
	}
}

// watch loses the leadership when the election key goes. It watches from a revision read after the key was
// won (check); when the watch fails (etcd compacted past it, or it lost
// etcd's leader) it reads the key again and watches on from that read, or
// loses the leadership when the key is gone or not ours.
func (l *Leadership) watch(ctx context.Context, from int64) {
	wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	wch := l.be.cli.Watch(wctx, l.key, clientv3.WithRev(from))
	defer func() { wcancel() }()
	rewatch := func() bool {
		wcancel()
		for {
			next, err := l.check()
			if err == nil {
				wctx, wcancel = context.WithCancel(clientv3.WithRequireLeader(ctx))
				wch = l.be.cli.Watch(wctx, l.key, clientv3.WithRev(next))
				return true
			}
			if !l.valid() || errors.Is(err, ErrNotLeader) {
				l.lose("the election key is gone or no longer ours")
				return false
			}
			select {
			case <-l.lost:
				return false
			case <-time.After(l.be.lease / 12):
			}
		}
	}
	for {
		select {
		case <-l.lost:
			return
		case w, ok := <-wch:
			if !ok {
				if ctx.Err() != nil {
					return
				}
				if !rewatch() {
					return
				}
				continue
			}
			for _, ev := range w.Events {
				if ev.Type == clientv3.EventTypeDelete {
					l.lose("the election key was deleted: the lease expired or it was removed")
					return
				}
			}
			if w.Err() != nil || w.Canceled {
				if !rewatch() {
					return
				}
			}
		}
	}
}

// expire ends the term when the hold lapses. It runs apart from the watch,
// which can be held up by an etcd that does not answer (opening a watch
// waits on the client's stream): the end of a hold never waits for etcd.
func (l *Leadership) expire(ctx context.Context) {
	t := time.NewTimer(l.untilNow() + l.be.lease/3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.lost:
			return
		case <-t.C:
			l.valid() // ends the term once the lease may have run out
			select {
			case <-l.lost:
				return
			default:
			}
			t.Reset(max(l.untilNow()+l.be.lease/3, 0) + time.Millisecond)
		}
	}
}

// untilNow is how long the hold lasts from now.
func (l *Leadership) untilNow() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.validUntil - l.be.clock()
}

// valid reports whether the hold is good now. A lapsed hold refuses, and
// ends the term once the lease itself may have run out at etcd (a lease
// from the latest renewal answered): until then a renewal answered late
// (etcd electing a new raft leader, a busy machine) revives it.
func (l *Leadership) valid() bool {
	l.mu.Lock()
	select {
	case <-l.lost:
		l.mu.Unlock()
		return false
	default:
	}
	if l.be == nil {
		l.mu.Unlock()
		return true
	}
	now := l.be.clock()
	if now < l.validUntil {
		l.mu.Unlock()
		return true
	}
	if now < l.validUntil+l.be.lease/3 {
		l.mu.Unlock()
		l.be.stats.HoldLapses.Add(1)
		return false
	}
	l.mu.Unlock()
	l.lose("no lease renewal came in time: the lease may have run out at etcd")
	return false
}

// fence is the comparison every fenced commit carries.
func (l *Leadership) fence() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(l.key), "=", l.rev)
}

// lose ends the leadership once, and revokes its lease: the election key
// goes with it, so a standby takes over now, not a lease later (a lease
// that etcd already dropped makes the revoke a no-op).
func (l *Leadership) lose(why string) {
	l.mu.Lock()
	select {
	case <-l.lost:
		l.mu.Unlock()
		return
	default:
	}
	l.lostWhy = why
	close(l.lost)
	l.mu.Unlock()
	if l.be == nil {
		return
	}
	l.be.mu.Lock()
	if l.be.lead == l {
		l.be.lead = nil
		l.be.stats.Transitions.Add(1)
	}
	l.be.mu.Unlock()
	if l.cancel != nil {
		l.cancel()
	}
	go func() {
		rctx, cancel := l.be.ctx()
		defer cancel()
		_, _ = l.be.cli.Revoke(rctx, l.lease)
	}()
}

// Lost is closed when the leadership ends.
func (l *Leadership) Lost() <-chan struct{} { return l.lost }

// Why says why the leadership ended ("" while it holds).
func (l *Leadership) Why() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lostWhy
}

// Resign gives the leadership up (a clean stop), so that a standby takes
// over at once instead of after the lease.
func (l *Leadership) Resign(ctx context.Context) error {
	if l.be == nil {
		return nil
	}
	var err error
	if l.election != nil && l.key != "" {
		err = l.election.Resign(ctx)
	}
	_, _ = l.be.cli.Revoke(ctx, l.lease)
	l.lose("resigned")
	return err
}

// EndpointHealth is one etcd endpoint as a health check sees it.
type EndpointHealth struct {
	Endpoint string
	Err      string // "" when it answered
	Version  string
	DBSize   int64
	// IsLeader says the member is etcd's own raft leader.
	IsLeader bool
}

// EtcdHealth asks each endpoint of an etcd store for its status (doctor);
// nil on bbolt.
func (s *Store) EtcdHealth(ctx context.Context) []EndpointHealth { return s.be.health(ctx) }

func (be *etcdBackend) health(ctx context.Context) []EndpointHealth {
	var out []EndpointHealth
	for _, ep := range be.cli.Endpoints() {
		h := EndpointHealth{Endpoint: ep}
		sctx, cancel := context.WithTimeout(ctx, be.timeout)
		st, err := be.cli.Status(sctx, ep)
		cancel()
		if err != nil {
			h.Err = err.Error()
		} else {
			h.Version, h.DBSize = st.Version, st.DbSize
			h.IsLeader = st.Header != nil && st.Leader == st.Header.MemberId
		}
		out = append(out, h)
	}
	return out
}

// UpdateIn is Update fenced by the term ctx carries (WithTerm): refused
// once that term ended, even while this store leads a later one, so a step
// started in one term never lands in another. Without a term in ctx, and
// on bbolt, it is Update.
func (s *Store) UpdateIn(ctx context.Context, fn func(*Tx) error) error {
	return s.be.updateIn(termOf(ctx), func(tx kvTx) error { return fn(s.tx(tx)) })
}

func (be *etcdBackend) updateIn(l *Leadership, fn func(kvTx) error) error {
	if l == nil {
		return be.update(fn)
	}
	if be.readOnly {
		return refusal.New(refusal.InvalidState, "the store was opened read-only")
	}
	be.writeMu.Lock()
	defer be.writeMu.Unlock()
	if be.leading() != l || !l.valid() {
		be.stats.FencedRefused.Add(1)
		return be.notLeader()
	}
	return be.commit(fn, l)
}

// warnSameName says when another candidate or the leader of this store
// bears this agent's name (state.etcd.name): the election stays correct
// (its keys are the leases), but status, doctor and the logs name the
// leader by it, so two boxes of one name cannot be told apart there. A read
// that fails says nothing: the campaign reports etcd's trouble itself.
func (be *etcdBackend) warnSameName(mine clientv3.LeaseID) {
	r, err := be.get(be.leaderPfx(), clientv3.WithPrefix())
	if err != nil || be.warn == nil {
		return
	}
	for _, kv := range r.Kvs {
		if string(kv.Value) == be.name && clientv3.LeaseID(kv.Lease) != mine {
			be.stats.SameNames.Add(1)
			be.warn(refusal.New(refusal.InvalidInput, "another agent on this etcd store is also named %q (state.etcd.name): the election still holds, but status, doctor and the logs cannot tell the two apart; give each box its own name (the host name is the default)", be.name))
			return
		}
	}
}
