package policy

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSuiteMaxTeardowns: a case plans with the teardown limit it names
// (apply.maxTeardowns), the default (1) when it names none; a rule on
// blocked changes sees the difference.
func TestSuiteMaxTeardowns(t *testing.T) {
	dir := t.TempDir()
	pool := func(name string) map[string]any {
		return map[string]any{"name": name, "site": "k8s", "class": "metal-host", "policy": map[string]any{
			"substrate": map[string]any{"kind": "kubernetes", "account": "k", "cluster": map[string]any{"create": map[string]any{"location": "us-east-1"}},
				"flavors": []any{map[string]any{"name": "h100", "machineType": "p5.48xlarge", "nodes": 1}}}}}
	}
	doc := func(pools ...any) string {
		d := map[string]any{"version": 1, "sites": []any{map[string]any{"name": "k8s", "kind": "shared", "region": "us-east-1"}},
			"providerAccounts": []any{map[string]any{"name": "k", "provider": "aws", "config": map[string]any{"region": "us-east-1", "zones": []any{"us-east-1a", "us-east-1b"},
				"eksClusterRoleArn": "arn:aws:iam::111111111111:role/c", "eksNodeRoleArn": "arn:aws:iam::111111111111:role/n", "eksSubnetIds": []any{"subnet-0000000000000000a", "subnet-0000000000000000b"}}}},
			"pools": pools}
		b, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for name, text := range map[string]string{
		"base.json":   doc(pool("a"), pool("b"), pool("c")),
		"next.json":   doc(pool("c")),
		"policy.yaml": "rules:\n  - {name: blocked, expression: \"change.blocked != ''\", action: warn}\n",
		"t.test.yaml": `policy: policy.yaml
cases:
  - {name: default limit, document: next.json, fleet: base.json, prune: true, expect: {blocked: warn}}
  - {name: limit of two, document: next.json, fleet: base.json, prune: true, maxTeardowns: 2, expect: {blocked: pass}}
  - {name: none allowed, document: next.json, fleet: base.json, prune: true, maxTeardowns: 0, expect: {blocked: warn}}
`,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	res, err := RunSuite(dir)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, c := range res.Cases {
		lines = append(lines, c.Line())
	}
	if got := strings.Join(lines, "\n"); res.Passed() != 3 {
		t.Fatalf("cases:\n%s", got)
	}
	bad := "policy: policy.yaml\ncases:\n  - {name: negative, document: next.json, maxTeardowns: -1, expect: {blocked: pass}}\n"
	if err := os.WriteFile(filepath.Join(dir, "t.test.yaml"), []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := RunSuite(dir); err == nil || !strings.Contains(err.Error(), "maxTeardowns is -1") {
		t.Fatalf("a negative limit: %v", err)
	}
}

// TestSuiteDirectoryIsAName: the directory given is read as named, never as
// a pattern: brackets in its name find its own tests, and a "?" finds no
// other directory's.
func TestSuiteDirectoryIsAName(t *testing.T) {
	root := t.TempDir()
	test := "policy: policy.yaml\ncases:\n  - {name: c, document: fleet.json, expect: {r: pass}}\n"
	for _, dir := range []string{"g[1]", "gplain"} {
		d := filepath.Join(root, dir)
		for name, text := range map[string]string{
			"policy.yaml": "rules:\n  - {name: r, expression: \"false\", action: warn}\n",
			"fleet.json":  `{"version":1}`,
			"t.test.yaml": test,
		} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(d, name), []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if res, err := RunSuite(filepath.Join(root, "g[1]")); err != nil || res.Passed() != 1 {
		t.Errorf("a directory named g[1]: %v %+v", err, res)
	}
	if res, err := RunSuite(filepath.Join(root, "g?lain")); err == nil {
		t.Errorf("g?lain ran %+v: a pattern, not a name", res)
	}
}
