// Command fleet-docs rewrites the generated sections of the pages under
// docs/ (the fields of fleet.json, the fake provider's catalogue, the
// metrics) from the code: `go run ./cmd/fleet-docs` at the repository's
// root, or `make docs`. The text outside the sections' markers is kept as
// written. With -check it writes nothing and exits 1 when a page is stale.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/fleet-agent/fleet-agent/internal/docgen"
)

func main() {
	root := flag.String("root", ".", "the repository's root")
	check := flag.Bool("check", false, "write nothing; exit 1 when a page is not current")
	flag.Parse()
	stale := 0
	for _, p := range docgen.Pages {
		path := filepath.Join(*root, p.Path)
		current, err := os.ReadFile(path)
		if err != nil {
			fmt.Fprintf(os.Stderr, "fleet-docs: %v (run it at the repository's root, or give -root)\n", err)
			os.Exit(1)
		}
		want, err := p.Render(current)
		if err != nil {
			fmt.Fprintf(os.Stderr, "fleet-docs: %v\n", err)
			os.Exit(1)
		}
		if bytes.Equal(current, want) {
			continue
		}
		stale++
		if *check {
			fmt.Fprintf(os.Stderr, "fleet-docs: %s is not current: run %s\n", p.Path, docgen.Command)
			continue
		}
		if err := os.WriteFile(path, want, 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "fleet-docs: %v\n", err)
			os.Exit(1)
		}
		fmt.Printf("wrote %s\n", p.Path)
	}
	if *check && stale > 0 {
		os.Exit(1)
	}
}
