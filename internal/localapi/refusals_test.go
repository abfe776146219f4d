package localapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/localapi"
	"github.com/fleet-agent/fleet-agent/internal/textline"
)

// TestEveryRefusalIsJSON: a request the local API does not serve (a wrong
// method, a route it does not have, a path spelt otherwise, a body of the
// wrong shape) is answered as every other refusal is, {code, message} in
// JSON, with advice and in our own words, before it reaches the loop (the
// handler here has none, so a request that reached it would fail).
func TestEveryRefusalIsJSON(t *testing.T) {
	doctor := localapi.Route{Method: "GET", Path: "/v1/doctor", Handle: func(w http.ResponseWriter, r *http.Request) {
		localapi.WriteJSON(w, http.StatusOK, map[string]bool{"doctor": true})
	}}
	srv := httptest.NewServer(localapi.Handler(nil, nil, doctor))
	t.Cleanup(srv.Close)
	for _, c := range []struct {
		method, path, body string
		status             int
		allow              string
		says               []string
	}{
		{"POST", "/v1/substrates", "", 405, "GET", []string{"GET", "docs/commands.md"}},
		{"DELETE", "/v1/status", "", 405, "GET", []string{"GET"}},
		{"GET", "/v1/plan", "", 405, "POST", []string{"POST"}},
		{"OPTIONS", "/v1/ping", "", 405, "GET", []string{"GET"}},
		{"HEAD", "/v1/ping", "", 405, "GET", nil},
		{"POST", "/v1/doctor", "", 405, "GET", []string{"GET"}},
		{"PUT", "/v1/doctor", "", 405, "GET", nil},
		{"DELETE", "/v1/doctor", "", 405, "GET", nil},
		{"PATCH", "/v1/doctor", "", 405, "GET", nil},
		{"GET", "/v1/nope", "", 404, "", []string{"/v1/nope", "docs/commands.md"}},
		{"GET", "/v1/", "", 404, "", []string{"docs/commands.md"}},
		{"GET", "/v1/substrates/", "", 404, "", []string{"docs/commands.md"}},
		{"GET", "/V1/ping", "", 404, "", []string{"docs/commands.md"}},
		{"GET", "/v1//ping", "", 404, "", []string{"docs/commands.md"}},
		{"GET", "/", "", 404, "", []string{"docs/commands.md"}},
		{"POST", "/v1/plan-document", `{"document":5}`, 400, "", []string{"document", "base64"}},
		{"POST", "/v1/plan", `{"commit":true}`, 400, "", []string{"commit", "string"}},
		{"POST", "/v1/plan-document", `{"document":"***"}`, 400, "", []string{"base64"}},
		{"POST", "/v1/plan", `{"commit":`, 400, "", []string{"JSON"}},
		{"POST", "/v1/plan", ``, 400, "", []string{"empty"}},
		{"POST", "/v1/plan", `[1]`, 400, "", []string{"object"}},
		{"POST", "/v1/plan-document", `{"prune":"yes"}`, 400, "", []string{"prune", "true or false"}},
	} {
		req, err := http.NewRequest(c.method, srv.URL+c.path, strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		// No redirect is followed: a redirect is an answer too.
		resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", c.method, c.path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		name := c.method + " " + c.path + " " + c.body
		if resp.StatusCode != c.status {
			t.Errorf("%s: status %d, want %d (%s)", name, resp.StatusCode, c.status, body)
		}
		if got := resp.Header.Get("Allow"); got != c.allow {
			t.Errorf("%s: Allow %q, want %q", name, got, c.allow)
		}
		if c.method == "HEAD" {
			continue
		}
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s: Content-Type %q, want application/json", name, ct)
		}
		var e struct{ Code, Message string }
		if err := json.Unmarshal(body, &e); err != nil || e.Code != "INVALID_INPUT" || e.Message == "" {
			t.Errorf("%s: body %q is not a refusal {code: INVALID_INPUT, message} (%v)", name, body, err)
			continue
		}
		for _, s := range c.says {
			if !strings.Contains(e.Message, s) {
				t.Errorf("%s: message %q does not say %q", name, e.Message, s)
			}
		}
		for _, leak := range []string{"Go struct", "uint8", "[]", "json:", "localapi.", "Request."} {
			if strings.Contains(e.Message, leak) {
				t.Errorf("%s: message %q speaks Go (%q)", name, e.Message, leak)
			}
		}
	}
}

// An answer's JSON quotes the document's values; read raw (curl of the ops
// listener's /status), what a terminal would obey is written as its
// escape, and the JSON still reads back the same.
func TestAnswersEscapeWhatATerminalObeys(t *testing.T) {
	const evil = "R\u0085NEL\u009bCSI\u2028LS\u202eRLO\u2066LRI\u200eLRM\x7fDEL"
	rec := httptest.NewRecorder()
	localapi.WriteJSON(rec, http.StatusOK, map[string]string{"document": evil})
	body := rec.Body.String()
	if !textline.IsPlain(strings.TrimSuffix(body, "\n")) {
		t.Errorf("answer %q is not plain text", body)
	}
	var back map[string]string
	if err := json.Unmarshal(rec.Body.Bytes(), &back); err != nil || back["document"] != evil {
		t.Errorf("answer %q reads back as %q (%v)", body, back["document"], err)
	}
}
