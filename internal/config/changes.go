package config

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Change is one key whose value differs between two configs, for a reload
// (SIGHUP) to log and act on.
type Change struct {
	Key string
	// Old and New are the values as text, "" when unset. For a
	// secret-bearing key and a provider block they are empty: the log
	// says that it changed, not to what.
	Old, New string
	// Secret marks a secret-bearing key (its reference changed).
	Secret bool
}

func (c Change) String() string {
	switch {
	case c.Secret:
		return c.Key + " changed"
	case strings.HasPrefix(c.Key, "providers."), strings.HasPrefix(c.Key, "events."):
		return c.Key + " changed"
	}
	show := func(s string) string {
		if s == "" {
			return "(unset)"
		}
		return strconv.Quote(s)
	}
	return fmt.Sprintf("%s: %s -> %s", c.Key, show(c.Old), show(c.New))
}

// Reloadable are the keys a reload (SIGHUP, or the config file changing)
// applies to a running agent. Every other key is read once, at start: its
// identity, files and sockets, listeners, git remote and GitHub, adapters,
// webhooks. The reload, its log line and the "on reload" column of the
// configuration page all follow this one list.
var Reloadable = []string{"apply.maxTeardowns", "apply.prune", "apply.requireReviewedPlan", "drift.every", "drift.heal", "policy.path"}

// NeedsRestart reports whether the agent must restart to take the change:
// every key Reloadable does not name.
func (c Change) NeedsRestart() bool { return !slices.Contains(Reloadable, c.Key) }

// Reloaded is c (the running config) with the keys of Reloadable taken
// from next: what a reload makes of it. The rest waits for a restart, so a
// later reload still sees it as a change.
func (c *Config) Reloaded(next *Config) *Config {
	kept := *c
	kept.Apply.Prune, kept.Apply.RequireReviewedPlan, kept.Apply.MaxTeardowns = next.Apply.Prune, next.Apply.RequireReviewedPlan, next.Apply.MaxTeardowns
	kept.Policy.Path = next.Policy.Path
	kept.Drift.Every, kept.Drift.Heal = next.Drift.Every, next.Drift.Heal
	return &kept
}

// Changes lists the keys whose values differ from old, sorted by key. A nil
// old is a config with no keys at all.
func (c *Config) Changes(old *Config) []Change {
	a, b := flatten(old), flatten(c)
	keys := slices.Sorted(maps.Keys(a))
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var out []Change
	for _, k := range keys {
		va, vb := a[k], b[k]
		if va.text == vb.text {
			continue
		}
		ch := Change{Key: k, Secret: va.secret || vb.secret}
		// A provider block and a webhook's URL may hold credentials.
		if !ch.Secret && !strings.HasPrefix(k, "providers.") && !strings.HasPrefix(k, "events.") {
			ch.Old, ch.New = va.text, vb.text
		}
		out = append(out, ch)
	}
	return out
}

type flat struct {
	text   string
	secret bool
}

// flatten spells a config as dotted keys and texts; unset keys are absent.
func flatten(c *Config) map[string]flat {
	m := map[string]flat{}
	if c == nil {
		return m
	}
	put := func(k, v string) {
		if v != "" {
			m[k] = flat{text: v}
		}
	}
	ref := func(k, v string) {
		if v != "" {
			m[k] = flat{text: v, secret: true}
		}
	}
	put("tenant", c.Tenant)
	put("state", c.State)
	put("state.backend", c.StateBackend)
	if e := c.Etcd; e != nil {
		put("state.etcd.endpoints", strings.Join(e.Endpoints, ","))
		put("state.etcd.prefix", e.Prefix)
		put("state.etcd.name", e.Name)
		put("state.etcd.lease", e.Lease.String())
		put("state.etcd.username", e.Username)
		ref("state.etcd.password", e.Password)
		if e.TLS != nil {
			put("state.etcd.tls.ca", e.TLS.CA)
			put("state.etcd.tls.cert", e.TLS.Cert)
			put("state.etcd.tls.key", e.TLS.Key)
		}
		if e.AuditKeep > 0 {
			put("state.etcd.auditKeep", strconv.FormatInt(e.AuditKeep, 10))
		}
	}
	put("socket", c.Socket)
	put("socketGroup", c.SocketGroup)
	put("listen", c.Listen)
	put("pprof", strconv.FormatBool(c.Pprof))
	put("exposeOps", strconv.FormatBool(c.ExposeOps))
	put("exposeInsecureJoin", strconv.FormatBool(c.ExposeInsecureJoin))
	put("git.url", c.Git.URL)
	put("git.branch", c.Git.Branch)
	put("git.path", c.Git.Path)
	put("git.interval", c.Git.Interval.String())
	ref("git.auth.token", c.Git.Auth.Token)
	put("git.auth.username", c.Git.Auth.Username)
	ref("git.auth.password", c.Git.Auth.Password)
	ref("git.auth.sshKey", c.Git.Auth.SSHKey)
	put("git.auth.knownHosts", c.Git.Auth.KnownHosts)
	if c.Git.Verify != nil {
		put("git.verify.keyring", c.Git.Verify.Keyring)
	}
	if g := c.GitHub; g != nil {
		put("github.repository", g.Repository)
		put("github.apiURL", g.APIURL)
		ref("github.token", g.Token)
		if g.App != nil {
			put("github.app.id", strconv.FormatInt(g.App.ID, 10))
			put("github.app.installationId", strconv.FormatInt(g.App.InstallationID, 10))
			ref("github.app.privateKey", g.App.PrivateKey)
		}
		ref("github.webhookSecret", g.WebhookSecret)
		put("github.statusContext", g.StatusContext)
	}
	put("apply.prune", strconv.FormatBool(c.Apply.Prune))
	put("apply.requireReviewedPlan", strconv.FormatBool(c.Apply.RequireReviewedPlan))
	put("apply.maxTeardowns", strconv.Itoa(c.Apply.MaxTeardowns))
	put("policy.path", c.Policy.Path)
	put("drift.every", c.Drift.Every.String())
	put("drift.heal", strconv.FormatBool(c.Drift.Heal))
	put("drift.pullRequests", strconv.FormatBool(c.Drift.PullRequests))
	put("drift.revertOnClose", strconv.FormatBool(c.Drift.RevertOnClose))
	put("secrets.dir", c.Secrets.Dir)
	put("substrate.every", c.Substrate.Every.String())
	if d := c.Substrate.NodeDaemon; d != nil {
		put("substrate.nodeDaemon.image", d.Image)
		put("substrate.nodeDaemon.joinURL", d.JoinURL)
		put("substrate.nodeDaemon.caPins", strings.Join(d.CAPins, ","))
		put("substrate.nodeDaemon.runtimeClass", d.RuntimeClass)
		put("substrate.nodeDaemon.resolveDigest", strconv.FormatBool(d.ResolveDigest))
	}
	if j := c.Substrate.Join; j != nil {
		put("substrate.join.listen", j.Listen)
		put("substrate.join.tlsCert", j.TLSCert)
		put("substrate.join.tlsKey", j.TLSKey)
		put("substrate.join.insecure", strconv.FormatBool(j.Insecure))
	}
	if len(c.Events.Webhooks) > 0 {
		// One key for the list: a receiver's place in it is no identity.
		list := make([]any, len(c.Events.Webhooks))
		for i, w := range c.Events.Webhooks {
			list[i] = map[string]any{"url": w.URL, "secret": w.Secret, "events": w.Events, "format": w.Format}
		}
		if b, err := json.Marshal(list); err == nil {
			m["events.webhooks"] = flat{text: string(b)}
		}
	}
	for id, n := range c.Providers {
		// Compared as re-encoded YAML: comments and layout do not count,
		// values do.
		text := "null"
		if n != nil {
			if b, err := yaml.Marshal(bare(n, 0)); err == nil {
				text = string(b)
			}
		}
		m["providers."+id] = flat{text: text}
	}
	return m
}

// bare copies a node without its comments and styles (flow or block,
// quoting), which yaml.Marshal would keep; tags keep "1" apart from 1.
// Aliases are kept as aliases (their anchors are copied where they stand),
// so a block built to expand enormously is not expanded here.
func bare(n *yaml.Node, depth int) *yaml.Node {
	if n == nil || depth > 10000 {
		return nil
	}
	c := &yaml.Node{Kind: n.Kind, Tag: n.Tag, Value: n.Value, Anchor: n.Anchor, Alias: n.Alias}
	for _, k := range n.Content {
		c.Content = append(c.Content, bare(k, depth+1))
	}
	return c
}
