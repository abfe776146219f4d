package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// readmeWordLimit keeps the README a landing page: what the agent is, the
// two commands, the way to your own repository, the install, and where the
// rest is. Reference goes to docs/.
const readmeWordLimit = 1500

// TestReadmeIsALandingPage holds the README to its length and to the parts
// a newcomer looks for first.
func TestReadmeIsALandingPage(t *testing.T) {
	text, err := os.ReadFile(filepath.Join(repo, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(strings.Fields(string(text))); n > readmeWordLimit {
		t.Errorf("README.md has %d words, more than %d: move reference to docs/ (decisions to docs/design.md, figures to docs/performance.md)", n, readmeWordLimit)
	}
	for _, want := range []string{"make demo", "make test", "docs/connect.md", "docs/install.md", "docs/README.md", "systemctl enable --now fleet-agent"} {
		if !strings.Contains(string(text), want) {
			t.Errorf("README.md does not mention %s", want)
		}
	}
}

// mdLink is a markdown link's target: [text](target); codeSpan an inline
// code span, whose text is no link.
var (
	mdLink   = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	codeSpan = regexp.MustCompile("`[^`]*`")
)

// TestDocsLinksResolve checks every relative link of the README and of
// docs/: the file it names exists, and an anchor names a heading of it.
// And docs/README.md lists every page of docs/.
func TestDocsLinksResolve(t *testing.T) {
	pages, err := filepath.Glob(filepath.Join(repo, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, filepath.Join(repo, "README.md"))
	checked := 0
	for _, page := range pages {
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range brokenLinks(page, string(text)) {
			t.Error(e)
		}
		checked++
	}
	if checked < 10 {
		t.Fatalf("only %d pages read: is the repository root %s?", checked, repo)
	}
	index, err := os.ReadFile(filepath.Join(repo, "docs", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, page := range pages {
		name := filepath.Base(page)
		if filepath.Dir(page) != filepath.Join(repo, "docs") || name == "README.md" {
			continue
		}
		if !strings.Contains(string(index), "]("+name+")") {
			t.Errorf("docs/README.md does not list %s", name)
		}
	}
}

// TestBrokenLinksCatches holds the link check to what it exists for.
func TestBrokenLinksCatches(t *testing.T) {
	page := filepath.Join(repo, "docs", "commands.md")
	cases := []struct{ text, want string }{
		{"see [c](configuration.md)", ""},
		{"see [c](configuration.md#no-such-heading)", "no heading"},
		{"see [c](nowhere.md)", "no such file"},
		{"see [top](#exit-status)", ""},
		{"see [top](#exit-statuses)", "no heading"},
		{"see [x](https://example.com/nowhere.md)", ""},
		{"```\n[c](nowhere.md)\n```\n", ""},
		{"a pattern `[a-z](x)` in code", ""},
	}
	for _, c := range cases {
		errs := brokenLinks(page, c.text)
		if c.want == "" && len(errs) > 0 || c.want != "" && (len(errs) != 1 || !strings.Contains(errs[0], c.want)) {
			t.Errorf("%q: %v, want %q", c.text, errs, c.want)
		}
	}
}

// brokenLinks lists the relative links of a page (outside code blocks)
// whose file or heading does not exist.
func brokenLinks(page, text string) []string {
	var errs []string
	inCode := false
	for i, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inCode = !inCode
			continue
		}
		if inCode {
			continue
		}
		for _, m := range mdLink.FindAllStringSubmatch(codeSpan.ReplaceAllString(line, "``"), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			path := page
			if file != "" {
				path = filepath.Join(filepath.Dir(page), file)
			}
			where := filepath.Base(filepath.Dir(page)) + "/" + filepath.Base(page) + ":" + strconv.Itoa(i+1)
			data, err := os.ReadFile(path)
			if err != nil {
				if fi, serr := os.Stat(path); serr == nil && fi.IsDir() {
					continue
				}
				errs = append(errs, where+": link to "+target+": no such file")
				continue
			}
			if anchor != "" && strings.HasSuffix(path, ".md") && !slices.Contains(headingAnchors(string(data)), anchor) {
				errs = append(errs, where+": link to "+target+": no heading with that anchor")
			}
		}
	}
	return errs
}

// headingAnchors are the anchors GitHub makes of a page's headings:
// lower case, punctuation dropped, spaces as hyphens, repeats numbered.
func headingAnchors(text string) []string {
	var out []string
	seen := map[string]int{}
	inCode := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inCode = !inCode
		}
		if inCode || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#")))
		var b strings.Builder
		for _, r := range h {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out = append(out, a+"-"+strconv.Itoa(n))
		} else {
			out = append(out, a)
		}
		seen[a]++
	}
	return out
}

// A path that names no file reads as a missing file, not as an invalid
// document.
func TestPlanMissingFileSaysSo(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.json")
	_, errs, code := cli(t, nil, "plan", missing, "--state", filepath.Join(dir, "fleet.db"), "--offline")
	if code != 1 || !strings.Contains(errs, missing+": no such file") || strings.Contains(errs, "not a valid document") {
		t.Fatalf("exit %d: %s", code, errs)
	}
}
