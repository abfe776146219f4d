package digitalocean

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/digitalocean/godo"

	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/secrets"
)

// accountConfig is the `config` of a digitalocean provider account, as the
// reference's DOKS example writes it:
//
//	{ "token": "secret://<tenant>/<id>", "regions": ["tor1"], "allowSpot": true, "previews": true }
//
// token is a secret reference, never the value. regions, when set, are the
// only regions the account offers. Spot node pools are a DigitalOcean
// preview: they need both allowSpot and previews.
type accountConfig struct {
	Token     string   `json:"token"`
	Regions   []string `json:"regions,omitempty"`
	AllowSpot bool     `json:"allowSpot,omitempty"`
	Previews  bool     `json:"previews,omitempty"`
}

func decodeAccount(op string, acct providers.Account) (accountConfig, error) {
	if acct.Provider != "" && acct.Provider != providers.DigitalOcean {
		return accountConfig{}, providers.Invalidf(op, "wrongProvider", "provider account %q is for %q, not digitalocean", acct.Name, acct.Provider)
	}
	var cfg accountConfig
	if err := providers.DecodeAccountConfig(acct, &cfg); err != nil {
		e := *err.(*providers.Error)
		e.Op = op
		return accountConfig{}, &e
	}
	switch {
	case cfg.Token == "":
		return cfg, providers.Invalidf(op, "accountConfig", "provider account %q: config.token is needed: a secret reference (secret://, vault://, env://) to a DigitalOcean API token", acct.Name)
	case !secrets.LooksLikeRef(cfg.Token):
		// Never repeat the value: it may be the token itself.
		return cfg, providers.Invalidf(op, "secretValue", "provider account %q: config.token must be a secret reference (secret://, vault://, env://), never the token itself; store the token and write its reference", acct.Name)
	}
	return cfg, nil
}

// Verify checks the token with DigitalOcean's account endpoint.
func (a *Adapter) Verify(ctx context.Context, acct providers.Account) error {
	s, err := a.open(ctx, "Verify", acct)
	if err != nil {
		return err
	}
	var root struct {
		Account *godo.Account `json:"account"`
	}
	if err := a.call(ctx, s, http.MethodGet, "v2/account", nil, &root); err != nil {
		return err
	}
	if root.Account != nil && root.Account.Status == "locked" {
		return &providers.Error{Op: s.op, Class: providers.Terminal, SideEffect: providers.None, Reason: "accountLocked",
			Message: fmt.Sprintf("provider account %q: DigitalOcean reports the account locked (%s); settle it with DigitalOcean", acct.Name, root.Account.StatusMessage)}
	}
	return nil
}

// Locations lists the regions DOKS offers the account (those of
// config.regions when it is set), sorted. DOKS has no zones.
func (a *Adapter) Locations(ctx context.Context, acct providers.Account) ([]providers.Location, error) {
	s, err := a.open(ctx, "Locations", acct)
	if err != nil {
		return nil, err
	}
	var root struct {
		Options *godo.KubernetesOptions `json:"options"`
	}
	if err := a.call(ctx, s, http.MethodGet, "v2/kubernetes/options", nil, &root); err != nil {
		return nil, err
	}
	var out []providers.Location
	if root.Options != nil {
		for _, r := range root.Options.Regions {
			if len(s.cfg.Regions) == 0 || slices.Contains(s.cfg.Regions, r.Slug) {
				out = append(out, providers.Location{Name: r.Slug, Kind: providers.Region})
			}
		}
	}
	slices.SortFunc(out, func(x, y providers.Location) int { return strings.Compare(x.Name, y.Name) })
	return out, nil
}

// Versions lists the Kubernetes versions DOKS offers (its options), as
// minors; a cluster created without one gets "latest", the newest. DOKS
// offers the same versions in every region it lists.
func (a *Adapter) Versions(ctx context.Context, acct providers.Account, location string) (providers.KubernetesVersions, error) {
	s, err := a.open(ctx, "Versions", acct)
	if err != nil {
		return providers.KubernetesVersions{}, err
	}
	var root struct {
		Options *godo.KubernetesOptions `json:"options"`
	}
	if err := a.call(ctx, s, http.MethodGet, "v2/kubernetes/options", nil, &root); err != nil {
		return providers.KubernetesVersions{}, err
	}
	if root.Options == nil {
		return providers.KubernetesVersions{}, providers.NotFoundf("Versions", "DigitalOcean lists no Kubernetes options for account %q", acct.Name)
	}
	if !slices.ContainsFunc(root.Options.Regions, func(r *godo.KubernetesRegion) bool { return r.Slug == location }) {
		return providers.KubernetesVersions{}, providers.NotFoundf("Versions", "region %s does not offer Kubernetes at account %q", location, acct.Name)
	}
	var all []string
	for _, v := range root.Options.Versions {
		all = append(all, v.Slug)
	}
	out := providers.KubernetesVersions{Offered: providers.Minors(all)}
	if n := len(out.Offered); n > 0 {
		out.Default = out.Offered[n-1]
	}
	return out, nil
}

// Rules are DOKS's (reference "Provider differences"): clusters in a
// region, no zones or disk per node pool, nodes as the total, no fixed pool
// of 0 nodes, and Spot only where the account opted into the preview.
func (a *Adapter) Rules(_ context.Context, acct providers.Account) (providers.Rules, error) {
	cfg, err := decodeAccount("Rules", acct)
	if err != nil {
		return providers.Rules{}, err
	}
	return rules(cfg), nil
}

func rules(cfg accountConfig) providers.Rules {
	return providers.Rules{
		ClusterLocations: []providers.LocationKind{providers.Region},
		Spot:             cfg.AllowSpot && cfg.Previews,
	}
}

// catalog is the sizes list of an account, kept for CatalogTTL: every read
// of a node pool needs its size's GPUs, which only the list has.
type catalog struct {
	at    time.Time
	sizes map[string]godo.Size
}

// catalogKey names an account's catalogue by what the document says of it
// (its name and config, which holds references only), never by a secret.
func catalogKey(acct providers.Account) string {
	h := sha256.Sum256(append([]byte(acct.Name+"\x00"), acct.Config...))
	return hex.EncodeToString(h[:])
}

// sizes returns the account's sizes, from the cache while it is fresh, else
// walking every page of /v2/sizes.
func (a *Adapter) sizes(ctx context.Context, s *session) (map[string]godo.Size, error) {
	key := catalogKey(s.acct)
	now := a.clock.Now()
	a.mu.Lock()
	c := a.catalog[key]
	a.mu.Unlock()
	if c != nil && a.cfg.CatalogTTL > 0 && now.Sub(c.at) < a.cfg.CatalogTTL {
		return c.sizes, nil
	}
	all := map[string]godo.Size{}
	for page := 1; ; page++ {
		var root struct {
			Sizes []godo.Size `json:"sizes"`
			Links *godo.Links `json:"links"`
		}
		if err := a.call(ctx, s, http.MethodGet, fmt.Sprintf("v2/sizes?page=%d&per_page=200", page), nil, &root); err != nil {
			return nil, err
		}
		for _, z := range root.Sizes {
			all[z.Slug] = z
		}
		if len(root.Sizes) == 0 || root.Links == nil || root.Links.IsLastPage() || page >= maxPages {
			break
		}
	}
	a.mu.Lock()
	a.catalog[key] = &catalog{at: now, sizes: all}
	a.mu.Unlock()
	return all, nil
}

// maxPages bounds a walk over a listing, against a service that would never
// say it is on the last page.
const maxPages = 1000

// accelerators are a size's GPUs in this project's vocabulary: the
// gpu_info model `nvidia_h100` is `nvidia-h100`.
func accelerators(z godo.Size) *providers.Accelerators {
	if z.GPUInfo == nil || z.GPUInfo.Count == 0 {
		return nil
	}
	t := strings.ToLower(strings.ReplaceAll(z.GPUInfo.Model, "_", "-"))
	return &providers.Accelerators{Type: t, Count: z.GPUInfo.Count}
}

// MachineType describes a size in a region: its CPUs, memory and GPUs, or
// ErrNotFound when DigitalOcean does not offer it there for new droplets.
func (a *Adapter) MachineType(ctx context.Context, acct providers.Account, location, name string) (providers.MachineType, error) {
	s, err := a.open(ctx, "MachineType", acct)
	if err != nil {
		return providers.MachineType{}, err
	}
	if len(s.cfg.Regions) > 0 && !slices.Contains(s.cfg.Regions, location) {
		return providers.MachineType{}, providers.NotFoundf(s.op, "region %s is not one of account %q's regions (%s)", location, acct.Name, strings.Join(s.cfg.Regions, ", "))
	}
	all, err := a.sizes(ctx, s)
	if err != nil {
		return providers.MachineType{}, err
	}
	z, ok := all[name]
	switch {
	case !ok:
		return providers.MachineType{}, providers.NotFoundf(s.op, "DigitalOcean has no size %s", name)
	case !z.Available || !slices.Contains(z.Regions, location):
		return providers.MachineType{}, providers.NotFoundf(s.op, "size %s is not offered in %s for new droplets", name, location)
	}
	return providers.MachineType{Name: name, Location: location, VCPU: z.Vcpus, MemoryGiB: z.Memory / 1024, Accelerators: accelerators(z)}, nil
}
