package gkeemu

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// serviceAccount is an identity the emulator knows, with the public half of
// each of its keys.
type serviceAccount struct {
	email    string
	projects []string // empty: every project
	keys     map[string]*rsa.PublicKey
}

// issuedToken is an access token the token endpoint minted. Only its hash
// is kept, as a real issuer would.
type issuedToken struct {
	email   string
	expires time.Time
}

// AddServiceAccount makes a service account that reaches the named projects
// (none named: every project) and returns the JSON of a new key for it, as
// the console downloads it, with token_uri pointing at this emulator.
func (e *Emulator) AddServiceAccount(email string, projects ...string) ([]byte, error) {
	e.mu.Lock()
	n := e.keysIssued
	e.keysIssued++
	e.mu.Unlock()
	key, err := rsaKey(n)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	var kid [20]byte
	if _, err := rand.Read(kid[:]); err != nil {
		return nil, err
	}
	keyID := hex.EncodeToString(kid[:])
	e.mu.Lock()
	sa := e.accounts[email]
	if sa == nil {
		sa = &serviceAccount{email: email, keys: map[string]*rsa.PublicKey{}}
		e.accounts[email] = sa
	}
	sa.projects = append(sa.projects, projects...)
	sa.keys[keyID] = &key.PublicKey
	e.mu.Unlock()
	project := ""
	if len(projects) > 0 {
		project = projects[0]
	} else if len(e.opts.Projects) > 0 {
		project = e.opts.Projects[0].ID
	}
	return json.MarshalIndent(map[string]string{
		"type":                        "service_account",
		"project_id":                  project,
		"private_key_id":              keyID,
		"private_key":                 string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"client_email":                email,
		"client_id":                   "1" + keyID[:20],
		"auth_uri":                    "https://accounts.google.com/o/oauth2/auth",
		"token_uri":                   e.TokenURI(),
		"auth_provider_x509_cert_url": "https://www.googleapis.com/oauth2/v1/certs",
		"universe_domain":             "googleapis.com",
	}, "", "  ")
}

// rsaKeys are the key pairs of service account keys, shared between the
// emulators of one process: the n-th key an emulator issues is the n-th
// pair, so the keys of one emulator all differ, and a 2048-bit pair (a
// second of CPU under the race detector) is made once per process rather
// than per key. Keys are told apart by their id (kid), which is random per
// key; an assertion names it, or else is tried against its issuer's keys.
var (
	rsaMu   sync.Mutex
	rsaKeys []*rsa.PrivateKey
)

func rsaKey(n int) (*rsa.PrivateKey, error) {
	rsaMu.Lock()
	defer rsaMu.Unlock()
	for len(rsaKeys) <= n {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			return nil, err
		}
		rsaKeys = append(rsaKeys, k)
	}
	return rsaKeys[n], nil
}

// DeleteKeys revokes every key of a service account: assertions signed with
// them are refused from now on (tokens already minted live on).
func (e *Emulator) DeleteKeys(email string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if sa := e.accounts[email]; sa != nil {
		sa.keys = map[string]*rsa.PublicKey{}
	}
}

// SetMetadataAccount makes the metadata server's default service account
// the named one (which AddServiceAccount must have made).
func (e *Emulator) SetMetadataAccount(email string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.metadataSA = email
}

func tokenHash(tok string) string {
	h := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(h[:])
}

// mint makes an access token for an identity. Called with mu held.
func (e *Emulator) mint(email string, lifetime time.Duration) (string, error) {
	var b [48]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	tok := "ya29.emu-" + base64.RawURLEncoding.EncodeToString(b[:])
	e.tokens[tokenHash(tok)] = &issuedToken{email: email, expires: e.now().Add(lifetime)}
	return tok, nil
}

// tokenError is the OAuth2 error body.
func tokenError(w http.ResponseWriter, code int, kind, desc string) {
	writeJSON(w, code, map[string]string{"error": kind, "error_description": desc})
}

// serveToken is Google's token endpoint for the JWT bearer grant (RFC 7523)
// that service account keys use.
func (e *Emulator) serveToken(w http.ResponseWriter, r *http.Request, body []byte) {
	form, err := url.ParseQuery(string(body))
	if err != nil || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
		tokenError(w, http.StatusBadRequest, "invalid_request", "Expected a form body.")
		return
	}
	if form.Get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer" {
		tokenError(w, http.StatusBadRequest, "unsupported_grant_type", "Invalid grant_type: "+form.Get("grant_type"))
		return
	}
	claims, refusal := e.verifyAssertion(form.Get("assertion"))
	if refusal != "" {
		tokenError(w, http.StatusBadRequest, "invalid_grant", refusal)
		return
	}
	if claims.TargetAudience != "" {
		idt, err := idToken(claims, time.Now())
		if err != nil {
			tokenError(w, http.StatusInternalServerError, "internal_failure", err.Error())
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"id_token": idt})
		return
	}
	lifetime := e.opts.TokenLifetime
	if e.opts.Guesses.HonourAssertionExpiry {
		lifetime = min(lifetime, time.Duration(claims.Exp-claims.Iat)*time.Second)
	}
	e.mu.Lock()
	tok, err := e.mint(claims.Iss, lifetime)
	e.mu.Unlock()
	if err != nil {
		tokenError(w, http.StatusInternalServerError, "internal_failure", "no randomness")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"access_token": tok, "expires_in": int(lifetime / time.Second), "token_type": "Bearer"})
}

// GoogleTokenAudience is the aud Google documents for a service account's
// assertion. google-auth (Python, so gcloud) and the Node JWT client always
// sign it, whatever the key's token_uri; golang.org/x/oauth2 signs the
// token_uri itself, which for a real key is this same URL and for an
// emulator's key is the emulator's own token URL, so both are accepted.
const GoogleTokenAudience = "https://oauth2.googleapis.com/token"

type assertionClaims struct {
	Iss   string `json:"iss"`
	Scope string `json:"scope"`
	Aud   string `json:"aud"`
	Exp   int64  `json:"exp"`
	Iat   int64  `json:"iat"`
	Sub   string `json:"sub"`
	// TargetAudience asks for an ID token for that audience instead of
	// an access token (Google's documentation of service account ID
	// tokens); gcloud asks for one when it activates a key.
	TargetAudience string `json:"target_audience"`
}

// verifyAssertion checks a service account's signed JWT: a key the
// emulator issued (found by kid, or by the issuer when there is none), a valid
// RS256 signature, Google's token endpoint or this one as audience, a
// scope, and a lifetime of at most an hour that has not ended. The
// assertion's times come from the client's wall clock, so they are checked
// against the wall clock, not the emulator's. A refusal is the
// error_description Google's endpoint gives.
func (e *Emulator) verifyAssertion(jwt string) (*assertionClaims, string) {
	parts := strings.Split(jwt, ".")
	if len(parts) != 3 {
		return nil, "Invalid JWT: not three parts."
	}
	var hdr struct {
		Alg string `json:"alg"`
		Kid string `json:"kid"`
	}
	var claims assertionClaims
	hb, err1 := base64.RawURLEncoding.DecodeString(parts[0])
	cb, err2 := base64.RawURLEncoding.DecodeString(parts[1])
	sig, err3 := base64.RawURLEncoding.DecodeString(parts[2])
	if err1 != nil || err2 != nil || err3 != nil || json.Unmarshal(hb, &hdr) != nil || json.Unmarshal(cb, &claims) != nil {
		return nil, "Invalid JWT: undecodable."
	}
	if hdr.Alg != "RS256" {
		return nil, fmt.Sprintf("Invalid JWT: alg %s.", hdr.Alg)
	}
	e.mu.Lock()
	sa := e.accounts[claims.Iss]
	var key *rsa.PublicKey
	digest := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if sa != nil {
		// A kid names the key (x/oauth2 and google-auth send the key's
		// private_key_id), and one the account does not hold is refused.
		// The kid is optional: the Node JWT client signs without one, and
		// Google then tries every live key of the issuing account.
		if hdr.Kid != "" {
			if k := sa.keys[hdr.Kid]; k != nil && rsa.VerifyPKCS1v15(k, crypto.SHA256, digest[:], sig) == nil {
				key = k
			}
		} else {
			for _, k := range sa.keys {
				if rsa.VerifyPKCS1v15(k, crypto.SHA256, digest[:], sig) == nil {
					key = k
					break
				}
			}
		}
	}
	e.mu.Unlock()
	if sa == nil {
		return nil, "Invalid grant: account not found"
	}
	if key == nil {
		return nil, "Invalid JWT Signature."
	}
	now := time.Now().Unix()
	switch {
	case claims.Aud != GoogleTokenAudience && claims.Aud != e.TokenURI():
		return nil, fmt.Sprintf("Invalid JWT: aud must be %s.", GoogleTokenAudience)
	case claims.Scope == "" && claims.TargetAudience == "":
		return nil, "Invalid JWT: no scope."
	case claims.Exp <= claims.Iat || claims.Exp-claims.Iat > 3600:
		return nil, "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe."
	case claims.Exp < now || claims.Iat > now+300:
		return nil, "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe. Check your iat and exp values in the JWT claim."
	}
	return &claims, ""
}

// serveMetadata is the metadata server's token route for its default
// service account.
func (e *Emulator) serveMetadata(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Metadata-Flavor") != "Google" {
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte("Missing Metadata-Flavor:Google header.\n"))
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	p := strings.TrimPrefix(r.URL.Path, "/computeMetadata/v1/")
	if e.metadataSA == "" || (p != "instance/service-accounts/default/token" && p != "instance/service-accounts/"+e.metadataSA+"/token") {
		w.WriteHeader(http.StatusNotFound)
		return
	}
	tok, err := e.mint(e.metadataSA, e.opts.TokenLifetime)
	if err != nil {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	b, _ := json.Marshal(map[string]any{"access_token": tok, "expires_in": int(e.opts.TokenLifetime / time.Second), "token_type": "Bearer"})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Metadata-Flavor", "Google")
	_, _ = w.Write(b)
}

// authenticate finds the live token of a request; a missing, unknown or
// expired one is 401.
func (e *Emulator) authenticate(r *http.Request) (string, int) {
	h := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(h, "Bearer ")
	if !ok || tok == "" {
		return "", http.StatusUnauthorized
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	it := e.tokens[tokenHash(tok)]
	if it == nil || !e.now().Before(it.expires) {
		return "", http.StatusUnauthorized
	}
	return it.email, 0
}

// Accepts reports whether a bearer token is one the emulator minted and
// that has not expired on its clock: what its TokenReview route answers.
func (e *Emulator) Accepts(token string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	it := e.tokens[tokenHash(token)]
	return it != nil && e.now().Before(it.expires)
}

// tokenReview is authentication.k8s.io/v1 TokenReview, the parts the
// webhook token authenticator of kube-apiserver sends and reads.
type tokenReview struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   map[string]any    `json:"metadata,omitempty"`
	Spec       tokenReviewSpec   `json:"spec"`
	Status     tokenReviewStatus `json:"status"`
}

type tokenReviewSpec struct {
	Token     string   `json:"token,omitempty"`
	Audiences []string `json:"audiences,omitempty"`
}

type tokenReviewStatus struct {
	Authenticated bool             `json:"authenticated"`
	User          *tokenReviewUser `json:"user,omitempty"`
	Audiences     []string         `json:"audiences,omitempty"`
	Error         string           `json:"error,omitempty"`
}

type tokenReviewUser struct {
	Username string   `json:"username"`
	UID      string   `json:"uid,omitempty"`
	Groups   []string `json:"groups,omitempty"`
}

// serveTokenReview answers kube-apiserver's webhook token authentication:
// authenticated, as a cluster admin (system:masters), only for a token this
// emulator minted that is still alive on its clock. GKE maps IAM's
// container.admin to cluster-admin; the emulator treats every identity it
// knows as such.
func (e *Emulator) serveTokenReview(w http.ResponseWriter, body []byte) {
	var tr tokenReview
	if err := json.Unmarshal(body, &tr); err != nil || tr.Kind != "TokenReview" || !strings.HasPrefix(tr.APIVersion, "authentication.k8s.io/") {
		writeJSON(w, http.StatusBadRequest, map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "expected a TokenReview", "reason": "BadRequest", "code": 400})
		return
	}
	out := tokenReview{APIVersion: tr.APIVersion, Kind: "TokenReview", Metadata: map[string]any{"creationTimestamp": nil}, Spec: tokenReviewSpec{Audiences: tr.Spec.Audiences}}
	e.mu.Lock()
	it := e.tokens[tokenHash(tr.Spec.Token)]
	alive := it != nil && e.now().Before(it.expires)
	e.mu.Unlock()
	if alive {
		out.Status = tokenReviewStatus{Authenticated: true, Audiences: tr.Spec.Audiences, User: &tokenReviewUser{
			Username: it.email, UID: tokenHash(it.email)[:20], Groups: []string{"system:masters", "system:authenticated"},
		}}
	} else {
		out.Status = tokenReviewStatus{Authenticated: false, Error: "token not recognised or expired"}
	}
	writeJSON(w, http.StatusOK, out)
}

var (
	idKeyOnce sync.Once
	idKey     *rsa.PrivateKey
	idKeyErr  error
)

// idToken is the ID token Google's endpoint answers an assertion carrying
// target_audience with: an RS256 JWT from accounts.google.com naming the
// service account. Its key is the emulator's own; clients that verify ID
// tokens against Google's published keys would refuse it, and none of the
// flows here verify them.
func idToken(c *assertionClaims, now time.Time) (string, error) {
	idKeyOnce.Do(func() { idKey, idKeyErr = rsa.GenerateKey(rand.Reader, 2048) })
	if idKeyErr != nil {
		return "", idKeyErr
	}
	sum := sha256.Sum256([]byte(c.Iss))
	sub := new(big.Int).SetBytes(sum[:8]).String()
	hdr, _ := json.Marshal(map[string]string{"alg": "RS256", "typ": "JWT", "kid": "gkeemu-id-token"})
	body, _ := json.Marshal(map[string]any{
		"iss": "https://accounts.google.com", "aud": c.TargetAudience, "azp": c.Iss, "sub": sub,
		"email": c.Iss, "email_verified": true, "iat": now.Unix(), "exp": now.Add(time.Hour).Unix(),
	})
	in := base64.RawURLEncoding.EncodeToString(hdr) + "." + base64.RawURLEncoding.EncodeToString(body)
	d := sha256.Sum256([]byte(in))
	sig, err := rsa.SignPKCS1v15(rand.Reader, idKey, crypto.SHA256, d[:])
	if err != nil {
		return "", err
	}
	return in + "." + base64.RawURLEncoding.EncodeToString(sig), nil
}
