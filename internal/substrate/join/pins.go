package join

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Pin is a certificate's pin as substrate.nodeDaemon.caPins holds it:
// "sha256/" and the standard base64 of the SHA-256 of its
// SubjectPublicKeyInfo. A pin names a key, so a certificate renewed with the
// same key keeps its pin.
func Pin(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return "sha256/" + base64.StdEncoding.EncodeToString(sum[:])
}

// checkPin reports whether s is a pin (the form config.checkPin accepts).
func checkPin(s string) bool {
	b64, ok := strings.CutPrefix(s, "sha256/")
	raw, err := base64.StdEncoding.DecodeString(b64)
	return ok && err == nil && len(raw) == sha256.Size
}

// Presented is a certificate the join listener presented, as a message
// shows it.
type Presented struct {
	Pin      string
	Subject  string
	NotAfter time.Time
}

func presented(certs []*x509.Certificate) []Presented {
	out := make([]Presented, 0, len(certs))
	for _, c := range certs {
		out = append(out, Presented{Pin: Pin(c), Subject: c.Subject.String(), NotAfter: c.NotAfter})
	}
	return out
}

func describe(ps []Presented) string {
	var parts []string
	for _, p := range ps {
		parts = append(parts, fmt.Sprintf("%s (subject %q, valid until %s)", p.Pin, p.Subject, p.NotAfter.UTC().Format(time.RFC3339)))
	}
	if len(parts) == 0 {
		return "no certificate"
	}
	return strings.Join(parts, ", then ")
}

// PinMismatchError says the join listener presented no certificate that
// matches the pins.
type PinMismatchError struct {
	Pins      []string
	Presented []Presented
	// Chain is why a pinned certificate of the chain did not vouch for the
	// listener's own certificate ("" when none matched at all).
	Chain string
}

func (e *PinMismatchError) Error() string {
	msg := fmt.Sprintf("no certificate the join listener presented matches caPins [%s]; it presented %s",
		strings.Join(e.Pins, " "), describe(e.Presented))
	if e.Chain != "" {
		msg += "; a pinned certificate is in its chain but does not vouch for it: " + e.Chain
	}
	return msg + "; set substrate.nodeDaemon.caPins to the listener's pin, or give the listener the pinned certificate"
}

// pinnedTLS trusts the join listener by pins instead of roots: the
// connection is accepted when the listener's own certificate has a pinned
// key (the handshake proved it holds that key, so neither the name nor the
// dates are asked of it: the pin names exactly that key), or when a
// certificate of the chain it sent has a pinned key and vouches for its
// certificate for host, the host of joinURL (a pinned CA). host is checked
// whether it is a name or an IP address: for an IP, Go sends no server name,
// so the ConnectionState's ServerName is empty and cannot stand for it, and
// without the check any certificate the CA ever signed would collect the
// join token. A pinned CA that the listener does not send in its chain
// cannot be checked: pin the listener's own key then.
func pinnedTLS(pins []string, host string) *tls.Config {
	pinned := map[string]bool{}
	for _, p := range pins {
		pinned[p] = true
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		// Verification is VerifyConnection's (by pins), which Go runs on
		// every handshake, resumed ones too.
		InsecureSkipVerify: true,
		ClientSessionCache: tls.NewLRUClientSessionCache(4),
		VerifyConnection: func(cs tls.ConnectionState) error {
			certs := cs.PeerCertificates
			mismatch := &PinMismatchError{Pins: pins, Presented: presented(certs)}
			if len(certs) == 0 {
				return mismatch
			}
			if pinned[Pin(certs[0])] {
				return nil
			}
			roots, inter := x509.NewCertPool(), x509.NewCertPool()
			anchored := false
			for _, c := range certs[1:] {
				if pinned[Pin(c)] {
					roots.AddCert(c)
					anchored = true
				} else {
					inter.AddCert(c)
				}
			}
			if !anchored {
				return mismatch
			}
			if _, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, DNSName: host}); err != nil {
				mismatch.Chain = err.Error()
				return mismatch
			}
			return nil
		},
	}
}

// untrusted returns, for a TLS error of the system roots, the certificates
// the listener presented.
func untrusted(err error) ([]Presented, bool) {
	if ve, ok := errors.AsType[*tls.CertificateVerificationError](err); ok {
		return presented(ve.UnverifiedCertificates), true
	}
	if he, ok := errors.AsType[x509.HostnameError](err); ok && he.Certificate != nil {
		return presented([]*x509.Certificate{he.Certificate}), true
	}
	if ue, ok := errors.AsType[x509.UnknownAuthorityError](err); ok && ue.Cert != nil {
		return presented([]*x509.Certificate{ue.Cert}), true
	}
	return nil, false
}
