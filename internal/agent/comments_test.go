package agent

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/testutil/golden"
)

const commentsDir = "../../testdata/comments"

// head is the commit every golden comment is about.
const head = "0123456789abcdef0123456789abcdef01234567"

// nonASCII: names are ASCII by the schema; free-form values, an adopted
// cluster id and so the blocked reason that quotes it are not.
const nonASCII = `{"version":1,
 "sites":[{"name":"zurich-1","kind":"shared","region":"eu-central"}],
 "providerAccounts":[{"name":"k8s","provider":"fake","config":{"label":"Größe → naïve"}}],
 "pools":[
  {"name":"gpu","site":"zurich-1","class":"metal-host","policy":{"comment":"日本語のプール -> ok"},
   "offers":[{"tenant":"ACME.eu","quota":{"gpu":2}}]},
  {"name":"k1","site":"zurich-1","class":"metal-host","policy":{"substrate":{"kind":"kubernetes","account":"k8s","cluster":{"adopt":"集群/ü-1"},"flavors":[{"name":"n1","machineType":"m1"}]}}},
  {"name":"k2","site":"zurich-1","class":"metal-host","policy":{"substrate":{"kind":"kubernetes","account":"k8s","cluster":{"adopt":"集群/ü-1"},"flavors":[{"name":"n1","machineType":"m1"}]}}}]}`

// big makes a document whose plan does not fit one comment.
func big(pools int) string {
	var b strings.Builder
	b.WriteString(`{"version":1,"sites":[{"name":"fra","kind":"shared","region":"eu"}],"pools":[`)
	for i := range pools {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"name":"pool-%04d-with-a-rather-long-name-for-the-cut","site":"fra","class":"vps-host","gpuModel":"H100","ownerQuota":{"gpu":%d,"vcpu":%d}}`, i, i+1, i+2)
	}
	b.WriteString("]}")
	return b.String()
}

func planOf(t *testing.T, doc string) *plan.Plan {
	t.Helper()
	d, errs := fleet.Validate("fleet.json", []byte(doc))
	if errs != nil {
		t.Fatalf("test document: %v", errs)
	}
	p, err := plan.For(context.Background(), d, nil, nil, plan.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCommentBodies(t *testing.T) {
	a := &Agent{cfg: Config{Prefix: "fleet-agent", Branch: "main", Path: "fleet.json"}}
	_, invalid := fleet.Validate("fleet.json", []byte(`{"version":1,"pools":[{"name":"p","site":"s","class":"vps-host","priority":5000,"Größe":1,"ownerQuota":{"":1}}]}`))
	if invalid == nil {
		t.Fatal("the invalid document validates")
	}
	cut := planOf(t, big(600))
	bodies := []struct {
		name string
		body string
	}{
		{"plan", a.planBody(head, planOf(t, nonASCII))},
		{"plan-cut", a.planBody(head, cut)},
		{"invalid", a.invalidBody(head, invalid)},
		{"not-made", a.notMadeBody(head, []string{"UNAVAILABLE: a provider could not be reached; the plan was not made (try again, or plan with --offline)"})},
		{"result", a.resultBody(a.Marker(commentResult, head), head, "agent (#7 by alice)", planOf(t, nonASCII))},
		{"result-by-hand", a.resultBody(a.Marker(commentByHand, head), head, "ops@box", planOf(t, nonASCII))},
		{"refused", a.refusedBody(head, refusal.InvalidState, "the plan changed since review: #7 was reviewed with plan 0123456789ab, the merged commit plans ba9876543210 (main moved, or the fleet changed); re-run the plan on a new pull request", "")},
		{"drift", a.driftBody(head, "d1f7", planOf(t, nonASCII))},
		{"drift-cut", a.driftBody(head, "d2f7", cut)},
		{"converged", a.convergedBody(a.Marker(commentConverged, "d1f7"), head)},
	}
	markers := map[string]string{
		"plan": "<!-- fleet-agent:plan -->", "plan-cut": "<!-- fleet-agent:plan -->", "invalid": "<!-- fleet-agent:plan -->", "not-made": "<!-- fleet-agent:plan -->",
		"result": "<!-- fleet-agent:result:" + head + " -->", "result-by-hand": "<!-- fleet-agent:by-hand:" + head + " -->",
		"refused": "<!-- fleet-agent:result:" + head + " -->", "drift": "<!-- fleet-agent:drift:d1f7 -->", "drift-cut": "<!-- fleet-agent:drift:d2f7 -->",
		"converged": "<!-- fleet-agent:converged:d1f7 -->",
	}
	for _, b := range bodies {
		t.Run(b.name, func(t *testing.T) {
			if !strings.HasPrefix(b.body, markers[b.name]+"\n") {
				t.Errorf("the body does not start with its marker %s:\n%s", markers[b.name], b.body)
			}
			if n := utf8.RuneCountInString(b.body); n > plan.CommentLimit {
				t.Errorf("%d code points: over GitHub's limit of %d", n, plan.CommentLimit)
			}
			if strings.Count(b.body, "```")%2 != 0 {
				t.Errorf("an open code fence:\n%s", b.body)
			}
			golden.Check(t, filepath.Join(commentsDir, b.name+".md"), []byte(b.body))
		})
	}
	// The cut comments say what they cut and keep the counts and the hash.
	for _, name := range []string{"plan-cut", "drift-cut"} {
		for _, b := range bodies {
			if b.name != name {
				continue
			}
			if !strings.Contains(b.body, "cut to fit a comment") || !strings.Contains(b.body, cut.Summary.Counts()) || !strings.Contains(b.body, cut.PlanHash) {
				t.Errorf("%s lost what a cut keeps", name)
			}
		}
	}
}

func TestMarkerUsesThePrefix(t *testing.T) {
	a := &Agent{cfg: Config{Prefix: "fleet-agent-eu"}}
	if got := a.Marker(commentPlan, ""); got != "<!-- fleet-agent-eu:plan -->" {
		t.Fatal(got)
	}
	if got := a.Marker(commentDrift, "abc"); got != "<!-- fleet-agent-eu:drift:abc -->" {
		t.Fatal(got)
	}
}

// TestInvalidBodyQuotesTheDocumentAsText: an invalid document's errors
// quote what the author wrote (an unknown key, here a team mention, an
// image and a link); the comment shows them as code, so nothing of it
// renders as markdown or HTML, notifies, or loads from elsewhere, under
// the bot's name.
func TestInvalidBodyQuotesTheDocumentAsText(t *testing.T) {
	a := &Agent{cfg: Config{Prefix: "fleet-agent", Branch: "main", Path: "fleet.json"}}
	key := `@acme/sre ![x](http://evil.example/t.png) <a href=http://evil.example>fix</a> [click](http://evil.example/)`
	_, invalid := fleet.Validate("fleet.json", []byte(`{"version":1,"pools":[{"name":"p","site":"s","class":"vps-host",`+strconv.Quote(key)+`:1}]}`))
	if invalid == nil {
		t.Fatal("the invalid document validates")
	}
	body := a.invalidBody(head, invalid)
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		// Every cell of an error row is one code span.
		for _, c := range strings.Split(strings.Trim(line, "|"), " | ") {
			c = strings.TrimSpace(c)
			if !strings.HasPrefix(c, "`") || !strings.HasSuffix(c, "`") || strings.Count(c, "`") != 2 {
				t.Fatalf("a cell outside a code span: %q in\n%s", c, body)
			}
		}
	}
	if !strings.Contains(body, "@acme/sre") {
		t.Fatalf("the error does not quote the key:\n%s", body)
	}
	notMade := a.notMadeBody(head, []string{"UNAVAILABLE: " + key})
	if !strings.Contains(notMade, "- `UNAVAILABLE: @acme/sre") {
		t.Fatalf("a reason not quoted as code:\n%s", notMade)
	}
}
