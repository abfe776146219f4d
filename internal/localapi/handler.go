package localapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/fleet-agent/fleet-agent/internal/apply"
	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/substrate"
	"github.com/fleet-agent/fleet-agent/internal/textline"
)

// Loop is what the handler needs from the agent's loop: the plans and
// applies it makes, the edits it takes, and the status it keeps.
type Loop interface {
	// Following is the tenant, the repository as people may see it and
	// the branch the loop applies.
	Following() (tenant, repository, branch string)
	// PlanCommit plans a commit of the branch: the plan, and the full
	// commit it names.
	PlanCommit(ctx context.Context, commit string) (*plan.Plan, string, error)
	// PlanProposal plans a planned proposal (a branch, #N, or its head) as
	// its pull request comment shows it.
	PlanProposal(ctx context.Context, name string) (*plan.Plan, string, error)
	// IsProposal says whether name heads a planned proposal.
	IsProposal(name string) bool
	// PlanDocument plans a document against the fleet; prune, when set,
	// overrides apply.prune.
	PlanDocument(ctx context.Context, doc *fleet.Document, prune *bool, offline bool) (*plan.Plan, error)
	// ApplyCommit applies a commit of the branch by hand at planHash,
	// recorded under by: the plan (also when refused, to explain it) and
	// how many calls were applied.
	ApplyCommit(ctx context.Context, commit, planHash, by string) (*plan.Plan, int, error)
	// Edit makes a break-glass edit, which the loop then checks as drift.
	Edit(e apply.Edit) error
	StatusView() (StatusView, error)
	Substrates() ([]substrate.Status, error)
}

type handler struct {
	loop  Loop
	store *state.Store
}

// leaderOnly refuses a write on an agent that stands by (an etcd store
// several agents share): it names the leader, where the command works.
// The store would refuse the write anyway; this says so before the
// command does anything else.
func (api handler) leaderOnly(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if api.store.Leading() {
			h(w, r)
			return
		}
		leader, _ := api.store.Leader(r.Context())
		if leader == "" {
			leader = "none yet (an election is under way)"
		}
		WriteError(w, refusal.Wrap(refusal.Unavailable, state.ErrNotLeader,
			"this agent (%s) stands by and takes no writes; the leader is %s: run the command on its box", api.store.Name(), leader))
	}
}

// maxRequest bounds a request body: a document (16 MiB) as the base64 of a
// JSON string, with room to spare.
const maxRequest = 32 << 20

// Route is one route of the local API: a method and an exact path.
type Route struct {
	Method, Path string
	Handle       http.HandlerFunc
}

// Handler serves the local API, every route of it (its own and extra, the
// doctor's from the command's package): the command line reaches the fleet
// through it while the agent holds the state file.
func Handler(loop Loop, store *state.Store, extra ...Route) http.Handler {
	api := handler{loop: loop, store: store}
	mux := routes{}
	mux.add("GET", "/v1/ping", func(w http.ResponseWriter, r *http.Request) {
		WriteJSON(w, http.StatusOK, map[string]any{"agent": true, "branch": api.branch(), "following": true})
	})
	mux.add("POST", "/v1/plan", func(w http.ResponseWriter, r *http.Request) {
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
			p, full, err = api.loop.PlanProposal(r.Context(), req.Proposal)
		} else {
			p, full, err = api.loop.PlanCommit(r.Context(), req.Commit)
			// A commit off the branch that heads a planned proposal is
			// planned as that proposal, not refused.
			if refusal.Is(err, refusal.InvalidState) {
				if api.loop.IsProposal(req.Commit) {
					proposal = true
					p, full, err = api.loop.PlanProposal(r.Context(), req.Commit)
				}
			}
		}
		if err != nil {
			WriteError(w, err)
			return
		}
		api.replyPlanOf(w, p, f, req.Calls, full, 0, proposal)
	})
	mux.add("POST", "/v1/plan-document", func(w http.ResponseWriter, r *http.Request) {
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
		p, err := api.loop.PlanDocument(r.Context(), doc, req.Prune, req.Offline)
		if err != nil {
			WriteError(w, err)
			return
		}
		api.replyPlan(w, p, f, req.Calls, "", 0)
	})
	mux.add("POST", "/v1/apply", api.leaderOnly(func(w http.ResponseWriter, r *http.Request) {
		var req ApplyRequest
		if !readJSON(w, r, &req) {
			return
		}
		by, err := auditedWho(r)
		if err != nil {
			WriteError(w, err)
			return
		}
		p, n, err := api.loop.ApplyCommit(r.Context(), req.Commit, req.PlanHash, by)
		if err != nil {
			resp := apiError{Code: refusal.CodeOf(err), Message: refusal.Message(err)}
			if p != nil {
				// The plan explains a refusal: send it along.
				var b bytes.Buffer
				_ = p.Render(&b, plan.Text, plan.RenderOptions{})
				resp.Plan = b.String()
			}
			WriteJSON(w, statusOf(resp.Code), resp)
			return
		}
		api.replyPlan(w, p, plan.Text, false, req.Commit, n)
	}))
	mux.add("POST", "/v1/apply-document", func(w http.ResponseWriter, r *http.Request) {
		_, repository, branch := api.loop.Following()
		WriteError(w, refusal.New(refusal.InvalidState,
			"this agent follows %s: documents reach the fleet from branch %s; merge the change, or apply a commit of it by hand with fleet-agent apply --commit SHA --plan-hash H",
			repository, branch))
	})
	mux.add("GET", "/v1/status", func(w http.ResponseWriter, r *http.Request) {
		v, err := api.loop.StatusView()
		reply(w, v, err)
	})
	mux.add("GET", "/v1/substrates", func(w http.ResponseWriter, r *http.Request) {
		list, err := api.loop.Substrates()
		reply(w, list, err)
	})
	mux.add("GET", "/v1/export", func(w http.ResponseWriter, r *http.Request) {
		data, err := Export(api.store)
		if err != nil {
			WriteError(w, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(data)
	})
	mux.add("POST", "/v1/edit", api.leaderOnly(func(w http.ResponseWriter, r *http.Request) {
		var req EditRequest
		if !readJSON(w, r, &req) {
			return
		}
		who, err := auditedWho(r)
		if err == nil {
			err = api.loop.Edit(apply.Edit{Kind: inventory.Kind(req.Kind), Name: req.Name, Set: req.Set, Delete: req.Delete, Who: who})
		}
		reply(w, map[string]any{"ok": err == nil, "who": who}, err)
	}))
	mux.add("GET", "/v1/audit", func(w http.ResponseWriter, r *http.Request) {
		rows, err := AuditRows(api.store)
		reply(w, rows, err)
	})
	mux.add("GET", "/v1/backup", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = api.store.WriteBackup(w)
	})
	for _, r := range extra {
		mux.add(r.Method, r.Path, r.Handle)
	}
	return mux
}

// branch is the branch the loop applies.
func (api handler) branch() string {
	_, _, branch := api.loop.Following()
	return branch
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
func (api handler) replyPlan(w http.ResponseWriter, p *plan.Plan, f plan.Format, calls bool, head string, applied int) {
	api.replyPlanOf(w, p, f, calls, head, applied, false)
}

// replyPlanOf is replyPlan saying whether the plan is a proposal's (one
// applied by merging, never by hand). A plan a policy denies is blocked:
// no apply takes it.
func (api handler) replyPlanOf(w http.ResponseWriter, p *plan.Plan, f plan.Format, calls bool, head string, applied int, proposal bool) {
	var b bytes.Buffer
	if err := p.Render(&b, f, plan.RenderOptions{Calls: calls, Markdown: plan.MarkdownOptions{Head: head, Branch: api.branch()}}); err != nil {
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
	WriteJSON(w, statusOf(code), apiError{Code: code, Message: refusal.Message(err)})
}

// WriteJSON answers v as JSON, without HTML escaping, and with what a
// terminal or a log reader would obey written as its escape
// (textline.EscapeJSON): `curl .../status` shows the document's values.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		WriteError(w, refusal.Wrap(refusal.Internal, err, "cannot encode the answer"))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(textline.EscapeJSON(b.Bytes()))
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
		WriteError(w, refusal.New(refusal.InvalidInput, "bad request: %s", decodeError(err)))
		return false
	}
	return true
}
