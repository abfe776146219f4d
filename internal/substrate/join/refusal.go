package join

import "net/http"

// The codes of the listener's refusals: the "code" of a refusal's body, the
// reason a refusal is counted and logged under.
const (
	CodeInvalidRequest = "invalidRequest"
	CodeBodyTooLarge   = "bodyTooLarge"
	CodeNotFound       = "notFound"
	CodeRateLimited    = "rateLimited"
	CodeTokenUnknown   = "tokenUnknown"
	CodeTokenRevoked   = "tokenRevoked"
	CodeTokenUsed      = "tokenUsed"
	CodeNameNotAllowed = "nameNotAllowed"
	CodeKeyUnknown     = "keyUnknown"
	CodeKeyOtherNode   = "keyOtherNode"
	CodeUnavailable    = "unavailable"
	// CodePodTokenRefused and CodePodOtherNode refuse a join with a Pod
	// token: the cluster does not vouch for it (expired, its Pod gone, not
	// a Pod of the node daemon on one of the pool's Nodes), or its Pod
	// runs on another Node than the one named.
	CodePodTokenRefused = "podTokenRefused"
	CodePodOtherNode    = "podOtherNode"
	// CodeKeyOtherPod refuses a heartbeat from another Pod than the one
	// the node key was issued to (a Pod restarted on the Node finds the
	// old Pod's key on the host): it joins with its own Pod token.
	CodeKeyOtherPod = "keyOtherPod"
	// CodeNodeHeld refuses a join with a Pod token for a Node whose key
	// another Pod of the node daemon on it still holds, or whose Pod is
	// connected with the key it has (the same Pod's token replayed).
	CodeNodeHeld = "nodeHeld"
	// CodeTooManyConnections is never answered: the connection is closed
	// when it is accepted. It is counted and logged under this code.
	CodeTooManyConnections = "tooManyConnections"
)

// Refusal is a request the join side refused: the HTTP status, the code and
// a reason the node daemon can act on. It never holds a token or a key.
type Refusal struct {
	Status int    `json:"-"`
	Code   string `json:"code"`
	Reason string `json:"reason"`
}

func (r *Refusal) Error() string { return r.Code + ": " + r.Reason }

var refusals = map[string]Refusal{
	CodeInvalidRequest: {http.StatusBadRequest, CodeInvalidRequest,
		`the body must be JSON with poolId, nodeName (a Kubernetes Node name) and, to join, token`},
	CodeBodyTooLarge: {http.StatusRequestEntityTooLarge, CodeBodyTooLarge, "the request body is too large"},
	CodeNotFound:     {http.StatusNotFound, CodeNotFound, "not found"},
	CodeRateLimited: {http.StatusTooManyRequests, CodeRateLimited,
		"too many failed requests from this address; wait for Retry-After"},
	CodeTokenUnknown: {http.StatusUnauthorized, CodeTokenUnknown,
		"the join token is not one the agent issued for this pool"},
	CodeTokenRevoked: {http.StatusUnauthorized, CodeTokenRevoked,
		"the join token was revoked (a newer token replaced it, or every Node joined); read the token again"},
	CodeTokenUsed: {http.StatusUnauthorized, CodeTokenUsed,
		"the join token was already used for this Node"},
	CodeNameNotAllowed: {http.StatusForbidden, CodeNameNotAllowed,
		"the join token does not allow this Node name: the agent lists no such Node waiting to join the pool"},
	CodeKeyUnknown: {http.StatusUnauthorized, CodeKeyUnknown,
		"the node key is unknown or its node was retired; join again"},
	CodeKeyOtherNode: {http.StatusForbidden, CodeKeyOtherNode,
		"the node key belongs to another node"},
	CodeUnavailable: {http.StatusServiceUnavailable, CodeUnavailable,
		"the agent cannot read its state or review the token now; try again"},
	CodePodTokenRefused: {http.StatusUnauthorized, CodePodTokenRefused,
		"the pool's cluster does not vouch for the Pod token: it expired, its Pod is gone, or it is not a token of the node daemon's Pods on one of the pool's Nodes"},
	CodePodOtherNode: {http.StatusForbidden, CodePodOtherNode,
		"the Pod token is of a Pod on another Node than nodeName"},
	CodeKeyOtherPod: {http.StatusForbidden, CodeKeyOtherPod,
		"the node key was issued to another Pod of the node daemon on this Node (podUid differs); join again with this Pod's own token"},
	CodeNodeHeld: {http.StatusConflict, CodeNodeHeld,
		"this Node's key is held by a node daemon Pod that still runs on it, or that is connected with it; only one Pod per Node joins: delete the other Pod, or wait until its key has been silent for 90 s"},
}

func refuse(code string) *Refusal {
	r := refusals[code]
	return &r
}
