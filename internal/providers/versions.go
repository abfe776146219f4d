package providers

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// MaxKubeletLag is how many minors a node pool's kubelets may trail the
// control plane (the Kubernetes version skew policy).
const MaxKubeletLag = 3

// Minor reads the major and minor leading a Kubernetes version as the
// providers spell it ("1.34", "1.34.3-gke.1100000", "1.34.2-do.1"), as
// numbers (MinorOf's answer).
func Minor(v string) (int, int, bool) {
	m := MinorOf(v)
	if m == "" {
		return 0, 0, false
	}
	maj, mi, _ := strings.Cut(m, ".")
	x, _ := strconv.Atoi(maj)
	y, _ := strconv.Atoi(mi)
	return x, y, true
}

// NextPoolVersion is the one step a node pool's kubelets take toward want:
// the next minor after have, never past the control plane's. It answers ""
// when the pool is where it should be (want "" or reached), Invalid for a
// version that is not a minor or is a downgrade, and Conflict when the next
// minor waits for the control plane to get there first (the caller retries
// once it has).
func NextPoolVersion(op, pool, have, want, controlPlane string) (string, error) {
	if want == "" {
		return "", nil
	}
	wx, wy, ok := Minor(want)
	if !ok {
		return "", Invalidf(op, "version", "node pool %s: %q is not a Kubernetes minor version (like \"1.34\")", pool, want)
	}
	hx, hy, ok := Minor(have)
	if !ok {
		return "", Errorf(op, Unknown, None, "node pool %s reports version %q, which is not a Kubernetes version; read it again", pool, have)
	}
	switch {
	case hx == wx && hy == wy:
		return "", nil
	case hx > wx || hx == wx && hy > wy:
		return "", Invalidf(op, "downgrade", "node pool %s runs %d.%d; its kubelets cannot go down to %s: make a new node pool instead", pool, hx, hy, want)
	case hx != wx:
		return "", Invalidf(op, "version", "node pool %s runs %d.%d; an upgrade to another major (%s) is not made in place", pool, hx, hy, want)
	}
	next := fmt.Sprintf("%d.%d", hx, hy+1)
	cx, cy, ok := Minor(controlPlane)
	if !ok {
		return "", Errorf(op, Unknown, None, "the control plane of node pool %s reports version %q, which is not a Kubernetes version; read it again", pool, controlPlane)
	}
	if cx != hx || cy < hy+1 {
		return "", Errorf(op, Conflict, None, "node pool %s waits for its control plane (on %d.%d) to reach %s: a kubelet is never newer than its API server", pool, cx, cy, next)
	}
	return next, nil
}

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
