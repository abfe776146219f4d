package fleet

import (
	"strings"
	"testing"
)

// TestGenerationNames: a generation name fits where its flavor's name
// fits (30 characters, or the flavor's own length), turns back into its
// generation, and two long flavors sharing a prefix never share one.
func TestGenerationNames(t *testing.T) {
	long1 := strings.Repeat("a", 27) + "xyz"
	long2 := strings.Repeat("a", 27) + "abc"
	for _, f := range []string{"h100", "gpu-g", long1, long2, strings.Repeat("b", 40)} {
		if GenerationName(f, 1) != f {
			t.Fatalf("generation 1 of %s is %s", f, GenerationName(f, 1))
		}
		for _, gen := range []int{2, 9, 10, 123, 100000} {
			n := GenerationName(f, gen)
			if len(n) > max(30, len(f)) {
				t.Fatalf("%s generation %d: %q is %d characters", f, gen, n, len(n))
			}
			if got, ok := GenerationOf(f, n); !ok || got != gen {
				t.Fatalf("%s generation %d: %q reads back as %d %v", f, gen, n, got, ok)
			}
			if _, ok := GenerationOf("other", n); ok {
				t.Fatalf("%q is taken for a generation of another flavor", n)
			}
			if strings.Contains(n, "--") && !strings.Contains(f, "--") {
				t.Fatalf("%q holds a double hyphen", n)
			}
		}
		if GenerationName(long1, 2) == GenerationName(long2, 2) {
			t.Fatalf("two flavors share %s", GenerationName(long1, 2))
		}
	}
	for _, n := range []string{"h100-g", "h100-g1", "h100-g02", "h100-gx", "h100x-g2"} {
		if gen, ok := GenerationOf("h100", n); ok {
			t.Fatalf("%q taken for generation %d of h100", n, gen)
		}
	}
}
