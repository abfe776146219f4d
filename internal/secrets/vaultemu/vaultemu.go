// Package vaultemu is a small HashiCorp Vault emulator for tests: the KV
// version 2 read path (GET /v1/MOUNT/data/PATH), tokens, namespaces and the
// failures the agent must survive. It answers the way Vault does (status
// codes, {"errors":[...]} bodies, the versioned data shape), so that code
// tested against it works against a real server. Only tests import it.
package vaultemu

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Request is what the emulator saw of one request: enough to assert on the
// headers a client sent, never the token itself.
type Request struct {
	Method    string
	Path      string
	Namespace string
	HasToken  bool
}

type version struct {
	data      map[string]any
	created   time.Time
	deleted   time.Time
	destroyed bool
}

type secret struct {
	versions []version // versions[i] is version i+1
}

// Server is a running emulator on 127.0.0.1.
type Server struct {
	// URL is the base address, as VAULT_ADDR would hold it.
	URL string
	// Token is a token allowed to read everything.
	Token string

	srv *httptest.Server

	mu       sync.Mutex
	tokens   map[string][]string // token -> readable path prefixes (nil: all)
	secrets  map[string]*secret  // namespace + "\x00" + mount/path
	mounts   map[string]bool     // namespace + "\x00" + mount
	failures []int               // statuses to answer next, oldest first
	sealed   bool
	delay    time.Duration
	requests []Request
}

// Start starts an emulator with a fresh root token. Close it when done.
func Start() *Server {
	s := &Server{
		Token:   "hvs." + randomHex(12),
		tokens:  map[string][]string{},
		secrets: map[string]*secret{},
		mounts:  map[string]bool{},
	}
	s.tokens[s.Token] = nil
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.srv.URL
	return s
}

// Close stops the server.
func (s *Server) Close() { s.srv.Close() }

// AddToken creates a token that may read only paths (MOUNT/PATH, without
// /data/) starting with one of the prefixes.
func (s *Server) AddToken(prefixes ...string) string {
	tok := "hvs." + randomHex(12)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokens[tok] = append([]string{}, prefixes...)
	return tok
}

// Put writes a new version of the secret at path (MOUNT/PATH, the mount
// being the first segment, created on first use) in the root namespace.
func (s *Server) Put(path string, data map[string]any) int { return s.PutIn("", path, data) }

// PutIn is Put in a namespace ("" is the root namespace).
func (s *Server) PutIn(namespace, path string, data map[string]any) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	mount, _, _ := strings.Cut(path, "/")
	s.mounts[namespace+"\x00"+mount] = true
	key := namespace + "\x00" + path
	sec := s.secrets[key]
	if sec == nil {
		sec = &secret{}
		s.secrets[key] = sec
	}
	sec.versions = append(sec.versions, version{data: maps.Clone(data), created: time.Now().UTC()})
	return len(sec.versions)
}

// Delete soft-deletes the latest version, as `vault kv delete` does.
func (s *Server) Delete(path string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sec := s.secrets["\x00"+path]; sec != nil && len(sec.versions) > 0 {
		sec.versions[len(sec.versions)-1].deleted = time.Now().UTC()
	}
}

// FailNext makes the next n requests answer status (503, 500, 429, ...)
// with a Vault-style error body.
func (s *Server) FailNext(n, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.failures = append(s.failures, status)
	}
}

// Seal makes every request answer 503 "Vault is sealed" until Unseal.
func (s *Server) Seal() { s.mu.Lock(); s.sealed = true; s.mu.Unlock() }

// Unseal undoes Seal.
func (s *Server) Unseal() { s.mu.Lock(); s.sealed = false; s.mu.Unlock() }

// SetDelay makes every answer wait d first (or until the client gives up),
// to test deadlines.
func (s *Server) SetDelay(d time.Duration) { s.mu.Lock(); s.delay = d; s.mu.Unlock() }

// Requests returns the requests seen so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request{}, s.requests...)
}

func (s *Server) serve(w http.ResponseWriter, req *http.Request) {
	ns := strings.Trim(req.Header.Get("X-Vault-Namespace"), "/")
	tok := req.Header.Get("X-Vault-Token")
	s.mu.Lock()
	s.requests = append(s.requests, Request{Method: req.Method, Path: req.URL.Path, Namespace: ns, HasToken: tok != ""})
	delay := s.delay
	var fail int
	if len(s.failures) > 0 {
		fail, s.failures = s.failures[0], s.failures[1:]
	}
	sealed := s.sealed
	prefixes, known := s.tokens[tok]
	s.mu.Unlock()

	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-req.Context().Done():
			return
		}
	}
	switch {
	case sealed:
		writeErrors(w, http.StatusServiceUnavailable, "Vault is sealed")
		return
	case fail != 0:
		writeErrors(w, fail, http.StatusText(fail))
		return
	}
	// Vault checks the token before it looks at the path.
	if !known {
		writeErrors(w, http.StatusForbidden, "permission denied")
		return
	}
	rest, ok := strings.CutPrefix(req.URL.Path, "/v1/")
	mount, sub, _ := strings.Cut(rest, "/")
	path, isData := strings.CutPrefix(sub, "data/")
	s.mu.Lock()
	mounted := s.mounts[ns+"\x00"+mount]
	s.mu.Unlock()
	if !ok || !mounted || !isData || path == "" {
		writeErrors(w, http.StatusNotFound, "no handler for route \""+rest+"\". route entry not found.")
		return
	}
	if req.Method != http.MethodGet {
		writeErrors(w, http.StatusMethodNotAllowed, "unsupported operation")
		return
	}
	if prefixes != nil && !allowed(prefixes, mount+"/"+path) {
		writeErrors(w, http.StatusForbidden, "1 error occurred:\n\t* permission denied\n\n")
		return
	}

	s.mu.Lock()
	sec := s.secrets[ns+"\x00"+mount+"/"+path]
	var v version
	var n int
	if sec != nil {
		n = len(sec.versions)
		if q := req.URL.Query().Get("version"); q != "" && q != "0" {
			if i, err := strconv.Atoi(q); err == nil && i >= 1 && i <= n {
				n = i
			} else {
				n = 0
			}
		}
		if n > 0 {
			v = sec.versions[n-1]
			v.data = maps.Clone(v.data)
		}
	}
	s.mu.Unlock()
	if n == 0 {
		writeJSON(w, http.StatusNotFound, map[string]any{"errors": []string{}})
		return
	}
	meta := map[string]any{
		"created_time":    v.created.Format(time.RFC3339Nano),
		"custom_metadata": nil,
		"deletion_time":   "",
		"destroyed":       v.destroyed,
		"version":         n,
	}
	var data any = v.data
	status := http.StatusOK
	if !v.deleted.IsZero() {
		// Vault answers a deleted version with 404 and its metadata.
		meta["deletion_time"] = v.deleted.Format(time.RFC3339Nano)
		data, status = nil, http.StatusNotFound
	}
	writeJSON(w, status, map[string]any{
		"request_id":     randomHex(16),
		"lease_id":       "",
		"renewable":      false,
		"lease_duration": 0,
		"data":           map[string]any{"data": data, "metadata": meta},
		"wrap_info":      nil,
		"warnings":       nil,
		"auth":           nil,
	})
}

func allowed(prefixes []string, path string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(path, p) {
			return true
		}
	}
	return false
}

func writeErrors(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{"errors": []string{msg}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
