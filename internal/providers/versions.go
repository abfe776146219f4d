package providers

import (
	"fmt"
	"strconv"
	"strings"
)

// MaxKubeletLag is how many minors a node pool's kubelets may trail the
// control plane (the Kubernetes version skew policy).
const MaxKubeletLag = 3

// Minor reads the major and minor leading a Kubernetes version as the
// providers spell it ("1.34", "1.34.3-gke.1100000", "1.34.2-do.1").
func Minor(v string) (int, int, bool) {
	maj, rest, ok := strings.Cut(v, ".")
	if !ok {
		return 0, 0, false
	}
	if i := strings.IndexAny(rest, ".-"); i >= 0 {
		rest = rest[:i]
	}
	x, err1 := strconv.Atoi(maj)
	y, err2 := strconv.Atoi(rest)
	return x, y, err1 == nil && err2 == nil && x >= 0 && y >= 0
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
