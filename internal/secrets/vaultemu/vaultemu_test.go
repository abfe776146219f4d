package vaultemu

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

func get(t *testing.T, s *Server, path, token, ns string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, s.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("X-Vault-Token", token)
	}
	if ns != "" {
		req.Header.Set("X-Vault-Namespace", ns)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	if err := json.Unmarshal(b, &body); err != nil {
		t.Fatalf("body %q: %v", b, err)
	}
	return resp.StatusCode, body
}

func TestShapes(t *testing.T) {
	s := Start()
	t.Cleanup(s.Close)
	if !strings.HasPrefix(s.URL, "http://127.0.0.1:") {
		t.Errorf("URL = %s, want loopback", s.URL)
	}
	s.Put("secret/app", map[string]any{"k": "v1"})
	if n := s.Put("secret/app", map[string]any{"k": "v2"}); n != 2 {
		t.Errorf("version = %d", n)
	}

	code, body := get(t, s, "/v1/secret/data/app", s.Token, "")
	data := body["data"].(map[string]any)
	if code != 200 || data["data"].(map[string]any)["k"] != "v2" || data["metadata"].(map[string]any)["version"] != float64(2) {
		t.Errorf("latest: %d %v", code, body)
	}
	code, body = get(t, s, "/v1/secret/data/app?version=1", s.Token, "")
	if code != 200 || body["data"].(map[string]any)["data"].(map[string]any)["k"] != "v1" {
		t.Errorf("version 1: %d %v", code, body)
	}

	code, body = get(t, s, "/v1/secret/data/app", "", "")
	if code != 403 || body["errors"].([]any)[0] != "permission denied" {
		t.Errorf("no token: %d %v", code, body)
	}
	code, body = get(t, s, "/v1/secret/data/none", s.Token, "")
	if errs, ok := body["errors"].([]any); code != 404 || !ok || len(errs) != 0 {
		t.Errorf("missing: %d %v", code, body)
	}
	code, _ = get(t, s, "/v1/secret/data/app", s.Token, "other-ns")
	if code != 404 {
		t.Errorf("other namespace: %d", code)
	}

	s.Delete("secret/app")
	code, body = get(t, s, "/v1/secret/data/app", s.Token, "")
	meta := body["data"].(map[string]any)["metadata"].(map[string]any)
	if code != 404 || body["data"].(map[string]any)["data"] != nil || meta["deletion_time"] == "" {
		t.Errorf("deleted: %d %v", code, body)
	}

	s.FailNext(1, 503)
	if code, _ = get(t, s, "/v1/secret/data/app", s.Token, ""); code != 503 {
		t.Errorf("FailNext: %d", code)
	}
	if len(s.Requests()) != 7 {
		t.Errorf("requests = %d", len(s.Requests()))
	}
}
