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
}

func refuse(code string) *Refusal {
	r := refusals[code]
	return &r
}
