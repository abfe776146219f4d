package githubemu

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Limits of check runs. From GitHub's REST description (testdata/restapi,
// checks.yaml): at most 50 annotations per request, output summary and text
// at most 65535 characters, annotation title at most 255 characters, message
// and raw details at most 64 KB. Which of these GitHub counts in code points
// and which in bytes it does not say: the emulator counts characters as code
// points and "64 KB" as 65536 bytes (a guess, said in the README).
const (
	MaxAnnotationsPerRequest = 50
	maxOutputChars           = 65535
	maxAnnotationTitle       = 255
	maxAnnotationBytes       = 64 << 10
)

// What the description lists and the emulator enforces (checks_test.go
// compares them with testdata/restapi/checks.yaml).
var (
	annotationRequired = []string{"path", "start_line", "end_line", "annotation_level", "message"}
	annotationLevels   = []string{"notice", "warning", "failure"}
	// conclusions an App may set: the description's enum but "stale",
	// which "only GitHub can set".
	conclusions = []string{"action_required", "cancelled", "failure", "neutral", "success", "skipped", "timed_out"}
)

// CheckRun is a check run as a test reads it.
type CheckRun struct {
	ID         int64
	HeadSHA    string
	Name       string
	Status     string // queued, in_progress, completed
	Conclusion string // "" until completed
	ExternalID string
	Title      string
	Summary    string
	Text       string
	// Annotations accumulate over the create and every update, as GitHub
	// appends them.
	Annotations []Annotation
	// App is the login of the App's bot that made it.
	App       string
	Started   time.Time
	Completed time.Time
	// Requests counts the create and the updates it took.
	Requests int
}

// Annotation is one line annotation of a check run.
type Annotation struct {
	Path        string `json:"path"`
	StartLine   int    `json:"start_line"`
	EndLine     int    `json:"end_line"`
	StartColumn int    `json:"start_column,omitempty"`
	EndColumn   int    `json:"end_column,omitempty"`
	Level       string `json:"annotation_level"`
	Message     string `json:"message"`
	Title       string `json:"title,omitempty"`
	RawDetails  string `json:"raw_details,omitempty"`
}

// CheckRuns lists the check runs on sha, oldest first.
func (r *Repo) CheckRuns(sha string) []CheckRun {
	s := r.s
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []CheckRun
	for _, c := range r.checkRuns {
		if c.HeadSHA == sha {
			cp := *c
			cp.Annotations = slices.Clone(c.Annotations)
			out = append(out, cp)
		}
	}
	return out
}

// checkRunIn is the request body of create and update: pointers tell a field
// left out from one given empty.
type checkRunIn struct {
	Name        *string          `json:"name"`
	HeadSHA     *string          `json:"head_sha"`
	DetailsURL  *string          `json:"details_url"`
	ExternalID  *string          `json:"external_id"`
	Status      *string          `json:"status"`
	StartedAt   *time.Time       `json:"started_at"`
	Conclusion  *string          `json:"conclusion"`
	CompletedAt *time.Time       `json:"completed_at"`
	Output      *json.RawMessage `json:"output"`
}

type outputIn struct {
	Title       *string           `json:"title"`
	Summary     *string           `json:"summary"`
	Text        *string           `json:"text"`
	Annotations []json.RawMessage `json:"annotations"`
}

// invalidRequest is the 422 GitHub gives a body that breaks the schema of
// the operation: "Invalid request." and one line per problem, no errors
// list. The wording of the lines is the one public issue threads show
// ("No more than 50 items are allowed; 143 were supplied.", `"message",
// "start_line" weren't supplied.`).
func invalidRequest(lines ...string) reply {
	return errReply(http.StatusUnprocessableEntity, "Invalid request.\n\n"+strings.Join(lines, "\n"))
}

func notSupplied(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	if len(q) == 1 {
		return q[0] + " wasn't supplied."
	}
	return strings.Join(q, ", ") + " weren't supplied."
}

// absent lists the names whose field is not given.
func absent(names []string, given ...bool) []string {
	var out []string
	for i, ok := range given {
		if !ok {
			out = append(out, names[i])
		}
	}
	return out
}

func checkRunInvalid(field, msg string) reply {
	return errReply(http.StatusUnprocessableEntity, "Validation Failed",
		fieldError{Resource: "CheckRun", Code: "invalid", Field: field, Message: msg})
}

// appOnly is GitHub's answer to a user token on the Checks API, as public
// issue threads show it.
func appOnly() reply {
	return jsonReply(http.StatusForbidden, errorBody{Message: "You must authenticate via a GitHub App.",
		DocumentationURL: docsRoot + "/checks/runs#create-a-check-run", Status: "403"})
}

func (r *Repo) createCheckRun(req *http.Request, body []byte, login string, installation bool) reply {
	if !installation {
		return appOnly()
	}
	var in checkRunIn
	if err := json.Unmarshal(body, &in); err != nil {
		return errReply(http.StatusBadRequest, "Problems parsing JSON")
	}
	if missing := absent([]string{"name", "head_sha"}, in.Name != nil, in.HeadSHA != nil); len(missing) > 0 {
		return invalidRequest(notSupplied(missing))
	}
	if _, ok := r.commits[*in.HeadSHA]; !ok {
		return noCommit(*in.HeadSHA)
	}
	c := &CheckRun{HeadSHA: *in.HeadSHA, Status: "queued", App: login}
	if bad, ok := r.applyCheckRun(c, &in, true); !ok {
		return bad
	}
	c.ID = r.s.id()
	r.checkRuns = append(r.checkRuns, c)
	return jsonReply(http.StatusCreated, r.checkRunJSON(req, c))
}

func (r *Repo) updateCheckRun(req *http.Request, c *CheckRun, body []byte, installation bool) reply {
	if !installation {
		return appOnly()
	}
	var in checkRunIn
	if err := json.Unmarshal(body, &in); err != nil {
		return errReply(http.StatusBadRequest, "Problems parsing JSON")
	}
	next := *c
	next.Annotations = slices.Clone(c.Annotations)
	if bad, ok := r.applyCheckRun(&next, &in, false); !ok {
		return bad
	}
	*c = next
	return jsonReply(http.StatusOK, r.checkRunJSON(req, c))
}

// applyCheckRun validates in and applies it to c; nothing is applied when it
// is refused (the caller works on a copy).
func (r *Repo) applyCheckRun(c *CheckRun, in *checkRunIn, create bool) (reply, bool) {
	if in.Name != nil {
		c.Name = *in.Name
	}
	if in.ExternalID != nil {
		c.ExternalID = *in.ExternalID
	}
	if in.Status != nil {
		switch *in.Status {
		case "queued", "in_progress", "completed":
			c.Status = *in.Status
		case "waiting", "requested", "pending":
			// "Only GitHub Actions can set a status of waiting, pending,
			// or requested."
			return checkRunInvalid("status", "Only GitHub Actions can set a status of "+*in.Status+"."), false
		default:
			return invalidRequest(fmt.Sprintf("%q is not a member of [\"queued\", \"in_progress\", \"completed\"].", *in.Status)), false
		}
	}
	if in.Conclusion != nil {
		switch {
		case slices.Contains(conclusions, *in.Conclusion):
			// "Providing conclusion will automatically set the status
			// parameter to completed."
			c.Conclusion, c.Status = *in.Conclusion, "completed"
		case *in.Conclusion == "stale":
			return checkRunInvalid("conclusion", "You cannot change a check run conclusion to stale, only GitHub can set this."), false
		default:
			return invalidRequest(fmt.Sprintf("%q is not a member of the conclusions.", *in.Conclusion)), false
		}
	}
	now := r.s.clock.Now()
	if in.StartedAt != nil {
		c.Started = *in.StartedAt
	} else if create {
		c.Started = now
	}
	if in.CompletedAt != nil {
		c.Completed = *in.CompletedAt
	}
	// "Required if you provide completed_at or a status of completed."
	if (c.Status == "completed" || in.CompletedAt != nil) && c.Conclusion == "" {
		return checkRunInvalid("conclusion", "conclusion is required when status is completed"), false
	}
	if c.Status == "completed" && c.Completed.IsZero() {
		c.Completed = now
	}
	if in.Output != nil && !bytes.Equal(*in.Output, []byte("null")) {
		if bad, ok := applyOutput(c, *in.Output); !ok {
			return bad, false
		}
	}
	c.Requests++
	return reply{}, true
}

func applyOutput(c *CheckRun, raw json.RawMessage) (reply, bool) {
	var out outputIn
	if err := json.Unmarshal(raw, &out); err != nil {
		return errReply(http.StatusBadRequest, "Problems parsing JSON"), false
	}
	if missing := absent([]string{"title", "summary"}, out.Title != nil, out.Summary != nil); len(missing) > 0 {
		return invalidRequest(notSupplied(missing)), false
	}
	for _, f := range []struct {
		name string
		v    *string
	}{{"summary", out.Summary}, {"text", out.Text}} {
		if f.v != nil && utf8.RuneCountInString(*f.v) > maxOutputChars {
			return invalidRequest(fmt.Sprintf("%s is too long (maximum is %d characters).", f.name, maxOutputChars)), false
		}
	}
	if n := len(out.Annotations); n > MaxAnnotationsPerRequest {
		return invalidRequest(fmt.Sprintf("No more than %d items are allowed; %d were supplied.", MaxAnnotationsPerRequest, n)), false
	}
	var lines []string
	var added []Annotation
	for _, rawA := range out.Annotations {
		var fields map[string]json.RawMessage
		var a Annotation
		if json.Unmarshal(rawA, &fields) != nil || json.Unmarshal(rawA, &a) != nil {
			return errReply(http.StatusBadRequest, "Problems parsing JSON"), false
		}
		var missing []string
		for _, k := range annotationRequired {
			if _, ok := fields[k]; !ok {
				missing = append(missing, k)
			}
		}
		if len(missing) > 0 {
			lines = append(lines, notSupplied(missing))
			continue
		}
		if !slices.Contains(annotationLevels, a.Level) {
			lines = append(lines, fmt.Sprintf("%q is not a member of [\"notice\", \"warning\", \"failure\"].", a.Level))
			continue
		}
		added = append(added, a)
	}
	if len(lines) > 0 {
		return invalidRequest(lines...), false
	}
	for _, a := range added {
		switch {
		case a.StartLine < 1 || a.EndLine < a.StartLine:
			return checkRunInvalid("annotations", "start_line must be at least 1 and end_line at least start_line"), false
		case (a.StartColumn != 0 || a.EndColumn != 0) && a.StartLine != a.EndLine:
			// "Annotations only support start_column and end_column on the
			// same line."
			return checkRunInvalid("annotations", ""), false
		case a.StartColumn < 0 || (a.EndColumn != 0 && a.EndColumn < a.StartColumn):
			return checkRunInvalid("annotations", ""), false
		case utf8.RuneCountInString(a.Title) > maxAnnotationTitle:
			return checkRunInvalid("annotations", fmt.Sprintf("title is too long (maximum is %d characters)", maxAnnotationTitle)), false
		case len(a.Message) > maxAnnotationBytes || len(a.RawDetails) > maxAnnotationBytes:
			return checkRunInvalid("annotations", "message is too long (maximum is 64 KB)"), false
		}
	}
	c.Title, c.Summary = *out.Title, *out.Summary
	if out.Text != nil {
		c.Text = *out.Text
	}
	c.Annotations = append(c.Annotations, added...)
	return reply{}, true
}

func (r *Repo) findCheckRun(id int64) *CheckRun {
	for _, c := range r.checkRuns {
		if c.ID == id {
			return c
		}
	}
	return nil
}

// checkRunJSON is the check-run schema's fields that clients read.
func (r *Repo) checkRunJSON(req *http.Request, c *CheckRun) map[string]any {
	api := r.apiURL(req, fmt.Sprintf("/check-runs/%d", c.ID))
	var conclusion any
	if c.Conclusion != "" {
		conclusion = c.Conclusion
	}
	var completed any
	if c.Status == "completed" {
		completed = ts(c.Completed)
	}
	app := strings.TrimSuffix(c.App, "[bot]")
	return map[string]any{
		"id": c.ID, "node_id": fmt.Sprintf("CR_%d", c.ID), "head_sha": c.HeadSHA, "external_id": c.ExternalID,
		"url": api, "html_url": r.webURL(req, fmt.Sprintf("/runs/%d", c.ID)), "details_url": r.webURL(req, ""),
		"status": c.Status, "conclusion": conclusion, "started_at": ts(c.Started), "completed_at": completed,
		"output": map[string]any{
			"title": c.Title, "summary": c.Summary, "text": nullable(c.Text),
			"annotations_count": len(c.Annotations), "annotations_url": api + "/annotations",
		},
		"name":          c.Name,
		"check_suite":   map[string]any{"id": c.ID},
		"app":           map[string]any{"id": idOf(app), "slug": app, "node_id": "A_" + app, "name": app},
		"pull_requests": []any{},
	}
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// listCheckRuns serves GET commits/{ref}/check-runs for a commit sha:
// check_name filters by name; filter=latest (the default) keeps the newest
// run of each name. Newest first: the order GitHub's answers show.
func (r *Repo) listCheckRuns(req *http.Request, ref string) reply {
	if _, ok := r.commits[ref]; !ok {
		return noCommit(ref)
	}
	q := req.URL.Query()
	name, latest := q.Get("check_name"), q.Get("filter") != "all"
	var runs []*CheckRun
	seen := map[string]bool{}
	for i := len(r.checkRuns) - 1; i >= 0; i-- {
		c := r.checkRuns[i]
		if c.HeadSHA != ref || (name != "" && c.Name != name) || (latest && seen[c.Name]) {
			continue
		}
		seen[c.Name] = true
		runs = append(runs, c)
	}
	h := http.Header{}
	lo, hi := page(req, len(runs), h)
	out := make([]any, 0, hi-lo)
	for _, c := range runs[lo:hi] {
		out = append(out, r.checkRunJSON(req, c))
	}
	rep := jsonReply(http.StatusOK, map[string]any{"total_count": len(runs), "check_runs": out})
	for k, v := range h {
		rep.header[k] = v
	}
	return rep
}
