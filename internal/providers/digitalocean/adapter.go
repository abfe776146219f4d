package digitalocean

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/digitalocean/godo"
	"golang.org/x/oauth2"
	"gopkg.in/yaml.v3"

	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/providers"
)

var _ providers.Kubernetes = (*Adapter)(nil)

// Config is the adapter's block of the agent config
// (`providers.digitalocean`). Every key is optional.
//
//	providers:
//	  digitalocean:
//	    apiURL: https://api.digitalocean.com/     # [this]: where godo sends its requests
//	    defaultNodePool:                          # the node pool every DOKS cluster is created with
//	      name: fa-system                         # [fa-system]
//	      size: s-2vcpu-4gb                       # [s-2vcpu-4gb]
//	      count: 1                                # [1]
//	    catalogTTL: 5m                            # [5m]: how long the sizes list is reused; 0 reads it every time
//	    requestTimeout: 30s                       # [30s]: one HTTP request's deadline
type Config struct {
	APIURL          string          `yaml:"apiURL"`
	DefaultNodePool DefaultNodePool `yaml:"defaultNodePool"`
	CatalogTTL      time.Duration   `yaml:"catalogTTL"`
	RequestTimeout  time.Duration   `yaml:"requestTimeout"`
}

// DefaultNodePool is the node pool a cluster is created with. DOKS refuses a
// cluster without a node pool of at least one node, and the substrate's own
// pools come after the cluster runs, so the cluster brings this one. It
// carries the tag `fleet-agent` but not the substrate's pool label: the node
// daemon does not run there.
type DefaultNodePool struct {
	Name  string `yaml:"name"`
	Size  string `yaml:"size"`
	Count int    `yaml:"count"`
}

// DefaultConfig is the adapter without a config block.
func DefaultConfig() Config {
	return Config{
		APIURL:          "https://api.digitalocean.com/",
		DefaultNodePool: DefaultNodePool{Name: "fa-system", Size: "s-2vcpu-4gb", Count: 1},
		CatalogTTL:      5 * time.Minute,
		RequestTimeout:  30 * time.Second,
	}
}

// nameRE is what the adapter takes as a cluster or node pool name: a DNS
// label of at most 63 characters, which DOKS accepts, and which the
// project's derived names (at most 40 characters) always are.
var nameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

func (c *Config) validate() error {
	u, err := url.Parse(c.APIURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return fmt.Errorf("apiURL %q: want an http(s) URL such as https://api.digitalocean.com/", c.APIURL)
	}
	// godo resolves its paths against the base URL: without the trailing
	// slash a base with a path would lose its last segment.
	if !strings.HasSuffix(c.APIURL, "/") {
		c.APIURL += "/"
	}
	p := c.DefaultNodePool
	switch {
	case !nameRE.MatchString(p.Name):
		return fmt.Errorf("defaultNodePool.name %q: want a DNS label of at most 63 characters", p.Name)
	case p.Size == "":
		return fmt.Errorf("defaultNodePool.size: a size slug such as s-2vcpu-4gb is needed")
	case p.Count < 1 || p.Count > 1000:
		return fmt.Errorf("defaultNodePool.count %d: DOKS creates a cluster only with 1 to 1000 nodes in it", p.Count)
	case c.CatalogTTL < 0:
		return fmt.Errorf("catalogTTL must not be negative")
	case c.RequestTimeout <= 0:
		return fmt.Errorf("requestTimeout must be positive")
	}
	return nil
}

// InClusterRevoker removes, inside an adopted cluster, the access the
// substrate gave itself there (its service account, binding and namespace).
// On DOKS nothing is granted through DigitalOcean's API: the credential is
// DigitalOcean's own for the token's user and expires by itself. The
// in-cluster part belongs to the code that reaches clusters with client-go,
// which the binary wires in here; without it RevokeAccess has nothing of its
// own to remove.
type InClusterRevoker interface {
	RevokeInCluster(ctx context.Context, cluster providers.Cluster, cred providers.Credential) error
}

// Adapter is the DOKS adapter. It is safe for concurrent use.
type Adapter struct {
	cfg       Config
	secrets   providers.SecretResolver
	clock     clock.Clock
	transport http.RoundTripper
	revoker   InClusterRevoker

	mu      sync.Mutex
	catalog map[string]*catalog
	// ids are the UUIDs of clusters found by name (see knownID).
	ids map[string]string
}

// Option changes how an Adapter is made.
type Option func(*Adapter)

// WithClock sets the clock of the catalogue's cache and of retry times read
// from RateLimit-Reset; the default is the wall clock.
func WithClock(c clock.Clock) Option { return func(a *Adapter) { a.clock = c } }

// WithTransport sets the HTTP transport under the oauth2 one; the default is
// http.DefaultTransport.
func WithTransport(rt http.RoundTripper) Option { return func(a *Adapter) { a.transport = rt } }

// WithInClusterRevoker wires the in-cluster part of RevokeAccess.
func WithInClusterRevoker(r InClusterRevoker) Option { return func(a *Adapter) { a.revoker = r } }

// New makes an adapter from its config.
func New(cfg Config, secrets providers.SecretResolver, opts ...Option) (*Adapter, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("digitalocean: %w", err)
	}
	a := &Adapter{cfg: cfg, secrets: secrets, clock: clock.Real{}, catalog: map[string]*catalog{}, ids: map[string]string{}}
	for _, o := range opts {
		o(a)
	}
	return a, nil
}

// Open makes an adapter from its block of the agent config, decoded
// strictly over DefaultConfig: an unknown key is refused with its line.
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
		return Open(block, secrets, opts...)
	}
}

// session is one call's client: built with the token resolved for it, and
// dropped with it.
type session struct {
	op   string
	acct providers.Account
	cfg  accountConfig
	do   *godo.Client
}

// open decodes the account and builds the call's godo client over an oauth2
// static token source. godo.New without a retry config sends each request
// once.
func (a *Adapter) open(ctx context.Context, op string, acct providers.Account) (*session, error) {
	if err := ctx.Err(); err != nil {
		return nil, &providers.Error{Op: op, Class: providers.Unknown, SideEffect: providers.None, Message: "cancelled before the call", Err: err}
	}
	cfg, err := decodeAccount(op, acct)
	if err != nil {
		return nil, err
	}
	if a.secrets == nil {
		return nil, &providers.Error{Op: op, Class: providers.Terminal, SideEffect: providers.None, Reason: "secretMissing",
			Message: fmt.Sprintf("provider account %q: no secret resolver to resolve its token reference", acct.Name)}
	}
	token, err := a.secrets.Resolve(ctx, cfg.Token)
	if err != nil {
		return nil, &providers.Error{Op: op, Class: providers.Terminal, SideEffect: providers.None, Reason: "secretMissing",
			Message: fmt.Sprintf("provider account %q: its token reference %s does not resolve; store the secret or fix the reference", acct.Name, cfg.Token), Err: err}
	}
	// Every request asks the call's fence before it leaves
	// (providers.WithFence).
	base := &http.Client{Transport: providers.FenceTransport(a.transport), Timeout: a.cfg.RequestTimeout}
	hc := oauth2.NewClient(context.WithValue(ctx, oauth2.HTTPClient, base), oauth2.StaticTokenSource(&oauth2.Token{AccessToken: token, TokenType: "Bearer"}))
	hc.Timeout = a.cfg.RequestTimeout
	do, err := godo.New(hc, godo.SetBaseURL(a.cfg.APIURL), godo.SetUserAgent("fleet-agent"))
	if err != nil {
		return nil, &providers.Error{Op: op, Class: providers.Terminal, SideEffect: providers.None, Message: "the godo client cannot be built", Err: err}
	}
	return &session{op: op, acct: acct, cfg: cfg, do: do}, nil
}

// call sends one request through godo and decodes the answer into out (nil
// for none), mapping a failure to its class and side effect.
func (a *Adapter) call(ctx context.Context, s *session, method, path string, body, out any) error {
	req, err := s.do.NewRequest(ctx, method, path, body)
	if err != nil {
		return &providers.Error{Op: s.op, Class: providers.Invalid, SideEffect: providers.None, Message: "the request cannot be built", Err: err}
	}
	_, err = s.do.Do(ctx, req, out)
	return a.mapErr(s.op, method, path, err)
}
