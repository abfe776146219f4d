package fake

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"

	"github.com/fleet-agent/fleet-agent/internal/providers"
)

func tokenHash(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}

// caOf is a stand-in for the cluster's CA certificate: PEM-shaped, derived
// from the cluster, not a certificate anything can verify against.
func caOf(id string) []byte {
	h := sha256.Sum256([]byte("ca:" + id))
	return []byte("-----BEGIN CERTIFICATE-----\n" + base64.StdEncoding.EncodeToString(h[:]) + "\n-----END CERTIFICATE-----\n")
}

// Credentials mints an admin token for a running cluster, valid for
// providers.CredentialTTL on the injected clock, and records the access it
// grants inside the cluster.
func (f *Fake) Credentials(ctx context.Context, acct providers.Account, cluster providers.ClusterRef) (providers.Credential, error) {
	a, finish, err := f.call(ctx, "Credentials", &acct)
	if err != nil {
		return providers.Credential{}, err
	}
	// Backed by an API server, the node pools' Nodes are there before the
	// in-cluster half looks (it asks for a credential every pass).
	if err := f.syncNodes(ctx); err != nil {
		return providers.Credential{}, finish(err)
	}
	if err := f.lock(); err != nil {
		return providers.Credential{}, err
	}
	defer f.unlock()
	c, err := f.mustFind(a, cluster)
	switch {
	case err != nil:
		return providers.Credential{}, finish(err)
	case c.Status != providers.ClusterRunning && c.Status != providers.ClusterUpdating:
		return providers.Credential{}, finish(providers.Errorf("", providers.Conflict, providers.None, "cluster %s is %s; its API is not up", cluster, c.Status))
	}
	now := f.clock.Now()
	for k, ic := range f.st.Credentials {
		if !now.Before(ic.ExpiresAt) {
			delete(f.st.Credentials, k) // expired: nothing would accept it
		}
	}
	f.st.Seq++
	// Derived like the ids, so that the same calls give the same tokens.
	h := sha256.Sum256(fmt.Appendf(nil, "token:%s:%s:%d", c.ID, a.Name, f.st.Seq))
	token := "fake-" + hex.EncodeToString(h[:])
	cred := providers.Credential{Endpoint: endpointOf(c.ID), CACert: caOf(c.ID), Token: token, ExpiresAt: now.Add(providers.CredentialTTL)}
	if f.kube != nil {
		cred.Endpoint, cred.CACert = f.kube.cfg.URL, f.kube.ca
	}
	f.st.Credentials[tokenHash(token)] = IssuedCredential{ClusterID: c.ID, Account: a.Name, ExpiresAt: cred.ExpiresAt}
	if _, ok := f.st.Grants[c.ID]; !ok {
		f.st.Grants[c.ID] = Grant{Account: a.Name, Since: now}
	}
	if err := f.persist(); err != nil {
		return providers.Credential{}, err
	}
	return cred, finish(nil)
}

// RevokeAccess removes the access Credentials granted inside the cluster;
// every token issued for it stops working.
func (f *Fake) RevokeAccess(ctx context.Context, acct providers.Account, cluster providers.ClusterRef) error {
	a, finish, err := f.call(ctx, "RevokeAccess", &acct)
	if err != nil {
		return err
	}
	if err := f.lock(); err != nil {
		return err
	}
	defer f.unlock()
	c, err := f.mustFind(a, cluster)
	if err != nil {
		return finish(err)
	}
	delete(f.st.Grants, c.ID)
	for k, ic := range f.st.Credentials {
		if ic.ClusterID == c.ID {
			ic.Revoked = true
			f.st.Credentials[k] = ic
		}
	}
	if err := f.persist(); err != nil {
		return err
	}
	return finish(nil)
}

// Accepts reports whether the cluster's API would accept the credential:
// issued by this fake for this endpoint, not revoked, not expired on the
// injected clock, and the cluster still there.
func (f *Fake) Accepts(cred providers.Credential) bool {
	f.lockQuiet()
	defer f.unlock()
	ic, ok := f.st.Credentials[tokenHash(cred.Token)]
	if !ok || ic.Revoked || !f.clock.Now().Before(ic.ExpiresAt) {
		return false
	}
	c := f.st.Clusters[ic.ClusterID]
	if c == nil || c.Status == providers.ClusterDeleting {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(cred.Endpoint), []byte(endpointOf(c.ID))) == 1
}

// HasAccess reports whether the fake holds access granted inside a cluster.
func (f *Fake) HasAccess(clusterID string) bool {
	f.lockQuiet()
	defer f.unlock()
	_, ok := f.st.Grants[clusterID]
	return ok
}
