package config

import (
	"encoding/base64"
	"net/url"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// DefaultSubstrateEvery is how often the substrate reconciler looks at every
// substrate (substrate.every).
const DefaultSubstrateEvery = time.Minute

// Substrate is the substrate block (docs/substrates.md).
type Substrate struct {
	Every time.Duration
	// NodeDaemon is what runs on the substrates' Nodes; nil: no node
	// daemon, and substrates say so.
	NodeDaemon *NodeDaemon
	// Join is the join listener; nil: none.
	Join *Join
}

// NodeDaemon describes the node daemon's DaemonSet.
type NodeDaemon struct {
	Image        string   // an image whose entrypoint is `fleet-agent node`
	JoinURL      string   // where node daemons reach the join listener
	CAPins       []string // sha256/<base64> pins of the join listener's certificate
	RuntimeClass string   // "" for none
	// ResolveDigest: the agent pins a tag to the digest the registry
	// names for it (default true; docs/substrates.md).
	ResolveDigest bool
}

// Join is the listener node daemons join through.
type Join struct {
	Listen   string
	TLSCert  string
	TLSKey   string
	Insecure bool
}

var (
	substrateKeys  = []string{"every", "nodeDaemon", "join"}
	nodeDaemonKeys = []string{"image", "joinURL", "caPins", "runtimeClass", "resolveDigest"}
	joinKeys       = []string{"listen", "tlsCert", "tlsKey", "insecure"}

	// An image reference: [registry[:port]/]path[:tag][@digest], lower case
	// path components as the distribution spec has them.
	imageRe = lazyRegexp(`^[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)*(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[a-f0-9]{64})?$`)
	// A RuntimeClass name is a DNS subdomain.
	runtimeClassRe = lazyRegexp(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
)

func (p *parser) substrate(m map[string]entry) {
	s := &p.c.Substrate
	p.duration(m, "substrate", "every", &s.Every, time.Second)
	if nd := p.section(m, "substrate", "nodeDaemon", nodeDaemonKeys); nd != nil {
		s.NodeDaemon = &NodeDaemon{ResolveDigest: true}
		line := m["nodeDaemon"].key.Line
		for _, k := range []string{"image", "joinURL"} {
			if _, ok := nd[k]; !ok {
				p.errorf(line, "substrate.nodeDaemon needs %s (it needs image and joinURL)", k)
			}
		}
		p.str(nd, "substrate.nodeDaemon", "image", &s.NodeDaemon.Image, checkImage)
		p.str(nd, "substrate.nodeDaemon", "joinURL", &s.NodeDaemon.JoinURL, checkJoinURL)
		p.strList(nd, "substrate.nodeDaemon", "caPins", &s.NodeDaemon.CAPins, checkPin)
		p.str(nd, "substrate.nodeDaemon", "runtimeClass", &s.NodeDaemon.RuntimeClass, checkRuntimeClass)
		p.boolean(nd, "substrate.nodeDaemon", "resolveDigest", &s.NodeDaemon.ResolveDigest)
	}
	if j := p.section(m, "substrate", "join", joinKeys); j != nil {
		s.Join = &Join{}
		line := m["join"].key.Line
		if _, ok := j["listen"]; !ok {
			p.errorf(line, "substrate.join needs listen: HOST:PORT of the join listener, like 0.0.0.0:9465")
		}
		p.str(j, "substrate.join", "listen", &s.Join.Listen, checkListen)
		p.str(j, "substrate.join", "tlsCert", &s.Join.TLSCert, checkPath)
		p.str(j, "substrate.join", "tlsKey", &s.Join.TLSKey, checkPath)
		p.boolean(j, "substrate.join", "insecure", &s.Join.Insecure)
		_, cert := j["tlsCert"]
		_, key := j["tlsKey"]
		switch {
		case s.Join.Insecure && (cert || key):
			p.errorf(line, "substrate.join: insecure: true serves without TLS; remove tlsCert and tlsKey, or insecure")
		case !s.Join.Insecure && (!cert || !key):
			p.errorf(line, "substrate.join needs tlsCert and tlsKey (the listener speaks TLS), or insecure: true for a listener without TLS")
		}
	}
}

// strList reads a list of strings, each checked.
func (p *parser) strList(m map[string]entry, path, key string, dst *[]string, check func(string) string) {
	e, ok := m[key]
	if !ok {
		return
	}
	full := join(path, key)
	if e.value.Kind != yaml.SequenceNode {
		p.errorf(e.value.Line, "%s must be a list of strings, not %s", full, describe(e.value))
		return
	}
	var out []string
	for i, n := range e.value.Content {
		item := full + "[" + strconv.Itoa(i) + "]"
		if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
			p.errorf(n.Line, "%s must be a string, not %s", item, describe(n))
			continue
		}
		if msg := check(n.Value); msg != "" {
			p.errorf(n.Line, "%s: %s", item, msg)
			continue
		}
		out = append(out, n.Value)
	}
	*dst = out
}

func checkImage(s string) string {
	if len(s) > 512 || !imageRe().MatchString(s) {
		return strconv.Quote(s) + " is not an image reference, like registry.example.com/fleet-agent:1.2.0"
	}
	return ""
}

func checkJoinURL(s string) string {
	u, err := url.Parse(s)
	switch {
	case err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http"):
		return strconv.Quote(s) + " is not a URL node daemons can reach, like https://ops.example.com:9465/"
	case u.User != nil || u.RawQuery != "" || u.Fragment != "":
		return "the join URL has no credentials, query or fragment"
	}
	return ""
}

func checkPin(s string) string {
	b64, ok := strings.CutPrefix(s, "sha256/")
	raw, err := base64.StdEncoding.DecodeString(b64)
	if !ok || err != nil || len(raw) != 32 {
		return strconv.Quote(s) + " is not a pin: sha256/ and the base64 of the SHA-256 of the certificate's public key (44 characters)"
	}
	return ""
}

func checkRuntimeClass(s string) string {
	if len(s) > 253 || !runtimeClassRe().MatchString(s) {
		return strconv.Quote(s) + " is not a RuntimeClass name (a DNS subdomain, like nvidia)"
	}
	return ""
}
