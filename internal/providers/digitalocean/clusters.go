package digitalocean

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/digitalocean/godo"

	"github.com/fleet-agent/fleet-agent/internal/providers"
)

var uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// clusterStatus maps DOKS's cluster state.
func clusterStatus(st *wireStatus) (providers.ClusterStatus, string) {
	if st == nil {
		return providers.ClusterProvisioning, "DigitalOcean gave no state yet"
	}
	switch strings.ToLower(st.State) {
	case "provisioning":
		return providers.ClusterProvisioning, st.Message
	case "running":
		return providers.ClusterRunning, st.Message
	case "degraded":
		// The control plane answers; some of the cluster does not.
		return providers.ClusterRunning, "degraded: " + st.Message
	case "upgrading":
		return providers.ClusterUpdating, st.Message
	case "deleted", "deleting":
		return providers.ClusterDeleting, st.Message
	case "error", "invalid", "":
		return providers.ClusterError, strings.TrimSpace("DigitalOcean reports the cluster in state " + strconv.Quote(st.State) + " " + st.Message)
	}
	// A state this adapter does not know is taken as a change in progress,
	// so that it is watched rather than given up on.
	return providers.ClusterUpdating, fmt.Sprintf("DigitalOcean reports state %q, which this adapter does not know", st.State)
}

func view(c *wireCluster) providers.Cluster {
	status, msg := clusterStatus(c.Status)
	v := providers.Cluster{
		Ref:          providers.ClusterRef{Location: c.RegionSlug, Name: c.Name, ID: c.ID},
		Status:       status,
		Message:      msg,
		PrivateNodes: c.IsolatedWorkers,
		Labels:       labelsOf(c.Tags),
		Outputs:      providers.ClusterOutputs{Location: c.RegionSlug, GlobalID: c.ID},
		// The answer carries the pools themselves (revision.go).
		NodePoolsRevision: poolsRevision(c),
	}
	// The endpoint is not there until the cluster has provisioned.
	if status != providers.ClusterProvisioning && c.Endpoint != "" {
		v.Outputs.Endpoint = c.Endpoint
		v.Outputs.Version = c.VersionSlug
		// DOKS nodes run the cluster's release.
		v.Outputs.NodeVersion = c.VersionSlug
	}
	return v
}

// listAll walks every page of the account's clusters.
func (a *Adapter) listAll(ctx context.Context, s *session) ([]*wireCluster, error) {
	var all []*wireCluster
	for page := 1; ; page++ {
		var root clustersRoot
		if err := a.call(ctx, s, http.MethodGet, fmt.Sprintf("v2/kubernetes/clusters?page=%d&per_page=200", page), nil, &root); err != nil {
			return nil, err
		}
		all = append(all, root.Clusters...)
		if len(root.Clusters) == 0 || root.Links == nil || root.Links.IsLastPage() || page >= maxPages {
			return all, nil
		}
	}
}

// findByName finds the cluster the adapter made of a name in a region: it
// carries the marker tag. nil when there is none; two are a Conflict a
// person must settle.
func (a *Adapter) findByName(ctx context.Context, s *session, region, name string) (*wireCluster, error) {
	all, err := a.listAll(ctx, s)
	if err != nil {
		return nil, err
	}
	var hits []*wireCluster
	for _, c := range all {
		if c.Name == name && c.RegionSlug == region && marked(c.Tags) {
			hits = append(hits, c)
		}
	}
	switch len(hits) {
	case 0:
		return nil, nil
	case 1:
		a.rememberID(s.acct, region, name, hits[0].ID)
		return hits[0], nil
	}
	ids := make([]string, len(hits))
	for i, c := range hits {
		ids[i] = c.ID
	}
	return nil, providers.Errorf(s.op, providers.Conflict, providers.None, "%d clusters named %s in %s carry the tag %s (%s); delete the extra ones",
		len(hits), name, region, markerTag, strings.Join(ids, ", "))
}

// get reads a cluster by its UUID.
func (a *Adapter) get(ctx context.Context, s *session, id string) (*wireCluster, error) {
	if !uuidRE.MatchString(id) {
		return nil, providers.NotFoundf(s.op, "cluster %q not found: a DOKS cluster id is a UUID", id)
	}
	var root clusterRoot
	if err := a.call(ctx, s, http.MethodGet, "v2/kubernetes/clusters/"+url.PathEscape(id), nil, &root); err != nil {
		return nil, err
	}
	if root.Cluster == nil {
		return nil, providers.NotFoundf(s.op, "cluster %s: DigitalOcean answered without it", id)
	}
	return root.Cluster, nil
}

// idKey names a cluster found by name: its account (by what the document
// says of it, as the catalogue is), region and name.
func idKey(acct providers.Account, region, name string) string {
	return catalogKey(acct) + "\x00" + region + "\x00" + name
}

// knownID is the UUID of the cluster of that name the adapter last made or
// found, or "". The substrate reads a create back by name until the cluster
// runs (DOKS clusters take minutes), and a read by name is a walk over every
// page of the account's clusters; with the id remembered it is one GET. The
// id is only a hint: the read must answer the same name, region and marker
// tag, else the list decides (a cluster deleted and made again has a new
// UUID). It lives as long as the adapter (a restarted agent lists once).
func (a *Adapter) knownID(acct providers.Account, region, name string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ids[idKey(acct, region, name)]
}

func (a *Adapter) rememberID(acct providers.Account, region, name, id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ids[idKey(acct, region, name)] = id
}

func (a *Adapter) forgetID(acct providers.Account, region, name string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.ids, idKey(acct, region, name))
}

// byKnownID reads a cluster named by ref through its remembered id; nil
// when there is none, or when the id no longer names that cluster.
func (a *Adapter) byKnownID(ctx context.Context, s *session, ref providers.ClusterRef) (*wireCluster, error) {
	id := a.knownID(s.acct, ref.Location, ref.Name)
	if id == "" {
		return nil, nil
	}
	c, err := a.get(ctx, s, id)
	switch {
	case err == nil && c.Name == ref.Name && c.RegionSlug == ref.Location && marked(c.Tags):
		return c, nil
	case err == nil || errors.Is(err, providers.ErrNotFound):
		a.forgetID(s.acct, ref.Location, ref.Name)
		return nil, nil
	}
	return nil, err
}

// resolve reads the cluster a ref names: by id when it has one, else by
// name in its region (through the remembered id, else the list finds the
// id and a read by id follows, for the cluster's state now).
func (a *Adapter) resolve(ctx context.Context, s *session, ref providers.ClusterRef) (*wireCluster, error) {
	id := ref.ID
	if id == "" {
		if c, err := a.byKnownID(ctx, s, ref); err != nil || c != nil {
			return c, err
		}
		c, err := a.findByName(ctx, s, ref.Location, ref.Name)
		if err != nil {
			return nil, err
		}
		if c == nil {
			return nil, providers.NotFoundf(s.op, "cluster %s not found", ref)
		}
		id = c.ID
	}
	c, err := a.get(ctx, s, id)
	if err != nil {
		return nil, err
	}
	if (ref.Name != "" && c.Name != ref.Name) || (ref.Location != "" && c.RegionSlug != ref.Location) {
		return nil, providers.NotFoundf(s.op, "cluster %s not found: %s is %s/%s", ref, id, c.RegionSlug, c.Name)
	}
	return c, nil
}

// EnsureCluster creates the cluster, or converges the one the adapter made
// of that name in that region: its tags, and its version upward.
func (a *Adapter) EnsureCluster(ctx context.Context, acct providers.Account, spec providers.ClusterSpec) (providers.Cluster, error) {
	s, err := a.open(ctx, "EnsureCluster", acct)
	if err != nil {
		return providers.Cluster{}, err
	}
	if !nameRE.MatchString(spec.Name) {
		return providers.Cluster{}, providers.Invalidf(s.op, "name", "cluster name %q must be a DNS label of at most 63 characters", spec.Name)
	}
	if len(s.cfg.Regions) > 0 && !slices.Contains(s.cfg.Regions, spec.Location) {
		return providers.Cluster{}, providers.Invalidf(s.op, "location", "region %s is not one of account %q's regions (%s)", spec.Location, acct.Name, strings.Join(s.cfg.Regions, ", "))
	}
	tags, err := clusterTags(s.op, spec.Labels)
	if err != nil {
		return providers.Cluster{}, err
	}
	c, err := a.findByName(ctx, s, spec.Location, spec.Name)
	if err != nil {
		return providers.Cluster{}, err
	}
	if c == nil {
		return a.create(ctx, s, spec, tags)
	}
	v := view(c)
	if err := providers.MayConverge(s.op, spec, v); err != nil {
		return providers.Cluster{}, err
	}
	switch {
	case v.Status == providers.ClusterDeleting:
		return providers.Cluster{}, providers.Errorf(s.op, providers.Conflict, providers.None, "cluster %s is being deleted; it can be made again once it is gone", spec.Name)
	case c.IsolatedWorkers != spec.PrivateNodes:
		return providers.Cluster{}, providers.Invalidf(s.op, "modeChange", "cluster %s has privateNodes (isolated workers) %v; that and its region never change in place: make a new pool", spec.Name, c.IsolatedWorkers)
	}
	if spec.Labels != nil && !maps.Equal(v.Labels, spec.Labels) {
		body := &godo.KubernetesClusterUpdateRequest{Name: c.Name, Tags: withOurTags(c.Tags, tags)}
		var root clusterRoot
		if err := a.call(ctx, s, http.MethodPut, "v2/kubernetes/clusters/"+c.ID, body, &root); err != nil {
			return providers.Cluster{}, err
		}
		if root.Cluster != nil {
			c, v = root.Cluster, view(root.Cluster)
		}
	}
	if spec.Version == "" || versionIs(c.VersionSlug, spec.Version) {
		return v, nil
	}
	return a.upgrade(ctx, s, c, v, spec.Version)
}

func (a *Adapter) create(ctx context.Context, s *session, spec providers.ClusterSpec, tags []string) (providers.Cluster, error) {
	version := spec.Version
	if version == "" {
		version = "latest"
	}
	off := false
	p := a.cfg.DefaultNodePool
	body := &godo.KubernetesClusterCreateRequest{
		Name: spec.Name, RegionSlug: spec.Location, VersionSlug: version, Tags: tags,
		NodePools:       []*godo.KubernetesNodePoolCreateRequest{{Name: p.Name, Size: p.Size, Count: p.Count, Tags: []string{markerTag}}},
		IsolatedWorkers: spec.PrivateNodes,
		// DigitalOcean's device plugins would hand out the GPUs the node
		// daemon books: off from the start.
		NvidiaGpuDevicePlugin: &godo.KubernetesNvidiaGpuDevicePlugin{Enabled: &off},
		AmdGpuDevicePlugin:    &godo.KubernetesAmdGpuDevicePlugin{Enabled: &off},
	}
	var root clusterRoot
	if err := a.call(ctx, s, http.MethodPost, "v2/kubernetes/clusters", body, &root); err != nil {
		return providers.Cluster{}, err
	}
	if root.Cluster == nil || root.Cluster.ID == "" {
		return providers.Cluster{}, &providers.Error{Op: s.op, Class: providers.Unknown, SideEffect: providers.Done,
			Message: "DigitalOcean accepted the cluster without saying which it is; read it back by name"}
	}
	a.rememberID(s.acct, spec.Location, spec.Name, root.Cluster.ID)
	return view(root.Cluster), nil
}

// versionIs reports whether a release slug ("1.34.2-do.1") is the version
// asked for: the slug itself, or a version it falls under ("1.34").
func versionIs(slug, want string) bool {
	return slug == want || strings.HasPrefix(slug, want+".") || strings.HasPrefix(slug, want+"-")
}

// compareVersions compares the dotted numbers leading two versions.
func compareVersions(a, b string) int {
	num := func(v string) []int {
		v, _, _ = strings.Cut(v, "-")
		var out []int
		for _, p := range strings.Split(v, ".") {
			n, _ := strconv.Atoi(p)
			out = append(out, n)
		}
		return out
	}
	x, y := num(a), num(b)
	for i := range min(len(x), len(y)) {
		if x[i] != y[i] {
			return x[i] - y[i]
		}
	}
	return 0
}

// nextHop is the version one upgrade goes to from the release have toward
// want: the next minor when want is further, else want.
func nextHop(have, want string) string {
	var ha, hi, wa, wi int
	if _, err := fmt.Sscanf(have, "%d.%d", &ha, &hi); err != nil {
		return want
	}
	if _, err := fmt.Sscanf(want, "%d.%d", &wa, &wi); err != nil || wa != ha || wi <= hi+1 {
		return want
	}
	return fmt.Sprintf("%d.%d", ha, hi+1)
}

// newer orders release slugs: by version, then by DigitalOcean's revision.
func newer(a, b string) bool {
	if c := compareVersions(a, b); c != 0 {
		return c > 0
	}
	return a > b
}

func (a *Adapter) upgrade(ctx context.Context, s *session, c *wireCluster, v providers.Cluster, want string) (providers.Cluster, error) {
	switch {
	case v.Status == providers.ClusterUpdating:
		// An upgrade is on its way (to which version the API does not
		// say); the next ensure after it looks again.
		return v, nil
	case v.Status != providers.ClusterRunning:
		return providers.Cluster{}, providers.Errorf(s.op, providers.Conflict, providers.None, "cluster %s is %s; its upgrade to %s waits until it runs", c.Name, v.Status, want)
	case compareVersions(want, c.VersionSlug) < 0:
		return providers.Cluster{}, providers.Invalidf(s.op, "downgrade", "cluster %s runs %s; DOKS does not go down to %s", c.Name, c.VersionSlug, want)
	}
	var root struct {
		Versions []*godo.KubernetesVersion `json:"available_upgrade_versions"`
	}
	if err := a.call(ctx, s, http.MethodGet, "v2/kubernetes/clusters/"+c.ID+"/upgrades", nil, &root); err != nil {
		return providers.Cluster{}, err
	}
	// DOKS goes one minor at a time: the hop is the next minor on the way
	// to want (or want itself when it is that near), and the journal calls
	// again until want is reached.
	hop := nextHop(c.VersionSlug, want)
	target := ""
	var offered []string
	for _, u := range root.Versions {
		offered = append(offered, u.Slug)
		if versionIs(u.Slug, hop) && (target == "" || newer(u.Slug, target)) {
			target = u.Slug
		}
	}
	if target == "" {
		return providers.Cluster{}, providers.Invalidf(s.op, "version", "DigitalOcean offers cluster %s (on %s) no upgrade to %s on the way to %s (offered: %s)", c.Name, c.VersionSlug, hop, want, strings.Join(offered, ", "))
	}
	if err := a.call(ctx, s, http.MethodPost, "v2/kubernetes/clusters/"+c.ID+"/upgrade", &godo.KubernetesClusterUpgradeRequest{VersionSlug: target}, nil); err != nil {
		return providers.Cluster{}, err
	}
	v.Status, v.Message = providers.ClusterUpdating, "upgrading to "+target
	return v, nil
}

// GetCluster reads a cluster by ref.
func (a *Adapter) GetCluster(ctx context.Context, acct providers.Account, ref providers.ClusterRef) (providers.Cluster, error) {
	s, err := a.open(ctx, "GetCluster", acct)
	if err != nil {
		return providers.Cluster{}, err
	}
	c, err := a.resolve(ctx, s, ref)
	if err != nil {
		return providers.Cluster{}, err
	}
	return view(c), nil
}

// DeleteCluster deletes a cluster and its node pools. A cluster already
// being deleted is returned as it is.
func (a *Adapter) DeleteCluster(ctx context.Context, acct providers.Account, ref providers.ClusterRef) (providers.Cluster, error) {
	s, err := a.open(ctx, "DeleteCluster", acct)
	if err != nil {
		return providers.Cluster{}, err
	}
	out := providers.Cluster{Ref: ref, Status: providers.ClusterDeleting, Outputs: providers.ClusterOutputs{Location: ref.Location, GlobalID: ref.ID}}
	if ref.ID == "" {
		c, err := a.findByName(ctx, s, ref.Location, ref.Name)
		if err != nil {
			return providers.Cluster{}, err
		}
		if c == nil {
			return providers.Cluster{}, providers.NotFoundf(s.op, "cluster %s not found", ref)
		}
		out = view(c)
		out.Status = providers.ClusterDeleting
	} else if !uuidRE.MatchString(ref.ID) {
		return providers.Cluster{}, providers.NotFoundf(s.op, "cluster %q not found: a DOKS cluster id is a UUID", ref.ID)
	}
	err = a.call(ctx, s, http.MethodDelete, "v2/kubernetes/clusters/"+out.Ref.ID, nil, nil)
	switch c := providers.ClassOf(err); {
	case err == nil:
		return out, nil
	case c == providers.Conflict || c == providers.Invalid:
		// Whether the service refuses a second delete is not documented:
		// a cluster that reads back as being deleted is what was asked.
		if got, gerr := a.get(ctx, s, out.Ref.ID); gerr == nil {
			if v := view(got); v.Status == providers.ClusterDeleting {
				return v, nil
			}
		} else if errors.Is(gerr, providers.ErrNotFound) {
			return providers.Cluster{}, gerr
		}
	}
	return providers.Cluster{}, err
}

// ReadAdoptable reads a cluster the substrate did not create, by its UUID.
func (a *Adapter) ReadAdoptable(ctx context.Context, acct providers.Account, adoptID string) (providers.Cluster, error) {
	s, err := a.open(ctx, "ReadAdoptable", acct)
	if err != nil {
		return providers.Cluster{}, err
	}
	if !uuidRE.MatchString(adoptID) {
		return providers.Cluster{}, providers.Invalidf(s.op, "adoptID", "cluster.adopt %q: a DOKS cluster is adopted by its UUID (the id `doctl kubernetes cluster list` shows)", adoptID)
	}
	c, err := a.get(ctx, s, adoptID)
	if err != nil {
		return providers.Cluster{}, err
	}
	return view(c), nil
}

// ListClusters lists the account's clusters that carry a label of this
// project, read from their tags.
func (a *Adapter) ListClusters(ctx context.Context, acct providers.Account, labelKey string) ([]providers.Cluster, error) {
	s, err := a.open(ctx, "ListClusters", acct)
	if err != nil {
		return nil, err
	}
	probe, err := tagOf(labelKey, "")
	if err != nil {
		return nil, providers.Invalidf(s.op, "label", "%v", err)
	}
	all, err := a.listAll(ctx, s)
	if err != nil {
		return nil, err
	}
	var out []providers.Cluster
	for _, c := range all {
		if slices.ContainsFunc(c.Tags, func(t string) bool { return strings.HasPrefix(t, probe) }) {
			out = append(out, view(c))
		}
	}
	slices.SortFunc(out, func(x, y providers.Cluster) int { return strings.Compare(x.Ref.String(), y.Ref.String()) })
	return out, nil
}
