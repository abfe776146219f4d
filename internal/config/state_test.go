package config

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestStateBackends(t *testing.T) {
	c := mustParse(t, "state: /var/lib/x/fleet.db\n")
	if c.State != "/var/lib/x/fleet.db" || c.StateBackend != "" || c.Etcd != nil {
		t.Fatalf("a path: %+v", c)
	}
	c = mustParse(t, "state:\n  backend: bbolt\n  path: /x.db\n")
	if c.State != "/x.db" || c.Etcd != nil {
		t.Fatalf("bbolt mapping: %+v", c)
	}
	c = mustParse(t, `tenant: acme
state:
  backend: etcd
  etcd:
    endpoints: [https://10.0.0.1:2379, https://10.0.0.2:2379]
    name: ops-1
    lease: 10s
    tls: {ca: /etc/fa/ca.pem, cert: /etc/fa/c.pem, key: /etc/fa/k.pem}
    username: fleet
    password: env://ETCD_PASSWORD
    auditKeep: 5000
`)
	want := &StateEtcd{Endpoints: []string{"https://10.0.0.1:2379", "https://10.0.0.2:2379"}, Prefix: "/fleet-agent/acme",
		Name: "ops-1", Lease: 10 * time.Second, TLS: &EtcdTLS{CA: "/etc/fa/ca.pem", Cert: "/etc/fa/c.pem", Key: "/etc/fa/k.pem"},
		Username: "fleet", Password: "env://ETCD_PASSWORD", AuditKeep: 5000}
	if c.StateBackend != BackendEtcd || !reflect.DeepEqual(c.Etcd, want) {
		t.Fatalf("etcd block:\n%+v\nwant\n%+v", c.Etcd, want)
	}
}

func TestStateBad(t *testing.T) {
	for _, tc := range []struct {
		text, want string
		line       int
	}{
		{"state:\n  backend: sqlite\n", "state.backend: must be bbolt or etcd", 2},
		{"state:\n  backend: etcd\n", "state.etcd is missing", 1},
		{"state:\n  etcd: {endpoints: ['http://127.0.0.1:2379']}\n", "state.backend is bbolt", 2},
		{"state:\n  backend: etcd\n  etcd: {prefix: /a}\n", "state.etcd.endpoints is missing", 3},
		{"state:\n  backend: etcd\n  etcd:\n    endpoints: ['10.0.0.1:2379']\n", "must be an etcd client URL", 4},
		{"state:\n  backend: etcd\n  etcd:\n    endpoints: ['https://u:p@h:2379']\n", "must not hold credentials", 4},
		{"state:\n  backend: etcd\n  etcd:\n    endpoints: ['https://h:2379']\n    prefix: fleet\n", "must start with /", 5},
		{"state:\n  backend: etcd\n  etcd:\n    endpoints: ['https://h:2379']\n    lease: 1s\n", "state.etcd.lease", 5},
		{"state:\n  backend: etcd\n  etcd:\n    endpoints: ['https://h:2379']\n    username: u\n    password: hunter2\n", "must be a secret reference", 6},
		{"state:\n  backend: etcd\n  etcd:\n    endpoints: ['https://h:2379']\n    username: u\n", "username and password together", 3},
		{"state:\n  backend: etcd\n  etcd:\n    endpoints: ['https://h:2379']\n    tls: {cert: /c.pem}\n", "cert and key together", 5},
		{"state:\n  backend: etcd\n  etcd:\n    endpoints: ['https://h:2379']\n    wat: 1\n", "wat", 5},
	} {
		ps := parseErr(t, tc.text)
		found := false
		for _, p := range ps {
			if strings.Contains(p.Message, tc.want) && p.Line == tc.line {
				found = true
			}
			if strings.Contains(p.Message, "hunter2") {
				t.Errorf("%q: a problem quotes the secret: %s", tc.text, p.Message)
			}
		}
		if !found {
			t.Errorf("%q: want %q on line %d, got %+v", tc.text, tc.want, tc.line, ps)
		}
	}
}
