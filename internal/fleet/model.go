package fleet

import (
	"encoding/json"
	"fmt"
	"math/big"
	"strconv"

	"github.com/fleet-agent/fleet-agent/internal/canon"
)

// Document is a valid fleet.json in normal form: defaults filled, false
// placement flags dropped, numbers as int64 (integers) or float64 (other
// numbers inside free-form objects). Lists keep the document's order.
type Document struct {
	Version          int               `json:"version"`
	Sites            []Site            `json:"sites,omitempty"`
	ProviderAccounts []ProviderAccount `json:"providerAccounts,omitempty"`
	Pools            []Pool            `json:"pools,omitempty"`
	Flavors          []Flavor          `json:"flavors,omitempty"`
	SandboxTemplates []SandboxTemplate `json:"sandboxTemplates,omitempty"`
}

// Site is a place that holds pools.
type Site struct {
	Name      string `json:"name"`
	Kind      string `json:"kind"`
	Region    string `json:"region"`
	IAMRegion string `json:"iamRegion,omitempty"`
}

// ProviderAccount is an account at a provider; Config is free-form and its
// secret fields hold references.
type ProviderAccount struct {
	Name     string         `json:"name"`
	Provider string         `json:"provider"`
	Config   map[string]any `json:"config"`
}

// Pool is a pool of machines with its owner quota and offers.
type Pool struct {
	Name     string `json:"name"`
	Site     string `json:"site"`
	Class    string `json:"class"`
	GPUModel string `json:"gpuModel,omitempty"`
	Sharing  string `json:"sharing,omitempty"`
	Agent    string `json:"agent,omitempty"`
	// Policy is compared as a whole. Its "substrate" entry, when present,
	// is the *Substrate below in normal form.
	Policy          map[string]any   `json:"policy"`
	OwnerQuota      map[string]int64 `json:"ownerQuota,omitzero"`
	ProviderAccount string           `json:"providerAccount,omitempty"`
	Offers          []Offer          `json:"offers,omitempty"`
}

// Substrate returns the pool's Kubernetes substrate, or nil.
func (p *Pool) Substrate() *Substrate {
	s, _ := p.Policy["substrate"].(*Substrate)
	return s
}

// Offer offers a pool to another tenant.
type Offer struct {
	Tenant             string           `json:"tenant"`
	Quota              map[string]int64 `json:"quota"`
	IncludeDescendants bool             `json:"includeDescendants"`
	Priority           int64            `json:"priority"`
}

// Flavor is a VM size sold from a pool.
type Flavor struct {
	Pool      string     `json:"pool"`
	Name      string     `json:"name"`
	VCPU      int64      `json:"vcpu"`
	MemoryGiB int64      `json:"memoryGiB"`
	DiskGiB   int64      `json:"diskGiB"`
	GPUs      int64      `json:"gpus"`
	OfferID   string     `json:"offerId,omitempty"`
	Placement *Placement `json:"placement,omitempty"`
}

// Placement says where a flavor's guests live on their host. False flags
// are dropped; an empty placement is none.
type Placement struct {
	NUMAAffine bool   `json:"numaAffine,omitempty"`
	Pinned     bool   `json:"pinned,omitempty"`
	Hugepages  string `json:"hugepages,omitempty"`
}

// SandboxTemplate is a template of sandboxes. Optional fields are pointers
// (or nil maps and lists) so that the plan compares only what the document
// lists.
type SandboxTemplate struct {
	Name              string            `json:"name"`
	Pool              string            `json:"pool"`
	Flavor            string            `json:"flavor"`
	ImageID           string            `json:"imageId"`
	Runtime           *string           `json:"runtime,omitempty"`
	UserData          *string           `json:"userData,omitempty"`
	DefaultTTLSeconds *int64            `json:"defaultTtlSeconds,omitempty"`
	MaxTTLSeconds     *int64            `json:"maxTtlSeconds,omitempty"`
	Warm              *Warm             `json:"warm,omitempty"`
	Env               map[string]string `json:"env,omitzero"`
	Network           string            `json:"network"`
	Volumes           []Volume          `json:"volumes,omitzero"`
}

// Warm sizes a template's warm instances.
type Warm struct {
	Min int64  `json:"min"`
	Max *int64 `json:"max,omitempty"`
}

// Volume is an existing sandbox volume every sandbox of a template mounts.
type Volume struct {
	Volume    string `json:"volume"`
	MountPath string `json:"mountPath"`
	ReadOnly  bool   `json:"readOnly,omitempty"`
}

// Substrate is a pool's managed Kubernetes cluster (docs/substrates.md).
type Substrate struct {
	Kind    string            `json:"kind"`
	Account string            `json:"account"`
	Cluster Cluster           `json:"cluster"`
	Flavors []SubstrateFlavor `json:"flavors"`
	// Protect, as applied, blocks every plan that would tear the substrate
	// down: removing one takes two reviewed changes (docs/substrates.md).
	Protect bool `json:"protect,omitempty"`
	// Maintenance, when set, holds the windows disruptive steps wait for
	// (internal/maintenance reads them).
	Maintenance *Maintenance `json:"maintenance,omitempty"`
}

// Maintenance is a substrate's maintenance windows.
type Maintenance struct {
	Windows []MaintenanceWindow `json:"windows"`
}

// MaintenanceWindow is one recurring window, as written.
type MaintenanceWindow struct {
	Days     []string `json:"days"`
	Start    string   `json:"start"`
	Duration string   `json:"duration"`
	TimeZone string   `json:"timeZone,omitempty"`
}

// Cluster is exactly one of Create and Adopt.
type Cluster struct {
	Create *ClusterCreate `json:"create,omitempty"`
	Adopt  string         `json:"adopt,omitempty"`
}

// ClusterCreate asks for a new cluster at a location.
type ClusterCreate struct {
	Location     string `json:"location"`
	PrivateNodes bool   `json:"privateNodes,omitempty"`
	// Version is the Kubernetes minor ("1.34") the cluster runs; "" leaves
	// the choice to the provider at create, and export then writes the
	// minor it chose, so the document pins it from then on.
	Version string `json:"version,omitempty"`
}

// SubstrateFlavor is one node pool shape of a substrate.
type SubstrateFlavor struct {
	Name        string       `json:"name"`
	MachineType string       `json:"machineType"`
	Nodes       *int64       `json:"nodes,omitempty"`
	GPUs        *GPUs        `json:"gpus,omitempty"`
	Zones       []string     `json:"zones,omitempty"`
	DiskGiB     *int64       `json:"diskGiB,omitempty"`
	Spot        bool         `json:"spot,omitempty"`
	Autoscaling *Autoscaling `json:"autoscaling,omitempty"`
}

// GPUs are a node's accelerators.
type GPUs struct {
	Type  string `json:"type"`
	Count int64  `json:"count"`
}

// Autoscaling bounds a node pool's size.
type Autoscaling struct {
	MinNodes int64 `json:"minNodes"`
	MaxNodes int64 `json:"maxNodes"`
}

// Canonical returns the document's canonical bytes (sorted keys, no white
// space): what is hashed, compared and recorded as the applied document.
func (d *Document) Canonical() []byte { return canon.MustMarshal(d) }

// integer returns the value of an integral JSON number literal. Literals
// reach here at most 64 characters long with a bounded exponent (the parser
// refuses others), so the big-number work is small.
func integer(lit string) (int64, bool) {
	if i, err := strconv.ParseInt(lit, 10, 64); err == nil {
		return i, true
	}
	r, ok := new(big.Rat).SetString(lit)
	if !ok || !r.IsInt() || !r.Num().IsInt64() {
		return 0, false
	}
	return r.Num().Int64(), true
}

// decodeDocument builds the normal form from a tree that passed both
// validation stages. Errors here are bugs, reported as such.
func decodeDocument(tree any) (doc *Document, err error) {
	defer func() {
		if r := recover(); r != nil {
			doc, err = nil, fmt.Errorf("normal form: %v", r)
		}
	}()
	root := tree.(map[string]any)
	d := &Document{Version: 1}
	for _, it := range arr(root["sites"]) {
		m := obj(it)
		d.Sites = append(d.Sites, Site{Name: s(m["name"]), Kind: s(m["kind"]), Region: s(m["region"]), IAMRegion: s(m["iamRegion"])})
	}
	for _, it := range arr(root["providerAccounts"]) {
		m := obj(it)
		cfg := map[string]any{}
		if c, ok := m["config"].(map[string]any); ok {
			cfg = normalizeValue(c).(map[string]any)
		}
		d.ProviderAccounts = append(d.ProviderAccounts, ProviderAccount{Name: s(m["name"]), Provider: s(m["provider"]), Config: cfg})
	}
	for _, it := range arr(root["pools"]) {
		m := obj(it)
		p := Pool{Name: s(m["name"]), Site: s(m["site"]), Class: s(m["class"]), GPUModel: s(m["gpuModel"]),
			Sharing: s(m["sharing"]), Agent: s(m["agent"]), ProviderAccount: s(m["providerAccount"]), Policy: map[string]any{}}
		if pol, ok := m["policy"].(map[string]any); ok {
			for k, v := range pol {
				if k == "substrate" {
					p.Policy[k] = decodeSubstrate(obj(v))
					continue
				}
				p.Policy[k] = normalizeValue(v)
			}
		}
		if q, ok := m["ownerQuota"].(map[string]any); ok {
			p.OwnerQuota = quota(q)
		}
		for _, o := range arr(m["offers"]) {
			om := obj(o)
			off := Offer{Tenant: s(om["tenant"]), Quota: map[string]int64{}}
			if q, ok := om["quota"].(map[string]any); ok {
				off.Quota = quota(q)
			}
			off.IncludeDescendants, _ = om["includeDescendants"].(bool)
			if v, ok := om["priority"]; ok {
				off.Priority = i64(v)
			}
			p.Offers = append(p.Offers, off)
		}
		d.Pools = append(d.Pools, p)
	}
	for _, it := range arr(root["flavors"]) {
		m := obj(it)
		f := Flavor{Pool: s(m["pool"]), Name: s(m["name"]), VCPU: i64(m["vcpu"]), MemoryGiB: i64(m["memoryGiB"]),
			DiskGiB: i64(m["diskGiB"]), OfferID: s(m["offerId"])}
		if v, ok := m["gpus"]; ok {
			f.GPUs = i64(v)
		}
		if pl, ok := m["placement"].(map[string]any); ok {
			p := Placement{Hugepages: s(pl["hugepages"])}
			p.NUMAAffine, _ = pl["numaAffine"].(bool)
			p.Pinned, _ = pl["pinned"].(bool)
			if p != (Placement{}) {
				f.Placement = &p
			}
		}
		d.Flavors = append(d.Flavors, f)
	}
	for _, it := range arr(root["sandboxTemplates"]) {
		m := obj(it)
		t := SandboxTemplate{Name: s(m["name"]), Pool: s(m["pool"]), Flavor: s(m["flavor"]), ImageID: s(m["imageId"]), Network: "egress"}
		if v, ok := m["runtime"]; ok {
			t.Runtime = ptr(s(v))
		}
		if v, ok := m["userData"]; ok {
			t.UserData = ptr(s(v))
		}
		if v, ok := m["defaultTtlSeconds"]; ok {
			t.DefaultTTLSeconds = ptr(i64(v))
		}
		if v, ok := m["maxTtlSeconds"]; ok {
			t.MaxTTLSeconds = ptr(i64(v))
		}
		if w, ok := m["warm"].(map[string]any); ok {
			t.Warm = &Warm{Min: i64(w["min"])}
			if v, ok := w["max"]; ok {
				t.Warm.Max = ptr(i64(v))
			}
		}
		if e, ok := m["env"].(map[string]any); ok {
			t.Env = make(map[string]string, len(e))
			for k, v := range e {
				t.Env[k] = s(v)
			}
		}
		if v, ok := m["network"]; ok {
			t.Network = s(v)
		}
		if vols, ok := m["volumes"].([]any); ok {
			t.Volumes = make([]Volume, 0, len(vols))
			for _, v := range vols {
				vm := obj(v)
				vol := Volume{Volume: s(vm["volume"]), MountPath: s(vm["mountPath"])}
				vol.ReadOnly, _ = vm["readOnly"].(bool)
				t.Volumes = append(t.Volumes, vol)
			}
		}
		d.SandboxTemplates = append(d.SandboxTemplates, t)
	}
	return d, nil
}

func decodeSubstrate(m map[string]any) *Substrate {
	sub := &Substrate{Kind: s(m["kind"]), Account: s(m["account"])}
	sub.Protect, _ = m["protect"].(bool)
	if mt, ok := m["maintenance"].(map[string]any); ok {
		sub.Maintenance = &Maintenance{}
		for _, w := range arr(mt["windows"]) {
			wm := obj(w)
			mw := MaintenanceWindow{Start: s(wm["start"]), Duration: s(wm["duration"])}
			for _, d := range arr(wm["days"]) {
				mw.Days = append(mw.Days, s(d))
			}
			// The normal form names the zone: left out, it is UTC.
			mw.TimeZone = "UTC"
			if z, ok := wm["timeZone"]; ok {
				mw.TimeZone = s(z)
			}
			sub.Maintenance.Windows = append(sub.Maintenance.Windows, mw)
		}
	}
	c := obj(m["cluster"])
	if cr, ok := c["create"].(map[string]any); ok {
		sub.Cluster.Create = &ClusterCreate{Location: s(cr["location"])}
		sub.Cluster.Create.PrivateNodes, _ = cr["privateNodes"].(bool)
		sub.Cluster.Create.Version = s(cr["version"])
	}
	if a, ok := c["adopt"]; ok {
		sub.Cluster.Adopt = s(a)
	}
	for _, f := range arr(m["flavors"]) {
		fm := obj(f)
		sf := SubstrateFlavor{Name: s(fm["name"]), MachineType: s(fm["machineType"])}
		if v, ok := fm["nodes"]; ok {
			sf.Nodes = ptr(i64(v))
		}
		if g, ok := fm["gpus"].(map[string]any); ok {
			sf.GPUs = &GPUs{Type: s(g["type"]), Count: i64(g["count"])}
		}
		for _, z := range arr(fm["zones"]) {
			sf.Zones = append(sf.Zones, s(z))
		}
		if v, ok := fm["diskGiB"]; ok {
			sf.DiskGiB = ptr(i64(v))
		}
		sf.Spot, _ = fm["spot"].(bool)
		if a, ok := fm["autoscaling"].(map[string]any); ok {
			sf.Autoscaling = &Autoscaling{MinNodes: i64(a["minNodes"]), MaxNodes: i64(a["maxNodes"])}
		}
		sub.Flavors = append(sub.Flavors, sf)
	}
	return sub
}

// normalizeValue turns free-form JSON (policy, provider config) into plain
// Go values: integral numbers within ±(2^53-1) become int64, other numbers
// float64, so that equal values compare and hash equal whatever their
// spelling (2.0, 2, 2e0).
func normalizeValue(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = normalizeValue(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = normalizeValue(e)
		}
		return out
	case json.Number:
		if i, ok := integer(string(x)); ok && i <= 1<<53-1 && i >= -(1<<53-1) {
			return i
		}
		f, _ := strconv.ParseFloat(string(x), 64)
		return f
	}
	return v
}

func quota(m map[string]any) map[string]int64 {
	out := make(map[string]int64, len(m))
	for k, v := range m {
		out[k] = i64(v)
	}
	return out
}

func arr(v any) []any          { a, _ := v.([]any); return a }
func obj(v any) map[string]any { m, _ := v.(map[string]any); return m }
func s(v any) string           { x, _ := v.(string); return x }
func ptr[T any](v T) *T        { return &v }
func i64(v any) int64 {
	n, ok := v.(json.Number)
	if !ok {
		panic(fmt.Sprintf("expected a number, got %T", v))
	}
	i, ok := integer(string(n))
	if !ok {
		panic(fmt.Sprintf("expected an integer, got %s", n))
	}
	return i
}
