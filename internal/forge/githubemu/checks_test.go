package githubemu

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-github/v62/github"
	"gopkg.in/yaml.v3"
)

// dig walks a YAML tree by keys.
func dig(t *testing.T, v any, keys ...string) any {
	t.Helper()
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("no %q in %v", k, keys)
		}
		v = m[k]
	}
	return v
}

func strs(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}

// TestCheckRunLimitsFollowTheDescription: the limits and lists the emulator
// enforces are the ones GitHub's REST description gives (checks.yaml).
func TestCheckRunLimitsFollowTheDescription(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "restapi", "checks.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	create := dig(t, doc, "paths", "/repos/{owner}/{repo}/check-runs", "post", "requestBody", "content", "application/json", "schema")
	props := dig(t, create, "properties")
	output := dig(t, props, "output")
	ann := dig(t, output, "properties", "annotations")
	checks := []struct {
		what      string
		got, want any
	}{
		{"annotations maxItems", dig(t, ann, "maxItems"), MaxAnnotationsPerRequest},
		{"summary maxLength", dig(t, output, "properties", "summary", "maxLength"), maxOutputChars},
		{"text maxLength", dig(t, output, "properties", "text", "maxLength"), maxOutputChars},
		{"annotation required", strs(dig(t, ann, "items", "required")), annotationRequired},
		{"annotation levels", strs(dig(t, ann, "items", "properties", "annotation_level", "enum")), annotationLevels},
		{"conclusions but stale", slices.DeleteFunc(strs(dig(t, props, "conclusion", "enum")), func(s string) bool { return s == "stale" }), conclusions},
		{"create required", strs(dig(t, create, "required")), []string{"name", "head_sha"}},
		{"output required", strs(dig(t, output, "required")), []string{"title", "summary"}},
	}
	for _, c := range checks {
		if !equalAny(c.got, c.want) {
			t.Errorf("%s: description %v, emulator %v", c.what, c.got, c.want)
		}
	}
	// Limits the description gives only in prose.
	prose := strings.Join(strings.Fields(string(b)), " ")
	for _, s := range []string{"The maximum size is 255 characters.", "The maximum size is 64 KB.", "maximum of 50 per API request"} {
		if !strings.Contains(prose, s) {
			t.Errorf("the description no longer says %q", s)
		}
	}
}

func equalAny(a, b any) bool {
	switch x := a.(type) {
	case []string:
		return slices.Equal(x, b.([]string))
	case int:
		return x == b.(int)
	}
	return false
}

func annotations(n, line int) []*github.CheckRunAnnotation {
	out := make([]*github.CheckRunAnnotation, n)
	for i := range out {
		out[i] = &github.CheckRunAnnotation{Path: github.String("fleet.json"), StartLine: github.Int(line + i), EndLine: github.Int(line + i),
			AnnotationLevel: github.String("failure"), Message: github.String("bad")}
	}
	return out
}

func TestCheckRuns(t *testing.T) {
	s, repo, userClient, _ := setup(t, Options{})
	s.AddInstallationToken("app-token", "fleet-agent")
	app := client(t, s, "app-token")
	repo.AddCommit(sha(1))
	ctx := t.Context()

	// A user token may not use the Checks API.
	_, _, err := userClient.Checks.CreateCheckRun(ctx, "acme", "fleet", github.CreateCheckRunOptions{Name: "x", HeadSHA: sha(1)})
	var er *github.ErrorResponse
	if !errors.As(err, &er) || er.Response.StatusCode != 403 || er.Message != "You must authenticate via a GitHub App." {
		t.Fatalf("user token: %v", err)
	}

	run, _, err := app.Checks.CreateCheckRun(ctx, "acme", "fleet", github.CreateCheckRunOptions{
		Name: "fleet-agent/plan", HeadSHA: sha(1), Conclusion: github.String("failure"),
		Output: &github.CheckRunOutput{Title: github.String("invalid"), Summary: github.String("s"), Annotations: annotations(50, 1)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if run.GetStatus() != "completed" || run.GetConclusion() != "failure" || run.GetOutput().GetAnnotationsCount() != 50 || run.GetApp().GetSlug() != "fleet-agent" {
		t.Errorf("created %+v", run)
	}
	// Updates append annotations.
	run, _, err = app.Checks.UpdateCheckRun(ctx, "acme", "fleet", run.GetID(), github.UpdateCheckRunOptions{
		Name:   "fleet-agent/plan",
		Output: &github.CheckRunOutput{Title: github.String("invalid"), Summary: github.String("s"), Annotations: annotations(3, 51)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if run.GetOutput().GetAnnotationsCount() != 53 {
		t.Errorf("the update answered %d annotations, want 53", run.GetOutput().GetAnnotationsCount())
	}
	if got := repo.CheckRuns(sha(1)); len(got) != 1 || len(got[0].Annotations) != 53 || got[0].Requests != 2 || got[0].Annotations[52].StartLine != 53 {
		t.Errorf("after update %+v", got)
	}

	refused := []struct {
		name    string
		opts    github.CreateCheckRunOptions
		code    int
		message string
	}{
		{"51 annotations", github.CreateCheckRunOptions{Name: "n", HeadSHA: sha(1),
			Output: &github.CheckRunOutput{Title: github.String("t"), Summary: github.String("s"), Annotations: annotations(51, 1)}},
			422, "Invalid request.\n\nNo more than 50 items are allowed; 51 were supplied."},
		{"annotation without its fields", github.CreateCheckRunOptions{Name: "n", HeadSHA: sha(1),
			Output: &github.CheckRunOutput{Title: github.String("t"), Summary: github.String("s"), Annotations: []*github.CheckRunAnnotation{{Path: github.String("f")}}}},
			422, "Invalid request.\n\n\"start_line\", \"end_line\", \"annotation_level\", \"message\" weren't supplied."},
		{"output without a summary", github.CreateCheckRunOptions{Name: "n", HeadSHA: sha(1),
			Output: &github.CheckRunOutput{Title: github.String("t")}},
			422, "Invalid request.\n\n\"summary\" wasn't supplied."},
		{"columns across lines", github.CreateCheckRunOptions{Name: "n", HeadSHA: sha(1),
			Output: &github.CheckRunOutput{Title: github.String("t"), Summary: github.String("s"), Annotations: []*github.CheckRunAnnotation{{
				Path: github.String("f"), StartLine: github.Int(1), EndLine: github.Int(2), StartColumn: github.Int(3),
				AnnotationLevel: github.String("failure"), Message: github.String("m")}}}},
			422, "Validation Failed"},
		{"summary too long", github.CreateCheckRunOptions{Name: "n", HeadSHA: sha(1),
			Output: &github.CheckRunOutput{Title: github.String("t"), Summary: github.String(strings.Repeat("é", maxOutputChars+1))}},
			422, "Invalid request.\n\nsummary is too long (maximum is 65535 characters)."},
		{"completed without a conclusion", github.CreateCheckRunOptions{Name: "n", HeadSHA: sha(1), Status: github.String("completed")},
			422, "Validation Failed"},
		{"stale", github.CreateCheckRunOptions{Name: "n", HeadSHA: sha(1), Conclusion: github.String("stale")},
			422, "Validation Failed"},
		{"unknown commit", github.CreateCheckRunOptions{Name: "n", HeadSHA: sha(2)},
			422, "No commit found for SHA: " + sha(2)},
	}
	for _, c := range refused {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := app.Checks.CreateCheckRun(ctx, "acme", "fleet", c.opts)
			var er *github.ErrorResponse
			if !errors.As(err, &er) || er.Response.StatusCode != c.code || er.Message != c.message {
				t.Errorf("got %v, want %d %q", err, c.code, c.message)
			}
		})
	}
	// A summary of exactly the limit in code points is accepted.
	if _, _, err := app.Checks.CreateCheckRun(ctx, "acme", "fleet", github.CreateCheckRunOptions{Name: "n", HeadSHA: sha(1),
		Output: &github.CheckRunOutput{Title: github.String("t"), Summary: github.String(strings.Repeat("é", maxOutputChars))}}); err != nil {
		t.Error(err)
	}
	if n := len(repo.CheckRuns(sha(1))); n != 2 {
		t.Errorf("%d check runs, want 2 (refusals make none)", n)
	}
}
