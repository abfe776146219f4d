// Package aws is the EKS adapter: providers.Kubernetes through
// aws-sdk-go-v2 (service/eks, service/ec2, service/sts, service/autoscaling), for provider
// accounts of id `aws`.
//
// Clusters are regional EKS clusters made with the account's cluster role
// and subnets, authentication mode API (so that access entries work) and
// the journal's client token; each flavor is one managed node group, whose
// `nodes` count per Availability Zone of its subnets. Machine types and
// their GPUs come from EC2 DescribeInstanceTypes; the cluster's globalId is
// its ARN. The admin credential is a presigned STS GetCallerIdentity token
// (`k8s-aws-v1.`), minted locally, valid for the 600 s we report.
//
// Every call is made once: the SDK's retryer is aws.NopRetryer on every
// client, so that the substrate's journal is the only retry authority, and
// every SDK error is mapped to a providers.Error with a class and a side
// effect (errors.go). The account's access keys are secret references,
// resolved at the start of each adapter call and dropped at its end; the
// adapter never reads ~/.aws, the environment or the instance metadata
// service, which is why it builds aws.Config itself rather than through
// the SDK's config package.
//
// Two facts are cached in memory because AWS never changes them: the zone
// of a subnet and the figures of an instance type. Nothing else is kept
// between calls.
package aws

import (
	"context"
	"net/http"
	"net/url"
	"sync"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

var _ providers.Kubernetes = (*Adapter)(nil)

// Config is the adapter's block of the agent config (`providers.aws`).
//
//	providers:
//	  aws:
//	    endpoints:             # [AWS's regional endpoints]
//	      eks: https://eks.example.internal
//	      ec2: https://ec2.example.internal
//	      sts: https://sts.example.internal
//	      autoscaling: https://autoscaling.example.internal
//	    requestTimeout: 30s    # [30s] one HTTP attempt
//	    sessionName: fleet-agent  # [fleet-agent] of an assumed roleArn
//	    grantAccessOnAdopt: false # [false] see below
//
// With grantAccessOnAdopt, an adopted cluster without an access entry for
// the account's principal is not blocked: Credentials creates one (tagged
// as ours) with AmazonEKSClusterAdminPolicy, and RevokeAccess deletes it at
// teardown. Without it (the reference's rule) the tenant adds the entry and
// it stays.
type Config struct {
	Endpoints          Endpoints     `yaml:"endpoints"`
	RequestTimeout     time.Duration `yaml:"requestTimeout"`
	SessionName        string        `yaml:"sessionName"`
	GrantAccessOnAdopt bool          `yaml:"grantAccessOnAdopt"`
}

// Endpoints override AWS's endpoints, for tests and private installs.
//
// Autoscaling is where the discovery sweep reads the node groups' Auto
// Scaling groups (revision.go). When other endpoints are overridden and it
// is not, the sweep reads no Auto Scaling groups at all rather than ask
// AWS's own endpoint from an install that points elsewhere: it reads the
// node groups instead.
type Endpoints struct {
	EKS         string `yaml:"eks"`
	EC2         string `yaml:"ec2"`
	STS         string `yaml:"sts"`
	Autoscaling string `yaml:"autoscaling"`
}

// overridden reports whether any endpoint is set.
func (e Endpoints) overridden() bool {
	return e.EKS != "" || e.EC2 != "" || e.STS != "" || e.Autoscaling != ""
}

// DefaultConfig is the adapter without a config block.
func DefaultConfig() Config {
	return Config{RequestTimeout: 30 * time.Second, SessionName: "fleet-agent"}
}

func (c *Config) validate() error {
	for name, u := range map[string]string{"eks": c.Endpoints.EKS, "ec2": c.Endpoints.EC2, "sts": c.Endpoints.STS, "autoscaling": c.Endpoints.Autoscaling} {
		if u == "" {
			continue
		}
		p, err := url.Parse(u)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return refusal.New(refusal.InvalidInput, "endpoints.%s: %q is not an http(s) URL", name, u)
		}
	}
	if c.RequestTimeout <= 0 {
		return refusal.New(refusal.InvalidInput, "requestTimeout must be positive")
	}
	if !sessionNameRE().MatchString(c.SessionName) {
		return refusal.New(refusal.InvalidInput, "sessionName %q: 2 to 64 of letters, digits and +=,.@_-", c.SessionName)
	}
	return nil
}

// InClusterRevoker removes, through the cluster's own API, what the
// substrate put in an adopted cluster to reach it (docs/substrates.md). It is
// a seam: the binary wires the in-cluster teardown (client-go) in, and the
// adapter calls it from RevokeAccess with a fresh credential, before it
// removes the access entry it made itself.
type InClusterRevoker interface {
	RevokeInCluster(ctx context.Context, cred providers.Credential) error
}

// Adapter is the EKS adapter. It is safe for concurrent use.
type Adapter struct {
	cfg     Config
	secrets providers.SecretResolver
	clock   clock.Clock
	http    *http.Client
	revoker InClusterRevoker

	mu      sync.Mutex
	subnets map[string]subnetFacts   // endpoint|region|id
	types   map[string]*instanceInfo // endpoint|region|type
}

// Option changes how an Adapter is made.
type Option func(*Adapter)

// WithClock sets the clock credentials are signed and expire on.
func WithClock(c clock.Clock) Option { return func(a *Adapter) { a.clock = c } }

// WithHTTPClient sets the HTTP client of every SDK client (its Timeout is
// set from requestTimeout when it has none).
func WithHTTPClient(c *http.Client) Option { return func(a *Adapter) { a.http = c } }

// WithInClusterRevoker sets the in-cluster part of RevokeAccess.
func WithInClusterRevoker(r InClusterRevoker) Option { return func(a *Adapter) { a.revoker = r } }

// New makes an adapter from a config.
func New(cfg Config, secrets providers.SecretResolver, opts ...Option) (*Adapter, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	a := &Adapter{cfg: cfg, secrets: secrets, clock: clock.Real{},
		subnets: map[string]subnetFacts{}, types: map[string]*instanceInfo{}}
	for _, o := range opts {
		o(a)
	}
	if a.http == nil {
		a.http = &http.Client{}
	}
	{
		c := *a.http
		if c.Timeout == 0 {
			c.Timeout = cfg.RequestTimeout
		}
		// Every request asks the call's fence before it leaves: an agent
		// that no longer leads sends nothing (providers.WithFence).
		c.Transport = providers.FenceTransport(c.Transport)
		a.http = &c
	}
	return a, nil
}

// Open makes an adapter from its block of the agent config, decoded
// strictly over DefaultConfig.
func Open(block *yaml.Node, secrets providers.SecretResolver, opts ...Option) (*Adapter, error) {
	cfg := DefaultConfig()
	if err := providers.DecodeStrict(block, &cfg); err != nil {
		return nil, err
	}
	return New(cfg, secrets, opts...)
}

// Factory is the adapter's providers.Factory, for the binary's registry.
func Factory(opts ...Option) providers.Factory {
	return func(block *yaml.Node, secrets providers.SecretResolver) (providers.Kubernetes, error) {
		a, err := Open(block, secrets, opts...)
		if err != nil {
			return nil, err // not a typed nil in the interface
		}
		return a, nil
	}
}
