package gitsync

import (
	"context"
	"os"
	"time"
)

// Probe is what one listing of the remote says, for `fleet-agent doctor`:
// whether the remote answers with these credentials, how many refs it has,
// and the commit of the followed branch.
type Probe struct {
	Refs int
	// Branch is the commit at the tip of Config.Branch; "" when the remote
	// has no such branch.
	Branch string
	// Keys is how many keys the keyring holds; 0 without verification.
	Keys int
}

// ProbeRemote lists the remote's refs once, with the configured
// credentials, and reads the keyring when one is configured. It touches
// no local copy: it works beside a running agent, whose copy it must not
// lock. Errors are the package's (KindAuth, KindUnreachable, ...).
func ProbeRemote(ctx context.Context, cfg Config) (Probe, error) {
	if cfg.Dir == "" {
		// normalise wants a directory; a probe writes none.
		cfg.Dir = os.TempDir()
	}
	if cfg.ListTimeout <= 0 {
		cfg.ListTimeout = 15 * time.Second
	}
	rem, err := cfg.normalise()
	if err != nil {
		return Probe{}, err
	}
	r := &Repo{cfg: cfg, remote: rem}
	var p Probe
	if cfg.KeyringPath != "" || len(cfg.Keyring) > 0 {
		keys, err := r.keyring()
		if err != nil {
			return p, err
		}
		p.Keys = len(keys)
	}
	auth, err := r.authMethod(ctx)
	if err != nil {
		return p, err
	}
	refs, err := r.list(ctx, auth)
	if err != nil {
		return p, err
	}
	p.Refs = len(refs)
	for _, ref := range refs {
		if ref.Name().String() == r.BranchRef() {
			p.Branch = ref.Hash().String()
		}
	}
	return p, nil
}
