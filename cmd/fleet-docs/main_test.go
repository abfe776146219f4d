package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/docgen"
)

const repoRoot = "../.."

// TestPagesAreCurrent regenerates every page in memory: a schema field, a
// fake machine type or a metric changed without the page fails here.
func TestPagesAreCurrent(t *testing.T) {
	for _, p := range pages() {
		t.Run(p.Path, func(t *testing.T) {
			current, err := os.ReadFile(filepath.Join(repoRoot, p.Path))
			if err != nil {
				t.Fatal(err)
			}
			want, err := p.Render(current)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(current, want) {
				t.Fatalf("%s is not what the code generates: run `%s` at the repository's root and commit the page\n%s",
					p.Path, docgen.Command, firstDifference(current, want))
			}
		})
	}
}

func firstDifference(got, want []byte) string {
	g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := 0; i < max(len(g), len(w)); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return "first difference at line " + strconv.Itoa(i+1) + ":\n  page: " + gl + "\n  code: " + wl
		}
	}
	return ""
}
