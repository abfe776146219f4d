package main

import (
	"strings"
	"testing"
)

// TestValidateWarnsOfDanglingReferences: a pool whose site the file does
// not hold is valid (applied, it resolves against the fleet), and validate
// says so as a warning with the nearest site of the file.
func TestValidateWarnsOfDanglingReferences(t *testing.T) {
	path := writeFile(t, t.TempDir(), "fleet.json", `{"version":1,"sites":[{"name":"lab","kind":"shared","region":"fra"}],
 "pools":[{"name":"gpu","site":"lba","class":"metal-host","gpuModel":"H100","policy":{}}]}`)
	out, _, code := cli(t, nil, "validate", path)
	if code != 0 || !strings.Contains(out, `warning: pools[0].site "lba" names no site of this document`) || !strings.Contains(out, `did you mean "lab"?`) || !strings.Contains(out, "valid") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	// A file whose references all resolve has no warning.
	ok := writeFile(t, t.TempDir(), "fleet.json", `{"version":1,"sites":[{"name":"lab","kind":"shared","region":"fra"}],
 "pools":[{"name":"gpu","site":"lab","class":"metal-host","gpuModel":"H100","policy":{}}]}`)
	if out, _, code := cli(t, nil, "validate", ok); code != 0 || strings.Contains(out, "warning") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}
