package githubemu

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// accessToken serves POST /app/installations/{id}/access_tokens: the app
// authenticates with an RS256 JWT signed by its private key, and gets an
// installation token good for an hour.
func (s *Server) accessToken(req *http.Request, path string) reply {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	if len(parts) != 4 || parts[3] != "access_tokens" {
		return notFound()
	}
	inst, err := strconv.ParseInt(parts[2], 10, 64)
	app, ok := s.apps[inst]
	if err != nil || !ok {
		r := notFound()
		r.free = true
		return r
	}
	jwt, ok := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
	if !ok {
		r := errReply(http.StatusUnauthorized, "A JSON web token could not be decoded")
		r.free = true
		return r
	}
	if msg := s.checkJWT(jwt, app); msg != "" {
		r := errReply(http.StatusUnauthorized, msg)
		r.free = true
		return r
	}
	b := make([]byte, 18)
	rand.Read(b)
	tok := "ghs_" + hex.EncodeToString(b)
	exp := s.clock.Now().Add(time.Hour).Truncate(time.Second)
	s.tokens[tok] = tokenInfo{login: app.slug + "[bot]", expires: exp, installation: true}
	s.minted++
	r := jsonReply(http.StatusCreated, map[string]any{
		"token": tok, "expires_at": exp.UTC().Format(time.RFC3339),
		"permissions":          appPermissions(),
		"repository_selection": "all",
	})
	r.free = true
	return r
}

// getApp serves GET /app: the App its JWT authenticates (id, slug, name).
func (s *Server) getApp(req *http.Request) reply {
	jwt, ok := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
	msg := "A JSON web token could not be decoded"
	if ok {
		for _, app := range s.apps {
			m := s.checkJWT(jwt, app)
			if m == "" {
				id, err := strconv.ParseInt(app.id, 10, 64)
				if err != nil {
					id = idOf(app.id) // a client id: some stable number
				}
				r := jsonReply(http.StatusOK, map[string]any{
					"id": id, "slug": app.slug, "client_id": app.id, "node_id": "A_" + app.slug, "name": app.slug,
					"owner":       userJSON(req, "acme"),
					"html_url":    "http://" + req.Host + "/apps/" + app.slug,
					"permissions": appPermissions(),
					"events":      []string{"pull_request", "push"},
				})
				r.free = true
				return r
			}
			if m != msg {
				msg = m
			}
		}
	}
	r := errReply(http.StatusUnauthorized, msg)
	r.free = true
	return r
}

// checkJWT returns GitHub's complaint about a JWT, or "" when it is good.
func (s *Server) checkJWT(jwt string, app appInfo) string {
	const undecodable = "A JSON web token could not be decoded"
	parts := strings.Split(jwt, ".")
	if len(parts) != 3 {
		return undecodable
	}
	enc := base64.RawURLEncoding
	hb, err1 := enc.DecodeString(parts[0])
	cb, err2 := enc.DecodeString(parts[1])
	sig, err3 := enc.DecodeString(parts[2])
	if err1 != nil || err2 != nil || err3 != nil {
		return undecodable
	}
	var header struct {
		Alg string `json:"alg"`
	}
	var claims struct {
		IAT json.Number `json:"iat"`
		EXP json.Number `json:"exp"`
		ISS any         `json:"iss"`
	}
	if json.Unmarshal(hb, &header) != nil || json.Unmarshal(cb, &claims) != nil || header.Alg != "RS256" {
		return undecodable
	}
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if rsa.VerifyPKCS1v15(app.key, crypto.SHA256, sum[:], sig) != nil {
		return "A JSON web token could not be decoded"
	}
	iss := ""
	switch v := claims.ISS.(type) {
	case string:
		iss = v
	case float64:
		iss = strconv.FormatInt(int64(v), 10)
	}
	if iss != app.id {
		return "Issuer claim ('iss') must be the GitHub App's id"
	}
	iat, err1 := claims.IAT.Int64()
	exp, err2 := claims.EXP.Int64()
	if err1 != nil || err2 != nil {
		return undecodable
	}
	now := s.clock.Now().Unix()
	switch {
	case iat > now:
		return "'Issued at' claim ('iat') must be an Integer representing a time in the past."
	case exp <= now:
		return "'Expiration time' claim ('exp') must be a numeric value representing the future time at which the assertion expires."
	case exp-iat > 600 || exp > now+600:
		return "'Expiration time' claim ('exp') is too far in the future."
	}
	return ""
}

// appPermissions are what an installation of the emulator's Apps may do:
// what the agent needs, check runs included.
func appPermissions() map[string]string {
	return map[string]string{"statuses": "write", "issues": "write", "pull_requests": "read", "contents": "read", "checks": "write"}
}
