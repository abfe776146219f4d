package join

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/state"
)

// Joining with the Pod's own token. The DaemonSet mounts a projected
// service-account token with the audience PodAudience and a short expiry
// (the kubelet renews it); the daemon sends it when it joins; the agent
// asks the pool's cluster to review it (a TokenReview), which says the
// token is valid, that its Pod still exists, and on which Node it runs
// (the node claim of Kubernetes 1.30+). The node key is issued for that
// Node only: a stolen token buys one Pod's Node until it expires, never
// another Node's name. The pool's Secret token is the fallback where no
// review can be made (see ErrCannotReview).
const (
	// PodAudience is the audience of the node daemon's projected token,
	// this project's own: the token is worth nothing to the Kubernetes
	// API, nor the API's tokens to the join listener.
	PodAudience = "fleet-agent.dev/join"
	// DefaultPodTokenFile is where the DaemonSet mounts it.
	DefaultPodTokenFile = "/etc/fleet-node/pod/token"
	// PodTokenSeconds is the token's life the DaemonSet asks for (the
	// shortest the API allows is 10 minutes); the kubelet renews it at
	// 80% of that.
	PodTokenSeconds = 600
	// maxReviews bounds the TokenReviews in flight: each costs a call to a
	// cluster's API, so junk tokens from many addresses must not become as
	// many calls.
	maxReviews = 4
)

// PodIdentity is what a review of a Pod token found.
type PodIdentity struct {
	NodeName, PodName, PodUID string
	// NodePods are the uids of the node daemon's Pods of the pool on
	// NodeName that still run (none being deleted), the reviewed one
	// included: a Node's key held by a Pod not among them is free for the
	// reviewed Pod to take (its Pod was restarted).
	NodePods []string
}

// Reviewer reviews a node daemon's Pod token at the pool's cluster. The
// in-cluster half implements it with the run's credential for that
// cluster. A token the cluster refuses is a *Refusal (PodTokenRefused); a
// review that cannot be made wraps ErrCannotReview.
type Reviewer interface {
	ReviewPodToken(ctx context.Context, poolID, token string) (PodIdentity, error)
}

// ErrCannotReview says a Pod token could not be reviewed: no access to
// the pool's cluster now, or a cluster that puts no Node in its tokens
// (before Kubernetes 1.30). The Secret token, when the daemon sent one, is
// tried instead.
var ErrCannotReview = errors.New("the Pod token cannot be reviewed at the pool's cluster")

// PodTokenRefused is the refusal of a Pod token the cluster does not vouch
// for; why is for the agent's log, never the answer.
func PodTokenRefused() *Refusal { return refuse(CodePodTokenRefused) }

// SetReviewer lets the store check Pod tokens (nil: none, only the Secret
// token joins).
func (s *Store) SetReviewer(r Reviewer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reviewer = r
}

// podClaims are the fields of a projected token looked at before anything
// is asked of a cluster.
type podClaims struct {
	Aud any   `json:"aud"`
	Exp int64 `json:"exp"`
}

// plausiblePodToken reports whether token looks like a projected token for
// PodAudience that has not expired: a cheap filter that keeps junk from
// reaching a cluster's API. It proves nothing; the review does.
func plausiblePodToken(token string, now time.Time) bool {
	parts := strings.Split(token, ".")
	if len(parts) != 3 || len(token) > 8<<10 {
		return false
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return false
	}
	var c podClaims
	if json.Unmarshal(raw, &c) != nil || c.Exp <= now.Unix() {
		return false
	}
	switch aud := c.Aud.(type) {
	case string:
		return aud == PodAudience
	case []any:
		return slices.Contains(aud, any(PodAudience))
	}
	return false
}

// JoinPod joins nodeName with its Pod's token: the review must find a Pod
// of the node daemon on nodeName. It answers a new node key for that Node,
// issued to that Pod (its uid is kept with the joined node), and replaces
// the key the Node had when that key was the pool's Secret token's, or its
// Pod no longer runs (a restarted Pod is the node daemon now; the old key
// stops working). It refuses (CodeNodeHeld) when the key is another Pod's
// that still runs on the Node, or this same Pod's and connected: a
// replayed or stolen token cannot lock a running daemon out. A refusal is
// a *Refusal; a review that cannot be made wraps ErrCannotReview.
func (s *Store) JoinPod(ctx context.Context, poolID, nodeName, podToken string) (nodeKey string, id PodIdentity, err error) {
	if err := ctx.Err(); err != nil {
		return "", id, err
	}
	if !validPoolID(poolID) || !validNodeName(nodeName) {
		return "", id, refuse(CodeInvalidRequest)
	}
	s.mu.Lock()
	r := s.reviewer
	s.mu.Unlock()
	if r == nil {
		return "", id, fmt.Errorf("%w: this agent has no access to clusters", ErrCannotReview)
	}
	if !plausiblePodToken(podToken, s.clock.Now()) {
		return "", id, PodTokenRefused()
	}
	select {
	case s.reviews <- struct{}{}:
		defer func() { <-s.reviews }()
	default:
		return "", id, refuse(CodeUnavailable)
	}
	id, err = r.ReviewPodToken(ctx, poolID, podToken)
	if err != nil {
		return "", id, err
	}
	if id.NodeName != nodeName {
		return "", id, refuse(CodePodOtherNode)
	}
	now := s.clock.Now()
	key, keyHash := newSecret()
	var old string
	err = s.st.Update(func(tx *state.Tx) error {
		n, err := tx.JoinedNode(poolID, nodeName)
		if err != nil {
			return err
		}
		if n != nil {
			if s.held(n, id, now) {
				return refuse(CodeNodeHeld)
			}
			old = n.KeyHash
		}
		return tx.PutJoinedNode(state.JoinedNode{PoolID: poolID, Name: nodeName, KeyHash: keyHash,
			JoinedAt: now.UnixMilli(), LastSeen: now.UnixMilli(), PodUID: id.PodUID})
	})
	if ref, ok := errorsAsRefusal(err); ok {
		return "", id, ref
	}
	if err != nil {
		return "", id, err
	}
	if old != "" {
		s.mu.Lock()
		delete(s.beats, old)
		s.mu.Unlock()
	}
	return key, id, nil
}

// held reports whether n's key stays with its holder against a join by the
// reviewed Pod id: the key is another Pod's that still runs on the Node,
// or this same Pod's and connected (a daemon holding its key never joins
// again; its token replayed would take the key from it).
func (s *Store) held(n *state.JoinedNode, id PodIdentity, now time.Time) bool {
	switch {
	case n.PodUID == "":
		return false // the Secret token's join: the Pod takes it over
	case n.PodUID != id.PodUID:
		return slices.Contains(id.NodePods, n.PodUID)
	}
	last := time.UnixMilli(n.LastSeen)
	s.mu.Lock()
	if b, ok := s.beats[n.KeyHash]; ok && b.at.After(last) {
		last = b.at
	}
	s.mu.Unlock()
	return Connected(last, now)
}
