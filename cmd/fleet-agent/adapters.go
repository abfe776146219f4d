package main

import (
	"errors"
	"maps"
	"slices"
	"strings"

	"github.com/fleet-agent/fleet-agent/internal/config"
	"github.com/fleet-agent/fleet-agent/internal/livecheck"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/providers/aws"
	"github.com/fleet-agent/fleet-agent/internal/providers/digitalocean"
	"github.com/fleet-agent/fleet-agent/internal/providers/fake"
	"github.com/fleet-agent/fleet-agent/internal/providers/gcp"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/secrets"
)

// This file is the one place provider adapters enter the binary: every
// adapter is registered here, and nothing else imports one.

// adapterFactories are the adapters this build links in, by provider id.
func adapterFactories() map[string]providers.Factory {
	return map[string]providers.Factory{
		providers.AWS:          aws.Factory(),
		providers.DigitalOcean: digitalocean.Factory(),
		providers.FakeID:       fake.Factory(),
		providers.GCP:          gcp.Factory(),
	}
}

// registry holds the adapters of this build.
func registry() (*providers.Registry, error) {
	reg := providers.NewRegistry()
	for _, id := range slices.Sorted(maps.Keys(adapterFactories())) {
		if err := reg.Register(id, adapterFactories()[id]); err != nil {
			return nil, refusal.Wrap(refusal.Internal, err, "cannot register the provider adapters")
		}
	}
	return reg, nil
}

// adapters opens the adapters the config has a `providers.<id>` block for
// (`fake: {}` opens the fake on its defaults); a provider without one is
// checked offline. A bad block is INVALID_INPUT with its line.
func (a *app) adapters(cfg *config.Config, resolver *secrets.Resolver) (map[string]providers.Kubernetes, error) {
	out := map[string]providers.Kubernetes{}
	if len(cfg.Providers) == 0 {
		return out, nil
	}
	reg, err := registry()
	if err != nil {
		return nil, err
	}
	for _, id := range slices.Sorted(maps.Keys(cfg.Providers)) {
		ad, err := reg.Open(id, cfg.Providers[id], resolver)
		switch {
		case errors.Is(err, providers.ErrNoAdapter):
			continue // checked offline
		case err != nil:
			var r *refusal.Error
			if !errors.As(err, &r) {
				return nil, refusal.Wrap(refusal.InvalidInput, err, "%s: providers.%s", cfg.Where("providers."+id), id)
			}
			where := cfg.File
			if !strings.Contains(r.Message, "line ") {
				// The adapter's own check names no line: point at the block.
				where = cfg.Where("providers." + id)
			}
			if where == "" {
				return nil, err
			}
			return nil, &refusal.Error{Code: r.Code, Message: where + ": " + r.Message, Err: err}
		}
		out[id] = ad
	}
	return out, nil
}

// liveSource opens the adapters once and returns what every plan draws its
// live checks from; offline (or no adapter configured) checks nothing.
func (a *app) liveSource(cfg *config.Config, offline bool) (plan.Source, error) {
	if offline || len(cfg.Providers) == 0 {
		return plan.OfflineSource{}, nil
	}
	resolver := secrets.NewResolver(secrets.Options{Env: a.lookupEnv, Dir: cfg.Secrets.Dir})
	opened, err := a.adapters(cfg, resolver)
	if err != nil {
		return nil, err
	}
	return liveChecks(opened, resolver), nil
}

// liveChecks are the live checks over adapters already opened.
func liveChecks(opened map[string]providers.Kubernetes, resolver *secrets.Resolver) plan.Source {
	if len(opened) == 0 {
		return plan.OfflineSource{}
	}
	live := map[string]livecheck.Adapter{}
	for id, ad := range opened {
		live[id] = ad
	}
	return livecheck.New(livecheck.Options{Adapters: live, Secrets: resolver, Redactor: resolver.Redactor()})
}
