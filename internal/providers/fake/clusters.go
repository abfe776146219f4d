package fake

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/fleet-agent/fleet-agent/internal/providers"
)

// dnsLabel is the shape of a cluster or node pool name: what every one of
// the real providers accepts.
var dnsLabel = regexp.MustCompile(`^[a-z]([-a-z0-9]*[a-z0-9])?$`)

// progress tells how far an operation has come: one step per observation,
// and with StepEvery one per interval of the injected clock.
func (f *Fake) finished(op *Operation) bool {
	op.Done = min(f.stepsDone(op), op.Steps)
	return op.Done >= op.Steps
}

func (f *Fake) stepsDone(op *Operation) int {
	n := op.Observed
	if f.cfg.ClockOnly && f.cfg.StepEvery > 0 {
		n = 0
	}
	if f.cfg.StepEvery > 0 {
		n += int(f.clock.Now().Sub(op.AcceptedAt) / f.cfg.StepEvery)
	}
	return n
}

func (f *Fake) newOp(kind string, steps int) *Operation {
	return &Operation{Kind: kind, Steps: steps, AcceptedAt: f.clock.Now()}
}

// settleCluster finishes the cluster's operation and its pools' when they
// are due, and reports whether the cluster still exists. Called with the lock held.
func (f *Fake) settleCluster(c *ClusterRecord) bool {
	if c.Op != nil && f.finished(c.Op) {
		f.settled(c.ID, c.Op)
		switch c.Op.Kind {
		case "delete":
			delete(f.st.Clusters, c.ID)
			delete(f.st.Grants, c.ID)
			return false
		case "update":
			c.Version = c.Op.Target
		}
		c.Status, c.Op = providers.ClusterRunning, nil
	}
	for _, name := range sortedKeys(c.NodePools) {
		f.settlePool(c, c.NodePools[name])
	}
	c.NodeVersion = nodeVersion(c)
	return true
}

// nodeVersion is the oldest version a cluster's nodes run: its pools'
// (which follow the control plane only when upgraded themselves), or the
// control plane's when it has none.
func nodeVersion(c *ClusterRecord) string {
	v := ""
	for _, p := range c.NodePools {
		pv := poolVersion(c, p)
		if v == "" || compareVersions(pv, v) < 0 {
			v = pv
		}
	}
	if v == "" {
		return c.Version
	}
	return v
}

// poolVersion is a pool's version; a pool recorded before pools had one
// runs what its cluster did when last read.
func poolVersion(c *ClusterRecord, p *NodePoolRecord) string {
	if p.Version != "" {
		return p.Version
	}
	if c.NodeVersion != "" {
		return c.NodeVersion
	}
	return c.Version
}

// nextClusterVersion is the one minor a control plane goes up toward
// want, as the real services take it: never two at once, never leaving a
// node pool's kubelets more than providers.MaxKubeletLag minors behind.
func (f *Fake) nextClusterVersion(c *ClusterRecord, want string) (string, error) {
	hx, hy, ok1 := providers.Minor(c.Version)
	wx, wy, ok2 := providers.Minor(want)
	if !ok1 || !ok2 || hx != wx {
		return "", providers.Invalidf("", "version", "cluster %s runs %s; %q is not a later minor of the same major", c.Name, c.Version, want)
	}
	next := want
	if wy > hy+1 {
		next = fmt.Sprintf("%d.%d", hx, hy+1)
	}
	if !slices.Contains(f.cfg.Versions, next) {
		return "", providers.Invalidf("", "version", "cluster %s goes one minor at a time and %s is not offered on the way to %s (offered: %s)", c.Name, next, want, strings.Join(f.cfg.Versions, ", "))
	}
	_, ny, _ := providers.Minor(next)
	for _, name := range sortedKeys(c.NodePools) {
		pv := poolVersion(c, c.NodePools[name])
		if _, py, ok := providers.Minor(pv); ok && ny-py > providers.MaxKubeletLag {
			return "", providers.Invalidf("", "versionSkew", "node pool %s runs %s: the control plane going to %s would leave its kubelets more than %d minors behind; upgrade the node pool first", name, pv, next, providers.MaxKubeletLag)
		}
	}
	return next, nil
}

func (f *Fake) settlePool(c *ClusterRecord, p *NodePoolRecord) bool {
	if p.Op == nil || !f.finished(p.Op) {
		return true
	}
	f.settled(c.ID, p.Op)
	if p.Op.Kind == "delete" {
		delete(c.NodePools, p.Name)
		return false
	}
	if p.Op.Kind == "upgrade" {
		p.Version, p.Operation = p.Op.Target, ""
	}
	p.Status, p.Op = providers.NodePoolRunning, nil
	return true
}

// observe counts one look at an operation.
func observe(op *Operation) {
	if op != nil {
		op.Observed++
	}
}

// Advance moves every operation one step, for tests that drive time by
// hand rather than by reading.
func (f *Fake) Advance() error {
	if err := f.lock(); err != nil {
		return err
	}
	defer f.unlock()
	for _, id := range sortedKeys(f.st.Clusters) {
		c := f.st.Clusters[id]
		observe(c.Op)
		for _, p := range c.NodePools {
			observe(p.Op)
		}
		f.settleCluster(c)
	}
	return f.persist()
}

// find looks a cluster up for an account: by ID when the ref has one, else
// by name within the account's project (and the ref's location, when it
// has one). Seeded clusters are visible to every account. It returns every
// cluster that matches (two or more only with `names: duplicate`). Called
// with the lock held.
func (f *Fake) find(a account, ref providers.ClusterRef) []*ClusterRecord {
	visible := func(c *ClusterRecord) bool {
		return (c.Seeded || c.Project == a.Project) && (ref.Location == "" || c.Location == ref.Location)
	}
	if ref.ID != "" {
		if c := f.st.Clusters[ref.ID]; c != nil && visible(c) && (ref.Name == "" || c.Name == ref.Name) {
			return []*ClusterRecord{c}
		}
		return nil
	}
	var hits []*ClusterRecord
	for _, id := range sortedKeys(f.st.Clusters) {
		c := f.st.Clusters[id]
		if c.Name == ref.Name && !c.Seeded && c.Project == a.Project && visible(c) {
			hits = append(hits, c)
		}
	}
	if len(hits) > 0 || ref.Location == "" {
		return hits
	}
	for _, id := range sortedKeys(f.st.Clusters) {
		if c := f.st.Clusters[id]; c.Seeded && c.Name == ref.Name && c.Location == ref.Location {
			return []*ClusterRecord{c}
		}
	}
	return nil
}

// findSettled finds a cluster and brings its operations up to date; nil
// when it does not exist (any more). A name that two clusters carry is a
// Conflict naming both ids, as the DOKS adapter answers: only an id tells
// them apart.
func (f *Fake) findSettled(a account, ref providers.ClusterRef) (*ClusterRecord, error) {
	var live []*ClusterRecord
	for _, c := range f.find(a, ref) {
		if f.settleCluster(c) {
			live = append(live, c)
		}
	}
	switch len(live) {
	case 0:
		return nil, nil
	case 1:
		return live[0], nil
	}
	ids := make([]string, len(live))
	for i, c := range live {
		ids[i] = c.ID
	}
	return nil, providers.Errorf("", providers.Conflict, providers.None, "%d clusters named %s in %s (%s): name the one meant by its id, or delete the extra ones",
		len(live), ref.Name, live[0].Location, strings.Join(ids, ", "))
}

// mustFind is findSettled with a missing cluster as NotFound.
func (f *Fake) mustFind(a account, ref providers.ClusterRef) (*ClusterRecord, error) {
	c, err := f.findSettled(a, ref)
	if err == nil && c == nil {
		err = providers.NotFoundf("", "cluster %s not found", ref)
	}
	return c, err
}

func endpointOf(id string) string { return "https://" + id[:8] + ".k8s.fake.invalid" }

func (f *Fake) view(c *ClusterRecord) providers.Cluster {
	v := providers.Cluster{
		Ref:          providers.ClusterRef{Location: c.Location, Name: c.Name, ID: c.ID},
		Status:       c.Status,
		PrivateNodes: c.PrivateNodes,
		Labels:       maps.Clone(c.Labels),
		Outputs:      providers.ClusterOutputs{Location: c.Location, GlobalID: "fake://clusters/" + c.ID},
	}
	if c.Status != providers.ClusterProvisioning {
		v.Outputs.Endpoint = endpointOf(c.ID)
		v.Outputs.Version = c.Version
		v.Outputs.NodeVersion = c.NodeVersion
	}
	if c.Op != nil {
		v.Message = c.Op.Kind + " in progress"
		if c.Op.Kind == "update" {
			v.Operation = c.Op.ID
		}
	} else if c.Message != "" {
		v.Message = c.Message
	}
	v.NodePoolsRevision = poolsRevision(c)
	return v
}

// poolsRevision is a digest of what a listing shows of a cluster's node
// pools, as GKE's and DOKS's cluster listings carry the pools themselves.
func poolsRevision(c *ClusterRecord) string {
	h := sha256.New()
	for _, name := range sortedKeys(c.NodePools) {
		data, _ := json.Marshal(poolView(c.NodePools[name]))
		h.Write(data)
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// compareVersions compares dotted numeric versions.
func compareVersions(a, b string) int {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < max(len(as), len(bs)); i++ {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if x != y {
			return x - y
		}
	}
	return 0
}

func addToken(tokens []string, t string) []string {
	if t == "" || slices.Contains(tokens, t) {
		return tokens
	}
	return append(tokens, t)
}

// EnsureCluster creates a cluster or converges the one of the same name in
// the account's project.
func (f *Fake) EnsureCluster(ctx context.Context, acct providers.Account, spec providers.ClusterSpec) (providers.Cluster, error) {
	a, fx, finish, err := f.callFault(ctx, "EnsureCluster", &acct)
	if err != nil {
		return providers.Cluster{}, err
	}
	if err := f.lockFor(ctx, "EnsureCluster"); err != nil {
		return providers.Cluster{}, err
	}
	defer f.unlock()
	c, err := f.ensureCluster(a, spec)
	if err != nil {
		return providers.Cluster{}, finish(err)
	}
	v := f.view(c)
	f.after(fx, c, "", false)
	if err := f.persist(); err != nil {
		return providers.Cluster{}, err
	}
	if fx.vanish {
		return v, finish(nil)
	}
	if fx.blank {
		return providers.Cluster{}, finish(nil)
	}
	return f.view(c), finish(nil)
}

func (f *Fake) ensureCluster(a account, spec providers.ClusterSpec) (*ClusterRecord, error) {
	if !dnsLabel.MatchString(spec.Name) || len(spec.Name) > 40 {
		return nil, providers.Invalidf("", "name", "cluster name %q must be a DNS label of at most 40 characters", spec.Name)
	}
	region := f.cfg.region(spec.Location)
	switch {
	case region == "":
		return nil, providers.Invalidf("", "location", "location %q does not exist", spec.Location)
	case region != spec.Location && !f.cfg.ZonalClusters:
		return nil, providers.Invalidf("", "location", "a cluster goes in a region, not the zone %q", spec.Location)
	}
	version := spec.Version
	if version == "" {
		version = f.cfg.DefaultVersion
	}
	if !slices.Contains(f.cfg.Versions, version) {
		return nil, providers.Invalidf("", "version", "version %q is not offered (offered: %s)", version, strings.Join(f.cfg.Versions, ", "))
	}
	var c *ClusterRecord
	if f.cfg.Names != NamesDuplicate {
		// A DOKS-like account never looks: every create makes a cluster.
		var err error
		if c, err = f.findSettled(a, providers.ClusterRef{Name: spec.Name}); err != nil {
			return nil, err
		}
	}
	if c != nil && f.cfg.Names == NamesConflict {
		e := providers.Errorf("", providers.Conflict, providers.None, "cluster %s already exists in %s (id %s)", spec.Name, c.Location, c.ID)
		e.Reason = "alreadyExists"
		return nil, e
	}
	if c == nil {
		c = &ClusterRecord{
			CreatedAt:    f.clock.Now(),
			ID:           f.nextID("cluster", a.Project+"/"+spec.Name),
			Project:      a.Project,
			Location:     spec.Location,
			Name:         spec.Name,
			PrivateNodes: spec.PrivateNodes,
			Version:      version,
			NodeVersion:  version,
			Labels:       maps.Clone(spec.Labels),
			Status:       providers.ClusterProvisioning,
			Op:           f.newOp("create", f.cfg.Steps.Cluster),
			ClientTokens: addToken(nil, spec.ClientToken),
			NodePools:    map[string]*NodePoolRecord{},
		}
		f.st.Clusters[c.ID] = c
		f.settleCluster(c)
		return c, nil
	}
	switch {
	case c.Status == providers.ClusterDeleting:
		return nil, providers.Errorf("", providers.Conflict, providers.None, "cluster %s is being deleted", spec.Name)
	case c.Location != spec.Location || c.PrivateNodes != spec.PrivateNodes:
		return nil, providers.Invalidf("", "modeChange", "cluster %s is in %s with privateNodes %v; its location and privateNodes never change in place", spec.Name, c.Location, c.PrivateNodes)
	}
	c.ClientTokens = addToken(c.ClientTokens, spec.ClientToken)
	if spec.Labels != nil {
		c.Labels = maps.Clone(spec.Labels)
	}
	if spec.Version == "" || spec.Version == c.Version {
		return c, nil
	}
	if compareVersions(spec.Version, c.Version) < 0 {
		return nil, providers.Invalidf("", "downgrade", "cluster %s runs %s; it cannot go down to %s", spec.Name, c.Version, spec.Version)
	}
	next, err := f.nextClusterVersion(c, spec.Version)
	if err != nil {
		return nil, err
	}
	if c.Op != nil {
		if c.Op.Kind == "update" && c.Op.Target == next {
			return c, nil // the hop under way; the next call goes on
		}
		return nil, providers.Errorf("", providers.Conflict, providers.None, "cluster %s: a %s is in progress", spec.Name, c.Op.Kind)
	}
	if busy := slices.IndexFunc(sortedKeys(c.NodePools), func(n string) bool { return c.NodePools[n].Op != nil }); busy >= 0 {
		return nil, providers.Errorf("", providers.Conflict, providers.None, "cluster %s: node pool %s has a change in progress; the control plane is upgraded once it is done", spec.Name, sortedKeys(c.NodePools)[busy])
	}
	c.Status = providers.ClusterUpdating
	c.Op = f.newOp("update", f.cfg.Steps.Update)
	c.Op.Target, c.Op.ID = next, f.nextID("upgrade", c.ID+"/"+next)
	f.settleCluster(c)
	return c, nil
}

// GetCluster reads a cluster; each read moves its operation one step.
func (f *Fake) GetCluster(ctx context.Context, acct providers.Account, ref providers.ClusterRef) (providers.Cluster, error) {
	a, finish, err := f.call(ctx, "GetCluster", &acct)
	if err != nil {
		return providers.Cluster{}, err
	}
	// Runs after the unlock: the pools' Nodes follow what this saw.
	defer f.syncNodesQuiet(ctx)
	if err := f.lockFor(ctx, "GetCluster"); err != nil {
		return providers.Cluster{}, err
	}
	defer f.unlock()
	return f.observeCluster(a, ref, finish)
}

func (f *Fake) observeCluster(a account, ref providers.ClusterRef, finish func(error) error) (providers.Cluster, error) {
	c, err := f.findSettled(a, ref)
	if err != nil {
		return providers.Cluster{}, finish(err)
	}
	if c != nil {
		observe(c.Op)
		if !f.settleCluster(c) {
			c = nil
		}
	}
	if err := f.persist(); err != nil {
		return providers.Cluster{}, err
	}
	if c == nil {
		return providers.Cluster{}, finish(providers.NotFoundf("", "cluster %s not found", ref))
	}
	return f.view(c), finish(nil)
}

// DeleteCluster starts deleting a cluster and its node pools.
func (f *Fake) DeleteCluster(ctx context.Context, acct providers.Account, ref providers.ClusterRef) (providers.Cluster, error) {
	a, fx, finish, err := f.callFault(ctx, "DeleteCluster", &acct)
	if err != nil {
		f.vanishNow(fx, a, ref, "")
		return providers.Cluster{}, err
	}
	if err := f.lockFor(ctx, "DeleteCluster"); err != nil {
		return providers.Cluster{}, err
	}
	defer f.unlock()
	c, err := f.mustFind(a, ref)
	if err != nil {
		return providers.Cluster{}, finish(err)
	}
	if c.Status != providers.ClusterDeleting {
		c.Status = providers.ClusterDeleting
		c.Op = f.newOp("delete", f.cfg.Steps.Delete)
	}
	v := f.view(c)
	f.after(fx, c, "", true)
	f.settleCluster(c)
	if err := f.persist(); err != nil {
		return providers.Cluster{}, err
	}
	return v, finish(nil)
}

// ReadAdoptable reads a cluster by its adopt id: `<location>/<name>` or its
// ID.
func (f *Fake) ReadAdoptable(ctx context.Context, acct providers.Account, adoptID string) (providers.Cluster, error) {
	a, finish, err := f.call(ctx, "ReadAdoptable", &acct)
	if err != nil {
		return providers.Cluster{}, err
	}
	ref := providers.ClusterRef{ID: adoptID}
	if loc, name, ok := strings.Cut(adoptID, "/"); ok {
		ref = providers.ClusterRef{Location: loc, Name: name}
	}
	if err := f.lockFor(ctx, "ReadAdoptable"); err != nil {
		return providers.Cluster{}, err
	}
	defer f.unlock()
	return f.observeCluster(a, ref, finish)
}

// SeedAdoptable adds a cluster made by someone else, running, with its own
// node pools. Seeding the same location and name again returns the first.
func (f *Fake) SeedAdoptable(s SeedCluster) (providers.Cluster, error) {
	if err := f.lock(); err != nil {
		return providers.Cluster{}, err
	}
	defer f.unlock()
	c, err := f.seed(s)
	if err != nil {
		return providers.Cluster{}, err
	}
	if err := f.persist(); err != nil {
		return providers.Cluster{}, err
	}
	return f.view(c), nil
}

// seed adds a seeded cluster. Called with the lock held.
func (f *Fake) seed(s SeedCluster) (*ClusterRecord, error) {
	probe := f.cfg
	probe.Adoptable, probe.Faults = []SeedCluster{s}, nil
	if err := probe.validate(); err != nil {
		return nil, err
	}
	for _, c := range f.st.Clusters {
		if c.Seeded && c.Location == s.Location && c.Name == s.Name {
			return c, nil
		}
	}
	version := s.Version
	if version == "" {
		version = f.cfg.DefaultVersion
	}
	// Seeds derive their id from what they are, not from the sequence, so
	// that the same config seeds the same ids whatever ran before.
	c := &ClusterRecord{
		ID: deriveID("seed:" + s.Location + "/" + s.Name), Location: s.Location, Name: s.Name,
		PrivateNodes: s.PrivateNodes, Version: version, NodeVersion: version,
		Status: providers.ClusterRunning, Seeded: true, NodePools: map[string]*NodePoolRecord{},
	}
	region := f.cfg.region(s.Location)
	for _, p := range s.NodePools {
		m, _ := f.cfg.machineType(region, p.MachineType)
		np := &NodePoolRecord{Seeded: true, NodePool: providers.NodePool{
			Name: p.Name, ID: deriveID("seed:" + s.Location + "/" + s.Name + "/" + p.Name),
			Shape:  providers.Shape{MachineType: p.MachineType, Accelerators: describe(m, s.Location).Accelerators, DiskGiB: defaultDiskGiB, Zones: f.cfg.zonesOf(region)},
			Size:   providers.Size{NodeCount: p.NodeCount},
			Labels: maps.Clone(p.Labels), Status: providers.NodePoolRunning,
		}}
		c.NodePools[p.Name] = np
	}
	f.st.Clusters[c.ID] = c
	return c, nil
}

// ListClusters lists the account's clusters (seeded ones included) that
// carry the label key; with listLag, as they were that long ago. A listing is a look, but not at one operation: it
// settles what is due without moving any operation a step, so a sweep does
// not speed up the clusters it looks at.
func (f *Fake) ListClusters(ctx context.Context, acct providers.Account, labelKey string) ([]providers.Cluster, error) {
	a, finish, err := f.call(ctx, "ListClusters", &acct)
	if err != nil {
		return nil, err
	}
	if err := f.lockFor(ctx, "ListClusters"); err != nil {
		return nil, err
	}
	defer f.unlock()
	var out []providers.Cluster
	for _, id := range sortedKeys(f.st.Clusters) {
		c := f.st.Clusters[id]
		if !c.Seeded && c.Project != a.Project {
			continue
		}
		if !f.settleCluster(c) {
			continue
		}
		if _, ok := c.Labels[labelKey]; ok {
			out = append(out, f.view(c))
		}
	}
	if err := f.persist(); err != nil {
		return nil, err
	}
	if f.cfg.ListLag > 0 {
		return f.laggedClusters(a, labelKey), finish(nil)
	}
	slices.SortFunc(out, func(x, y providers.Cluster) int { return strings.Compare(x.Ref.String(), y.Ref.String()) })
	return out, finish(nil)
}
