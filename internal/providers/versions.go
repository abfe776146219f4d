package providers

import (
	"slices"
	"strconv"
	"strings"
)

// MinorOf is the Kubernetes minor ("1.33") of a version as a provider
// spells it ("1.33.5-gke.1400000", "v1.33.2", "1.33.2-do.0", "1.33"); ""
// when it holds none ("latest").
func MinorOf(version string) string {
	maj, rest, ok := strings.Cut(strings.TrimPrefix(version, "v"), ".")
	if !ok {
		return ""
	}
	if i := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		rest = rest[:i]
	}
	x, err1 := strconv.Atoi(maj)
	y, err2 := strconv.Atoi(rest)
	if err1 != nil || err2 != nil || x < 0 || y < 0 {
		return ""
	}
	return strconv.Itoa(x) + "." + strconv.Itoa(y)
}

// Minors are the distinct minors of versions, oldest first; what holds no
// minor is left out.
func Minors(versions []string) []string {
	var out []string
	for _, v := range versions {
		if m := MinorOf(v); m != "" && !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	slices.SortFunc(out, compareMinors)
	return out
}

// compareMinors orders two minors ("1.9" before "1.10").
func compareMinors(a, b string) int {
	ax, ay, _ := strings.Cut(a, ".")
	bx, by, _ := strings.Cut(b, ".")
	x1, _ := strconv.Atoi(ax)
	x2, _ := strconv.Atoi(bx)
	if x1 != x2 {
		return x1 - x2
	}
	y1, _ := strconv.Atoi(ay)
	y2, _ := strconv.Atoi(by)
	return y1 - y2
}
