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
// of the node daemon on nodeName. It answers a new node key for that Node
// and replaces any key the Node had (a new Pod on the Node is the node
// daemon now; the old key stops working). A refusal is a *Refusal; a
// review that cannot be made wraps ErrCannotReview.
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
		if n, err := tx.JoinedNode(poolID, nodeName); err != nil {
			return err
		} else if n != nil {
			old = n.KeyHash
		}
		return tx.PutJoinedNode(state.JoinedNode{PoolID: poolID, Name: nodeName, KeyHash: keyHash,
			JoinedAt: now.UnixMilli(), LastSeen: now.UnixMilli()})
	})
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
