package agent

import (
	"bytes"

	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

// render renders a plan for the local API.
func render(p *plan.Plan, output string, calls bool, head, branch string) (string, error) {
	var b bytes.Buffer
	switch output {
	case "", "text":
		if err := p.WriteText(&b, calls); err != nil {
			return "", err
		}
	case "json":
		if err := p.WriteJSON(&b); err != nil {
			return "", err
		}
	case "markdown":
		b.WriteString(p.Markdown(plan.MarkdownOptions{Head: head, Branch: branch}))
	default:
		return "", refusal.New(refusal.InvalidInput, "output must be text, json or markdown, got %q", output)
	}
	return b.String(), nil
}
