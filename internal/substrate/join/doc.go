// Package join is the join side of a Kubernetes substrate (docs/substrates.md): the join tokens and
// joined nodes (Store, over the
// state file), the join listener node daemons call (Listener), and the node
// daemon itself (RunDaemon, the library behind `fleet-agent node`).
//
// # Tokens and node keys
//
// The in-cluster half asks Store for a pool's token while listed Nodes wait
// to join, writes it to the Secret fleet-node/fleet-node-join, and revokes
// it once all joined. A token allows one join per waiting Node name and
// nothing else; a join answers a node key the daemon then heartbeats with.
// Both are 32 bytes from crypto/rand in base64url, exist in clear only in
// the answer that hands them out, and are kept as SHA-256 hashes (enough for
// secrets of 256 random bits: there is nothing to guess, so nothing a slow
// hash would protect). They are compared in constant time.
//
// A daemon that has its Pod's projected token (audience PodAudience) joins
// with it first (Store.JoinPod): a Reviewer asks the pool's cluster which
// Pod and Node the token is of, and the node key is issued for that Node
// only. The pool's token above is the fallback where no review can be made
// (podtoken.go says when).
//
// # Heartbeats
//
// A node is connected while a heartbeat came within ConnectedWithin (90 s).
// Heartbeats are checked against the state file (a read transaction) but
// their time is kept in memory and written in batches: at most one write
// transaction every FlushEvery (30 s) for all nodes together, not one per
// node, so a thousand nodes cost the one writer of the state file one short
// transaction every 30 s. A restart loses at most that much of lastSeen,
// which the 90 s window absorbs. A node silent for ReleaseAfter (15
// minutes) loses its name and key (Store.ReleaseSilent).
//
// # The listener faces the nodes' network
//
// Every request from a source address takes a token from that address's
// bucket before anything is checked and gives it back when it succeeds, so
// only failures spend it (Limits says the numbers); a connection that ends
// before any request (a failed handshake, headers too slow, nothing sent)
// spends one too. An address with nothing left is on probation: a few
// connections at once, a second each, and only requests that succeed (a
// valid node key, a valid join token) are served, the rest answered 429.
// A neighbour on the node's own address (another pod, a host behind the
// same NAT) that spends the bucket therefore cannot shut the node out,
// while an attacker still gets one failure per FailureEvery. Past
// MaxSources, new addresses share one of 256 overflow buckets by a keyed
// hash, not one bucket for all. Connections are capped per source and in all, every
// read and write has a deadline, headers and bodies are capped, only the two
// routes exist, HTTP/2 is off, and a refused request is logged (never with
// its token or key; repeated 429s and closed connections as one line per
// address every 10 s) and changes nothing: the check runs in a read
// transaction, and only a join that will succeed takes the state file's
// write lock.
package join
