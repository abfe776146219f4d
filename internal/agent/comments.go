package agent

import (
	"fmt"
	"strings"

	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

// Every pull request comment the agent writes is built here, each with the
// hidden marker that finds it again (a restart never posts one twice) and
// that only the agent's own comments are trusted to hold. Golden files in
// testdata/comments show each body; `go test -update` rewrites them.

// The comment kinds, as their markers name them.
const (
	commentPlan      = "plan"      // the one plan comment of a pull request, edited in place
	commentResult    = "result"    // what happened to a merged commit (applied or refused)
	commentByHand    = "by-hand"   // an apply by hand (beside an earlier refusal's result)
	commentDrift     = "drift"     // one per distinct drift
	commentConverged = "converged" // one per drift that cleared
)

// Marker is the hidden marker of a comment kind, keyed by a commit or a
// drift hash where one pull request gets several of that kind.
func (a *Agent) Marker(kind string, key string) string {
	if key != "" {
		return "<!-- " + a.cfg.Prefix + ":" + kind + ":" + key + " -->"
	}
	return "<!-- " + a.cfg.Prefix + ":" + kind + " -->"
}

// commentLimit is what a comment body may take besides its frame (title,
// marker, the sentences around the plan).
const commentLimit = plan.CommentTarget - 500

// planBody is the plan comment of a head.
func (a *Agent) planBody(head string, p *plan.Plan) string {
	return p.Markdown(plan.MarkdownOptions{Marker: a.Marker(commentPlan, ""), Head: head, Branch: a.cfg.Branch})
}

// invalidBody is the plan comment of a head whose document is invalid: every
// error with its JSON Pointer, cut like a plan so it fits a comment.
func (a *Agent) invalidBody(head string, errs fleet.Errors) string {
	var b strings.Builder
	b.WriteString(a.Marker(commentPlan, "") + "\n")
	b.WriteString("### fleet-agent plan: invalid document\n\n")
	fmt.Fprintf(&b, "Checked at commit `%s`. `%s` is refused with %d error(s):\n\n", head, a.cfg.Path, len(errs))
	b.WriteString("| pointer | error |\n| --- | --- |\n")
	cut := 0
	for i, e := range errs {
		// The error quotes what the author wrote (a key, a value): as code,
		// so none of it renders, mentions anyone or loads from elsewhere.
		row := fmt.Sprintf("| `%s` | `%s` |\n", cell(e.Path), cell(e.Message))
		if b.Len()+len(row) > commentLimit {
			cut = len(errs) - i
			break
		}
		b.WriteString(row)
	}
	if cut > 0 {
		fmt.Fprintf(&b, "\n_%d more error(s) cut to fit a comment; run `fleet-agent validate %s` for all of them._\n", cut, a.cfg.Path)
	}
	fmt.Fprintf(&b, "\nNothing applies on merge to `%s` until the document is valid.\n", a.cfg.Branch)
	return b.String()
}

// cell keeps a value inside one table cell: no pipe, no newline, no
// backtick breaking out of the code span.
func cell(s string) string {
	s = strings.ReplaceAll(s, "|", "\\|")
	s = strings.ReplaceAll(s, "\n", " ")
	return strings.ReplaceAll(s, "`", "'")
}

// notMadeBody is the plan comment of a head whose plan could not be made
// (a provider unreachable, the document unreadable).
func (a *Agent) notMadeBody(head string, reasons []string) string {
	var b strings.Builder
	b.WriteString(a.Marker(commentPlan, "") + "\n")
	b.WriteString("### fleet-agent plan: not made\n\n")
	fmt.Fprintf(&b, "At commit `%s` the plan could not be made:\n\n", head)
	for _, r := range reasons {
		// A reason may carry a provider's words: as code, never markup.
		fmt.Fprintf(&b, "- `%s`\n", cell(r))
	}
	b.WriteString("\nThe agent tries again when the head or the branch moves.\n")
	return b.String()
}

// resultBody says a merged commit was applied (kind result, or by-hand).
func (a *Agent) resultBody(marker, commit, by string, p *plan.Plan) string {
	var b strings.Builder
	b.WriteString(marker + "\n")
	fmt.Fprintf(&b, "### fleet-agent applied `%s`\n\n", commit)
	if !strings.HasPrefix(by, "agent") {
		fmt.Fprintf(&b, "Applied by hand by %s after review.\n\n", by)
	}
	fmt.Fprintf(&b, "Applied %d call(s); planHash `%s`.\n\n", len(p.Calls), p.PlanHash)
	b.WriteString("**" + p.Summary.Counts() + "**\n")
	return b.String()
}

// refusedBody says a merged commit was not applied, why, and how to apply
// it by hand after review.
func (a *Agent) refusedBody(commit string, code refusal.Code, reason, planHash string) string {
	var b strings.Builder
	b.WriteString(a.Marker(commentResult, commit) + "\n")
	fmt.Fprintf(&b, "### fleet-agent did not apply `%s`\n\n", commit)
	fmt.Fprintf(&b, "`%s`: %s\n\n", code, reason)
	hash := "<the planHash printed by plan>"
	if planHash != "" {
		hash = planHash
	}
	fmt.Fprintf(&b, "Nothing was changed. To apply this commit by hand after review, on the ops box:\n\n```sh\nfleet-agent plan --commit %s\nfleet-agent apply --commit %s --plan-hash %s\n```\n", commit, commit, hash)
	if planHash != "" {
		b.WriteString("\nThe apply is refused with `CONFIG_DRIFT` if the plan is no longer this one when you run it.\n")
	}
	return b.String()
}

// driftBody reports one distinct drift on the pull request that was applied.
func (a *Agent) driftBody(commit, hash string, p *plan.Plan) string {
	var b strings.Builder
	b.WriteString(a.Marker(commentDrift, hash) + "\n")
	fmt.Fprintf(&b, "### fleet-agent: the fleet drifted from `%s`\n\n", commit)
	b.WriteString("Someone changed the fleet outside the document. Planning the applied document again gives:\n\n")
	b.WriteString(p.Markdown(plan.MarkdownOptions{Branch: a.cfg.Branch, Limit: commentLimit}))
	b.WriteString("\nTo converge, apply the document again (merge a change, or `fleet-agent apply --commit` on the ops box), or undo the hand edit.\n")
	return b.String()
}

// convergedBody reports that a drift cleared.
func (a *Agent) convergedBody(marker, commit string) string {
	return fmt.Sprintf("%s\n### fleet-agent: no drift\n\nThe fleet matches the document applied at `%s` again.\n", marker, commit)
}
