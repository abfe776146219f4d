package state

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// The joins bucket holds what the join side of a substrate knows:
// per pool its join tokens (tokens), the node daemons that joined (nodes,
// keyed by pool id and Node name, so a pool's nodes are one sorted range),
// and an index from a node key's hash to the node that holds it (keys), so a
// heartbeat finds its node in one lookup. Tokens and node keys are never
// stored, only their hashes: a copy of the state file lets nobody join or
// heartbeat.
var (
	bucketJoins = []byte("joins")
	joinsTokens = []byte("tokens")
	joinsNodes  = []byte("nodes")
	joinsKeys   = []byte("keys")
)

// MaxRevokedJoinTokens is how many revoked tokens a pool's record remembers
// (by hash), so that a refusal can say "revoked" rather than "unknown" to a
// node daemon still holding an older Secret.
const MaxRevokedJoinTokens = 8

// JoinTokens is one pool's join tokens: the current one, if any, and the
// last ones revoked.
type JoinTokens struct {
	PoolID  string     `json:"poolId"`
	Current *JoinToken `json:"current,omitempty"`
	// Revoked are the most recently revoked tokens, newest first, at most
	// MaxRevokedJoinTokens.
	Revoked []RevokedJoinToken `json:"revoked,omitempty"`
	// Serial is the serial of the last token minted for the pool (tokens
	// are told apart by it in log lines, never by any part of the token).
	Serial uint64 `json:"serial"`
}

// JoinToken is a join token as the state file holds it: its hash and what
// it still allows.
type JoinToken struct {
	// Hash is the lowercase hex SHA-256 of the token.
	Hash   string `json:"hash"`
	Serial uint64 `json:"serial"`
	// Names are the Node names the token allows, sorted, each with the
	// joins it still allows (one when minted, none once that Node joined).
	Names     []JoinName `json:"names"`
	CreatedAt int64      `json:"createdAt"` // Unix ms
}

// JoinName is one Node name a token allows and how many joins are left.
type JoinName struct {
	Name     string `json:"name"`
	UsesLeft int    `json:"usesLeft"`
}

// RevokedJoinToken is a token that no longer works, remembered by hash.
type RevokedJoinToken struct {
	Hash      string `json:"hash"`
	Serial    uint64 `json:"serial"`
	RevokedAt int64  `json:"revokedAt"` // Unix ms
}

// JoinedNode is a node daemon that joined a pool.
type JoinedNode struct {
	PoolID string `json:"poolId"`
	// Name is the Kubernetes Node name the daemon reported.
	Name string `json:"name"`
	// KeyHash is the lowercase hex SHA-256 of the node key it was given.
	KeyHash string `json:"keyHash"`
	// TokenSerial is the serial of the token it joined with.
	TokenSerial uint64 `json:"tokenSerial"`
	JoinedAt    int64  `json:"joinedAt"` // Unix ms
	// LastSeen is the last heartbeat written down (Unix ms), the join until
	// one is; the join side keeps newer ones in memory and writes them in
	// batches. Beaten says a heartbeat was written.
	LastSeen int64 `json:"lastSeen"`
	Beaten   bool  `json:"beaten,omitempty"`
	// PodUID is the uid of the node daemon's Pod that joined with its Pod
	// token (empty after a join with the pool's Secret token): the key is
	// that Pod's, and another Pod on the Node must join with its own token.
	PodUID string `json:"podUid,omitempty"`
}

// joinsBucket returns an inner bucket of joins (innerBucket).
func (t *Tx) joinsBucket(name []byte) (kvBucket, error) {
	return t.innerBucket(bucketJoins, name)
}

// joinedBuckets returns the nodes and keys buckets, for a write.
func (t *Tx) joinedBuckets() (nodes, keys kvBucket, err error) {
	if nodes, err = t.joinsBucket(joinsNodes); err != nil {
		return nil, nil, err
	}
	keys, err = t.joinsBucket(joinsKeys)
	return nodes, keys, err
}

// joinedKey is the nodes bucket's key: the pool id, a NUL, the Node name.
// Neither may hold a NUL, so one pool's nodes are exactly the keys with the
// prefix pool id + NUL, sorted by name.
func joinedKey(poolID, name string) []byte {
	return append(append([]byte(poolID), 0), name...)
}

func checkJoinIDs(poolID, name string) error {
	if poolID == "" || strings.IndexByte(poolID, 0) >= 0 || strings.IndexByte(name, 0) >= 0 {
		return fmt.Errorf("joins: a pool id must be non-empty and neither it nor a Node name may hold a NUL byte")
	}
	return nil
}

// JoinTokens returns a pool's join token record, or nil.
func (t *Tx) JoinTokens(poolID string) (*JoinTokens, error) {
	b, err := t.joinsBucket(joinsTokens)
	if err != nil || b == nil {
		return nil, err
	}
	data := b.Get([]byte(poolID))
	if data == nil {
		return nil, nil
	}
	var rec JoinTokens
	if err := json.Unmarshal(data, &rec); err != nil {
		return nil, fmt.Errorf("join tokens of pool %s are damaged: %w", poolID, err)
	}
	return &rec, nil
}

// PutJoinTokens writes a pool's join token record. The revoked list is cut
// to MaxRevokedJoinTokens.
func (t *Tx) PutJoinTokens(rec JoinTokens) error {
	if err := checkJoinIDs(rec.PoolID, ""); err != nil {
		return err
	}
	if rec.Current != nil && rec.Current.Hash == "" {
		return fmt.Errorf("joins: pool %s: a current token needs its hash", rec.PoolID)
	}
	if len(rec.Revoked) > MaxRevokedJoinTokens {
		rec.Revoked = rec.Revoked[:MaxRevokedJoinTokens]
	}
	b, err := t.joinsBucket(joinsTokens)
	if err != nil {
		return err
	}
	return putIn(b, rec.PoolID, rec)
}

// JoinedNode returns the node of a pool that joined as name, or nil.
func (t *Tx) JoinedNode(poolID, name string) (*JoinedNode, error) {
	b, err := t.joinsBucket(joinsNodes)
	if err != nil || b == nil {
		return nil, err
	}
	return decodeJoined(b.Get(joinedKey(poolID, name)), poolID, name)
}

func decodeJoined(data []byte, poolID, name string) (*JoinedNode, error) {
	if data == nil {
		return nil, nil
	}
	var n JoinedNode
	if err := json.Unmarshal(data, &n); err != nil {
		return nil, fmt.Errorf("joined node %s of pool %s is damaged: %w", name, poolID, err)
	}
	return &n, nil
}

// JoinedNodes returns a pool's joined nodes, sorted by Node name.
func (t *Tx) JoinedNodes(poolID string) ([]JoinedNode, error) {
	b, err := t.joinsBucket(joinsNodes)
	if err != nil || b == nil {
		return nil, err
	}
	var out []JoinedNode
	prefix := joinedKey(poolID, "")
	err = b.Scan(prefix, func(k, v []byte) error {
		n, err := decodeJoined(v, poolID, string(k[len(prefix):]))
		if err != nil {
			return err
		}
		out = append(out, *n)
		return nil
	})
	return out, err
}

// JoinedNodeByKey returns the node whose node key hashes to keyHash, or nil.
func (t *Tx) JoinedNodeByKey(keyHash string) (*JoinedNode, error) {
	keys, err := t.joinsBucket(joinsKeys)
	if err != nil || keys == nil || keyHash == "" {
		return nil, err
	}
	at := keys.Get([]byte(keyHash))
	if at == nil {
		return nil, nil
	}
	nodes, err := t.joinsBucket(joinsNodes)
	if err != nil || nodes == nil {
		return nil, err
	}
	poolID, name, _ := bytes.Cut(at, []byte{0})
	n, err := decodeJoined(nodes.Get(at), string(poolID), string(name))
	if err != nil || n == nil || n.KeyHash != keyHash {
		// An index entry whose node moved on to another key is stale; it
		// is never written that way, but a stale entry must not
		// authenticate anyone.
		return nil, err
	}
	return n, nil
}

// PutJoinedNode writes a joined node, replacing a node of the same pool and
// name (a Node that joined again: its old key stops working). A key hash
// that already belongs to another node is refused.
func (t *Tx) PutJoinedNode(n JoinedNode) error {
	if err := checkJoinIDs(n.PoolID, n.Name); err != nil {
		return err
	}
	if n.Name == "" || n.KeyHash == "" {
		return fmt.Errorf("joins: pool %s: a joined node needs a name and a key hash", n.PoolID)
	}
	nodes, keys, err := t.joinedBuckets()
	if err != nil {
		return err
	}
	at := joinedKey(n.PoolID, n.Name)
	if holder := keys.Get([]byte(n.KeyHash)); holder != nil && !bytes.Equal(holder, at) {
		return fmt.Errorf("joins: pool %s: the node key of %s is already another node's", n.PoolID, n.Name)
	}
	old, err := decodeJoined(nodes.Get(at), n.PoolID, n.Name)
	if err != nil {
		return err
	}
	if old != nil && old.KeyHash != n.KeyHash {
		if err := keys.Delete([]byte(old.KeyHash)); err != nil {
			return err
		}
	}
	if err := keys.Put([]byte(n.KeyHash), at); err != nil {
		return err
	}
	data, err := json.Marshal(n)
	if err != nil {
		return err
	}
	return nodes.Put(at, data)
}

// DeleteJoinedNode forgets a joined node and its key; a node that is not
// there is not an error.
func (t *Tx) DeleteJoinedNode(poolID, name string) error {
	if err := checkJoinIDs(poolID, name); err != nil {
		return err
	}
	nodes, keys, err := t.joinedBuckets()
	if err != nil {
		return err
	}
	at := joinedKey(poolID, name)
	old, err := decodeJoined(nodes.Get(at), poolID, name)
	if err != nil || old == nil {
		return err
	}
	if holder := keys.Get([]byte(old.KeyHash)); bytes.Equal(holder, at) {
		if err := keys.Delete([]byte(old.KeyHash)); err != nil {
			return err
		}
	}
	return nodes.Delete(at)
}

// ForgetJoins drops everything of a pool: its tokens, its joined nodes and
// their keys.
func (t *Tx) ForgetJoins(poolID string) error {
	if err := checkJoinIDs(poolID, ""); err != nil {
		return err
	}
	nodes, err := t.JoinedNodes(poolID)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if err := t.DeleteJoinedNode(poolID, n.Name); err != nil {
			return err
		}
	}
	b, err := t.joinsBucket(joinsTokens)
	if err != nil {
		return err
	}
	return b.Delete([]byte(poolID))
}
