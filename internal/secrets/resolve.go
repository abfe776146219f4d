package secrets

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

// Causes carried by the refusals Resolve returns, for errors.Is. The
// refusal's message names the reference and says what to do; these say
// what kind of failure it was.
var (
	// ErrMalformed: the reference does not follow the grammar, or is of a
	// form the agent never resolves (INVALID_INPUT).
	ErrMalformed = errors.New("malformed secret reference")
	// ErrNotFound: the variable, file or Vault secret or field is not there
	// (INVALID_STATE).
	ErrNotFound = errors.New("secret not found")
	// ErrPermission: the store refused access (INVALID_STATE).
	ErrPermission = errors.New("permission denied")
	// ErrNotConfigured: the store the reference needs is not set up: no
	// secrets directory, no Vault address or token (INVALID_STATE).
	ErrNotConfigured = errors.New("secret store not configured")
	// ErrUnusable: the store holds something that is not a usable secret:
	// not a regular file, too large, a Vault field that is not a string
	// (INVALID_STATE).
	ErrUnusable = errors.New("stored secret unusable")
	// ErrUnavailable: the store could not be reached or answered with a
	// server error; trying again later may work (UNAVAILABLE).
	ErrUnavailable = errors.New("secret store unavailable")
)

// maxSecretSize bounds what a secret file or a Vault answer may hold. Real
// secrets (tokens, keys, certificates) are far smaller; a bigger file is a
// mistake, and reading it whole would be a way to exhaust memory.
const maxSecretSize = 1 << 20

// DefaultVaultTimeout is the deadline of one Vault request when Options says
// none.
const DefaultVaultTimeout = 10 * time.Second

// LookupEnv is the signature of os.LookupEnv; tests pass their own.
type LookupEnv func(key string) (string, bool)

// Options configures a Resolver. The zero value resolves from the process
// environment, $CREDENTIALS_DIRECTORY and $VAULT_ADDR/$VAULT_TOKEN.
type Options struct {
	// Env is where env:// references and the defaults below are looked
	// up; nil means os.LookupEnv.
	Env LookupEnv
	// Dir is the secrets directory for secret://NAME; "" means
	// $CREDENTIALS_DIRECTORY, where systemd's LoadCredential= puts files.
	Dir string
	// Vault says how to reach Vault for vault:// references.
	Vault VaultOptions
	// Redactor receives every value resolved (and the Vault token); nil
	// means a new one, available from Resolver.Redactor.
	Redactor *Redactor
}

// VaultOptions says how to reach a Vault KV v2 store. Empty fields fall back
// to Vault's own environment variables.
type VaultOptions struct {
	// Addr is the server's base URL; "" means $VAULT_ADDR.
	Addr string
	// Token is the client token, a value (the caller resolved it); ""
	// means $VAULT_TOKEN.
	Token string
	// Namespace, when set, is sent as X-Vault-Namespace; "" means
	// $VAULT_NAMESPACE, and no header when that is unset too.
	Namespace string
	// Timeout is the deadline of each request; 0 means DefaultVaultTimeout.
	Timeout time.Duration
	// Client makes the requests; nil means a client of its own. Redirects
	// are never followed either way (see vault.go).
	Client *http.Client
}

// Resolver turns references into values at the moment of use. It keeps no
// value: every call reads the environment, the file or Vault again, so a
// rotated secret is picked up and nothing lingers in memory longer than the
// caller keeps it. It is safe for concurrent use.
type Resolver struct {
	env      LookupEnv
	dir      string
	vault    VaultOptions
	client   *http.Client
	redactor *Redactor
}

// NewResolver returns a Resolver for the given options.
func NewResolver(o Options) *Resolver {
	r := &Resolver{env: o.Env, dir: o.Dir, vault: o.Vault, redactor: o.Redactor}
	if r.env == nil {
		r.env = os.LookupEnv
	}
	if r.redactor == nil {
		r.redactor = NewRedactor()
	}
	if r.vault.Timeout <= 0 {
		r.vault.Timeout = DefaultVaultTimeout
	}
	base := r.vault.Client
	if base == nil {
		base = &http.Client{}
	}
	c := *base
	// Vault answers a standby's requests with a redirect to the active
	// node. Following it would send X-Vault-Token to whatever host the
	// Location names (Go drops only Authorization and cookies), so a
	// redirect is an error that asks for the active node's address.
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	r.client = &c
	return r
}

// Redactor returns the Redactor every resolved value is registered with.
func (r *Resolver) Redactor() *Redactor { return r.redactor }

// Resolve returns the value ref points at. Errors are *refusal.Error: they
// name the reference, never a value, and carry one of the causes above.
func (r *Resolver) Resolve(ctx context.Context, ref string) (string, error) {
	parsed, err := ParseRef(ref)
	if err != nil {
		// ParseRef's message never repeats the text, which may be a
		// value pasted where a reference belongs; neither does this one.
		return "", &refusal.Error{Code: refusal.InvalidInput, Message: "not a usable secret reference: " + err.Error(), Err: ErrMalformed}
	}
	return r.ResolveRef(ctx, parsed)
}

// ResolveRef is Resolve for a reference already parsed.
func (r *Resolver) ResolveRef(ctx context.Context, ref Ref) (string, error) {
	var (
		v   string
		err error
	)
	switch ref.Scheme {
	case SchemeEnv:
		v, err = r.fromEnv(ref)
	case SchemeSecret:
		v, err = r.fromDir(ref)
	case SchemeVault:
		v, err = r.fromVault(ctx, ref)
	default:
		return "", fail(refusal.InvalidInput, ErrMalformed, ref, "unknown scheme %q", string(ref.Scheme))
	}
	if err != nil {
		return "", err
	}
	if v == "" {
		// An empty password or token is a missing one in disguise, and an
		// empty value could not be masked.
		return "", fail(refusal.InvalidState, ErrNotFound, ref, "the value is empty; store the secret there or point the reference elsewhere")
	}
	r.redactor.Add(v)
	return v, nil
}

// fail builds a refusal about ref. The message starts with the reference so
// that a person knows which one to fix; format must never be given a value.
func fail(code refusal.Code, cause error, ref Ref, format string, args ...any) *refusal.Error {
	return &refusal.Error{Code: code, Message: ref.String() + ": " + fmt.Sprintf(format, args...), Err: cause}
}

func (r *Resolver) fromEnv(ref Ref) (string, error) {
	v, ok := r.env(ref.Name)
	if !ok {
		return "", fail(refusal.InvalidState, ErrNotFound, ref, "environment variable %s is not set; set it in the agent's environment (systemd: Environment= or EnvironmentFile=)", ref.Name)
	}
	return v, nil
}

// SecretsDir returns the directory secret://NAME reads from: the one given,
// else $CREDENTIALS_DIRECTORY, else "".
func (r *Resolver) SecretsDir() string {
	if r.dir != "" {
		return r.dir
	}
	v, _ := r.env("CREDENTIALS_DIRECTORY")
	return v
}

func (r *Resolver) fromDir(ref Ref) (string, error) {
	// secret://TENANT/ID in a provider account (the reference's DOKS token is
	// written so) reads the file ID in the directory TENANT of the secrets
	// directory. The agent's own config refuses that form (config), and the
	// sandboxes' env and userData references are never given to a resolver.
	name := ref.Name
	if ref.TenantScoped() {
		for _, seg := range []string{ref.Tenant, ref.ID} {
			if seg == "." || seg == ".." {
				return "", fail(refusal.InvalidInput, ErrMalformed, ref, "TENANT and ID must be names inside the secrets directory, not . or ..")
			}
		}
		name = ref.Tenant + "/" + ref.ID
	}
	if name == "." || name == ".." {
		return "", fail(refusal.InvalidInput, ErrMalformed, ref, "NAME must be a file name inside the secrets directory, not . or ..")
	}
	dir := r.SecretsDir()
	if dir == "" {
		return "", fail(refusal.InvalidState, ErrNotConfigured, ref, "no secrets directory: set secrets.dir in the config, or run under systemd with LoadCredential=%s:PATH", name)
	}
	// os.OpenInRoot refuses a path that leaves dir, through a symbolic link
	// included, so a link planted in the directory cannot read /etc/shadow.
	f, err := os.OpenInRoot(dir, name)
	if err != nil {
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return "", fail(refusal.InvalidState, ErrNotFound, ref, "no file %s in the secrets directory %s; create it (mode 0400) or add LoadCredential=%s:PATH to the unit", name, dir, name)
		case errors.Is(err, fs.ErrPermission):
			return "", fail(refusal.InvalidState, ErrPermission, ref, "file %s in %s cannot be read by the agent's user; fix its owner or mode", name, dir)
		default:
			// The os error names a path, never content.
			return "", &refusal.Error{Code: refusal.InvalidState, Message: ref.String() + ": cannot open it in " + dir + ": " + err.Error(), Err: errors.Join(ErrPermission, err)}
		}
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", &refusal.Error{Code: refusal.InvalidState, Message: ref.String() + ": " + err.Error(), Err: err}
	}
	if !st.Mode().IsRegular() {
		return "", fail(refusal.InvalidState, ErrUnusable, ref, "%s in %s is not a regular file", name, dir)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxSecretSize+1))
	if err != nil {
		return "", &refusal.Error{Code: refusal.InvalidState, Message: ref.String() + ": reading it failed: " + err.Error(), Err: err}
	}
	if len(b) > maxSecretSize {
		return "", fail(refusal.InvalidState, ErrUnusable, ref, "file %s is larger than %d bytes; a secret file holds one secret", name, maxSecretSize)
	}
	// One trailing newline, as echo and editors leave it, is not part of
	// the secret; more than one is kept, since it would be deliberate.
	v := string(b)
	if s, ok := strings.CutSuffix(v, "\r\n"); ok {
		return s, nil
	}
	return strings.TrimSuffix(v, "\n"), nil
}
