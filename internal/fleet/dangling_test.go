package fleet

import (
	"strings"
	"testing"
)

func TestDanglingReferences(t *testing.T) {
	doc := `{"version":1,"sites":[{"name":"lab","kind":"shared","region":"fra"}],
	 "pools":[{"name":"gpu","site":"lba","class":"metal-host","gpuModel":"H100","policy":{}},
	          {"name":"ok","site":"lab","class":"metal-host","gpuModel":"H100","policy":{}}]}`
	d, errs := Validate("t.json", []byte(doc))
	if errs != nil {
		t.Fatal(errs.Text())
	}
	got := DanglingReferences(d)
	if len(got) != 1 || got[0].Path != "pools[0].site" || got[0].Closest != "lab" {
		t.Fatalf("%+v", got)
	}
	if s := got[0].String(); !strings.Contains(s, `did you mean "lab"?`) || !strings.Contains(s, "resolves against the fleet") {
		t.Fatalf("%s", s)
	}
}
