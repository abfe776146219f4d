package doctl_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/providers/digitalocean/doemu/doctl"
	"github.com/fleet-agent/fleet-agent/internal/providers/digitalocean/doemu/wirecheck"
)

func load(t *testing.T) doctl.Transcript {
	t.Helper()
	b, err := os.ReadFile(transcript)
	if err != nil {
		t.Fatalf("no transcript (record one with -record, see docs/emulators.md): %v", err)
	}
	var tr doctl.Transcript
	if err := json.Unmarshal(b, &tr); err != nil {
		t.Fatal(err)
	}
	if tr.Client != "doctl" || tr.Version == "" || tr.Licence != "Apache-2.0" || len(tr.Flows) == 0 {
		t.Fatalf("transcript header %+v", tr)
	}
	return tr
}

// TestReplay sends every request doctl sent, in order, to a fresh
// emulator and holds each answer to what doctl received: the status, and
// the body (normalised). Then, for each flow that printed JSON, every value
// doctl printed must be in the flow's last answer at the same place: what
// doctl parsed still comes out of the emulator.
func TestReplay(t *testing.T) {
	tr := load(t)
	compared, requests := 0, 0
	defer func() {
		t.Logf("%d flows, %d requests replayed, %d printed values compared", len(tr.Flows), requests, compared)
	}()
	emu := emulator()
	srv := httptest.NewServer(emu)
	defer srv.Close()
	for _, f := range tr.Flows {
		var last any
		lastErr := ""
		for i, x := range f.Exchanges {
			requests++
			u := srv.URL + x.Path
			if x.Query != "" {
				u += "?" + x.Query
			}
			req, err := http.NewRequestWithContext(t.Context(), x.Method, u, bytes.NewReader(x.Body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+token)
			if len(x.Body) > 0 {
				req.Header.Set("Content-Type", "application/json")
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			out, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			where := fmt.Sprintf("%s: request %d (%s %s)", f.Name, i, x.Method, x.Path)
			if resp.StatusCode != x.Status {
				t.Errorf("%s: status %d, doctl got %d: %s", where, resp.StatusCode, x.Status, out)
				continue
			}
			got, gotText := body(out)
			if !sameJSON(got, x.Response) || gotText != x.ResponseText {
				t.Errorf("%s: answer differs from what doctl got\n got: %s%s\nwant: %s%s", where, got, gotText, x.Response, x.ResponseText)
			}
			if len(got) > 0 && resp.StatusCode < 300 {
				_ = json.Unmarshal(got, &last)
			}
			if resp.StatusCode >= 400 {
				var e struct{ Message string }
				_ = json.Unmarshal(got, &e)
				lastErr = e.Message
			}
		}
		if f.Exit != 0 {
			// doctl shows the service's message: in its JSON errors with
			// -o json, else on stderr.
			escaped, _ := json.Marshal(lastErr)
			shown := string(f.Stdout) + f.Stderr
			if lastErr == "" || !(strings.Contains(shown, lastErr) || strings.Contains(shown, strings.Trim(string(escaped), `"`))) {
				t.Errorf("%s: doctl failed (exit %d) without the answer's message %q: %s %s", f.Name, f.Exit, lastErr, f.Stdout, f.Stderr)
			}
			compared++
			continue
		}
		if len(f.Stdout) == 0 {
			continue
		}
		var printed any
		if err := json.Unmarshal(f.Stdout, &printed); err != nil {
			t.Fatalf("%s: stdout: %v", f.Name, err)
		}
		n, diffs := parsed(printed, root(last))
		compared += n
		for _, d := range diffs {
			t.Errorf("%s: doctl printed %s", f.Name, d)
		}
		if n == 0 {
			t.Errorf("%s: no value doctl printed is in its last answer: %s", f.Name, f.Stdout)
		}
	}
	// Every exchange of the replay also holds to DigitalOcean's OpenAPI
	// description (with the relaxations doctl shows, see wirecheck.Looser).
	checker, err := wirecheck.Shared()
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range emu.Exchanges() {
		for _, err := range checker.Check(x) {
			t.Errorf("wire: %v", err)
		}
	}
}

func sameJSON(a, b json.RawMessage) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

// root unwraps an answer's root ({"kubernetes_cluster":{...}},
// {"node_pools":[...],"links":...}).
func root(v any) any {
	m, ok := v.(map[string]any)
	if !ok {
		return v
	}
	var keys []string
	for k := range m {
		if k != "links" && k != "meta" {
			keys = append(keys, k)
		}
	}
	if len(keys) == 1 {
		return m[keys[0]]
	}
	return v
}

// parsed compares what doctl printed with the answer: each leaf of printed
// whose place exists in the answer must hold the same value. A printed
// list of one against an answer object compares that one. It returns the
// leaves compared and the differences.
//
// doctl finds a cluster or pool by name in a list, and prints the one: a
// printed list of one against a longer answer list compares the item of
// the same id. An empty printed list must meet an empty answer (and counts
// as one comparison).
func parsed(printed, answer any) (int, []string) {
	if p, ok := printed.([]any); ok {
		switch a := answer.(type) {
		case map[string]any:
			// One list of an answer that holds several ({"options":
			// {"regions":[...],"versions":[...]}}): the one doctl printed
			// is the one its items' values are found in.
			best, bestN := any(nil), 0
			for _, k := range sortedKeys(a) {
				if l, ok := a[k].([]any); ok && len(l) == len(p) {
					if n, diffs := parsed(p, l); len(diffs) == 0 && n > bestN {
						best, bestN = l, n
					}
				}
			}
			switch {
			case best != nil:
				answer = best
			case len(p) == 1:
				printed = p[0]
			}
		case []any:
			if len(p) == 0 {
				if len(a) != 0 {
					return 1, []string{fmt.Sprintf("no items, the answer has %d", len(a))}
				}
				return 1, nil
			}
			if len(p) == 1 && len(a) > 1 {
				id := idOf(p[0])
				for _, item := range a {
					if id != "" && idOf(item) == id {
						answer = []any{item}
					}
				}
			}
		}
	}
	n := 0
	var diffs []string
	var walk func(path string, p, a any)
	walk = func(path string, p, a any) {
		switch pv := p.(type) {
		case map[string]any:
			av, ok := a.(map[string]any)
			if !ok {
				return
			}
			keys := make([]string, 0, len(pv))
			for k := range pv {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				if sub, ok := av[k]; ok {
					walk(path+"/"+k, pv[k], sub)
				}
			}
		case []any:
			av, ok := a.([]any)
			if !ok {
				return
			}
			if len(pv) != len(av) {
				diffs = append(diffs, fmt.Sprintf("%s with %d items, the answer has %d", path, len(pv), len(av)))
				return
			}
			for i := range pv {
				walk(fmt.Sprintf("%s/%d", path, i), pv[i], av[i])
			}
		default:
			if s, ok := a.(string); ok && s == "<normalised>" {
				return
			}
			n++
			if !reflect.DeepEqual(p, a) {
				diffs = append(diffs, fmt.Sprintf("%s = %v, the answer has %v", strings.TrimPrefix(path, ""), p, a))
			}
		}
	}
	walk("", printed, answer)
	return n, diffs
}

func idOf(v any) string {
	m, _ := v.(map[string]any)
	id, _ := m["id"].(string)
	return id
}

// TestParsedCatchesDrift shows the comparison can fail: an answer that
// lost or changed a value doctl printed is caught.
func TestParsedCatchesDrift(t *testing.T) {
	printed := []any{map[string]any{"id": "a", "ha": true, "status": map[string]any{"state": "running"}, "tags": []any{"k8s"}}}
	cases := []struct {
		name   string
		answer any
		diffs  int
	}{
		{"the same", map[string]any{"id": "a", "ha": true, "status": map[string]any{"state": "running"}, "tags": []any{"k8s"}}, 0},
		{"a changed value", map[string]any{"id": "a", "ha": false, "status": map[string]any{"state": "running"}, "tags": []any{"k8s"}}, 1},
		{"a changed state", map[string]any{"id": "a", "ha": true, "status": map[string]any{"state": "provisioning"}, "tags": []any{"k8s"}}, 1},
		{"a list of another length", map[string]any{"id": "a", "ha": true, "status": map[string]any{"state": "running"}, "tags": []any{}}, 1},
		{"picked from a list by id", []any{map[string]any{"id": "b"}, map[string]any{"id": "a", "ha": false}}, 1},
		{"an empty list against items", []any{map[string]any{"id": "b"}}, 0},
	}
	for _, tc := range cases {
		p := any(printed)
		if tc.name == "an empty list against items" {
			p, tc.diffs = []any{}, 1
		}
		if _, diffs := parsed(p, tc.answer); len(diffs) != tc.diffs {
			t.Errorf("%s: %d differences %v, want %d", tc.name, len(diffs), diffs, tc.diffs)
		}
	}
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
