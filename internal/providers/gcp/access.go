package gcp

import (
	"context"
	"encoding/base64"
	"encoding/pem"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/providers"
)

// InClusterRevoker removes, through the cluster's own API, what the
// substrate made for itself inside an adopted cluster (docs/substrates.md:
// the fleet-agent service account in fleet-agent-access, its cluster-admin
// binding, the namespace once empty). That is the substrate's in-cluster code;
// the binary wires it here. GKE itself grants the adapter nothing: the
// account's Google identity reaches the cluster through IAM, so there is no
// cloud-side grant to withdraw, and without a revoker RevokeAccess only
// checks that the cluster is there.
type InClusterRevoker interface {
	RevokeInCluster(ctx context.Context, cred providers.Credential) error
}

// Credentials mints the account's own OAuth2 access token for the
// cluster's endpoint, with the cluster's CA. GKE takes the identity's
// Google token as a bearer token; its lifetime is Google's (an hour, asked
// for CredentialTTL through the assertion's exp, which Google may not
// honour), so the credential says it expires after CredentialTTL at the
// latest and the caller drops it then.
func (a *Adapter) Credentials(ctx context.Context, acct providers.Account, cluster providers.ClusterRef) (providers.Credential, error) {
	const op = "Credentials"
	s, err := a.open(ctx, op, acct)
	if err != nil {
		return providers.Credential{}, err
	}
	return s.credential(ctx, a, cluster)
}

func (s *session) credential(ctx context.Context, a *Adapter, cluster providers.ClusterRef) (providers.Credential, error) {
	c, full, err := s.getCluster(ctx, cluster)
	if err != nil {
		return providers.Credential{}, err
	}
	if !apiUp(c) {
		return providers.Credential{}, providers.Errorf(s.op, providers.Conflict, providers.None, "cluster %s is %s; its API is not up yet", full.ID, c.Status)
	}
	var ca []byte
	if c.MasterAuth != nil {
		ca, err = base64.StdEncoding.DecodeString(c.MasterAuth.ClusterCaCertificate)
	}
	if blk, _ := pem.Decode(ca); err != nil || blk == nil {
		return providers.Credential{}, providers.Errorf(s.op, providers.Unavailable, providers.None, "cluster %s gives no PEM CA certificate in masterAuth.clusterCaCertificate", full.ID)
	}
	now := a.clock.Now()
	ttl := providers.CredentialTTL
	if !s.token.Expiry.IsZero() {
		// The token's expiry was computed on the wall clock when it came.
		ttl = min(ttl, time.Until(s.token.Expiry))
	}
	if ttl <= 0 {
		return providers.Credential{}, providers.Errorf(s.op, providers.Unavailable, providers.None, "the token endpoint gave a token that has already expired")
	}
	return providers.Credential{Endpoint: "https://" + c.Endpoint, CACert: ca, Token: s.token.AccessToken, ExpiresAt: now.Add(ttl)}, nil
}

// RevokeAccess withdraws what the substrate holds in an adopted cluster:
// nothing at GKE (see InClusterRevoker), the in-cluster objects through the
// revoker when one is wired. Revoking twice is not an error.
func (a *Adapter) RevokeAccess(ctx context.Context, acct providers.Account, cluster providers.ClusterRef) error {
	const op = "RevokeAccess"
	s, err := a.open(ctx, op, acct)
	if err != nil {
		return err
	}
	if a.inCluster == nil {
		_, _, err := s.getCluster(ctx, cluster)
		return err
	}
	cred, err := s.credential(ctx, a, cluster)
	if err != nil {
		return err
	}
	if err := a.inCluster.RevokeInCluster(ctx, cred); err != nil {
		return classify(op, err, mutate)
	}
	return nil
}
