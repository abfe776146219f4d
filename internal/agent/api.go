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

	"github.com/fleet-agent/fleet-agent/internal/apply"
	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

// The local API: HTTP over a unix socket (mode 0660, group socketGroup),
// so the command line works beside the daemon that holds the state file.

// apiError is the error body of the local API.
type apiError struct {
	Code    refusal.Code `json:"code"`
	Message string       `json:"message"`
	// Plan is the plan that explains a refused apply, in text: apart from
	// the message, which stays one line a person (or a log) can read.
	Plan string `json:"plan,omitempty"`
}

// PlanRefusal is a refusal the agent answered with the plan that explains
// it: the command line prints the plan, then the one-line refusal.
type PlanRefusal struct {
	Refusal *refusal.Error
	Plan    string
}

func (e *PlanRefusal) Error() string { return e.Refusal.Error() }
func (e *PlanRefusal) Unwrap() error { return e.Refusal }

// PlanRequest asks for the plan of a commit of the branch.
type PlanRequest struct {
	Commit string `json:"commit"`
	// Proposal names a planned proposal (a branch, #N, or its head) to
	// plan as its pull request comment shows it, instead of Commit.
	Proposal string `json:"proposal,omitempty"`
	Output   string `json:"output,omitempty"` // text (default), json, markdown
	Calls    bool   `json:"calls,omitempty"`
}

// PlanDocumentRequest asks for the plan of a document the client read.
type PlanDocumentRequest struct {
	Name     string `json:"name"`
	Document []byte `json:"document"`
	// Prune overrides the agent's apply.prune when set.
	Prune   *bool  `json:"prune,omitempty"`
	Calls   bool   `json:"calls,omitempty"`
	Output  string `json:"output,omitempty"`
	Offline bool   `json:"offline,omitempty"`
}

// ApplyRequest applies a commit of the branch by hand.
type ApplyRequest struct {
	Commit   string `json:"commit"`
	PlanHash string `json:"planHash"`
	// By is accepted from older command lines and ignored: the apply is
	// recorded under the socket peer's credentials (see Peer).
	By string `json:"by,omitempty"`
}

// EditRequest is a break-glass edit.
type EditRequest struct {
	Kind   string         `json:"kind"`
	Name   string         `json:"name"`
	Set    map[string]any `json:"set,omitempty"`
	Delete bool           `json:"delete,omitempty"`
	// Who is accepted from older command lines and ignored: the edit is
	// recorded under the socket peer's credentials (see Peer), and the
	// answer's who says which.
	Who string `json:"who,omitempty"`
}

// PlanResponse carries a rendered plan.
type PlanResponse struct {
	Commit   string `json:"commit"`
	Output   string `json:"output"`
	PlanHash string `json:"planHash"`
	// Blocked: a change is blocked or a policy rule denies the plan; no
	// apply takes it.
	Blocked bool `json:"blocked"`
	// Denied: a policy rule denies the plan (its verdict is in Output).
	Denied bool `json:"denied,omitempty"`
	// Proposal: the plan is a proposal's, applied by merging it.
	Proposal bool `json:"proposal,omitempty"`
	Calls    int  `json:"calls"`
	Applied  int  `json:"applied,omitempty"`
}

// leaderOnly refuses a write on an agent that stands by (an etcd store
// several agents share): it names the leader, where the command works.
// The store would refuse the write anyway; this says so before the
// command does anything else.
func (a *Agent) leaderOnly(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if a.store.Leading() {
			h(w, r)
			return
		}
		leader, _ := a.store.Leader(r.Context())
		if leader == "" {
			leader = "none yet (an election is under way)"
		}
		WriteError(w, refusal.Wrap(refusal.Unavailable, state.ErrNotLeader,
			"this agent (%s) stands by and takes no writes; the leader is %s: run the command on its box", a.store.Name(), leader))
	}
}

// maxRequest bounds a request body: a document (16 MiB) as the base64 of a
// JSON string, with room to spare.
const maxRequest = 32 << 20

// Handler serves the local API, every route of it: the command line reaches
// the fleet through it while the agent holds the state file.
func (a *Agent) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/ping", func(w http.ResponseWriter, r *http.Request) {
		WriteJSON(w, http.StatusOK, map[string]any{"agent": true, "branch": a.cfg.Branch, "following": true})
	})
	mux.HandleFunc("POST /v1/plan", func(w http.ResponseWriter, r *http.Request) {
		var req PlanRequest
		f, ok := readPlanRequest(w, r, &req, &req.Output)
		if !ok {
			return
		}
		var p *plan.Plan
		var full string
		var err error
		proposal := req.Proposal != ""
		if proposal {
			p, full, err = a.PlanProposal(r.Context(), req.Proposal)
		} else {
			p, full, err = a.PlanCommit(r.Context(), req.Commit)
			// A commit off the branch that heads a planned proposal is
			// planned as that proposal, not refused.
			if refusal.Is(err, refusal.InvalidState) {
				if _, ferr := a.findProposal(req.Commit); ferr == nil {
					proposal = true
					p, full, err = a.PlanProposal(r.Context(), req.Commit)
				}
			}
		}
		if err != nil {
			WriteError(w, err)
			return
		}
		a.replyPlanOf(w, p, f, req.Calls, full, 0, proposal)
	})
	mux.HandleFunc("POST /v1/plan-document", func(w http.ResponseWriter, r *http.Request) {
		var req PlanDocumentRequest
		f, ok := readPlanRequest(w, r, &req, &req.Output)
		if !ok {
			return
		}
		doc, errs := fleet.Validate(req.Name, req.Document)
		if errs != nil {
			WriteError(w, errs.Refusal())
			return
		}
		p, err := a.makePlan(r.Context(), doc, planHow{prune: req.Prune, offline: req.Offline})
		if err != nil {
			WriteError(w, err)
			return
		}
		a.replyPlan(w, p.Plan, f, req.Calls, "", 0)
	})
	mux.HandleFunc("POST /v1/apply", a.leaderOnly(func(w http.ResponseWriter, r *http.Request) {
		var req ApplyRequest
		if !readJSON(w, r, &req) {
			return
		}
		by, err := auditedWho(r)
		if err != nil {
			WriteError(w, err)
			return
		}
		p, n, err := a.ApplyCommit(r.Context(), req.Commit, req.PlanHash, by)
		if err != nil {
			resp := apiError{Code: refusal.CodeOf(err), Message: errMessage(err)}
			if p != nil {
				// The plan explains a refusal: send it along.
				var b bytes.Buffer
				_ = p.Render(&b, plan.Text, plan.RenderOptions{})
				resp.Plan = b.String()
			}
			WriteJSON(w, statusOf(resp.Code), resp)
			return
		}
		a.replyPlan(w, p, plan.Text, false, req.Commit, n)
	}))
	mux.HandleFunc("POST /v1/apply-document", func(w http.ResponseWriter, r *http.Request) {
		WriteError(w, refusal.New(refusal.InvalidState,
			"this agent follows %s: documents reach the fleet from branch %s; merge the change, or apply a commit of it by hand with fleet-agent apply --commit SHA --plan-hash H",
			a.cfg.Repository, a.cfg.Branch))
	})
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		v, err := a.status()
		reply(w, v, err)
	})
	mux.HandleFunc("GET /v1/substrates", func(w http.ResponseWriter, r *http.Request) {
		list, err := a.Substrates()
		reply(w, list, err)
	})
	mux.HandleFunc("GET /v1/export", func(w http.ResponseWriter, r *http.Request) {
		data, err := Export(a.store)
		if err != nil {
			WriteError(w, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(data)
	})
	mux.HandleFunc("POST /v1/edit", a.leaderOnly(func(w http.ResponseWriter, r *http.Request) {
		var req EditRequest
		if !readJSON(w, r, &req) {
			return
		}
		who, err := auditedWho(r)
		if err == nil {
			err = apply.ApplyEdit(a.store, apply.Edit{Kind: inventory.Kind(req.Kind), Name: req.Name, Set: req.Set, Delete: req.Delete, Who: who})
		}
		if err == nil {
			// The edit is drift now: the next step checks it, not the
			// next drift.every.
			a.mu.Lock()
			a.lastDrift = time.Time{}
			a.mu.Unlock()
			a.Wake()
		}
		reply(w, map[string]any{"ok": err == nil, "who": who}, err)
	}))
	mux.HandleFunc("GET /v1/audit", func(w http.ResponseWriter, r *http.Request) {
		rows, err := AuditRows(a.store)
		reply(w, rows, err)
	})
	mux.HandleFunc("GET /v1/backup", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = a.store.WriteBackup(w)
	})
	return mux
}

// readPlanRequest reads a request that asks for a plan in a format (output,
// a field of v).
func readPlanRequest(w http.ResponseWriter, r *http.Request, v any, output *string) (plan.Format, bool) {
	if !readJSON(w, r, v) {
		return "", false
	}
	f, err := plan.ParseFormat(*output)
	if err != nil {
		WriteError(w, refusal.Wrap(refusal.InvalidInput, err, "output"))
		return "", false
	}
	return f, true
}

// replyPlan answers a plan rendered in one format.
func (a *Agent) replyPlan(w http.ResponseWriter, p *plan.Plan, f plan.Format, calls bool, head string, applied int) {
	a.replyPlanOf(w, p, f, calls, head, applied, false)
}

// replyPlanOf is replyPlan saying whether the plan is a proposal's (one
// applied by merging, never by hand). A plan a policy denies is blocked:
// no apply takes it.
func (a *Agent) replyPlanOf(w http.ResponseWriter, p *plan.Plan, f plan.Format, calls bool, head string, applied int, proposal bool) {
	var b bytes.Buffer
	if err := p.Render(&b, f, plan.RenderOptions{Calls: calls, Markdown: plan.MarkdownOptions{Head: head, Branch: a.cfg.Branch}}); err != nil {
		WriteError(w, refusal.Wrap(refusal.Internal, err, "cannot render the plan"))
		return
	}
	WriteJSON(w, http.StatusOK, PlanResponse{Commit: head, Output: b.String(), PlanHash: p.PlanHash, Blocked: p.Blocked() || p.Policy.Denied(),
		Denied: p.Policy.Denied(), Proposal: proposal, Calls: len(p.Calls), Applied: applied})
}

// Export renders the fleet of a store as a document.
func Export(s *state.Store) ([]byte, error) {
	snap, err := s.Snapshot()
	if err != nil {
		return nil, err
	}
	doc, err := plan.Export(snap)
	if err != nil {
		return nil, err
	}
	data, err := plan.Pretty(doc)
	if err != nil {
		return nil, refusal.Wrap(refusal.Internal, err, "cannot render the document")
	}
	return data, nil
}

// AuditRows reads the audit log of a store ([] when empty).
func AuditRows(s *state.Store) ([]state.AuditRow, error) {
	var rows []state.AuditRow
	err := s.View(func(tx *state.Tx) (err error) { rows, err = tx.Audit(); return })
	if rows == nil {
		rows = []state.AuditRow{}
	}
	return rows, err
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

// reply answers v, or the refusal err.
func reply(w http.ResponseWriter, v any, err error) {
	if err != nil {
		WriteError(w, err)
		return
	}
	WriteJSON(w, http.StatusOK, v)
}

// WriteError answers a refusal with the status its code maps to: the one
// error writer of the local API and the ops listener.
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

// readJSON is the one decoder of the local API: one size limit, unknown
// fields refused, one value.
func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	if r.ContentLength > maxRequest {
		// Said up front: refused unread.
		WriteError(w, refusal.New(refusal.InvalidInput, "bad request: the body of %d bytes is too large (at most %d)", r.ContentLength, maxRequest))
		return false
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxRequest))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil && dec.More() {
		err = errors.New("more than one JSON value")
	}
	if err != nil {
		WriteError(w, refusal.New(refusal.InvalidInput, "bad request: %v", err))
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
		// A socket the process made already has its group when socketGroup
		// is the service's own group (the shipped unit: Group=fleet-agent),
		// and a chown there is refused by the unit's system call filter
		// (~@privileged holds @chown): only change what differs.
		var st syscall.Stat_t
		if err := syscall.Stat(path, &st); err != nil {
			l.Close()
			return nil, refusal.Wrap(refusal.InvalidState, err, "cannot read the socket %s", path)
		}
		if int(st.Gid) != gid {
			if err := os.Chown(path, -1, gid); err != nil {
				l.Close()
				return nil, refusal.Wrap(refusal.InvalidState, err,
					"cannot give the socket to group %s: run the agent with that group as its own (systemd: Group=%s in a drop-in), or leave socketGroup unset", group, group)
			}
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
		r := refusal.New(e.Code, "%s", e.Message)
		if e.Plan != "" {
			return &PlanRefusal{Refusal: r, Plan: e.Plan}
		}
		return r
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
