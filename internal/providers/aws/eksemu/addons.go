package eksemu

import "slices"

// Add-ons are modelled only as far as the AWS CLI reads them while a
// cluster is made: ListAddons (a cluster has none: CreateAddon is not
// modelled, so none can be installed and the list is always empty) and
// DescribeAddonVersions over a small catalogue of the three add-ons every
// cluster can take.

// addonCatalogue is what DescribeAddonVersions offers: name, type and the
// add-on version for each Kubernetes version the emulator offers.
//
// Guess: the version strings follow the shape EKS publishes
// ("v1.19.2-eksbuild.1"); the numbers are illustrative.
var addonCatalogue = []struct {
	name, typ, version, namespace string
}{
	{"coredns", "networking", "v1.12.1-eksbuild.2", "kube-system"},
	{"kube-proxy", "networking", "v1.34.0-eksbuild.1", "kube-system"},
	{"vpc-cni", "networking", "v1.20.1-eksbuild.1", "kube-system"},
}

func (x *exchange) listAddons(args []string) {
	c := x.find(args[0])
	if c == nil {
		return
	}
	got, next, ok := x.pageJSON(nil, 100)
	if !ok {
		return
	}
	x.eksOK(withNext(map[string]any{"addons": nonNil(got)}, next))
}

func (x *exchange) describeAddonVersions(_ []string) {
	e := x.e
	q := x.r.URL.Query()
	kv := q.Get("kubernetesVersion")
	if kv != "" && !slices.Contains(e.opts.Versions, kv) {
		// Guess: an unsupported Kubernetes version is refused as a bad
		// parameter rather than answered with an empty list.
		x.invalid("unsupported Kubernetes version "+kv, nil)
		return
	}
	var names []string
	for _, a := range addonCatalogue {
		if n := q.Get("addonName"); n != "" && n != a.name {
			continue
		}
		if t := q["types"]; len(t) > 0 && !slices.Contains(t, a.typ) {
			continue
		}
		if p := q["publishers"]; len(p) > 0 && !slices.Contains(p, "eks") {
			continue
		}
		if o := q["owners"]; len(o) > 0 && !slices.Contains(o, "aws") {
			continue
		}
		names = append(names, a.name)
	}
	// Guess: an addonName EKS does not offer gives an empty list, not a
	// ResourceNotFoundException (which the model also lists).
	got, next, ok := x.pageJSON(names, 100)
	if !ok {
		return
	}
	addons := []map[string]any{}
	for _, a := range addonCatalogue {
		if !slices.Contains(got, a.name) {
			continue
		}
		var compat []map[string]any
		for _, v := range e.opts.Versions {
			if kv != "" && v != kv {
				continue
			}
			compat = append(compat, map[string]any{"clusterVersion": v, "platformVersions": []string{"*"}, "defaultVersion": true})
		}
		addons = append(addons, map[string]any{
			"addonName": a.name, "type": a.typ, "publisher": "eks", "owner": "aws", "defaultNamespace": a.namespace,
			"addonVersions": []map[string]any{{
				"addonVersion": a.version, "architecture": []string{"amd64", "arm64"}, "computeTypes": []string{"ec2"},
				"compatibilities": compat, "requiresConfiguration": false, "requiresIamPermissions": a.name == "vpc-cni",
			}},
		})
	}
	x.eksOK(withNext(map[string]any{"addons": addons}, next))
}
