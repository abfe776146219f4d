package livecheck

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/providers"
)

// CheckSubstrate checks a pool's substrate against its account's provider:
// the account's credentials, the cluster's location (or the adopted
// cluster and who else claims it) and each flavor.
func (c *Checker) CheckSubstrate(ctx context.Context, pool string, sub *fleet.Substrate, acc plan.Account) (plan.Verdict, error) {
	c.remember(acc)
	c.mu.Lock()
	c.poolAccounts[pool] = acc.Name
	c.mu.Unlock()
	ad := c.opts.Adapters[acc.Provider]
	if ad == nil || sub == nil {
		return plan.Verdict{Offline: true}, nil
	}
	if o := c.verify(ctx, ad, acc); o.err != nil {
		return plan.Verdict{}, o.err
	} else if o.blocked != "" {
		return plan.Verdict{Blocked: []string{fmt.Sprintf("provider account %q: %s", acc.Name, o.blocked)}}, nil
	}
	raw, _ := json.Marshal(sub)
	key := pool + "\x00" + accountKey(acc) + "\x00" + string(raw)
	c.mu.Lock()
	r, ok := c.substrates[key]
	c.mu.Unlock()
	if ok {
		return cloneVerdict(r.v), r.err
	}
	s := &substrateCheck{c: c, ad: ad, acc: acc, pool: pool, sub: sub}
	if err := s.run(ctx); err != nil {
		r.err = err
	} else {
		for i := range s.v.Blocked {
			s.v.Blocked[i] = c.redact(s.v.Blocked[i])
		}
		for i := range s.v.Notes {
			s.v.Notes[i] = c.redact(s.v.Notes[i])
		}
		r.v = s.v
	}
	c.mu.Lock()
	c.substrates[key] = r
	c.mu.Unlock()
	return cloneVerdict(r.v), r.err
}

type substrateResult struct {
	v   plan.Verdict
	err error
}

func cloneVerdict(v plan.Verdict) plan.Verdict {
	return plan.Verdict{Offline: v.Offline, Blocked: slices.Clone(v.Blocked), Notes: slices.Clone(v.Notes),
		ClusterVersion: v.ClusterVersion, DefaultVersion: v.DefaultVersion}
}

// substrateCheck is the check of one substrate.
type substrateCheck struct {
	c    *Checker
	ad   Adapter
	acc  plan.Account
	pool string
	sub  *fleet.Substrate
	v    plan.Verdict

	rules providers.Rules
	locs  []providers.Location
	// region is the cluster's region, location its own location; "" when
	// not known (the reason is already given).
	region, location string
}

func (s *substrateCheck) block(format string, args ...any) {
	s.v.Blocked = append(s.v.Blocked, fmt.Sprintf(format, args...))
}

func (s *substrateCheck) note(format string, args ...any) {
	s.v.Notes = append(s.v.Notes, fmt.Sprintf(format, args...))
}

// failed sorts a provider error: transient ones end the check with an error
// (UNAVAILABLE); the others block with what the provider said.
func (s *substrateCheck) failed(err error, format string, args ...any) error {
	if transient(err) {
		return s.c.unreachable(s.acc, err)
	}
	s.block("%s: %v", fmt.Sprintf(format, args...), err)
	return nil
}

func (s *substrateCheck) run(ctx context.Context) error {
	pacc := toProviders(s.acc)
	if err := s.c.call(ctx, s.acc, "Rules", func(ctx context.Context) (err error) {
		s.rules, err = s.ad.Rules(ctx, pacc)
		return err
	}); err != nil {
		return s.failed(err, "the rules of account %q cannot be read", s.acc.Name)
	}
	if err := s.c.call(ctx, s.acc, "Locations", func(ctx context.Context) (err error) {
		s.locs, err = s.ad.Locations(ctx, pacc)
		return err
	}); err != nil {
		return s.failed(err, "the locations of account %q cannot be read", s.acc.Name)
	}
	switch cl := s.sub.Cluster; {
	case cl.Create != nil:
		s.created(cl.Create.Location)
		if err := s.version(ctx, cl.Create.Version); err != nil {
			return err
		}
	case cl.Adopt != "":
		if err := s.adopted(ctx, cl.Adopt); err != nil {
			return err
		}
	}
	for i := range s.sub.Flavors {
		if err := s.flavor(ctx, &s.sub.Flavors[i]); err != nil {
			return err
		}
	}
	return nil
}

func (s *substrateCheck) find(name string) (providers.Location, bool) {
	for _, l := range s.locs {
		if l.Name == name {
			return l, true
		}
	}
	return providers.Location{}, false
}

func (s *substrateCheck) regions() string {
	var names []string
	for _, l := range s.locs {
		if l.Kind == providers.Region {
			names = append(names, l.Name)
		}
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

func regionOf(l providers.Location) string {
	if l.Kind == providers.Zone {
		return l.Region
	}
	return l.Name
}

// created checks the location of a cluster to create.
func (s *substrateCheck) created(location string) {
	loc, ok := s.find(location)
	if !ok {
		s.block("cluster location %q does not exist at account %q (its regions: %s)", location, s.acc.Name, s.regions())
		return
	}
	if !s.rules.AllowsClusterIn(loc.Kind) {
		if loc.Kind == providers.Zone {
			s.block("cluster location %q is a zone; %s clusters go in a region only: use %q", location, s.acc.Provider, loc.Region)
		} else {
			s.block("cluster location %q is a region; %s clusters go in a zone only: use one of %s", location, s.acc.Provider, strings.Join(loc.Zones, ", "))
		}
		return
	}
	s.region, s.location = regionOf(loc), location
}

// version checks a created cluster's version against the minors the
// account offers at its location. A version the cluster already runs is
// not asked for again, so a minor the provider stopped offering for new
// clusters only gets a note: the pool's other changes still go through.
// Left out, the plan is told the provider's default.
func (s *substrateCheck) version(ctx context.Context, want string) error {
	if s.location == "" {
		return nil // the cluster's location is wrong or unknown: said already
	}
	var vs providers.KubernetesVersions
	if err := s.c.call(ctx, s.acc, "Versions", func(ctx context.Context) (err error) {
		vs, err = s.ad.Versions(ctx, toProviders(s.acc), s.location)
		return err
	}); err != nil {
		return s.failed(err, "the Kubernetes versions of account %q in %s cannot be read", s.acc.Name, s.location)
	}
	offered := strings.Join(vs.Offered, ", ")
	if want == "" {
		s.v.DefaultVersion = vs.Default
		return nil
	}
	if slices.Contains(vs.Offered, want) {
		return nil
	}
	if m, ok := fleet.MinorOf(s.c.runningVersion(s.pool)); ok && m.String() == want {
		s.note("version %s is no longer offered for clusters in %s at account %s (it offers: %s): upgrade before its end of support", want, s.location, s.acc.Name, offered)
		return nil
	}
	s.block("version %s is not offered for clusters in %s at account %s; it offers: %s", want, s.location, s.acc.Name, offered)
	return nil
}

// runningVersion is the version the pool's cluster last ran, as the fleet
// records it; "" when not known.
func (c *Checker) runningVersion(pool string) string {
	c.mu.Lock()
	snap := c.snap
	c.mu.Unlock()
	if snap == nil {
		return ""
	}
	o, ok := snap.ByName(inventory.Pool, pool)
	if !ok || o.Archived {
		return ""
	}
	return snap.ClusterVersion(o.ID)
}

// readAdoptable reads an adoptable cluster once per plan.
func (c *Checker) readAdoptable(ctx context.Context, ad Adapter, acc plan.Account, id string) (providers.Cluster, error) {
	key := accountKey(acc) + "\x00" + id
	c.mu.Lock()
	r, ok := c.adopted[key]
	c.mu.Unlock()
	if ok {
		return r.cluster, r.err
	}
	r.err = c.call(ctx, acc, "ReadAdoptable", func(ctx context.Context) (err error) {
		r.cluster, err = ad.ReadAdoptable(ctx, toProviders(acc), id)
		return err
	})
	c.mu.Lock()
	c.adopted[key] = r
	c.mu.Unlock()
	return r.cluster, r.err
}

// adopted checks that a cluster to adopt exists and that no other pool
// claims it.
func (s *substrateCheck) adopted(ctx context.Context, id string) error {
	cl, err := s.c.readAdoptable(ctx, s.ad, s.acc, id)
	switch {
	case errors.Is(err, providers.ErrNotFound):
		s.block("cluster %s not found at account %s; check cluster.adopt and that the account can reach the cluster", id, s.acc.Name)
		return nil
	case err != nil:
		return s.failed(err, "cluster %s cannot be read at account %s", id, s.acc.Name)
	}
	if cl.Status == providers.ClusterDeleting {
		s.block("cluster %s is being deleted at the provider", id)
	}
	s.v.ClusterVersion = cl.Outputs.Version
	location := cl.Outputs.Location
	if location == "" {
		location = cl.Ref.Location
	}
	if loc, ok := s.find(location); ok {
		s.region, s.location = regionOf(loc), location
	} else if location != "" {
		s.note("cluster %s is in %s, which account %q does not list; its flavors' machine types were not checked", id, location, s.acc.Name)
	}
	g := cl.Outputs.GlobalID
	if g == "" {
		s.note("the provider gives no global id for cluster %s: other accounts that reach it are not compared", id)
		return nil
	}
	if s.storedClaim(ctx, id, g) {
		return nil
	}
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	other, taken := c.claims[g]
	switch {
	case !taken || other.pool == s.pool:
		c.claims[g] = claim{pool: s.pool, account: s.acc.Name, adopt: id}
	case other.account == s.acc.Name && other.adopt == id:
		// The plan blocks the same account and id by itself.
	default:
		s.block("cluster %s is the cluster pool %q claims through account %q (%s); one cluster backs one pool", id, other.pool, other.account, g)
	}
	return nil
}

// storedClaim reports (and blocks) whether a pool of the fleet, other than
// this one, adopted the same cluster through another account. The fleet
// keeps no global id, so it is read with that pool's account when its
// provider has an adapter; what cannot be read is said in a note.
func (s *substrateCheck) storedClaim(ctx context.Context, id, g string) bool {
	s.c.mu.Lock()
	snap := s.c.snap
	s.c.mu.Unlock()
	if snap == nil {
		return false
	}
	for _, o := range snap.Objects(inventory.Pool) {
		if o.Archived || o.Name == s.pool {
			continue
		}
		pol, _ := o.Spec["policy"].(map[string]any)
		sub, _ := pol["substrate"].(map[string]any)
		cl, _ := sub["cluster"].(map[string]any)
		adopt, _ := cl["adopt"].(string)
		accName, _ := sub["account"].(string)
		if adopt == "" || (accName == s.acc.Name && adopt == id) {
			continue // nothing adopted, or the plan compares it by itself
		}
		acc, ok := s.c.accountNamed(accName)
		if !ok || acc.Provider != s.acc.Provider {
			continue // another provider's cluster is another cluster
		}
		other, err := s.c.readAdoptable(ctx, s.ad, acc, adopt)
		switch {
		case errors.Is(err, providers.ErrNotFound):
		case err != nil:
			s.note("pool %q of the fleet adopted cluster %s through account %q, which could not be read (%v): whether it is this cluster was not checked", o.Name, adopt, accName, err)
		case other.Outputs.GlobalID == g:
			s.block("cluster %s is the cluster pool %q of the fleet adopted through account %q (%s); one cluster backs one pool", id, o.Name, accName, g)
			return true
		}
	}
	return false
}

// accountNamed finds an account seen in this plan, else in the fleet.
func (c *Checker) accountNamed(name string) (plan.Account, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if a, ok := c.accounts[name]; ok {
		return a, true
	}
	if c.snap == nil {
		return plan.Account{}, false
	}
	o, ok := c.snap.ByName(inventory.ProviderAccount, name)
	if !ok {
		return plan.Account{}, false
	}
	p, _ := o.Spec["provider"].(string)
	cfg, _ := json.Marshal(o.Spec["config"])
	return plan.Account{Name: name, Provider: p, Config: cfg}, true
}

func gpus(a *providers.Accelerators) string {
	if a == nil {
		return "no GPUs"
	}
	return fmt.Sprintf("%d x %s", a.Count, a.Type)
}

// flavor checks one flavor against the provider's rules and catalogue.
func (s *substrateCheck) flavor(ctx context.Context, f *fleet.SubstrateFlavor) error {
	r := s.rules
	if f.Nodes != nil && *f.Nodes == 0 && f.Autoscaling == nil && !r.ZeroNodes {
		s.block("flavor %q: nodes: 0 needs autoscaling { minNodes: 0, ... } at %s: a fixed-size node pool has at least one node", f.Name, s.acc.Provider)
	}
	if f.Spot && !r.Spot {
		s.block("flavor %q: spot node pools are not available to account %q (%s)", f.Name, s.acc.Name, s.acc.Provider)
	}
	if f.DiskGiB != nil && !r.DiskSize {
		s.block("flavor %q: %s node pools take their machine type's disk; remove diskGiB", f.Name, s.acc.Provider)
	}
	if s.location == "" {
		return nil // the cluster's location is wrong or unknown: said already
	}
	at := []string{s.location}
	if len(f.Zones) > 0 {
		if !r.NodePoolZones {
			s.block("flavor %q: %s node pools have no zones; remove zones", f.Name, s.acc.Provider)
		} else {
			at = at[:0]
			for _, z := range f.Zones {
				if loc, ok := s.find(z); !ok || loc.Kind != providers.Zone || loc.Region != s.region {
					s.block("flavor %q: %q is not a zone of %s (its zones: %s)", f.Name, z, s.region, strings.Join(s.zonesOf(s.region), ", "))
					continue
				}
				at = append(at, z)
			}
		}
	}
	attached := false
	for _, loc := range at {
		var mt providers.MachineType
		err := s.c.call(ctx, s.acc, "MachineType", func(ctx context.Context) (err error) {
			mt, err = s.ad.MachineType(ctx, toProviders(s.acc), loc, f.MachineType)
			return err
		})
		switch {
		case errors.Is(err, providers.ErrNotFound):
			offered := ""
			if pe := (*providers.Error)(nil); errors.As(err, &pe) && len(pe.Offered) > 0 {
				offered = "; it offers there: " + strings.Join(pe.Offered, ", ")
			}
			s.block("flavor %q: machine type %s does not exist in %s at account %s%s", f.Name, f.MachineType, loc, s.acc.Name, offered)
			return nil
		case err != nil:
			return s.failed(err, "flavor %q: machine type %s cannot be read in %s", f.Name, f.MachineType, loc)
		}
		if loc == at[0] {
			attached = f.GPUs != nil && mt.Accelerators == nil && len(mt.Attachable) > 0
		}
		if attached {
			// GPUs attached to a machine type are offered per zone.
			s.attached(f, mt, loc)
			continue
		}
		if loc != at[0] {
			continue // the accelerators were compared at the first location
		}
		switch want := f.GPUs; {
		case want == nil && mt.Accelerators != nil:
			s.note("flavor %q: machine type %s has %s; set gpus for them to be booked", f.Name, f.MachineType, gpus(mt.Accelerators))
		case want != nil && (mt.Accelerators == nil || mt.Accelerators.Type != want.Type || int64(mt.Accelerators.Count) != want.Count):
			s.block("flavor %q: machine type %s has %s, not %d x %s", f.Name, f.MachineType, gpus(mt.Accelerators), want.Count, want.Type)
		}
	}
	return nil
}

// attached checks a flavor's GPUs against those its machine type can be
// given at a location.
func (s *substrateCheck) attached(f *fleet.SubstrateFlavor, mt providers.MachineType, loc string) {
	want := f.GPUs
	i := slices.IndexFunc(mt.Attachable, func(a providers.Accelerators) bool { return a.Type == want.Type })
	if i < 0 {
		var offered []string
		for _, a := range mt.Attachable {
			offered = append(offered, a.Type)
		}
		s.block("flavor %q: machine type %s takes %s attached in %s, not %s", f.Name, f.MachineType, cmp.Or(strings.Join(offered, ", "), "no GPUs"), loc, want.Type)
		return
	}
	if most := mt.Attachable[i].Count; want.Count > int64(most) {
		s.block("flavor %q: machine type %s takes at most %d x %s in %s, not %d", f.Name, f.MachineType, most, want.Type, loc, want.Count)
	}
}

func (s *substrateCheck) zonesOf(region string) []string {
	var zs []string
	for _, l := range s.locs {
		if l.Kind == providers.Zone && l.Region == region {
			zs = append(zs, l.Name)
		}
	}
	slices.Sort(zs)
	return zs
}
