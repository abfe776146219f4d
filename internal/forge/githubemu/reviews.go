package githubemu

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Review is a pull request review as tests submit it: its user, state
// (APPROVED, CHANGES_REQUESTED, COMMENTED, DISMISSED) and the commit it
// reviewed (the head when empty).
type Review struct {
	User     string
	State    string
	CommitID string
}

type review struct {
	Review
	id        int64
	submitted time.Time
}

// SubmitReview records a review of pull request number, as GitHub lists it
// under pulls/{number}/reviews, oldest first.
func (r *Repo) SubmitReview(number int, rv Review) {
	s := r.s
	s.mu.Lock()
	defer s.mu.Unlock()
	p := r.mustPull(number)
	if rv.CommitID == "" {
		rv.CommitID = p.HeadSHA
	}
	if r.reviews == nil {
		r.reviews = map[int][]*review{}
	}
	r.reviews[number] = append(r.reviews[number], &review{Review: rv, id: s.id(), submitted: s.clock.Now()})
}

// DismissReview dismisses the latest review of login on pull request
// number, as GitHub's dismissal does: the review stays, its state becomes
// DISMISSED.
func (r *Repo) DismissReview(number int, login string) {
	s := r.s
	s.mu.Lock()
	defer s.mu.Unlock()
	rs := r.reviews[number]
	for i := len(rs) - 1; i >= 0; i-- {
		if strings.EqualFold(rs[i].User, login) {
			rs[i].State = "DISMISSED"
			return
		}
	}
}

// RemoveTeamMember ends login's membership of the team slug of org.
func (s *Server) RemoveTeamMember(org, slug, login string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.teams[strings.ToLower(org+"/"+slug)], strings.ToLower(login))
}

// AddTeamMember makes login an active member of the team slug of org, which
// orgs/{org}/teams/{slug}/memberships/{login} answers; anyone else gets 404,
// as GitHub answers for a non-member.
func (s *Server) AddTeamMember(org, slug, login string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.teams == nil {
		s.teams = map[string]map[string]bool{}
	}
	key := strings.ToLower(org + "/" + slug)
	if s.teams[key] == nil {
		s.teams[key] = map[string]bool{}
	}
	s.teams[key][strings.ToLower(login)] = true
}

// listReviews serves GET pulls/{number}/reviews.
func (r *Repo) listReviews(req *http.Request, number int) reply {
	all := r.reviews[number]
	h := http.Header{}
	lo, hi := page(req, len(all), h)
	out := make([]any, 0, hi-lo)
	for _, rv := range all[lo:hi] {
		base := "http://" + req.Host + "/repos/" + r.owner + "/" + r.name + "/pulls/" + strconv.Itoa(number)
		out = append(out, map[string]any{
			"id": rv.id, "node_id": "PRR_" + strconv.FormatInt(rv.id, 10), "user": userJSON(req, rv.User),
			"body": "", "state": rv.State, "commit_id": rv.CommitID, "author_association": "MEMBER",
			"submitted_at":     rv.submitted.UTC().Format(time.RFC3339),
			"html_url":         "http://" + req.Host + "/" + r.owner + "/" + r.name + "/pull/" + strconv.Itoa(number) + "#pullrequestreview-" + strconv.FormatInt(rv.id, 10),
			"pull_request_url": base,
		})
	}
	rep := jsonReply(http.StatusOK, out)
	rep.header = h
	return rep
}

// orgs serves GET /orgs/{org}/teams/{slug}/memberships/{login}.
func (s *Server) orgs(req *http.Request, path string) reply {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	if req.Method != http.MethodGet || len(parts) != 6 || parts[2] != "teams" || parts[4] != "memberships" {
		return notFound()
	}
	org, slug, login := parts[1], parts[3], parts[5]
	if !s.teams[strings.ToLower(org+"/"+slug)][strings.ToLower(login)] {
		return notFound()
	}
	return jsonReply(http.StatusOK, map[string]any{
		"url":   "http://" + req.Host + "/orgs/" + org + "/teams/" + slug + "/memberships/" + login,
		"role":  "member",
		"state": "active",
	})
}
