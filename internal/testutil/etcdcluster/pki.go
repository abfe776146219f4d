package etcdcluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// TLSFiles are the PEM files of a cluster started with TLS: the CA every
// member and client trusts, and a client certificate signed by it (etcd is
// started with --client-cert-auth, so a client without one is refused at
// the handshake). They are the paths an agent's state.etcd.tls names.
type TLSFiles struct {
	CA   string
	Cert string
	Key  string
}

// Config is the client side TLS configuration these files make.
func (f TLSFiles) Config() (*tls.Config, error) {
	ca, err := os.ReadFile(f.CA)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("etcdcluster: %s holds no certificate", f.CA)
	}
	pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, err
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, nil
}

// pki holds what the members serve with, beside the client's files.
type pki struct {
	client TLSFiles
	// The members' one certificate: serving to clients and peers, and a
	// client of its peers (both extended key usages), for loopback only.
	memberCert, memberKey string
}

// ECDSA P-256: a key takes microseconds, and etcd's Go TLS accepts it.
func newKey() (*ecdsa.PrivateKey, []byte, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return nil, nil, err
	}
	return k, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
}

func writeFile(path string, data []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return os.WriteFile(path, data, mode)
}

// newPKI writes a CA, the members' certificate and a client certificate
// under dir. A day of validity: longer than any test run, worthless soon
// after.
func newPKI(dir string) (*pki, error) {
	now := time.Now()
	notAfter := now.Add(24 * time.Hour)
	caKey, caKeyPEM, err := newKey()
	if err != nil {
		return nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: "fleet-agent etcdcluster CA"},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	p := &pki{client: TLSFiles{CA: filepath.Join(dir, "ca.crt")}}
	if err := writeFile(p.client.CA, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o644); err != nil {
		return nil, err
	}
	if err := writeFile(filepath.Join(dir, "ca.key"), caKeyPEM, 0o600); err != nil {
		return nil, err
	}
	leaf := func(cn string, usage []x509.ExtKeyUsage, certPath, keyPath string) error {
		k, kPEM, err := newKey()
		if err != nil {
			return err
		}
		sn, err := serial()
		if err != nil {
			return err
		}
		tmpl := &x509.Certificate{
			SerialNumber: sn,
			Subject:      pkix.Name{CommonName: cn},
			NotBefore:    now.Add(-time.Minute),
			NotAfter:     notAfter,
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  usage,
			DNSNames:     []string{"localhost"},
			IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &k.PublicKey, caKey)
		if err != nil {
			return err
		}
		if err := writeFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
			return err
		}
		return writeFile(keyPath, kPEM, 0o600)
	}
	p.memberCert, p.memberKey = filepath.Join(dir, "member.crt"), filepath.Join(dir, "member.key")
	if err := leaf("etcd member", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, p.memberCert, p.memberKey); err != nil {
		return nil, err
	}
	p.client.Cert, p.client.Key = filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key")
	// With --client-cert-auth and authentication on, etcd takes a
	// certificate's common name as the user when a request carries no
	// password token: this name is no user's, so the test of a client
	// without credentials sees a refusal.
	if err := leaf("etcdcluster client", []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, p.client.Cert, p.client.Key); err != nil {
		return nil, err
	}
	return p, nil
}
