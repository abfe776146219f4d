package gitsync

import (
	"context"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/go-git/go-git/v5/plumbing/transport"
)

// Resolver turns a secret reference (secret://, vault://, env://) into its
// value at the moment of use. The secrets package satisfies it; gitsync
// never stores what it returns.
type Resolver interface {
	Resolve(ctx context.Context, ref string) (string, error)
}

// Auth is git.auth of the agent's config. Token, Password and SSHKey are
// secret references, never values.
type Auth struct {
	// Username is the HTTP basic user; with Token it defaults to
	// x-access-token (what GitHub expects of a token).
	Username string
	// Token is a reference to a token sent as the HTTP basic password.
	Token string
	// Password is a reference to an HTTP basic password (with Username).
	Password string
	// SSHKey is a reference to a PEM or OpenSSH private key.
	SSHKey string
	// SSHKeyPassphrase is an optional reference to the key's passphrase.
	SSHKeyPassphrase string
	// KnownHosts is the path of a known_hosts file; required with ssh.
	KnownHosts string
}

// Config says which repository to follow and where to keep the local copy.
type Config struct {
	// URL is https://, http://, ssh://, user@host:path, file:// or a local
	// path.
	URL string
	// Branch is the only branch ever applied; default "main".
	Branch string
	// Auth holds credentials, as references.
	Auth Auth
	// Secrets resolves the references in Auth; needed only when Auth names
	// one.
	Secrets Resolver
	// Dir is the local copy, a bare repository; it is created if missing
	// and reused across restarts, so that a restart fetches only what is
	// new. Give it a directory of its own inside the state directory.
	Dir string
	// Want selects the remote refs, besides Branch, to follow: pull request
	// heads (refs/pull/N/head) on GitHub, other branches elsewhere. Refs it
	// stops selecting are dropped from the local copy. Nil follows none.
	// SetWant changes it between polls.
	Want func(ref string) bool
	// ListTimeout bounds one listing of the remote's refs; default 30s.
	ListTimeout time.Duration
	// FetchTimeout bounds one fetch; default 10m (a first fetch of a big
	// repository takes a while).
	FetchTimeout time.Duration
	// Clock times backoff and the Waiter; default the wall clock.
	Clock clock.Clock
	// MaxFileBytes is the largest document ReadFile returns; default 16 MiB
	// (the document limit of docs/document.md).
	MaxFileBytes int64
	// CacheBytes bounds go-git's in-memory object cache; default 4 MiB.
	CacheBytes int64
	// Keyring is an armored OpenPGP keyring; KeyringPath is a file holding
	// one, read at each verification so that an appended key counts at once.
	// With neither, Verify refuses.
	Keyring     []byte
	KeyringPath string
	// BackoffMin and BackoffMax bound the wait after failed polls (doubling
	// from min to max); defaults 5s and 5m.
	BackoffMin, BackoffMax time.Duration
	// MaxPacks is how many pack files the local copy may hold before it is
	// repacked, which also drops objects no kept ref reaches; default 16.
	MaxPacks int
}

const (
	defaultBranch     = "main"
	defaultMaxFile    = 16 << 20
	defaultCacheBytes = 4 << 20
	defaultMaxPacks   = 16
)

// Patterns returns a Want function matching refs against git refspec-style
// patterns: a pattern is a full ref name with at most one '*', which matches
// any run of characters, slashes included ("refs/pull/*/head",
// "refs/heads/*").
func Patterns(patterns ...string) func(ref string) bool {
	ps := append([]string(nil), patterns...)
	return func(ref string) bool {
		for _, p := range ps {
			if pre, suf, ok := strings.Cut(p, "*"); ok {
				if len(ref) >= len(pre)+len(suf)+1 && strings.HasPrefix(ref, pre) && strings.HasSuffix(ref, suf) {
					return true
				}
			} else if p == ref {
				return true
			}
		}
		return false
	}
}

// remote is the parsed URL.
type remote struct {
	url   string // what go-git is given
	proto string // https, http, ssh, file
	// gitDir is the repository directory of a local remote, watched by the
	// Waiter; "" otherwise.
	gitDir string
}

func (c *Config) normalise() (remote, error) {
	if c.Branch == "" {
		c.Branch = defaultBranch
	}
	if c.ListTimeout <= 0 {
		c.ListTimeout = 30 * time.Second
	}
	if c.FetchTimeout <= 0 {
		c.FetchTimeout = 10 * time.Minute
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.MaxFileBytes <= 0 {
		c.MaxFileBytes = defaultMaxFile
	}
	if c.CacheBytes <= 0 {
		c.CacheBytes = defaultCacheBytes
	}
	if c.BackoffMin <= 0 {
		c.BackoffMin = 5 * time.Second
	}
	if c.BackoffMax < c.BackoffMin {
		c.BackoffMax = max(5*time.Minute, c.BackoffMin)
	}
	if c.MaxPacks <= 0 {
		c.MaxPacks = defaultMaxPacks
	}
	bad := func(msg string) (remote, error) {
		return remote{}, fail(&Error{Kind: KindConfig, Message: msg})
	}
	if c.Dir == "" {
		return bad("gitsync needs a directory for the local copy of the repository")
	}
	if strings.ContainsAny(c.Branch, " ~^:?*[\\") || strings.HasPrefix(c.Branch, "refs/") || strings.Contains(c.Branch, "..") {
		return bad("git.branch must be a branch name such as main, not " + quote(c.Branch))
	}
	if c.URL == "" {
		return bad("git.url is required: https://, ssh://, file:// or a local path")
	}
	u := c.URL
	local := !strings.Contains(u, "://") && !looksSCP(u)
	if local {
		abs, err := filepath.Abs(u)
		if err != nil {
			return bad("git.url: cannot make " + quote(u) + " absolute")
		}
		u = abs
	}
	ep, err := transport.NewEndpoint(u)
	if err != nil {
		return remote{}, fail(&Error{Kind: KindConfig, Message: "git.url is not a git URL", Err: err})
	}
	r := remote{url: u, proto: ep.Protocol}
	switch ep.Protocol {
	case "https", "http":
		if c.Auth.SSHKey != "" {
			return bad("git.auth.sshKey needs an ssh:// or user@host:path URL")
		}
		if c.Auth.Password != "" && c.Auth.Username == "" {
			return bad("git.auth.password needs git.auth.username")
		}
	case "ssh":
		if c.Auth.SSHKey == "" {
			return bad("an ssh URL needs git.auth.sshKey (a secret reference to the private key)")
		}
		if c.Auth.KnownHosts == "" {
			return bad("an ssh URL needs git.auth.knownHosts: the path of a known_hosts file with the host's key (unknown hosts are never trusted)")
		}
	case "file":
		r.gitDir = localGitDir(ep.Path)
	default:
		return bad("git.url: protocol " + quote(ep.Protocol) + " is not supported; use https, ssh, file:// or a local path")
	}
	if (c.Auth.Token != "" || c.Auth.Password != "" || c.Auth.SSHKey != "") && c.Secrets == nil {
		return bad("git.auth names a secret but no secret resolver was given")
	}
	return r, nil
}

// looksSCP reports whether u is scp-like ssh syntax: [user@]host:path with
// no slash before the colon.
func looksSCP(u string) bool {
	i := strings.Index(u, ":")
	if i <= 0 {
		return false
	}
	return !strings.Contains(u[:i], "/") && !(len(u[:i]) == 1 && filepath.VolumeName(u) != "")
}

// localGitDir finds the git directory of a local repository: the path
// itself when bare, its .git directory otherwise.
func localGitDir(p string) string {
	if fi, err := os.Stat(filepath.Join(p, ".git")); err == nil && fi.IsDir() {
		return filepath.Join(p, ".git")
	}
	return p
}

func quote(s string) string { return "\"" + s + "\"" }

// cleanPath checks a path inside a commit's tree.
func cleanPath(p string) (string, bool) {
	p = strings.TrimPrefix(p, "./")
	if p == "" || strings.HasPrefix(p, "/") {
		return "", false
	}
	c := path.Clean(p)
	if c == "." || c == ".." || strings.HasPrefix(c, "../") {
		return "", false
	}
	return c, true
}
