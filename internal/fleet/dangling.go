package fleet

import "fmt"

// Dangling is a reference of a valid document to an object the document
// does not hold. It is no error: applied without prune, the reference
// resolves against the fleet, which may hold the object. validate reports
// it as a warning, with the nearest name the document has when it looks
// like a typo.
type Dangling struct {
	// Path is where the reference is ("pools[2].site").
	Path string `json:"path"`
	// Kind is what it names ("site"); Name the value.
	Kind string `json:"kind"`
	Name string `json:"name"`
	// Closest is the document's nearest name ("" when none is near).
	Closest string `json:"closest,omitempty"`
}

func (d Dangling) String() string {
	s := fmt.Sprintf("%s %q names no %s of this document; applied, it resolves against the fleet (which may hold it, since prune is off)", d.Path, d.Name, d.Kind)
	if d.Closest != "" {
		s += fmt.Sprintf(" (did you mean %q?)", d.Closest)
	}
	return s
}

// DanglingReferences lists the references of d to objects d does not hold:
// pools' sites and provider accounts, and flavors' and sandbox templates'
// pools.
func DanglingReferences(d *Document) []Dangling {
	names := func(n int, name func(int) string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = name(i)
		}
		return out
	}
	sites := names(len(d.Sites), func(i int) string { return d.Sites[i].Name })
	accounts := names(len(d.ProviderAccounts), func(i int) string { return d.ProviderAccounts[i].Name })
	pools := names(len(d.Pools), func(i int) string { return d.Pools[i].Name })
	var out []Dangling
	check := func(path, kind, name string, have []string) {
		if name == "" {
			return
		}
		for _, h := range have {
			if h == name {
				return
			}
		}
		out = append(out, Dangling{Path: path, Kind: kind, Name: name, Closest: closest(name, have)})
	}
	for i, p := range d.Pools {
		check(fmt.Sprintf("pools[%d].site", i), "site", p.Site, sites)
		check(fmt.Sprintf("pools[%d].providerAccount", i), "provider account", p.ProviderAccount, accounts)
	}
	for i, f := range d.Flavors {
		check(fmt.Sprintf("flavors[%d].pool", i), "pool", f.Pool, pools)
	}
	for i, s := range d.SandboxTemplates {
		check(fmt.Sprintf("sandboxTemplates[%d].pool", i), "pool", s.Pool, pools)
	}
	return out
}
