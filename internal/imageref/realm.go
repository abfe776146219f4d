package imageref

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// The token handshake sends the registry's credential to the token service
// the registry names (its realm), as docker does: a registry whose token
// service is another host (Docker Hub's auth.docker.io, Harbor's or
// GitLab's on another address, loopback or private included) is followed.
// What is refused is a realm on a link-local address (169.254.0.0/16,
// fe80::/10: the clouds' instance metadata services live there) or named
// as a metadata service, written as an address or resolving to one: a
// registry naming one is trying to turn the agent into a client of the
// box's metadata service, and is not asked.

// MaxTokenBytes bounds a token service's answer.
const MaxTokenBytes = 1 << 20

// metadataNames are the cloud metadata services' names; they resolve to
// link-local addresses on the cloud's boxes, and are refused by name too,
// so that no lookup is needed to refuse them.
var metadataNames = map[string]bool{
	"metadata.google.internal":   true,
	"metadata.goog":              true,
	"metadata":                   true,
	"instance-data":              true,
	"instance-data.ec2.internal": true,
}

// awsIMDSv6 is the AWS metadata service's IPv6 address (not link-local).
var awsIMDSv6 = netip.MustParseAddr("fd00:ec2::254")

// realmError is a realm refused before any request is sent to it.
type realmError struct {
	realm  string
	reason string
}

func (e *realmError) Error() string {
	return fmt.Sprintf("the token service (realm) %q %s", cut(e.realm, 200), e.reason)
}

func cut(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// refusedAddr says why an address may not be a realm's ("" when it may).
func refusedAddr(a netip.Addr) string {
	a = a.Unmap()
	switch {
	case a.IsLinkLocalUnicast(), a.IsLinkLocalMulticast():
		return fmt.Sprintf("is on the link-local address %s, where cloud metadata services answer", a)
	case a == awsIMDSv6:
		return fmt.Sprintf("is on %s, the AWS instance metadata service", a)
	case a.IsUnspecified():
		return fmt.Sprintf("is on the unspecified address %s", a)
	}
	return ""
}

// checkRealm refuses a realm URL whose scheme or host may not be sent the
// credential: https, or http for a registry itself asked over http; not a
// metadata service by name, address or what the name resolves to.
func checkRealm(ctx context.Context, u *url.URL, insecure bool) error {
	realm := u.Redacted()
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && insecure:
	case u.Scheme == "http":
		return &realmError{realm, "is plain http for a registry asked over https; the credential is not sent in the clear"}
	default:
		return &realmError{realm, fmt.Sprintf("has the scheme %q; it must be https (or http for a registry asked over http)", cut(u.Scheme, 20))}
	}
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if host == "" {
		return &realmError{realm, "names no host"}
	}
	if metadataNames[host] {
		return &realmError{realm, "names a cloud metadata service"}
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if why := refusedAddr(a); why != "" {
			return &realmError{realm, why}
		}
		return nil
	}
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return err // unreachable, as any name that does not resolve
	}
	for _, a := range addrs {
		if why := refusedAddr(a); why != "" {
			return &realmError{realm, "resolves to an address that " + why}
		}
	}
	return nil
}

// realmTransport is the default transport with a dial that refuses the
// addresses checkRealm does: a name that resolved elsewhere when checked
// and to a metadata address when dialled is refused at the dial.
func realmTransport() http.RoundTripper {
	t := defaultTransport().(*http.Transport)
	d := &net.Dialer{Control: func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return err
		}
		if why := refusedAddr(ap.Addr()); why != "" {
			return &realmError{address, why}
		}
		return nil
	}}
	t.DialContext = d.DialContext
	return t
}

// token asks the realm of a Bearer challenge for a pull token: with the
// credential as basic auth (GET, the Docker token protocol), or with an
// identity token (POST, the OAuth2 form), or anonymously.
func (r Resolver) token(ctx context.Context, ch *transport.Challenge, cred *authn.AuthConfig, scope string) (string, error) {
	if cred.RegistryToken != "" {
		return cred.RegistryToken, nil
	}
	realm := ch.Parameters["realm"]
	u, err := url.Parse(realm)
	if err != nil {
		return "", &realmError{realm, "is not a URL"}
	}
	if err := checkRealm(ctx, u, ch.Insecure); err != nil {
		return "", err
	}
	rt := r.Transport
	if rt == nil {
		rt = realmTransport()
	}
	client := &http.Client{Transport: rt, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if len(via) >= 10 {
			return &redirectLoop{n: len(via)}
		}
		return checkRealm(req.Context(), req.URL, ch.Insecure)
	}}
	var req *http.Request
	if cred.IdentityToken != "" {
		form := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {cred.IdentityToken},
			"scope": {scope}, "client_id": {"fleet-agent"}}
		if s := ch.Parameters["service"]; s != "" {
			form.Set("service", s)
		}
		req, err = http.NewRequestWithContext(ctx, http.MethodPost, u.String(), strings.NewReader(form.Encode()))
		if err != nil {
			return "", err
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	} else {
		q := u.Query()
		q.Set("scope", scope)
		if s := ch.Parameters["service"]; s != "" {
			q.Set("service", s)
		}
		u.RawQuery = q.Encode()
		req, err = http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
		if err != nil {
			return "", err
		}
		if cred.Username != "" || cred.Password != "" {
			// net/http drops it on a redirect to another host.
			req.SetBasicAuth(cred.Username, cred.Password)
		}
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if err := transport.CheckError(resp, http.StatusOK); err != nil {
		return "", err
	}
	var tok struct {
		Token       string `json:"token"`
		AccessToken string `json:"access_token"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, MaxTokenBytes)).Decode(&tok); err != nil {
		return "", &badToken{"is not a token's JSON"}
	}
	if tok.Token == "" {
		tok.Token = tok.AccessToken
	}
	if tok.Token == "" {
		return "", &badToken{"has no token"}
	}
	return tok.Token, nil
}

type badToken struct{ why string }

func (e *badToken) Error() string { return "the token service's answer " + e.why }

type redirectLoop struct{ n int }

// stopLoops is net/http's redirect policy (at most 10), with an error that
// says the registry looped.
func stopLoops(_ *http.Request, via []*http.Request) error {
	if len(via) >= 10 {
		return &redirectLoop{n: len(via)}
	}
	return nil
}

func (e *redirectLoop) Error() string { return fmt.Sprintf("stopped after %d redirects", e.n) }
