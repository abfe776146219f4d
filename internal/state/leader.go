package state

import (
	"context"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

// Leadership is this store's hold on the election of its prefix: etcd's
// election recipe on a lease of our own. While it holds, Update commits;
// every commit compares the election key's create revision with the one
// won here in the same etcd transaction, so a leader that was paused past
// its lease, or cut off, can never write after another agent took over.
//
// A write is fenced by etcd itself. A call to a provider or a post to
// GitHub is not: the agent asks Fenced right before each, which answers
// from the last lease renewal seen (a renewal is good for two thirds of the
// lease from when its answer arrived, so a process that was stopped finds its
// hold expired on waking, before etcd's lease has run out).
type Leadership struct {
	be    *etcdBackend
	key   string
	rev   int64
	lease clientv3.LeaseID

	mu         sync.Mutex
	validUntil time.Time // monotonic
	lost       chan struct{}
	lostWhy    string
	cancel     context.CancelFunc
	election   *concurrency.Election
}

// Lead blocks until this store leads its prefix, or ctx ends. On bbolt it
// returns at once (one process holds the file: it leads).
func (s *Store) Lead(ctx context.Context) (*Leadership, error) {
	if s.etcd == nil {
		return &Leadership{lost: make(chan struct{})}, nil
	}
	return s.etcd.campaign(ctx)
}

// Leading reports whether this store may write now.
func (s *Store) Leading() bool {
	if s.etcd == nil {
		return true
	}
	l := s.etcd.leading()
	return l != nil && l.valid()
}

// Fenced is nil while this store leads with a lease that holds now: the
// check before an action outside the store (a provider call, a post).
func (s *Store) Fenced() error {
	if s.Leading() {
		return nil
	}
	if s.etcd != nil {
		s.etcd.stats.FencedRefused.Add(1)
		return s.etcd.notLeader()
	}
	return nil
}

// Leader names the agent that leads the store's prefix ("" when none); on
// bbolt, "".
func (s *Store) Leader(ctx context.Context) (string, error) {
	if s.etcd == nil {
		return "", nil
	}
	r, err := s.etcd.get(s.etcd.leaderPfx(), clientv3.WithFirstCreate()...)
	if err != nil {
		return "", err
	}
	if len(r.Kvs) == 0 {
		return "", nil
	}
	return string(r.Kvs[0].Value), nil
}

// Name is this agent's name in the election ("" on bbolt).
func (s *Store) Name() string {
	if s.etcd == nil {
		return ""
	}
	return s.etcd.name
}

func (be *etcdBackend) leading() *Leadership {
	be.mu.Lock()
	defer be.mu.Unlock()
	return be.lead
}

func (be *etcdBackend) campaign(ctx context.Context) (*Leadership, error) {
	ttl := int64(be.lease / time.Second)
	gctx, gcancel := be.ctx()
	grant, err := be.cli.Grant(gctx, ttl)
	gcancel()
	if err != nil {
		return nil, refusal.Wrap(refusal.Unavailable, err, "cannot take a lease from etcd")
	}
	lctx, cancel := context.WithCancel(context.Background())
	l := &Leadership{be: be, lease: grant.ID, lost: make(chan struct{}), cancel: cancel}
	ka, err := be.cli.KeepAlive(lctx, grant.ID)
	if err != nil {
		cancel()
		return nil, refusal.Wrap(refusal.Unavailable, err, "cannot keep a lease alive at etcd")
	}
	l.renewed(time.Now())
	session, err := concurrency.NewSession(be.cli, concurrency.WithLease(grant.ID), concurrency.WithContext(lctx))
	if err != nil {
		cancel()
		return nil, refusal.Wrap(refusal.Unavailable, err, "cannot open an etcd session")
	}
	l.election = concurrency.NewElection(session, be.leaderPfx())
	// Renewals keep the hold valid while campaigning, too: a campaign can
	// wait for as long as another agent leads.
	go l.keepAlive(ka)
	if err := l.election.Campaign(ctx, be.name); err != nil {
		cancel()
		rctx, rcancel := be.ctx()
		_, _ = be.cli.Revoke(rctx, grant.ID)
		rcancel()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, refusal.Wrap(refusal.Unavailable, err, "the etcd election failed")
	}
	l.key, l.rev = l.election.Key(), l.election.Rev()
	if !l.valid() {
		l.lose("the lease lapsed while campaigning")
		return nil, be.notLeader()
	}
	be.mu.Lock()
	be.lead = l
	be.mu.Unlock()
	be.stats.Transitions.Add(1)
	go l.watch(lctx)
	// A commit a previous leader made visible but did not finish is
	// finished first, so nothing is written over it.
	if err := be.finishPending(l); err != nil {
		l.lose("cannot finish the previous leader's commit: " + err.Error())
		return nil, err
	}
	return l, nil
}

func (be *etcdBackend) finishPending(l *Leadership) error {
	be.writeMu.Lock()
	defer be.writeMu.Unlock()
	tx, err := be.begin(true)
	if err != nil || tx.head.Pending == "" {
		return err
	}
	return be.rollForward(tx, l)
}

// renewed records a renewal's answer: the hold is good for two thirds of
// the lease from its arrival. etcd renewed the lease before it answered,
// so its lease outlives that by a third of the lease less the round trip;
// and the client renews every third of the lease, so one late renewal
// does not end a healthy leadership.
func (l *Leadership) renewed(at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.validUntil = at.Add(l.be.lease * 2 / 3)
}

func (l *Leadership) keepAlive(ka <-chan *clientv3.LeaseKeepAliveResponse) {
	for {
		select {
		case r, ok := <-ka:
			if !ok {
				l.lose("etcd stopped renewing the lease")
				return
			}
			if r.TTL <= 0 {
				l.lose("etcd says the lease expired")
				return
			}
			l.renewed(time.Now())
		case <-l.lost:
			return
		}
	}
}

// watch loses the leadership when the election key goes, or when no
// renewal came in time.
func (l *Leadership) watch(ctx context.Context) {
	wch := l.be.cli.Watch(clientv3.WithRequireLeader(ctx), l.key, clientv3.WithRev(l.rev+1))
	t := time.NewTimer(time.Until(l.until()))
	defer t.Stop()
	for {
		select {
		case <-l.lost:
			return
		case w, ok := <-wch:
			if !ok {
				l.lose("the watch on the election key ended")
				return
			}
			for _, ev := range w.Events {
				if ev.Type == clientv3.EventTypeDelete {
					l.lose("the election key was deleted: the lease expired")
					return
				}
			}
			if w.Err() != nil {
				// A watch that lost etcd's leader: renewals decide.
				wch = l.be.cli.Watch(clientv3.WithRequireLeader(ctx), l.key, clientv3.WithRev(l.rev+1))
			}
		case <-t.C:
			if !l.valid() {
				l.lose("no lease renewal came in time")
				return
			}
			t.Reset(time.Until(l.until()) + time.Millisecond)
		}
	}
}

func (l *Leadership) until() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.validUntil
}

// valid reports whether the hold is good now.
func (l *Leadership) valid() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-l.lost:
		return false
	default:
	}
	return time.Now().Before(l.validUntil)
}

// fence is the comparison every fenced commit carries.
func (l *Leadership) fence() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(l.key), "=", l.rev)
}

// lose ends the leadership once.
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
func (s *Store) EtcdHealth(ctx context.Context) []EndpointHealth {
	if s.etcd == nil {
		return nil
	}
	var out []EndpointHealth
	for _, ep := range s.etcd.cli.Endpoints() {
		h := EndpointHealth{Endpoint: ep}
		sctx, cancel := context.WithTimeout(ctx, s.etcd.timeout)
		st, err := s.etcd.cli.Status(sctx, ep)
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
