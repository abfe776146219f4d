package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/config"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/secrets"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

// openStore opens the store the config names: the bbolt file at
// cfg.State, or the etcd backend (docs/ha.md). The etcd password is
// resolved here and handed to the client only. observe times each etcd
// request; warn hears the failures the etcd store rode out (both may be nil).
func openStore(ctx context.Context, cfg *config.Config, resolver *secrets.Resolver, readOnly bool, observe func(time.Duration, error), warn func(error)) (*state.Store, error) {
	if cfg.StateBackend != config.BackendEtcd || cfg.Etcd == nil {
		return state.Open(cfg.State, state.Options{ReadOnly: readOnly})
	}
	opts, err := etcdOptions(ctx, cfg.Etcd, resolver)
	if err != nil {
		return nil, err
	}
	opts.ReadOnly, opts.Observe, opts.Warn = readOnly, observe, warn
	return state.OpenEtcd(ctx, opts)
}

func etcdOptions(ctx context.Context, e *config.StateEtcd, resolver *secrets.Resolver) (state.EtcdOptions, error) {
	opts := state.EtcdOptions{Endpoints: e.Endpoints, Prefix: e.Prefix, Name: e.Name, Lease: e.Lease, Username: e.Username,
		AuditKeep: int(e.AuditKeep)}
	if e.Password != "" {
		pw, err := resolver.Resolve(ctx, e.Password)
		if err != nil {
			return opts, refusal.Wrap(refusal.InvalidState, err, "cannot resolve state.etcd.password")
		}
		opts.Password = pw
	}
	if t := e.TLS; t != nil {
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if t.CA != "" {
			pem, err := os.ReadFile(t.CA)
			if err != nil {
				return opts, refusal.Wrap(refusal.InvalidState, err, "cannot read state.etcd.tls.ca")
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return opts, refusal.New(refusal.InvalidState, "state.etcd.tls.ca %s holds no PEM certificate", t.CA)
			}
			tc.RootCAs = pool
		}
		if t.Cert != "" {
			cert, err := tls.LoadX509KeyPair(t.Cert, t.Key)
			if err != nil {
				return opts, refusal.Wrap(refusal.InvalidState, err, "cannot load state.etcd.tls.cert and key")
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		opts.TLS = tc
	}
	return opts, nil
}

// openRead opens the store a read-only command reads when no agent answers
// on the socket: the etcd store of the config (state.backend: etcd, and no
// --state or FLEET_AGENT_STATE naming a file), else the state file, which
// must exist (openStateRead).
func (a *app) openRead(ctx context.Context, cfg *config.Config) (*state.Store, error) {
	if cfg.StateBackend == config.BackendEtcd && a.stateFile(cfg) == cfg.State {
		return openStore(ctx, cfg, secrets.NewResolver(secrets.Options{Env: a.lookupEnv, Dir: cfg.Secrets.Dir}), true, nil, nil)
	}
	return openStateRead(a.stateFile(cfg))
}
