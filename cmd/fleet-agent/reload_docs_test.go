package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/config"
)

// TestConfigurationReloadColumnIsTrue holds the last column of every key
// row of docs/configuration.md to what a reload really changes: a key the
// page calls "reloaded" is one reload applies, and every key reload
// applies is called so.
func TestConfigurationReloadColumnIsTrue(t *testing.T) {
	page, err := os.ReadFile(filepath.Join(repo, "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| `([A-Za-z0-9_.<>-]+)` \\|.*\\| ([a-z ]+) \\|$")
	seen := map[string]bool{}
	rows := 0
	for _, line := range strings.Split(string(page), "\n") {
		m := row.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		rows++
		key, when := m[1], m[2]
		if when == "reloaded" {
			seen[key] = true
			if !slices.Contains(config.Reloadable, key) {
				t.Errorf("docs/configuration.md says %s is reloaded; the agent needs a restart for it", key)
			}
		}
	}
	if rows < 20 {
		t.Fatalf("only %d key rows read: has the table's shape changed?", rows)
	}
	for _, key := range config.Reloadable {
		if !seen[key] {
			t.Errorf("a reload changes %s; docs/configuration.md does not say so", key)
		}
	}
}
