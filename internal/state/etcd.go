package state

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

// The etcd backend keeps the same records as the bbolt file under one key
// prefix of an etcd cluster:
//
//	<prefix>/d/<bucket>/<bucket>/=<hex key>   a record of a (nested) bucket
//	<prefix>/s/<bucket>/<bucket>/              a bucket's sequence
//	<prefix>/x/<id>/<n>                        part n of a record too big for one etcd value
//	<prefix>/head                              changed by every commit; names a commit being rolled forward
//	<prefix>/p/<id>/<n>                        chunk n of that commit
//	<prefix>/leader/<lease>                    the election (leader.go)
//
// Keys are hex so that their order and prefixes are bbolt's. A transaction
// reads at one etcd revision (a snapshot, as a bbolt read transaction is),
// buffers its writes, and commits them in one etcd transaction guarded by
// two comparisons: the head key is still the one it read (no other writer
// came in between) and this store still holds the leadership it holds now
// (the fence). etcd bounds a transaction (128 operations) and a request
// (1.5 MiB) by default, so a commit larger than that (an apply of thousands
// of objects) is written as chunks first and made visible by one small
// transaction that points the head at them; every reader from then on reads
// the chunks over the records until the leader has rolled them forward, so
// it sees the whole commit or none of it.

// EtcdOptions open a store on etcd.
type EtcdOptions struct {
	Endpoints []string
	// Prefix is the key prefix of this store; several stores (installations)
	// share a cluster under different prefixes. Default "/fleet-agent".
	Prefix string
	TLS    *tls.Config
	// Username and Password are etcd's own authentication (resolved values:
	// the caller resolves the references and they are never stored).
	Username, Password string
	// Name is this agent's name in the election; default the host name.
	Name string
	// Lease is the leadership lease; default 5s. A leader that cannot renew
	// it for that long is no longer the leader.
	Lease time.Duration
	// DialTimeout bounds the first connection; default 5s.
	DialTimeout time.Duration
	// RequestTimeout bounds each etcd request; default 5s.
	RequestTimeout time.Duration
	// ReadOnly opens a store that must exist and never writes.
	ReadOnly bool
	// AuditKeep is how many of the newest audit rows the store keeps;
	// default 100,000. etcd holds its whole key space in memory, so the
	// log cannot grow without bound there as it may in a file.
	AuditKeep int
	// Observe, when set, sees every etcd request's duration and error
	// (the metrics).
	Observe func(took time.Duration, err error)
	// Warn, when set, hears each failure the store rode out without
	// failing the write it happened in: a large commit that reached its
	// commit point but whose roll-forward stopped (readers already see it
	// whole; the next write or the next leader finishes it). Unset, the
	// failure is still counted (EtcdStats.RollForwardsLeft).
	Warn func(err error)
	// Clock, when set, replaces CLOCK_BOOTTIME as the clock the hold is
	// measured on (tests suspend it).
	Clock func() time.Duration
	// Now and Installation as in Options.
	Now          func() time.Time
	Installation string
}

// ErrNotLeader is the cause of every write refused because this store does
// not lead (or no longer does): the refusal's code is UNAVAILABLE.
var ErrNotLeader = errors.New("this agent does not lead")

// Limits of one etcd transaction, kept under etcd's defaults (128
// operations, 1.5 MiB a request) with room for the fence and the head.
const (
	etcdMaxOps       = 100
	etcdMaxTxnBytes  = 1 << 20
	etcdPartBytes    = 256 << 10 // a record part; a big record is split
	etcdChunkBytes   = 600 << 10 // a chunk of a large commit
	etcdSplitMarker  = "\x00fleet-agent-split\x00"
	etcdDefaultPfx   = "/fleet-agent"
	etcdReverseBatch = 64
)

type etcdBackend struct {
	cli        *clientv3.Client
	prefix     string
	name       string
	lease      time.Duration
	timeout    time.Duration
	readOnly   bool
	observeFn  func(time.Duration, error)
	auditKeepN uint64
	clock      func() time.Duration // the hold's clock
	warn       func(error)          // EtcdOptions.Warn
	// prepareLater is the start-up preparation put off because a commit
	// was pending; the first term runs it (finishPending). Under writeMu.
	prepareLater func(kvTx) error

	writeMu sync.Mutex // one writer in this process at a time, as in bbolt

	mu   sync.Mutex
	lead *Leadership // nil when not leading

	stats EtcdStats

	// crash, set by tests only, is asked after each step of a large
	// commit; true stops the commit there as a dead process would stop
	// it (nothing after that step is sent, nothing is cleaned).
	crash func(step string) bool
}

// errPendingUnfenced refuses an unfenced write over a pending commit.
var errPendingUnfenced = errors.New("a commit is pending and this write is not fenced")

// errCrashed is what a commit stopped by the crash hook returns.
var errCrashed = errors.New("stopped at a step by the test's crash hook")

func (be *etcdBackend) crashed(step string) bool { return be.crash != nil && be.crash(step) }

// EtcdStats count what the etcd backend did, for the metrics.
type EtcdStats struct {
	Requests      atomic.Int64
	RequestErrors atomic.Int64
	RequestNanos  atomic.Int64
	FencedRefused atomic.Int64
	// HoldLapses counts checks that found the hold lapsed while the term
	// went on (no renewal answered for two thirds of the lease, then one
	// did): each refused what it was asked.
	HoldLapses   atomic.Int64
	Transitions  atomic.Int64
	LargeCommits atomic.Int64
	// RollForwardsLeft counts large commits that were committed but whose
	// roll-forward did not finish in the commit (Warn says why each).
	RollForwardsLeft atomic.Int64
	// CampaignsResumed counts campaigns taken up again after a compaction
	// cut their wait short.
	CampaignsResumed atomic.Int64
	// SameNames counts campaigns that found another agent of this one's
	// name on the store (Warn says so each time).
	SameNames atomic.Int64
}

// OpenEtcd opens (creating it when the prefix is empty) a store on etcd.
func OpenEtcd(ctx context.Context, o EtcdOptions) (*Store, error) {
	if len(o.Endpoints) == 0 {
		return nil, refusal.New(refusal.InvalidInput, "state.etcd.endpoints is empty; name at least one etcd endpoint (https://host:2379)")
	}
	if o.Prefix == "" {
		o.Prefix = etcdDefaultPfx
	}
	o.Prefix = strings.TrimRight(o.Prefix, "/")
	if o.Prefix == "" || !strings.HasPrefix(o.Prefix, "/") {
		return nil, refusal.New(refusal.InvalidInput, "state.etcd.prefix %q must start with / and name more than the root", o.Prefix)
	}
	if o.Name == "" {
		h, _ := os.Hostname()
		o.Name = h
	}
	if o.Lease == 0 {
		o.Lease = 5 * time.Second
	}
	if o.Lease < 2*time.Second {
		return nil, refusal.New(refusal.InvalidInput, "state.etcd.lease %s is too short; etcd leases count in seconds, use 2s or more", o.Lease)
	}
	if o.DialTimeout == 0 {
		o.DialTimeout = 5 * time.Second
	}
	if o.RequestTimeout == 0 {
		o.RequestTimeout = 5 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.AuditKeep <= 0 {
		o.AuditKeep = 100_000
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   o.Endpoints,
		TLS:         o.TLS,
		Username:    o.Username,
		Password:    o.Password,
		DialTimeout: o.DialTimeout,
		// gRPC pings find a connection to a member that stopped answering
		// (SIGSTOP, a hung box) and the client moves off it; 10s is the
		// shortest gRPC allows, so the lease renewals also carry their own
		// short deadline (Leadership.renew).
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: o.Lease / 3,
		PermitWithoutStream:  true,
		Context:              ctx,
		// The client logs through zap; its lines would bypass our log and
		// its level. Errors reach us as returned errors.
		Logger: zap.NewNop(),
	})
	if err != nil {
		return nil, refusal.Wrap(refusal.Unavailable, err, "cannot reach etcd at %s", strings.Join(o.Endpoints, ","))
	}
	be := &etcdBackend{cli: cli, prefix: o.Prefix, name: o.Name, lease: o.Lease, timeout: o.RequestTimeout, readOnly: o.ReadOnly,
		observeFn: o.Observe, auditKeepN: uint64(o.AuditKeep), clock: o.Clock, warn: o.Warn}
	if be.clock == nil {
		be.clock = bootClock
	}
	s := &Store{be: be, path: "etcd:" + strings.Join(o.Endpoints, ",") + o.Prefix}
	// A first request tells an unreachable cluster from a slow one now,
	// not at the first write.
	sctx, cancel := context.WithTimeout(ctx, o.DialTimeout)
	_, err = cli.Get(sctx, be.headKey())
	cancel()
	if err != nil {
		cli.Close()
		return nil, refusal.Wrap(refusal.Unavailable, err, "cannot read etcd at %s; check state.etcd.endpoints, its TLS and credentials", strings.Join(o.Endpoints, ","))
	}
	if !o.ReadOnly {
		if err := be.refuseOthers(); err != nil {
			cli.Close()
			return nil, err
		}
		opts := Options{Now: o.Now, Installation: o.Installation}
		// prepare is the one write made without leading: it only creates
		// what an empty prefix lacks, and the head comparison makes two
		// agents starting at once write it once.
		var perr error
		for range 3 {
			perr = be.commitUnfenced(func(tx kvTx) error { return prepare(tx, opts) })
			if !errors.Is(perr, errHeadMoved) {
				break
			}
		}
		if errors.Is(perr, errPendingUnfenced) {
			// A store to bring up to date under a commit its last leader
			// did not finish: this agent does it once it leads, after
			// finishing that commit (finishPending).
			be.prepareLater = func(tx kvTx) error { return prepare(tx, opts) }
			perr = nil
		}
		if perr != nil {
			cli.Close()
			return nil, refusal.Wrap(refusal.InvalidState, perr, "cannot prepare the store at %s", s.path)
		}
	}
	if o.ReadOnly {
		// A reader of a prefix no agent has opened yet is told so, not
		// that the store is damaged: the first agent makes it.
		r, err := be.get(be.prefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err == nil && r.Count == 0 {
			cli.Close()
			rf := refusal.New(refusal.InvalidState, "no fleet is recorded under the etcd prefix %s yet: the first fleet-agent run that opens it makes the store", be.prefix)
			rf.Err = ErrNoStoreYet
			return nil, rf
		}
	}
	if err := s.checkFormat(); err != nil {
		cli.Close()
		return nil, err
	}
	return s, nil
}

// ErrNoStoreYet is the cause of a read-only open of an etcd prefix that
// holds nothing: no agent made a store there yet.
var ErrNoStoreYet = errors.New("no store under the prefix yet")

// refuseOthers refuses, before anything is written, a prefix where making
// a store would write over or under another's: keys under the prefix with
// no store records (a store whose records were lost, or another program's:
// making a new store there would give its clusters a second installation),
// or a prefix inside another store's (that store's leader clears keys
// under its own prefix, this store's among them).
func (be *etcdBackend) refuseOthers() error {
	meta := be.prefix + "/d/" + string(bucketMeta) + "/"
	r, err := be.get(meta, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return err
	}
	if r.Count == 0 {
		all, err := be.get(be.prefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return err
		}
		if all.Count > 0 {
			return refusal.New(refusal.InvalidState, "the etcd prefix %s holds %d keys but no fleet-agent store records: the store there lost its records, or the keys are another program's; nothing was written. Restore the store from a backup (fleet-agent state copy, docs/ha.md), or give state.etcd.prefix a prefix of its own", be.prefix, all.Count)
		}
	}
	for a := be.prefix; strings.LastIndex(a, "/") > 0; {
		a = a[:strings.LastIndex(a, "/")]
		r, err := be.get(a+"/d/"+string(bucketMeta)+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return err
		}
		if r.Count > 0 {
			return refusal.New(refusal.InvalidInput, "state.etcd.prefix %s is inside the prefix of another fleet-agent store (%s), whose leader clears keys under it; nothing was written. Give each fleet a prefix that neither contains nor is contained in another's, such as %s-2", be.prefix, a, a)
		}
	}
	return nil
}

func (be *etcdBackend) kind() string          { return "etcd" }
func (be *etcdBackend) etcdStats() *EtcdStats { return &be.stats }
func (be *etcdBackend) auditKeep() uint64     { return be.auditKeepN }

// backup and writeBackup copy the records into a bbolt file (CopyTo): a
// restore then works on one box.
func (be *etcdBackend) backup(s *Store, path string) error { return s.backupToFile(path) }

func (be *etcdBackend) writeBackup(s *Store, w io.Writer) (int64, error) { return s.streamBackup(w) }

// check reads every record back: etcd checks its own structure.
func (be *etcdBackend) check(s *Store) error { return s.CheckRecords() }

func (be *etcdBackend) close() error {
	be.mu.Lock()
	l := be.lead
	be.mu.Unlock()
	if l != nil {
		ctx, cancel := context.WithTimeout(context.Background(), be.timeout)
		_ = l.Resign(ctx)
		cancel()
	}
	return be.cli.Close()
}

// Keys.

func (be *etcdBackend) headKey() string    { return be.prefix + "/head" }
func (be *etcdBackend) leaderPfx() string  { return be.prefix + "/leader/" }
func (be *etcdBackend) pendingPfx() string { return be.prefix + "/p/" }
func (be *etcdBackend) partPfx() string    { return be.prefix + "/x/" }

// segment is a bucket name in a key: itself when it is plain, else ~hex.
func segment(name []byte) string {
	plain := len(name) > 0
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			plain = false
			break
		}
	}
	if plain {
		return string(name)
	}
	return "~" + hex.EncodeToString(name)
}

func unsegment(s string) []byte {
	if strings.HasPrefix(s, "~") {
		b, err := hex.DecodeString(s[1:])
		if err == nil {
			return b
		}
	}
	return []byte(s)
}

// dataPfx is the prefix of the records of a bucket path.
func (be *etcdBackend) dataPfx(path []string) string {
	return be.prefix + "/d/" + strings.Join(path, "/") + "/="
}

func (be *etcdBackend) seqKey(path []string) string {
	return be.prefix + "/s/" + strings.Join(path, "/") + "/"
}

// Requests.

func (be *etcdBackend) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), be.timeout)
}

func (be *etcdBackend) observe(start time.Time, err error) {
	took := time.Since(start)
	if be.observeFn != nil {
		be.observeFn(took, err)
	}
	be.stats.Requests.Add(1)
	be.stats.RequestNanos.Add(int64(took))
	if err != nil {
		be.stats.RequestErrors.Add(1)
	}
}

func (be *etcdBackend) get(key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	ctx, cancel := be.ctx()
	defer cancel()
	start := time.Now()
	r, err := be.cli.Get(ctx, key, opts...)
	be.observe(start, err)
	if err != nil {
		return nil, refusal.Wrap(refusal.Unavailable, err, "etcd read failed (a member that does not answer makes one request time out, and the next goes to another; a lost quorum fails them all): check that a quorum of etcd members is up")
	}
	return r, nil
}

func (be *etcdBackend) txn(cmps []clientv3.Cmp, ops []clientv3.Op) (*clientv3.TxnResponse, error) {
	ctx, cancel := be.ctx()
	defer cancel()
	start := time.Now()
	r, err := be.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
	be.observe(start, err)
	if err != nil {
		return nil, refusal.Wrap(refusal.Unavailable, err, "etcd write failed (it may or may not have landed; the next read tells); check that a quorum of etcd members is up")
	}
	return r, nil
}

// head is what the head key says.
type etcdHead struct {
	By      string `json:"by,omitempty"`
	At      int64  `json:"at,omitempty"`
	Pending string `json:"pending,omitempty"`
	Chunks  int    `json:"chunks,omitempty"`
}

// chunkOp is one write of a large commit.
type chunkOp struct {
	K string `json:"k"`
	V []byte `json:"v,omitempty"`
	D bool   `json:"d,omitempty"`
}

// etcdTx is one transaction: reads at rev, writes buffered.
type etcdTx struct {
	be       *etcdBackend
	rev      int64
	headRev  int64 // the head's mod revision at rev (0: none)
	head     etcdHead
	writable bool
	overlay  map[string]*chunkOp // a commit being rolled forward
	writes   map[string]*chunkOp
	cache    map[string][]byte
	replaced map[string]bool // data keys written, whose stored parts go
	onCommit []func()
	landed   int64 // the revision the commit landed at, once it did
	err      error
}

var errHeadMoved = errors.New("the store changed while this transaction ran")

// begin reads the head: the revision every read of the transaction uses.
func (be *etcdBackend) begin(writable bool) (*etcdTx, error) {
	r, err := be.get(be.headKey())
	if err != nil {
		return nil, err
	}
	tx := &etcdTx{be: be, rev: r.Header.Revision, writable: writable,
		writes: map[string]*chunkOp{}, cache: map[string][]byte{}}
	if len(r.Kvs) == 1 {
		tx.headRev = r.Kvs[0].ModRevision
		if err := json.Unmarshal(r.Kvs[0].Value, &tx.head); err != nil {
			return nil, refusal.Wrap(refusal.InvalidState, err, "the store's head at %s is damaged", be.headKey())
		}
	}
	if tx.head.Pending != "" {
		if err := tx.loadOverlay(); err != nil {
			return nil, err
		}
	}
	return tx, nil
}

func (tx *etcdTx) loadOverlay() error {
	r, err := tx.be.get(tx.be.pendingPfx()+tx.head.Pending+"/", clientv3.WithPrefix(), clientv3.WithRev(tx.rev))
	if err != nil {
		return err
	}
	if len(r.Kvs) != tx.head.Chunks {
		return refusal.New(refusal.InvalidState, "the commit %s being rolled forward has %d of its %d chunks; the store is damaged, restore a backup", tx.head.Pending, len(r.Kvs), tx.head.Chunks)
	}
	tx.overlay = map[string]*chunkOp{}
	for _, kv := range r.Kvs {
		var ops []chunkOp
		if err := json.Unmarshal(kv.Value, &ops); err != nil {
			return refusal.Wrap(refusal.InvalidState, err, "chunk %s is damaged", kv.Key)
		}
		for i := range ops {
			tx.overlay[ops[i].K] = &ops[i]
		}
	}
	return nil
}

func (tx *etcdTx) fail(err error) {
	if tx.err == nil {
		tx.err = err
	}
}

// raw reads one etcd key as the transaction sees it: its own writes over
// what is stored.
func (tx *etcdTx) raw(key string) []byte {
	if op, ok := tx.writes[key]; ok {
		if op.D {
			return nil
		}
		return op.V
	}
	return tx.stored(key)
}

// value reads a record, joining its parts when it was split.
func (tx *etcdTx) value(key string) []byte {
	v := tx.raw(key)
	if !bytes.HasPrefix(v, []byte(etcdSplitMarker)) {
		return v
	}
	id, n, ok := parseSplit(v)
	if !ok {
		tx.fail(refusal.New(refusal.InvalidState, "record %s has a damaged split marker; restore a backup", key))
		return nil
	}
	var out []byte
	for i := range n {
		p := tx.raw(tx.be.partKey(id, i))
		if p == nil && tx.err == nil {
			tx.fail(refusal.New(refusal.InvalidState, "record %s lacks part %d of %d; restore a backup", key, i, n))
		}
		out = append(out, p...)
	}
	return out
}

func (be *etcdBackend) partKey(id string, i int) string {
	return be.partPfx() + id + "/" + fmt.Sprintf("%06d", i)
}

func parseSplit(v []byte) (id string, n int, ok bool) {
	rest := string(v[len(etcdSplitMarker):])
	id, ns, found := strings.Cut(rest, ":")
	if !found {
		return "", 0, false
	}
	n, err := strconv.Atoi(ns)
	return id, n, err == nil && n > 0 && id != ""
}

func randomID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// set writes a record, splitting a big one into parts, and drops the parts
// of the value it replaces.
func (tx *etcdTx) set(key string, v []byte) error {
	if !tx.writable {
		return fmt.Errorf("write in a read transaction")
	}
	// A value this transaction split and now replaces leaves no parts.
	if w, ok := tx.writes[key]; ok && !w.D && bytes.HasPrefix(w.V, []byte(etcdSplitMarker)) {
		if id, n, ok := parseSplit(w.V); ok {
			for i := range n {
				delete(tx.writes, tx.be.partKey(id, i))
			}
		}
	}
	// The parts of the stored value are dropped at commit (dropStoredParts),
	// which reads the old values a bucket at a time rather than one round
	// trip per write.
	if strings.Contains(key, "/=") {
		if tx.replaced == nil {
			tx.replaced = map[string]bool{}
		}
		tx.replaced[key] = true
	}
	if v == nil {
		tx.writes[key] = &chunkOp{K: key, D: true}
		return tx.err
	}
	if len(v) <= etcdPartBytes && !bytes.HasPrefix(v, []byte(etcdSplitMarker)) {
		tx.writes[key] = &chunkOp{K: key, V: bytes.Clone(v)}
		return tx.err
	}
	id := randomID()
	n := 0
	for off := 0; off < len(v); off += etcdPartBytes {
		end := min(off+etcdPartBytes, len(v))
		pk := tx.be.partKey(id, n)
		tx.writes[pk] = &chunkOp{K: pk, V: bytes.Clone(v[off:end])}
		n++
	}
	tx.writes[key] = &chunkOp{K: key, V: []byte(etcdSplitMarker + id + ":" + strconv.Itoa(n))}
	return tx.err
}

// stored is a key's value as committed at the transaction's revision,
// ignoring its own writes.
func (tx *etcdTx) stored(key string) []byte {
	if op, ok := tx.overlay[key]; ok {
		if op.D {
			return nil
		}
		return op.V
	}
	if v, ok := tx.cache[key]; ok {
		return v
	}
	r, err := tx.be.get(key, clientv3.WithRev(tx.rev))
	if err != nil {
		tx.fail(err)
		return nil
	}
	var v []byte
	if len(r.Kvs) == 1 {
		v = r.Kvs[0].Value
	}
	tx.cache[key] = v
	return v
}

// dropStoredParts deletes the parts of every split value the transaction
// replaces or deletes. Keys not read yet are read by bucket when a bucket
// has many, one by one otherwise.
func (tx *etcdTx) dropStoredParts() {
	byBucket := map[string][]string{}
	for k := range tx.replaced {
		if _, ok := tx.cache[k]; ok {
			continue
		}
		if _, ok := tx.overlay[k]; ok {
			continue
		}
		pfx := k[:strings.LastIndex(k, "/=")+2]
		byBucket[pfx] = append(byBucket[pfx], k)
	}
	for pfx, keys := range byBucket {
		if len(keys) <= 4 {
			continue // read one by one below
		}
		r, err := tx.be.get(pfx, clientv3.WithPrefix(), clientv3.WithRev(tx.rev))
		if err != nil {
			tx.fail(err)
			return
		}
		for _, k := range keys {
			tx.cache[k] = nil
		}
		for _, kv := range r.Kvs {
			if tx.replaced[string(kv.Key)] {
				tx.cache[string(kv.Key)] = kv.Value
			}
		}
	}
	for k := range tx.replaced {
		old := tx.stored(k)
		if !bytes.HasPrefix(old, []byte(etcdSplitMarker)) {
			continue
		}
		if id, n, ok := parseSplit(old); ok {
			for i := range n {
				pk := tx.be.partKey(id, i)
				tx.writes[pk] = &chunkOp{K: pk, D: true}
			}
		}
	}
}

type etcdKV struct {
	k string
	v []byte
}

// rangeOf reads every key with prefix as the transaction sees it, in order.
func (tx *etcdTx) rangeOf(prefix string) []etcdKV {
	r, err := tx.be.get(prefix, clientv3.WithPrefix(), clientv3.WithRev(tx.rev))
	if err != nil {
		tx.fail(err)
		return nil
	}
	m := make(map[string][]byte, len(r.Kvs))
	for _, kv := range r.Kvs {
		m[string(kv.Key)] = kv.Value
	}
	for _, layer := range []map[string]*chunkOp{tx.overlay, tx.writes} {
		for k, op := range layer {
			if !strings.HasPrefix(k, prefix) {
				continue
			}
			if op.D {
				delete(m, k)
			} else {
				m[k] = op.V
			}
		}
	}
	out := make([]etcdKV, 0, len(m))
	for k, v := range m {
		out = append(out, etcdKV{k, v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].k < out[j].k })
	return out
}

// buffered reports whether a write or the overlay holds a key under prefix:
// then a paged read of etcd alone would miss it.
func (tx *etcdTx) buffered(prefix string) bool {
	for _, layer := range []map[string]*chunkOp{tx.overlay, tx.writes} {
		for k := range layer {
			if strings.HasPrefix(k, prefix) {
				return true
			}
		}
	}
	return false
}

// kvTx.

func (tx *etcdTx) Bucket(name []byte) kvBucket {
	return &etcdBucket{tx: tx, path: []string{segment(name)}}
}

func (tx *etcdTx) CreateBucketIfNotExists(name []byte) (kvBucket, error) {
	return tx.Bucket(name), nil
}

func (tx *etcdTx) Writable() bool     { return tx.writable }
func (tx *etcdTx) OnCommit(fn func()) { tx.onCommit = append(tx.onCommit, fn) }

// Revision is etcd's revision of the commit point, read in an OnCommit
// callback (0 before it).
func (tx *etcdTx) Revision() int64 { return tx.landed }

// etcdBucket is a bucket path; every bucket exists (an empty one reads as
// empty), as a missing bbolt bucket reads.
type etcdBucket struct {
	tx   *etcdTx
	path []string
}

func (b *etcdBucket) key(k []byte) string { return b.tx.be.dataPfx(b.path) + hex.EncodeToString(k) }

func (b *etcdBucket) Get(k []byte) []byte { return b.tx.value(b.key(k)) }

func (b *etcdBucket) Put(k, v []byte) error {
	if v == nil {
		v = []byte{}
	}
	return b.tx.set(b.key(k), v)
}

func (b *etcdBucket) Delete(k []byte) error { return b.tx.set(b.key(k), nil) }

func (b *etcdBucket) Bucket(name []byte) kvBucket {
	return &etcdBucket{tx: b.tx, path: append(append([]string{}, b.path...), segment(name))}
}

func (b *etcdBucket) CreateBucketIfNotExists(name []byte) (kvBucket, error) {
	return b.Bucket(name), nil
}

func (b *etcdBucket) decode(kv etcdKV, pfx string) ([]byte, []byte, bool) {
	k, err := hex.DecodeString(kv.k[len(pfx):])
	if err != nil {
		b.tx.fail(refusal.New(refusal.InvalidState, "key %s is not one of the store's; is another program writing under the prefix?", kv.k))
		return nil, nil, false
	}
	v := kv.v
	if bytes.HasPrefix(v, []byte(etcdSplitMarker)) {
		v = b.tx.value(kv.k)
	}
	return k, v, true
}

func (b *etcdBucket) Scan(prefix []byte, fn func(k, v []byte) error) error {
	pfx := b.tx.be.dataPfx(b.path)
	for _, kv := range b.tx.rangeOf(pfx + hex.EncodeToString(prefix)) {
		k, v, ok := b.decode(kv, pfx)
		if !ok {
			break
		}
		if err := fn(k, v); err != nil {
			return err
		}
	}
	return b.tx.err
}

func (b *etcdBucket) ForEach(fn func(k, v []byte) error) error { return b.Scan(nil, fn) }

func (b *etcdBucket) Reverse(fn func(k, v []byte) (bool, error)) error {
	pfx := b.tx.be.dataPfx(b.path)
	if b.tx.buffered(pfx) {
		all := b.tx.rangeOf(pfx)
		for i := len(all) - 1; i >= 0; i-- {
			k, v, ok := b.decode(all[i], pfx)
			if !ok {
				break
			}
			more, err := fn(k, v)
			if err != nil || !more {
				return err
			}
		}
		return b.tx.err
	}
	// Pages from the end: reading the newest audit rows costs those rows,
	// not the whole log.
	end := clientv3.GetPrefixRangeEnd(pfx)
	for {
		r, err := b.tx.be.get(pfx, clientv3.WithRange(end), clientv3.WithRev(b.tx.rev),
			clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend), clientv3.WithLimit(etcdReverseBatch))
		if err != nil {
			return err
		}
		for _, kv := range r.Kvs {
			k, v, ok := b.decode(etcdKV{string(kv.Key), kv.Value}, pfx)
			if !ok {
				return b.tx.err
			}
			more, err := fn(k, v)
			if err != nil || !more {
				return err
			}
		}
		if !r.More || len(r.Kvs) == 0 {
			return b.tx.err
		}
		end = string(r.Kvs[len(r.Kvs)-1].Key)
	}
}

func (b *etcdBucket) First() ([]byte, []byte) {
	pfx := b.tx.be.dataPfx(b.path)
	var kvs []etcdKV
	if b.tx.buffered(pfx) {
		kvs = b.tx.rangeOf(pfx)
	} else {
		r, err := b.tx.be.get(pfx, clientv3.WithPrefix(), clientv3.WithRev(b.tx.rev), clientv3.WithLimit(1),
			clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
		if err != nil {
			b.tx.fail(err)
			return nil, nil
		}
		for _, kv := range r.Kvs {
			kvs = append(kvs, etcdKV{string(kv.Key), kv.Value})
		}
	}
	if len(kvs) == 0 {
		return nil, nil
	}
	k, v, ok := b.decode(kvs[0], pfx)
	if !ok {
		return nil, nil
	}
	return k, v
}

func (b *etcdBucket) NextSequence() (uint64, error) {
	key := b.tx.be.seqKey(b.path)
	var n uint64
	if v := b.tx.raw(key); v != nil {
		var err error
		if n, err = strconv.ParseUint(string(v), 10, 64); err != nil {
			return 0, refusal.New(refusal.InvalidState, "sequence %s is damaged", key)
		}
	}
	n++
	return n, b.tx.set(key, []byte(strconv.FormatUint(n, 10)))
}

func (b *etcdBucket) SetSequence(n uint64) error {
	return b.tx.set(b.tx.be.seqKey(b.path), []byte(strconv.FormatUint(n, 10)))
}

func (b *etcdBucket) Len() (int, error) {
	pfx := b.tx.be.dataPfx(b.path)
	if b.tx.buffered(pfx) {
		return len(b.tx.rangeOf(pfx)), b.tx.err
	}
	r, err := b.tx.be.get(pfx, clientv3.WithPrefix(), clientv3.WithRev(b.tx.rev), clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return int(r.Count), nil
}

// Transactions.

func (be *etcdBackend) view(fn func(kvTx) error) error {
	tx, err := be.begin(false)
	if err != nil {
		return err
	}
	err = fn(tx)
	if tx.err != nil {
		return tx.err
	}
	return err
}

func (be *etcdBackend) update(fn func(kvTx) error) error {
	if be.readOnly {
		return refusal.New(refusal.InvalidState, "the store was opened read-only")
	}
	be.writeMu.Lock()
	defer be.writeMu.Unlock()
	l := be.leading()
	if l == nil || !l.valid() {
		be.stats.FencedRefused.Add(1)
		return be.notLeader()
	}
	return be.commit(fn, l)
}

func (be *etcdBackend) notLeader() error {
	return refusal.Wrap(refusal.Unavailable, ErrNotLeader,
		"the store on etcd takes writes only from the agent that leads; run the command on the leading agent's box (fleet-agent status names it)")
}

// commitUnfenced runs fn and commits without the fence (prepare and the
// copy into an empty prefix).
func (be *etcdBackend) commitUnfenced(fn func(kvTx) error) error {
	be.writeMu.Lock()
	defer be.writeMu.Unlock()
	return be.commit(fn, nil)
}

func (be *etcdBackend) commit(fn func(kvTx) error, l *Leadership) error {
	tx, err := be.begin(true)
	if err != nil {
		return err
	}
	if tx.head.Pending != "" && l != nil {
		// A commit that a previous leader made visible but did not roll
		// forward: finish it before anything is written over it.
		if err := be.rollForward(tx, l); err != nil {
			return err
		}
		if tx, err = be.begin(true); err != nil {
			return err
		}
	}
	err = fn(tx)
	if tx.err != nil {
		return tx.err
	}
	if err != nil {
		return err
	}
	if len(tx.writes) == 0 {
		for _, f := range tx.onCommit {
			f()
		}
		return nil
	}
	if tx.head.Pending != "" {
		// Only a leader may finish another's commit (it is fenced); an
		// unfenced write over it is refused. fn read through the pending
		// commit, so a store that needs nothing (prepare on a store made
		// before) got here with no writes and went on above.
		return refusal.Wrap(refusal.Unavailable, errPendingUnfenced, "the store at %s has a commit its last leader made visible but did not finish; the agent that leads next finishes it: start `fleet-agent run` (it waits for the leadership, then finishes the commit) and try again", be.prefix)
	}
	tx.dropStoredParts()
	if tx.err != nil {
		return tx.err
	}
	ops := make([]chunkOp, 0, len(tx.writes))
	size := 0
	for _, op := range tx.writes {
		ops = append(ops, *op)
		size += len(op.K) + len(op.V) + 16
	}
	sort.Slice(ops, func(i, j int) bool { return ops[i].K < ops[j].K })
	if len(ops) <= etcdMaxOps && size <= etcdMaxTxnBytes {
		cmps := be.guards(tx.headRev, l)
		eops := make([]clientv3.Op, 0, len(ops)+1)
		for _, op := range ops {
			eops = append(eops, toEtcdOp(op))
		}
		eops = append(eops, clientv3.OpPut(be.headKey(), be.headValue(etcdHead{})))
		r, err := be.txn(cmps, eops)
		if err != nil {
			return err
		}
		if !r.Succeeded {
			return be.whyRefused(l)
		}
		tx.landed = r.Header.Revision
	} else if err := be.commitLarge(tx, ops, l); err != nil {
		return err
	}
	for _, f := range tx.onCommit {
		f()
	}
	return nil
}

func toEtcdOp(op chunkOp) clientv3.Op {
	if op.D {
		return clientv3.OpDelete(op.K)
	}
	return clientv3.OpPut(op.K, string(op.V))
}

func (be *etcdBackend) headValue(h etcdHead) string {
	h.By, h.At = be.name, time.Now().UnixMilli()
	b, _ := json.Marshal(h) // strings and integers: cannot fail
	return string(b)
}

// guards are a commit's comparisons: the head it read, and the fence.
func (be *etcdBackend) guards(headRev int64, l *Leadership) []clientv3.Cmp {
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(be.headKey()), "=", headRev)}
	if l != nil {
		cmps = append(cmps, l.fence())
	}
	return cmps
}

// whyRefused tells a lost leadership from another writer.
func (be *etcdBackend) whyRefused(l *Leadership) error {
	if l != nil {
		r, err := be.get(l.key)
		if err == nil && (len(r.Kvs) == 0 || r.Kvs[0].CreateRevision != l.rev) {
			be.stats.FencedRefused.Add(1)
			l.lose("the election key is gone: the lease expired or another agent took over")
			return be.notLeader()
		}
	}
	return refusal.Wrap(refusal.Unavailable, errHeadMoved, "another writer changed the store at %s during this transaction; try again", be.prefix)
}

// commitLarge writes ops as chunks, points the head at them (the commit
// point), rolls them forward, and clears the head.
func (be *etcdBackend) commitLarge(tx *etcdTx, ops []chunkOp, l *Leadership) error {
	be.stats.LargeCommits.Add(1)
	id := randomID()
	var chunks [][]byte
	var cur []chunkOp
	curSize := 0
	flush := func() {
		if len(cur) == 0 {
			return
		}
		b, _ := json.Marshal(cur) // strings, bytes and a bool: cannot fail
		chunks = append(chunks, b)
		cur, curSize = nil, 0
	}
	for _, op := range ops {
		sz := len(op.K) + len(op.V)*4/3 + 32
		if curSize+sz > etcdChunkBytes {
			flush()
		}
		cur = append(cur, op)
		curSize += sz
	}
	flush()
	var fence []clientv3.Cmp
	if l != nil {
		fence = []clientv3.Cmp{l.fence()}
	}
	for i, c := range chunks {
		r, err := be.txn(fence, []clientv3.Op{clientv3.OpPut(be.pendingPfx()+id+"/"+fmt.Sprintf("%06d", i), string(c))})
		if err != nil {
			// Not yet pointed at by the head: no reader sees them.
			be.dropPending(id)
			return err
		}
		if !r.Succeeded {
			be.dropPending(id)
			return be.whyRefused(l)
		}
		if be.crashed(fmt.Sprintf("chunk %d", i)) {
			return errCrashed
		}
	}
	// The commit point.
	r, err := be.txn(be.guards(tx.headRev, l), []clientv3.Op{clientv3.OpPut(be.headKey(), be.headValue(etcdHead{Pending: id, Chunks: len(chunks)}))})
	if err != nil {
		// The write may have landed, or may still land (a request held by
		// a hung member is applied when it wakes): a head that names the
		// commit now means it is committed; otherwise the chunks stay for
		// the next term's sweep (finishPending), which a late write of
		// this term's head can no longer pass (the fence), rather than
		// being deleted under a head that could still come to name them.
		// A head that cannot be read either (herr) leaves it unknown: the
		// write's own error is returned, and it says the write may have
		// landed and that the next read tells.
		h, herr := be.begin(false)
		if herr != nil || h.head.Pending != id {
			return err
		}
		tx.landed = h.headRev
	} else if !r.Succeeded {
		be.dropPending(id)
		return be.whyRefused(l)
	} else {
		tx.landed = r.Header.Revision
	}
	if be.crashed("head") {
		return errCrashed
	}
	// Committed: from here on every reader sees the commit whole through
	// the head, so what follows only moves its writes into the records. A
	// failure of that is not a failure of the write (it landed); it is
	// reported, and the commit is finished by this leader's next write or
	// by the next leader, both of which roll a pending commit forward
	// before anything else (commit, finishPending).
	next, err := be.begin(true)
	if err == nil && next.head.Pending != id {
		// Only a fenced writer moves the head past a pending commit, and
		// it rolls the commit forward first: finished already.
		return nil
	}
	if err == nil {
		err = be.rollForward(next, l)
	}
	if errors.Is(err, errCrashed) {
		return err
	}
	if err != nil {
		be.leftPending(id, err)
	}
	return nil
}

// leftPending reports a committed large commit whose roll-forward stopped.
func (be *etcdBackend) leftPending(id string, err error) {
	be.stats.RollForwardsLeft.Add(1)
	if be.warn != nil {
		be.warn(fmt.Errorf("the large commit %s is committed (readers see it whole) but its roll-forward stopped; the leader's next write or the next leader finishes it: %w", id, err))
	}
}

// dropPending deletes the chunks of a commit that never reached its commit
// point. Its error is dropped on purpose: no head names those chunks, so no
// reader sees them, and chunks left behind are swept by the next term's
// finishPending.
func (be *etcdBackend) dropPending(id string) {
	ctx, cancel := be.ctx()
	defer cancel()
	_, _ = be.cli.Delete(ctx, be.pendingPfx()+id+"/", clientv3.WithPrefix())
}

// rollForward applies the commit the head points at to the records, in
// transactions within etcd's limits, each guarded by the head (still
// pointing at this commit) and the fence, then clears the head. Applying
// a chunk twice writes the same values, so a leader that dies half way
// leaves work its successor repeats harmlessly.
func (be *etcdBackend) rollForward(tx *etcdTx, l *Leadership) error {
	ops := make([]chunkOp, 0, len(tx.overlay))
	for _, op := range tx.overlay {
		ops = append(ops, *op)
	}
	sort.Slice(ops, func(i, j int) bool { return ops[i].K < ops[j].K })
	cmps := be.guards(tx.headRev, l)
	var batch []clientv3.Op
	size, sent := 0, 0
	send := func() error {
		if len(batch) == 0 {
			return nil
		}
		r, err := be.txn(cmps, batch)
		if err != nil {
			return err
		}
		if !r.Succeeded {
			return be.whyRefused(l)
		}
		batch, size = nil, 0
		sent++
		if be.crashed(fmt.Sprintf("roll %d", sent)) {
			return errCrashed
		}
		return nil
	}
	for _, op := range ops {
		sz := len(op.K) + len(op.V) + 16
		if len(batch) >= etcdMaxOps || size+sz > etcdMaxTxnBytes {
			if err := send(); err != nil {
				return err
			}
		}
		batch = append(batch, toEtcdOp(op))
		size += sz
	}
	if err := send(); err != nil {
		return err
	}
	r, err := be.txn(cmps, []clientv3.Op{
		clientv3.OpPut(be.headKey(), be.headValue(etcdHead{})),
		clientv3.OpDelete(be.pendingPfx()+tx.head.Pending+"/", clientv3.WithPrefix()),
	})
	if err != nil {
		return err
	}
	if !r.Succeeded {
		return be.whyRefused(l)
	}
	return nil
}

// walk visits every record of the store with its bucket path, for a copy.
func (be *etcdBackend) walk(fn func(path [][]byte, k, v []byte) error) error {
	tx, err := be.begin(false)
	if err != nil {
		return err
	}
	pfx := be.prefix + "/d/"
	for _, kv := range tx.rangeOf(pfx) {
		rest := kv.k[len(pfx):]
		dir, hk, ok := strings.Cut(rest, "/=")
		if !ok {
			return refusal.New(refusal.InvalidState, "key %s is not one of the store's", kv.k)
		}
		k, err := hex.DecodeString(hk)
		if err != nil {
			return refusal.New(refusal.InvalidState, "key %s is not one of the store's", kv.k)
		}
		var path [][]byte
		for _, s := range strings.Split(dir, "/") {
			path = append(path, unsegment(s))
		}
		v := kv.v
		if bytes.HasPrefix(v, []byte(etcdSplitMarker)) {
			v = tx.value(kv.k)
		}
		if tx.err != nil {
			return tx.err
		}
		if err := fn(path, k, v); err != nil {
			return err
		}
	}
	// Sequences travel too, so that a copy never reuses a number.
	spfx := be.prefix + "/s/"
	for _, kv := range tx.rangeOf(spfx) {
		var path [][]byte
		for _, s := range strings.Split(strings.TrimSuffix(kv.k[len(spfx):], "/"), "/") {
			path = append(path, unsegment(s))
		}
		if err := fn(path, nil, kv.v); err != nil {
			return err
		}
	}
	return tx.err
}
