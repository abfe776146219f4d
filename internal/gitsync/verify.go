package gitsync

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	pgperrors "github.com/ProtonMail/go-crypto/openpgp/errors"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
	"github.com/go-git/go-git/v5/plumbing"
)

// Signer is the trusted key that signed a commit.
type Signer struct {
	// KeyID is the 16-hex-digit id of the key (or subkey) that signed.
	KeyID string
	// Fingerprint is the primary key's fingerprint, uppercase hex.
	Fingerprint string
	// Identity is the key's first user id ("GitHub <noreply@github.com>").
	Identity string
}

// keyring reads the configured keyring; a path is read at each call so
// that an operator who appends a key (GitHub's web-flow key, say) needs no
// restart.
func (r *Repo) keyring() (openpgp.EntityList, error) {
	data := r.cfg.Keyring
	if len(data) == 0 && r.cfg.KeyringPath != "" {
		b, err := os.ReadFile(r.cfg.KeyringPath)
		if err != nil {
			return nil, fail(&Error{Kind: KindConfig, Path: r.cfg.KeyringPath, Message: "git.verify.keyring cannot be read", Err: err})
		}
		data = b
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, fail(&Error{Kind: KindConfig, Message: "signature verification needs git.verify.keyring: an armored OpenPGP keyring of the trusted keys"})
	}
	var list openpgp.EntityList
	// Operators build keyrings by concatenating exported keys: read every
	// armored block, not just the first.
	for len(bytes.TrimSpace(data)) > 0 {
		rd := bytes.NewReader(data)
		el, err := openpgp.ReadArmoredKeyRing(rd)
		if err != nil {
			return nil, fail(&Error{Kind: KindConfig, Message: "git.verify.keyring is not an armored OpenPGP keyring (gpg --export --armor)", Err: err})
		}
		list = append(list, el...)
		next := bytes.Index(data, []byte("-----END PGP PUBLIC KEY BLOCK-----"))
		if next < 0 {
			break
		}
		data = data[next+len("-----END PGP PUBLIC KEY BLOCK-----"):]
	}
	return list, nil
}

// Verify checks that commit is signed by a key of the keyring. It returns
// ErrUnsigned for a commit without signature, ErrUnknownKey for a signature
// by a key not in the keyring (or an ssh or x509 signature, which a keyring
// cannot vouch for), and ErrBadSignature when the signature does not verify
// (the commit was altered, or the key has expired or been revoked).
func (r *Repo) Verify(commit string) (Signer, error) {
	keys, err := r.keyring()
	if err != nil {
		return Signer{}, err
	}
	r.mu.Lock()
	c, err := r.commit(commit)
	if err != nil {
		r.mu.Unlock()
		return Signer{}, err
	}
	sig := c.PGPSignature
	signed := &plumbing.MemoryObject{}
	err = c.EncodeWithoutSignature(signed)
	r.mu.Unlock()
	if err != nil {
		return Signer{}, localError("encode commit "+commit, err)
	}
	if strings.TrimSpace(sig) == "" {
		return Signer{}, fail(&Error{Kind: KindUnsigned, Commit: commit, Message: fmt.Sprintf("commit %s is not signed; git.verify is on, so only commits signed by a key of the keyring are applied: sign it (or merge through GitHub and trust its web-flow key)", commit)})
	}
	if !strings.Contains(sig, "-----BEGIN PGP SIGNATURE-----") {
		return Signer{}, fail(&Error{Kind: KindUnknownKey, Commit: commit, Message: fmt.Sprintf("commit %s carries an ssh or x509 signature; only OpenPGP keys of git.verify.keyring are trusted", commit)})
	}
	rd, err := signed.Reader()
	if err != nil {
		return Signer{}, localError("encode commit "+commit, err)
	}
	defer rd.Close()
	cfg := &packet.Config{Time: r.cfg.Clock.Now}
	entity, err := openpgp.CheckArmoredDetachedSignature(keys, rd, strings.NewReader(sig), cfg)
	switch {
	case errors.Is(err, pgperrors.ErrUnknownIssuer):
		return Signer{}, fail(&Error{Kind: KindUnknownKey, Commit: commit, Message: fmt.Sprintf("commit %s is signed by %s, which is not in git.verify.keyring; add the key if you trust it", commit, issuerOf(sig)), Err: err})
	case err != nil:
		return Signer{}, fail(&Error{Kind: KindBadSignature, Commit: commit, Message: fmt.Sprintf("the signature on commit %s does not verify (the commit was altered, or the key expired or was revoked); it is not applied", commit), Err: err})
	}
	return signerOf(entity, sig), nil
}

// issuerOf names the key id a signature claims, for the message.
func issuerOf(armored string) string {
	id, ok := issuerID(armored)
	if !ok {
		return "an unknown key"
	}
	return fmt.Sprintf("key %016X", id)
}

func issuerID(armored string) (uint64, bool) {
	block, err := armorDecode(armored)
	if err != nil {
		return 0, false
	}
	p, err := packet.NewReader(block).Next()
	if err != nil {
		return 0, false
	}
	s, ok := p.(*packet.Signature)
	if !ok || s.IssuerKeyId == nil {
		return 0, false
	}
	return *s.IssuerKeyId, true
}

func signerOf(e *openpgp.Entity, sig string) Signer {
	s := Signer{Fingerprint: fmt.Sprintf("%X", e.PrimaryKey.Fingerprint)}
	if id, ok := issuerID(sig); ok {
		s.KeyID = fmt.Sprintf("%016X", id)
	} else {
		s.KeyID = e.PrimaryKey.KeyIdString()
	}
	names := make([]string, 0, len(e.Identities))
	for n := range e.Identities {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(names) > 0 {
		s.Identity = names[0]
	}
	return s
}

func armorDecode(armored string) (io.Reader, error) {
	b, err := armor.Decode(strings.NewReader(armored))
	if err != nil {
		return nil, err
	}
	return b.Body, nil
}
