package doemu

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// minted is a cluster credential the emulator handed out. Only the hash of
// its token is kept, as the service would.
type minted struct {
	cluster string
	team    string
	email   string
	expires time.Time
}

// defaultExpiry is a credential's life without expiry_seconds (or with 0),
// as the description says: seven days.
const defaultExpiry = 7 * 24 * time.Hour

// expiry reads expiry_seconds: absent or 0 is seven days.
func expiry(w http.ResponseWriter, r *http.Request) (time.Duration, bool) {
	if s := r.URL.Query().Get("expiry_seconds"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, "bad_request", "expiry_seconds must be a non-negative integer")
			return 0, false
		}
		if n > 0 {
			return time.Duration(n) * time.Second, true
		}
	}
	return defaultExpiry, true
}

// mint hands out a cluster credential for the request's account. Called
// with mu held.
//
// Guess: the service mints credentials for any cluster it has, the API
// server being up or not; the adapter checks that the answer names a
// server.
func (e *Emulator) mint(r *http.Request, c *cluster, life time.Duration) (string, time.Time) {
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		panic(err)
	}
	token := "doemu-" + hex.EncodeToString(raw[:])
	a := accountOf(r)
	expires := e.opts.Clock.Now().Add(life)
	e.minted[tokenKey(token)] = &minted{cluster: c.id, team: a.Team, email: a.Email, expires: expires}
	return token, expires
}

func (e *Emulator) credentials(w http.ResponseWriter, r *http.Request) {
	life, ok := expiry(w, r)
	if !ok {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.find(r)
	if c == nil {
		notFound(w)
		return
	}
	token, expires := e.mint(r, c, life)
	writeJSON(w, http.StatusOK, map[string]any{
		"server":                     c.endpoint,
		"certificate_authority_data": base64.StdEncoding.EncodeToString(e.ca),
		"client_certificate_data":    nil,
		"client_key_data":            nil,
		"token":                      token,
		"expires_at":                 expires.UTC().Format(time.RFC3339Nano),
	})
}

// kubeconfig answers a kubeconfig file in YAML, as the service does: one
// cluster, context and user named do-<region>-<name>, the user holding a
// token minted as the credentials route mints it (expiry_seconds the same).
func (e *Emulator) kubeconfig(w http.ResponseWriter, r *http.Request) {
	life, ok := expiry(w, r)
	if !ok {
		return
	}
	switch r.URL.Query().Get("type") {
	case "", "token":
	case "sso":
		// The emulator has no OAuth2 provider to send the client to.
		unprocessable(w, "sso kubeconfigs are not supported by this emulator; ask for type=token")
		return
	default:
		writeError(w, http.StatusBadRequest, "bad_request", "type must be token or sso")
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.find(r)
	if c == nil {
		notFound(w)
		return
	}
	token, _ := e.mint(r, c, life)
	// Every value is base64, a URL, hex, or a name the create held to
	// lower-case letters, digits and dashes: none needs YAML quoting.
	name := "do-" + c.region + "-" + c.name
	body := fmt.Sprintf(`apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: %s
    server: %s
  name: %s
contexts:
- context:
    cluster: %s
    user: %s-admin
  name: %s
current-context: %s
kind: Config
preferences: {}
users:
- name: %s-admin
  user:
    token: %s
`, base64.StdEncoding.EncodeToString(e.ca), c.endpoint, name, name, name, name, name, name, token)
	w.Header().Set("Content-Type", "application/yaml")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(body))
}

// valid finds the live credential of a token: minted here, not expired on
// the emulator's clock, its cluster still there and not being deleted.
// Called with mu held.
func (e *Emulator) valid(token string) (*minted, *cluster) {
	m := e.minted[tokenKey(token)]
	if m == nil || !e.opts.Clock.Now().Before(m.expires) {
		return nil, nil
	}
	c := e.clusters[m.cluster]
	if c == nil || !e.settle(c) || c.state == e.opts.DeletingState {
		return nil, nil
	}
	return m, c
}

// Accepts reports whether the cluster at endpoint would take the token.
func (e *Emulator) Accepts(endpoint, token string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, c := e.valid(token)
	return c != nil && subtle.ConstantTimeCompare([]byte(endpoint), []byte(c.endpoint)) == 1
}

// CA is the PEM of the CA handed out with credentials.
func (e *Emulator) CA() []byte { return append([]byte(nil), e.ca...) }

// tokenReview answers kube-apiserver's webhook token authentication: the
// TokenReview it posts, with status.authenticated true (a user in
// system:masters) only for a credential the emulator minted and that is
// still live.
func (e *Emulator) tokenReview(w http.ResponseWriter, r *http.Request) {
	var review struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Spec       struct {
			Token     string   `json:"token"`
			Audiences []string `json:"audiences,omitempty"`
		} `json:"spec"`
	}
	if err := decodeBody(r, &review); err != nil || review.Kind != "TokenReview" {
		http.Error(w, "expected a TokenReview", http.StatusBadRequest)
		return
	}
	if review.APIVersion == "" {
		review.APIVersion = "authentication.k8s.io/v1"
	}
	status := map[string]any{"authenticated": false}
	e.mu.Lock()
	m, c := e.valid(review.Spec.Token)
	e.mu.Unlock()
	if c != nil {
		status = map[string]any{
			"authenticated": true,
			"user": map[string]any{
				"username": m.email,
				"uid":      tokenKey("user:" + m.team + ":" + m.email)[:32],
				"groups":   []string{"system:masters", "system:authenticated"},
				"extra":    map[string][]string{"doemu.cluster-id": {c.id}},
			},
		}
		if len(review.Spec.Audiences) > 0 {
			status["audiences"] = review.Spec.Audiences
		}
	}
	// A refusal says authenticated false and no error, as a cloud's
	// authenticator does: status.error tells kube-apiserver the token could
	// not be checked at all, which is not what an unknown or expired token
	// is.
	writeJSON(w, http.StatusOK, map[string]any{
		"apiVersion": review.APIVersion,
		"kind":       "TokenReview",
		"metadata":   map[string]any{"creationTimestamp": nil},
		"spec":       review.Spec,
		"status":     status,
	})
}
