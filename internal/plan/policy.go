package plan

import (
	"fmt"
	"strings"

	"github.com/fleet-agent/fleet-agent/internal/inventory"
)

// PolicyReport is what a policy said of a plan (internal/policy makes it):
// one verdict per rule, in the policy's order. It lives here, beside the
// plan, so that the plan's JSON and text carry it without this package
// knowing the policy language.
type PolicyReport struct {
	// Source says which policy judged the plan (a file, or path@commit).
	Source string `json:"source,omitempty"`
	// Rules are the verdicts, one per rule.
	Rules []RuleVerdict `json:"rules"`
	// Notes are what a reader must know about the policy itself (the last
	// good policy kept, what a proposed policy would say).
	Notes []string `json:"notes,omitempty"`
}

// RuleOutcome is a rule's outcome on a plan.
type RuleOutcome string

// The verdicts: pass when no change broke the rule; otherwise the rule's
// action (deny blocks the apply, warn only says so, approve blocks until an
// approval by one of the rule's approvers).
const (
	VerdictPass    RuleOutcome = "pass"
	VerdictDeny    RuleOutcome = "deny"
	VerdictWarn    RuleOutcome = "warn"
	VerdictApprove RuleOutcome = "approve"
)

// RuleVerdict is one rule's outcome.
type RuleVerdict struct {
	Name    string      `json:"name"`
	Action  string      `json:"action"`
	Verdict RuleOutcome `json:"verdict"`
	// Message is the first offending change's message (with how many more).
	Message string `json:"message,omitempty"`
	// Approvers are who may approve (GitHub logins, org/team slugs).
	Approvers []string `json:"approvers,omitempty"`
	// Approved is who approved, when an approval met the rule.
	Approved string `json:"approved,omitempty"`
	// Matched are the changes that broke the rule.
	Matched []PolicyHit `json:"matched,omitempty"`
}

// PolicyHit is one change that broke a rule, at its place in the document.
type PolicyHit struct {
	Kind    inventory.Kind `json:"kind"`
	Name    string         `json:"name"`
	ID      string         `json:"id"`
	Type    Action         `json:"type"`
	Pointer string         `json:"pointer,omitempty"`
	Line    int            `json:"line,omitempty"`
	Message string         `json:"message"`
}

// Denied reports whether a deny rule was broken.
func (r *PolicyReport) Denied() bool { return r.count(VerdictDeny) > 0 }

// Awaiting are the approve rules broken and not yet approved.
func (r *PolicyReport) Awaiting() []RuleVerdict {
	var out []RuleVerdict
	if r == nil {
		return nil
	}
	for _, v := range r.Rules {
		if v.Verdict == VerdictApprove && v.Approved == "" {
			out = append(out, v)
		}
	}
	return out
}

func (r *PolicyReport) count(v RuleOutcome) int {
	if r == nil {
		return 0
	}
	n := 0
	for _, x := range r.Rules {
		if x.Verdict == v {
			n++
		}
	}
	return n
}

// Passes reports whether nothing blocks: no deny and every approve rule
// approved (warnings do not block).
func (r *PolicyReport) Passes() bool { return !r.Denied() && len(r.Awaiting()) == 0 }

// Summary is one line: "policy: 2 deny, 1 warn, 1 awaiting approval, 3 pass."
func (r *PolicyReport) Summary() string {
	if r == nil {
		return ""
	}
	var parts []string
	add := func(n int, what string) {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, what))
		}
	}
	add(r.count(VerdictDeny), "deny")
	add(r.count(VerdictWarn), "warn")
	approved := r.count(VerdictApprove) - len(r.Awaiting())
	add(len(r.Awaiting()), "awaiting approval")
	add(approved, "approved")
	add(r.count(VerdictPass), "pass")
	if len(parts) == 0 {
		return "policy: no rules."
	}
	return "policy: " + strings.Join(parts, ", ") + "."
}

// Line is a rule's text line: `<verdict> <rule>: <message>`, with who may
// approve an approve rule.
func (v RuleVerdict) Line() string {
	d := v.Detail()
	if d == "" {
		return string(v.Verdict) + " " + v.Name
	}
	return string(v.Verdict) + " " + v.Name + ": " + d
}

// Detail is the message, and who may approve (or approved) an approve rule.
func (v RuleVerdict) Detail() string {
	var b strings.Builder
	b.WriteString(v.Message)
	if v.Verdict == VerdictApprove {
		if v.Approved != "" {
			b.WriteString(" (approved by " + v.Approved + ")")
		} else if len(v.Approvers) > 0 {
			b.WriteString(" (approval by " + strings.Join(v.Approvers, ", ") + ")")
		}
	}
	return strings.TrimSpace(b.String())
}

// HitLine is a matched change's line under its rule.
func (h PolicyHit) HitLine() string {
	where := ""
	if h.Line > 0 {
		where = fmt.Sprintf(" (line %d)", h.Line)
	}
	return fmt.Sprintf("%s %s %s%s: %s", h.Type, h.Kind, h.Name, where, h.Message)
}

// PolicyLines are the text lines of the report: the summary, then each rule
// that did not pass with its matched changes, then the notes.
func (r *PolicyReport) PolicyLines() []string {
	if r == nil {
		return nil
	}
	lines := []string{r.Summary()}
	for _, v := range r.Rules {
		if v.Verdict == VerdictPass {
			continue
		}
		lines = append(lines, "  "+v.Line())
		for _, h := range v.Matched {
			lines = append(lines, "    "+h.HitLine())
		}
	}
	for _, n := range r.Notes {
		lines = append(lines, "  note: "+n)
	}
	return lines
}

// MarkdownLines are the report in a comment: each rule that did not pass,
// its matched changes beneath it, then the notes. What the policy wrote
// (names, messages, notes) is text, never markup (EscapeMarkdown).
func (r *PolicyReport) MarkdownLines() []string {
	if r == nil {
		return nil
	}
	var lines []string
	for _, v := range r.Rules {
		if v.Verdict == VerdictPass {
			continue
		}
		lines = append(lines, "- **"+string(v.Verdict)+"** "+codeText(v.Name)+": "+EscapeMarkdown(v.Detail()))
		for _, h := range v.Matched {
			lines = append(lines, "  - "+codeText(string(h.Type)+" "+string(h.Kind)+" "+h.Name)+lineOf(h)+": "+EscapeMarkdown(h.Message))
		}
	}
	for _, n := range r.Notes {
		lines = append(lines, "- _"+EscapeMarkdown(n)+"_")
	}
	return lines
}

func lineOf(h PolicyHit) string {
	if h.Line > 0 {
		return fmt.Sprintf(" (line %d)", h.Line)
	}
	return ""
}
