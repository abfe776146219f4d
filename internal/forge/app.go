package forge

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"maps"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/google/go-github/v62/github"
)

// Installation tokens live an hour. One is renewed this long before it
// expires, so that a request never leaves with a token that dies in flight
// and clocks a little apart do not matter.
const tokenRefreshMargin = 5 * time.Minute

// The app's JWT is backdated against clock drift (GitHub's advice) and lives
// well under GitHub's ten-minute ceiling.
const (
	jwtBackdate = 60 * time.Second
	jwtLifetime = 9 * time.Minute
)

// appAuth holds the installation token, the one derived secret the forge
// keeps: minting one per request would spend a request and a signature each
// time. The private key is resolved for each mint and dropped.
type appAuth struct {
	g      *GitHub
	client *github.Client

	mu      sync.Mutex
	tok     string
	expires time.Time
	// perms are the permissions GitHub granted the last token minted.
	perms map[string]string
}

// permissions returns the permissions of the last token minted.
func (a *appAuth) permissions() map[string]string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return maps.Clone(a.perms)
}

func newAppAuth(g *GitHub, base *url.URL) *appAuth {
	a := &appAuth{g: g}
	a.client = newClient(base, &jwtTransport{a: a, base: g.cfg.Transport})
	return a
}

// token returns a live installation token, minting one when none is held or
// the one held is about to expire.
func (a *appAuth) token(ctx context.Context) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.g.clock.Now()
	if a.tok != "" && now.Before(a.expires.Add(-tokenRefreshMargin)) {
		return a.tok, nil
	}
	a.tok = ""
	op := "mint an installation token"
	it, resp, err := a.client.Apps.CreateInstallationToken(ctx, a.g.cfg.App.InstallationID, nil)
	if err != nil {
		return "", a.g.classify(ctx, op, resp, err)
	}
	if it.GetToken() == "" {
		return "", &Error{Class: ClassUnexpected, Op: op, Status: resp.StatusCode, Message: "GitHub returned no token"}
	}
	a.tok = it.GetToken()
	a.perms = permissionsOf(it.GetPermissions())
	a.expires = it.GetExpiresAt().Time
	if a.expires.IsZero() {
		// GitHub always says; if it does not, assume the documented hour.
		a.expires = now.Add(time.Hour)
	}
	a.g.log.Debug("github installation token minted", "expires", a.expires)
	return a.tok, nil
}

// forget drops the installation token after GitHub refused it.
func (a *appAuth) forget() {
	a.mu.Lock()
	a.tok = ""
	a.mu.Unlock()
}

// jwtTransport authenticates the token request as the app itself.
type jwtTransport struct {
	a    *appAuth
	base http.RoundTripper
}

func (t *jwtTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	jwt, err := t.a.jwt(req.Context())
	if err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	r := req.Clone(req.Context())
	r.Header.Set("Authorization", "Bearer "+jwt)
	r.Header.Set(hdrAPIVersion, APIVersion)
	resp, err := t.base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	hideLimitHeaders(resp.Header)
	return resp, nil
}

// jwt signs a fresh app JWT (RS256) with the private key, resolved now.
// It is written here rather than taken from a JWT library: the three fixed
// claims and one signature are a few lines with crypto/rsa, and a library
// would add a dependency for no check we need.
func (a *appAuth) jwt(ctx context.Context) (string, error) {
	pemText, err := a.g.resolve(ctx, a.g.cfg.App.PrivateKey, "github.app.privateKey")
	if err != nil {
		return "", err
	}
	key, err := parseRSAKey([]byte(pemText))
	if err != nil {
		return "", &Error{Class: ClassCredentials, Op: "read github.app.privateKey", Message: err.Error() + " (" + a.g.cfg.App.PrivateKey + ")"}
	}
	now := a.g.clock.Now()
	return signJWT(key, a.g.cfg.App.ID, now.Add(-jwtBackdate), now.Add(jwtLifetime))
}

// parseRSAKey reads a PEM RSA key, PKCS#1 (what GitHub hands out) or PKCS#8.
// Its errors never quote the key.
func parseRSAKey(pemText []byte) (*rsa.PrivateKey, error) {
	block, _ := pem.Decode(pemText)
	if block == nil {
		return nil, errors.New("the private key is not PEM")
	}
	if k, err := x509.ParsePKCS1PrivateKey(block.Bytes); err == nil {
		return k, nil
	}
	k8, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, errors.New("the private key is neither PKCS#1 nor PKCS#8 RSA")
	}
	k, ok := k8.(*rsa.PrivateKey)
	if !ok {
		return nil, errors.New("the private key is not an RSA key")
	}
	return k, nil
}

func signJWT(key *rsa.PrivateKey, issuer string, iat, exp time.Time) (string, error) {
	enc := base64.RawURLEncoding
	header, _ := json.Marshal(map[string]string{"alg": "RS256", "typ": "JWT"})
	claims, _ := json.Marshal(struct {
		IAT int64  `json:"iat"`
		EXP int64  `json:"exp"`
		ISS string `json:"iss"`
	}{iat.Unix(), exp.Unix(), issuer})
	signing := enc.EncodeToString(header) + "." + enc.EncodeToString(claims)
	sum := sha256.Sum256([]byte(signing))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, sum[:])
	if err != nil {
		return "", &Error{Class: ClassCredentials, Op: "sign the app JWT", Message: "the private key cannot sign"}
	}
	return signing + "." + enc.EncodeToString(sig), nil
}
