package githubemu

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// description is the part of GitHub's REST description kept in
// testdata/restapi: the operations (paths.yaml) and the schemas of their
// answers (schemas.yaml).
type description struct {
	paths   map[string]any
	schemas map[string]any
	// skipped are the $refs to schemas not kept, which are not checked.
	skipped map[string]bool
}

func loadDescription(t *testing.T) *description {
	t.Helper()
	read := func(name string) map[string]any {
		b, err := os.ReadFile(filepath.Join("testdata", "restapi", name))
		if err != nil {
			t.Fatal(err)
		}
		var v map[string]any
		if err := yaml.Unmarshal(b, &v); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return v
	}
	return &description{
		paths:   read("paths.yaml")["paths"].(map[string]any),
		schemas: read("schemas.yaml")["components"].(map[string]any)["schemas"].(map[string]any),
		skipped: map[string]bool{},
	}
}

// response is the schema of the answer code of operation method path, and
// whether the description lists that code at all.
func (d *description) response(t *testing.T, path, method string, code int) (map[string]any, bool) {
	t.Helper()
	op, ok := d.paths[path].(map[string]any)[method].(map[string]any)
	if !ok {
		t.Fatalf("no %s %s kept", method, path)
	}
	r, ok := op["responses"].(map[string]any)[strconv.Itoa(code)].(map[string]any)
	if !ok {
		return nil, false
	}
	if ref, _ := r["$ref"].(string); ref == "#/components/responses/validation_failed" {
		// The response kept in paths.yaml for add-collaborator spells it
		// out: "validation failed, or the endpoint has been spammed",
		// schema validation-error.
		return map[string]any{"$ref": "#/components/schemas/validation-error"}, true
	}
	content, _ := r["content"].(map[string]any)
	js, _ := content["application/json"].(map[string]any)
	schema, _ := js["schema"].(map[string]any)
	return schema, true
}

// check lists where v breaks schema (types, required, nullable, enum,
// items, properties, oneOf/anyOf).
func (d *description) check(v any, schema map[string]any, at string) []string {
	if ref, ok := schema["$ref"].(string); ok {
		name := strings.TrimPrefix(ref, "#/components/schemas/")
		if name == "nullable-simple-user" {
			// Not kept: the description defines it as simple-user that
			// may be null (its title is Simple User).
			if v == nil {
				return nil
			}
			name = "simple-user"
		}
		s, kept := d.schemas[name].(map[string]any)
		if !kept {
			d.skipped[name] = true
			return nil
		}
		return d.check(v, s, at)
	}
	if v == nil {
		if n, _ := schema["nullable"].(bool); n {
			return nil
		}
		if _, typed := schema["type"]; typed {
			return []string{at + ": null where the description does not allow it"}
		}
		return nil
	}
	for _, key := range []string{"oneOf", "anyOf"} {
		if alts, ok := schema[key].([]any); ok {
			for _, a := range alts {
				if len(d.check(v, a.(map[string]any), at)) == 0 {
					return nil
				}
			}
			return []string{at + ": matches none of " + key}
		}
	}
	var bad []string
	if enum, ok := schema["enum"].([]any); ok {
		found := false
		for _, e := range enum {
			if fmt.Sprint(e) == fmt.Sprint(v) {
				found = true
			}
		}
		if !found {
			bad = append(bad, fmt.Sprintf("%s: %v is not one of %v", at, v, enum))
		}
	}
	switch typ, _ := schema["type"].(string); typ {
	case "object":
		obj, ok := v.(map[string]any)
		if !ok {
			return append(bad, fmt.Sprintf("%s: %T, want an object", at, v))
		}
		req, _ := schema["required"].([]any)
		for _, r := range req {
			if _, ok := obj[r.(string)]; !ok {
				bad = append(bad, fmt.Sprintf("%s: required %q missing", at, r))
			}
		}
		props, _ := schema["properties"].(map[string]any)
		for _, k := range slices.Sorted(maps.Keys(props)) {
			if fv, ok := obj[k]; ok {
				bad = append(bad, d.check(fv, props[k].(map[string]any), at+"."+k)...)
			}
		}
	case "array":
		arr, ok := v.([]any)
		if !ok {
			return append(bad, fmt.Sprintf("%s: %T, want an array", at, v))
		}
		if items, ok := schema["items"].(map[string]any); ok {
			for i, e := range arr {
				bad = append(bad, d.check(e, items, fmt.Sprintf("%s[%d]", at, i))...)
			}
		}
	case "string":
		if _, ok := v.(string); !ok {
			bad = append(bad, fmt.Sprintf("%s: %T, want a string", at, v))
		}
	case "integer":
		if f, ok := v.(float64); !ok || f != math.Trunc(f) {
			bad = append(bad, fmt.Sprintf("%s: %v, want an integer", at, v))
		}
	case "number":
		if _, ok := v.(float64); !ok {
			bad = append(bad, fmt.Sprintf("%s: %T, want a number", at, v))
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			bad = append(bad, fmt.Sprintf("%s: %T, want a boolean", at, v))
		}
	}
	return bad
}

// The checker itself must catch what it is for: a missing required field, a
// wrong type, a null where none is allowed.
func TestSchemaCheckCatches(t *testing.T) {
	d := loadDescription(t)
	status := map[string]any{"$ref": "#/components/schemas/status"}
	good := map[string]any{"url": "u", "avatar_url": nil, "id": 1.0, "node_id": "n", "state": "success", "description": nil,
		"target_url": nil, "context": "c", "created_at": "t", "updated_at": "t", "creator": nil}
	if bad := d.check(good, status, "status"); len(bad) != 0 {
		t.Fatalf("a good status: %v", bad)
	}
	for name, mutate := range map[string]func(m map[string]any){
		"missing":    func(m map[string]any) { delete(m, "context") },
		"wrong":      func(m map[string]any) { m["id"] = "1" },
		"null":       func(m map[string]any) { m["state"] = nil },
		"fractional": func(m map[string]any) { m["id"] = 1.5 },
	} {
		m := map[string]any{}
		for k, v := range good {
			m[k] = v
		}
		mutate(m)
		if bad := d.check(m, status, "status"); len(bad) == 0 {
			t.Errorf("%s: not caught", name)
		}
	}
}

// The emulator's answers to the routes fleet-agent uses have the shapes and
// codes of GitHub's description: success and failure alike.
func TestAnswersMatchTheDescription(t *testing.T) {
	d := loadDescription(t)
	s, repo, _, _ := setup(t, Options{})
	n := repo.OpenPR(PR{HeadSHA: sha(1), User: "alice"})
	repo.MergePR(n, sha(100))
	open := repo.OpenPR(PR{HeadSHA: sha(2)})
	repo.AddCommit(sha(2))

	call := func(method, route, path string, body any) (int, any) {
		t.Helper()
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, err := http.NewRequestWithContext(t.Context(), method, strings.TrimSuffix(s.URL(), "/")+path, rd)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer good-token")
		req.Header.Set("X-GitHub-Api-Version", SupportedAPIVersion)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v any
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		schema, listed := d.response(t, route, strings.ToLower(method), resp.StatusCode)
		if !listed {
			t.Errorf("%s %s answered %d, which the description does not list", method, path, resp.StatusCode)
			return resp.StatusCode, v
		}
		if schema == nil {
			t.Errorf("%s %s: no schema kept for %d", method, route, resp.StatusCode)
		}
		for _, b := range d.check(v, schema, method+" "+path) {
			t.Error(b)
		}
		return resp.StatusCode, v
	}

	const (
		commitPulls = "/repos/{owner}/{repo}/commits/{commit_sha}/pulls"
		statuses    = "/repos/{owner}/{repo}/commits/{ref}/statuses"
		combined    = "/repos/{owner}/{repo}/commits/{ref}/status"
		comments    = "/repos/{owner}/{repo}/issues/{issue_number}/comments"
		comment     = "/repos/{owner}/{repo}/issues/comments/{comment_id}"
		create      = "/repos/{owner}/{repo}/statuses/{sha}"
	)
	call("GET", commitPulls, "/repos/acme/fleet/commits/"+sha(100)+"/pulls", nil)
	if code, v := call("GET", commitPulls, "/repos/acme/fleet/commits/"+sha(2)+"/pulls", nil); code != 200 || len(v.([]any)) != 1 {
		t.Errorf("open head: %d %v", code, v)
	}
	call("POST", create, "/repos/acme/fleet/statuses/"+sha(2), map[string]any{"state": "pending", "context": "fleet-agent/plan"})
	call("POST", create, "/repos/acme/fleet/statuses/"+sha(2), map[string]any{"state": "success", "context": "Fleet-Agent/Plan", "description": "ok", "target_url": "https://ci/1"})
	call("GET", statuses, "/repos/acme/fleet/commits/"+sha(2)+"/statuses", nil)
	call("GET", combined, "/repos/acme/fleet/commits/"+sha(2)+"/status", nil)
	issue := fmt.Sprintf("/repos/acme/fleet/issues/%d/comments", open)
	_, made := call("POST", comments, issue, map[string]any{"body": "plan"})
	id := fmt.Sprint(int64(made.(map[string]any)["id"].(float64)))
	call("PATCH", comment, "/repos/acme/fleet/issues/comments/"+id, map[string]any{"body": "plan v2"})
	call("GET", comments, issue, nil)

	// The 422s of a comment: too fast, and too long.
	s.SubmittedTooQuicklyNext(2)
	if code, _ := call("POST", comments, issue, map[string]any{"body": "again"}); code != 422 {
		t.Errorf("too quickly: %d", code)
	}
	if code, _ := call("PATCH", comment, "/repos/acme/fleet/issues/comments/"+id, map[string]any{"body": "v3"}); code != 422 {
		t.Errorf("too quickly on edit: %d", code)
	}
	if code, _ := call("POST", comments, issue, map[string]any{"body": strings.Repeat("x", 65537)}); code != 422 {
		t.Errorf("too long: %d", code)
	}
	t.Logf("schemas referenced but not kept, not checked: %v", slices.Sorted(maps.Keys(d.skipped)))
}
