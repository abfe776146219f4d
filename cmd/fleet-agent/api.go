package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/agent"
	"github.com/fleet-agent/fleet-agent/internal/apply"
	"github.com/fleet-agent/fleet-agent/internal/config"
	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

// The local API grows here with the routes the command line needs while
// the agent holds the state file: plan of a document, export, status,
// edit, backup. apply of a document is refused: the agent follows a
// repository, and documents reach the fleet from its branch.

// planDocRequest plans a document the client read.
type planDocRequest struct {
	Name     string `json:"name"`
	Document []byte `json:"document"`
	Prune    *bool  `json:"prune,omitempty"`
	Calls    bool   `json:"calls,omitempty"`
	Output   string `json:"output,omitempty"`
	Offline  bool   `json:"offline,omitempty"`
}

type editRequest struct {
	Kind   string         `json:"kind"`
	Name   string         `json:"name"`
	Set    map[string]any `json:"set,omitempty"`
	Delete bool           `json:"delete,omitempty"`
	Who    string         `json:"who"`
}

func (a *app) apiHandler(ag *agent.Agent, store *state.Store) http.Handler {
	mux := ag.Handler()
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		cfg := a.running.Load()
		v, err := agent.Status(store, cfg.Tenant)
		reply(w, v, err)
	})
	mux.HandleFunc("GET /v1/export", func(w http.ResponseWriter, r *http.Request) {
		snap, err := store.Snapshot()
		if err != nil {
			reply(w, nil, err)
			return
		}
		doc, err := plan.Export(snap)
		if err != nil {
			reply(w, nil, err)
			return
		}
		data, err := plan.Pretty(doc)
		if err != nil {
			reply(w, nil, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(data)
	})
	mux.HandleFunc("POST /v1/plan-document", func(w http.ResponseWriter, r *http.Request) {
		cfg := a.running.Load()
		var req planDocRequest
		if err := decode(r, &req); err != nil {
			reply(w, nil, err)
			return
		}
		doc, errs := fleet.Validate(req.Name, req.Document)
		if errs != nil {
			reply(w, nil, errs.Refusal())
			return
		}
		prune := cfg.Apply.Prune
		if req.Prune != nil {
			prune = *req.Prune
		}
		live, _, err := a.live(cfg, req.Offline)
		if err != nil {
			reply(w, nil, err)
			return
		}
		snap, err := store.Snapshot()
		if err != nil {
			reply(w, nil, err)
			return
		}
		facts, err := plan.Gather(r.Context(), doc, snap, live)
		if err != nil {
			reply(w, nil, err)
			return
		}
		p := plan.Make(doc, snap, plan.Options{Tenant: cfg.Tenant, Prune: prune, Facts: facts})
		var b bytes.Buffer
		switch req.Output {
		case "json":
			err = p.WriteJSON(&b)
		case "markdown":
			b.WriteString(p.Markdown(plan.MarkdownOptions{Branch: cfg.Git.Branch}))
		default:
			err = p.WriteText(&b, req.Calls)
		}
		reply(w, agent.PlanResponse{Output: b.String(), PlanHash: p.PlanHash, Blocked: p.Blocked(), Calls: len(p.Calls)}, err)
	})
	mux.HandleFunc("POST /v1/apply-document", func(w http.ResponseWriter, r *http.Request) {
		cfg := a.running.Load()
		reply(w, nil, refusal.New(refusal.InvalidState,
			"this agent follows %s: documents reach the fleet from branch %s; merge the change, or apply a commit of it by hand with fleet-agent apply --commit SHA --plan-hash H",
			redactURL(cfg.Git.URL), cfg.Git.Branch))
	})
	mux.HandleFunc("POST /v1/edit", func(w http.ResponseWriter, r *http.Request) {
		var req editRequest
		if err := decode(r, &req); err != nil {
			reply(w, nil, err)
			return
		}
		err := apply.ApplyEdit(store, apply.Edit{Kind: inventory.Kind(req.Kind), Name: req.Name, Set: req.Set, Delete: req.Delete, Who: req.Who})
		reply(w, map[string]any{"ok": err == nil}, err)
	})
	mux.HandleFunc("GET /v1/audit", auditHandler(store))
	mux.HandleFunc("GET /v1/backup", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = store.WriteBackup(w)
	})
	return mux
}

func decode(r *http.Request, v any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, 64<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return refusal.New(refusal.InvalidInput, "bad request: %v", err)
	}
	return nil
}

// reply writes v, or the refusal with the status that matches its code.
func reply(w http.ResponseWriter, v any, err error) {
	if err != nil {
		agent.WriteError(w, err)
		return
	}
	agent.WriteJSON(w, http.StatusOK, v)
}

// agentClient returns a client of the running agent, or nil when none
// answers on the config's socket: the command then opens the state file.
func (a *app) agentClient(ctx context.Context, cfg *config.Config) *agent.Client {
	c := agent.NewClient(cfg.Socket)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if c.Running(ctx) {
		return c
	}
	return nil
}
