package gcp

import (
	"fmt"
	"strings"
)

// GCP resource labels (a cluster's resourceLabels, a node pool's
// config.resourceLabels) take keys of lowercase letters, digits, '_' and
// '-', starting with a letter, 63 characters at most; this project's keys
// (fleet-agent.dev/substrate-pool) hold '.' and '/'. So keys are written
// with '_' as an escape: "_" becomes "__", "." becomes "_d", "/" becomes
// "_s". fleet-agent.dev/substrate-pool is stored as
// fleet-agent_ddev_ssubstrate-pool, and read back the other way; a key
// with no valid escape in it (the owner's "env", GKE's "goog-...") reads as
// it is. Values pass through unchanged: ours (pool ids, "spot") are already
// valid label values, and one that is not is refused rather than mangled.
// Kubernetes node labels (config.labels) take our keys as they are and are
// not encoded.

var (
	gcpKeyRE   = lazyRE(`^[a-z][a-z0-9_-]{0,62}$`)
	gcpValueRE = lazyRE(`^[a-z0-9_-]{0,63}$`)
)

func encodeKey(k string) (string, error) {
	var b strings.Builder
	for _, r := range k {
		switch r {
		case '_':
			b.WriteString("__")
		case '.':
			b.WriteString("_d")
		case '/':
			b.WriteString("_s")
		default:
			b.WriteRune(r)
		}
	}
	out := b.String()
	if !gcpKeyRE().MatchString(out) {
		return "", fmt.Errorf("label key %q cannot be a GCP resource label (lowercase letters, digits, '-', '.', '/' and '_', starting with a letter, 63 characters once encoded)", k)
	}
	return out, nil
}

// decodeKey reverses encodeKey; a key that is not an encoding reads as it
// is.
func decodeKey(k string) string {
	if !strings.Contains(k, "_") {
		return k
	}
	var b strings.Builder
	for i := 0; i < len(k); i++ {
		if k[i] != '_' {
			b.WriteByte(k[i])
			continue
		}
		if i+1 == len(k) {
			return k
		}
		switch k[i+1] {
		case '_':
			b.WriteByte('_')
		case 'd':
			b.WriteByte('.')
		case 's':
			b.WriteByte('/')
		default:
			return k
		}
		i++
	}
	return b.String()
}

// encodeLabels writes this project's labels as GCP resource labels.
func encodeLabels(labels map[string]string) (map[string]string, error) {
	if labels == nil {
		return nil, nil
	}
	out := make(map[string]string, len(labels))
	for k, v := range labels {
		ek, err := encodeKey(k)
		if err != nil {
			return nil, err
		}
		if !gcpValueRE().MatchString(v) {
			return nil, fmt.Errorf("label %s=%q: GCP label values hold lowercase letters, digits, '_' and '-' only, 63 at most", k, v)
		}
		out[ek] = v
	}
	return out, nil
}

// decodeLabels reads GCP resource labels back as this project's.
func decodeLabels(labels map[string]string) map[string]string {
	if len(labels) == 0 {
		return nil
	}
	out := make(map[string]string, len(labels))
	for k, v := range labels {
		out[decodeKey(k)] = v
	}
	return out
}
