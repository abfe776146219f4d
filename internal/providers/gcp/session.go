package gcp

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"cloud.google.com/go/compute/metadata"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"
	compute "google.golang.org/api/compute/v1"
	container "google.golang.org/api/container/v1"
	"google.golang.org/api/option"

	"github.com/fleet-agent/fleet-agent/internal/providers"
)

// session is one call's view of an account: its config, an access token
// fetched for this call alone, and SDK clients that send it. Nothing of it
// outlives the call: the secret is resolved when the call starts and
// dropped, and the next call fetches a token of its own.
type session struct {
	op    string
	acct  providers.Account
	cfg   accountConfig
	token *oauth2.Token
	ctr   *container.Service
	cmp   *compute.Service
}

// scope is what the adapter asks of the account's identity: GKE and the
// compute catalogue both answer to cloud-platform.
const scope = "https://www.googleapis.com/auth/cloud-platform"

// open resolves the account's credentials, fetches a token and builds the
// clients. Its errors never hold the secret: a key that does not parse is
// described, not quoted.
func (a *Adapter) open(ctx context.Context, op string, acct providers.Account) (*session, error) {
	if err := ctx.Err(); err != nil {
		return nil, &providers.Error{Op: op, Class: providers.Unavailable, SideEffect: providers.None, Message: "cancelled before the call", Err: err}
	}
	cfg, err := parseAccount(op, acct)
	if err != nil {
		return nil, err
	}
	s := &session{op: op, acct: acct, cfg: cfg}
	if cfg.MetadataServer {
		s.token, err = a.metadataToken(ctx, op, acct)
	} else {
		s.token, err = a.keyToken(ctx, op, acct, cfg)
	}
	if err != nil {
		return nil, err
	}
	hc := &http.Client{Transport: &oauth2.Transport{Source: oauth2.StaticTokenSource(s.token), Base: a.transport()}}
	// WithHTTPClient makes the SDK use this client as it is: no credential
	// discovery, and no retry layer (container/v1 and compute/v1 send each
	// call once, GKE's documentation).
	if s.ctr, err = container.NewService(ctx, option.WithEndpoint(a.cfg.ContainerEndpoint), option.WithHTTPClient(hc)); err != nil {
		return nil, providers.Errorf(op, providers.Invalid, providers.None, "container client: %v", err)
	}
	if s.cmp, err = compute.NewService(ctx, option.WithEndpoint(a.cfg.ComputeEndpoint), option.WithHTTPClient(hc)); err != nil {
		return nil, providers.Errorf(op, providers.Invalid, providers.None, "compute client: %v", err)
	}
	return s, nil
}

// transport asks the call's fence before each request leaves
// (providers.WithFence).
func (a *Adapter) transport() http.RoundTripper {
	if a.client != nil && a.client.Transport != nil {
		return providers.FenceTransport(a.client.Transport)
	}
	return providers.FenceTransport(http.DefaultTransport)
}

func (a *Adapter) httpClient() *http.Client {
	if a.client != nil {
		return a.client
	}
	return http.DefaultClient
}

// keyToken fetches an access token for a service account key, from the
// key's token_uri, asking for CredentialTTL (the assertion's exp).
func (a *Adapter) keyToken(ctx context.Context, op string, acct providers.Account, cfg accountConfig) (*oauth2.Token, error) {
	if a.secrets == nil {
		return nil, &providers.Error{Op: op, Class: providers.Terminal, SideEffect: providers.None, Reason: "secretMissing", Message: "provider account " + quote(acct.Name) + ": no secret resolver to read its credentials"}
	}
	key, err := a.secrets.Resolve(ctx, cfg.Credentials)
	if err != nil {
		return nil, &providers.Error{Op: op, Class: providers.Terminal, SideEffect: providers.None, Reason: "secretMissing",
			Message: "provider account " + quote(acct.Name) + ": its credentials reference does not resolve; store the service account key under that reference", Err: err}
	}
	conf, err := google.JWTConfigFromJSON([]byte(key), scope)
	if err != nil || conf.Email == "" || len(conf.PrivateKey) == 0 {
		// The parser's error may quote the key; it stays out.
		return nil, &providers.Error{Op: op, Class: providers.Terminal, SideEffect: providers.None, Reason: "credentialsRefused",
			Message: "provider account " + quote(acct.Name) + ": its credentials are not a service account key (JSON with type service_account, client_email, private_key, token_uri)"}
	}
	conf.Expires = providers.CredentialTTL
	tok, err := conf.TokenSource(context.WithValue(ctx, oauth2.HTTPClient, a.httpClient())).Token()
	if err != nil {
		return nil, tokenError(op, acct, conf.TokenURL, err)
	}
	return tok, nil
}

// metadataToken asks the metadata server of the machine fleet-agent runs
// on (GCE_METADATA_HOST, else the link-local address) for its default
// service account's token.
func (a *Adapter) metadataToken(ctx context.Context, op string, acct providers.Account) (*oauth2.Token, error) {
	c := metadata.NewClient(a.httpClient())
	body, err := c.GetWithContext(ctx, "instance/service-accounts/default/token?scopes="+url.QueryEscape(scope))
	if err != nil {
		return nil, &providers.Error{Op: op, Class: providers.Unavailable, SideEffect: providers.None,
			Message: "provider account " + quote(acct.Name) + ": the metadata server gave no token: " + err.Error()}
	}
	var tj struct {
		AccessToken string `json:"access_token"`
		ExpiresIn   int64  `json:"expires_in"`
		TokenType   string `json:"token_type"`
	}
	if err := json.Unmarshal([]byte(body), &tj); err != nil || tj.AccessToken == "" {
		return nil, &providers.Error{Op: op, Class: providers.Unavailable, SideEffect: providers.None,
			Message: "provider account " + quote(acct.Name) + ": the metadata server's token answer did not parse"}
	}
	return &oauth2.Token{AccessToken: tj.AccessToken, TokenType: tj.TokenType, Expiry: time.Now().Add(time.Duration(tj.ExpiresIn) * time.Second)}, nil
}

// tokenError classes a failed token fetch. Nothing was asked of GKE yet,
// so the side effect is always None.
func tokenError(op string, acct providers.Account, tokenURL string, err error) error {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) && re.Response != nil {
		// The x/oauth2 JWT flow leaves the body unparsed: read the OAuth2
		// error code and description (never the request) from it.
		var body struct {
			Error       string `json:"error"`
			Description string `json:"error_description"`
		}
		_ = json.Unmarshal(re.Body, &body)
		what := strings.TrimSpace(body.Error + ": " + body.Description)
		code := re.Response.StatusCode
		switch {
		case code == http.StatusTooManyRequests:
			return &providers.Error{Op: op, Class: providers.Throttled, SideEffect: providers.None, RetryAfter: retryAfterHeader(re.Response.Header),
				Message: "provider account " + quote(acct.Name) + ": the token endpoint asks us to slow down"}
		case code >= 500:
			return &providers.Error{Op: op, Class: providers.Unavailable, SideEffect: providers.None,
				Message: "provider account " + quote(acct.Name) + ": the token endpoint failed (" + http.StatusText(code) + ")"}
		default:
			return &providers.Error{Op: op, Class: providers.Terminal, SideEffect: providers.None, Reason: "credentialsRefused",
				Message: "provider account " + quote(acct.Name) + ": credentials refused by the token endpoint (" + what + "); check the service account key and that it is not deleted or disabled"}
		}
	}
	host := tokenURL
	if u, perr := url.Parse(tokenURL); perr == nil {
		host = u.Host
	}
	return &providers.Error{Op: op, Class: providers.Unavailable, SideEffect: providers.None,
		Message: "provider account " + quote(acct.Name) + ": the token endpoint " + host + " could not be reached", Err: cause(err)}
}

// cause keeps a transport failure's context errors reachable for
// errors.Is, without carrying the failed request along.
func cause(err error) error {
	switch {
	case errors.Is(err, context.Canceled):
		return context.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		return context.DeadlineExceeded
	}
	return nil
}

func quote(s string) string { return `"` + s + `"` }

// parent is the path of a location of the account's project.
func (s *session) parent(location string) string {
	return "projects/" + s.cfg.ProjectID + "/locations/" + location
}
