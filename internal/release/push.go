package release

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

// ParseTarget reads a PUSH target: a registry reference with a tag
// (registry.example/team/fleet-agent:v1.2.3). A digest is refused: a push
// names where to put the image, the digest is what comes out.
func ParseTarget(target string, insecure bool) (name.Tag, error) {
	if target == "" {
		return name.Tag{}, refusal.New(refusal.InvalidInput, "PUSH is empty: give the image's place as registry/name:tag, e.g. PUSH=ghcr.io/team/fleet-agent:v1.2.3")
	}
	var opts []name.Option
	if insecure {
		opts = append(opts, name.Insecure)
	}
	tag, err := name.NewTag(target, append(opts, name.StrictValidation)...)
	if err != nil {
		return name.Tag{}, refusal.Wrap(refusal.InvalidInput, err,
			"PUSH=%q is not an image reference with a tag: give registry/name:tag, lower-case name, e.g. PUSH=ghcr.io/team/fleet-agent:v1.2.3", target)
	}
	return tag, nil
}

// Push sends the index to target with the credentials of the standard
// Docker chain (DOCKER_CONFIG or ~/.docker/config.json, and its credential
// helpers) and returns the pushed digest reference (name@sha256:...), the
// form to pin a DaemonSet to.
func Push(ctx context.Context, idx v1.ImageIndex, target name.Tag, keychain authn.Keychain, rt http.RoundTripper) (name.Digest, error) {
	if keychain == nil {
		keychain = authn.DefaultKeychain
	}
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(keychain)}
	if rt != nil {
		opts = append(opts, remote.WithTransport(rt))
	}
	if err := remote.WriteIndex(target, idx, opts...); err != nil {
		return name.Digest{}, pushError(target, err)
	}
	d, err := idx.Digest()
	if err != nil {
		return name.Digest{}, refusal.Wrap(refusal.Internal, err, "digesting the index")
	}
	return target.Context().Digest(d.String()), nil
}

// pushError says which of the three things to fix: the credential, the
// registry's address, or (anything else) what the registry said.
func pushError(target name.Tag, err error) error {
	reg := target.RegistryStr()
	var te *transport.Error
	if errors.As(err, &te) {
		switch te.StatusCode {
		case http.StatusUnauthorized, http.StatusForbidden:
			return refusal.Wrap(refusal.Unavailable, err,
				"the registry %s refused the push for want of a credential that may write %s: run `docker login %s` (or set DOCKER_CONFIG to a directory whose config.json has one, or a credential helper for it)",
				reg, target.Context().Name(), reg)
		}
	}
	var ne net.Error
	var ue *url.Error
	var oe *net.OpError
	if errors.As(err, &oe) || errors.As(err, &ue) || errors.As(err, &ne) {
		return refusal.Wrap(refusal.Unavailable, err,
			"the registry %s cannot be reached: check the host and port in PUSH (and that it speaks HTTPS, or use -insecure for a plain-HTTP registry on a trusted network)", reg)
	}
	return refusal.Wrap(refusal.Unavailable, err, "pushing to %s failed", target.String())
}

// WriteLayout writes the index as an OCI image layout directory (the form
// kept in dist/ and read by skopeo's oci: transport), replacing dir.
func WriteLayout(dir, refName string, idx v1.ImageIndex) error {
	if err := os.RemoveAll(dir); err != nil {
		return refusal.Wrap(refusal.InvalidState, err, "clearing %s", dir)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return refusal.Wrap(refusal.InvalidState, err, "creating %s", filepath.Dir(dir))
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return refusal.Wrap(refusal.InvalidState, err, "creating the OCI layout %s", dir)
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": refName})); err != nil {
		return refusal.Wrap(refusal.InvalidState, err, "writing the index into %s", dir)
	}
	return nil
}

// Target is a parsed PUSH target, when one was given.
type Target struct {
	Tag name.Tag
	Set bool
}
