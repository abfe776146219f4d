// Package secrets turns secret references into values at the moment of use
// and keeps those values out of everything that is written down: the state
// file, logs, plans, comments and statuses. A document and a config hold
// only references; see docs/document.md for the grammar.
package secrets

import (
	"fmt"
	"regexp"
	"strings"
	"sync"
)

// Scheme is the kind of a reference.
type Scheme string

// The schemes of the documented surface.
const (
	SchemeSecret Scheme = "secret" // secret://NAME or secret://TENANT/ID
	SchemeVault  Scheme = "vault"  // vault://PATH#FIELD
	SchemeEnv    Scheme = "env"    // env://VAR
)

// Ref is a parsed secret reference. It never holds a value.
type Ref struct {
	Scheme Scheme
	// Name is NAME for secret://NAME, VAR for env://VAR, PATH for vault://.
	Name string
	// Tenant and ID are set for secret://TENANT/ID.
	Tenant, ID string
	// Field is FIELD for vault://PATH#FIELD.
	Field string
}

// String gives the reference back in its written form.
func (r Ref) String() string {
	switch r.Scheme {
	case SchemeSecret:
		if r.Tenant != "" {
			return "secret://" + r.Tenant + "/" + r.ID
		}
		return "secret://" + r.Name
	case SchemeVault:
		return "vault://" + r.Name + "#" + r.Field
	case SchemeEnv:
		return "env://" + r.Name
	}
	return ""
}

// TenantScoped reports whether r is of the form secret://TENANT/ID, the only
// form sandbox template env values may take.
func (r Ref) TenantScoped() bool { return r.Scheme == SchemeSecret && r.Tenant != "" }

// The patterns are compiled on first use, not at package initialisation:
// every command, `fleet-agent version` too, would pay for them.
var (
	segment    = `[A-Za-z0-9._-]{1,128}`
	secretName = lazyRegexp(`^` + segment + `$`)
	vaultPath  = lazyRegexp(`^[A-Za-z0-9._/-]+$`)
	vaultField = lazyRegexp(`^[A-Za-z0-9._-]+$`)
	envVar     = lazyRegexp(`^[A-Z_][A-Z0-9_]*$`)
)

// lazyRegexp returns expr compiled once, on the first call.
func lazyRegexp(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}

// LooksLikeRef reports whether s starts with one of the reference schemes,
// so that a malformed reference can be told apart from a plain value.
func LooksLikeRef(s string) bool {
	return strings.HasPrefix(s, "secret://") || strings.HasPrefix(s, "vault://") || strings.HasPrefix(s, "env://")
}

// ParseRef parses a reference. The error says which form was expected; it
// never repeats s, since s may be a secret pasted where a reference belongs.
func ParseRef(s string) (Ref, error) {
	switch {
	case strings.HasPrefix(s, "secret://"):
		rest := strings.TrimPrefix(s, "secret://")
		if tenant, id, ok := strings.Cut(rest, "/"); ok {
			if secretName().MatchString(tenant) && secretName().MatchString(id) {
				return Ref{Scheme: SchemeSecret, Tenant: tenant, ID: id}, nil
			}
			return Ref{}, fmt.Errorf("a secret reference must be secret://NAME or secret://TENANT/ID, each part 1 to 128 of A-Z a-z 0-9 . _ -")
		}
		if secretName().MatchString(rest) {
			return Ref{Scheme: SchemeSecret, Name: rest}, nil
		}
		return Ref{}, fmt.Errorf("a secret reference must be secret://NAME or secret://TENANT/ID, each part 1 to 128 of A-Z a-z 0-9 . _ -")
	case strings.HasPrefix(s, "vault://"):
		rest := strings.TrimPrefix(s, "vault://")
		path, field, ok := strings.Cut(rest, "#")
		if ok && vaultPath().MatchString(path) && vaultField().MatchString(field) {
			return Ref{Scheme: SchemeVault, Name: path, Field: field}, nil
		}
		return Ref{}, fmt.Errorf("a vault reference must be vault://PATH#FIELD (PATH of A-Z a-z 0-9 . _ / -, FIELD of A-Z a-z 0-9 . _ -)")
	case strings.HasPrefix(s, "env://"):
		rest := strings.TrimPrefix(s, "env://")
		if envVar().MatchString(rest) {
			return Ref{Scheme: SchemeEnv, Name: rest}, nil
		}
		return Ref{}, fmt.Errorf("an env reference must be env://VAR with VAR of A-Z 0-9 _ not starting with a digit")
	}
	return Ref{}, fmt.Errorf("expected a secret reference (secret://, vault:// or env://), not a value")
}
