package providers

import (
	"slices"
	"testing"
)

func TestMinors(t *testing.T) {
	got := Minors([]string{"1.35.1-gke.1200000", "1.34.3-gke.1100000", "1.9.0", "v1.10.2", "1.34.1-gke.1", "latest", "1.33"})
	want := []string{"1.9", "1.10", "1.33", "1.34", "1.35"}
	if !slices.Equal(got, want) {
		t.Errorf("Minors = %q, want %q", got, want)
	}
	for in, want := range map[string]string{"1.32.2-do.0": "1.32", "": "", "latest": "", "1": "", "1.x": ""} {
		if got := MinorOf(in); got != want {
			t.Errorf("MinorOf(%q) = %q, want %q", in, got, want)
		}
	}
}
