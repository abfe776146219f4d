package plan

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/fleet-agent/fleet-agent/internal/canon"
	"github.com/fleet-agent/fleet-agent/internal/textline"
)

// Line renders one change in the documented grammar:
// <sym> <kind> <name>[ (<field>, <field>)][: <reason>; <reason>]
func (c Change) Line() string {
	var b strings.Builder
	b.WriteString(c.Symbol())
	b.WriteByte(' ')
	b.WriteString(string(c.Kind))
	b.WriteByte(' ')
	b.WriteString(c.Name)
	if len(c.Fields) > 0 {
		b.WriteString(" (")
		b.WriteString(strings.Join(c.Fields, ", "))
		b.WriteByte(')')
	}
	if c.Blocked != "" {
		b.WriteString(": ")
		b.WriteString(c.Blocked)
	}
	return b.String()
}

// CallLine renders a call as `<method> <canonical params>`. The params
// hold the author's text, and JSON leaves C1 controls, line separators and
// direction controls raw: they are written as their escapes, so the line is
// one line of plain text in a terminal, a log or the comment, and its JSON
// reads back the same.
func (c Call) CallLine() string {
	return c.Method + " " + string(textline.EscapeJSON(canon.MustMarshal(c.Params)))
}

// Counts is the counts line.
func (s Summary) Counts() string {
	return fmt.Sprintf("%d to create, %d to update, %d to delete, %d unchanged.", s.Create, s.Update, s.Delete, s.Unchanged)
}

// TextLines renders the plan as text lines: one per change shown (with its
// notes), the counts, `N blocked.` when blocked, and with calls one line
// per call.
func (p *Plan) TextLines(calls bool) []string {
	var lines []string
	for _, c := range p.Doing() {
		lines = append(lines, c.Line())
		for _, n := range slices.Concat(c.NoteLines(), c.WindowLines()) {
			lines = append(lines, "  note: "+n)
		}
	}
	lines = append(lines, p.Summary.Counts())
	if p.Summary.Blocked > 0 {
		lines = append(lines, fmt.Sprintf("%d blocked.", p.Summary.Blocked))
	}
	lines = append(lines, p.Policy.PolicyLines()...)
	if calls {
		for _, c := range p.Calls {
			lines = append(lines, c.CallLine())
		}
	}
	return lines
}

// WriteText writes the text rendering.
func (p *Plan) WriteText(w io.Writer, calls bool) error {
	_, err := io.WriteString(w, strings.Join(p.TextLines(calls), "\n")+"\n")
	return err
}

// WriteJSON writes {changes, calls, summary, planHash}, indented, with no
// HTML escaping (`->` stays `->`), and the characters a terminal or a log
// reader would obey as their escapes (textline.EscapeJSON).
func (p *Plan) WriteJSON(w io.Writer) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(p); err != nil {
		return err
	}
	_, err := w.Write(textline.EscapeJSON(b.Bytes()))
	return err
}

// Markdown limits of a pull request comment, in code points.
const (
	CommentLimit  = 65536
	CommentTarget = 65000
)

// MarkdownOptions say what a comment is about.
type MarkdownOptions struct {
	// Marker is the hidden marker line that finds the comment again.
	Marker string
	// Head is the full sha of the commit planned.
	Head string
	// Branch is the branch the plan applies to on merge.
	Branch string
	// Limit in code points (default CommentTarget).
	Limit int
}

// Markdown renders the plan as a pull request comment: plan lines in a
// diff block, the counts, the blocked reasons, the calls in a collapsed
// section and the hash. It never exceeds the limit: it cuts at line
// boundaries (calls first, then the plan lines), keeps fences closed, the
// counts and the hash, and says what it cut.
func (p *Plan) Markdown(o MarkdownOptions) string {
	if o.Limit <= 0 {
		o.Limit = CommentTarget
	}
	branch := o.Branch
	if branch == "" {
		branch = "main"
	}
	var head strings.Builder
	if o.Marker != "" {
		head.WriteString(o.Marker + "\n")
	}
	status := "applicable"
	switch {
	case p.Blocked():
		status = "blocked"
	case p.Policy.Denied():
		status = "denied by policy"
	case len(p.Policy.Awaiting()) > 0:
		status = "awaiting approval"
	}
	fmt.Fprintf(&head, "### fleet-agent plan: %s\n\n", status)
	if o.Head != "" {
		fmt.Fprintf(&head, "Planned at commit `%s`.\n\n", o.Head)
	}
	var diff []string
	for _, c := range p.Doing() {
		diff = append(diff, c.Line())
		for _, n := range slices.Concat(c.NoteLines(), c.WindowLines()) {
			diff = append(diff, "  note: "+n)
		}
	}
	var blocked []string
	for _, c := range p.Changes {
		if c.Blocked != "" {
			blocked = append(blocked, fmt.Sprintf("- `%s %s`: %s", c.Kind, c.Name, EscapeMarkdown(c.Blocked)))
		}
	}
	var calls []string
	for _, c := range p.Calls {
		calls = append(calls, c.CallLine())
	}
	counts := "**" + p.Summary.Counts() + "**"
	if p.Summary.Blocked > 0 {
		counts += fmt.Sprintf(" **%d blocked.**", p.Summary.Blocked)
	}
	var foot strings.Builder
	fmt.Fprintf(&foot, "planHash: `%s`\n\n", p.PlanHash)
	if p.Blocked() {
		fmt.Fprintf(&foot, "This plan is blocked: merging it to `%s` applies nothing. Fix the document and push again.\n", branch)
	} else if p.Policy.Denied() {
		fmt.Fprintf(&foot, "A policy rule denies this plan: merging it to `%s` applies nothing. Change the document, or the policy on `%s` first.\n", branch, branch)
	} else if len(p.Policy.Awaiting()) > 0 {
		fmt.Fprintf(&foot, "Applies on merge to `%s` once one of the approvers named above approves this pull request.\n", branch)
	} else if p.Empty() {
		fmt.Fprintf(&foot, "Nothing to change: merging to `%s` records this document as applied.\n", branch)
	} else {
		fmt.Fprintf(&foot, "Applies on merge to `%s`.\n", branch)
	}

	pol := p.Policy.MarkdownLines()
	cutPol := 0
	build := func(diff, blocked, calls []string, cutDiff, cutBlocked, cutCalls int) string {
		var b strings.Builder
		b.WriteString(head.String())
		if len(diff) > 0 || cutDiff > 0 {
			b.WriteString("```diff\n")
			for _, l := range diff {
				b.WriteString(l + "\n")
			}
			b.WriteString("```\n")
			if cutDiff > 0 {
				fmt.Fprintf(&b, "_%d more plan line(s) cut to fit a comment; run `fleet-agent plan` for the whole plan._\n", cutDiff)
			}
			b.WriteString("\n")
		}
		b.WriteString(counts + "\n\n")
		if len(blocked) > 0 || cutBlocked > 0 {
			b.WriteString("**Blocked:**\n\n")
			for _, l := range blocked {
				b.WriteString(l + "\n")
			}
			if cutBlocked > 0 {
				fmt.Fprintf(&b, "- _%d more blocked change(s) cut to fit a comment._\n", cutBlocked)
			}
			b.WriteString("\n")
		}
		if p.Policy != nil {
			b.WriteString("**" + p.Policy.Summary() + "**\n\n")
			for _, l := range pol {
				b.WriteString(l + "\n")
			}
			if cutPol > 0 {
				fmt.Fprintf(&b, "- _%d more policy line(s) cut to fit a comment; run `fleet-agent plan --policy FILE`._\n", cutPol)
			}
			if len(pol) > 0 || cutPol > 0 {
				b.WriteString("\n")
			}
		}
		if len(calls) > 0 || cutCalls > 0 {
			fmt.Fprintf(&b, "<details><summary>%d call(s)</summary>\n\n```text\n", len(p.Calls))
			for _, l := range calls {
				b.WriteString(l + "\n")
			}
			b.WriteString("```\n")
			if cutCalls > 0 {
				fmt.Fprintf(&b, "_%d more call(s) cut to fit a comment; run `fleet-agent plan --calls`._\n", cutCalls)
			}
			b.WriteString("</details>\n\n")
		}
		b.WriteString(foot.String())
		return b.String()
	}
	size := func(s string) int { return utf8.RuneCountInString(s) }
	out := build(diff, blocked, calls, 0, 0, 0)
	if size(out) <= o.Limit {
		return out
	}
	// Cut, in order: calls, policy lines, blocked reasons, plan lines. Each step removes
	// just enough lines, from the end, to fit.
	fit := func(lines []string, over int) ([]string, int) {
		cut := 0
		for over > 0 && len(lines) > 0 {
			over -= size(lines[len(lines)-1]) + 1
			lines = lines[:len(lines)-1]
			cut++
		}
		return lines, cut
	}
	slack := 200 // room for the notes of what was cut
	var cutCalls, cutBlocked, cutDiff int
	over := size(out) - o.Limit + slack
	calls, cutCalls = fit(calls, over)
	out = build(diff, blocked, calls, cutDiff, cutBlocked, cutCalls)
	if over = size(out) - o.Limit + slack; over > 0 {
		pol, cutPol = fit(pol, over)
		out = build(diff, blocked, calls, cutDiff, cutBlocked, cutCalls)
	}
	if over = size(out) - o.Limit + slack; over > 0 {
		blocked, cutBlocked = fit(blocked, over)
		out = build(diff, blocked, calls, cutDiff, cutBlocked, cutCalls)
	}
	if over = size(out) - o.Limit + slack; over > 0 {
		diff, cutDiff = fit(diff, over)
		out = build(diff, blocked, calls, cutDiff, cutBlocked, cutCalls)
	}
	return out
}

// Format is an output format of a plan.
type Format string

// The formats: the documented text grammar, the JSON of the reference, and
// the markdown of a pull request comment.
const (
	Text         Format = "text"
	JSON         Format = "json"
	MarkdownText Format = "markdown"
)

// ParseFormat checks a format named on the command line or the socket; ""
// is text.
func ParseFormat(s string) (Format, error) {
	switch Format(s) {
	case "", Text:
		return Text, nil
	case JSON, MarkdownText:
		return Format(s), nil
	}
	return "", fmt.Errorf("the output must be text, json or markdown, got %q", s)
}

// RenderOptions are what the renderers need beside the plan.
type RenderOptions struct {
	// Calls adds the call lines to text.
	Calls bool
	// Markdown says what a markdown rendering is about.
	Markdown MarkdownOptions
}

// Render writes the plan in one format. It is the one place a format is
// chosen: the command line, the local API and the agent's comments all
// render through it.
func (p *Plan) Render(w io.Writer, f Format, o RenderOptions) error {
	switch f {
	case JSON:
		return p.WriteJSON(w)
	case MarkdownText:
		_, err := io.WriteString(w, p.Markdown(o.Markdown))
		return err
	case "", Text:
		return p.WriteText(w, o.Calls)
	}
	return fmt.Errorf("unknown plan format %q", f)
}
