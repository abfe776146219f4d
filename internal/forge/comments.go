package forge

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/google/go-github/v62/github"
)

// MaxCommentLength is GitHub's limit on a comment body, in code points. The
// markdown renderer keeps under it; a longer body is refused here, since
// GitHub would refuse it with a 422 after spending a request.
const MaxCommentLength = 65536

// Comment is a comment on a pull request.
type Comment struct {
	ID     int64
	Body   string
	Author string
}

// Marker is the hidden line that finds a comment again: <!-- PREFIX:NAME -->,
// PREFIX being the status context prefix. The plan comment's name is "plan";
// result and drift comments put the commit or the drift hash in the name.
func (g *GitHub) Marker(name string) string {
	return "<!-- " + g.prefix + ":" + name + " -->"
}

// PlanMarker marks the one plan comment of a pull request.
func (g *GitHub) PlanMarker() string { return g.Marker("plan") }

func checkMarker(op, marker string) error {
	inner, ok := strings.CutPrefix(marker, "<!-- ")
	if ok {
		inner, ok = strings.CutSuffix(inner, " -->")
	}
	if !ok || inner == "" || strings.Contains(inner, "--") || strings.ContainsAny(inner, "\r\n>") {
		return invalid(op, "the marker %q is not a one-line HTML comment; make it with Marker", marker)
	}
	return nil
}

// withMarker puts the marker on the first line unless the body holds it.
func withMarker(marker, body string) string {
	if strings.Contains(body, marker) {
		return body
	}
	return marker + "\n" + body
}

func checkBody(op, body string) error {
	if n := utf8.RuneCountInString(body); n > MaxCommentLength {
		return invalid(op, "the comment has %d code points, GitHub takes at most %d; the renderer must cut it", n, MaxCommentLength)
	}
	if !utf8.ValidString(body) {
		return invalid(op, "the comment is not valid UTF-8")
	}
	return nil
}

// commentMemory remembers, per pull request and marker, the comment found or
// made and the body it holds, so that a repeated upsert costs nothing and an
// edit needs no search.
type commentMemory struct {
	mu    sync.Mutex
	known map[commentKey]Comment
}

type commentKey struct {
	pr     int
	marker string
}

func (m *commentMemory) init() { m.known = map[commentKey]Comment{} }

func (m *commentMemory) get(k commentKey) (Comment, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.known[k]
	return c, ok
}

func (m *commentMemory) put(k commentKey, c Comment) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.known[k] = c
}

func (m *commentMemory) drop(k commentKey) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.known, k)
}

// UpsertComment keeps one comment holding marker on pull request pr and makes
// its body body (with the marker added on top when body lacks it). The
// comment is found in memory or, after a restart, by reading the pull
// request's comments; only comments written by the forge's own identity
// count (see FindComment). It is created only when none of those holds the
// marker, and edited only when its body differs. It returns the comment as
// it now is.
func (g *GitHub) UpsertComment(ctx context.Context, pr int, marker, body string) (Comment, error) {
	op := "upsert comment " + marker + " on #" + strconv.Itoa(pr)
	if err := checkMarker(op, marker); err != nil {
		return Comment{}, err
	}
	body = withMarker(marker, body)
	if err := checkBody(op, body); err != nil {
		return Comment{}, err
	}
	// One upsert at a time: two finding "none" at once would post twice.
	g.upsertMu.Lock()
	defer g.upsertMu.Unlock()
	me, err := g.self(ctx)
	if err != nil {
		return Comment{}, err
	}
	key := commentKey{pr, marker}
	c, ok := g.remembered(key, me)
	if !ok {
		found, exists, err := g.findComment(ctx, op, pr, marker, me)
		if err != nil {
			return Comment{}, err
		}
		if !exists {
			return g.addComment(ctx, op, key, body)
		}
		c = found
		g.comments.put(key, c)
	}
	if c.Body == body {
		return c, nil
	}
	edited, err := g.editComment(ctx, op, c.ID, body)
	if err != nil {
		var fe *Error
		if errors.As(err, &fe) && fe.Class == ClassNotFound {
			// Someone deleted it: forget it and look again.
			g.comments.drop(key)
			found, exists, ferr := g.findComment(ctx, op, pr, marker, me)
			if ferr != nil {
				return Comment{}, ferr
			}
			if !exists {
				return g.addComment(ctx, op, key, body)
			}
			if edited, err = g.editComment(ctx, op, found.ID, body); err != nil {
				return Comment{}, err
			}
		} else {
			return Comment{}, err
		}
	}
	g.comments.put(key, edited)
	return edited, nil
}

// remembered is the comment kept for key, if it was written by me: after a
// change of credential to another user, the old user's comments are no
// longer the agent's.
func (g *GitHub) remembered(key commentKey, me string) (Comment, bool) {
	c, ok := g.comments.get(key)
	if ok && !isSelf(c.Author, me) {
		g.comments.drop(key)
		return Comment{}, false
	}
	return c, ok
}

// UpsertPlanComment is UpsertComment with the plan marker.
func (g *GitHub) UpsertPlanComment(ctx context.Context, pr int, body string) (Comment, error) {
	return g.UpsertComment(ctx, pr, g.PlanMarker(), body)
}

// AddComment posts a new comment. For comments that must not be posted twice
// (results, drift), look first with FindComment, or use AddCommentOnce.
func (g *GitHub) AddComment(ctx context.Context, pr int, body string) (Comment, error) {
	op := "add comment on #" + strconv.Itoa(pr)
	if err := checkBody(op, body); err != nil {
		return Comment{}, err
	}
	var out *github.IssueComment
	_, err := g.call(ctx, op, func(ctx context.Context) (*github.Response, error) {
		var resp *github.Response
		var err error
		out, resp, err = g.client.Issues.CreateComment(ctx, g.owner, g.repo, pr, &github.IssueComment{Body: github.String(body)})
		return resp, err
	})
	if err != nil {
		return Comment{}, err
	}
	return commentOf(out), nil
}

// AddCommentOnce posts body (marker added on top when missing) unless a
// comment of the forge's own identity holding marker is already on the pull
// request (see FindComment); it returns the comment found or made, and
// whether it posted.
func (g *GitHub) AddCommentOnce(ctx context.Context, pr int, marker, body string) (Comment, bool, error) {
	op := "add comment " + marker + " on #" + strconv.Itoa(pr)
	if err := checkMarker(op, marker); err != nil {
		return Comment{}, false, err
	}
	body = withMarker(marker, body)
	if err := checkBody(op, body); err != nil {
		return Comment{}, false, err
	}
	g.upsertMu.Lock()
	defer g.upsertMu.Unlock()
	me, err := g.self(ctx)
	if err != nil {
		return Comment{}, false, err
	}
	key := commentKey{pr, marker}
	if c, ok := g.remembered(key, me); ok {
		return c, false, nil
	}
	c, exists, err := g.findComment(ctx, op, pr, marker, me)
	if err != nil {
		return Comment{}, false, err
	}
	if exists {
		g.comments.put(key, c)
		return c, false, nil
	}
	c, err = g.addComment(ctx, op, key, body)
	return c, err == nil, err
}

func (g *GitHub) addComment(ctx context.Context, op string, key commentKey, body string) (Comment, error) {
	var out *github.IssueComment
	_, err := g.call(ctx, op, func(ctx context.Context) (*github.Response, error) {
		var resp *github.Response
		var err error
		out, resp, err = g.client.Issues.CreateComment(ctx, g.owner, g.repo, key.pr, &github.IssueComment{Body: github.String(body)})
		return resp, err
	})
	if err != nil {
		return Comment{}, err
	}
	c := commentOf(out)
	g.comments.put(key, c)
	return c, nil
}

func (g *GitHub) editComment(ctx context.Context, op string, id int64, body string) (Comment, error) {
	var out *github.IssueComment
	_, err := g.call(ctx, op, func(ctx context.Context) (*github.Response, error) {
		var resp *github.Response
		var err error
		out, resp, err = g.client.Issues.EditComment(ctx, g.owner, g.repo, id, &github.IssueComment{Body: github.String(body)})
		return resp, err
	})
	if err != nil {
		return Comment{}, err
	}
	return commentOf(out), nil
}

// FindComment returns the oldest comment on pull request pr that holds
// marker and was written by the forge's own identity, reading every page of
// its comments. Anyone who can comment can write a marker: a comment by
// anyone else is not the agent's, whatever it holds. The identity is learned
// once per credential (GET /user for a token, GET /app for an App); when it
// cannot be learned, FindComment fails rather than trust any author.
func (g *GitHub) FindComment(ctx context.Context, pr int, marker string) (Comment, bool, error) {
	op := "find comment " + marker + " on #" + strconv.Itoa(pr)
	if err := checkMarker(op, marker); err != nil {
		return Comment{}, false, err
	}
	me, err := g.self(ctx)
	if err != nil {
		return Comment{}, false, err
	}
	return g.findComment(ctx, op, pr, marker, me)
}

// findComment is FindComment for the author me.
func (g *GitHub) findComment(ctx context.Context, op string, pr int, marker, me string) (Comment, bool, error) {
	opts := &github.IssueListCommentsOptions{ListOptions: github.ListOptions{PerPage: perPage, Page: 1}}
	for opts.Page != 0 {
		var got []*github.IssueComment
		resp, err := g.call(ctx, op, func(ctx context.Context) (*github.Response, error) {
			var resp *github.Response
			var err error
			got, resp, err = g.client.Issues.ListComments(ctx, g.owner, g.repo, pr, opts)
			return resp, err
		})
		if err != nil {
			return Comment{}, false, err
		}
		for _, c := range got {
			if isSelf(c.GetUser().GetLogin(), me) && strings.Contains(c.GetBody(), marker) {
				return commentOf(c), true, nil
			}
		}
		opts.Page = resp.NextPage
	}
	return Comment{}, false, nil
}

func commentOf(c *github.IssueComment) Comment {
	return Comment{ID: c.GetID(), Body: c.GetBody(), Author: c.GetUser().GetLogin()}
}
