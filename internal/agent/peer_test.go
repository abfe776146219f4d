package agent_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/agent"
	"github.com/fleet-agent/fleet-agent/internal/localapi"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

// socketOf serves h on a real unix socket with the agent's socket server,
// and returns the socket's path.
func socketOf(t *testing.T, h http.Handler) (string, *http.Server) {
	t.Helper()
	// A unix socket's path is at most 107 bytes; t.TempDir can be longer.
	dir, err := os.MkdirTemp("", "fa-sock")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "api.sock")
	l, err := localapi.ListenSocket(path, "")
	if err != nil {
		t.Fatal(err)
	}
	srv := localapi.SocketServer(h)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	t.Cleanup(func() {
		_ = srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("the socket server stopped: %v", err)
		}
	})
	return path, srv
}

// realWho is what the audit log must say for this test process.
func realWho(t *testing.T) string {
	t.Helper()
	host, _ := os.Hostname()
	uid := strconv.Itoa(os.Getuid())
	u, err := user.LookupId(uid)
	if err != nil {
		return "uid " + uid + "@" + host
	}
	return u.Username + "@" + host + " (uid " + uid + ")"
}

// A client of the socket that claims to be root is audited as who it is:
// the uid the kernel gives for the connection, never the request's by or
// who field.
func TestSocketAuditsThePeersCredentials(t *testing.T) {
	w := newWorld(t, agent.Config{RequireReviewedPlan: true})
	path, _ := socketOf(t, localapi.Handler(w.agent, w.store))
	c := localapi.NewClient(path)
	boot := w.commit(t, "main", docV2, "unreviewed")
	w.tick(t) // refused: the tip is not reviewed
	var p localapi.PlanResponse
	if err := c.Do(t.Context(), "POST", "/v1/plan", localapi.PlanRequest{Commit: boot}, &p); err != nil {
		t.Fatal(err)
	}
	var applied localapi.PlanResponse
	if err := c.Do(t.Context(), "POST", "/v1/apply", localapi.ApplyRequest{Commit: boot, PlanHash: p.PlanHash, By: "root"}, &applied); err != nil {
		t.Fatal(err)
	}
	var edited map[string]any
	if err := c.Do(t.Context(), "POST", "/v1/edit", localapi.EditRequest{Kind: "pool", Name: "vps", Set: map[string]any{"gpuModel": "L4"}, Who: "root"}, &edited); err != nil {
		t.Fatal(err)
	}
	want := realWho(t)
	if edited["who"] != want {
		t.Errorf("the edit answered it was audited as %v, want %q", edited["who"], want)
	}
	var rows []state.AuditRow
	var ap *state.Applied
	if err := w.store.View(func(tx *state.Tx) (err error) {
		if rows, err = tx.Audit(); err != nil {
			return err
		}
		ap, err = tx.Applied()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, r := range rows {
		seen[r.Action]++
		if r.Who != want {
			t.Errorf("audit row %d (%s) names %q, want %q", r.Seq, r.Action, r.Who, want)
		}
	}
	if seen["apply"] != 1 || seen["edit"] != 1 {
		t.Errorf("audit rows by action: %v", seen)
	}
	if ap == nil || ap.AppliedBy != want {
		t.Errorf("the applied record names %+v, want %q", ap, want)
	}
}

// The local API served on a connection without peer credentials (not its
// unix socket) refuses what it would have to audit.
func TestLocalAPIWithoutPeerRefusesAuditedRequests(t *testing.T) {
	w := newWorld(t, agent.Config{})
	srv := httptest.NewServer(localapi.Handler(w.agent, w.store))
	t.Cleanup(srv.Close)
	for path, body := range map[string]string{
		"/v1/edit":  `{"kind":"site","name":"fra","set":{"region":"us"},"who":"root"}`,
		"/v1/apply": `{"commit":"abc","planHash":"def","by":"root"}`,
	} {
		resp, err := http.Post(srv.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var e struct{ Code, Message string }
		_ = json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnprocessableEntity || e.Code != "INVALID_STATE" || !strings.Contains(e.Message, "peer credentials") {
			t.Errorf("%s without peer credentials: %d %+v", path, resp.StatusCode, e)
		}
	}
}

// A break-glass edit through the agent is drift at once: the agent checks
// the applied document again on its next step rather than at the next
// drift.every, so status does not say "drift: none" over the edit.
func TestEditThroughTheAgentIsCheckedAtOnce(t *testing.T) {
	w := newWorld(t, agent.Config{DriftEvery: time.Hour})
	w.commit(t, "main", docV2, "a pool")
	w.tick(t) // applied, and drift checked: none
	path, _ := socketOf(t, localapi.Handler(w.agent, w.store))
	var edited map[string]any
	if err := localapi.NewClient(path).Do(t.Context(), "POST", "/v1/edit", localapi.EditRequest{Kind: "ownerQuota", Name: "vps:gpu", Set: map[string]any{"max": 2}}, &edited); err != nil {
		t.Fatal(err)
	}
	w.tick(t)
	v, err := agent.Status(w.store, "root")
	if err != nil {
		t.Fatal(err)
	}
	if v.Drift == nil || !strings.Contains(string(v.Drift.Changes), "vps:gpu") {
		t.Fatalf("the edit is not drift after the next step: %+v\n%s", v.Drift, w.log.String())
	}
}
