package join

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

const (
	// FlushEvery is how often, at most, heartbeat times are written to the
	// state file (one transaction for every node that beat meanwhile).
	FlushEvery = 30 * time.Second
	// ConnectedWithin is how recent a heartbeat must be for a node to be
	// connected (docs/substrates.md): three heartbeat periods of 30 s, the
	// period at which the state file records beats (FlushEvery; daemons
	// are asked to beat every 20 s), so that a status read from the file
	// alone, with beats up to a period late, says the same.
	ConnectedWithin = 3 * FlushEvery
	// ReleaseAfter is how long a joined node's daemon may go without a
	// heartbeat before its name is released (ReleaseSilent): its node key
	// stops working and the name may join again, as a Node that waits.
	ReleaseAfter = 15 * time.Minute
	// secretBytes is the entropy of a token or a node key.
	secretBytes = 32
)

// JoinedNode is a node daemon that joined a pool. Its fields are those of
// incluster.JoinedNode, in the same order, so one converts to the other.
type JoinedNode struct {
	// Name is the Kubernetes Node name the daemon reported (its Pod's
	// spec.nodeName, from the downward API).
	Name      string
	JoinedAt  time.Time
	LastSeen  time.Time // the last heartbeat (or the join)
	Connected bool      // a heartbeat within 90 s, on the store's clock
}

// StoreOptions make a Store.
type StoreOptions struct {
	// Clock stamps joins and heartbeats and decides who is connected.
	Clock clock.Clock
	// Log receives what the store cannot return: a batch of heartbeat
	// times that failed to reach the state file (kept, and tried again).
	Log zerolog.Logger
}

// Connected is the rule for a node being connected: its last heartbeat
// (or its join) at most ConnectedWithin before now. Status and the store's
// Joined both use it.
func Connected(lastSeen, now time.Time) bool { return now.Sub(lastSeen) <= ConnectedWithin }

// Store keeps the join tokens and joined nodes of every pool in the state
// file, and the latest heartbeats in memory. It is safe for concurrent use.
type Store struct {
	st    *state.Store
	clock clock.Clock
	log   zerolog.Logger

	mu sync.Mutex
	// beats are the latest heartbeats not yet written, by key hash (not by
	// name: a Node that joins again gets a new key and a fresh record, and
	// a beat of its old key must not reach the new one).
	beats     map[string]beat
	lastFlush time.Time
	flushing  bool
	// reviewer checks Pod tokens (nil: none); reviews bounds those in
	// flight.
	reviewer Reviewer
	reviews  chan struct{}
}

type beat struct {
	poolID, name string
	at           time.Time
}

// NewStore makes a Store over an open state file.
func NewStore(st *state.Store, opts StoreOptions) *Store {
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	return &Store{st: st, clock: opts.Clock, log: opts.Log, beats: map[string]beat{}, lastFlush: opts.Clock.Now(),
		reviews: make(chan struct{}, maxReviews)}
}

// nodeNameRe is a Kubernetes Node name: a DNS subdomain (RFC 1123).
var nodeNameRe = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
})

// poolIDRe is what a pool id may look like (inventory.ID makes
// pool_<base32>); a little wider, never a separator of the state keys.
var poolIDRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,128}$`) })

func validNodeName(s string) bool { return len(s) <= 253 && nodeNameRe().MatchString(s) }
func validPoolID(s string) bool   { return poolIDRe().MatchString(s) }

// newSecret returns a fresh token or node key and its hash.
func newSecret() (secret, hash string) {
	b := make([]byte, secretBytes)
	// crypto/rand.Read never fails (it crashes the program rather than
	// return less than asked).
	_, _ = rand.Read(b)
	secret = base64.RawURLEncoding.EncodeToString(b)
	return secret, hashOf(secret)
}

func hashOf(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// sameHash compares two hashes in constant time.
func sameHash(a, b string) bool {
	return len(a) == len(b) && subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// Token returns the pool's join token for the listed Nodes that have no
// joined node daemon (waiting). When the current token already allows
// exactly waiting (the names with a join left) and renew is false, nothing
// is minted: minted is false and token "". Otherwise a new token replaces
// the old one, which stops working at once, and is returned in clear this
// once; the state file keeps its hash.
func (s *Store) Token(ctx context.Context, poolID string, waiting []string, renew bool) (token string, minted bool, err error) {
	if err := ctx.Err(); err != nil {
		return "", false, err
	}
	if !validPoolID(poolID) {
		return "", false, fmt.Errorf("join token: %q is not a pool id", poolID)
	}
	names := slices.Clone(waiting)
	slices.Sort(names)
	names = slices.Compact(names)
	if len(names) == 0 {
		return "", false, fmt.Errorf("join token of pool %s: no Node waits to join; revoke the token instead of asking for one", poolID)
	}
	for _, n := range names {
		if !validNodeName(n) {
			return "", false, fmt.Errorf("join token of pool %s: %q is not a Kubernetes Node name", poolID, n)
		}
	}
	now := s.clock.Now()
	err = s.st.Update(func(tx *state.Tx) error {
		rec, err := tx.JoinTokens(poolID)
		if err != nil {
			return err
		}
		if rec == nil {
			rec = &state.JoinTokens{PoolID: poolID}
		}
		if rec.Current != nil && !renew && slices.Equal(allowed(rec.Current), names) {
			return nil
		}
		revoke(rec, now)
		var hash string
		token, hash = newSecret()
		rec.Serial++
		cur := &state.JoinToken{Hash: hash, Serial: rec.Serial, CreatedAt: now.UnixMilli()}
		for _, n := range names {
			cur.Names = append(cur.Names, state.JoinName{Name: n, UsesLeft: 1})
		}
		rec.Current = cur
		return tx.PutJoinTokens(*rec)
	})
	if err != nil {
		return "", false, fmt.Errorf("join token of pool %s: %w", poolID, err)
	}
	return token, token != "", nil
}

// allowed lists the names a token still allows a join for, sorted.
func allowed(t *state.JoinToken) []string {
	var out []string
	for _, n := range t.Names {
		if n.UsesLeft > 0 {
			out = append(out, n.Name)
		}
	}
	return out
}

// revoke moves the current token, if any, to the revoked ones.
func revoke(rec *state.JoinTokens, now time.Time) {
	if rec.Current == nil {
		return
	}
	r := state.RevokedJoinToken{Hash: rec.Current.Hash, Serial: rec.Current.Serial, RevokedAt: now.UnixMilli()}
	rec.Revoked = append([]state.RevokedJoinToken{r}, rec.Revoked...)
	rec.Current = nil
}

// Revoke ends the pool's token, if any. Revoking twice is not an error.
func (s *Store) Revoke(ctx context.Context, poolID string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	err := s.st.Update(func(tx *state.Tx) error {
		rec, err := tx.JoinTokens(poolID)
		if err != nil || rec == nil || rec.Current == nil {
			return err
		}
		revoke(rec, s.clock.Now())
		return tx.PutJoinTokens(*rec)
	})
	if err != nil {
		return fmt.Errorf("revoking the join token of pool %s: %w", poolID, err)
	}
	return nil
}

// Joined lists the nodes that joined the pool, sorted by Node name, with the
// latest heartbeat (written or still in memory).
func (s *Store) Joined(ctx context.Context, poolID string) ([]JoinedNode, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var recs []state.JoinedNode
	err := s.st.View(func(tx *state.Tx) (err error) { recs, err = tx.JoinedNodes(poolID); return })
	if err != nil {
		return nil, fmt.Errorf("the joined nodes of pool %s: %w", poolID, err)
	}
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]JoinedNode, 0, len(recs))
	for _, r := range recs {
		n := JoinedNode{Name: r.Name, JoinedAt: time.UnixMilli(r.JoinedAt), LastSeen: time.UnixMilli(r.LastSeen)}
		if b, ok := s.beats[r.KeyHash]; ok && b.at.After(n.LastSeen) {
			n.LastSeen = b.at
		}
		n.Connected = Connected(n.LastSeen, now)
		out = append(out, n)
	}
	return out, nil
}

// Retire forgets a joined node; its node key stops working. Retiring twice
// is not an error.
func (s *Store) Retire(ctx context.Context, poolID, nodeName string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var keyHash string
	err := s.st.Update(func(tx *state.Tx) error {
		n, err := tx.JoinedNode(poolID, nodeName)
		if err != nil || n == nil {
			return err
		}
		keyHash = n.KeyHash
		return tx.DeleteJoinedNode(poolID, nodeName)
	})
	if err != nil {
		return fmt.Errorf("retiring node %s of pool %s: %w", nodeName, poolID, err)
	}
	s.mu.Lock()
	delete(s.beats, keyHash)
	s.mu.Unlock()
	return nil
}

// ReleaseSilent releases every joined node of the pool whose last heartbeat
// (written or still in memory), or its join when it never beat, is
// ReleaseAfter old or older on the store's clock: its node key stops
// working and its name is free for a new join. It answers the names
// released, sorted. This is the one place the rule lives; the in-cluster
// half calls it at every pass, whether the Node is still listed or not (a
// daemon gone for 15 minutes must not keep a name that a new Pod on the
// Node, or a Node that came back, needs).
func (s *Store) ReleaseSilent(ctx context.Context, poolID string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := s.clock.Now()
	var released, keys []string
	err := s.st.Update(func(tx *state.Tx) error {
		released, keys = nil, nil
		recs, err := tx.JoinedNodes(poolID)
		if err != nil {
			return err
		}
		for _, r := range recs {
			last := time.UnixMilli(r.LastSeen)
			s.mu.Lock()
			if b, ok := s.beats[r.KeyHash]; ok && b.at.After(last) {
				last = b.at
			}
			s.mu.Unlock()
			if now.Sub(last) < ReleaseAfter {
				continue
			}
			if err := tx.DeleteJoinedNode(poolID, r.Name); err != nil {
				return err
			}
			released, keys = append(released, r.Name), append(keys, r.KeyHash)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("releasing the silent nodes of pool %s: %w", poolID, err)
	}
	s.mu.Lock()
	for _, k := range keys {
		delete(s.beats, k)
	}
	s.mu.Unlock()
	return released, nil
}

// Forget drops everything of the pool: its tokens and its joined nodes.
func (s *Store) Forget(ctx context.Context, poolID string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.st.Update(func(tx *state.Tx) error { return tx.ForgetJoins(poolID) }); err != nil {
		return fmt.Errorf("forgetting the joins of pool %s: %w", poolID, err)
	}
	s.mu.Lock()
	for k, b := range s.beats {
		if b.poolID == poolID {
			delete(s.beats, k)
		}
	}
	s.mu.Unlock()
	return nil
}

// Join spends one use of the pool's token for nodeName and answers a new
// node key. A refusal is a *Refusal and changes nothing. The check runs in
// a read transaction, so a flood of bad tokens never takes the state file's
// write lock; only a join that passed it does, and checks again there.
func (s *Store) Join(ctx context.Context, poolID, nodeName, token string) (nodeKey string, err error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if !validPoolID(poolID) || !validNodeName(nodeName) || token == "" || len(token) > 256 {
		return "", refuse(CodeInvalidRequest)
	}
	hash := hashOf(token)
	if err := s.st.View(func(tx *state.Tx) error {
		_, _, err := s.checkToken(tx, poolID, nodeName, hash)
		return err
	}); err != nil {
		return "", err
	}
	now := s.clock.Now()
	key, keyHash := newSecret()
	err = s.st.Update(func(tx *state.Tx) error {
		rec, again, err := s.checkToken(tx, poolID, nodeName, hash)
		if err != nil {
			return err
		}
		if !again {
			for i := range rec.Current.Names {
				if rec.Current.Names[i].Name == nodeName {
					rec.Current.Names[i].UsesLeft--
				}
			}
			if err := tx.PutJoinTokens(*rec); err != nil {
				return err
			}
		}
		return tx.PutJoinedNode(state.JoinedNode{PoolID: poolID, Name: nodeName, KeyHash: keyHash,
			TokenSerial: rec.Current.Serial, JoinedAt: now.UnixMilli(), LastSeen: now.UnixMilli()})
	})
	if err != nil {
		return "", err
	}
	return key, nil
}

// checkToken returns the pool's token record when hash is its current token
// and the token has a join left for nodeName; otherwise the refusal.
//
// One case passes with the name's join spent (again is true): the node that
// join made has never sent a heartbeat. That is what a daemon whose answer
// was lost on the way (a timeout, a cut connection) sees when it retries
// with the same token: it gets a new node key in place of the one it never
// received, rather than being shut out while the agent counts it joined.
// Whoever holds the token could have joined as that name anyway; once the
// node beats, the token is spent for it.
func (s *Store) checkToken(tx *state.Tx, poolID, nodeName, hash string) (rec *state.JoinTokens, again bool, err error) {
	rec, err = tx.JoinTokens(poolID)
	if err != nil {
		return nil, false, err
	}
	if rec == nil {
		return nil, false, refuse(CodeTokenUnknown)
	}
	if rec.Current == nil || !sameHash(rec.Current.Hash, hash) {
		revoked := false
		for _, r := range rec.Revoked {
			revoked = sameHash(r.Hash, hash) || revoked
		}
		if revoked {
			return nil, false, refuse(CodeTokenRevoked)
		}
		return nil, false, refuse(CodeTokenUnknown)
	}
	for _, n := range rec.Current.Names {
		if n.Name != nodeName {
			continue
		}
		if n.UsesLeft > 0 {
			return rec, false, nil
		}
		joined, err := tx.JoinedNode(poolID, nodeName)
		if err != nil {
			return nil, false, err
		}
		if joined != nil && joined.TokenSerial == rec.Current.Serial && !joined.Beaten && !s.beaten(joined.KeyHash) {
			return rec, true, nil
		}
		return nil, false, refuse(CodeTokenUsed)
	}
	return nil, false, refuse(CodeNameNotAllowed)
}

// beaten reports whether a heartbeat of the key is held in memory.
func (s *Store) beaten(keyHash string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.beats[keyHash]
	return ok
}

// Heartbeat records a beat of the node holding nodeKey, which must be the
// key poolID's nodeName joined with. podUID is the uid of the daemon's Pod
// as the daemon says it (the downward API's metadata.uid), "" when it says
// none: a key issued to a Pod (a join with its Pod token) is refused from
// another Pod, so a Pod restarted on the Node, which finds the old Pod's key
// on the host, joins again with its own token. It is the daemon's own word,
// not a proof: it keeps a key with the Pod it was issued to, against a key
// left behind, not against whoever holds the key. A refusal is a *Refusal.
// The beat's time stays in memory until the next batch is written
// (FlushEvery).
func (s *Store) Heartbeat(ctx context.Context, poolID, nodeName, nodeKey, podUID string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !validPoolID(poolID) || !validNodeName(nodeName) {
		return refuse(CodeInvalidRequest)
	}
	if nodeKey == "" || len(nodeKey) > 256 {
		return refuse(CodeKeyUnknown)
	}
	hash := hashOf(nodeKey)
	var n *state.JoinedNode
	if err := s.st.View(func(tx *state.Tx) (err error) { n, err = tx.JoinedNodeByKey(hash); return }); err != nil {
		return err
	}
	switch {
	case n == nil || !sameHash(n.KeyHash, hash):
		return refuse(CodeKeyUnknown)
	case n.PoolID != poolID || n.Name != nodeName:
		return refuse(CodeKeyOtherNode)
	case podUID != "" && n.PodUID != "" && podUID != n.PodUID:
		return refuse(CodeKeyOtherPod)
	}
	now := s.clock.Now()
	s.mu.Lock()
	s.beats[hash] = beat{poolID: poolID, name: nodeName, at: now}
	due := !s.flushing && now.Sub(s.lastFlush) >= FlushEvery
	if due {
		s.flushing = true
	}
	s.mu.Unlock()
	if due {
		s.flush(now)
	}
	return nil
}

// Flush writes the heartbeat times kept in memory now (the agent calls it
// when it stops).
func (s *Store) Flush() error {
	s.mu.Lock()
	if s.flushing {
		s.mu.Unlock()
		return nil
	}
	s.flushing = true
	s.mu.Unlock()
	return s.flush(s.clock.Now())
}

// flush writes the pending beats in one transaction; the caller set
// flushing. A beat that arrives meanwhile stays pending; a failed write
// keeps them all for the next one.
func (s *Store) flush(now time.Time) error {
	s.mu.Lock()
	pending := make(map[string]beat, len(s.beats))
	for k, b := range s.beats {
		pending[k] = b
	}
	s.mu.Unlock()
	err := s.st.Update(func(tx *state.Tx) error {
		for keyHash, b := range pending {
			n, err := tx.JoinedNode(b.poolID, b.name)
			if err != nil {
				return err
			}
			// Retired, or joined again with another key since the beat.
			if n == nil || n.KeyHash != keyHash || (n.Beaten && n.LastSeen >= b.at.UnixMilli()) {
				continue
			}
			n.LastSeen, n.Beaten = max(n.LastSeen, b.at.UnixMilli()), true
			if err := tx.PutJoinedNode(*n); err != nil {
				return err
			}
		}
		return nil
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	s.flushing = false
	s.lastFlush = now
	if err != nil {
		s.log.Warn().Err(err).Int("nodes", len(pending)).Msg("heartbeat times not written to the state file; kept in memory and tried again in 30 s")
		return fmt.Errorf("writing heartbeat times: %w", err)
	}
	for k, b := range pending {
		if cur, ok := s.beats[k]; ok && !cur.at.After(b.at) {
			delete(s.beats, k)
		}
	}
	return nil
}

// errorsAsRefusal reports whether err is a refusal, and which.
func errorsAsRefusal(err error) (*Refusal, bool) {
	var r *Refusal
	ok := errors.As(err, &r)
	return r, ok
}

// Current describes the pool's current token without the token itself: its
// serial and when it was minted; ok is false when the pool has none. The
// in-cluster half writes the serial beside the token in the join Secret, so
// that a Secret left holding an older token (a crash between minting and
// writing it) is told apart from the current one and replaced.
func (s *Store) Current(ctx context.Context, poolID string) (serial uint64, createdAt time.Time, ok bool, err error) {
	if err := ctx.Err(); err != nil {
		return 0, time.Time{}, false, err
	}
	var rec *state.JoinTokens
	if err := s.st.View(func(tx *state.Tx) (err error) { rec, err = tx.JoinTokens(poolID); return }); err != nil {
		return 0, time.Time{}, false, fmt.Errorf("the join token of pool %s: %w", poolID, err)
	}
	if rec == nil || rec.Current == nil {
		return 0, time.Time{}, false, nil
	}
	return rec.Current.Serial, time.UnixMilli(rec.Current.CreatedAt), true, nil
}
