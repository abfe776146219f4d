package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/secrets"
)

// The keys of each block, in the documented order (messages list them so).
var (
	topKeys     = []string{"tenant", "state", "socket", "socketGroup", "listen", "pprof", "exposeOps", "exposeInsecureJoin", "git", "github", "apply", "policy", "drift", "secrets", "providers", "substrate", "events"}
	gitKeys     = []string{"url", "branch", "path", "interval", "auth", "verify"}
	authKeys    = []string{"token", "username", "password", "sshKey", "knownHosts"}
	verifyKeys  = []string{"keyring"}
	githubKeys  = []string{"repository", "apiURL", "token", "app", "webhookSecret", "statusContext"}
	appKeys     = []string{"id", "installationId", "privateKey"}
	applyKeys   = []string{"prune", "requireReviewedPlan", "maxTeardowns"}
	driftKeys   = []string{"every", "heal", "pullRequests", "revertOnClose"}
	policyKeys  = []string{"path"}
	secretsKeys = []string{"dir"}
)

// parser walks the YAML tree of one file into a Config, collecting
// problems rather than stopping at the first, so one run shows them all.
type parser struct {
	file     string
	c        *Config
	problems Problems
}

func (p *parser) errorf(line int, format string, args ...any) {
	p.problems = append(p.problems, Problem{File: p.file, Line: line, Message: fmt.Sprintf(format, args...)})
}

var (
	yamlLine    = lazyRegexp(`^yaml: line (\d+): (.*)$`)
	wholeDigits = lazyRegexp(`^[-+]?[0-9]+$`)
)

func (p *parser) parse(data []byte) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return // an empty file: every default stands
		}
		p.syntax(err)
		return
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		p.errorf(extra.Line, "a second YAML document; the config is one document (remove the ---)")
		return
	} else if !errors.Is(err, io.EOF) {
		p.syntax(err)
		return
	}
	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return
		}
		root = root.Content[0]
	}
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return // a file of comments only
	}
	p.repeated(root, "")
	top := p.mapping(root, "", topKeys)
	if top == nil {
		return
	}
	c := p.c
	p.str(top, "", "tenant", &c.Tenant, checkTenant)
	p.state(top)
	p.str(top, "", "socket", &c.Socket, checkSocket)
	p.str(top, "", "socketGroup", &c.SocketGroup, checkGroup)
	p.str(top, "", "listen", &c.Listen, checkListen)
	p.boolean(top, "", "pprof", &c.Pprof)
	p.boolean(top, "", "exposeOps", &c.ExposeOps)
	p.boolean(top, "", "exposeInsecureJoin", &c.ExposeInsecureJoin)
	if git := p.section(top, "", "git", gitKeys); git != nil {
		p.git(git)
	}
	if gh := p.section(top, "", "github", githubKeys); gh != nil {
		p.github(gh)
	}
	if a := p.section(top, "", "apply", applyKeys); a != nil {
		p.boolean(a, "apply", "prune", &c.Apply.Prune)
		p.boolean(a, "apply", "requireReviewedPlan", &c.Apply.RequireReviewedPlan)
		p.count(a, "apply", "maxTeardowns", &c.Apply.MaxTeardowns, "0 allows no teardown")
	}
	if pol := p.section(top, "", "policy", policyKeys); pol != nil {
		p.str(pol, "policy", "path", &c.Policy.Path, checkDocPath)
	}
	if d := p.section(top, "", "drift", driftKeys); d != nil {
		p.duration(d, "drift", "every", &c.Drift.Every, time.Second)
		p.boolean(d, "drift", "heal", &c.Drift.Heal)
		p.boolean(d, "drift", "pullRequests", &c.Drift.PullRequests)
		p.boolean(d, "drift", "revertOnClose", &c.Drift.RevertOnClose)
	}
	if s := p.section(top, "", "secrets", secretsKeys); s != nil {
		p.str(s, "secrets", "dir", &c.Secrets.Dir, checkPath)
	}
	if e, ok := top["providers"]; ok {
		p.providers(e)
	}
	if s := p.section(top, "", "substrate", substrateKeys); s != nil {
		p.substrate(s)
	}
	if ev := p.section(top, "", "events", eventsKeys); ev != nil {
		p.events(ev)
	}
}

// syntax turns a yaml.v3 error into a problem with its line.
func (p *parser) syntax(err error) {
	msg := err.Error()
	if m := yamlLine().FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		p.errorf(line, "not valid YAML: %s", m[2])
		return
	}
	p.errorf(0, "not valid YAML: %s", strings.TrimPrefix(msg, "yaml: "))
}

// entry is one key of a mapping and its value.
type entry struct {
	key, value *yaml.Node
}

// repeated refuses a key written twice in any mapping of the tree, provider
// blocks included: yaml.v3 keeps both in a Node and a later decode would
// take one silently. Aliases are not followed (they point at nodes checked
// where they are defined).
func (p *parser) repeated(n *yaml.Node, path string) {
	switch n.Kind {
	case yaml.MappingNode:
		first := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind == yaml.ScalarNode {
				if at, ok := first[k.Value]; ok {
					p.errorf(k.Line, "repeated key %q %s (first at line %d); write each key once", k.Value, where(path), at)
				} else {
					first[k.Value] = k.Line
				}
			}
			p.repeated(v, join(path, k.Value))
		}
	case yaml.SequenceNode:
		for i, v := range n.Content {
			p.repeated(v, join(path, strconv.Itoa(i)))
		}
	}
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// where names a block for a message.
func where(path string) string {
	if path == "" {
		return "at the top level"
	}
	return "in " + path
}

// mapping checks that n is a mapping of known keys and returns its entries
// by key (the first of a repeated key; repeated reported the others).
func (p *parser) mapping(n *yaml.Node, path string, known []string) map[string]entry {
	if n.Kind == yaml.AliasNode {
		p.errorf(n.Line, "%s: aliases (*name) are not supported here; write the block out", nameOf(path))
		return nil
	}
	if n.Kind != yaml.MappingNode {
		p.errorf(n.Line, "%s must be a mapping of keys, not %s", nameOf(path), describe(n))
		return nil
	}
	out := map[string]entry{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		key := k.Value
		switch {
		case k.Kind != yaml.ScalarNode:
			p.errorf(k.Line, "a key %s is %s; keys are plain names", where(path), describe(k))
			continue
		case k.Tag == "!!merge":
			p.errorf(k.Line, "merge keys (<<) are not supported %s; write the keys out", where(path))
			continue
		case !slices.Contains(known, key):
			msg := fmt.Sprintf("unknown key %q %s; known: %s", key, where(path), strings.Join(known, ", "))
			if s := suggest(key, known); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
			p.errorf(k.Line, "%s", msg)
			continue
		}
		if _, dup := out[key]; dup {
			continue
		}
		out[key] = entry{k, v}
		p.c.lines[join(path, key)] = k.Line
	}
	return out
}

// nameOf names a block or key for a message.
func nameOf(path string) string {
	if path == "" {
		return "the config"
	}
	return path
}

// section returns the mapping under key, or nil when the key is absent or
// null (a block written empty is as good as absent: its defaults stand).
func (p *parser) section(m map[string]entry, path, key string, known []string) map[string]entry {
	e, ok := m[key]
	if !ok || isNull(e.value) {
		return nil
	}
	return p.mapping(e.value, join(path, key), known)
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

// describe says what a node is, for "must be X, not Y"; it never quotes a
// value, which may be a secret.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.DocumentNode:
		return "a document"
	}
	switch n.Tag {
	case "!!str":
		return "a string"
	case "!!int", "!!float":
		return "a number"
	case "!!bool":
		return "a boolean"
	case "!!null":
		return "empty (null)"
	case "!!timestamp":
		return "a timestamp"
	case "!!binary":
		return "binary data"
	}
	return "a value tagged " + n.Tag
}

// scalar returns the value node of key when it is a scalar that is set;
// otherwise it reports why and returns nil.
func (p *parser) scalar(m map[string]entry, path, key, want string) *yaml.Node {
	e, ok := m[key]
	if !ok {
		return nil
	}
	full := join(path, key)
	switch {
	case e.value.Kind == yaml.AliasNode:
		p.errorf(e.value.Line, "%s: aliases (*name) are not supported here; write the value", full)
	case isNull(e.value):
		p.errorf(e.key.Line, "%s has no value; write %s, or remove the key for its default", full, want)
	case e.value.Kind != yaml.ScalarNode:
		p.errorf(e.value.Line, "%s must be %s, not %s", full, want, describe(e.value))
	default:
		return e.value
	}
	return nil
}

// str reads a string key; check, when given, returns what is wrong with the
// value or "".
func (p *parser) str(m map[string]entry, path, key string, dst *string, check func(string) string) {
	v, ok := p.strValue(m, path, key)
	if !ok {
		return
	}
	if check != nil {
		if msg := check(v.Value); msg != "" {
			p.errorf(v.Line, "%s: %s", join(path, key), msg)
			return
		}
	}
	*dst = v.Value
}

func (p *parser) strValue(m map[string]entry, path, key string) (*yaml.Node, bool) {
	v := p.scalar(m, path, key, "a string")
	if v == nil {
		return nil, false
	}
	if v.Tag != "!!str" {
		p.errorf(v.Line, "%s must be a string, not %s; quote it if it is meant as text", join(path, key), describe(v))
		return nil, false
	}
	return v, true
}

func (p *parser) boolean(m map[string]entry, path, key string, dst *bool) {
	v := p.scalar(m, path, key, "true or false")
	if v == nil {
		return
	}
	if v.Tag != "!!bool" {
		p.errorf(v.Line, "%s must be true or false, not %s", join(path, key), describe(v))
		return
	}
	*dst = strings.EqualFold(v.Value, "true")
}

func (p *parser) duration(m map[string]entry, path, key string, dst *time.Duration, floor time.Duration) {
	v := p.scalar(m, path, key, "a duration like 1m or 30s")
	if v == nil {
		return
	}
	full := join(path, key)
	if v.Tag != "!!str" {
		p.errorf(v.Line, "%s must be a duration with a unit, like 1m, 30s or 1h30m, not %s", full, describe(v))
		return
	}
	d, err := time.ParseDuration(v.Value)
	switch {
	case err != nil:
		p.errorf(v.Line, "%s: %q is not a duration; write one like 1m, 30s or 1h30m (units ns, us, ms, s, m, h)", full, v.Value)
	case d < floor:
		p.errorf(v.Line, "%s: %s is too short; the least is %s", full, v.Value, floor)
	default:
		*dst = d
	}
}

func (p *parser) positiveInt(m map[string]entry, path, key string, dst *int64) {
	v := p.scalar(m, path, key, "a positive integer")
	if v == nil {
		return
	}
	full := join(path, key)
	var n int64
	if v.Tag != "!!int" || v.Decode(&n) != nil {
		p.errorf(v.Line, "%s must be a positive integer, not %s", full, describe(v))
		return
	}
	if n <= 0 {
		p.errorf(v.Line, "%s must be a positive integer", full)
		return
	}
	*dst = n
}

// count reads a key that is a whole number from 0; zero says what 0 means,
// for the message.
func (p *parser) count(m map[string]entry, path, key string, dst *int, zero string) {
	v := p.scalar(m, path, key, "a whole number")
	if v == nil {
		return
	}
	full := join(path, key)
	var n int
	switch {
	case v.Tag == "!!int" && v.Decode(&n) != nil, v.Tag == "!!float" && wholeDigits().MatchString(v.Value):
		// YAML takes digits too many for an integer as a float.
		p.errorf(v.Line, "%s: %s is out of range; write a whole number from 0 (%s)", full, v.Value, zero)
		return
	case v.Tag != "!!int":
		p.errorf(v.Line, "%s must be a whole number from 0 (%s), not %s", full, zero, describe(v))
		return
	case n < 0:
		p.errorf(v.Line, "%s is %d; it must be 0 or more (%s)", full, n, zero)
		return
	}
	*dst = n
}

// secret reads a key that must hold a secret reference. Nothing of the
// value is ever quoted: when it is not a reference it is likely the secret.
func (p *parser) secret(m map[string]entry, path, key string, dst *string) {
	full := join(path, key)
	v := p.scalar(m, path, key, "a secret reference")
	if v == nil {
		return
	}
	if v.Tag != "!!str" {
		p.errorf(v.Line, "%s must be a secret reference (env://VAR, secret://NAME or vault://PATH#FIELD), not %s", full, describe(v))
		return
	}
	if msg := checkSecretRef(v.Value); msg != "" {
		p.errorf(v.Line, "%s: %s", full, msg)
		return
	}
	*dst = v.Value
	p.c.secretRefs = append(p.c.secretRefs, SecretRef{Key: full, Ref: v.Value, Line: v.Line})
}

// checkSecretRef says what is wrong with a value where a reference belongs.
func checkSecretRef(s string) string {
	if !secrets.LooksLikeRef(s) {
		return "must be a secret reference (env://VAR, secret://NAME or vault://PATH#FIELD), not a value; put the secret in the environment, a file of the secrets directory or Vault and refer to it (the value is not repeated here)"
	}
	ref, err := secrets.ParseRef(s)
	if err != nil {
		return err.Error()
	}
	if ref.TenantScoped() {
		return "secret://TENANT/ID references belong to sandboxes and the agent never resolves them; use secret://NAME, env://VAR or vault://PATH#FIELD"
	}
	return ""
}

func (p *parser) git(m map[string]entry) {
	g := &p.c.Git
	kind := urlNone
	if v, ok := p.strValue(m, "git", "url"); ok {
		k, msg := checkGitURL(v.Value)
		if msg != "" {
			p.errorf(v.Line, "git.url: %s", msg)
		} else {
			g.URL, kind = v.Value, k
		}
	}
	p.str(m, "git", "branch", &g.Branch, checkBranch)
	p.str(m, "git", "path", &g.Path, checkDocPath)
	p.duration(m, "git", "interval", &g.Interval, time.Second)
	if a := p.section(m, "git", "auth", authKeys); a != nil {
		p.auth(a, m["auth"].key.Line, kind)
	}
	if v := p.section(m, "git", "verify", verifyKeys); v != nil {
		g.Verify = &Verify{}
		if _, ok := v["keyring"]; !ok {
			p.errorf(m["verify"].key.Line, "git.verify needs keyring: the path of the armored keyring of the keys allowed to sign")
		}
		p.str(v, "git.verify", "keyring", &g.Verify.Keyring, checkPath)
	}
}

func (p *parser) auth(m map[string]entry, line int, kind urlKind) {
	a := &p.c.Git.Auth
	p.secret(m, "git.auth", "token", &a.Token)
	p.str(m, "git.auth", "username", &a.Username, checkUsername)
	p.secret(m, "git.auth", "password", &a.Password)
	p.secret(m, "git.auth", "sshKey", &a.SSHKey)
	p.str(m, "git.auth", "knownHosts", &a.KnownHosts, checkPath)

	has := func(k string) bool { _, ok := m[k]; return ok }
	http := has("token") || has("password") || has("username")
	ssh := has("sshKey") || has("knownHosts")
	switch {
	case http && ssh:
		p.errorf(line, "git.auth: choose one way: token (with an optional username), username and password, or sshKey and knownHosts")
		return
	case has("token") && has("password"):
		p.errorf(line, "git.auth: token and password are two ways to say the same thing; keep one")
		return
	case has("password") && !has("username"):
		p.errorf(line, "git.auth: password needs username")
		return
	case has("username") && !has("token") && !has("password"):
		p.errorf(line, "git.auth: username needs a token or a password")
		return
	case has("sshKey") && !has("knownHosts"):
		p.errorf(line, "git.auth: sshKey needs knownHosts, the path of a known_hosts file holding the server's host key (the agent never trusts a host key on first use)")
		return
	case has("knownHosts") && !has("sshKey"):
		p.errorf(line, "git.auth: knownHosts goes with sshKey; add the key or remove knownHosts")
		return
	}
	switch {
	case http && kind != urlNone && kind != urlHTTPS && kind != urlHTTP:
		p.errorf(line, "git.auth: a token or password is for an https URL, and git.url is %s", kind)
	case ssh && kind != urlNone && kind != urlSSH:
		p.errorf(line, "git.auth: sshKey is for an ssh URL, and git.url is %s", kind)
	}
}

func (p *parser) github(m map[string]entry) {
	g := &GitHub{APIURL: DefaultGitHubAPIURL, StatusContext: DefaultStatusContext}
	p.c.GitHub = g
	line := p.c.lines["github"]
	if _, ok := m["repository"]; !ok {
		p.errorf(line, "github needs repository: OWNER/NAME of the repository to post to")
	}
	p.str(m, "github", "repository", &g.Repository, checkRepository)
	if v, ok := p.strValue(m, "github", "apiURL"); ok {
		if u, msg := checkAPIURL(v.Value); msg != "" {
			p.errorf(v.Line, "github.apiURL: %s", msg)
		} else {
			g.APIURL = u
		}
	}
	p.secret(m, "github", "token", &g.Token)
	if a := p.section(m, "github", "app", appKeys); a != nil {
		g.App = &GitHubApp{}
		for _, k := range appKeys {
			if _, ok := a[k]; !ok {
				p.errorf(m["app"].key.Line, "github.app needs %s (it needs id, installationId and privateKey)", k)
			}
		}
		p.positiveInt(a, "github.app", "id", &g.App.ID)
		p.positiveInt(a, "github.app", "installationId", &g.App.InstallationID)
		p.secret(a, "github.app", "privateKey", &g.App.PrivateKey)
	}
	_, hasToken := m["token"]
	app, hasApp := m["app"]
	hasApp = hasApp && !isNull(app.value)
	switch {
	case hasToken && hasApp:
		p.errorf(line, "github: token and app are two ways to authenticate; keep one")
	case !hasToken && !hasApp:
		p.errorf(line, "github needs a token (a reference, like env://GITHUB_TOKEN) or an app { id, installationId, privateKey } to post with")
	}
	p.secret(m, "github", "webhookSecret", &g.WebhookSecret)
	p.str(m, "github", "statusContext", &g.StatusContext, checkStatusContext)
}

func (p *parser) providers(e entry) {
	if isNull(e.value) {
		return
	}
	m := p.mapping(e.value, "providers", providers.KnownIDs)
	if m == nil {
		return
	}
	p.c.providersNode = e.value
	for id, pe := range m {
		p.c.Providers[id] = pe.value
		p.providerSecrets(pe.value, "providers."+id)
	}
	// Map order is random; the order of the file is the one a person reads.
	slices.SortStableFunc(p.c.secretRefs, func(a, b SecretRef) int { return a.Line - b.Line })
}

// providerSecrets applies the documented secret rule (docs/document.md) to a
// provider block at every depth: a field named token, password or secret, or
// whose name ends in Token, Password, Secret or Key, holds a reference. The
// adapter checks the rest of its block.
func (p *parser) providerSecrets(n *yaml.Node, path string) {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			full := join(path, k.Value)
			if k.Kind == yaml.ScalarNode && secretField(k.Value) {
				val := v
				if val.Kind == yaml.AliasNode && val.Alias != nil {
					val = val.Alias
				}
				if val.Kind == yaml.ScalarNode && !isNull(val) {
					msg := ""
					if val.Tag != "!!str" {
						msg = "must be a secret reference (env://VAR, secret://NAME or vault://PATH#FIELD), not " + describe(val)
					} else {
						msg = checkSecretRef(val.Value)
					}
					if msg != "" {
						p.errorf(v.Line, "%s: %s", full, msg)
					} else {
						p.c.secretRefs = append(p.c.secretRefs, SecretRef{Key: full, Ref: val.Value, Line: v.Line})
					}
					continue
				}
			}
			p.providerSecrets(v, full)
		}
	case yaml.SequenceNode:
		for i, v := range n.Content {
			p.providerSecrets(v, join(path, strconv.Itoa(i)))
		}
	}
}

// secretField is the documented rule for the names of secret fields.
func secretField(name string) bool {
	switch name {
	case "token", "password", "secret":
		return true
	}
	for _, s := range []string{"Token", "Password", "Secret", "Key"} {
		if strings.HasSuffix(name, s) && len(name) > len(s) {
			return true
		}
	}
	return false
}
