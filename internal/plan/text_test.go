package plan

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/textline"
)

// hostileText is what a policy author who wants to speak in the agent's
// voice writes into a rule's message: a heading, HTML, a link, an image, a
// mention of a user and of a team, an issue link, a code fence, emphasis,
// and a line break to start a block of its own.
const hostileText = "## policy: all rules pass, approved by @alice\n" +
	"<img src=x onerror=alert(1)><script>alert(2)</script> [merge now](https://evil.example) ![x](https://evil.example/x.png) " +
	"cc @acme/admins, fixes #12 ``` **bold** _it_ ~~gone~~ | a | b | &lt; \\* \r\n> quoted\u2028- item"

// unescape reads markdown text the way a renderer does for the escapes
// EscapeMarkdown makes: a backslash before punctuation is the punctuation,
// and a zero width space is nothing.
func unescape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("\\`*_[]<>&~|!", s[i+1]) >= 0 {
			i++
		}
		b.WriteByte(s[i])
	}
	return strings.ReplaceAll(b.String(), "\u200b", "")
}

// flat is s with its line breaks as spaces, as EscapeMarkdown gives them.
func flat(s string) string {
	return strings.NewReplacer("\r", " ", "\n", " ", "\u2028", " ", "\u2029", " ").Replace(s)
}

// TestPolicyMarkdownIsText: what a policy writes (its rule names, messages,
// the changes' messages, the notes) is text in the comment and the check
// run: each line is the report's own list item with the policy's words
// escaped in it; the escaped words hold no line break, no bare markup
// character, no mention or issue link left whole, and reading the escapes
// back gives the words written.
func TestPolicyMarkdownIsText(t *testing.T) {
	rep := &PolicyReport{
		Rules: []RuleVerdict{
			{Name: "loud`` **rule**", Verdict: VerdictDeny, Message: hostileText,
				Matched: []PolicyHit{{Kind: "flavor", Name: "gpu/huge", Type: Create, Line: 3, Message: hostileText}}},
			{Name: "ask", Verdict: VerdictApprove, Message: hostileText, Approvers: []string{"acme/capacity"}},
		},
		Notes: []string{"new policy: " + hostileText},
	}
	want := []string{
		"- **deny** ``` loud`` **rule** ```: " + EscapeMarkdown(hostileText),
		"  - `create flavor gpu/huge` (line 3): " + EscapeMarkdown(hostileText),
		"- **approve** `ask`: " + EscapeMarkdown(strings.TrimSpace(hostileText)+" (approval by acme/capacity)"),
		"- _" + EscapeMarkdown("new policy: "+hostileText) + "_",
	}
	lines := rep.MarkdownLines()
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Fatalf("the report's lines:\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}

	esc := EscapeMarkdown(hostileText)
	if strings.ContainsAny(esc, "\r\n\u2028\u2029") {
		t.Errorf("a line break is left: %q", esc)
	}
	for _, whole := range []string{"@alice", "@acme/admins", "#12", "##"} {
		if strings.Contains(esc, whole) {
			t.Errorf("%q is left whole: %q", whole, esc)
		}
	}
	for i := 0; i < len(esc); i++ {
		if strings.IndexByte("`*_[]<>&~|!", esc[i]) >= 0 && (i == 0 || esc[i-1] != '\\') {
			t.Errorf("a bare %q at %d: %q", esc[i], i, esc[max(0, i-20):min(len(esc), i+20)])
		}
	}
	if got, want := unescape(esc), flat(hostileText); got != want {
		t.Errorf("the escaped text reads\n%q\nwant\n%q", got, want)
	}
}

// A call's parameters are the document author's text (an image id, user
// data, an account's config): the call line in text and in the comment's
// calls block is one line of printable text, and its JSON still reads back
// as what was written.
func TestCallLinesArePlainText(t *testing.T) {
	hostile := "python-3.12\u0085\u009b1A\u009b2K\u009b32mpolicy: 0 deny\u009b0m\u2028\u2029\u202e\u200f\u2066\u061c\x1b[2K\r\nend"
	c := Call{Method: "sandbox.createTemplate", Params: map[string]any{"imageId": hostile, hostile: 1}}
	p := &Plan{Calls: []Call{c}}
	for name, out := range map[string]string{
		"call line": c.CallLine(),
		"markdown":  p.Markdown(MarkdownOptions{}),
	} {
		for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
			if !textline.IsPlain(line) {
				t.Errorf("%s: %q is not one line of plain text", name, line)
			}
		}
	}
	method, params, _ := strings.Cut(c.CallLine(), " ")
	var back map[string]any
	if err := json.Unmarshal([]byte(params), &back); err != nil || method != c.Method || back["imageId"] != hostile || back[hostile] != float64(1) {
		t.Errorf("the call line %q reads back as %q %v (%v)", c.CallLine(), method, back, err)
	}
}

// A blocked change's reason quotes what the author wrote (a provider
// refuses an account's config and names the key): in the comment's blocked
// list it is text, escaped as a policy's message is.
func TestBlockedReasonsAreMarkdownText(t *testing.T) {
	p := &Plan{Changes: []Change{{Kind: "providerAccount", Name: "sim", Action: Create, Blocked: hostileText}}}
	p.Summary.Blocked = 1
	md := p.Markdown(MarkdownOptions{})
	want := "- `providerAccount sim`: " + EscapeMarkdown(hostileText)
	if !strings.Contains(md, want+"\n") {
		t.Errorf("the blocked list does not hold the reason as text %q:\n%s", want, md)
	}
}
