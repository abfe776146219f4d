package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/user"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

// The local API: HTTP over a unix socket (mode 0660, group socketGroup),
// so the command line works beside the daemon that holds the state file.

// apiError is the error body of the local API.
type apiError struct {
	Code    refusal.Code `json:"code"`
	Message string       `json:"message"`
}

// PlanRequest asks for the plan of a commit of the branch.
type PlanRequest struct {
	Commit string `json:"commit"`
	Output string `json:"output,omitempty"` // text (default), json, markdown
	Calls  bool   `json:"calls,omitempty"`
}

// ApplyRequest applies a commit of the branch by hand.
type ApplyRequest struct {
	Commit   string `json:"commit"`
	PlanHash string `json:"planHash"`
	By       string `json:"by"`
}

// PlanResponse carries a rendered plan.
type PlanResponse struct {
	Commit   string `json:"commit"`
	Output   string `json:"output"`
	PlanHash string `json:"planHash"`
	Blocked  bool   `json:"blocked"`
	Calls    int    `json:"calls"`
	Applied  int    `json:"applied,omitempty"`
}

// Handler serves the local API. Extra routes (status, export, edit,
// backup) are added by the caller with Handle.
func (a *Agent) Handler() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/ping", func(w http.ResponseWriter, r *http.Request) {
		WriteJSON(w, http.StatusOK, map[string]any{"agent": true, "branch": a.cfg.Branch, "following": true})
	})
	mux.HandleFunc("POST /v1/plan", func(w http.ResponseWriter, r *http.Request) {
		var req PlanRequest
		if !readJSON(w, r, &req) {
			return
		}
		p, full, err := a.PlanCommit(r.Context(), req.Commit)
		if err != nil {
			WriteError(w, err)
			return
		}
		out, err := render(p, req.Output, req.Calls, full, a.cfg.Branch)
		if err != nil {
			WriteError(w, err)
			return
		}
		WriteJSON(w, http.StatusOK, PlanResponse{Commit: full, Output: out, PlanHash: p.PlanHash, Blocked: p.Blocked(), Calls: len(p.Calls)})
	})
	mux.HandleFunc("POST /v1/apply", func(w http.ResponseWriter, r *http.Request) {
		var req ApplyRequest
		if !readJSON(w, r, &req) {
			return
		}
		if req.By == "" {
			req.By = "unknown@local"
		}
		p, n, err := a.ApplyCommit(r.Context(), req.Commit, req.PlanHash, req.By)
		if err != nil {
			resp := apiError{Code: refusal.CodeOf(err), Message: errMessage(err)}
			if p != nil {
				// The plan explains a refusal: send it along.
				out, _ := render(p, "text", false, req.Commit, a.cfg.Branch)
				resp.Message = out + resp.Message
			}
			WriteJSON(w, statusOf(resp.Code), resp)
			return
		}
		out, _ := render(p, "text", false, req.Commit, a.cfg.Branch)
		WriteJSON(w, http.StatusOK, PlanResponse{Commit: req.Commit, Output: out, PlanHash: p.PlanHash, Calls: len(p.Calls), Applied: n})
	})
	return mux
}

func errMessage(err error) string {
	var r *refusal.Error
	if errors.As(err, &r) {
		return r.Message
	}
	return err.Error()
}

func statusOf(c refusal.Code) int {
	switch c {
	case refusal.InvalidInput:
		return http.StatusBadRequest
	case refusal.PlanBlocked, refusal.InvalidState, refusal.FleetDrifted:
		return http.StatusUnprocessableEntity
	case refusal.ConfigDrift:
		return http.StatusConflict
	case refusal.Unavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// WriteError answers a refusal with the status its code maps to.
func WriteError(w http.ResponseWriter, err error) {
	code := refusal.CodeOf(err)
	WriteJSON(w, statusOf(code), apiError{Code: code, Message: errMessage(err)})
}

// WriteJSON answers v as JSON, without HTML escaping.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(io.LimitReader(r.Body, 32<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		WriteJSON(w, http.StatusBadRequest, apiError{Code: refusal.InvalidInput, Message: "bad request: " + err.Error()})
		return false
	}
	return true
}

// ListenSocket creates the socket (removing a stale one), mode 0660 and,
// when group is set, owned by that group.
func ListenSocket(path, group string) (net.Listener, error) {
	if c, err := net.DialTimeout("unix", path, 200*time.Millisecond); err == nil {
		c.Close()
		return nil, refusal.New(refusal.InvalidState, "another agent already serves %s; stop it first", path)
	}
	_ = os.Remove(path)
	old := syscall.Umask(0o117)
	l, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, refusal.Wrap(refusal.InvalidState, err, "cannot listen on the socket %s", path)
	}
	if err := os.Chmod(path, 0o660); err != nil {
		l.Close()
		return nil, err
	}
	if group != "" {
		g, err := user.LookupGroup(group)
		if err != nil {
			l.Close()
			return nil, refusal.Wrap(refusal.InvalidInput, err, "socketGroup %q", group)
		}
		gid, _ := strconv.Atoi(g.Gid)
		if err := os.Chown(path, -1, gid); err != nil {
			l.Close()
			return nil, refusal.Wrap(refusal.InvalidState, err, "cannot give the socket to group %s", group)
		}
	}
	return l, nil
}

// Client talks to a running agent over its socket.
type Client struct {
	path string
	http *http.Client
}

// NewClient returns a client of the agent at socket path.
func NewClient(path string) *Client {
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}
	return &Client{path: path, http: &http.Client{Transport: tr}}
}

// Running reports whether an agent answers on the socket.
func (c *Client) Running(ctx context.Context) bool {
	if _, err := os.Stat(c.path); err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var out map[string]any
	return c.Do(ctx, "GET", "/v1/ping", nil, &out) == nil
}

// Do sends one request; a refusal comes back as *refusal.Error.
func (c *Client) Do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://agent"+path, body)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return refusal.Wrap(refusal.Unavailable, err, "no agent answers on %s", c.path)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return refusal.Wrap(refusal.Unavailable, err, "the agent's answer was cut")
	}
	if resp.StatusCode != http.StatusOK {
		var e apiError
		if json.Unmarshal(data, &e) != nil || e.Code == "" {
			return refusal.New(refusal.Internal, "the agent answered %s: %s", resp.Status, strings.TrimSpace(string(data)))
		}
		return refusal.New(e.Code, "%s", e.Message)
	}
	if out == nil {
		return nil
	}
	if w, ok := out.(io.Writer); ok {
		_, err := w.Write(data)
		return err
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("the agent's answer: %w", err)
	}
	return nil
}
