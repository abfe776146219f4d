package localapi_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestEveryRouteIsDocumented: each route the local API registers (here and
// the doctor's in cmd/fleet-agent) has its row in docs/commands.md, so a
// script author finds it there.
func TestEveryRouteIsDocumented(t *testing.T) {
	root := filepath.Join("..", "..")
	route := regexp.MustCompile(`HandleFunc\("((?:GET|POST) /v1/[a-z-]+)"`)
	var routes []string
	for _, f := range []string{"internal/localapi/handler.go", "cmd/fleet-agent/doctor.go"} {
		src, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range route.FindAllStringSubmatch(string(src), -1) {
			routes = append(routes, m[1])
		}
	}
	if len(routes) < 10 {
		t.Fatalf("found %d routes (%v): the test is reading the wrong files", len(routes), routes)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "commands.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range routes {
		if !strings.Contains(string(doc), "`"+r+"`") {
			t.Errorf("the route %s is not in docs/commands.md's table of the local API", r)
		}
	}
}
