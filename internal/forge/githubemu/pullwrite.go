package githubemu

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// HeadOf, when set, tells the emulator which commit a branch points at, so
// that a pull request opened through the API gets its head commit (tests
// point it at their git server). Set it before requests arrive.
func (r *Repo) SetHeadOf(f func(branch string) string) {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	r.headOf = f
}

// Body returns the text of pull request number.
func (r *Repo) Body(number int) string {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	return r.mustPull(number).Body
}

// writePull answers POST /pulls (open) and PATCH /pulls/N (title, body,
// state), as GitHub does for a token with pull requests: write.
func (r *Repo) writePull(req *http.Request, rest []string, body []byte, login string) reply {
	var in struct {
		Title *string `json:"title"`
		Body  *string `json:"body"`
		Head  string  `json:"head"`
		Base  string  `json:"base"`
		State string  `json:"state"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return jsonReply(http.StatusBadRequest, errorBody{Message: "Problems parsing JSON", Status: "400"})
	}
	now := r.s.clock.Now()
	if len(rest) == 1 {
		if in.Title == nil || *in.Title == "" || in.Head == "" || in.Base == "" {
			return jsonReply(http.StatusUnprocessableEntity, errorBody{Message: "Validation Failed", Status: "422"})
		}
		for _, p := range r.pulls {
			if p.HeadRef == in.Head && p.BaseRef == in.Base && p.State == "open" {
				return jsonReply(http.StatusUnprocessableEntity, errorBody{Message: "Validation Failed: A pull request already exists for " + r.owner + ":" + in.Head + ".", Status: "422"})
			}
		}
		sha := ""
		if r.headOf != nil {
			sha = r.headOf(in.Head)
		}
		r.number++
		p := PR{Number: r.number, Title: *in.Title, HeadRef: in.Head, BaseRef: in.Base, HeadSHA: sha, User: login, State: "open"}
		if in.Body != nil {
			p.Body = *in.Body
		}
		pl := &pull{PR: p, id: r.s.id(), created: now, updated: now}
		r.pulls[p.Number] = pl
		r.link(sha, p.Number)
		return jsonReply(http.StatusCreated, r.pullJSON(req, pl, true))
	}
	n, err := strconv.Atoi(rest[1])
	p, ok := r.pulls[n]
	if err != nil || !ok {
		return notFound()
	}
	if in.Title != nil {
		p.Title = *in.Title
	}
	if in.Body != nil {
		p.Body = *in.Body
	}
	if in.State == "closed" && p.State == "open" {
		p.State, p.closedAt = "closed", now
	}
	if r.headOf != nil && p.State == "open" {
		if sha := r.headOf(p.HeadRef); sha != "" && sha != p.HeadSHA {
			p.HeadSHA = sha
			r.link(sha, n)
		}
	}
	p.updated = now
	return jsonReply(http.StatusOK, r.pullJSON(req, p, true))
}

// Pull returns pull request number as tests read it.
func (r *Repo) Pull(number int) PR {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	return r.mustPull(number).PR
}
