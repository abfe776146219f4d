package githubemu

import (
	"fmt"
	"net/http"
	"strings"
	"time"
)

// The shapes below are the fields of GitHub's documented responses that
// clients read; enough for go-github to decode what fleet-agent uses.

func ts(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UTC().Format(time.RFC3339)
}

func (r *Repo) webURL(req *http.Request, suffix string) string {
	return "http://" + req.Host + "/" + r.owner + "/" + r.name + suffix
}

func (r *Repo) apiURL(req *http.Request, suffix string) string {
	return "http://" + req.Host + r.s.prefix + "/repos/" + r.owner + "/" + r.name + suffix
}

func userJSON(req *http.Request, login string) map[string]any {
	typ := "User"
	if strings.HasSuffix(login, "[bot]") {
		typ = "Bot"
	}
	api := "http://" + req.Host + "/users/" + login
	return map[string]any{
		"login": login, "id": idOf(login), "node_id": "U_" + login, "type": typ, "site_admin": false,
		"url": api, "html_url": "http://" + req.Host + "/" + login,
		"avatar_url": "http://" + req.Host + "/avatars/" + login, "gravatar_id": "",
		"followers_url": api + "/followers", "following_url": api + "/following{/other_user}",
		"gists_url": api + "/gists{/gist_id}", "starred_url": api + "/starred{/owner}{/repo}",
		"subscriptions_url": api + "/subscriptions", "organizations_url": api + "/orgs",
		"repos_url": api + "/repos", "events_url": api + "/events{/privacy}",
		"received_events_url": api + "/received_events",
	}
}

// idOf gives a login a stable numeric id.
func idOf(login string) int64 {
	var h int64 = 7
	for _, c := range login {
		h = h*31 + int64(c)
	}
	if h < 0 {
		h = -h
	}
	return h%1_000_000 + 1
}

func (r *Repo) repoJSON(req *http.Request) map[string]any {
	return map[string]any{
		"id": r.id, "node_id": fmt.Sprintf("R_%d", r.id), "name": r.name, "full_name": r.owner + "/" + r.name,
		"private": true, "owner": userJSON(req, r.owner), "html_url": r.webURL(req, ""),
		"url": r.apiURL(req, ""), "default_branch": "main",
	}
}

func (r *Repo) pullJSON(req *http.Request, p *pull, single bool) map[string]any {
	state := p.State
	ref := func(name, sha string) map[string]any {
		return map[string]any{
			"label": r.owner + ":" + name, "ref": name, "sha": sha,
			"user": userJSON(req, r.owner), "repo": r.repoJSON(req),
		}
	}
	var mergeSHA any
	if p.MergeCommitSHA != "" {
		mergeSHA = p.MergeCommitSHA
	}
	self := r.apiURL(req, fmt.Sprintf("/pulls/%d", p.Number))
	html := r.webURL(req, fmt.Sprintf("/pull/%d", p.Number))
	issue := r.apiURL(req, fmt.Sprintf("/issues/%d", p.Number))
	link := func(href string) map[string]any { return map[string]any{"href": href} }
	out := map[string]any{
		"diff_url":            html + ".diff",
		"patch_url":           html + ".patch",
		"issue_url":           issue,
		"commits_url":         self + "/commits",
		"review_comments_url": self + "/comments",
		"review_comment_url":  r.apiURL(req, "/pulls/comments{/number}"),
		"comments_url":        issue + "/comments",
		"statuses_url":        r.apiURL(req, "/statuses/"+p.HeadSHA),
		"assignee":            nil,
		"assignees":           []any{},
		"milestone":           nil,
		"requested_teams":     []any{},
		"_links": map[string]any{
			"self": link(self), "html": link(html), "issue": link(issue), "comments": link(issue + "/comments"),
			"review_comments": link(self + "/comments"), "review_comment": link(r.apiURL(req, "/pulls/comments{/number}")),
			"commits": link(self + "/commits"), "statuses": link(r.apiURL(req, "/statuses/"+p.HeadSHA)),
		},
		"url":                 self,
		"id":                  p.id,
		"node_id":             fmt.Sprintf("PR_%d", p.id),
		"html_url":            html,
		"number":              p.Number,
		"state":               state,
		"locked":              false,
		"title":               p.Title,
		"user":                userJSON(req, p.User),
		"body":                bodyJSON(p.Body),
		"created_at":          ts(p.created),
		"updated_at":          ts(p.updated),
		"closed_at":           ts(p.closedAt),
		"merged_at":           ts(p.mergedAt),
		"merge_commit_sha":    mergeSHA,
		"draft":               false,
		"head":                ref(p.HeadRef, p.HeadSHA),
		"base":                ref(p.BaseRef, ""),
		"author_association":  "CONTRIBUTOR",
		"auto_merge":          nil,
		"active_lock_reason":  nil,
		"requested_reviewers": []any{},
		"labels":              []any{},
	}
	if single {
		out["merged"] = p.Merged
		out["mergeable"] = nil
		out["comments"] = len(r.comments[p.Number])
		if p.Merged {
			out["merged_by"] = userJSON(req, r.owner)
		} else {
			out["merged_by"] = nil
		}
	}
	return out
}

func (r *Repo) commentJSON(req *http.Request, pr int, c *comment) map[string]any {
	return map[string]any{
		"id":                       c.ID,
		"node_id":                  fmt.Sprintf("IC_%d", c.ID),
		"url":                      r.apiURL(req, fmt.Sprintf("/issues/comments/%d", c.ID)),
		"html_url":                 r.webURL(req, fmt.Sprintf("/pull/%d#issuecomment-%d", pr, c.ID)),
		"issue_url":                r.apiURL(req, fmt.Sprintf("/issues/%d", pr)),
		"body":                     c.Body,
		"user":                     userJSON(req, c.User),
		"created_at":               ts(c.created),
		"updated_at":               ts(c.updated),
		"author_association":       "NONE",
		"performed_via_github_app": nil,
	}
}

func (r *Repo) statusJSON(req *http.Request, sha string, st Status) map[string]any {
	var desc, target any
	if st.Description != "" {
		desc = st.Description
	}
	if st.TargetURL != "" {
		target = st.TargetURL
	}
	return map[string]any{
		"url":         r.apiURL(req, "/statuses/"+sha),
		"avatar_url":  nil,
		"id":          st.ID,
		"node_id":     fmt.Sprintf("SC_%d", st.ID),
		"state":       st.State,
		"description": desc,
		"target_url":  target,
		"context":     st.Context,
		"created_at":  ts(st.Created),
		"updated_at":  ts(st.Created),
		"creator":     userJSON(req, st.Creator),
	}
}

// repoJSON is GET /repos/{owner}/{repo}: the repository, and for a user's
// token the roles that user holds on it (an installation token sees none,
// as on GitHub).
func (s *Server) repoJSON(req *http.Request, r *Repo, login string) reply {
	full := r.owner + "/" + r.name
	body := map[string]any{
		"id": r.id, "node_id": "R_" + full, "name": r.name, "full_name": full, "private": true,
		"owner": userJSON(req, r.owner), "default_branch": r.defaultBranch,
		"url": "http://" + req.Host + "/repos/" + full, "html_url": "http://" + req.Host + "/" + full,
	}
	ti := s.tokens[credential(req)]
	if !ti.installation {
		write := !ti.readOnly
		body["permissions"] = map[string]bool{"admin": false, "maintain": false, "push": write, "triage": write, "pull": true}
	}
	return jsonReply(http.StatusOK, body)
}

func bodyJSON(b string) any {
	if b == "" {
		return nil
	}
	return b
}
