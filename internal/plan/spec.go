package plan

import (
	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
)

// The specs below turn document items into the stored shape: the fields of
// the document, references to sites, pools and provider accounts as ids,
// values normalised. Built by hand, not through JSON, because a plan of
// thousands of objects must cost about as much as decoding them.

func accountSpec(a *fleet.ProviderAccount) map[string]any {
	return map[string]any{"name": a.Name, "provider": a.Provider, "config": normalizeMap(a.Config)}
}

func siteSpec(s *fleet.Site) map[string]any {
	m := map[string]any{"name": s.Name, "kind": s.Kind, "region": s.Region}
	if s.IAMRegion != "" {
		m["iamRegion"] = s.IAMRegion
	}
	return m
}

func poolSpec(p *fleet.Pool, siteID, accountID string) map[string]any {
	m := map[string]any{"name": p.Name, "site": siteID, "class": p.Class, "policy": policyValue(p.Policy)}
	setString(m, "gpuModel", p.GPUModel)
	setString(m, "sharing", p.Sharing)
	setString(m, "agent", p.Agent)
	setString(m, "providerAccount", accountID)
	return m
}

// policyValue is the policy in normalised JSON, its substrate included.
func policyValue(policy map[string]any) map[string]any {
	out := make(map[string]any, len(policy))
	for k, v := range policy {
		if s, ok := v.(*fleet.Substrate); ok {
			out[k] = substrateValue(s)
			continue
		}
		out[k] = inventory.Normalize(v)
	}
	return out
}

func substrateValue(s *fleet.Substrate) map[string]any {
	cluster := map[string]any{}
	if s.Cluster.Create != nil {
		c := map[string]any{"location": s.Cluster.Create.Location}
		if s.Cluster.Create.PrivateNodes {
			c["privateNodes"] = true
		}
		if s.Cluster.Create.Version != "" {
			c["version"] = s.Cluster.Create.Version
		}
		cluster["create"] = c
	}
	if s.Cluster.Adopt != "" {
		cluster["adopt"] = s.Cluster.Adopt
	}
	flavors := make([]any, len(s.Flavors))
	for i, f := range s.Flavors {
		m := map[string]any{"name": f.Name, "machineType": f.MachineType}
		if f.Nodes != nil {
			m["nodes"] = *f.Nodes
		}
		if f.GPUs != nil {
			m["gpus"] = map[string]any{"type": f.GPUs.Type, "count": f.GPUs.Count}
		}
		if len(f.Zones) > 0 {
			z := make([]any, len(f.Zones))
			for j, s := range f.Zones {
				z[j] = s
			}
			m["zones"] = z
		}
		if f.DiskGiB != nil {
			m["diskGiB"] = *f.DiskGiB
		}
		if f.Spot {
			m["spot"] = true
		}
		if f.Autoscaling != nil {
			m["autoscaling"] = map[string]any{"minNodes": f.Autoscaling.MinNodes, "maxNodes": f.Autoscaling.MaxNodes}
		}
		flavors[i] = m
	}
	m := map[string]any{"kind": s.Kind, "account": s.Account, "cluster": cluster, "flavors": flavors}
	// Only when set: false is the default, and a substrate stored before
	// the field existed compares equal to one that leaves it out.
	if s.Protect {
		m["protect"] = true
	}
	if s.Maintenance != nil {
		windows := make([]any, len(s.Maintenance.Windows))
		for i, w := range s.Maintenance.Windows {
			days := make([]any, len(w.Days))
			for j, d := range w.Days {
				days[j] = d
			}
			wm := map[string]any{"days": days, "start": w.Start, "duration": w.Duration}
			if w.TimeZone != "" {
				wm["timeZone"] = w.TimeZone
			}
			windows[i] = wm
		}
		m["maintenance"] = map[string]any{"windows": windows}
	}
	return m
}

func quotaSpec(poolID, resource string, max int64) map[string]any {
	return map[string]any{"pool": poolID, "resource": resource, "max": max}
}

func offerSpec(poolID string, o *fleet.Offer) map[string]any {
	return map[string]any{"pool": poolID, "tenant": o.Tenant, "quota": quotaValue(o.Quota),
		"includeDescendants": o.IncludeDescendants, "priority": o.Priority}
}

func quotaValue(q map[string]int64) map[string]any {
	m := make(map[string]any, len(q))
	for k, v := range q {
		m[k] = v
	}
	return m
}

func flavorSpec(poolID string, f *fleet.Flavor) map[string]any {
	m := map[string]any{"pool": poolID, "name": f.Name, "vcpu": f.VCPU, "memoryGiB": f.MemoryGiB, "diskGiB": f.DiskGiB, "gpus": f.GPUs}
	setString(m, "offerId", f.OfferID)
	if f.Placement != nil {
		p := map[string]any{}
		if f.Placement.NUMAAffine {
			p["numaAffine"] = true
		}
		if f.Placement.Pinned {
			p["pinned"] = true
		}
		if f.Placement.Hugepages != "" {
			p["hugepages"] = f.Placement.Hugepages
		}
		m["placement"] = p
	}
	return m
}

// templateSpec holds what the document lists (and network, whose default
// is filled); a field left out has no default and is absent, so a stored
// value of it differs.
func templateSpec(poolID string, t *fleet.SandboxTemplate) map[string]any {
	m := map[string]any{"name": t.Name, "pool": poolID, "flavor": t.Flavor, "imageId": t.ImageID, "network": t.Network}
	if t.Runtime != nil {
		m["runtime"] = *t.Runtime
	}
	if t.UserData != nil {
		m["userData"] = *t.UserData
	}
	if t.DefaultTTLSeconds != nil {
		m["defaultTtlSeconds"] = *t.DefaultTTLSeconds
	}
	if t.MaxTTLSeconds != nil {
		m["maxTtlSeconds"] = *t.MaxTTLSeconds
	}
	if t.Warm != nil {
		w := map[string]any{"min": t.Warm.Min}
		if t.Warm.Max != nil {
			w["max"] = *t.Warm.Max
		}
		m["warm"] = w
	}
	if t.Env != nil {
		e := make(map[string]any, len(t.Env))
		for k, v := range t.Env {
			e[k] = v
		}
		m["env"] = e
	}
	if t.Volumes != nil {
		vols := make([]any, len(t.Volumes))
		for i, v := range t.Volumes {
			vm := map[string]any{"volume": v.Volume, "mountPath": v.MountPath}
			if v.ReadOnly {
				vm["readOnly"] = true
			}
			vols[i] = vm
		}
		m["volumes"] = vols
	}
	return m
}

func setString(m map[string]any, k, v string) {
	if v != "" {
		m[k] = v
	}
}

func normalizeMap(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return inventory.Normalize(m).(map[string]any)
}

// equal compares normalised values without encoding them.
func equal(a, b any) bool {
	switch x := a.(type) {
	case nil:
		return b == nil
	case string:
		y, ok := b.(string)
		return ok && x == y
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	case int64:
		switch y := b.(type) {
		case int64:
			return x == y
		case float64:
			return float64(x) == y
		}
		return false
	case float64:
		switch y := b.(type) {
		case float64:
			return x == y
		case int64:
			return x == float64(y)
		}
		return false
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !equal(v, w) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !equal(x[i], y[i]) {
				return false
			}
		}
		return true
	}
	return inventory.Equal(a, b)
}
