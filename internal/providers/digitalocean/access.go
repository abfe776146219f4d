package digitalocean

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/digitalocean/godo"

	"github.com/fleet-agent/fleet-agent/internal/providers"
)

// Credentials mints an admin credential for the cluster that lives
// providers.CredentialTTL: GET .../credentials?expiry_seconds=600. It is
// returned, never kept or logged.
func (a *Adapter) Credentials(ctx context.Context, acct providers.Account, cluster providers.ClusterRef) (providers.Credential, error) {
	s, err := a.open(ctx, "Credentials", acct)
	if err != nil {
		return providers.Credential{}, err
	}
	return a.credentials(ctx, s, cluster)
}

func (a *Adapter) credentials(ctx context.Context, s *session, ref providers.ClusterRef) (providers.Credential, error) {
	id := ref.ID
	if id == "" {
		c, err := a.resolve(ctx, s, ref)
		if err != nil {
			return providers.Credential{}, err
		}
		id = c.ID
	} else if !uuidRE.MatchString(id) {
		return providers.Credential{}, providers.NotFoundf(s.op, "cluster %q not found: a DOKS cluster id is a UUID", id)
	}
	q := url.Values{"expiry_seconds": {strconv.Itoa(int(providers.CredentialTTL.Seconds()))}}
	var cr godo.KubernetesClusterCredentials
	if err := a.call(ctx, s, http.MethodGet, "v2/kubernetes/clusters/"+id+"/credentials?"+q.Encode(), nil, &cr); err != nil {
		return providers.Credential{}, err
	}
	switch {
	case cr.Token == "" && len(cr.ClientCertificateData) > 0:
		return providers.Credential{}, &providers.Error{Op: s.op, Class: providers.Terminal, SideEffect: providers.None, Reason: "tokenAuth",
			Message: "cluster " + id + " predates DOKS token authentication and has only a client certificate, which cannot be limited to 600 s; upgrade the cluster"}
	case cr.Token == "" || cr.Server == "":
		return providers.Credential{}, providers.Errorf(s.op, providers.Conflict, providers.None, "DigitalOcean gave no API server or token for cluster %s yet; its API is not up", id)
	}
	expires := cr.ExpiresAt
	if expires.IsZero() {
		// Not said: take the life asked for, from now.
		expires = a.clock.Now().Add(providers.CredentialTTL)
	}
	return providers.Credential{Endpoint: cr.Server, CACert: cr.CertificateAuthorityData, Token: cr.Token, ExpiresAt: expires}, nil
}

// RevokeAccess removes what the substrate granted itself in an adopted
// cluster. Through DigitalOcean's API it granted nothing: the credential is
// DigitalOcean's own for the token's user, and it expires by itself. The
// in-cluster part (a service account and its binding, where the substrate
// made them) is the InClusterRevoker's, reached with a fresh credential;
// without one wired in, there is nothing of the adapter's to remove.
func (a *Adapter) RevokeAccess(ctx context.Context, acct providers.Account, cluster providers.ClusterRef) error {
	s, err := a.open(ctx, "RevokeAccess", acct)
	if err != nil {
		return err
	}
	c, err := a.resolve(ctx, s, cluster)
	if err != nil {
		return err
	}
	if a.revoker == nil {
		return nil
	}
	v := view(c)
	cred, err := a.credentials(ctx, s, v.Ref)
	if err != nil {
		return err
	}
	return a.revoker.RevokeInCluster(ctx, v, cred)
}
