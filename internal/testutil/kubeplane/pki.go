package kubeplane

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki is what one plane trusts: a CA of its own, the apiserver's serving
// certificate, the webhook's serving certificate (both signed by the CA, so
// a client trusts one PEM), and the service account signing key.
type pki struct {
	caPEM      []byte
	caFile     string
	serverCert string
	serverKey  string
	webhookTLS tls.Certificate
	saKey      string
	saPub      string
	adminToken string
	kcmToken   string
	schedToken string
	kwokToken  string
	tokensFile string
}

// ECDSA P-256 everywhere: a key takes microseconds where RSA 2048 takes tens
// of milliseconds, and kube-apiserver accepts it for serving and for
// service account tokens (ES256).
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

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return n
}

func token() string {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

func writeFile(path string, data []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return os.WriteFile(path, data, mode)
}

// newPKI writes the plane's keys and certificates under dir/pki. Every
// certificate names only loopback: nothing here is meant to be reached from
// elsewhere.
func newPKI(dir string) (*pki, error) {
	p := &pki{}
	base := filepath.Join(dir, "pki")
	now := time.Now()
	// A day is longer than any test binary runs and short enough that a
	// leaked file is worthless soon.
	notAfter := now.Add(24 * time.Hour)

	caKey, caKeyPEM, err := newKey()
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "fleet-agent kubeplane CA"},
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
	p.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	p.caFile = filepath.Join(base, "ca.crt")
	if err := writeFile(p.caFile, p.caPEM, 0o644); err != nil {
		return nil, err
	}
	if err := writeFile(filepath.Join(base, "ca.key"), caKeyPEM, 0o600); err != nil {
		return nil, err
	}

	leaf := func(cn string, dns []string) ([]byte, []byte, error) {
		k, kPEM, err := newKey()
		if err != nil {
			return nil, nil, err
		}
		tmpl := &x509.Certificate{
			SerialNumber: serial(),
			Subject:      pkix.Name{CommonName: cn},
			NotBefore:    now.Add(-time.Minute),
			NotAfter:     notAfter,
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			DNSNames:     dns,
			IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &k.PublicKey, caKey)
		if err != nil {
			return nil, nil, err
		}
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), kPEM, nil
	}

	// The in-cluster names too: a client given the in-cluster address of
	// the API (kubernetes.default.svc) through a resolver override still
	// verifies.
	crt, key, err := leaf("kube-apiserver", []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"})
	if err != nil {
		return nil, err
	}
	p.serverCert, p.serverKey = filepath.Join(base, "apiserver.crt"), filepath.Join(base, "apiserver.key")
	if err := writeFile(p.serverCert, crt, 0o644); err != nil {
		return nil, err
	}
	if err := writeFile(p.serverKey, key, 0o600); err != nil {
		return nil, err
	}

	crt, key, err = leaf("kubeplane token webhook", []string{"localhost"})
	if err != nil {
		return nil, err
	}
	if p.webhookTLS, err = tls.X509KeyPair(crt, key); err != nil {
		return nil, err
	}

	_, saKeyPEM, err := newKey()
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(saKeyPEM)
	saKey, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil {
		return nil, err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}
	p.saKey, p.saPub = filepath.Join(base, "sa.key"), filepath.Join(base, "sa.pub")
	if err := writeFile(p.saKey, saKeyPEM, 0o600); err != nil {
		return nil, err
	}
	if err := writeFile(p.saPub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o644); err != nil {
		return nil, err
	}

	// Static tokens: the test's admin (system:masters), and one identity per
	// component. The controller-manager and the scheduler run as the users
	// Kubernetes' bootstrap RBAC policy grants their roles to, as kubeadm
	// sets them up; kwok stands in for every kubelet and gets
	// system:masters (no Node authorizer here).
	p.adminToken, p.kcmToken, p.schedToken, p.kwokToken = token(), token(), token(), token()
	p.tokensFile = filepath.Join(base, "tokens.csv")
	csv := fmt.Sprintf("%s,kubeplane-admin,kubeplane-admin,\"system:masters\"\n"+
		"%s,system:kube-controller-manager,system:kube-controller-manager\n"+
		"%s,system:kube-scheduler,system:kube-scheduler\n"+
		"%s,kubeplane-kwok,kubeplane-kwok,\"system:masters\"\n",
		p.adminToken, p.kcmToken, p.schedToken, p.kwokToken)
	if err := writeFile(p.tokensFile, []byte(csv), 0o600); err != nil {
		return nil, err
	}
	return p, nil
}
