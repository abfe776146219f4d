package gcp

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	container "google.golang.org/api/container/v1"

	"github.com/fleet-agent/fleet-agent/internal/providers"
)

// clusterPath is a cluster's full resource name.
func (s *session) clusterPath(ref providers.ClusterRef) (string, providers.ClusterRef, error) {
	if ref.ID != "" {
		parts := strings.Split(ref.ID, "/")
		if len(parts) != 6 || parts[0] != "projects" || parts[2] != "locations" || parts[4] != "clusters" {
			return "", ref, providers.Invalidf(s.op, "clusterRef", "cluster id %q is not projects/<p>/locations/<l>/clusters/<name>", ref.ID)
		}
		return ref.ID, providers.ClusterRef{Location: parts[3], Name: parts[5], ID: ref.ID}, nil
	}
	if ref.Location == "" || ref.Name == "" {
		return "", ref, providers.Invalidf(s.op, "clusterRef", "a cluster ref needs an id or a location and a name")
	}
	p := s.parent(ref.Location) + "/clusters/" + ref.Name
	return p, providers.ClusterRef{Location: ref.Location, Name: ref.Name, ID: p}, nil
}

// getCluster reads a cluster; a missing one is ErrNotFound naming it.
func (s *session) getCluster(ctx context.Context, ref providers.ClusterRef) (*container.Cluster, providers.ClusterRef, error) {
	p, full, err := s.clusterPath(ref)
	if err != nil {
		return nil, full, err
	}
	c, err := s.ctr.Projects.Locations.Clusters.Get(p).Context(ctx).Do()
	if err != nil {
		err = classify(s.op, err, read)
		if errors.Is(err, providers.ErrNotFound) {
			return nil, full, providers.NotFoundf(s.op, "cluster %s not found", p)
		}
		return nil, full, err
	}
	return c, full, nil
}

// clusterStatus maps GKE's status. DEGRADED (usable, needs a person) and
// ERROR (GKE deletes it by itself) are settled errors; a status this
// adapter does not know reads as updating, so the caller keeps observing
// rather than acting on it.
func clusterStatus(s string) providers.ClusterStatus {
	switch s {
	case "PROVISIONING":
		return providers.ClusterProvisioning
	case "RUNNING":
		return providers.ClusterRunning
	case "RECONCILING":
		return providers.ClusterUpdating
	case "STOPPING":
		return providers.ClusterDeleting
	case "ERROR", "DEGRADED":
		return providers.ClusterError
	}
	return providers.ClusterUpdating
}

// apiUp reports whether a cluster's API server answers.
func apiUp(c *container.Cluster) bool {
	switch c.Status {
	case "RUNNING", "RECONCILING", "DEGRADED":
		return c.Endpoint != ""
	}
	return false
}

func (s *session) view(c *container.Cluster) providers.Cluster {
	ref := providers.ClusterRef{Location: c.Location, Name: c.Name, ID: s.parent(c.Location) + "/clusters/" + c.Name}
	v := providers.Cluster{
		Ref: ref, Status: clusterStatus(c.Status), Labels: decodeLabels(c.ResourceLabels),
		PrivateNodes: (c.PrivateClusterConfig != nil && c.PrivateClusterConfig.EnablePrivateNodes) ||
			(c.NetworkConfig != nil && c.NetworkConfig.DefaultEnablePrivateNodes),
		// The selfLink names the cluster the same way whichever account
		// reads it (GKE's documentation).
		Outputs: providers.ClusterOutputs{Location: c.Location, GlobalID: c.SelfLink},
	}
	msgs := []string{}
	if c.StatusMessage != "" {
		msgs = append(msgs, c.StatusMessage)
	}
	for _, cond := range c.Conditions {
		msgs = append(msgs, strings.TrimSpace(cond.Code+": "+cond.Message))
	}
	if _, known := map[string]bool{"PROVISIONING": true, "RUNNING": true, "RECONCILING": true, "STOPPING": true, "ERROR": true, "DEGRADED": true}[c.Status]; !known {
		msgs = append(msgs, "GKE reports status "+strconv.Quote(c.Status))
	}
	v.Message = strings.Join(msgs, "; ")
	if apiUp(c) {
		v.Outputs.Endpoint = "https://" + c.Endpoint
		v.Outputs.Version = c.CurrentMasterVersion
		v.Outputs.NodeVersion = c.CurrentNodeVersion
		if v.Outputs.NodeVersion == "" {
			// currentNodeVersion is deprecated; the first pool's version
			// stands in when it is gone.
			for _, p := range c.NodePools {
				if v.Outputs.NodeVersion == "" {
					v.Outputs.NodeVersion = p.Version
				}
			}
		}
	}
	return v
}

// GetCluster reads a cluster by ref, or ErrNotFound.
func (a *Adapter) GetCluster(ctx context.Context, acct providers.Account, ref providers.ClusterRef) (providers.Cluster, error) {
	s, err := a.open(ctx, "GetCluster", acct)
	if err != nil {
		return providers.Cluster{}, err
	}
	c, _, err := s.getCluster(ctx, ref)
	if err != nil {
		return providers.Cluster{}, err
	}
	return s.view(c), nil
}

// ReadAdoptable reads a cluster by its adopt id, `<location>/<name>`.
func (a *Adapter) ReadAdoptable(ctx context.Context, acct providers.Account, adoptID string) (providers.Cluster, error) {
	const op = "ReadAdoptable"
	s, err := a.open(ctx, op, acct)
	if err != nil {
		return providers.Cluster{}, err
	}
	loc, name, ok := strings.Cut(adoptID, "/")
	if !ok || strings.Contains(name, "/") || (!regionRE().MatchString(loc) && !zoneRE().MatchString(loc)) || name == "" {
		return providers.Cluster{}, providers.Invalidf(op, "adoptID", "adopt id %q: a GKE cluster is adopted as <location>/<cluster name>, like us-central1/prod", adoptID)
	}
	c, _, err := s.getCluster(ctx, providers.ClusterRef{Location: loc, Name: name})
	if err != nil {
		return providers.Cluster{}, err
	}
	return s.view(c), nil
}

// ListClusters lists the project's clusters, in every location, that carry
// the label key (encoded as labels.go says), sorted by ref. When there is
// one, it also lists the project's operations once, for each cluster's node
// pool revision (revision.go).
func (a *Adapter) ListClusters(ctx context.Context, acct providers.Account, labelKey string) ([]providers.Cluster, error) {
	const op = "ListClusters"
	s, err := a.open(ctx, op, acct)
	if err != nil {
		return nil, err
	}
	key, err := encodeKey(labelKey)
	if err != nil {
		return nil, providers.Invalidf(op, "label", "%v", err)
	}
	// One call covers every location; GKE's list has no pages.
	res, err := s.ctr.Projects.Locations.Clusters.List(s.parent("-")).Context(ctx).Do()
	if err != nil {
		return nil, classify(op, err, read)
	}
	if len(res.MissingZones) > 0 {
		// A partial list would make clusters in those zones look gone.
		return nil, providers.Errorf(op, providers.Unavailable, providers.None, "GKE could not list clusters in %s; try again", strings.Join(res.MissingZones, ", "))
	}
	var ours []*container.Cluster
	for _, c := range res.Clusters {
		if _, ok := c.ResourceLabels[key]; ok {
			ours = append(ours, c)
		}
	}
	// The sweep's change check (revision.go): one more listing, only with
	// a cluster of ours to tell about.
	var ops map[string][]*container.Operation
	opsOK := false
	if len(ours) > 0 {
		ops, opsOK = s.clusterOps(ctx)
	}
	var out []providers.Cluster
	for _, c := range ours {
		v := s.view(c)
		if opsOK {
			v.NodePoolsRevision = poolsRevision(c, ops[c.Location+"/"+c.Name])
		}
		out = append(out, v)
	}
	slices.SortFunc(out, func(x, y providers.Cluster) int { return strings.Compare(x.Ref.String(), y.Ref.String()) })
	return out, nil
}

// EnsureCluster creates the cluster or converges the existing one of the
// same location and name: labels and an upgrade in place; its mode
// (privateNodes) never changes.
func (a *Adapter) EnsureCluster(ctx context.Context, acct providers.Account, spec providers.ClusterSpec) (providers.Cluster, error) {
	const op = "EnsureCluster"
	s, err := a.open(ctx, op, acct)
	if err != nil {
		return providers.Cluster{}, err
	}
	if !nameRE().MatchString(spec.Name) || len(spec.Name) > 40 {
		return providers.Cluster{}, providers.Invalidf(op, "name", "cluster name %q: GKE takes lowercase letters, digits and '-', starting with a letter, at most 40 characters", spec.Name)
	}
	if !regionRE().MatchString(spec.Location) && !zoneRE().MatchString(spec.Location) {
		return providers.Cluster{}, providers.Invalidf(op, "location", "location %q is not a GKE region or zone", spec.Location)
	}
	labels, err := encodeLabels(spec.Labels)
	if err != nil {
		return providers.Cluster{}, providers.Invalidf(op, "label", "%v", err)
	}
	c, ref, err := s.getCluster(ctx, providers.ClusterRef{Location: spec.Location, Name: spec.Name})
	switch {
	case errors.Is(err, providers.ErrNotFound):
		created, err := a.createCluster(ctx, s, spec, labels, ref)
		if providers.ReasonOf(err) != "alreadyExists" {
			return created, err
		}
		// Made meanwhile (or by an attempt whose answer was lost): converge.
		if c, _, err = s.getCluster(ctx, ref); err != nil {
			return providers.Cluster{}, err
		}
	case err != nil:
		return providers.Cluster{}, err
	}
	return a.convergeCluster(ctx, s, spec, labels, c)
}

func (a *Adapter) createCluster(ctx context.Context, s *session, spec providers.ClusterSpec, labels map[string]string, ref providers.ClusterRef) (providers.Cluster, error) {
	zones, err := s.defaultZones(ctx, spec.Location)
	if err != nil {
		return providers.Cluster{}, err
	}
	sys := a.cfg.SystemNodePool
	cl := &container.Cluster{
		Name:                  spec.Name,
		InitialClusterVersion: spec.Version,
		ResourceLabels:        labels,
		NodePools: []*container.NodePool{{
			// GKE creates no cluster without a node (GKE's documentation): one
			// small node in the first zone. It carries the pool's resource
			// labels, never its node labels, so the node daemon stays off it.
			Name: SystemPoolName, InitialNodeCount: int64(sys.NodeCount), Locations: zones[:1],
			Config:     &container.NodeConfig{MachineType: sys.MachineType, DiskSizeGb: int64(sys.DiskGiB), ResourceLabels: labels},
			Management: &container.NodeManagement{AutoRepair: true, AutoUpgrade: true},
		}},
	}
	if regionRE().MatchString(spec.Location) {
		cl.Locations = zones
	}
	if spec.PrivateNodes {
		cl.PrivateClusterConfig = &container.PrivateClusterConfig{EnablePrivateNodes: true}
		cl.IpAllocationPolicy = &container.IPAllocationPolicy{UseIpAliases: true}
	}
	opn, err := s.ctr.Projects.Locations.Clusters.Create(s.parent(spec.Location), &container.CreateClusterRequest{Cluster: cl}).Context(ctx).Do()
	if err != nil {
		return providers.Cluster{}, classify(s.op, err, mutate)
	}
	if opn.Status == "DONE" && opn.Error != nil {
		return providers.Cluster{}, opError(s.op, "create cluster "+spec.Name, opn.Error.Code, opn.Error.Message)
	}
	return providers.Cluster{
		Ref: ref, Status: providers.ClusterProvisioning, PrivateNodes: spec.PrivateNodes,
		Labels: maps.Clone(spec.Labels), Message: "GKE operation " + opn.Name + " creates the cluster",
		Outputs: providers.ClusterOutputs{Location: spec.Location},
	}, nil
}

func (a *Adapter) convergeCluster(ctx context.Context, s *session, spec providers.ClusterSpec, labels map[string]string, c *container.Cluster) (providers.Cluster, error) {
	v := s.view(c)
	if err := providers.MayConverge(s.op, spec, v); err != nil {
		return providers.Cluster{}, err
	}
	if v.Status == providers.ClusterDeleting {
		return providers.Cluster{}, providers.Errorf(s.op, providers.Conflict, providers.None, "cluster %s is being deleted; wait until it is gone", v.Ref)
	}
	if v.PrivateNodes != spec.PrivateNodes {
		return providers.Cluster{}, providers.Invalidf(s.op, "modeChange", "cluster %s has privateNodes %v; its location and privateNodes never change in place: make a new pool instead", v.Ref, v.PrivateNodes)
	}
	path := v.Ref.ID
	var (
		steps     []step
		operation string
	)
	if missing := labelsToSet(c.ResourceLabels, labels); missing != nil {
		fp := c.LabelFingerprint
		steps = append(steps, step{"setting the cluster's labels", func(ctx context.Context) (*container.Operation, error) {
			return s.ctr.Projects.Locations.Clusters.SetResourceLabels(path, &container.SetLabelsRequest{ResourceLabels: missing, LabelFingerprint: fp}).Context(ctx).Do()
		}})
	}
	if spec.Version != "" && !versionIs(c.CurrentMasterVersion, spec.Version) {
		if olderMinor(spec.Version, c.CurrentMasterVersion) {
			return providers.Cluster{}, providers.Invalidf(s.op, "downgrade", "cluster %s runs %s; GKE does not go down to %s", v.Ref, c.CurrentMasterVersion, spec.Version)
		}
		// GKE upgrades the control plane one minor at a time: this call
		// takes the next hop, the journal calls again for the rest.
		hop := nextHop(c.CurrentMasterVersion, spec.Version)
		steps = append(steps, step{"upgrading the control plane to " + hop, func(ctx context.Context) (*container.Operation, error) {
			op, err := s.ctr.Projects.Locations.Clusters.Update(path, &container.UpdateClusterRequest{Update: &container.ClusterUpdate{DesiredMasterVersion: hop}}).Context(ctx).Do()
			if op != nil {
				operation = op.Name
			}
			return op, err
		}})
	}
	if len(steps) == 0 {
		return v, nil
	}
	if c.Status != "RUNNING" {
		return providers.Cluster{}, providers.Errorf(s.op, providers.Conflict, providers.None, "cluster %s is %s; it changes once that is done", v.Ref, c.Status)
	}
	if err := s.run(ctx, a, c.Location, steps); err != nil {
		return providers.Cluster{}, err
	}
	v.Status, v.Labels, v.Operation = providers.ClusterUpdating, maps.Clone(spec.Labels), operation
	for k, val := range decodeLabels(c.ResourceLabels) {
		if _, ours := spec.Labels[k]; !ours {
			v.Labels[k] = val
		}
	}
	return v, nil
}

// labelsToSet is the cluster's full label set with ours merged in, or nil
// when ours are all there already. setResourceLabels replaces the whole
// set, so the owner's labels are carried along.
func labelsToSet(have, ours map[string]string) map[string]string {
	same := true
	for k, v := range ours {
		if hv, ok := have[k]; !ok || hv != v {
			same = false
		}
	}
	if same {
		return nil
	}
	out := maps.Clone(have)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, ours)
	return out
}

// versionIs reports whether a GKE version is the wanted one or one of its
// patches ("1.34" matches "1.34.3-gke.1100000").
func versionIs(have, want string) bool {
	return have == want || strings.HasPrefix(have, want+".") || strings.HasPrefix(have, want+"-")
}

// minor reads the "1.34" of a GKE version ("1.34.3-gke.1100000").
func minor(v string) (int, int, bool) {
	maj, rest, ok := strings.Cut(v, ".")
	if !ok {
		return 0, 0, false
	}
	if i := strings.IndexAny(rest, ".-"); i >= 0 {
		rest = rest[:i]
	}
	x, err1 := strconv.Atoi(maj)
	y, err2 := strconv.Atoi(rest)
	return x, y, err1 == nil && err2 == nil
}

// nextHop is the version one upgrade goes to from have toward want: the
// next minor when want is further, else want.
func nextHop(have, want string) string {
	hx, hy, ok1 := minor(have)
	wx, wy, ok2 := minor(want)
	if !ok1 || !ok2 || wx != hx || wy <= hy+1 {
		return want
	}
	return fmt.Sprintf("%d.%d", hx, hy+1)
}

// olderMinor reports whether version want is a minor below have's: GKE
// upgrades in place, never down.
func olderMinor(want, have string) bool {
	wx, wy, ok1 := minor(want)
	hx, hy, ok2 := minor(have)
	return ok1 && ok2 && (wx < hx || wx == hx && wy < hy)
}

// DeleteCluster starts deleting a cluster this project created. A cluster
// without our substrate-pool label (an adopted one) is refused: fleet-agent
// never deletes a cluster it did not make.
func (a *Adapter) DeleteCluster(ctx context.Context, acct providers.Account, ref providers.ClusterRef) (providers.Cluster, error) {
	const op = "DeleteCluster"
	s, err := a.open(ctx, op, acct)
	if err != nil {
		return providers.Cluster{}, err
	}
	c, full, err := s.getCluster(ctx, ref)
	if err != nil {
		return providers.Cluster{}, err
	}
	v := s.view(c)
	if v.Status == providers.ClusterDeleting {
		return v, nil
	}
	if _, ours := v.Labels[providers.LabelSubstratePool]; !ours {
		return providers.Cluster{}, providers.Invalidf(op, "notOurs", "cluster %s carries no %s label: fleet-agent deletes only clusters it created", full.ID, providers.LabelSubstratePool)
	}
	if _, err := s.ctr.Projects.Locations.Clusters.Delete(full.ID).Context(ctx).Do(); err != nil {
		err = classify(op, err, mutate)
		if errors.Is(err, providers.ErrNotFound) {
			return providers.Cluster{}, providers.NotFoundf(op, "cluster %s not found", full.ID)
		}
		return providers.Cluster{}, err
	}
	v.Status = providers.ClusterDeleting
	return v, nil
}
