package aws

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"

	"github.com/fleet-agent/fleet-agent/internal/providers"
)

// Labels are EKS tags as they are: tag keys take letters, digits, spaces
// and `_ . : / = + - @` up to 128 characters, so
// `fleet-agent.dev/substrate-pool` needs no encoding either way.

var clusterArnRE = lazyRE(`^arn:aws[a-z-]*:eks:([a-z0-9-]+):(\d{12}):cluster/(.+)$`)

// clusterName finds the cluster a ref names in the account's region: the
// ARN in ID, a `<region>/<name>` ID, or Location and Name. A cluster of
// another region is not found through this account.
func (s *session) clusterName(ref providers.ClusterRef) (string, error) {
	region, name := ref.Location, ref.Name
	if ref.ID != "" {
		if m := clusterArnRE().FindStringSubmatch(ref.ID); m != nil {
			region, name = m[1], m[3]
		} else if r, n, ok := strings.Cut(ref.ID, "/"); ok {
			region, name = r, n
		} else {
			name = ref.ID
		}
	}
	if name == "" {
		return "", providers.Invalidf(s.op, "clusterRef", "cluster ref %+v names no cluster", ref)
	}
	if region != "" && region != s.cfg.Region {
		return "", providers.NotFoundf(s.op, "cluster %s is in %s; account %q reaches %s only", ref, region, s.acct.Name, s.cfg.Region)
	}
	return name, nil
}

var clusterStatus = map[ekstypes.ClusterStatus]providers.ClusterStatus{
	ekstypes.ClusterStatusCreating: providers.ClusterProvisioning,
	ekstypes.ClusterStatusPending:  providers.ClusterProvisioning,
	ekstypes.ClusterStatusActive:   providers.ClusterRunning,
	ekstypes.ClusterStatusUpdating: providers.ClusterUpdating,
	ekstypes.ClusterStatusDeleting: providers.ClusterDeleting,
	ekstypes.ClusterStatusFailed:   providers.ClusterError,
}

func (s *session) clusterView(c *ekstypes.Cluster) providers.Cluster {
	name, arn := sdkaws.ToString(c.Name), sdkaws.ToString(c.Arn)
	v := providers.Cluster{
		Ref:    providers.ClusterRef{Location: s.cfg.Region, Name: name, ID: arn},
		Status: clusterStatus[c.Status],
		Labels: maps.Clone(c.Tags),
		// The ARN is the same string whichever account reads the cluster.
		Outputs: providers.ClusterOutputs{Location: s.cfg.Region, GlobalID: arn},
	}
	if v.Status == "" {
		v.Status = providers.ClusterError
		v.Message = "EKS reports status " + string(c.Status)
	}
	if c.ResourcesVpcConfig != nil {
		v.PrivateNodes = c.ResourcesVpcConfig.EndpointPrivateAccess
	}
	if (c.Status == ekstypes.ClusterStatusActive || c.Status == ekstypes.ClusterStatusUpdating) && sdkaws.ToString(c.Endpoint) != "" {
		v.Outputs.Endpoint = sdkaws.ToString(c.Endpoint)
		v.Outputs.Version = sdkaws.ToString(c.Version)
		// Managed node groups made here take the cluster's version; EKS has
		// no cluster-wide node version to read.
		v.Outputs.NodeVersion = v.Outputs.Version
	}
	if c.Health != nil && len(c.Health.Issues) > 0 {
		var parts []string
		for _, i := range c.Health.Issues {
			parts = append(parts, string(i.Code)+": "+sdkaws.ToString(i.Message))
		}
		v.Message = strings.Join(parts, "; ")
	}
	return v
}

func (s *session) describeCluster(ctx context.Context, name string) (*ekstypes.Cluster, error) {
	out, err := s.eks.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: sdkaws.String(name)})
	if err != nil {
		return nil, s.fail("DescribeCluster", false, err)
	}
	return out.Cluster, nil
}

// EnsureCluster creates the cluster, or converges the one of that name:
// its tags are added, its version raised one minor at a time (EKS upgrades
// one minor per update; the journal calls again until the version is
// reached). It reads first, so that a create whose answer was lost is
// found rather than made again, whatever EKS does with a repeated token.
func (a *Adapter) EnsureCluster(ctx context.Context, acct providers.Account, spec providers.ClusterSpec) (providers.Cluster, error) {
	s, err := a.open(ctx, "EnsureCluster", acct)
	if err != nil {
		return providers.Cluster{}, err
	}
	if err := s.cfg.needs(acct, true, false, true); err != nil {
		return providers.Cluster{}, named(s.op, err)
	}
	if spec.Location != s.cfg.Region {
		if strings.HasPrefix(spec.Location, s.cfg.Region) {
			return providers.Cluster{}, providers.Invalidf(s.op, "location", "EKS clusters are regional: %q is a zone; use %q", spec.Location, s.cfg.Region)
		}
		return providers.Cluster{}, providers.Invalidf(s.op, "location", "account %q is in %s; it cannot make a cluster in %q", acct.Name, s.cfg.Region, spec.Location)
	}
	c, err := s.describeCluster(ctx, spec.Name)
	if errors.Is(err, providers.ErrNotFound) {
		c, err = s.createCluster(ctx, spec)
		if providers.ClassOf(err) == providers.Conflict {
			// Made meanwhile (a lost answer, another writer): converge it.
			c, err = s.describeCluster(ctx, spec.Name)
		} else if err == nil {
			return s.clusterView(c), nil
		}
	}
	if err != nil {
		return providers.Cluster{}, err
	}
	return s.converge(ctx, c, spec)
}

func (s *session) createCluster(ctx context.Context, spec providers.ClusterSpec) (*ekstypes.Cluster, error) {
	in := &eks.CreateClusterInput{
		Name:    sdkaws.String(spec.Name),
		RoleArn: sdkaws.String(s.cfg.EKSClusterRoleArn),
		ResourcesVpcConfig: &ekstypes.VpcConfigRequest{
			SubnetIds:             s.cfg.EKSSubnetIDs,
			EndpointPublicAccess:  sdkaws.Bool(true),
			EndpointPrivateAccess: sdkaws.Bool(spec.PrivateNodes),
		},
		// API: access entries work, and the creator is made admin by EKS
		// itself (bootstrapClusterCreatorAdminPermissions).
		AccessConfig: &ekstypes.CreateAccessConfigRequest{
			AuthenticationMode:                      ekstypes.AuthenticationModeApi,
			BootstrapClusterCreatorAdminPermissions: sdkaws.Bool(true),
		},
		Tags:               spec.Labels,
		ClientRequestToken: sdkaws.String(token("cluster", spec.ClientToken, s.cfg.Region, spec.Name, spec.Version, strconv.FormatBool(spec.PrivateNodes))),
	}
	if spec.Version != "" {
		in.Version = sdkaws.String(spec.Version)
	}
	out, err := s.eks.CreateCluster(ctx, in)
	if err != nil {
		return nil, s.fail("CreateCluster", true, err)
	}
	return out.Cluster, nil
}

// converge brings an existing cluster to the spec, in place.
func (s *session) converge(ctx context.Context, c *ekstypes.Cluster, spec providers.ClusterSpec) (providers.Cluster, error) {
	view := s.clusterView(c)
	if err := providers.MayConverge(s.op, spec, view); err != nil {
		return providers.Cluster{}, err
	}
	if c.Status == ekstypes.ClusterStatusDeleting {
		return providers.Cluster{}, providers.Errorf(s.op, providers.Conflict, providers.None, "cluster %s is being deleted; wait until it is gone", spec.Name)
	}
	if view.PrivateNodes != spec.PrivateNodes {
		return providers.Cluster{}, providers.Invalidf(s.op, "modeChange", "cluster %s has privateNodes %v (its endpoint's private access); the cluster's place never changes in place: make a new pool", spec.Name, view.PrivateNodes)
	}
	missing := map[string]string{}
	for k, v := range spec.Labels {
		if c.Tags[k] != v {
			missing[k] = v
		}
	}
	if len(missing) > 0 {
		if _, err := s.eks.TagResource(ctx, &eks.TagResourceInput{ResourceArn: c.Arn, Tags: missing}); err != nil {
			return providers.Cluster{}, s.fail("TagResource", true, err)
		}
		view.Labels = maps.Clone(c.Tags)
		if view.Labels == nil {
			view.Labels = map[string]string{}
		}
		maps.Copy(view.Labels, missing)
	}
	have := sdkaws.ToString(c.Version)
	if spec.Version == "" || spec.Version == have {
		return view, nil
	}
	cmp, next, ok := nextMinor(have, spec.Version)
	switch {
	case !ok:
		return providers.Cluster{}, providers.Invalidf(s.op, "version", "cluster %s runs %s; %q is not a Kubernetes minor version", spec.Name, have, spec.Version)
	case cmp == 0:
		return view, nil
	case cmp > 0:
		return providers.Cluster{}, providers.Invalidf(s.op, "downgrade", "cluster %s runs %s; it cannot go down to %s", spec.Name, have, spec.Version)
	case c.Status == ekstypes.ClusterStatusUpdating:
		return view, nil // an update is under way; the next call goes on
	case c.Status != ekstypes.ClusterStatusActive:
		return providers.Cluster{}, providers.Errorf(s.op, providers.Conflict, providers.None, "cluster %s is %s; it is upgraded once ACTIVE", spec.Name, c.Status)
	}
	out, err := s.eks.UpdateClusterVersion(ctx, &eks.UpdateClusterVersionInput{
		Name: sdkaws.String(spec.Name), Version: sdkaws.String(next),
		ClientRequestToken: sdkaws.String(token("version", spec.ClientToken, sdkaws.ToString(c.Arn), have, next)),
	})
	if err != nil {
		return providers.Cluster{}, s.fail("UpdateClusterVersion", true, err)
	}
	view.Status = providers.ClusterUpdating
	view.Message = fmt.Sprintf("upgrading from %s to %s", have, next)
	if out.Update != nil {
		view.Operation = sdkaws.ToString(out.Update.Id)
	}
	return view, nil
}

// nextMinor compares two minor versions (have against want) and gives
// the one step from have toward want when want is later.
func nextMinor(have, want string) (int, string, bool) {
	hm, hn, ok1 := parseMinor(have)
	wm, wn, ok2 := parseMinor(want)
	switch {
	case !ok1 || !ok2:
		return 0, "", false
	case hm > wm || (hm == wm && hn > wn):
		return 1, "", true
	case hm == wm && hn == wn:
		return 0, "", true
	case hm < wm:
		return -1, want, true // another major: EKS says what it allows
	}
	return -1, fmt.Sprintf("%d.%d", hm, hn+1), true
}

func parseMinor(v string) (int, int, bool) {
	a, b, ok := strings.Cut(v, ".")
	if !ok {
		return 0, 0, false
	}
	x, err1 := strconv.Atoi(a)
	y, err2 := strconv.Atoi(b)
	return x, y, err1 == nil && err2 == nil
}

// GetCluster reads a cluster.
func (a *Adapter) GetCluster(ctx context.Context, acct providers.Account, ref providers.ClusterRef) (providers.Cluster, error) {
	s, name, err := a.openCluster(ctx, "GetCluster", acct, ref)
	if err != nil {
		return providers.Cluster{}, err
	}
	c, err := s.describeCluster(ctx, name)
	if err != nil {
		return providers.Cluster{}, err
	}
	return s.clusterView(c), nil
}

// DeleteCluster starts deleting a cluster. EKS deletes a cluster only once
// its node groups are gone: when some remain, their deletes are started
// and the answer is a Conflict (reason "nodePoolsRemain") for the journal
// to call again later.
func (a *Adapter) DeleteCluster(ctx context.Context, acct providers.Account, ref providers.ClusterRef) (providers.Cluster, error) {
	s, name, err := a.openCluster(ctx, "DeleteCluster", acct, ref)
	if err != nil {
		return providers.Cluster{}, err
	}
	out, err := s.eks.DeleteCluster(ctx, &eks.DeleteClusterInput{Name: sdkaws.String(name)})
	if err == nil {
		return s.clusterView(out.Cluster), nil
	}
	err = s.fail("DeleteCluster", true, err)
	if providers.ClassOf(err) != providers.Conflict {
		return providers.Cluster{}, err
	}
	// Busy: being deleted already, still changing, or holding node groups.
	c, derr := s.describeCluster(ctx, name)
	if derr != nil {
		return providers.Cluster{}, derr
	}
	if c.Status == ekstypes.ClusterStatusDeleting {
		return s.clusterView(c), nil
	}
	groups, lerr := s.nodegroupNames(ctx, name)
	if lerr != nil {
		return providers.Cluster{}, lerr
	}
	if len(groups) == 0 {
		return providers.Cluster{}, err
	}
	started := 0
	for _, g := range groups {
		_, derr := s.eks.DeleteNodegroup(ctx, &eks.DeleteNodegroupInput{ClusterName: sdkaws.String(name), NodegroupName: sdkaws.String(g)})
		switch derr := s.failIf("DeleteNodegroup", derr); {
		case derr == nil:
			started++
		case providers.ClassOf(derr) == providers.Conflict || errors.Is(derr, providers.ErrNotFound):
			// Being deleted already, or gone.
		default:
			return providers.Cluster{}, derr
		}
	}
	side := providers.None
	if started > 0 {
		side = providers.Done
	}
	return providers.Cluster{}, &providers.Error{Op: s.op, Class: providers.Conflict, SideEffect: side, Reason: "nodePoolsRemain",
		Message: fmt.Sprintf("cluster %s still has node groups (%s), now being deleted; EKS deletes the cluster once they are gone", name, strings.Join(groups, ", "))}
}

func (s *session) failIf(call string, err error) error {
	if err == nil {
		return nil
	}
	return s.fail(call, true, err)
}

// ReadAdoptable reads a cluster by `<region>/<cluster name>`, and checks
// that the account's principal has an access entry with
// AmazonEKSClusterAdminPolicy on it: without one nothing could reach its
// API, so the plan is blocked with the commands that add it.
func (a *Adapter) ReadAdoptable(ctx context.Context, acct providers.Account, adoptID string) (providers.Cluster, error) {
	s, err := a.open(ctx, "ReadAdoptable", acct)
	if err != nil {
		return providers.Cluster{}, err
	}
	region, name, ok := strings.Cut(adoptID, "/")
	if !ok || region == "" || name == "" || strings.Contains(name, "/") {
		return providers.Cluster{}, providers.Invalidf(s.op, "adoptId", "EKS clusters are adopted as <region>/<cluster name>, not %q", adoptID)
	}
	if region != s.cfg.Region {
		return providers.Cluster{}, providers.NotFoundf(s.op, "cluster %s is in %s; account %q reaches %s only", adoptID, region, acct.Name, s.cfg.Region)
	}
	c, err := s.describeCluster(ctx, name)
	if err != nil {
		return providers.Cluster{}, err
	}
	if !a.cfg.GrantAccessOnAdopt {
		if err := s.checkAccess(ctx, c); err != nil {
			return providers.Cluster{}, err
		}
	}
	return s.clusterView(c), nil
}

// ListClusters lists the account's clusters that carry the tag labelKey.
// EKS lists names only, so each is described (a sweep costs one call per
// page and one per cluster), then their node groups' Auto Scaling groups
// are listed for the node pool revision (one call per 100 groups).
func (a *Adapter) ListClusters(ctx context.Context, acct providers.Account, labelKey string) ([]providers.Cluster, error) {
	s, err := a.open(ctx, "ListClusters", acct)
	if err != nil {
		return nil, err
	}
	var names []string
	p := eks.NewListClustersPaginator(s.eks, &eks.ListClustersInput{MaxResults: sdkaws.Int32(100)})
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			return nil, s.fail("ListClusters", false, err)
		}
		names = append(names, out.Clusters...)
	}
	var found []providers.Cluster
	for _, n := range names {
		c, err := s.describeCluster(ctx, n)
		if errors.Is(err, providers.ErrNotFound) {
			continue // deleted since it was listed
		}
		if err != nil {
			return nil, err
		}
		if _, ok := c.Tags[labelKey]; ok {
			found = append(found, s.clusterView(c))
		}
	}
	// The node groups' revision: one listing of their Auto Scaling groups
	// (revision.go). Without it the sweep reads the node groups.
	tagged := make([]string, len(found))
	for i, c := range found {
		tagged[i] = c.Ref.Name
	}
	if revs, err := s.groupRevisions(ctx, tagged); err == nil {
		for i := range found {
			found[i].NodePoolsRevision = revs[found[i].Ref.Name]
		}
	}
	slices.SortFunc(found, func(x, y providers.Cluster) int { return strings.Compare(x.Ref.String(), y.Ref.String()) })
	return found, nil
}
