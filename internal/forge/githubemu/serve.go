package githubemu

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

const (
	docsRoot          = "https://docs.github.com/rest"
	docsPrimaryLimit  = "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-the-primary-rate-limit"
	docsSecondary     = "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits"
	docsAPIVersions   = "https://docs.github.com/rest/about-the-rest-api/api-versions"
	docsCreateComment = "https://docs.github.com/rest/issues/comments#create-an-issue-comment"
	// The request header naming the REST API version, and the answer's
	// header naming the version that answered.
	hdrAPIVersion         = "X-GitHub-Api-Version"
	hdrAPIVersionSelected = "X-GitHub-Api-Version-Selected"
	maxCommentBody        = 65536
	maxStatusDescribe     = 140
	// maxStatusesPerContext: "a limit of 1000 statuses per sha and context
	// within a repository", a validation error past it.
	maxStatusesPerContext = 1000
)

// reply is what a route answers, before the rate limit and ETag are applied.
type reply struct {
	status int
	body   []byte
	header http.Header
	// etag: a GET whose answer carries an ETag and may be answered 304.
	etag bool
	// free: app JWT requests, which have a budget of their own: no rate
	// headers, not counted.
	free bool
	// uncounted: answered without spending the budget (/rate_limit, and
	// refusals for a limit or an outage).
	uncounted bool
}

func jsonReply(status int, v any) reply {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return reply{status: status, body: b, header: http.Header{}}
}

type errorBody struct {
	Message          string       `json:"message"`
	Errors           []fieldError `json:"errors,omitempty"`
	DocumentationURL string       `json:"documentation_url"`
	Status           string       `json:"status"`
}

type fieldError struct {
	Resource string `json:"resource"`
	Code     string `json:"code"`
	Field    string `json:"field"`
	Message  string `json:"message,omitempty"`
}

func errReply(status int, msg string, errs ...fieldError) reply {
	return jsonReply(status, errorBody{Message: msg, Errors: errs, DocumentationURL: docsRoot, Status: strconv.Itoa(status)})
}

func notFound() reply { return errReply(http.StatusNotFound, "Not Found") }

func (s *Server) serve(w http.ResponseWriter, req *http.Request) {
	path, inPrefix := strings.CutPrefix(req.URL.Path, s.prefix)
	entry := Request{Method: req.Method, Path: path, Query: req.URL.RawQuery, Conditional: req.Header.Get("If-None-Match") != "",
		APIVersion: req.Header.Get(hdrAPIVersion)}
	body, _ := io.ReadAll(io.LimitReader(req.Body, 64<<20))

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.outage {
		s.log = append(s.log, entry)
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				conn.Close()
				return
			}
		}
		panic(http.ErrAbortHandler)
	}
	s.roll()
	var rep reply
	version, versionOK := s.apiVersion(entry.APIVersion)
	switch {
	case !versionOK:
		// GitHub answers an unsupported version with 400 and a message
		// naming the versions it supports (a basic error).
		rep = jsonReply(http.StatusBadRequest, errorBody{
			Message: fmt.Sprintf("The X-GitHub-Api-Version header names %q, which is not a supported REST API version; supported: %s.",
				entry.APIVersion, strings.Join(s.versions, ", ")),
			DocumentationURL: docsAPIVersions, Status: "400"})
	case !inPrefix || (path != "" && !strings.HasPrefix(path, "/")):
		rep = notFound()
	case req.Method == http.MethodPost && strings.HasPrefix(path, "/app/installations/"):
		rep = s.accessToken(req, path)
	case req.Method == http.MethodGet && path == "/app":
		rep = s.getApp(req)
	default:
		rep = s.authenticated(req, path, body)
	}
	if rep.header == nil {
		rep.header = http.Header{}
	}
	status := rep.status
	if rep.etag && status == http.StatusOK {
		// GitHub's ETags vary with the credential (Vary: Authorization):
		// another token, an App's next installation token among them,
		// gets a full answer to the last one's ETag.
		h := sha256.New()
		h.Write([]byte(credential(req)))
		h.Write([]byte{0})
		h.Write(rep.body)
		sum := h.Sum(nil)
		etag := `W/"` + hex.EncodeToString(sum[:16]) + `"`
		rep.header.Set("ETag", etag)
		if inm := req.Header.Get("If-None-Match"); inm != "" && etagMatch(inm, etag) {
			status = http.StatusNotModified
		}
	}
	// GitHub counts every authenticated request but a 304; refusals for the
	// limit itself and bad credentials do not spend the budget.
	entry.Counted = !rep.free && !rep.uncounted && status != http.StatusNotModified && status != http.StatusUnauthorized
	if entry.Counted {
		s.remaining--
		s.used++
	}
	if !rep.free {
		s.rateHeaders(rep.header)
	}
	if versionOK {
		rep.header.Set(hdrAPIVersionSelected, version)
	}
	entry.Status = status
	s.log = append(s.log, entry)
	for k, v := range rep.header {
		w.Header()[k] = v
	}
	if status == http.StatusNotModified {
		w.WriteHeader(status)
		return
	}
	if w.Header().Get("Content-Type") == "" {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
	}
	w.WriteHeader(status)
	w.Write(rep.body)
}

// apiVersion is the version a request asked for (the first supported one
// when it names none, as GitHub answers such requests as 2022-11-28), and
// whether it is answered.
func (s *Server) apiVersion(asked string) (string, bool) {
	if asked == "" {
		return s.versions[0], true
	}
	for _, v := range s.versions {
		if v == asked {
			return v, true
		}
	}
	return "", false
}

func etagMatch(header, etag string) bool {
	for _, v := range strings.Split(header, ",") {
		v = strings.TrimSpace(v)
		if v == "*" || strings.TrimPrefix(v, "W/") == strings.TrimPrefix(etag, "W/") {
			return true
		}
	}
	return false
}

func (s *Server) rateHeaders(h http.Header) {
	h.Set("X-RateLimit-Limit", strconv.Itoa(s.limit))
	h.Set("X-RateLimit-Remaining", strconv.Itoa(max(s.remaining, 0)))
	h.Set("X-RateLimit-Used", strconv.Itoa(s.used))
	h.Set("X-RateLimit-Reset", strconv.FormatInt(s.reset.Unix(), 10))
	h.Set("X-RateLimit-Resource", "core")
}

// credential is the token of the Authorization header, or "".
func credential(req *http.Request) string {
	a := req.Header.Get("Authorization")
	for _, scheme := range []string{"token ", "Bearer "} {
		if t, ok := strings.CutPrefix(a, scheme); ok {
			return strings.TrimSpace(t)
		}
	}
	return ""
}

// login returns who the Authorization header says, or "".
func (s *Server) login(req *http.Request) string {
	ti, ok := s.tokens[credential(req)]
	if !ok || (!ti.expires.IsZero() && !s.clock.Now().Before(ti.expires)) {
		return ""
	}
	return ti.login
}

func (s *Server) authenticated(req *http.Request, path string, body []byte) reply {
	login := s.login(req)
	if login == "" {
		if req.Header.Get("Authorization") == "" {
			return errReply(http.StatusUnauthorized, "Requires authentication")
		}
		return errReply(http.StatusUnauthorized, "Bad credentials")
	}
	if s.fail5xx > 0 {
		s.fail5xx--
		return reply{status: http.StatusBadGateway, body: []byte("<html><body><h1>502 Bad Gateway</h1></body></html>"),
			header: http.Header{"Content-Type": {"text/html"}}, uncounted: true}
	}
	if s.secondary > 0 {
		s.secondary--
		r := jsonReply(http.StatusForbidden, errorBody{
			Message:          "You have exceeded a secondary rate limit. Please wait a few minutes before you try again.",
			DocumentationURL: docsSecondary, Status: "403"})
		if s.secAfter > 0 {
			r.header.Set("Retry-After", strconv.Itoa(int(s.secAfter/time.Second)))
		}
		r.uncounted = true
		return r
	}
	if path == "/rate_limit" && req.Method == http.MethodGet {
		r := jsonReply(http.StatusOK, map[string]any{"resources": map[string]any{"core": s.rateJSON()}, "rate": s.rateJSON()})
		r.uncounted = true
		return r
	}
	if s.remaining <= 0 {
		r := jsonReply(http.StatusForbidden, errorBody{
			Message:          "API rate limit exceeded for " + login + ". (But here's the good news: Authenticated requests get a higher rate limit.)",
			DocumentationURL: docsPrimaryLimit, Status: "403"})
		r.uncounted = true
		return r
	}
	if path == "/user" && req.Method == http.MethodGet {
		return s.user(req, login)
	}
	if strings.HasPrefix(path, "/orgs/") {
		return s.orgs(req, path)
	}
	return s.route(req, path, body, login)
}

// user serves GET /user: the token's user. An installation token is not a
// user: GitHub answers 403 (the App is found with GET /app and its JWT).
func (s *Server) user(req *http.Request, login string) reply {
	if s.tokens[credential(req)].installation {
		return jsonReply(http.StatusForbidden, errorBody{Message: "Resource not accessible by integration",
			DocumentationURL: docsRoot + "/users/users#get-the-authenticated-user", Status: "403"})
	}
	u := userJSON(req, login)
	u["name"] = login
	return jsonReply(http.StatusOK, u)
}

func (s *Server) rateJSON() map[string]any {
	return map[string]any{"limit": s.limit, "remaining": max(s.remaining, 0), "used": s.used, "reset": s.reset.Unix(), "resource": "core"}
}

// route dispatches /repos/{owner}/{repo}/...
func (s *Server) route(req *http.Request, path string, body []byte, login string) reply {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	if len(parts) < 3 || parts[0] != "repos" {
		return notFound()
	}
	r, ok := s.repos[parts[1]+"/"+parts[2]]
	if !ok {
		return notFound()
	}
	rest := parts[3:]
	m := req.Method
	if m != http.MethodGet && m != http.MethodHead && s.tokens[credential(req)].readOnly {
		return jsonReply(http.StatusForbidden, errorBody{Message: "Must have push access to repository",
			DocumentationURL: docsRoot + "/repos/statuses#create-a-commit-status", Status: "403"})
	}
	switch {
	case (m == http.MethodPost && len(rest) == 1 && rest[0] == "pulls") || (m == http.MethodPatch && len(rest) == 2 && rest[0] == "pulls"):
		return r.writePull(req, rest, body, login)
	case m == http.MethodGet && len(rest) == 0:
		return s.repoJSON(req, r, login)
	case m == http.MethodGet && len(rest) == 1 && rest[0] == "pulls":
		return r.listPulls(req)
	case m == http.MethodGet && len(rest) == 2 && rest[0] == "pulls":
		n, err := strconv.Atoi(rest[1])
		p, ok := r.pulls[n]
		if err != nil || !ok {
			return notFound()
		}
		return jsonReply(http.StatusOK, r.pullJSON(req, p, true))
	case m == http.MethodGet && len(rest) == 3 && rest[0] == "pulls" && rest[2] == "reviews":
		n, err := strconv.Atoi(rest[1])
		if _, ok := r.pulls[n]; err != nil || !ok {
			return notFound()
		}
		return r.listReviews(req, n)
	case m == http.MethodGet && len(rest) == 3 && rest[0] == "commits" && rest[2] == "pulls":
		return r.commitPulls(req, rest[1])
	case m == http.MethodGet && len(rest) == 3 && rest[0] == "commits" && rest[2] == "statuses":
		return r.listStatuses(req, rest[1])
	case m == http.MethodGet && len(rest) == 3 && rest[0] == "commits" && rest[2] == "status":
		return r.combinedStatus(req, rest[1])
	case m == http.MethodPost && len(rest) == 2 && rest[0] == "statuses":
		return r.createStatus(req, rest[1], body, login)
	case m == http.MethodGet && len(rest) == 3 && rest[0] == "commits" && rest[2] == "check-runs":
		return r.listCheckRuns(req, rest[1])
	case m == http.MethodPost && len(rest) == 1 && rest[0] == "check-runs":
		return r.createCheckRun(req, body, login, s.tokens[credential(req)].installation)
	case len(rest) == 2 && rest[0] == "check-runs":
		id, err := strconv.ParseInt(rest[1], 10, 64)
		c := r.findCheckRun(id)
		if err != nil || c == nil {
			return notFound()
		}
		switch m {
		case http.MethodGet:
			return jsonReply(http.StatusOK, r.checkRunJSON(req, c))
		case http.MethodPatch:
			return r.updateCheckRun(req, c, body, s.tokens[credential(req)].installation)
		}
	case len(rest) == 3 && rest[0] == "issues" && rest[2] == "comments":
		n, err := strconv.Atoi(rest[1])
		if _, ok := r.pulls[n]; err != nil || !ok {
			return notFound()
		}
		switch m {
		case http.MethodGet:
			return r.listComments(req, n)
		case http.MethodPost:
			return r.createComment(req, n, body, login)
		}
	case len(rest) == 3 && rest[0] == "issues" && rest[1] == "comments":
		id, err := strconv.ParseInt(rest[2], 10, 64)
		pr, c := r.findComment(id)
		if err != nil || c == nil {
			return notFound()
		}
		switch m {
		case http.MethodGet:
			return jsonReply(http.StatusOK, r.commentJSON(req, pr, c))
		case http.MethodPatch:
			return r.editComment(req, pr, c, body)
		case http.MethodDelete:
			r.removeComment(pr, id)
			return reply{status: http.StatusNoContent}
		}
	}
	return notFound()
}

// page cuts n items by per_page (default 30, at most 100) and page, and
// writes GitHub's Link header.
func page(req *http.Request, n int, h http.Header) (lo, hi int) {
	q := req.URL.Query()
	per, err := strconv.Atoi(q.Get("per_page"))
	if err != nil || per <= 0 {
		per = 30
	}
	per = min(per, 100)
	p, err := strconv.Atoi(q.Get("page"))
	if err != nil || p <= 0 {
		p = 1
	}
	last := max((n+per-1)/per, 1)
	link := func(pg int, rel string) string {
		u := url.URL{Scheme: "http", Host: req.Host, Path: req.URL.Path}
		qq := req.URL.Query()
		qq.Set("page", strconv.Itoa(pg))
		qq.Set("per_page", strconv.Itoa(per))
		u.RawQuery = qq.Encode()
		return fmt.Sprintf(`<%s>; rel="%s"`, u.String(), rel)
	}
	var links []string
	if p < last {
		links = append(links, link(p+1, "next"), link(last, "last"))
	}
	if p > 1 {
		links = append(links, link(1, "first"), link(min(p-1, last), "prev"))
	}
	if len(links) > 0 {
		h.Set("Link", strings.Join(links, ", "))
	}
	lo = min((p-1)*per, n)
	hi = min(lo+per, n)
	return lo, hi
}

func (r *Repo) listPulls(req *http.Request) reply {
	q := req.URL.Query()
	state := q.Get("state")
	if state == "" {
		state = "open"
	}
	base := q.Get("base")
	head := q.Get("head")
	prs := r.sortedPulls(func(p *pull) bool {
		if state != "all" && p.State != state {
			return false
		}
		if base != "" && p.BaseRef != base {
			return false
		}
		if head != "" && head != r.owner+":"+p.HeadRef {
			return false
		}
		return true
	}, q.Get("sort"), q.Get("direction"))
	h := http.Header{}
	lo, hi := page(req, len(prs), h)
	out := make([]any, 0, hi-lo)
	for _, p := range prs[lo:hi] {
		out = append(out, r.pullJSON(req, p, false))
	}
	rep := jsonReply(http.StatusOK, out)
	rep.header, rep.etag = h, true
	return rep
}

// commitPulls serves commits/{sha}/pulls as GitHub describes it: for a
// commit on the default branch, the merged pull requests that brought it
// (whatever branch they were merged into: a commit can reach the default
// branch by a push after a pull request merged it elsewhere); for any other
// commit, the merged and the open pull requests that hold it. Closed and
// unmerged pull requests are left out either way. The order is the order in
// which the pull requests came to hold the commit; GitHub documents none, so
// a client must not depend on it.
func (r *Repo) commitPulls(req *http.Request, sha string) reply {
	nums, ok := r.commits[sha]
	if !ok {
		return noCommit(sha)
	}
	onDefault := r.branches[r.defaultBranch][sha]
	var listed []*pull
	for _, n := range nums {
		p := r.pulls[n]
		switch {
		case p.Merged:
		case onDefault, p.State != "open":
			continue
		}
		listed = append(listed, p)
	}
	h := http.Header{}
	lo, hi := page(req, len(listed), h)
	out := make([]any, 0, hi-lo)
	for _, p := range listed[lo:hi] {
		out = append(out, r.pullJSON(req, p, false))
	}
	rep := jsonReply(http.StatusOK, out)
	rep.header, rep.etag = h, true
	return rep
}

// noCommit is GitHub's answer for a sha it does not know: 422, not 404.
func noCommit(sha string) reply {
	return errReply(http.StatusUnprocessableEntity, "No commit found for SHA: "+sha)
}

func (r *Repo) createStatus(req *http.Request, sha string, body []byte, login string) reply {
	if _, ok := r.commits[sha]; !ok {
		return noCommit(sha)
	}
	var in struct {
		State       string  `json:"state"`
		TargetURL   *string `json:"target_url"`
		Description *string `json:"description"`
		Context     *string `json:"context"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return errReply(http.StatusBadRequest, "Problems parsing JSON")
	}
	switch in.State {
	case "pending", "success", "failure", "error":
	default:
		return errReply(http.StatusUnprocessableEntity, "Validation Failed",
			fieldError{Resource: "Status", Code: "custom", Field: "state", Message: "state is not included in the list"})
	}
	st := Status{ID: r.s.id(), State: in.State, Context: "default", Creator: login, Created: r.s.clock.Now()}
	if in.Context != nil && *in.Context != "" {
		st.Context = *in.Context
	}
	if in.Description != nil {
		if utf8.RuneCountInString(*in.Description) > maxStatusDescribe {
			return errReply(http.StatusUnprocessableEntity, "Validation Failed",
				fieldError{Resource: "Status", Code: "custom", Field: "description", Message: "description is too long (maximum is 140 characters)"})
		}
		st.Description = *in.Description
	}
	if in.TargetURL != nil {
		st.TargetURL = *in.TargetURL
	}
	// Contexts are case-insensitive: the cap counts "Fleet-Agent/Plan" and
	// "fleet-agent/plan" as one context.
	n := 0
	for _, old := range r.statuses[sha] {
		if strings.EqualFold(old.Context, st.Context) {
			n++
		}
	}
	if n >= maxStatusesPerContext {
		return errReply(http.StatusUnprocessableEntity, "Validation Failed",
			fieldError{Resource: "Status", Code: "custom", Message: "This SHA and context has reached the maximum number of statuses."})
	}
	r.statuses[sha] = append(r.statuses[sha], &status{st})
	return jsonReply(http.StatusCreated, r.statusJSON(req, sha, st))
}

func (r *Repo) listStatuses(req *http.Request, ref string) reply {
	if _, ok := r.commits[ref]; !ok {
		return noCommit(ref)
	}
	all := r.statuses[ref]
	h := http.Header{}
	lo, hi := page(req, len(all), h)
	out := make([]any, 0, hi-lo)
	// Newest first, as GitHub lists them.
	for i := len(all) - 1 - lo; i >= len(all)-hi; i-- {
		out = append(out, r.statusJSON(req, ref, all[i].Status))
	}
	rep := jsonReply(http.StatusOK, out)
	rep.header, rep.etag = h, true
	return rep
}

func (r *Repo) combinedStatus(req *http.Request, ref string) reply {
	if _, ok := r.commits[ref]; !ok {
		return noCommit(ref)
	}
	latest := map[string]Status{}
	var order []string
	all := r.statuses[ref]
	for i := len(all) - 1; i >= 0; i-- {
		st := all[i].Status
		// One entry per context, compared without case; the newest
		// status shows with the context as it was sent.
		key := strings.ToLower(st.Context)
		if _, ok := latest[key]; !ok {
			latest[key] = st
			order = append(order, key)
		}
	}
	state := "success"
	if len(order) == 0 {
		state = "pending"
	}
	var list []any
	for _, c := range order {
		st := latest[c]
		switch {
		case st.State == "failure" || st.State == "error":
			state = "failure"
		case st.State == "pending" && state != "failure":
			state = "pending"
		}
		list = append(list, r.statusJSON(req, ref, st))
	}
	if list == nil {
		list = []any{}
	}
	rep := jsonReply(http.StatusOK, map[string]any{
		"state": state, "statuses": list, "sha": ref, "total_count": len(list),
		"repository": r.repoJSON(req), "commit_url": r.apiURL(req, "/commits/"+ref),
		"url": r.apiURL(req, "/commits/"+ref+"/status"),
	})
	rep.etag = true
	return rep
}

func (r *Repo) listComments(req *http.Request, pr int) reply {
	all := r.comments[pr]
	h := http.Header{}
	lo, hi := page(req, len(all), h)
	out := make([]any, 0, hi-lo)
	for _, c := range all[lo:hi] {
		out = append(out, r.commentJSON(req, pr, c))
	}
	rep := jsonReply(http.StatusOK, out)
	rep.header, rep.etag = h, true
	return rep
}

func commentBody(body []byte) (string, *reply) {
	var in struct {
		Body *string `json:"body"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		r := errReply(http.StatusBadRequest, "Problems parsing JSON")
		return "", &r
	}
	if in.Body == nil || strings.TrimSpace(*in.Body) == "" {
		r := errReply(http.StatusUnprocessableEntity, "Validation Failed",
			fieldError{Resource: "IssueComment", Code: "missing_field", Field: "body"})
		return "", &r
	}
	if utf8.RuneCountInString(*in.Body) > maxCommentBody {
		// GitHub's answer names the field "data", not "body", and puts
		// what is wrong in the message (seen in the wild in 2023).
		r := commentRefused("Body is too long (maximum is 65536 characters)")
		return "", &r
	}
	return *in.Body, nil
}

// commentRefused is GitHub's 422 about a comment that goes through its
// content pipeline: resource IssueComment, code unprocessable, field data,
// and the reason in the message, for a body too long as for content created
// too fast.
func commentRefused(msg string) reply {
	return jsonReply(http.StatusUnprocessableEntity, errorBody{Message: "Validation Failed",
		Errors:           []fieldError{{Resource: "IssueComment", Code: "unprocessable", Field: "data", Message: msg}},
		DocumentationURL: docsCreateComment, Status: "422"})
}

// tooQuickly answers a comment creation or edit with GitHub's secondary
// limit on content creation when one was asked for.
func (r *Repo) tooQuickly() (reply, bool) {
	if r.s.tooQuick <= 0 {
		return reply{}, false
	}
	r.s.tooQuick--
	return commentRefused("was submitted too quickly"), true
}

func (r *Repo) createComment(req *http.Request, pr int, body []byte, login string) reply {
	text, bad := commentBody(body)
	if bad != nil {
		return *bad
	}
	if rep, limited := r.tooQuickly(); limited {
		return rep
	}
	c := r.addComment(pr, login, text)
	return jsonReply(http.StatusCreated, r.commentJSON(req, pr, c))
}

func (r *Repo) editComment(req *http.Request, pr int, c *comment, body []byte) reply {
	text, bad := commentBody(body)
	if bad != nil {
		return *bad
	}
	if rep, limited := r.tooQuickly(); limited {
		return rep
	}
	c.Body = text
	c.Edits++
	c.updated = r.s.clock.Now()
	return jsonReply(http.StatusOK, r.commentJSON(req, pr, c))
}

func (r *Repo) findComment(id int64) (int, *comment) {
	for pr, cs := range r.comments {
		for _, c := range cs {
			if c.ID == id {
				return pr, c
			}
		}
	}
	return 0, nil
}

func (r *Repo) removeComment(pr int, id int64) {
	cs := r.comments[pr]
	for i, c := range cs {
		if c.ID == id {
			r.comments[pr] = append(cs[:i:i], cs[i+1:]...)
			return
		}
	}
}
