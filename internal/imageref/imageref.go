// Package imageref is an image reference and the digest its tag names at
// the registry (docs/substrates.md, "Pin by digest"). It asks the registry
// the way docker and skopeo do: the OCI distribution API's HEAD of the
// tag's manifest, with the registry's token flow (anonymous, or with the
// Docker credential chain), and reads the Docker-Content-Digest header.
//
// It uses go-containerregistry's name, authn and remote/transport only: the
// reference grammar, the credential chain and the challenge (Ping) are the
// library's; the token request and the one HEAD are ours (realm.go says why
// the token request is), so that pkg/v1/remote and what it drags in
// (mutate, tarball, stream, zstd) stay out of the agent's binary.
package imageref

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/fleet-agent/fleet-agent/internal/imagepin"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/textline"
)

// DefaultTimeout bounds one resolution, the token handshake included: a
// registry slower than that leaves the tag as configured.
const DefaultTimeout = 20 * time.Second

// MaxHeaderBytes bounds the headers of one answer: a manifest's headers are
// a few hundred bytes, so a registry sending more is refused, not read.
const MaxHeaderBytes = 64 << 10

// manifestTypes are what the HEAD accepts: an index or a manifest, OCI or
// Docker. Without them a registry may answer the digest of a converted
// (schema 1) manifest, which no runtime pulls by.
var manifestTypes = []string{
	"application/vnd.oci.image.index.v1+json",
	"application/vnd.oci.image.manifest.v1+json",
	"application/vnd.docker.distribution.manifest.list.v2+json",
	"application/vnd.docker.distribution.manifest.v2+json",
}

var digestRe = regexp.MustCompile(`^sha256:[a-f0-9]{64}$`)

// Resolver asks registries for digests.
type Resolver struct {
	// Keychain finds credentials for a registry; nil: the Docker chain
	// (DOCKER_CONFIG or ~/.docker/config.json and its credential helpers),
	// anonymous where it has none.
	Keychain authn.Keychain
	// Transport carries the requests; nil: HTTPS with the system roots,
	// the environment's proxy and MaxHeaderBytes.
	Transport http.RoundTripper
	// Timeout bounds one Resolve; 0: DefaultTimeout.
	Timeout time.Duration
}

// Resolve returns ref with the digest its tag names at the registry,
// name:tag@sha256:..., the form a DaemonSet pins to. A ref that already has
// a digest is returned as it is, without a request.
func (r Resolver) Resolve(ctx context.Context, ref string) (string, error) {
	if imagepin.HasDigest(ref) {
		return ref, nil
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		return "", &imagepin.Error{Reason: imagepin.ReasonBadAnswer, Err: refusal.Wrap(refusal.InvalidInput, err,
			"%q is not an image reference with a tag; give registry/name:tag", ref)}
	}
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	// The answer is awaited no longer than the deadline, whatever part of
	// the request ignores it; the credential helper is killed then
	// (dockerChain).
	type answer struct {
		digest string
		err    error
	}
	done := make(chan answer, 1)
	running := new(atomic.Pointer[string])
	go func() {
		d, err := r.head(ctx, tag, running)
		done <- answer{d, err}
	}()
	var a answer
	select {
	case a = <-done:
	case <-ctx.Done():
		a.err = ctx.Err()
		// A helper still running at the deadline is what was waited for,
		// not the registry.
		if h := running.Load(); h != nil {
			a.err = &helperFailed{helper: *h, key: tag.RegistryStr(), hung: true}
		}
	}
	var hf *helperFailed
	if errors.As(a.err, &hf) && hf.hung {
		hf.after = timeout
	}
	if a.err != nil {
		return "", classify(tag, timeout, a.err)
	}
	return ref + "@" + a.digest, nil
}

// head makes the one request: the registry's challenge (transport.Ping),
// the token handshake when it asks for one (ours: the library's refuses a
// token service on a loopback or private address, where Harbor's and
// GitLab's often are), then HEAD of the tag's manifest.
func (r Resolver) head(ctx context.Context, tag name.Tag, running *atomic.Pointer[string]) (string, error) {
	kc := r.Keychain
	if kc == nil {
		kc = dockerChain{running: running}
	}
	auth, err := authn.Resolve(ctx, kc, tag.Context())
	if err != nil {
		return "", &credentialError{err}
	}
	cred, err := authn.Authorization(ctx, auth)
	if err != nil {
		return "", &credentialError{err}
	}
	rt := r.Transport
	if rt == nil {
		rt = defaultTransport()
	}
	reg := tag.Context().Registry
	ch, err := transport.Ping(ctx, reg, rt)
	if err != nil {
		return "", err
	}
	scheme := "https"
	if ch.Insecure {
		scheme = "http"
	}
	authz := ""
	switch {
	case strings.EqualFold(ch.Scheme, "bearer"):
		tok, err := r.token(ctx, ch, cred, tag.Context().Scope(transport.PullScope))
		if err != nil {
			return "", err
		}
		authz = "Bearer " + tok
	case cred.RegistryToken != "":
		authz = "Bearer " + cred.RegistryToken
	case cred.Username != "" || cred.Password != "":
		authz = "Basic " + base64.StdEncoding.EncodeToString([]byte(cred.Username+":"+cred.Password))
	}
	u := url.URL{Scheme: scheme, Host: tag.RegistryStr(),
		Path: "/v2/" + tag.RepositoryStr() + "/manifests/" + tag.TagStr()}
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, u.String(), nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Accept", strings.Join(manifestTypes, ", "))
	if authz != "" {
		// net/http drops it on a redirect to another host.
		req.Header.Set("Authorization", authz)
	}
	resp, err := (&http.Client{Transport: rt, CheckRedirect: stopLoops}).Do(req)
	if err != nil {
		return "", err
	}
	resp.Body.Close()
	if err := transport.CheckError(resp, http.StatusOK); err != nil {
		return "", err
	}
	// Every Docker-Content-Digest must name the same digest: taking the
	// first of two that disagree would pin whichever a proxy put first.
	vals := resp.Header.Values("Docker-Content-Digest")
	for _, v := range vals[min(1, len(vals)):] {
		if v != vals[0] {
			return "", &twoDigests{vals[0], v}
		}
	}
	got := resp.Header.Get("Docker-Content-Digest")
	if !digestRe.MatchString(got) {
		return "", &badDigest{got: got}
	}
	return got, nil
}

func defaultTransport() http.RoundTripper {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxResponseHeaderBytes = MaxHeaderBytes
	return t
}

type twoDigests struct{ a, b string }

func (e *twoDigests) Error() string {
	return fmt.Sprintf("two Docker-Content-Digest headers disagree (%q and %q)", cut(e.a, 80), cut(e.b, 80))
}

type credentialError struct{ err error }

func (e *credentialError) Error() string { return e.err.Error() }

func (e *credentialError) Unwrap() error { return e.err }

type badDigest struct{ got string }

func (e *badDigest) Error() string {
	// What came is not echoed whole: it is the registry's, of any length.
	got := e.got
	if len(got) > 80 {
		got = got[:80] + "..."
	}
	return fmt.Sprintf("Docker-Content-Digest is %q, not sha256:<64 hex digits>", got)
}

// classify words a failure by what to fix. Messages name the registry and
// the reference, never a credential: the library's errors carry the
// request's URL (without its query's tokens) and the registry's own text.
func classify(tag name.Tag, timeout time.Duration, err error) *imagepin.Error {
	reg, ref := tag.RegistryStr(), tag.String()
	var ce *credentialError
	var hf *helperFailed
	var bd *badDigest
	var te *transport.Error
	var re *realmError
	var bt *badToken
	var rl *redirectLoop
	var td *twoDigests
	switch {
	case errors.As(err, &re):
		return &imagepin.Error{Reason: imagepin.ReasonBadAnswer, Err: refusal.Wrap(refusal.InvalidState, re,
			"the registry %s named a token service the agent does not send its credential to, and nothing was sent there; a registry's token service must not be a cloud metadata service (docs/substrates.md, \"Pin by digest\")", reg)}
	case errors.As(err, &bt):
		return &imagepin.Error{Reason: imagepin.ReasonBadAnswer, Err: refusal.Wrap(refusal.Unavailable, bt,
			"the token service of the registry %s gave no token for %s", reg, ref)}
	case errors.As(err, &td):
		return &imagepin.Error{Reason: imagepin.ReasonBadAnswer, Err: refusal.Wrap(refusal.Unavailable, td,
			"the registry %s answered the manifest of %s with two digests; neither is taken", reg, ref)}
	case errors.As(err, &rl) || strings.Contains(err.Error(), "stopped after 10 redirects"):
		// The second: the library's ping, whose client is its own.
		if rl == nil {
			rl = &redirectLoop{n: 10}
		}
		return &imagepin.Error{Reason: imagepin.ReasonBadAnswer, Err: refusal.Wrap(refusal.Unavailable, rl,
			"the registry %s redirected the request for %s in a loop", reg, ref)}
	case errors.As(err, &hf):
		return &imagepin.Error{Reason: imagepin.ReasonCredential, Err: refusal.Wrap(refusal.InvalidState, hf,
			"no credential for %s: run `echo %s | %s get` as the agent's user to see why", reg, hf.key, textline.Plain(hf.helper))}
	case errors.As(err, &ce):
		return &imagepin.Error{Reason: imagepin.ReasonCredential, Err: refusal.Wrap(refusal.InvalidState, errors.New("the credential chain failed"),
			"the Docker credential chain could not give a credential for %s; check DOCKER_CONFIG or ~/.docker/config.json", reg)}
	case errors.As(err, &bd):
		return &imagepin.Error{Reason: imagepin.ReasonBadAnswer, Err: refusal.Wrap(refusal.Unavailable, bd,
			"the registry %s answered the manifest of %s without a digest", reg, ref)}
	case errors.Is(err, context.DeadlineExceeded):
		return &imagepin.Error{Reason: imagepin.ReasonUnreachable, Err: refusal.New(refusal.Unavailable,
			"the registry %s did not answer for %s within %s; check that the agent's box reaches it", reg, ref, timeout)}
	case errors.As(err, &te):
		switch te.StatusCode {
		case http.StatusUnauthorized, http.StatusForbidden:
			return &imagepin.Error{Reason: imagepin.ReasonRefused, Err: refusal.Wrap(refusal.InvalidState, te,
				"the registry %s refused to show %s to the agent: give the agent's user a pull credential for it (`docker login %s` as that user, or DOCKER_CONFIG)", reg, ref, reg)}
		case http.StatusNotFound:
			return &imagepin.Error{Reason: imagepin.ReasonRefused, Err: refusal.Wrap(refusal.InvalidInput, te,
				"the registry %s has no %s; check the name and tag in substrate.nodeDaemon.image", reg, ref)}
		}
		return &imagepin.Error{Reason: imagepin.ReasonRefused, Err: refusal.Wrap(refusal.Unavailable, te, "the registry %s refused the manifest of %s", reg, ref)}
	}
	if strings.Contains(err.Error(), "server response headers exceeded") {
		return &imagepin.Error{Reason: imagepin.ReasonBadAnswer, Err: refusal.New(refusal.Unavailable,
			"the registry %s answered for %s with headers over %d bytes; it is not read", reg, ref, MaxHeaderBytes)}
	}
	var pe textproto.ProtocolError
	if errors.As(err, &pe) || strings.Contains(err.Error(), "malformed HTTP") || strings.Contains(err.Error(), "malformed MIME header") {
		// The registry's bytes are not echoed: they are what was malformed.
		return &imagepin.Error{Reason: imagepin.ReasonBadAnswer, Err: refusal.New(refusal.Unavailable,
			"the registry %s answered for %s with a malformed HTTP answer (a header or status line HTTP does not allow); it is not read", reg, ref)}
	}
	var ne net.Error
	var ue *url.Error
	if errors.As(err, &ue) || errors.As(err, &ne) {
		return &imagepin.Error{Reason: imagepin.ReasonUnreachable, Err: refusal.Wrap(refusal.Unavailable, err,
			"the registry %s cannot be reached for %s; check the host and port, and the network from the agent's box", reg, ref)}
	}
	return &imagepin.Error{Reason: imagepin.ReasonBadAnswer, Err: refusal.Wrap(refusal.Unavailable, err,
		"the registry %s gave an answer for %s that is not a manifest's", reg, ref)}
}
