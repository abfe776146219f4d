package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

func envOf(m map[string]string) LookupEnv {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

var noEnv = envOf(nil)

var systemdEnv = envOf(map[string]string{
	"STATE_DIRECTORY":       "/var/lib/fleet-agent",
	"RUNTIME_DIRECTORY":     "/run/fleet-agent",
	"CREDENTIALS_DIRECTORY": "/run/credentials/fleet-agent.service",
})

func mustParse(t *testing.T, text string) *Config {
	t.Helper()
	c, err := Parse("config.yaml", []byte(text), noEnv)
	if err != nil {
		t.Fatalf("Parse:\n%s\nerror: %v", text, err)
	}
	return c
}

// parseErr parses text that must be refused and returns its problems.
func parseErr(t *testing.T, text string) Problems {
	t.Helper()
	c, err := Parse("config.yaml", []byte(text), noEnv)
	if err == nil {
		t.Fatalf("Parse accepted:\n%s\n-> %+v", text, c)
	}
	var r *refusal.Error
	if !errors.As(err, &r) || r.Code != refusal.InvalidInput {
		t.Fatalf("want an INVALID_INPUT refusal, got %T %v", err, err)
	}
	ps := AsProblems(err)
	if len(ps) == 0 {
		t.Fatalf("no Problems behind %v", err)
	}
	return ps
}

func TestDefaults(t *testing.T) {
	want := &Config{
		Tenant:    "root",
		State:     "./fleet.db",
		Socket:    "./fleet-agent.sock",
		Listen:    "127.0.0.1:9464",
		Git:       Git{Branch: "main", Path: "fleet.json", Interval: time.Minute},
		Apply:     Apply{Prune: false, RequireReviewedPlan: true, MaxTeardowns: 1},
		Drift:     Drift{Every: 15 * time.Minute},
		Substrate: Substrate{Every: time.Minute},
		Providers: map[string]*yaml.Node{},
		lines:     map[string]int{},
	}
	if got := Defaults(noEnv); !reflect.DeepEqual(got, want) {
		t.Errorf("Defaults without systemd:\n got %+v\nwant %+v", got, want)
	}
	for _, text := range []string{"", "# only a comment\n", "---\n", "~\n"} {
		got := mustParse(t, text)
		got.File = ""
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Parse(%q):\n got %+v\nwant %+v", text, got, want)
		}
	}

	sd := Defaults(systemdEnv)
	if sd.State != "/var/lib/fleet-agent/fleet.db" || sd.Socket != "/run/fleet-agent/api.sock" || sd.Secrets.Dir != "/run/credentials/fleet-agent.service" {
		t.Errorf("Defaults under systemd: state %q socket %q secrets %q", sd.State, sd.Socket, sd.Secrets.Dir)
	}
	multi := Defaults(envOf(map[string]string{"STATE_DIRECTORY": "/var/lib/a:/var/lib/b", "RUNTIME_DIRECTORY": ""}))
	if multi.State != "/var/lib/a/fleet.db" || multi.Socket != "./fleet-agent.sock" {
		t.Errorf("several state directories: %q, empty runtime: %q", multi.State, multi.Socket)
	}
	// The file wins over the environment.
	c, err := Parse("c.yaml", []byte("state: /srv/f.db\nsocket: /srv/s.sock\nsecrets: { dir: /srv/secrets }\n"), systemdEnv)
	if err != nil {
		t.Fatal(err)
	}
	if c.State != "/srv/f.db" || c.Socket != "/srv/s.sock" || c.Secrets.Dir != "/srv/secrets" {
		t.Errorf("file values lost: %+v", c)
	}
}

const contractExample = `tenant: root                         # [root]
state: /var/lib/fleet-agent/fleet.db # [$STATE_DIRECTORY/fleet.db, else ./fleet.db]
socket: /run/fleet-agent/api.sock    # [$RUNTIME_DIRECTORY/api.sock, else ./fleet-agent.sock]
socketGroup: fleet-agent             # [none]: group that may use the socket (mode 0660)
listen: 127.0.0.1:9464               # [127.0.0.1:9464] ops HTTP: /healthz /readyz /metrics /status
pprof: false                         # [false]: /debug/pprof on the ops listener
git:
  url: https://github.com/acme/fleet.git   # https, ssh, file:// or a local path
  branch: main                             # [main]: the only branch ever applied
  path: fleet.json                         # [fleet.json]
  interval: 1m                             # [1m]
  auth: { token: env://GIT_TOKEN }         # HTTP basic password, user x-access-token (or ` + "`username`" + `);
                                           # or { username, password } or { sshKey, knownHosts: PATH }
  verify: { keyring: /etc/fleet-agent/trusted.asc }  # optional: apply only commits signed by these keys
github:                                    # optional: without it nothing is posted
  repository: acme/fleet
  apiURL: https://api.github.com/          # GitHub Enterprise: https://HOST/api/v3/
  token: env://GITHUB_TOKEN                # or app: { id, installationId, privateKey }
  webhookSecret: secret://github-webhook   # optional: POST /hooks/github wakes the agent
  statusContext: fleet-agent               # [fleet-agent]: prefix of the status contexts
apply:
  prune: false                             # [false]
  requireReviewedPlan: true                # [true]
drift:
  every: 15m                               # [15m]
  heal: false                              # [false]: re-apply the applied document when it drifts
secrets:
  dir: /etc/fleet-agent/secrets            # [$CREDENTIALS_DIRECTORY]: secret://NAME reads file NAME
providers: {}                              # per provider id: endpoints and options (emulators in tests)
`

func TestContractExample(t *testing.T) {
	c := mustParse(t, contractExample)
	if err := c.CheckForRun(); err != nil {
		t.Fatal(err)
	}
	want := Config{
		File:        "config.yaml",
		Tenant:      "root",
		State:       "/var/lib/fleet-agent/fleet.db",
		Socket:      "/run/fleet-agent/api.sock",
		SocketGroup: "fleet-agent",
		Listen:      "127.0.0.1:9464",
		Git: Git{
			URL: "https://github.com/acme/fleet.git", Branch: "main", Path: "fleet.json", Interval: time.Minute,
			Auth:   GitAuth{Token: "env://GIT_TOKEN"},
			Verify: &Verify{Keyring: "/etc/fleet-agent/trusted.asc"},
		},
		GitHub: &GitHub{
			Repository: "acme/fleet", APIURL: "https://api.github.com/", Token: "env://GITHUB_TOKEN",
			WebhookSecret: "secret://github-webhook", StatusContext: "fleet-agent",
		},
		Apply:     Apply{RequireReviewedPlan: true, MaxTeardowns: 1},
		Drift:     Drift{Every: 15 * time.Minute},
		Secrets:   Secrets{Dir: "/etc/fleet-agent/secrets"},
		Substrate: Substrate{Every: time.Minute},
	}
	got := *c
	got.Providers, got.providersNode, got.lines, got.secretRefs = nil, nil, nil, nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("\n got %+v\nwant %+v", got, want)
	}
	if len(c.Providers) != 0 || c.ProvidersBlock() == nil {
		t.Errorf("providers: %v, block %v", c.Providers, c.ProvidersBlock())
	}
	for key, line := range map[string]int{"tenant": 1, "git": 7, "git.auth": 12, "git.auth.token": 12, "github.webhookSecret": 19, "secrets.dir": 28, "providers": 29} {
		if c.Line(key) != line {
			t.Errorf("Line(%s) = %d, want %d", key, c.Line(key), line)
		}
	}
	if c.Where("git.url") != "config.yaml:8" || c.Where("socketGroup") != "config.yaml:4" {
		t.Errorf("Where: %q %q", c.Where("git.url"), c.Where("socketGroup"))
	}
	refs := c.SecretRefs()
	if len(refs) != 3 || refs[0].Key != "git.auth.token" || refs[2] != (SecretRef{Key: "github.webhookSecret", Ref: "secret://github-webhook", Line: 19}) {
		t.Errorf("SecretRefs = %+v", refs)
	}
	if c.GitHub.Owner() != "acme" || c.GitHub.Name() != "fleet" {
		t.Errorf("Owner/Name = %q/%q", c.GitHub.Owner(), c.GitHub.Name())
	}
}

// TestKeysGood parses one good value per key (several where forms differ)
// and checks where it lands.
func TestKeysGood(t *testing.T) {
	cases := []struct {
		text string
		ok   func(*Config) bool
	}{
		{"tenant: acme.corp_1-x", func(c *Config) bool { return c.Tenant == "acme.corp_1-x" }},
		{"state: rel/fleet.db", func(c *Config) bool { return c.State == "rel/fleet.db" }},
		{"socket: /tmp/x.sock", func(c *Config) bool { return c.Socket == "/tmp/x.sock" }},
		{"socketGroup: _fleet-agent.ops", func(c *Config) bool { return c.SocketGroup == "_fleet-agent.ops" }},
		{"listen: '[::1]:0'", func(c *Config) bool { return c.Listen == "[::1]:0" }},
		{"listen: :9464", func(c *Config) bool { return c.Listen == ":9464" }},
		{"listen: localhost:65535", func(c *Config) bool { return c.Listen == "localhost:65535" }},
		{"pprof: true", func(c *Config) bool { return c.Pprof }},
		{"pprof: False", func(c *Config) bool { return !c.Pprof }},
		{"git: { url: https://github.com/acme/fleet.git }", func(c *Config) bool { return c.Git.URL == "https://github.com/acme/fleet.git" }},
		{"git: { url: 'http://127.0.0.1:8080/fleet.git' }", func(c *Config) bool { return c.Git.URL != "" }},
		{"git: { url: 'http://localhost/fleet.git' }", func(c *Config) bool { return c.Git.URL != "" }},
		{"git: { url: 'http://[::1]:9/r' }", func(c *Config) bool { return c.Git.URL != "" }},
		{"git: { url: 'ssh://git@github.com:22/acme/fleet.git' }", func(c *Config) bool { return c.Git.URL != "" }},
		{"git: { url: 'git@github.com:acme/fleet.git' }", func(c *Config) bool { return c.Git.URL == "git@github.com:acme/fleet.git" }},
		{"git: { url: 'github.com:acme/fleet.git' }", func(c *Config) bool { return c.Git.URL != "" }},
		{"git: { url: 'file:///srv/git/fleet.git' }", func(c *Config) bool { return c.Git.URL != "" }},
		{"git: { url: /srv/git/fleet }", func(c *Config) bool { return c.Git.URL == "/srv/git/fleet" }},
		{"git: { url: ../fleet }", func(c *Config) bool { return c.Git.URL == "../fleet" }},
		{"git: { url: fleet }", func(c *Config) bool { return c.Git.URL == "fleet" }},
		{"git: { branch: release/v1.2 }", func(c *Config) bool { return c.Git.Branch == "release/v1.2" }},
		{"git: { path: deploy/fleet.json }", func(c *Config) bool { return c.Git.Path == "deploy/fleet.json" }},
		{"policy: { path: policy/fleet.yaml }", func(c *Config) bool { return c.Policy.Path == "policy/fleet.yaml" }},
		{"git: { interval: 1s }", func(c *Config) bool { return c.Git.Interval == time.Second }},
		{"git: { interval: 1h30m }", func(c *Config) bool { return c.Git.Interval == 90*time.Minute }},
		{"git: { auth: { token: env://GIT_TOKEN } }", func(c *Config) bool { return c.Git.Auth.Token == "env://GIT_TOKEN" }},
		{"git: { auth: { token: 'vault://kv/git#token', username: bot } }", func(c *Config) bool {
			return c.Git.Auth.Token == "vault://kv/git#token" && c.Git.Auth.Username == "bot"
		}},
		{"git: { auth: { username: bot, password: secret://git-password } }", func(c *Config) bool { return c.Git.Auth.Password == "secret://git-password" }},
		{"git: { url: 'git@h:r', auth: { sshKey: secret://deploy-key, knownHosts: /etc/fleet-agent/known_hosts } }", func(c *Config) bool {
			return c.Git.Auth.SSHKey == "secret://deploy-key" && c.Git.Auth.KnownHosts == "/etc/fleet-agent/known_hosts"
		}},
		{"git: { auth: {} }", func(c *Config) bool { return c.Git.Auth == GitAuth{} }},
		{"git: { auth: }", func(c *Config) bool { return c.Git.Auth == GitAuth{} }},
		{"git: { verify: { keyring: /k.asc } }", func(c *Config) bool { return c.Git.Verify != nil && c.Git.Verify.Keyring == "/k.asc" }},
		{"git: { verify: }", func(c *Config) bool { return c.Git.Verify == nil }},
		{"git:", func(c *Config) bool { return c.Git.Branch == "main" }},
		{"github: { repository: acme/fleet, token: env://T }", func(c *Config) bool {
			return c.GitHub.APIURL == "https://api.github.com/" && c.GitHub.StatusContext == "fleet-agent"
		}},
		{"github: { repository: a-b/c.d_e, token: env://T }", func(c *Config) bool { return c.GitHub.Repository == "a-b/c.d_e" }},
		{"github: { repository: acme/fleet, token: env://T, apiURL: 'https://ghe.example/api/v3' }", func(c *Config) bool {
			return c.GitHub.APIURL == "https://ghe.example/api/v3/"
		}},
		{"github: { repository: acme/fleet, token: env://T, apiURL: 'http://127.0.0.1:4000/' }", func(c *Config) bool {
			return c.GitHub.APIURL == "http://127.0.0.1:4000/"
		}},
		{"github: { repository: acme/fleet, token: env://T, apiURL: 'https://ghe.example' }", func(c *Config) bool {
			return c.GitHub.APIURL == "https://ghe.example/"
		}},
		{"github: { repository: acme/fleet, app: { id: 12, installationId: 0x10, privateKey: secret://gh-app.pem } }", func(c *Config) bool {
			return c.GitHub.App != nil && *c.GitHub.App == GitHubApp{ID: 12, InstallationID: 16, PrivateKey: "secret://gh-app.pem"}
		}},
		{"github: { repository: acme/fleet, token: env://T, webhookSecret: 'vault://kv/gh#hook' }", func(c *Config) bool {
			return c.GitHub.WebhookSecret == "vault://kv/gh#hook"
		}},
		{"github: { repository: acme/fleet, token: env://T, statusContext: ci/fleet-agent.prod }", func(c *Config) bool {
			return c.GitHub.StatusContext == "ci/fleet-agent.prod"
		}},
		{"github:", func(c *Config) bool { return c.GitHub == nil }},
		{"github: { repository: acme/fleet, token: env://T, app: }", func(c *Config) bool { return c.GitHub.App == nil && c.GitHub.Token != "" }},
		{"apply: { prune: true }", func(c *Config) bool { return c.Apply.Prune && c.Apply.RequireReviewedPlan }},
		{"apply: { requireReviewedPlan: false }", func(c *Config) bool { return !c.Apply.RequireReviewedPlan }},
		{"apply: { prune: true }", func(c *Config) bool { return c.Apply.MaxTeardowns == DefaultMaxTeardowns && DefaultMaxTeardowns == 1 }},
		{"apply: { maxTeardowns: 3 }", func(c *Config) bool { return c.Apply.MaxTeardowns == 3 }},
		{"apply: { maxTeardowns: 0 }", func(c *Config) bool { return c.Apply.MaxTeardowns == 0 }},
		{"drift: { every: 2h }", func(c *Config) bool { return c.Drift.Every == 2*time.Hour }},
		{"drift: { heal: true }", func(c *Config) bool { return c.Drift.Heal }},
		{"drift: { pullRequests: true, revertOnClose: true }", func(c *Config) bool { return c.Drift.PullRequests && c.Drift.RevertOnClose }},
		{"secrets: { dir: /run/secrets }", func(c *Config) bool { return c.Secrets.Dir == "/run/secrets" }},
		{"providers: { fake: { steps: { cluster: 2 } } }", func(c *Config) bool { return c.Providers["fake"] != nil }},
		{"providers: { aws: , gcp: {}, digitalocean: {token: env://DO_TOKEN} }", func(c *Config) bool {
			return len(c.Providers) == 3 && isNull(c.Providers["aws"])
		}},
		{"providers:", func(c *Config) bool { return len(c.Providers) == 0 && c.ProvidersBlock() == nil }},
		{"tenant: &t acme", func(c *Config) bool { return c.Tenant == "acme" }},
	}
	for _, tc := range cases {
		t.Run(tc.text, func(t *testing.T) {
			if c := mustParse(t, tc.text); !tc.ok(c) {
				t.Errorf("unexpected result: %+v (github %+v)", c, c.GitHub)
			}
		})
	}
}

// TestKeysBad refuses one bad value per check, with its line and a message
// that says what is allowed.
func TestKeysBad(t *testing.T) {
	cases := []struct {
		text string
		line int
		want string
	}{
		{"tenant: 'a b'", 1, "tenant: a tenant id is 1 to 128"},
		{"tenant: ''", 1, "tenant: a tenant id"},
		{"tenant: ..", 1, "tenant: a tenant id"},
		{"tenant: 12", 1, "tenant must be a string, not a number; quote it"},
		{"tenant:", 1, "tenant has no value; write a string, or remove the key"},
		{"state: ''", 1, "state: an empty path"},
		{"socket: /" + strings.Repeat("s", 120), 1, "at most 107 bytes"},
		{"socketGroup: 1000", 1, "socketGroup must be a string, not a number"},
		{"socketGroup: '1000'", 1, "is not a group name"},
		{"socketGroup: 'a b'", 1, "is not a group name"},
		{"listen: 9464", 1, "listen must be a string"},
		{"listen: localhost", 1, "is not HOST:PORT"},
		{"listen: 'localhost:http'", 1, "must be a number from 0 to 65535"},
		{"listen: '1.2.3.4:70000'", 1, "must be a number from 0 to 65535"},
		{"listen: 'bad_host!:80'", 1, "neither an IP address nor a host name"},
		{"pprof: yes", 1, "pprof must be true or false, not a string"},
		{"pprof: 1", 1, "pprof must be true or false, not a number"},
		{"git: []", 1, "git must be a mapping of keys, not a list"},
		{"git: main", 1, "git must be a mapping of keys, not a string"},
		{"git:\n  url: 'http://github.com/acme/fleet.git'", 2, "http is allowed only to a loopback host"},
		{"git:\n  url: 'https://user:pw@github.com/acme/fleet.git'", 2, "a password in git.url"},
		{"git:\n  url: 'https://ghp_abc@github.com/acme/fleet.git'", 2, "not in the URL"},
		{"git:\n  url: 'user:pw@github.com:acme/fleet.git'", 2, "USER:PASSWORD@HOST"},
		{"git:\n  url: 'git://github.com/acme/fleet.git'", 2, `scheme "git" is not supported`},
		{"git:\n  url: 'ftp://h/x'", 2, `scheme "ftp" is not supported`},
		{"git:\n  url: 'ssh://github.com'", 2, "needs a host and a path"},
		{"git:\n  url: 'file://host/x'", 2, "file:///ABSOLUTE/PATH"},
		{"git:\n  url: 'file://'", 2, "file:///ABSOLUTE/PATH"},
		{"git:\n  url: 'https:///x'", 2, "needs a host"},
		{"git:\n  url: 'https://h/x#frag'", 2, "no #fragment"},
		{"git:\n  url: 'git@github.com:'", 2, "needs a path after the colon"},
		{"git:\n  url: 'bad host:x'", 2, "not a host name"},
		{"git:\n  url: ''", 2, "empty or not a URL"},
		{"git:\n  url: 'https://h/%zz'", 2, "not a URL"},
		{"git:\n  branch: refs/heads/main", 2, "not a ref"},
		{"git:\n  branch: 'a..b'", 2, "is not a branch name"},
		{"git:\n  branch: 'a b'", 2, "is not a branch name"},
		{"git:\n  branch: -x", 2, "is not a branch name"},
		{"git:\n  branch: x.lock", 2, "is not a branch name"},
		{"git:\n  branch: a/.b", 2, "is not a branch name"},
		{"git:\n  branch: '@'", 2, "is not a branch name"},
		{"git:\n  branch: \"a\\tb\"", 2, "no control characters"},
		{"git:\n  path: /etc/fleet.json", 2, "is not a file path inside the repository"},
		{"git:\n  path: ../fleet.json", 2, "is not a file path inside the repository"},
		{"git:\n  path: a//b.json", 2, "is not a file path inside the repository"},
		{"git:\n  path: .", 2, "is not a file path inside the repository"},
		{"git:\n  interval: 60", 2, "must be a duration with a unit"},
		{"git:\n  interval: 1 minute", 2, "is not a duration"},
		{"git:\n  interval: 500ms", 2, "too short; the least is 1s"},
		{"git:\n  interval: -1m", 2, "too short"},
		{"git:\n  interval: 0s", 2, "too short"},
		{"git:\n  auth:\n    token: env://T\n    password: env://P\n    username: u", 2, "keep one"},
		{"git:\n  auth:\n    password: env://P", 2, "password needs username"},
		{"git:\n  auth:\n    username: u", 2, "username needs a token or a password"},
		{"git:\n  auth:\n    sshKey: secret://k", 2, "sshKey needs knownHosts"},
		{"git:\n  auth:\n    knownHosts: /k", 2, "knownHosts goes with sshKey"},
		{"git:\n  auth:\n    token: env://T\n    sshKey: secret://k\n    knownHosts: /k", 2, "choose one way"},
		{"git:\n  auth:\n    username: 'a:b'\n    token: env://T", 3, "no colon"},
		{"git:\n  url: git@h:r\n  auth:\n    token: env://T", 3, "for an https URL, and git.url is an ssh URL"},
		{"git:\n  url: https://h/r\n  auth:\n    sshKey: secret://k\n    knownHosts: /k", 3, "for an ssh URL, and git.url is an https URL"},
		{"git:\n  url: /srv/r\n  auth:\n    token: env://T", 3, "git.url is a local path"},
		{"git:\n  auth: env://T", 2, "git.auth must be a mapping of keys, not a string"},
		{"git:\n  verify: {}", 2, "git.verify needs keyring"},
		{"git:\n  verify:\n    keyring: ''", 3, "an empty path"},
		{"github:\n  token: env://T", 1, "github needs repository"},
		{"github:\n  repository: acme", 2, "is not OWNER/NAME"},
		{"github:\n  repository: acme/fleet.git\n  token: env://T", 2, "without .git"},
		{"github:\n  repository: -acme/fleet\n  token: env://T", 2, "is not OWNER/NAME"},
		{"github:\n  repository: acme/..\n  token: env://T", 2, "is not OWNER/NAME"},
		{"github:\n  repository: acme/fleet", 1, "github needs a token"},
		{"github:\n  repository: acme/fleet\n  token: env://T\n  app: { id: 1, installationId: 2, privateKey: secret://k }", 1, "keep one"},
		{"github:\n  repository: acme/fleet\n  app: { id: 1, privateKey: secret://k }", 3, "github.app needs installationId"},
		{"github:\n  repository: acme/fleet\n  app: { id: 0, installationId: 2, privateKey: secret://k }", 3, "github.app.id must be a positive integer"},
		{"github:\n  repository: acme/fleet\n  app: { id: '1', installationId: 2, privateKey: secret://k }", 3, "github.app.id must be a positive integer, not a string"},
		{"github:\n  repository: acme/fleet\n  app: { id: 1.5, installationId: 2, privateKey: secret://k }", 3, "not a number"},
		{"github:\n  repository: acme/fleet\n  app: { id: 99999999999999999999, installationId: 2, privateKey: secret://k }", 3, "must be a positive integer"},
		{"github:\n  repository: acme/fleet\n  token: env://T\n  apiURL: 'ftp://x/'", 4, "is not an https URL"},
		{"github:\n  repository: acme/fleet\n  token: env://T\n  apiURL: 'http://ghe.example/'", 4, "http is allowed only to a loopback host"},
		{"github:\n  repository: acme/fleet\n  token: env://T\n  apiURL: 'https://u:p@ghe.example/'", 4, "no credentials"},
		{"github:\n  repository: acme/fleet\n  token: env://T\n  apiURL: 'https://ghe.example/?x=1'", 4, "no credentials, query"},
		{"github:\n  repository: acme/fleet\n  token: env://T\n  statusContext: 'a--b'", 4, "is not a status context prefix"},
		{"github:\n  repository: acme/fleet\n  token: env://T\n  statusContext: 'fleet agent'", 4, "is not a status context prefix"},
		{"github:\n  repository: acme/fleet\n  token: env://T\n  statusContext: 'x/'", 4, "is not a status context prefix"},
		{"github:\n  repository: acme/fleet\n  token: env://T\n  statusContext: ''", 4, "is not a status context prefix"},
		{"github:\n  repository: acme/fleet\n  token: env://T\n  statusContext: 'a>'", 4, "is not a status context prefix"},
		{"apply:\n  prune: 'true'", 2, "apply.prune must be true or false, not a string"},
		{"policy:\n  path: ../policy.yaml", 2, "policy.path: \"../policy.yaml\" is not a file path inside the repository"},
		{"policy:\n  file: policy.yaml", 2, `unknown key "file" in policy; known: path`},
		{"apply:\n  requireReviewedPlan: ~", 2, "apply.requireReviewedPlan has no value"},
		{"apply:\n  maxTeardowns: -1", 2, "apply.maxTeardowns is -1; it must be 0 or more (0 allows no teardown)"},
		{"apply:\n  maxTeardowns: '2'", 2, "apply.maxTeardowns must be a whole number from 0 (0 allows no teardown), not a string"},
		{"apply:\n  maxTeardowns: 1.5", 2, "apply.maxTeardowns must be a whole number from 0"},
		{"apply:\n  maxTeardowns: true", 2, "apply.maxTeardowns must be a whole number from 0"},
		{"apply:\n  maxTeardowns: [1]", 2, "apply.maxTeardowns must be a whole number, not a list"},
		{"apply:\n  maxTeardowns: 99999999999999999999", 2, "apply.maxTeardowns: 99999999999999999999 is out of range"},
		{"apply:\n  maxTeardowns: -99999999999999999999", 2, "apply.maxTeardowns: -99999999999999999999 is out of range"},
		{"drift:\n  every: 15", 2, "drift.every must be a duration with a unit"},
		{"drift:\n  every: 0.5s", 2, "too short"},
		{"drift:\n  heal: [true]", 2, "drift.heal must be true or false, not a list"},
		{"secrets:\n  dir: ''", 2, "secrets.dir: an empty path"},
		{"secrets: /run/secrets", 1, "secrets must be a mapping of keys, not a string"},
		{"providers: [aws]", 1, "providers must be a mapping of keys, not a list"},
		{"providers:\n  azure: {}", 2, `unknown key "azure" in providers; known: aws, digitalocean, fake, gcp`},
		{"providers:\n  AWS: {}", 2, `did you mean "aws"?`},
		{"- a\n- b", 1, "the config must be a mapping of keys, not a list"},
		{"just text", 1, "the config must be a mapping of keys, not a string"},
		{"tenant: root\n---\ntenant: other", 2, "a second YAML document"},
		{"git:\n  url: [a\n", 1, "not valid YAML"},
		{"tenant: root\nstate: \"unterminated\n", 2, "not valid YAML"},
		{"tenant: root\n\tstate: x", 2, "not valid YAML"},
		{"base: &b {branch: x}\ngit: *b", 1, `unknown key "base"`},
		{"git: &g {branch: x}\ngithub: *g", 2, "github: aliases (*name) are not supported"},
		{"tenant: &t acme\nstate: *t", 2, "state: aliases (*name) are not supported"},
		{"git:\n  <<: {branch: x}", 2, "merge keys (<<) are not supported"},
		{"? [a, b]\n: c", 1, "keys are plain names"},
		{"tenant: !!binary aGVsbG8=", 1, "tenant must be a string, not binary data"},
		{"tenant: 2024-01-01", 1, "not a timestamp"},
	}
	for _, tc := range cases {
		t.Run(tc.text, func(t *testing.T) {
			ps := parseErr(t, tc.text)
			for _, p := range ps {
				if p.Line == tc.line && strings.Contains(p.Message, tc.want) && p.File == "config.yaml" {
					return
				}
			}
			t.Errorf("want line %d %q, got:\n%v", tc.line, tc.want, ps)
		})
	}
}

func TestUnknownKeys(t *testing.T) {
	cases := []struct {
		text, want string
		line       int
	}{
		{"gti: {}", `config.yaml:1: unknown key "gti" at the top level; known: tenant, state, socket, socketGroup, listen, pprof, exposeOps, exposeInsecureJoin, git, github, apply, policy, drift, secrets, providers, substrate, events (did you mean "git"?)`, 1},
		{"git:\n  url: /r\n  brnach: main", `config.yaml:3: unknown key "brnach" in git; known: url, branch, path, interval, auth, verify (did you mean "branch"?)`, 3},
		{"git:\n  auth:\n    tokn: env://T", `unknown key "tokn" in git.auth; known: token, username, password, sshKey, knownHosts (did you mean "token"?)`, 3},
		{"git:\n  verify:\n    keys: /k", `unknown key "keys" in git.verify; known: keyring`, 3},
		{"github:\n  repository: a/b\n  token: env://T\n  apiUrl: https://x/", `unknown key "apiUrl" in github; known: repository, apiURL, token, app, webhookSecret, statusContext (did you mean "apiURL"?)`, 4},
		{"github:\n  repository: a/b\n  app:\n    id: 1\n    installationId: 2\n    privateKey: secret://k\n    clientId: x", `unknown key "clientId" in github.app; known: id, installationId, privateKey`, 7},
		{"apply:\n  dryRun: true", `unknown key "dryRun" in apply; known: prune, requireReviewedPlan, maxTeardowns`, 2},
		{"drift:\n  interval: 1m", `unknown key "interval" in drift; known: every, heal, pullRequests, revertOnClose`, 2},
		{"secrets:\n  path: /x", `unknown key "path" in secrets; known: dir`, 2},
		{"Tenant: x", `(did you mean "tenant"?)`, 1},
		{"zzzzzz: x", `unknown key "zzzzzz" at the top level; known: tenant`, 1},
	}
	for _, tc := range cases {
		ps := parseErr(t, tc.text)
		found := false
		for _, p := range ps {
			found = found || p.Line == tc.line && strings.Contains(p.String(), tc.want)
		}
		if !found {
			t.Errorf("%q:\n got %v\nwant line %d: %s", tc.text, ps, tc.line, tc.want)
		}
		if strings.Contains(tc.want, "zzzzzz") && strings.Contains(ps[0].Message, "did you mean") {
			t.Errorf("a far key got a suggestion: %v", ps)
		}
	}
}

func TestRepeatedKeys(t *testing.T) {
	cases := []struct {
		text, want string
		line       int
	}{
		{"tenant: a\ntenant: b", `repeated key "tenant" at the top level (first at line 1)`, 2},
		{"git:\n  url: /a\n  branch: x\n  url: /b", `repeated key "url" in git (first at line 2)`, 4},
		{"git:\n  auth:\n    token: env://A\n    token: env://B", `repeated key "token" in git.auth (first at line 3)`, 4},
		{"git:\n  verify: {keyring: /a, keyring: /b}", `repeated key "keyring" in git.verify`, 2},
		{"github:\n  repository: a/b\n  token: env://T\n  repository: a/c", `repeated key "repository" in github (first at line 2)`, 4},
		{"github:\n  repository: a/b\n  app:\n    id: 1\n    id: 2\n    installationId: 2\n    privateKey: secret://k", `repeated key "id" in github.app (first at line 4)`, 5},
		{"apply:\n  prune: true\n  prune: false", `repeated key "prune" in apply`, 3},
		{"drift:\n  heal: true\n  heal: false", `repeated key "heal" in drift`, 3},
		{"secrets:\n  dir: /a\n  dir: /b", `repeated key "dir" in secrets`, 3},
		{"providers:\n  fake: {}\n  fake: {}", `repeated key "fake" in providers (first at line 2)`, 3},
		{"providers:\n  fake:\n    steps:\n      cluster: 1\n      cluster: 2", `repeated key "cluster" in providers.fake.steps (first at line 4)`, 5},
		{"providers:\n  fake:\n    locations:\n      - name: a\n        name: b", `repeated key "name" in providers.fake.locations.0`, 5},
		{"git: {}\ngit: {}", `repeated key "git" at the top level`, 2},
	}
	for _, tc := range cases {
		ps := parseErr(t, tc.text)
		found := false
		for _, p := range ps {
			if p.Line == tc.line && strings.Contains(p.Message, tc.want) {
				found = true
			}
		}
		if !found {
			t.Errorf("%q:\n got %v\nwant line %d: %s", tc.text, ps, tc.line, tc.want)
		}
	}
	// The first value is the one kept for the rest of the checks: the bad
	// second value is reported only as repeated.
	ps := parseErr(t, "tenant: good\ntenant: 'b a d'")
	if len(ps) != 1 {
		t.Errorf("want only the repetition, got %v", ps)
	}
}

// TestSecretsAsValues refuses a secret written where a reference belongs,
// at every secret-bearing key, and never repeats it.
func TestSecretsAsValues(t *testing.T) {
	const leak = "ghp_S3cr3tValue0123456789"
	base := map[string]string{
		"git.auth.token":                    "git:\n  auth:\n    token: %s\n",
		"git.auth.password":                 "git:\n  auth:\n    username: u\n    password: %s\n",
		"git.auth.sshKey":                   "git:\n  auth:\n    sshKey: %s\n    knownHosts: /k\n",
		"github.token":                      "github:\n  repository: a/b\n  token: %s\n",
		"github.app.privateKey":             "github:\n  repository: a/b\n  app:\n    id: 1\n    installationId: 2\n    privateKey: %s\n",
		"github.webhookSecret":              "github:\n  repository: a/b\n  token: env://T\n  webhookSecret: %s\n",
		"providers.aws.secretAccessKey":     "providers:\n  aws:\n    region: eu-west-1\n    secretAccessKey: %s\n",
		"providers.gcp.credentials.0.token": "providers:\n  gcp:\n    credentials:\n      - token: %s\n",
		"providers.fake.password":           "providers:\n  fake:\n    password: %s\n",
		"providers.digitalocean.apiKey":     "providers:\n  digitalocean:\n    apiKey: %s\n",
	}
	values := []string{
		leak,
		"'" + leak + "'",
		"|\n          " + leak,
		"'env://" + leak + "'", // looks like a reference, is not one
		"'secret://acme/" + leak + "'",
		"12345678901234",
	}
	for key, tmpl := range base {
		for _, v := range values {
			text := strings.Replace(tmpl, "%s", v, 1)
			c, err := Parse("config.yaml", []byte(text), noEnv)
			if err == nil {
				t.Errorf("%s accepted a value:\n%s\n%+v", key, text, c)
				continue
			}
			if strings.Contains(err.Error(), leak) || strings.Contains(err.Error(), "12345678901234") {
				t.Errorf("the error repeats the value: %v", err)
			}
			if !strings.Contains(err.Error(), key) {
				t.Errorf("the error does not name %s: %v", key, err)
			}
		}
	}
	// Tenant-scoped references are well formed but not the agent's.
	ps := parseErr(t, "github:\n  repository: a/b\n  token: secret://acme/gh\n")
	if !strings.Contains(ps[0].Message, "belong to sandboxes") || ps[0].Line != 3 {
		t.Errorf("tenant-scoped reference: %v", ps)
	}
	// Provider fields that are not secret-named stay free, and a secret
	// field's mapping is left to the adapter.
	c := mustParse(t, "providers:\n  aws:\n    region: eu-west-1\n    monkey: banana\n    roleKey: { arn: x }\n    accessKey: env://AWS_KEY\n")
	refs := c.SecretRefs()
	if len(refs) != 1 || refs[0] != (SecretRef{Key: "providers.aws.accessKey", Ref: "env://AWS_KEY", Line: 6}) {
		t.Errorf("SecretRefs = %+v", refs)
	}
}

func TestWrongTypesNeverEchoSecrets(t *testing.T) {
	ps := parseErr(t, "git:\n  auth:\n    token: 987654321\n")
	if strings.Contains(ps.Error(), "987654321") || !strings.Contains(ps.Error(), "not a number") {
		t.Errorf("got %v", ps)
	}
	ps = parseErr(t, "git:\n  auth:\n    token: [a-secret-in-a-list]\n")
	if strings.Contains(ps.Error(), "a-secret-in-a-list") || !strings.Contains(ps.Error(), "not a list") {
		t.Errorf("got %v", ps)
	}
}

func TestProviders(t *testing.T) {
	text := "tenant: root\nproviders:\n  fake:\n    steps: { cluster: 2 }\n    zeroNodes: true\n  gcp: {project: p}\n"
	c := mustParse(t, text)
	if got := c.Line("providers.fake"); got != 3 {
		t.Errorf("Line(providers.fake) = %d", got)
	}
	fake := c.Providers["fake"]
	if fake == nil || fake.Kind != yaml.MappingNode || fake.Line != 4 {
		t.Fatalf("fake block = %+v", fake)
	}
	var block struct {
		Steps     struct{ Cluster int }
		ZeroNodes bool `yaml:"zeroNodes"`
	}
	if err := fake.Decode(&block); err != nil || block.Steps.Cluster != 2 || !block.ZeroNodes {
		t.Errorf("decode = %+v, %v", block, err)
	}
	if b := c.ProvidersBlock(); b == nil || b.Kind != yaml.MappingNode || len(b.Content) != 4 {
		t.Errorf("ProvidersBlock = %+v", b)
	}
}

func TestManyProblemsSortedByLine(t *testing.T) {
	text := "git:\n  interval: 1\n  branch: 'a b'\ntenant: 'x y'\nzz: 1\n"
	_, err := Parse("/etc/fleet-agent/config.yaml", []byte(text), noEnv)
	var r *refusal.Error
	if !errors.As(err, &r) {
		t.Fatalf("err = %v", err)
	}
	lines := strings.Split(r.Message, "\n")
	if len(lines) != 4 {
		t.Fatalf("want 4 problems, got %q", r.Message)
	}
	for i, l := range lines {
		if !strings.HasPrefix(l, "/etc/fleet-agent/config.yaml:"+string(rune('2'+i))+": ") {
			t.Errorf("line %d = %q", i, l)
		}
	}
	if refusal.CodeOf(err) != refusal.InvalidInput {
		t.Errorf("code %s", refusal.CodeOf(err))
	}

	var many strings.Builder
	for i := range 70 {
		many.WriteString("k" + strings.Repeat("x", i) + ": 1\n")
	}
	ps := parseErr(t, many.String())
	if len(ps) != maxProblems+1 || ps[maxProblems].Message != "and 20 more problems" {
		t.Errorf("Problems not capped: %d", len(ps))
	}
	_, err = Parse("c.yaml", []byte(many.String()), noEnv)
	if !strings.HasSuffix(err.Error(), "c.yaml: and 20 more problems") {
		t.Errorf("message not capped: ...%s", err.Error()[len(err.Error())-60:])
	}
}

func TestCheckForRun(t *testing.T) {
	c := mustParse(t, "tenant: root\ngit:\n  branch: main\n")
	err := c.CheckForRun()
	if refusal.CodeOf(err) != refusal.InvalidInput || !strings.Contains(err.Error(), "config.yaml:2: git.url is required by run") {
		t.Errorf("err = %v", err)
	}
	err = mustParse(t, "tenant: root\n").CheckForRun()
	if !strings.Contains(err.Error(), "config.yaml: git.url is required by run") {
		t.Errorf("err = %v", err)
	}
	err = Defaults(noEnv).CheckForRun()
	if !strings.Contains(err.Error(), "no config file: git.url is required by run") {
		t.Errorf("err = %v", err)
	}
	if err := mustParse(t, "git: { url: /srv/fleet }").CheckForRun(); err != nil {
		t.Errorf("err = %v", err)
	}

	text := "git:\n  url: https://h/r\n  auth:\n    token: secret://git-token\nproviders:\n  aws:\n    secretKey: secret://aws\n"
	err = mustParse(t, text).CheckForRun()
	if err == nil || !strings.Contains(err.Error(), "config.yaml:4: git.auth.token reads secret file git-token but there is no secrets directory") ||
		!strings.Contains(err.Error(), "config.yaml:7: providers.aws.secretKey reads secret file aws") {
		t.Errorf("err = %v", err)
	}
	c, err = Parse("config.yaml", []byte(text), systemdEnv)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CheckForRun(); err != nil {
		t.Errorf("with $CREDENTIALS_DIRECTORY: %v", err)
	}
	if err := mustParse(t, text+"secrets: { dir: /s }\n").CheckForRun(); err != nil {
		t.Errorf("with secrets.dir: %v", err)
	}
}

func TestPath(t *testing.T) {
	cases := []struct {
		flag     string
		env      map[string]string
		want     string
		explicit bool
	}{
		{"", nil, "/etc/fleet-agent/config.yaml", false},
		{"", map[string]string{"FLEET_AGENT_CONFIG": ""}, "/etc/fleet-agent/config.yaml", false},
		{"", map[string]string{"FLEET_AGENT_CONFIG": "/e.yaml"}, "/e.yaml", true},
		{"/f.yaml", map[string]string{"FLEET_AGENT_CONFIG": "/e.yaml"}, "/f.yaml", true},
	}
	for _, c := range cases {
		got, explicit := Path(c.flag, envOf(c.env))
		if got != c.want || explicit != c.explicit {
			t.Errorf("Path(%q, %v) = %q, %v", c.flag, c.env, got, explicit)
		}
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(p, []byte("git:\n  url: /srv/r\n  brnch: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(p, noEnv)
	if err == nil || !strings.Contains(err.Error(), p+":3: unknown key \"brnch\" in git") {
		t.Errorf("err = %v", err)
	}
	if err := os.WriteFile(p, []byte("git:\n  url: /srv/r\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(p, noEnv)
	if err != nil || c.File != p || c.Git.URL != "/srv/r" {
		t.Errorf("Load = %+v, %v", c, err)
	}
	// A path the operator named: the advice is to check it, not to name one.
	_, err = Load(filepath.Join(dir, "absent.yaml"), noEnv)
	if refusal.CodeOf(err) != refusal.InvalidInput || !errors.Is(err, fs.ErrNotExist) ||
		!strings.Contains(err.Error(), "check the path") || strings.Contains(err.Error(), "pass --config") {
		t.Errorf("missing file: %v", err)
	}
	if os.Getuid() != 0 {
		locked := filepath.Join(dir, "locked.yaml")
		if err := os.WriteFile(locked, []byte("git:\n  url: /srv/r\n"), 0o000); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(locked, noEnv); err == nil || !strings.Contains(err.Error(), "run as a user that may read it") {
			t.Errorf("unreadable file: %v", err)
		}
	}
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, []byte("# "+strings.Repeat("x", maxFileSize)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(big, noEnv); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("big file: %v", err)
	}
}

func TestChanges(t *testing.T) {
	old := mustParse(t, `
git:
  url: https://h/r
  interval: 1m
  auth: { token: env://A }
github: { repository: a/b, token: env://T }
providers:
  fake: { steps: { cluster: 1 } } # a comment
  gcp: { project: p }
`)
	same := mustParse(t, `
# comments and layout do not count
git: { url: 'https://h/r', interval: 60s, auth: { token: env://A } }
github:
  repository: a/b
  token: env://T
providers:
  fake:
    steps:
      cluster: 1 # another comment
  gcp: { project: p }
`)
	if ch := same.Changes(old); len(ch) != 0 {
		t.Errorf("no change expected, got %v", ch)
	}
	next := mustParse(t, `
listen: 127.0.0.1:9999
git:
  url: https://h/r
  interval: 30s
  auth: { token: env://B }
github: { repository: a/b, token: env://T }
providers:
  fake: { steps: { cluster: 2 } }
  aws: {}
`)
	var got []string
	for _, c := range next.Changes(old) {
		got = append(got, c.String())
		if c.Secret && (c.Old != "" || c.New != "") {
			t.Errorf("a secret-bearing change carries values: %+v", c)
		}
	}
	want := []string{
		`git.auth.token changed`,
		`git.interval: "1m0s" -> "30s"`,
		`listen: "127.0.0.1:9464" -> "127.0.0.1:9999"`,
		`providers.aws changed`,
		`providers.fake changed`,
		`providers.gcp changed`,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Changes:\n got %q\nwant %q", got, want)
	}
	restart := map[string]bool{}
	for _, c := range next.Changes(old) {
		restart[c.Key] = c.NeedsRestart()
	}
	// git.interval is read once, when the agent starts polling.
	if !restart["listen"] || !restart["git.interval"] || !restart["providers.fake"] {
		t.Errorf("NeedsRestart: %v", restart)
	}
	if ch := next.Changes(nil); len(ch) == 0 || ch[0].Old != "" {
		t.Errorf("Changes(nil) = %v", ch)
	}
	quoted := mustParse(t, "providers: { fake: { steps: { cluster: '1' } }, gcp: { project: p } }\ngit: { url: https://h/r, interval: 1m, auth: { token: env://A } }\ngithub: { repository: a/b, token: env://T }")
	if ch := quoted.Changes(old); len(ch) != 1 || ch[0].Key != "providers.fake" {
		t.Errorf("a number that became a string is a change: %v", ch)
	}
	gone := mustParse(t, "git: { url: https://h/r }")
	found := false
	for _, c := range gone.Changes(old) {
		if c.Key == "github.repository" && c.String() == `github.repository: "a/b" -> (unset)` {
			found = true
		}
	}
	if !found {
		t.Errorf("removing github not reported: %v", gone.Changes(old))
	}
}

const substrateExample = `substrate:
  every: 1m                                   # [1m]
  nodeDaemon:
    image: registry.example.com/fleet-agent:1.2.0   # an image whose entrypoint is ` + "`fleet-agent node`" + `
    joinURL: https://ops.example.com:9465/          # where node daemons reach the join listener
    caPins: ["sha256/47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="]
    runtimeClass: nvidia                            # [none]
  join:
    listen: 0.0.0.0:9465                      # [none: no join listener]; TLS unless ` + "`insecure: true`" + `
    tlsCert: /etc/fleet-agent/join.crt
    tlsKey: /etc/fleet-agent/join.key
`

// TestSubstrate parses the documented substrate block (docs/configuration.md) and
// refuses each bad value with its line.
func TestSubstrate(t *testing.T) {
	c := mustParse(t, substrateExample)
	want := Substrate{Every: time.Minute,
		NodeDaemon: &NodeDaemon{Image: "registry.example.com/fleet-agent:1.2.0", JoinURL: "https://ops.example.com:9465/",
			CAPins: []string{"sha256/47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="}, RuntimeClass: "nvidia", ResolveDigest: true},
		Join: &Join{Listen: "0.0.0.0:9465", TLSCert: "/etc/fleet-agent/join.crt", TLSKey: "/etc/fleet-agent/join.key"}}
	if !reflect.DeepEqual(c.Substrate, want) {
		t.Fatalf("got %+v %+v %+v", c.Substrate, c.Substrate.NodeDaemon, c.Substrate.Join)
	}
	if c.Line("substrate.nodeDaemon.image") != 4 || c.Line("substrate.join.listen") != 9 {
		t.Errorf("lines: %d %d", c.Line("substrate.nodeDaemon.image"), c.Line("substrate.join.listen"))
	}
	for _, good := range []struct {
		text string
		ok   func(Substrate) bool
	}{
		{"substrate: { every: 30s }", func(s Substrate) bool { return s.Every == 30*time.Second && s.NodeDaemon == nil }},
		{"substrate:", func(s Substrate) bool { return s.Every == time.Minute }},
		{"substrate: { join: { listen: '127.0.0.1:0', insecure: true } }", func(s Substrate) bool { return s.Join.Insecure }},
		{"substrate: { nodeDaemon: { image: 'r:5000/a/b@sha256:" + strings.Repeat("a", 64) + "', joinURL: 'http://10.0.0.1:9465/' } }", func(s Substrate) bool {
			return s.NodeDaemon.RuntimeClass == "" && s.NodeDaemon.CAPins == nil && s.NodeDaemon.ResolveDigest
		}},
		{"substrate: { nodeDaemon: { image: 'r/a:v1', joinURL: 'http://10.0.0.1:9465/', resolveDigest: false } }", func(s Substrate) bool {
			return !s.NodeDaemon.ResolveDigest
		}},
	} {
		if got := mustParse(t, good.text).Substrate; !good.ok(got) {
			t.Errorf("%q: %+v", good.text, got)
		}
	}
	for _, bad := range []struct {
		text string
		line int
		want string
	}{
		{"substrate: { every: 0s }", 1, "substrate.every: 0s is too short"},
		{"substrate: { every: 5 }", 1, "substrate.every must be a duration"},
		{"substrate:\n  evry: 1m", 2, `unknown key "evry" in substrate; known: every, nodeDaemon, join (did you mean "every"?)`},
		{"substrate:\n  nodeDaemon:\n    image: x", 2, "substrate.nodeDaemon needs joinURL"},
		{"substrate:\n  nodeDaemon:\n    image: 'Bad Image'\n    joinURL: https://h/", 3, "is not an image reference"},
		{"substrate:\n  nodeDaemon:\n    image: a\n    joinURL: 'ftp://h/'", 4, "is not a URL node daemons can reach"},
		{"substrate:\n  nodeDaemon:\n    image: a\n    joinURL: 'https://u:p@h/'", 4, "no credentials"},
		{"substrate:\n  nodeDaemon:\n    image: a\n    joinURL: https://h/\n    caPins: [sha1/abc]", 5, "caPins[0]: \"sha1/abc\" is not a pin"},
		{"substrate:\n  nodeDaemon:\n    image: a\n    joinURL: https://h/\n    caPins: pin", 5, "caPins must be a list of strings"},
		{"substrate:\n  nodeDaemon:\n    image: a\n    joinURL: https://h/\n    runtimeClass: NV_1", 5, "is not a RuntimeClass name"},
		{"substrate:\n  nodeDaemon:\n    image: a\n    joinURL: https://h/\n    resolveDigest: 'no'", 5, "substrate.nodeDaemon.resolveDigest must be true or false"},
		{"substrate:\n  join:\n    tlsCert: /c\n    tlsKey: /k", 2, "substrate.join needs listen"},
		{"substrate:\n  join:\n    listen: ':9465'", 2, "needs tlsCert and tlsKey"},
		{"substrate:\n  join:\n    listen: ':9465'\n    insecure: true\n    tlsKey: /k", 2, "remove tlsCert and tlsKey, or insecure"},
		{"substrate:\n  join:\n    listen: nope\n    insecure: true", 3, "is not HOST:PORT"},
	} {
		ps := parseErr(t, bad.text)
		found := false
		for _, p := range ps {
			found = found || p.Line == bad.line && strings.Contains(p.String(), bad.want)
		}
		if !found {
			t.Errorf("%q:\n got %v\nwant line %d: %s", bad.text, ps, bad.line, bad.want)
		}
	}
	// A change of the join listener needs a restart, and so does one of
	// every: both are read once, at start.
	next := mustParse(t, strings.Replace(strings.Replace(substrateExample, "every: 1m", "every: 2m", 1), "0.0.0.0:9465", "0.0.0.0:9466", 1))
	restart := map[string]bool{}
	for _, ch := range next.Changes(c) {
		restart[ch.Key] = ch.NeedsRestart()
	}
	if len(restart) != 2 || !restart["substrate.every"] || !restart["substrate.join.listen"] {
		t.Errorf("changes: %v", restart)
	}
}

// A change of events.webhooks is a change a reload sees (the agent sets
// its receivers up once, so it needs a restart), logged without the URL,
// which may be a credential.
func TestChangesOfWebhooks(t *testing.T) {
	const git = "git: { url: https://h/r }\n"
	old := mustParse(t, git+"events:\n  webhooks:\n    - { url: https://hooks.example.com/T0K3N, secret: env://K }\n")
	same := mustParse(t, git+"events: { webhooks: [ { secret: env://K, url: 'https://hooks.example.com/T0K3N' } ] }\n")
	if ch := same.Changes(old); len(ch) != 0 {
		t.Errorf("no change expected, got %v", ch)
	}
	for name, next := range map[string]*Config{
		"format": mustParse(t, git+"events:\n  webhooks:\n    - { url: https://hooks.example.com/T0K3N, secret: env://K, format: slack }\n"),
		"url":    mustParse(t, git+"events:\n  webhooks:\n    - { url: https://hooks.example.com/OTHER, secret: env://K }\n"),
		"gone":   mustParse(t, git),
	} {
		ch := next.Changes(old)
		if len(ch) != 1 || ch[0].Key != "events.webhooks" || !ch[0].NeedsRestart() {
			t.Errorf("%s: changes %+v, want events.webhooks, needing a restart", name, ch)
			continue
		}
		if s := ch[0].String(); strings.Contains(s, "T0K3N") || strings.Contains(s, "OTHER") || s != "events.webhooks changed" {
			t.Errorf("%s: the change is logged as %q", name, s)
		}
	}
}

// Reloadable is the one list of what a reload applies: Reloaded takes
// exactly those keys from the new config (a config that changes every key
// keeps every other as it was), and NeedsRestart names every other key.
func TestReloadedTakesExactlyTheReloadableKeys(t *testing.T) {
	old := mustParse(t, "git: { url: https://h/r }\n")
	next := mustParse(t, "tenant: acme\ngit: { url: https://h/other, interval: 30s, branch: prod }\nlisten: 127.0.0.1:9999\n"+
		"apply: { prune: true, requireReviewedPlan: false, maxTeardowns: 3 }\npolicy: { path: policy.yaml }\ndrift: { every: 5m, heal: true, pullRequests: true }\nsubstrate: { every: 2m }\n")
	changed := map[string]bool{}
	for _, c := range next.Changes(old) {
		changed[c.Key] = true
		if c.NeedsRestart() == slices.Contains(Reloadable, c.Key) {
			t.Errorf("%s: NeedsRestart %v disagrees with Reloadable", c.Key, c.NeedsRestart())
		}
	}
	for _, k := range Reloadable {
		if !changed[k] {
			t.Fatalf("the test's config does not change %s", k)
		}
	}
	kept := old.Reloaded(next)
	for _, c := range kept.Changes(old) {
		if c.NeedsRestart() {
			t.Errorf("a reload took %s, which needs a restart", c.Key)
		}
	}
	for _, c := range next.Changes(kept) {
		if !c.NeedsRestart() {
			t.Errorf("a reload did not take %s, which Reloadable names", c.Key)
		}
	}
	if n := len(kept.Changes(old)); n != len(Reloadable) {
		t.Errorf("a reload took %d keys, Reloadable names %d", n, len(Reloadable))
	}
}
