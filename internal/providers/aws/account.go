package aws

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/credentials/stscreds"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/aws/smithy-go/logging"

	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/secrets"
)

// accountConfig is the `config` of an aws provider account (docs/substrates.md
// 5.1). accessKeyId and secretAccessKey are secret references; roleArn,
// when set, is assumed through STS and is then the principal access
// entries name.
//
//	{ "region": "us-east-1", "zones": ["us-east-1a", "us-east-1b"],
//	  "eksClusterRoleArn": "arn:aws:iam::111111111111:role/eks-cluster",
//	  "eksNodeRoleArn": "arn:aws:iam::111111111111:role/eks-node",
//	  "eksSubnetIds": ["subnet-...a", "subnet-...b"],
//	  "accessKeyId": "secret://ops/aws-key-id", "secretAccessKey": "secret://ops/aws-secret",
//	  "roleArn": "arn:aws:iam::111111111111:role/fleet-agent" }
type accountConfig struct {
	Region            string   `json:"region"`
	Zones             []string `json:"zones,omitempty"`
	EKSClusterRoleArn string   `json:"eksClusterRoleArn,omitempty"`
	EKSNodeRoleArn    string   `json:"eksNodeRoleArn,omitempty"`
	EKSSubnetIDs      []string `json:"eksSubnetIds,omitempty"`
	AccessKeyID       string   `json:"accessKeyId"`
	SecretAccessKey   string   `json:"secretAccessKey"`
	RoleArn           string   `json:"roleArn,omitempty"`
}

var (
	regionRE      = lazyRE(`^[a-z]{2}(-[a-z]+)+-\d+$`)
	roleArnRE     = lazyRE(`^arn:aws[a-z-]*:iam::\d{12}:role/.+$`)
	sessionNameRE = lazyRE(`^[\w+=,.@-]{2,64}$`)
)

func (c *accountConfig) check(acct providers.Account) error {
	bad := func(format string, args ...any) error {
		return providers.Invalidf("", "accountConfig", "provider account %q: config: "+format, append([]any{acct.Name}, args...)...)
	}
	switch {
	case acct.Provider != "" && acct.Provider != providers.AWS:
		return providers.Invalidf("", "wrongProvider", "provider account %q is for %q, not aws", acct.Name, acct.Provider)
	case !regionRE().MatchString(c.Region):
		return bad("region %q is not an AWS region such as us-east-1", c.Region)
	case c.AccessKeyID == "" || c.SecretAccessKey == "":
		return bad("accessKeyId and secretAccessKey are required, as secret references")
	case !secrets.LooksLikeRef(c.AccessKeyID) || !secrets.LooksLikeRef(c.SecretAccessKey):
		// Never repeat the value: it may be a key pasted where a reference
		// belongs.
		return bad("accessKeyId and secretAccessKey must be secret references (secret://, vault://, env://), never the keys themselves")
	case c.RoleArn != "" && !roleArnRE().MatchString(c.RoleArn):
		return bad("roleArn %q is not an IAM role ARN", c.RoleArn)
	}
	for _, z := range c.Zones {
		if !strings.HasPrefix(z, c.Region) {
			return bad("zone %q is not a zone of %s", z, c.Region)
		}
	}
	return nil
}

// needs checks the keys an operation needs beyond credentials.
func (c *accountConfig) needs(acct providers.Account, clusterRole, nodeRole, subnets bool) error {
	missing := ""
	switch {
	case clusterRole && c.EKSClusterRoleArn == "":
		missing = "eksClusterRoleArn"
	case nodeRole && c.EKSNodeRoleArn == "":
		missing = "eksNodeRoleArn"
	case subnets && len(c.EKSSubnetIDs) == 0:
		missing = "eksSubnetIds"
	}
	if missing != "" {
		return providers.Invalidf("", "accountConfig", "provider account %q: config: %s is required to create clusters and node groups", acct.Name, missing)
	}
	for _, r := range []string{c.EKSClusterRoleArn, c.EKSNodeRoleArn} {
		if r != "" && !roleArnRE().MatchString(r) {
			return providers.Invalidf("", "accountConfig", "provider account %q: config: %q is not an IAM role ARN", acct.Name, r)
		}
	}
	return nil
}

// session is one adapter call's view of an account: its config, SDK
// clients holding credentials resolved for this call only, and a redactor
// that knows every secret value the call saw.
type session struct {
	a    *Adapter
	op   string
	acct providers.Account
	cfg  accountConfig
	aws  sdkaws.Config
	eks  *eks.Client
	ec2  *ec2.Client
	sts  *sts.Client
	// asg is nil when the install overrides AWS's endpoints but names no
	// Auto Scaling endpoint.
	asg    *autoscaling.Client
	redact *secrets.Redactor
}

// open starts an adapter call: it decodes the account's config strictly,
// resolves its keys and builds the SDK clients, every one without retries.
func (a *Adapter) open(ctx context.Context, op string, acct providers.Account) (*session, error) {
	if err := ctx.Err(); err != nil {
		return nil, &providers.Error{Op: op, Class: providers.Unavailable, SideEffect: providers.None, Message: "cancelled before the call", Err: err}
	}
	s := &session{a: a, op: op, acct: acct, redact: secrets.NewRedactor()}
	if err := providers.DecodeAccountConfig(acct, &s.cfg); err != nil {
		return nil, named(op, err)
	}
	if err := s.cfg.check(acct); err != nil {
		return nil, named(op, err)
	}
	akid, err := s.resolve(ctx, "accessKeyId", s.cfg.AccessKeyID)
	if err != nil {
		return nil, err
	}
	secret, err := s.resolve(ctx, "secretAccessKey", s.cfg.SecretAccessKey)
	if err != nil {
		return nil, err
	}
	base := sdkaws.Config{
		Region:      s.cfg.Region,
		Credentials: credentials.NewStaticCredentialsProvider(akid, secret, ""),
		HTTPClient:  a.http,
		Retryer:     func() sdkaws.Retryer { return sdkaws.NopRetryer{} },
		Logger:      logging.Nop{},
	}
	s.aws = base
	s.sts = sts.NewFromConfig(base, a.stsOptions)
	if s.cfg.RoleArn != "" {
		// One AssumeRole per adapter call: the cache holds the session's
		// keys for this call only.
		s.aws.Credentials = sdkaws.NewCredentialsCache(&seenCredentials{inner: stscreds.NewAssumeRoleProvider(s.sts, s.cfg.RoleArn, func(o *stscreds.AssumeRoleOptions) {
			o.RoleSessionName = a.cfg.SessionName
			o.Duration = time.Hour
		}), redact: s.redact})
		s.sts = sts.NewFromConfig(s.aws, a.stsOptions)
	}
	s.eks = eks.NewFromConfig(s.aws, func(o *eks.Options) {
		o.Retryer = sdkaws.NopRetryer{}
		if a.cfg.Endpoints.EKS != "" {
			o.BaseEndpoint = sdkaws.String(a.cfg.Endpoints.EKS)
		}
	})
	s.ec2 = ec2.NewFromConfig(s.aws, func(o *ec2.Options) {
		o.Retryer = sdkaws.NopRetryer{}
		if a.cfg.Endpoints.EC2 != "" {
			o.BaseEndpoint = sdkaws.String(a.cfg.Endpoints.EC2)
		}
	})
	if a.cfg.Endpoints.Autoscaling != "" || !a.cfg.Endpoints.overridden() {
		s.asg = autoscaling.NewFromConfig(s.aws, func(o *autoscaling.Options) {
			o.Retryer = sdkaws.NopRetryer{}
			o.HTTPClient = ownBody(a.http)
			if a.cfg.Endpoints.Autoscaling != "" {
				o.BaseEndpoint = sdkaws.String(a.cfg.Endpoints.Autoscaling)
			}
		})
	}
	return s, nil
}

// openCluster opens a call about one cluster and names the cluster.
func (a *Adapter) openCluster(ctx context.Context, op string, acct providers.Account, ref providers.ClusterRef) (*session, string, error) {
	s, err := a.open(ctx, op, acct)
	if err != nil {
		return nil, "", err
	}
	name, err := s.clusterName(ref)
	if err != nil {
		return nil, "", err
	}
	return s, name, nil
}

func (a *Adapter) stsOptions(o *sts.Options) {
	o.Retryer = sdkaws.NopRetryer{}
	if a.cfg.Endpoints.STS != "" {
		o.BaseEndpoint = sdkaws.String(a.cfg.Endpoints.STS)
	}
}

// resolve turns one of the account's references into its value, now.
func (s *session) resolve(ctx context.Context, field, ref string) (string, error) {
	if s.a.secrets == nil {
		return "", &providers.Error{Op: s.op, Class: providers.Terminal, SideEffect: providers.None, Reason: "secretMissing",
			Message: "provider account " + quote(s.acct.Name) + ": no secret resolver to resolve " + field}
	}
	v, err := s.a.secrets.Resolve(ctx, ref)
	if err != nil || v == "" {
		return "", &providers.Error{Op: s.op, Class: providers.Terminal, SideEffect: providers.None, Reason: "secretMissing",
			Message: "provider account " + quote(s.acct.Name) + ": " + field + " (" + ref + ") does not resolve; store the secret or fix the reference", Err: err}
	}
	s.redact.Add(v)
	return v, nil
}

// seenCredentials tells the redactor the temporary keys STS hands out.
type seenCredentials struct {
	inner  sdkaws.CredentialsProvider
	redact *secrets.Redactor
}

func (c *seenCredentials) Retrieve(ctx context.Context) (sdkaws.Credentials, error) {
	v, err := c.inner.Retrieve(ctx)
	if err == nil {
		c.redact.Add(v.AccessKeyID)
		c.redact.Add(v.SecretAccessKey)
		c.redact.Add(v.SessionToken)
	}
	return v, err
}

func quote(s string) string { return `"` + s + `"` }

// named sets the operation of a boundary error that has none.
func named(op string, err error) error {
	if e, ok := err.(*providers.Error); ok && e.Op == "" {
		c := *e
		c.Op = op
		return &c
	}
	return err
}

// token derives a client request token EKS takes (33 to 126 characters)
// from the journal's token and what the request is about, so that the same
// journal step always sends the same token and another step another.
func token(parts ...string) string {
	h := sha256.Sum256([]byte("fleet-agent\x00" + strings.Join(parts, "\x00")))
	return hex.EncodeToString(h[:])
}

// principal is the IAM principal access entries must name for this
// account: roleArn when it is assumed (its path intact), else the caller's
// identity with an STS session turned back into its role.
//
// An assumed-role identity carries no role path, so a role with a path
// that is not configured as roleArn comes out without it; configure
// roleArn for such roles.
func (s *session) principal(ctx context.Context) (string, error) {
	if s.cfg.RoleArn != "" {
		return s.cfg.RoleArn, nil
	}
	out, err := s.sts.GetCallerIdentity(ctx, &sts.GetCallerIdentityInput{})
	if err != nil {
		return "", s.fail("GetCallerIdentity", false, err)
	}
	return canonicalPrincipal(sdkaws.ToString(out.Arn)), nil
}

var assumedRE = lazyRE(`^arn:(aws[a-z-]*):sts::(\d{12}):assumed-role/([^/]+)/.+$`)

func canonicalPrincipal(arn string) string {
	if m := assumedRE().FindStringSubmatch(arn); m != nil {
		return "arn:" + m[1] + ":iam::" + m[2] + ":role/" + m[3]
	}
	return arn
}

// subnetFacts is what never changes about a subnet.
type subnetFacts struct{ zone, vpc string }

type placedSubnet struct{ id, zone string }

func (s *session) cacheKey(id string) string {
	return s.a.cfg.Endpoints.EC2 + "|" + s.cfg.Region + "|" + id
}

// subnetZones returns the zone of each subnet, asking EC2 for those not
// known yet (a subnet's zone never changes).
func (s *session) subnetZones(ctx context.Context, ids []string) (map[string]string, error) {
	out := map[string]string{}
	var ask []string
	s.a.mu.Lock()
	for _, id := range ids {
		if f, ok := s.a.subnets[s.cacheKey(id)]; ok {
			out[id] = f.zone
		} else if !slices.Contains(ask, id) {
			ask = append(ask, id)
		}
	}
	s.a.mu.Unlock()
	if len(ask) == 0 {
		return out, nil
	}
	resp, err := s.ec2.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{SubnetIds: ask})
	if err != nil {
		err = s.fail("DescribeSubnets", false, err)
		if pe, ok := err.(*providers.Error); ok && pe.Class == providers.NotFound {
			// A subnet the account names that EC2 does not know is a
			// mistake in the account's config, not a missing object.
			pe.Class, pe.Reason = providers.Invalid, "subnets"
			pe.Message += "; fix the account's eksSubnetIds"
		}
		return nil, err
	}
	s.a.mu.Lock()
	defer s.a.mu.Unlock()
	for _, sn := range resp.Subnets {
		id := sdkaws.ToString(sn.SubnetId)
		f := subnetFacts{zone: sdkaws.ToString(sn.AvailabilityZone), vpc: sdkaws.ToString(sn.VpcId)}
		s.a.subnets[s.cacheKey(id)] = f
		out[id] = f.zone
	}
	for _, id := range ask {
		if _, ok := out[id]; !ok {
			return nil, providers.Invalidf(s.op, "subnets", "subnet %s does not exist in %s", id, s.cfg.Region)
		}
	}
	return out, nil
}

// nodeSubnets are the account's subnets where nodes may go: eksSubnetIds,
// restricted to the account's zones when it lists some, sorted by zone.
func (s *session) nodeSubnets(ctx context.Context) ([]placedSubnet, error) {
	if len(s.cfg.EKSSubnetIDs) == 0 {
		return nil, nil
	}
	zones, err := s.subnetZones(ctx, s.cfg.EKSSubnetIDs)
	if err != nil {
		return nil, err
	}
	var out []placedSubnet
	for _, id := range s.cfg.EKSSubnetIDs {
		if len(s.cfg.Zones) == 0 || slices.Contains(s.cfg.Zones, zones[id]) {
			out = append(out, placedSubnet{id, zones[id]})
		}
	}
	slices.SortStableFunc(out, func(a, b placedSubnet) int { return strings.Compare(a.zone, b.zone) })
	return out, nil
}

// accountZones are the zones of nodeSubnets, or the configured zones when
// the account names no subnets.
func (s *session) accountZones(ctx context.Context) ([]string, error) {
	if len(s.cfg.EKSSubnetIDs) == 0 {
		z := slices.Clone(s.cfg.Zones)
		slices.Sort(z)
		return slices.Compact(z), nil
	}
	subnets, err := s.nodeSubnets(ctx)
	if err != nil {
		return nil, err
	}
	var zones []string
	for _, sn := range subnets {
		if !slices.Contains(zones, sn.zone) {
			zones = append(zones, sn.zone)
		}
	}
	return zones, nil
}

// ownBody is the client with a transport that sends a copy of each
// request's body. smithy-go closes the body it built as soon as the
// response arrives, and net/http may still be making its last read of it
// (the check for bytes past Content-Length): that read then fails, and the
// transport closes the connection under the response being read ("use of
// closed network connection", about one Auto Scaling listing in 700 on the
// emulator). A body of our own is never closed under the transport.
func ownBody(c *http.Client) *http.Client {
	o := *c
	o.Transport = ownBodyTransport{base: c.Transport}
	return &o
}

type ownBodyTransport struct{ base http.RoundTripper }

func (t ownBodyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil && r.Body != http.NoBody {
		b, err := io.ReadAll(r.Body)
		_ = r.Body.Close()
		if err != nil {
			return nil, err
		}
		r = r.Clone(r.Context())
		r.Body = io.NopCloser(bytes.NewReader(b))
		r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	}
	base := t.base
	if base == nil {
		base = http.DefaultTransport
	}
	return base.RoundTrip(r)
}
