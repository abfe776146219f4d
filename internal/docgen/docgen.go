// Package docgen writes the parts of the pages under docs/ that the code
// knows better than a person: the fields of fleet.json from its schema, the
// fake provider's catalogue, the metrics the agent serves. A page mixes
// hand-written text with generated sections, each between the lines
//
//	<!-- generated:NAME (go run ./cmd/fleet-docs) -->
//	<!-- end:NAME -->
//
// Splice replaces what is between them and keeps every other line, so a
// person edits the prose and the generator owns the tables. cmd/fleet-docs
// writes the pages, and its test regenerates each in memory and fails when
// the committed one differs, so a page cannot fall behind the schema, the
// fake provider or the registry. A provider adapter reaches this package
// only as a Catalogue: only commands import adapters.
package docgen

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
)

// Command is what a person runs to rewrite the generated sections; every
// message about a stale page names it.
const Command = "go run ./cmd/fleet-docs"

func beginMarker(name string) string { return "<!-- generated:" + name + " (" + Command + ") -->" }
func endMarker(name string) string   { return "<!-- end:" + name + " -->" }

// Splice returns page with the text between the markers of each section
// replaced by sections[name]. A section the page lacks, a marker opened
// twice or never closed, is an error naming the marker to add: a generated
// table silently dropped from a page is what this package exists to stop.
func Splice(page []byte, sections map[string]string) ([]byte, error) {
	var out bytes.Buffer
	lines := strings.SplitAfter(string(page), "\n")
	seen := map[string]bool{}
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		out.WriteString(line)
		name, ok := sectionName(strings.TrimSpace(line))
		if !ok {
			continue
		}
		body, known := sections[name]
		if !known {
			return nil, fmt.Errorf("line %d: no generator for section %q", i+1, name)
		}
		if seen[name] {
			return nil, fmt.Errorf("line %d: section %q appears twice", i+1, name)
		}
		seen[name] = true
		end := -1
		for j := i + 1; j < len(lines); j++ {
			if strings.TrimSpace(lines[j]) == endMarker(name) {
				end = j
				break
			}
		}
		if end < 0 {
			return nil, fmt.Errorf("line %d: section %q is not closed: add a line %s", i+1, name, endMarker(name))
		}
		if body != "" && !strings.HasSuffix(body, "\n") {
			body += "\n"
		}
		out.WriteString(body)
		out.WriteString(lines[end])
		i = end
	}
	for name := range sections {
		if !seen[name] {
			return nil, fmt.Errorf("the page has no section %q: add the lines %s and %s where it belongs", name, beginMarker(name), endMarker(name))
		}
	}
	return out.Bytes(), nil
}

// sectionName recognises a begin marker, whatever command it names (a
// page written before the command moved still splices).
func sectionName(line string) (string, bool) {
	rest, ok := strings.CutPrefix(line, "<!-- generated:")
	if !ok || !strings.HasSuffix(rest, "-->") {
		return "", false
	}
	name, _, _ := strings.Cut(strings.TrimSuffix(rest, "-->"), " ")
	return strings.TrimSpace(name), true
}

// Between returns the text between the lines "<!-- NAME -->" and
// "<!-- end:NAME -->" of a page: a hand-written part a test reads, such as
// the worked first document.
func Between(page []byte, name string) (string, error) {
	s := string(page)
	open, close := "<!-- "+name+" -->\n", "\n"+endMarker(name)
	i := strings.Index(s, open)
	if i < 0 {
		return "", fmt.Errorf("the page has no line %q", strings.TrimSpace(open))
	}
	s = s[i+len(open):]
	j := strings.Index(s, close)
	if j < 0 {
		return "", fmt.Errorf("%q is not closed by %q", strings.TrimSpace(open), strings.TrimSpace(close))
	}
	return s[:j+1], nil
}

// Fenced returns the contents of the fenced code blocks of text whose info
// string is one of langs, in order. A block indented under a list item
// loses its fence's indentation, as a reader copying it from the rendered
// page gets it (a heredoc's terminator must start its line).
func Fenced(text string, langs ...string) []string {
	var blocks []string
	var cur strings.Builder
	inside, wanted, indent := false, false, ""
	for _, line := range strings.SplitAfter(text, "\n") {
		t := strings.TrimSpace(line)
		switch {
		case !inside && strings.HasPrefix(t, "```"):
			inside = true
			lang := strings.TrimSpace(strings.TrimPrefix(t, "```"))
			wanted = slices.Contains(langs, lang)
			indent = line[:len(line)-len(strings.TrimLeft(line, " "))]
			cur.Reset()
		case inside && t == "```":
			if wanted {
				blocks = append(blocks, cur.String())
			}
			inside = false
		case inside:
			cur.WriteString(strings.TrimPrefix(line, indent))
		}
	}
	return blocks
}

// Page is a page of docs/ with generated sections.
type Page struct {
	// Path is the page's path from the repository's root.
	Path     string
	Sections func() (map[string]string, error)
}

// Pages are the pages the generator keeps, given the fake provider's
// catalogue.
func Pages(fake Catalogue) []Page {
	return []Page{
		{Path: "docs/document.md", Sections: func() (map[string]string, error) { return DocumentSections(fake) }},
		{Path: "docs/metrics.md", Sections: MetricsSections},
	}
}

// Render returns the page as it should be: current with its generated
// sections replaced.
func (p Page) Render(current []byte) ([]byte, error) {
	sections, err := p.Sections()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p.Path, err)
	}
	out, err := Splice(current, sections)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p.Path, err)
	}
	return out, nil
}
