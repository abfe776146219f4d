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
	"github.com/fleet-agent/fleet-agent/internal/providers/fake"
)

func main() {
	root := flag.String("root", ".", "the repository's root")
	check := flag.Bool("check", false, "write nothing; exit 1 when a page is not current")
	flag.Parse()
	stale := 0
	for _, p := range pages() {
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

// pages are the generated pages, with the fake provider's catalogue as the
// fake is without a config block.
func pages() []docgen.Page { return docgen.Pages(catalogue(fake.DefaultConfig())) }

func catalogue(c fake.Config) docgen.Catalogue {
	cat := docgen.Catalogue{Versions: c.Versions, DefaultVersion: c.DefaultVersion, ZeroNodes: c.ZeroNodes, Spot: c.Spot}
	for _, l := range c.Locations {
		cat.Locations = append(cat.Locations, docgen.Location{Name: l.Name, Zones: l.Zones})
	}
	for _, m := range c.MachineTypes {
		mt := docgen.MachineType{Name: m.Name, VCPU: m.VCPU, MemoryGiB: m.MemoryGiB, Locations: m.Locations}
		if m.GPUs != nil {
			mt.GPUs = &docgen.GPU{Type: m.GPUs.Type, Count: m.GPUs.Count}
		}
		for _, a := range m.Attachable {
			mt.Attachable = append(mt.Attachable, docgen.GPU{Type: a.Type, Count: a.Count})
		}
		cat.MachineTypes = append(cat.MachineTypes, mt)
	}
	return cat
}
