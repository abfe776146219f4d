package aws

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"time"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/fleet-agent/fleet-agent/internal/providers"
)

// ClusterAdminPolicy is the access policy an adopted cluster must grant
// the account's principal.
const ClusterAdminPolicy = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"

// tagGranted marks an access entry the adapter made itself
// (grantAccessOnAdopt): RevokeAccess deletes those and no other.
const tagGranted = "fleet-agent.dev/granted-by"

// tokenPrefix starts every EKS bearer token (aws-iam-authenticator's v1).
const tokenPrefix = "k8s-aws-v1."

// clockPresigner signs at the adapter's clock rather than the SDK's, so
// that a token's X-Amz-Date and the expiry we report agree with the clock
// tests move.
type clockPresigner struct {
	signer *v4.Signer
	now    func() time.Time
}

func (p clockPresigner) PresignHTTP(ctx context.Context, creds sdkaws.Credentials, r *http.Request, payloadHash, service, region string, _ time.Time, opts ...func(*v4.SignerOptions)) (string, http.Header, error) {
	return p.signer.PresignHTTP(ctx, creds, r, payloadHash, service, region, p.now().UTC(), opts...)
}

// Credentials mints the admin credential of a cluster: a presigned STS
// GetCallerIdentity that signs x-k8s-aws-id, as `aws eks get-token` makes
// it. Minting needs no network; only DescribeCluster (for the endpoint and
// CA) is called, and AssumeRole when the account assumes roleArn.
//
// EKS accepts the token for 15 minutes after it is signed; we report
// CredentialTTL (600 s), or less when the keys that signed it expire
// sooner, so a run never holds a credential past its ExpiresAt.
func (a *Adapter) Credentials(ctx context.Context, acct providers.Account, cluster providers.ClusterRef) (providers.Credential, error) {
	s, name, err := a.openCluster(ctx, "Credentials", acct, cluster)
	if err != nil {
		return providers.Credential{}, err
	}
	c, err := s.describeCluster(ctx, name)
	if err != nil {
		return providers.Credential{}, err
	}
	if a.cfg.GrantAccessOnAdopt {
		if err := s.grantAccess(ctx, c); err != nil {
			return providers.Credential{}, err
		}
	}
	return s.mint(ctx, c)
}

func (s *session) mint(ctx context.Context, c *ekstypes.Cluster) (providers.Credential, error) {
	name := sdkaws.ToString(c.Name)
	if (c.Status != ekstypes.ClusterStatusActive && c.Status != ekstypes.ClusterStatusUpdating) || sdkaws.ToString(c.Endpoint) == "" {
		return providers.Credential{}, providers.Errorf(s.op, providers.Conflict, providers.None, "cluster %s is %s; its API is not up", name, c.Status)
	}
	var ca []byte
	if c.CertificateAuthority != nil {
		var err error
		if ca, err = base64.StdEncoding.DecodeString(sdkaws.ToString(c.CertificateAuthority.Data)); err != nil {
			return providers.Credential{}, providers.Errorf(s.op, providers.Unavailable, providers.None, "cluster %s: its certificate authority is not base64: %v", name, err)
		}
	}
	creds, err := s.aws.Credentials.Retrieve(ctx)
	if err != nil {
		return providers.Credential{}, s.fail("AssumeRole", false, err)
	}
	signedAt := s.a.clock.Now()
	presign := sts.NewPresignClient(s.sts, func(po *sts.PresignOptions) {
		po.Presigner = clockPresigner{signer: v4.NewSigner(), now: s.a.clock.Now}
	})
	ttl := int(providers.CredentialTTL / time.Second)
	out, err := presign.PresignGetCallerIdentity(ctx, &sts.GetCallerIdentityInput{}, func(po *sts.PresignOptions) {
		po.ClientOptions = append(po.ClientOptions, func(o *sts.Options) {
			o.APIOptions = append(o.APIOptions,
				smithyhttp.SetHeaderValue("x-k8s-aws-id", name),
				smithyhttp.SetHeaderValue("X-Amz-Expires", fmt.Sprint(ttl)))
		})
	})
	if err != nil {
		return providers.Credential{}, s.fail("PresignGetCallerIdentity", false, err)
	}
	expires := signedAt.Add(providers.CredentialTTL)
	if creds.CanExpire && creds.Expires.Before(expires) {
		expires = creds.Expires
	}
	return providers.Credential{
		Endpoint:  sdkaws.ToString(c.Endpoint),
		CACert:    ca,
		Token:     tokenPrefix + base64.RawURLEncoding.EncodeToString([]byte(out.URL)),
		ExpiresAt: expires,
	}, nil
}

// checkAccess refuses a cluster the account's principal cannot administer:
// no access entry with AmazonEKSClusterAdminPolicy over the whole cluster.
func (s *session) checkAccess(ctx context.Context, c *ekstypes.Cluster) error {
	name := sdkaws.ToString(c.Name)
	principal, err := s.principal(ctx)
	if err != nil {
		return err
	}
	how := fmt.Sprintf("add one: aws eks create-access-entry --region %[1]s --cluster-name %[2]s --principal-arn %[3]s && "+
		"aws eks associate-access-policy --region %[1]s --cluster-name %[2]s --principal-arn %[3]s --policy-arn %[4]s --access-scope type=cluster",
		s.cfg.Region, name, principal, ClusterAdminPolicy)
	if c.AccessConfig != nil && c.AccessConfig.AuthenticationMode == ekstypes.AuthenticationModeConfigMap {
		return &providers.Error{Op: s.op, Class: providers.Terminal, SideEffect: providers.None, Reason: "accessEntryMissing",
			Message: fmt.Sprintf("cluster %s uses authentication mode CONFIG_MAP, which has no access entries; switch it to API_AND_CONFIG_MAP (aws eks update-cluster-config --region %s --name %s --access-config authenticationMode=API_AND_CONFIG_MAP), then %s", name, s.cfg.Region, name, how)}
	}
	ok, err := s.hasAdmin(ctx, name, principal)
	if err != nil {
		return err
	}
	if !ok {
		return &providers.Error{Op: s.op, Class: providers.Terminal, SideEffect: providers.None, Reason: "accessEntryMissing",
			Message: fmt.Sprintf("cluster %s has no access entry granting %s %s over the cluster; %s", name, principal, "AmazonEKSClusterAdminPolicy", how)}
	}
	return nil
}

// hasAdmin reports whether the principal's access entry holds the admin
// policy with cluster scope (false without an entry).
func (s *session) hasAdmin(ctx context.Context, cluster, principal string) (bool, error) {
	p := eks.NewListAssociatedAccessPoliciesPaginator(s.eks, &eks.ListAssociatedAccessPoliciesInput{ClusterName: sdkaws.String(cluster), PrincipalArn: sdkaws.String(principal)})
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			err = s.fail("ListAssociatedAccessPolicies", false, err)
			if errors.Is(err, providers.ErrNotFound) {
				// No entry; a missing cluster was found missing before.
				return false, nil
			}
			return false, err
		}
		for _, a := range out.AssociatedAccessPolicies {
			if sdkaws.ToString(a.PolicyArn) == ClusterAdminPolicy && a.AccessScope != nil && a.AccessScope.Type == ekstypes.AccessScopeTypeCluster {
				return true, nil
			}
		}
	}
	return false, nil
}

// grantAccess gives the principal admin on a cluster where it has none:
// an access entry tagged as ours, and the admin policy on it.
func (s *session) grantAccess(ctx context.Context, c *ekstypes.Cluster) error {
	name := sdkaws.ToString(c.Name)
	principal, err := s.principal(ctx)
	if err != nil {
		return err
	}
	ok, err := s.hasAdmin(ctx, name, principal)
	if err != nil || ok {
		return err
	}
	_, err = s.eks.CreateAccessEntry(ctx, &eks.CreateAccessEntryInput{
		ClusterName: sdkaws.String(name), PrincipalArn: sdkaws.String(principal), Type: sdkaws.String("STANDARD"),
		Tags:               map[string]string{tagGranted: "fleet-agent"},
		ClientRequestToken: sdkaws.String(token("access-entry", sdkaws.ToString(c.Arn), principal)),
	})
	if err != nil {
		// An entry the tenant made (409) is theirs: we only add the policy,
		// and RevokeAccess will leave the entry.
		if err = s.fail("CreateAccessEntry", true, err); providers.ClassOf(err) != providers.Conflict {
			return err
		}
	}
	_, err = s.eks.AssociateAccessPolicy(ctx, &eks.AssociateAccessPolicyInput{
		ClusterName: sdkaws.String(name), PrincipalArn: sdkaws.String(principal), PolicyArn: sdkaws.String(ClusterAdminPolicy),
		AccessScope: &ekstypes.AccessScope{Type: ekstypes.AccessScopeTypeCluster},
	})
	if err != nil {
		return s.fail("AssociateAccessPolicy", true, err)
	}
	return nil
}

// RevokeAccess removes what the adapter granted itself on a cluster: first
// what the substrate put inside it, through the InClusterRevoker seam
// (skipped when none is wired, and when the principal has no
// admin access left, since then nothing in the cluster can be reached),
// then the access entry the adapter made itself (tagged
// fleet-agent.dev/granted-by, with grantAccessOnAdopt). An entry the
// tenant made stays. Revoking twice finds nothing to remove and is not an
// error; a cluster that is gone is ErrNotFound.
func (a *Adapter) RevokeAccess(ctx context.Context, acct providers.Account, cluster providers.ClusterRef) error {
	s, name, err := a.openCluster(ctx, "RevokeAccess", acct, cluster)
	if err != nil {
		return err
	}
	c, err := s.describeCluster(ctx, name)
	if err != nil {
		return err
	}
	configMap := c.AccessConfig != nil && c.AccessConfig.AuthenticationMode == ekstypes.AuthenticationModeConfigMap
	principal := ""
	if !configMap || a.revoker != nil {
		if principal, err = s.principal(ctx); err != nil {
			return err
		}
	}
	if a.revoker != nil {
		// Without admin access nothing in the cluster can be reached: the
		// in-cluster part was done before our entry went, or is not ours
		// to do. (A CONFIG_MAP cluster cannot say; try.)
		admin := configMap
		if !admin {
			if admin, err = s.hasAdmin(ctx, name, principal); err != nil {
				return err
			}
		}
		if admin {
			cred, err := s.mint(ctx, c)
			if err != nil {
				return err
			}
			if err := a.revoker.RevokeInCluster(ctx, cred); err != nil {
				return &providers.Error{Op: s.op, Class: providers.Unknown, SideEffect: providers.Maybe, Message: "removing the in-cluster access: " + s.redact.Redact(err.Error())}
			}
		}
	}
	if configMap {
		return nil // no access entries there, so none of ours
	}
	out, err := s.eks.DescribeAccessEntry(ctx, &eks.DescribeAccessEntryInput{ClusterName: sdkaws.String(name), PrincipalArn: sdkaws.String(principal)})
	if err != nil {
		if err = s.fail("DescribeAccessEntry", false, err); errors.Is(err, providers.ErrNotFound) {
			return nil
		}
		return err
	}
	if out.AccessEntry == nil || out.AccessEntry.Tags[tagGranted] == "" {
		return nil // the tenant's entry
	}
	_, err = s.eks.DisassociateAccessPolicy(ctx, &eks.DisassociateAccessPolicyInput{ClusterName: sdkaws.String(name), PrincipalArn: sdkaws.String(principal), PolicyArn: sdkaws.String(ClusterAdminPolicy)})
	if err = s.failIf("DisassociateAccessPolicy", err); err != nil && !errors.Is(err, providers.ErrNotFound) {
		return err
	}
	_, err = s.eks.DeleteAccessEntry(ctx, &eks.DeleteAccessEntryInput{ClusterName: sdkaws.String(name), PrincipalArn: sdkaws.String(principal)})
	if err = s.failIf("DeleteAccessEntry", err); err != nil && !errors.Is(err, providers.ErrNotFound) {
		return err
	}
	return nil
}
