// Package config reads the agent's config file (docs/configuration.md): one
// YAML file, decoded with line numbers, in which an unknown or repeated key,
// a value of the wrong type or a secret written as a value is refused with
// its line. Every key of the documented surface is parsed and checked here, even those
// whose features live elsewhere, so that a mistake shows when the file is
// read and not hours later when the feature first runs.
//
// Provider blocks (providers.<id>) stay YAML nodes: each adapter decodes its
// own block strictly (providers.DecodeStrict). This package checks only what
// holds for every block: the provider id, repeated keys, and that secret
// fields hold references.
package config

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

// DefaultPath is where run looks for its config when neither --config nor
// FLEET_AGENT_CONFIG names one.
const DefaultPath = "/etc/fleet-agent/config.yaml"

// The defaults of the documented surface that do not depend on the environment.
const (
	DefaultTenant        = "root"
	DefaultListen        = "127.0.0.1:9464"
	DefaultBranch        = "main"
	DefaultDocumentPath  = "fleet.json"
	DefaultInterval      = time.Minute
	DefaultGitHubAPIURL  = "https://api.github.com/"
	DefaultStatusContext = "fleet-agent"
	DefaultDriftEvery    = 15 * time.Minute
	// DefaultMaxTeardowns: one substrate per plan, so a document emptied or
	// cut short by mistake cannot take the fleet down.
	DefaultMaxTeardowns = 1
)

// maxFileSize bounds a config file; a real one is a few hundred bytes.
const maxFileSize = 1 << 20

// LookupEnv is the signature of os.LookupEnv; tests pass their own so that
// defaults do not depend on the machine.
type LookupEnv func(key string) (string, bool)

// Config is the agent's configuration, defaults applied. Fields holding
// secrets hold references (secrets.ParseRef), never values.
type Config struct {
	// File is the name messages use for the file; "" when no file was read.
	File string

	Tenant string
	State  string // path of the bbolt state file
	// StateBackend is bbolt (the file at State) or etcd (Etcd).
	StateBackend string
	Etcd         *StateEtcd
	Socket       string // path of the local API socket
	SocketGroup  string // group that may use the socket; "" for none
	Listen       string // host:port of the ops HTTP listener
	Pprof        bool
	// ExposeOps lets the ops listener (plain HTTP, no authentication) and
	// ExposeInsecureJoin an insecure join listener serve on an address
	// other than loopback; without them the agent refuses to start there.
	ExposeOps          bool
	ExposeInsecureJoin bool

	Git       Git
	GitHub    *GitHub // nil when the file has no github block: nothing is posted
	Apply     Apply
	Policy    Policy
	Drift     Drift
	Secrets   Secrets
	Substrate Substrate
	Events    Events

	// Providers holds each provider's block as written, keyed by provider
	// id; the adapter decodes it. A block written as null is a null node.
	Providers map[string]*yaml.Node
	// providersNode is the providers mapping itself, for
	// providers.Registry.OpenAll.
	providersNode *yaml.Node

	lines      map[string]int // dotted key -> line of the key
	secretRefs []SecretRef
}

// Git is where the documents come from.
type Git struct {
	URL      string // "" when not set; run requires it (CheckForRun)
	Branch   string
	Path     string
	Interval time.Duration
	Auth     GitAuth
	Verify   *Verify // nil: commits are not checked for signatures
}

// GitAuth is how the agent authenticates to the remote. At most one way is
// set: Token (with an optional Username, default x-access-token), Username
// and Password, or SSHKey with KnownHosts. All empty means anonymous.
type GitAuth struct {
	Token      string // reference
	Username   string
	Password   string // reference
	SSHKey     string // reference to the private key
	KnownHosts string // path of a known_hosts file
}

// Verify makes the agent apply only commits signed by the keyring's keys.
type Verify struct {
	Keyring string // path of an armored OpenPGP keyring
}

// GitHub is where plans and results are posted.
type GitHub struct {
	Repository    string // OWNER/NAME
	APIURL        string // always ends with a slash
	Token         string // reference; "" when App is set
	App           *GitHubApp
	WebhookSecret string // reference; "" for no webhook
	StatusContext string
}

// Owner returns the OWNER of Repository.
func (g *GitHub) Owner() string { o, _, _ := strings.Cut(g.Repository, "/"); return o }

// Name returns the NAME of Repository.
func (g *GitHub) Name() string { _, n, _ := strings.Cut(g.Repository, "/"); return n }

// GitHubApp authenticates as a GitHub App installation.
type GitHubApp struct {
	ID             int64
	InstallationID int64
	PrivateKey     string // reference to the PEM key
}

// Apply are the apply options.
type Apply struct {
	Prune               bool
	RequireReviewedPlan bool
	// MaxTeardowns is how many substrates one plan may tear down; 0 none.
	MaxTeardowns int
}

// Policy says where the plans' policy is (docs/policy.md).
type Policy struct {
	// Path is the policy file in the repository, read at the applied commit
	// of git.branch (never from a pull request under review); "" for none.
	Path string
}

// Drift are the drift options.
type Drift struct {
	Every time.Duration
	Heal  bool
	// PullRequests proposes each distinct drift as a pull request (a
	// branch without GitHub) that writes the fleet as it is into the file.
	PullRequests bool
	// RevertOnClose applies the document again when such a proposal is
	// closed without merging.
	RevertOnClose bool
}

// Secrets says where secret://NAME files are.
type Secrets struct {
	Dir string // "" when neither the file nor $CREDENTIALS_DIRECTORY says
}

// SecretRef is one secret reference the config holds.
type SecretRef struct {
	Key  string // dotted key, e.g. git.auth.token or providers.aws.secretKey
	Ref  string
	Line int
}

// Defaults returns the configuration without a file: the documented
// defaults, some of which come from systemd's environment. env nil means the
// process environment.
func Defaults(env LookupEnv) *Config {
	if env == nil {
		env = os.LookupEnv
	}
	c := &Config{
		Tenant:    DefaultTenant,
		State:     "./fleet.db",
		Socket:    "./fleet-agent.sock",
		Listen:    DefaultListen,
		Git:       Git{Branch: DefaultBranch, Path: DefaultDocumentPath, Interval: DefaultInterval},
		Apply:     Apply{RequireReviewedPlan: true, MaxTeardowns: DefaultMaxTeardowns},
		Drift:     Drift{Every: DefaultDriftEvery},
		Substrate: Substrate{Every: DefaultSubstrateEvery},
		Providers: map[string]*yaml.Node{},
		lines:     map[string]int{},
	}
	if d := systemdDir(env, "STATE_DIRECTORY"); d != "" {
		c.State = filepath.Join(d, "fleet.db")
	}
	if d := systemdDir(env, "RUNTIME_DIRECTORY"); d != "" {
		c.Socket = filepath.Join(d, "api.sock")
	}
	c.Secrets.Dir = systemdDir(env, "CREDENTIALS_DIRECTORY")
	return c
}

// systemdDir reads one of systemd's directory variables. With several
// StateDirectory= entries systemd joins them with colons; the first is the
// agent's.
func systemdDir(env LookupEnv, key string) string {
	v, _ := env(key)
	first, _, _ := strings.Cut(v, ":")
	return first
}

// Path says which config file to read: the --config flag, else
// $FLEET_AGENT_CONFIG, else DefaultPath. explicit is false for DefaultPath:
// commands other than run then work without the file when it is missing.
func Path(flagValue string, env LookupEnv) (path string, explicit bool) {
	if env == nil {
		env = os.LookupEnv
	}
	if flagValue != "" {
		return flagValue, true
	}
	if v, _ := env("FLEET_AGENT_CONFIG"); v != "" {
		return v, true
	}
	return DefaultPath, false
}

// Load reads and parses the file at path. env nil means the process
// environment. A missing file is INVALID_INPUT wrapping fs.ErrNotExist, so
// a caller with an implicit path can tell it apart and use Defaults.
func Load(path string, env LookupEnv) (*Config, error) {
	f, err := os.Open(path)
	switch {
	case errors.Is(err, fs.ErrNotExist) && path == DefaultPath:
		return nil, refusal.Wrap(refusal.InvalidInput, err, "there is no config file at %s: pass --config FILE or set FLEET_AGENT_CONFIG", path)
	case errors.Is(err, fs.ErrNotExist):
		return nil, refusal.Wrap(refusal.InvalidInput, err, "there is no config file at %s: check the path given by --config or FLEET_AGENT_CONFIG", path)
	case errors.Is(err, fs.ErrPermission):
		return nil, refusal.Wrap(refusal.InvalidInput, err, "cannot read the config file %s: run as a user that may read it (the service's user, or root)", path)
	case err != nil:
		return nil, refusal.Wrap(refusal.InvalidInput, err, "cannot read the config file %s", path)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, refusal.Wrap(refusal.InvalidInput, err, "cannot read the config file %s", path)
	}
	if len(data) > maxFileSize {
		return nil, refusal.New(refusal.InvalidInput, "%s: the config file is larger than %d bytes", path, maxFileSize)
	}
	return Parse(path, data, env)
}

// Parse parses a config file's bytes; name is how messages call the file.
// env nil means the process environment. The error is a *refusal.Error
// (INVALID_INPUT) whose message has one "NAME:LINE: ..." line per problem
// and whose cause is Problems.
func Parse(name string, data []byte, env LookupEnv) (*Config, error) {
	c := Defaults(env)
	c.File = name
	p := &parser{file: name, c: c}
	p.parse(data)
	if err := p.problems.err(); err != nil {
		return nil, err
	}
	return c, nil
}

// CheckForRun adds what only `run` needs: a git.url, and a secrets
// directory when a reference reads from one.
func (c *Config) CheckForRun() error {
	var ps Problems
	if c.Git.URL == "" {
		line := c.lines["git"]
		msg := "git.url is required by run: the repository to follow, like https://github.com/acme/fleet.git"
		if c.File == "" {
			msg = "no config file: " + msg + "; pass --config FILE or set FLEET_AGENT_CONFIG"
		}
		ps = append(ps, Problem{File: c.File, Line: line, Message: msg})
	}
	if c.Secrets.Dir == "" {
		for _, s := range c.secretRefs {
			if strings.HasPrefix(s.Ref, "secret://") {
				ps = append(ps, Problem{File: c.File, Line: s.Line, Message: fmt.Sprintf("%s reads secret file %s but there is no secrets directory: set secrets.dir, or run under systemd with LoadCredential=", s.Key, strings.TrimPrefix(s.Ref, "secret://"))})
			}
		}
	}
	return ps.err()
}

// Line returns the line of a dotted key (git.auth.token, providers.aws) in
// the file, or 0 when the key was not written.
func (c *Config) Line(key string) int { return c.lines[key] }

// Where returns "FILE:LINE" for a key written in the file, "FILE" for one
// that was not, and "" without a file; later refusals about a key (a secret
// that does not resolve) use it to point at the line.
func (c *Config) Where(key string) string {
	if l := c.lines[key]; l > 0 && c.File != "" {
		return fmt.Sprintf("%s:%d", c.File, l)
	}
	return c.File
}

// ProvidersBlock returns the providers mapping as written, for
// providers.Registry.OpenAll; nil when the file has none.
func (c *Config) ProvidersBlock() *yaml.Node { return c.providersNode }

// SecretRefs lists every secret reference of the config, those inside
// provider blocks included, in the order of the file.
func (c *Config) SecretRefs() []SecretRef { return slices.Clone(c.secretRefs) }

// Problem is one thing wrong with a config file.
type Problem struct {
	File    string
	Line    int // 0 when the problem has no line
	Message string
}

func (p Problem) String() string {
	switch {
	case p.File == "" && p.Line == 0:
		return p.Message
	case p.Line == 0:
		return p.File + ": " + p.Message
	case p.File == "":
		return fmt.Sprintf("line %d: %s", p.Line, p.Message)
	}
	return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Message)
}

// Problems are the problems of one file, in the order of their lines, at
// most 50 and then one saying how many more. It is the cause of the refusal
// Parse, Load and CheckForRun return.
type Problems []Problem

func (ps Problems) Error() string {
	lines := make([]string, len(ps))
	for i, p := range ps {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// maxProblems bounds a report: past it the rest is noise from one mistake.
const maxProblems = 50

func (ps Problems) err() error {
	if len(ps) == 0 {
		return nil
	}
	ps = slices.Clone(ps)
	slices.SortStableFunc(ps, func(a, b Problem) int { return a.Line - b.Line })
	if len(ps) > maxProblems {
		more := len(ps) - maxProblems
		ps = append(ps[:maxProblems], Problem{File: ps[0].File, Message: fmt.Sprintf("and %d more problems", more)})
	}
	return &refusal.Error{Code: refusal.InvalidInput, Message: ps.Error(), Err: ps}
}

// AsProblems returns the problems behind an error of Parse, Load or
// CheckForRun, or nil.
func AsProblems(err error) Problems {
	var ps Problems
	if errors.As(err, &ps) {
		return ps
	}
	return nil
}
