package agent

import (
	"fmt"
	"strings"

	"github.com/fleet-agent/fleet-agent/internal/annotation"
	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/outbox"
	"github.com/fleet-agent/fleet-agent/internal/plan"
)

// Check runs (Config.Checks: GitHub App credentials). Every commit status
// the agent queues gets a check run of the same context beside it, with the
// conclusion the status has, the status description as its title and, as
// its summary, the comment of its kind queued with it (the same cut as the
// comment: a comment's limit is below a summary's) or else the description. The plan
// check run of a head also carries annotations on the document's lines: each
// validation error at the place of its pointer, each blocked change at its
// object. The status stays: a user token's agent posts only it, and branch
// protection that requires fleet-agent/plan is met by either.

// MaxAnnotations caps the annotations of one check run: GitHub takes 50 a
// request, and a reviewer reads the first few hundred at most; the summary
// says how many were left out.
const MaxAnnotations = 200

// withChecks adds to posts, when check runs are on, a check run for every
// status that has none of its own context in posts.
func (a *Agent) withChecks(posts []outbox.Post) []outbox.Post {
	if !a.cfg.Checks {
		return posts
	}
	has := map[string]bool{}
	for _, p := range posts {
		if p.Kind == outbox.KindCheck {
			has[p.SHA+"\x00"+p.Context] = true
		}
	}
	out := posts
	for _, p := range posts {
		if p.Kind != outbox.KindStatus || has[p.SHA+"\x00"+p.Context] {
			continue
		}
		summary := p.Description
		for _, c := range posts {
			if (c.Kind == outbox.KindSticky || c.Kind == outbox.KindOnce) && strings.HasPrefix(c.Marker, a.commentPrefixOf(p.Context)) {
				summary = c.Body
				break
			}
		}
		out = append(out, outbox.Check(p.SHA, p.Context, p.State, p.Description, summary, nil))
	}
	return out
}

// commentPrefixOf is the start of the markers of the comments that explain
// a status of context: the plan comment for plan, the drift comment for
// drift, the result comment for apply. Another comment queued with it (the
// result queued with a drift success after an apply) is not its summary.
func (a *Agent) commentPrefixOf(context string) string {
	kind := map[string]string{"plan": commentPlan, "apply": commentResult, "drift": commentDrift}[context]
	if kind == "" {
		return "\x00" // no comment explains it
	}
	return "<!-- " + a.cfg.Prefix + ":" + kind
}

// planCheck is the plan check run of a head: status's state and
// description, the comment as its summary, and annotations.
func planCheck(status, comment outbox.Post, anns []annotation.Annotation) outbox.Post {
	summary := comment.Body
	if len(anns) > MaxAnnotations {
		summary += fmt.Sprintf("\n_%d more annotation(s) not shown on the lines; the list above has them all._\n", len(anns)-MaxAnnotations)
		anns = anns[:MaxAnnotations]
	}
	return outbox.Check(status.SHA, status.Context, status.State, status.Description, summary, anns)
}

// errorAnnotations puts every validation error on its line; an error about
// no place in the text (the count of errors not shown) has none.
func (a *Agent) errorAnnotations(errs fleet.Errors) []annotation.Annotation {
	var out []annotation.Annotation
	for _, e := range errs {
		if e.IsZero() {
			continue
		}
		title := "invalid document"
		if e.Path != "" {
			title = e.Path
		}
		out = append(out, annotation.Annotation{Path: a.cfg.Path, Line: e.Line, Column: e.Column, Level: annotation.Failure,
			Title: title, Message: e.Message})
	}
	return out
}

// blockedAnnotations puts every blocked change on the line of the object of
// the document it blocks, found through the parser's own offsets
// (fleet.Locate). A change with no object in the document (a blocked
// delete) is in the summary only.
func (a *Agent) blockedAnnotations(data []byte, doc *fleet.Document, p *plan.Plan) []annotation.Annotation {
	if !p.Blocked() {
		return nil
	}
	loc := fleet.Locate(data)
	var out []annotation.Annotation
	for _, c := range p.Changes {
		if c.Blocked == "" {
			continue
		}
		ptr, ok := objectPointer(doc, c.Kind, c.Name)
		if !ok {
			continue
		}
		pos, ok := loc.Value(ptr)
		if !ok {
			continue
		}
		out = append(out, annotation.Annotation{Path: a.cfg.Path, Line: pos.Line, Column: pos.Column, Level: annotation.Failure,
			Title: fmt.Sprintf("blocked: %s %s", c.Kind, c.Name), Message: c.Blocked})
	}
	return out
}

// objectPointer is the JSON Pointer of the document's object a change of
// kind and name is about (the names as inventory spells them).
func objectPointer(doc *fleet.Document, kind inventory.Kind, name string) (string, bool) {
	find := func(list string, n int, match func(i int) bool) (string, bool) {
		for i := range n {
			if match(i) {
				return fmt.Sprintf("/%s/%d", list, i), true
			}
		}
		return "", false
	}
	switch kind {
	case inventory.Site:
		return find("sites", len(doc.Sites), func(i int) bool { return doc.Sites[i].Name == name })
	case inventory.ProviderAccount:
		return find("providerAccounts", len(doc.ProviderAccounts), func(i int) bool { return doc.ProviderAccounts[i].Name == name })
	case inventory.Pool:
		return find("pools", len(doc.Pools), func(i int) bool { return doc.Pools[i].Name == name })
	case inventory.Flavor:
		return find("flavors", len(doc.Flavors), func(i int) bool {
			return inventory.FlavorName(doc.Flavors[i].Pool, doc.Flavors[i].Name) == name
		})
	case inventory.SandboxTemplate:
		return find("sandboxTemplates", len(doc.SandboxTemplates), func(i int) bool { return doc.SandboxTemplates[i].Name == name })
	case inventory.Offer:
		for i, pool := range doc.Pools {
			for j, o := range pool.Offers {
				if inventory.OfferName(pool.Name, o.Tenant) == name {
					return fmt.Sprintf("/pools/%d/offers/%d", i, j), true
				}
			}
		}
	case inventory.OwnerQuota:
		for i, pool := range doc.Pools {
			for res := range pool.OwnerQuota {
				if inventory.OwnerQuotaName(pool.Name, res) == name {
					return fmt.Sprintf("/pools/%d/ownerQuota/%s", i, strings.ReplaceAll(strings.ReplaceAll(res, "~", "~0"), "/", "~1")), true
				}
			}
		}
	}
	return "", false
}
