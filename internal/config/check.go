package config

import (
	"errors"
	"io/fs"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"unicode"
)

// Each check returns what is wrong with a value, or "". Values that are not
// secrets may be quoted: a person fixes faster what they can see.

// The patterns are compiled on first use, not at package initialisation:
// every command, `fleet-agent version` too, would pay for them (0.65 ms,
// 470 kB: a {1,128} repeat compiles to 128 instructions).
var (
	tenantRe = lazyRegexp(`^[A-Za-z0-9._-]{1,128}$`)
	// A group name as POSIX and systemd accept it, not a number (a GID
	// would be read as a name by the lookup and fail obscurely).
	groupRe = lazyRegexp(`^[A-Za-z_][A-Za-z0-9._-]{0,31}$`)
	ownerRe = lazyRegexp(`^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})$`)
	repoRe  = lazyRegexp(`^[A-Za-z0-9._-]{1,100}$`)
	// The status context prefix also stands in the comment marker
	// <!-- PREFIX:plan -->, so it keeps to characters that cannot end or
	// break an HTML comment.
	contextRe = lazyRegexp(`^[A-Za-z0-9][A-Za-z0-9._/-]{0,63}$`)
	hostRe    = lazyRegexp(`^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$`)
	userRe    = lazyRegexp(`^[A-Za-z0-9._~-]{1,128}$`)
)

// lazyRegexp returns expr compiled once, on the first call.
func lazyRegexp(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}

// checkTenant uses the grammar of TENANT in secret references, which is
// where tenant ids also appear.
func checkTenant(s string) string {
	if !tenantRe().MatchString(s) || s == "." || s == ".." {
		return "a tenant id is 1 to 128 of A-Z a-z 0-9 . _ -"
	}
	return ""
}

func checkPath(s string) string {
	switch {
	case s == "":
		return "an empty path; remove the key for its default"
	case strings.ContainsRune(s, 0):
		return "a path cannot hold a NUL byte"
	}
	return ""
}

// maxSocketPath is sun_path's size on Linux less the terminating NUL.
const maxSocketPath = 107

func checkSocket(s string) string {
	if msg := checkPath(s); msg != "" {
		return msg
	}
	if len(s) > maxSocketPath {
		return "a unix socket path is at most " + strconv.Itoa(maxSocketPath) + " bytes; choose a shorter one"
	}
	return ""
}

func checkGroup(s string) string {
	if !groupRe().MatchString(s) {
		return strconv.Quote(s) + " is not a group name (a letter or _ then letters, digits, . _ -; at most 32; not a number)"
	}
	return ""
}

func checkListen(s string) string {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return strconv.Quote(s) + " is not HOST:PORT, like 127.0.0.1:9464 or [::1]:9464"
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return "the port of " + strconv.Quote(s) + " must be a number from 0 to 65535"
	}
	if host != "" && net.ParseIP(host) == nil && !hostRe().MatchString(host) {
		return "the host of " + strconv.Quote(s) + " is neither an IP address nor a host name"
	}
	return ""
}

// urlKind is the transport a git.url names.
type urlKind int

const (
	urlNone urlKind = iota
	urlHTTPS
	urlHTTP
	urlSSH
	urlFile
	urlLocal
)

func (k urlKind) String() string {
	return [...]string{"unset", "an https URL", "an http URL", "an ssh URL", "a file:// URL", "a local path"}[k]
}

// checkGitURL accepts the forms of the documented surface: https, http to a loopback
// host (tests), ssh (ssh:// and scp-like user@host:path), file:// and local
// paths. Credentials never go in the URL: they belong in git.auth as
// references.
func checkGitURL(s string) (urlKind, string) {
	const forms = "use https://HOST/PATH, ssh://[USER@]HOST/PATH, USER@HOST:PATH, file:///PATH or a local path"
	if s == "" || strings.ContainsRune(s, 0) || strings.TrimSpace(s) != s {
		return urlNone, "empty or not a URL; " + forms
	}
	if strings.Contains(s, "://") {
		u, err := url.Parse(s)
		if err != nil {
			// url.Error quotes the whole URL, which may carry a token.
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err
			}
			return urlNone, "not a URL (" + err.Error() + "); " + forms
		}
		if u.Fragment != "" || strings.HasSuffix(s, "#") {
			return urlNone, "a git URL has no #fragment"
		}
		if _, hasPassword := u.User.Password(); hasPassword {
			return urlNone, "a password in git.url would be a secret written as a value; put it in git.auth as a reference"
		}
		switch strings.ToLower(u.Scheme) {
		case "https":
			if u.Host == "" {
				return urlNone, "an https URL needs a host"
			}
			if u.User != nil {
				return urlNone, "put the user name in git.auth.username, not in the URL"
			}
			return urlHTTPS, ""
		case "http":
			if u.Host == "" {
				return urlNone, "an http URL needs a host"
			}
			if u.User != nil {
				return urlNone, "put the user name in git.auth.username, not in the URL"
			}
			if !loopback(u.Hostname()) {
				return urlNone, "http is allowed only to a loopback host (tests): it would send credentials and documents in clear; use https"
			}
			return urlHTTP, ""
		case "ssh", "git+ssh", "ssh+git":
			if u.Host == "" || u.Path == "" || u.Path == "/" {
				return urlNone, "an ssh URL needs a host and a path, like ssh://git@github.com/acme/fleet.git"
			}
			return urlSSH, ""
		case "file":
			if (u.Host != "" && u.Host != "localhost") || !strings.HasPrefix(u.Path, "/") || u.Path == "/" {
				return urlNone, "a file URL is file:///ABSOLUTE/PATH"
			}
			return urlFile, ""
		default:
			return urlNone, "scheme " + strconv.Quote(u.Scheme) + " is not supported; " + forms
		}
	}
	// git's rule: a colon before the first slash makes an scp-like address.
	before, _, _ := strings.Cut(s, "/")
	if hostPart, _, ok := strings.Cut(before, ":"); ok {
		rest := s[len(hostPart)+1:]
		if r, _, _ := strings.Cut(rest, "/"); strings.Contains(r, "@") {
			return urlNone, "this looks like USER:PASSWORD@HOST; a password in git.url would be a secret written as a value: put it in git.auth as a reference"
		}
		user, host, hasUser := strings.Cut(hostPart, "@")
		if !hasUser {
			host, user = hostPart, ""
		}
		switch {
		case hasUser && !userRe().MatchString(user):
			return urlNone, "the user of an scp-like address USER@HOST:PATH is 1 to 128 of A-Z a-z 0-9 . _ ~ -"
		case !hostRe().MatchString(host) && !(strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") && net.ParseIP(host[1:len(host)-1]) != nil):
			return urlNone, "the host of an scp-like address [USER@]HOST:PATH is not a host name; " + forms
		case rest == "":
			return urlNone, "an scp-like address needs a path after the colon, like git@github.com:acme/fleet.git"
		}
		return urlSSH, ""
	}
	return urlLocal, ""
}

func loopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// checkBranch follows git check-ref-format for one branch name.
func checkBranch(s string) string {
	const rule = "a branch name like main (no spaces, no .., no ~ ^ : ? * [ \\, no leading - or /, no trailing / . or .lock)"
	if strings.HasPrefix(s, "refs/") {
		return "write the branch name (main), not a ref (refs/heads/main)"
	}
	if s == "" || s == "@" || strings.HasPrefix(s, "-") || strings.HasPrefix(s, "/") || strings.HasSuffix(s, "/") ||
		strings.HasSuffix(s, ".") || strings.HasSuffix(s, ".lock") || strings.Contains(s, "..") ||
		strings.Contains(s, "//") || strings.Contains(s, "@{") || strings.ContainsAny(s, " ~^:?*[\\") {
		return strconv.Quote(s) + " is not " + rule
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return "a branch name has no control characters"
		}
	}
	for _, part := range strings.Split(s, "/") {
		if strings.HasPrefix(part, ".") {
			return strconv.Quote(s) + " is not " + rule
		}
	}
	return ""
}

// checkDocPath wants a path inside the repository, as git names files.
func checkDocPath(s string) string {
	if !fs.ValidPath(s) || s == "." || strings.ContainsRune(s, '\\') {
		return strconv.Quote(s) + " is not a file path inside the repository, like fleet.json or deploy/fleet.json (relative, / separated, no . or .. parts)"
	}
	return ""
}

func checkUsername(s string) string {
	if s == "" || strings.ContainsAny(s, ":\n\r\x00") || strings.TrimSpace(s) != s {
		return "a user name is not empty and has no colon, line break or surrounding space"
	}
	return ""
}

func checkRepository(s string) string {
	owner, name, ok := strings.Cut(s, "/")
	switch {
	case !ok || !ownerRe().MatchString(owner) || !repoRe().MatchString(name) || name == "." || name == "..":
		return strconv.Quote(s) + " is not OWNER/NAME, like acme/fleet"
	case strings.HasSuffix(name, ".git"):
		return "write the repository name without .git, like acme/fleet"
	}
	return ""
}

// checkAPIURL wants the REST API's base and returns it ending with a slash,
// since API paths are resolved against it.
func checkAPIURL(s string) (string, string) {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return "", strconv.Quote(s) + " is not an https URL, like https://api.github.com/ or https://HOST/api/v3/"
	}
	if u.Scheme == "http" && !loopback(u.Hostname()) {
		return "", "http is allowed only to a loopback host (tests); use https"
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" || strings.HasSuffix(s, "?") || strings.HasSuffix(s, "#") {
		return "", "the API URL has no credentials, query or fragment"
	}
	if !strings.HasSuffix(u.Path, "/") {
		u.Path += "/"
		if u.RawPath != "" {
			u.RawPath += "/"
		}
	}
	return u.String(), ""
}

func checkStatusContext(s string) string {
	if !contextRe().MatchString(s) || strings.Contains(s, "--") || strings.HasSuffix(s, "/") {
		return strconv.Quote(s) + " is not a status context prefix: 1 to 64 of A-Z a-z 0-9 . _ / -, starting with a letter or digit, no -- and no trailing / (it also marks comments as <!-- PREFIX:plan -->)"
	}
	return ""
}

// suggest returns the known key closest to key when it is close enough to be
// a typo (case, a swap, one or two letters).
func suggest(key string, known []string) string {
	best, bestD := "", 3
	for _, k := range known {
		if strings.EqualFold(k, key) {
			return k
		}
		if d := distance(strings.ToLower(key), strings.ToLower(k)); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

// distance is the optimal string alignment distance: edits with adjacent
// swaps, which is how keys get mistyped (gti for git).
func distance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}
