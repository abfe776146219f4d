package substrate

import (
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"net/url"
	"strings"
)

// ClusterName is the name of the cluster a pool's substrate creates
// (docs/substrates.md): `fa-<P>-<last 6 of the pool id>`, P being the
// pool name with "." and "_" turned to "-", cut to 30 characters. It is
// derived, never random, so that a create retried after a lost answer finds
// the first attempt's cluster; it fits GKE's 40 characters.
func ClusterName(pool, poolID string) string {
	p := strings.NewReplacer(".", "-", "_", "-").Replace(pool)
	if len(p) > 30 {
		p = p[:30]
	}
	return "fa-" + p + "-" + tail6(poolID)
}

func tail6(poolID string) string {
	if len(poolID) > 6 {
		return poolID[len(poolID)-6:]
	}
	return poolID
}

// ownName reports whether a cluster's name is one this project gives a
// cluster of the pool poolID.
func ownName(name, poolID string) bool {
	return strings.HasPrefix(name, "fa-") && strings.HasSuffix(name, "-"+tail6(poolID)) && len(name) > len("fa--")+len(tail6(poolID))
}

// ownNodePool reports whether a node pool name is one the substrate of
// poolID gives its flavors.
func ownNodePool(name, poolID string) bool {
	return strings.HasPrefix(name, "fa-"+tail6(poolID)+"-")
}

// opKey is the journal key of one operation: `<pool id>/<step>/<object>/g<gen>`
// with `.r<n>` for the n-th repeat of the same step within a generation (a
// ghost made again). The object is path-escaped, so a provider id holding a
// slash stays one key segment.
func opKey(poolID, step, object string, gen uint64, repeat int) string {
	k := fmt.Sprintf("%s/%s/%s/g%d", poolID, step, url.PathEscape(object), gen)
	if repeat > 0 {
		k += fmt.Sprintf(".r%d", repeat)
	}
	return k
}

var tokenEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// ClientToken is the idempotency key of an operation, derived from its
// journal key: `fa` and 40 lowercase base32 characters of SHA-256. Its 42
// characters fit EKS's clientRequestToken (33 to 126), and its alphabet a GCP
// label value, where adapters without a token field carry it.
func ClientToken(key string) string {
	sum := sha256.Sum256([]byte("fleet-agent:journal:" + key))
	return "fa" + strings.ToLower(tokenEncoding.EncodeToString(sum[:]))[:40]
}
