package providers

import "testing"

func TestNextPoolVersion(t *testing.T) {
	cases := []struct {
		name, have, want, cp, next string
		class                      Class
		reason                     string
	}{
		{"nothing wanted", "1.33", "", "1.34", "", "", ""},
		{"reached", "1.34.3-gke.1100000", "1.34", "1.34", "", "", ""},
		{"one minor", "1.33", "1.34", "1.34", "1.34", "", ""},
		{"two minors go one at a time", "1.32", "1.34", "1.34", "1.33", "", ""},
		{"a GKE version", "1.33.5-gke.1400000", "1.35", "1.35.1-gke.1200000", "1.34", "", ""},
		{"waits for the control plane", "1.34", "1.35", "1.34", "", Conflict, ""},
		{"a downgrade", "1.34", "1.33", "1.34", "", Invalid, "downgrade"},
		{"not a version", "1.34", "latest", "1.34", "", Invalid, "version"},
		{"another major", "1.34", "2.0", "2.0", "", Invalid, "version"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			next, err := NextPoolVersion("EnsureNodePool", "p", c.have, c.want, c.cp)
			if next != c.next || ClassOf(err) != c.class && err != nil || (err == nil) != (c.class == "") || ReasonOf(err) != c.reason {
				t.Errorf("NextPoolVersion(%s, %s, cp %s) = %q, %v (class %s, reason %s); want %q, class %q reason %q",
					c.have, c.want, c.cp, next, err, ClassOf(err), ReasonOf(err), c.next, c.class, c.reason)
			}
		})
	}
}
