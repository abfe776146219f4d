package config

import (
	"net/url"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// The state key is a path (the bbolt file, as it always was) or a mapping
// that chooses the backend: several agents on one etcd cluster, one of them
// leading (docs/ha.md).

// Backends of the store.
const (
	BackendBbolt = "bbolt"
	BackendEtcd  = "etcd"
)

var (
	stateKeys    = []string{"backend", "path", "etcd"}
	stateEtcdKey = []string{"endpoints", "prefix", "name", "lease", "tls", "username", "password", "auditKeep"}
	etcdTLSKeys  = []string{"ca", "cert", "key"}
)

// StateEtcd is the etcd backend's block.
type StateEtcd struct {
	Endpoints []string
	Prefix    string // default /fleet-agent/<tenant>
	Name      string // this agent in the election; default the host name
	Lease     time.Duration
	TLS       *EtcdTLS
	Username  string
	Password  string // reference
	AuditKeep int64  // newest audit rows kept; 0 for the default
}

// EtcdTLS are the files of a TLS connection to etcd.
type EtcdTLS struct {
	CA, Cert, Key string
}

func (p *parser) state(top map[string]entry) {
	e, ok := top["state"]
	if !ok || isNull(e.value) {
		return
	}
	c := p.c
	if e.value.Kind != yaml.MappingNode {
		p.str(top, "", "state", &c.State, checkPath)
		return
	}
	m := p.mapping(e.value, "state", stateKeys)
	if m == nil {
		return
	}
	backend := BackendBbolt
	p.str(m, "state", "backend", &backend, func(s string) string {
		if s != BackendBbolt && s != BackendEtcd {
			return "must be bbolt or etcd"
		}
		return ""
	})
	p.str(m, "state", "path", &c.State, checkPath)
	c.StateBackend = backend
	em := p.section(m, "state", "etcd", stateEtcdKey)
	if backend == BackendBbolt {
		if em != nil {
			p.errorf(m["etcd"].key.Line, "state.etcd is set but state.backend is bbolt; write backend: etcd, or remove the block")
		}
		return
	}
	if em == nil {
		p.errorf(e.key.Line, "state.backend is etcd but state.etcd is missing; add state.etcd.endpoints")
		return
	}
	et := &StateEtcd{Prefix: "/fleet-agent/" + c.Tenant, Lease: 5 * time.Second}
	p.strList(em, "state.etcd", "endpoints", &et.Endpoints, checkEtcdEndpoint)
	if len(et.Endpoints) == 0 {
		if _, set := em["endpoints"]; !set {
			p.errorf(m["etcd"].key.Line, "state.etcd.endpoints is missing; list the etcd cluster's client URLs (https://host:2379)")
		}
	}
	p.str(em, "state.etcd", "prefix", &et.Prefix, func(s string) string {
		if !strings.HasPrefix(s, "/") || strings.TrimRight(s, "/") == "" {
			return "must start with / and name more than the root (for example /fleet-agent/prod)"
		}
		return ""
	})
	p.str(em, "state.etcd", "name", &et.Name, func(s string) string {
		if s == "" || len(s) > 253 || strings.ContainsAny(s, "\x00\n") {
			return "must be a short name of this agent (its host name by default)"
		}
		return ""
	})
	p.duration(em, "state.etcd", "lease", &et.Lease, 2*time.Second)
	if tm := p.section(em, "state.etcd", "tls", etcdTLSKeys); tm != nil {
		t := &EtcdTLS{}
		p.str(tm, "state.etcd.tls", "ca", &t.CA, checkPath)
		p.str(tm, "state.etcd.tls", "cert", &t.Cert, checkPath)
		p.str(tm, "state.etcd.tls", "key", &t.Key, checkPath)
		if (t.Cert == "") != (t.Key == "") {
			p.errorf(em["tls"].key.Line, "state.etcd.tls needs cert and key together (a client certificate), or neither")
		}
		et.TLS = t
	}
	p.str(em, "state.etcd", "username", &et.Username, nil)
	p.secret(em, "state.etcd", "password", &et.Password)
	if (et.Username == "") != (et.Password == "") {
		p.errorf(m["etcd"].key.Line, "state.etcd needs username and password together, or neither")
	}
	p.positiveInt(em, "state.etcd", "auditKeep", &et.AuditKeep)
	c.Etcd = et
}

func checkEtcdEndpoint(s string) string {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
		return "must be an etcd client URL such as https://10.0.0.1:2379"
	}
	if u.User != nil {
		return "must not hold credentials; use state.etcd.username and state.etcd.password"
	}
	return ""
}
