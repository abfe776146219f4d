package substrate

import (
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"net/url"
	"strings"

	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

// ClusterName is the name of the cluster a pool's substrate creates
// (docs/substrates.md): `fa-<P>-<S>`, P being the pool name with "." and
// "_" turned to "-", cut to 30 characters, and S the owner's suffix (from
// the installation and the pool id, so that two installations never pick
// the same name). It is derived, never random, so that a create retried
// after a lost answer finds the first attempt's cluster; it fits GKE's 40
// characters.
func ClusterName(pool string, o providers.Owner) string {
	p := strings.NewReplacer(".", "-", "_", "-").Replace(pool)
	if len(p) > 30 {
		p = p[:30]
	}
	return "fa-" + p + "-" + o.Suffix()
}

// ownName reports whether a cluster's name is one this project gives a
// cluster of the owner's pool.
func ownName(name string, o providers.Owner) bool {
	suffix := o.Suffix()
	return strings.HasPrefix(name, "fa-") && strings.HasSuffix(name, "-"+suffix) && len(name) > len("fa--")+len(suffix)
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

// OwnerOf is who the objects of a recorded substrate belong to: its pool in
// the state file's installation, with the legacy names of a substrate
// recorded before names derived from the installation.
func OwnerOf(store *state.Store, poolID string) (providers.Owner, error) {
	o := providers.Owner{Installation: store.Installation(), PoolID: poolID}
	err := store.View(func(tx *state.Tx) error {
		w, err := tx.SubstrateWant(poolID)
		if w != nil {
			o.Legacy = w.LegacyNames
		}
		return err
	})
	return o, err
}
