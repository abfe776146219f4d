// Package conformance holds what the substrate needs of any Kubernetes
// provider, as Go subtests that every adapter runs against its own harness
// (an HTTP emulator, or the fake itself):
//
//	func TestConformance(t *testing.T) {
//		conformance.Run(t, func(t *testing.T) conformance.Subject {
//			emu := newEmulator(t)
//			return conformance.Subject{Provider: ..., Account: ..., Location: "us-east-1", ...}
//		})
//	}
//
// Each case gets a fresh Subject, so cases never see each other's clusters.
// The subject speaks the provider's vocabulary (location, machine types,
// accelerators); the cases do the rest.
package conformance

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/providers"
)

// Options are where the provider differs in ways the cases must know.
type Options struct {
	// ZeroNodes: a fixed-size node pool may have NodeCount 0. When false it
	// must be refused as Invalid, while autoscaling from 0 stays allowed.
	ZeroNodes bool
	// Spot: Spot node pools exist. When false a Spot pool must be refused as
	// Invalid.
	Spot bool
}

// Subject is one provider under test, with its vocabulary.
type Subject struct {
	Provider providers.Kubernetes
	// Account is the provider account the cases use; its Config is what an
	// owner would write in the document.
	Account providers.Account
	// SecondAccount, when set, reaches the same clusters through another
	// account: the adoption case checks both read the same GlobalID.
	SecondAccount *providers.Account
	// Location is where clusters are created (a region, or a zone where the
	// provider allows one).
	Location string
	// Version is the Kubernetes version to create with; "" is the default.
	Version string
	// UpgradeTo is a later version for the upgrade case; "" skips it.
	UpgradeTo string
	// OldVersion is offered and two minors before UpgradeTo, for the cases
	// that upgrade a cluster and its node pools over more than one minor;
	// "" skips them.
	OldVersion string
	// SkewVersions are five consecutive minors the subject offers, oldest
	// first, for the case that leaves a node pool three minors behind its
	// control plane and is refused a fourth; nil skips it (DOKS: its
	// nodes follow the cluster's version).
	SkewVersions []string
	// NodePool is a CPU node pool: MachineType and NodeCount (at least 1).
	// The cases set Name, Labels, Spot and ClientToken.
	NodePool providers.NodePoolSpec
	// GPUNodePool is a GPU node pool, with Accelerators as the provider
	// names them.
	GPUNodePool providers.NodePoolSpec
	// Accepts reports whether the cluster endpoint accepts a credential.
	Accepts func(providers.Credential) bool
	Options Options
	// Adoptable is the adopt id of a cluster made outside the cases, with at
	// least one node pool of its own; "" skips the adoption case.
	Adoptable string
	// MissingAdoptID is an adopt id that names nothing; default
	// `<Location>/fa-conf-missing`.
	MissingAdoptID string
	// Advance moves the provider's asynchronous operations one step, for
	// emulators that do not move on reads alone; nil when reads suffice.
	Advance func()
	// Now is the clock credentials expire on; nil is the wall clock.
	Now func() time.Time
	// PoolID is the substrate pool id the node pools are labelled and named
	// after; the default is a well-formed pool id.
	PoolID string
	// MaxPolls bounds each wait for an operation; default 100.
	MaxPolls int
	// UpgradeIDs: the provider names each upgrade it starts (EKS's update
	// ids, GKE's operations, the fake's), and the call that starts one
	// answers with it; DOKS gives its upgrades no id.
	UpgradeIDs bool
	// NodeProviderIDs names the spec.providerID of every Node a node pool
	// has now, as the provider's emulator knows them (the Kubernetes Nodes
	// the kubelets would register), in the order the provider made them, so
	// that the last of a pool's zones' count are one per zone; nil skips
	// the cases that remove chosen nodes. The Provider must then be a
	// providers.NodeRemover.
	NodeProviderIDs func(cluster providers.ClusterRef, pool string) ([]string, error)
}

func (s *Subject) defaults(t *testing.T) {
	t.Helper()
	if s.Provider == nil || s.Location == "" || s.NodePool.MachineType == "" || s.GPUNodePool.MachineType == "" || s.GPUNodePool.Accelerators == nil || s.Accepts == nil {
		t.Fatal("conformance: the subject needs Provider, Location, NodePool, GPUNodePool with Accelerators and Accepts")
	}
	if s.NodePool.NodeCount < 1 {
		s.NodePool.NodeCount = 1
	}
	if s.GPUNodePool.NodeCount < 1 {
		s.GPUNodePool.NodeCount = 1
	}
	if s.MissingAdoptID == "" {
		s.MissingAdoptID = s.Location + "/fa-conf-missing"
	}
	if s.Now == nil {
		s.Now = time.Now
	}
	if s.PoolID == "" {
		s.PoolID = "pool_conformanceconformanceabcd"
	}
	if s.MaxPolls == 0 {
		s.MaxPolls = 100
	}
}

// Case is one conformance case.
type Case struct {
	Name string
	Run  func(t *testing.T, s *Subject)
}

// Run runs every case as a subtest, each with a subject of its own.
func Run(t *testing.T, newSubject func(t *testing.T) Subject) {
	for _, c := range Cases() {
		t.Run(c.Name, func(t *testing.T) {
			s := newSubject(t)
			s.defaults(t)
			c.Run(t, &s)
		})
	}
}

// Cases lists the cases, in the order Run runs them.
func Cases() []Case {
	return []Case{
		{"VerifyAndRules", verifyAndRules},
		{"MachineTypes", machineTypes},
		{"MissingIsNotFound", missingIsNotFound},
		{"CreateIdempotent", createIdempotent},
		{"ModeNeverChangesInPlace", modeNeverChanges},
		{"UpgradeInPlace", upgradeInPlace},
		{"UpgradeOneMinorPerStep", upgradeOneMinorPerStep},
		{"KubeletsAtMostThreeMinorsBehind", kubeletsAtMostThreeBehind},
		{"LabelledGPUNodePool", labelledGPUNodePool},
		{"SpotNodePool", spotNodePool},
		{"ResizeInPlace", resizeInPlace},
		{"RemoveNodesShrinksByThoseNodes", removeNodesShrinksByThoseNodes},
		{"ShapeNeverChangesInPlace", shapeNeverChanges},
		{"ReplaceNodePoolBeside", replaceNodePoolBeside},
		{"DiskAndZonesAsRulesSay", diskAndZones},
		{"ZeroNodes", zeroNodes},
		{"Credentials", credentials},
		{"DeleteTwice", deleteTwice},
		{"DeleteWithNodePools", deleteWithNodePools},
		{"ClusterLocationKinds", clusterLocationKinds},
		{"ListByLabel", listByLabel},
		{"AdoptAndExtend", adoptAndExtend},
	}
}

// --- helpers ---

func (s *Subject) clusterSpec(name string) providers.ClusterSpec {
	return providers.ClusterSpec{
		Name: name, Location: s.Location, Version: s.Version,
		Labels:      map[string]string{providers.LabelSubstratePool: s.PoolID},
		ClientToken: "conformance:" + name,
	}
}

func (s *Subject) waitCluster(t *testing.T, ref providers.ClusterRef, what string, done func(providers.Cluster, error) bool) providers.Cluster {
	t.Helper()
	var c providers.Cluster
	var err error
	for range s.MaxPolls {
		if s.Advance != nil {
			s.Advance()
		}
		c, err = s.Provider.GetCluster(t.Context(), s.Account, ref)
		if done(c, err) {
			return c
		}
		if err != nil && !providers.Retryable(err) && !errors.Is(err, providers.ErrNotFound) {
			t.Fatalf("waiting for cluster %s to be %s: %v", ref, what, err)
		}
	}
	t.Fatalf("cluster %s not %s after %d reads: last %+v, %v", ref, what, s.MaxPolls, c, err)
	return c
}

func running(c providers.Cluster, err error) bool {
	return err == nil && c.Status == providers.ClusterRunning
}

// readyCluster creates a cluster and waits for it to run.
func (s *Subject) readyCluster(t *testing.T, name string) providers.Cluster {
	t.Helper()
	c, err := s.Provider.EnsureCluster(t.Context(), s.Account, s.clusterSpec(name))
	if err != nil {
		t.Fatalf("EnsureCluster %s: %v", name, err)
	}
	return s.waitCluster(t, c.Ref, "running", running)
}

func (s *Subject) waitPool(t *testing.T, ref providers.ClusterRef, name, what string, done func(providers.NodePool, error) bool) providers.NodePool {
	t.Helper()
	var p providers.NodePool
	var err error
	for range s.MaxPolls {
		if s.Advance != nil {
			s.Advance()
		}
		p, err = s.Provider.GetNodePool(t.Context(), s.Account, ref, name)
		if done(p, err) {
			return p
		}
		if err != nil && !providers.Retryable(err) && !errors.Is(err, providers.ErrNotFound) {
			t.Fatalf("waiting for node pool %s to be %s: %v", name, what, err)
		}
	}
	t.Fatalf("node pool %s not %s after %d reads: last %+v, %v", name, what, s.MaxPolls, p, err)
	return p
}

func poolRunning(p providers.NodePool, err error) bool {
	return err == nil && p.Status == providers.NodePoolRunning
}

func gone[T any](_ T, err error) bool { return errors.Is(err, providers.ErrNotFound) }

// pool makes the spec of one of our flavors' node pools.
func (s *Subject) pool(base providers.NodePoolSpec, flavor string, spot bool) providers.NodePoolSpec {
	p := base
	p.Name = providers.NodePoolName(s.PoolID, flavor)
	p.Spot = spot
	p.Labels = providers.PoolLabels(s.PoolID, spot)
	p.ClientToken = "conformance:" + p.Name
	p.Zones = slices.Clone(base.Zones)
	return p
}

func (s *Subject) readyPool(t *testing.T, ref providers.ClusterRef, spec providers.NodePoolSpec) providers.NodePool {
	t.Helper()
	if _, err := s.Provider.EnsureNodePool(t.Context(), s.Account, ref, spec); err != nil {
		t.Fatalf("EnsureNodePool %s: %v", spec.Name, err)
	}
	return s.waitPool(t, ref, spec.Name, "running", poolRunning)
}

// refusedInvalid checks that err is an Invalid refusal that did nothing.
func refusedInvalid(t *testing.T, what string, err error) {
	t.Helper()
	if providers.ClassOf(err) != providers.Invalid {
		t.Fatalf("%s: want an Invalid error, got %v (class %q)", what, err, providers.ClassOf(err))
	}
	if se := providers.SideEffectOf(err); se != providers.None {
		t.Fatalf("%s: a refusal must have no side effect, got %q", what, se)
	}
}

func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

func sameAccelerators(a, b *providers.Accelerators) bool {
	if a == nil || a.Count == 0 {
		return b == nil || b.Count == 0
	}
	return b != nil && *a == *b
}

// --- cases ---

// verifyAndRules: the account verifies, the location is one of the
// account's and of a kind a cluster may take, and the rules agree with the
// options the subject declares.
func verifyAndRules(t *testing.T, s *Subject) {
	ctx := t.Context()
	if err := s.Provider.Verify(ctx, s.Account); err != nil {
		t.Fatalf("Verify: %v", err)
	}
	rules, err := s.Provider.Rules(ctx, s.Account)
	if err != nil {
		t.Fatalf("Rules: %v", err)
	}
	if rules.ZeroNodes != s.Options.ZeroNodes || rules.Spot != s.Options.Spot {
		t.Errorf("Rules say zeroNodes %v spot %v; the subject says %v %v", rules.ZeroNodes, rules.Spot, s.Options.ZeroNodes, s.Options.Spot)
	}
	locs, err := s.Provider.Locations(ctx, s.Account)
	if err != nil {
		t.Fatalf("Locations: %v", err)
	}
	i := slices.IndexFunc(locs, func(l providers.Location) bool { return l.Name == s.Location })
	if i < 0 {
		t.Fatalf("Locations does not list %s: %+v", s.Location, locs)
	}
	if !rules.AllowsClusterIn(locs[i].Kind) {
		t.Errorf("location %s is a %s, which the rules do not allow a cluster in (%v)", s.Location, locs[i].Kind, rules.ClusterLocations)
	}
}

// machineTypes: the live check of a flavor: the CPU type has no GPUs, the
// GPU type has exactly the subject's accelerators.
func machineTypes(t *testing.T, s *Subject) {
	ctx := t.Context()
	cpu, err := s.Provider.MachineType(ctx, s.Account, s.Location, s.NodePool.MachineType)
	if err != nil {
		t.Fatalf("MachineType %s: %v", s.NodePool.MachineType, err)
	}
	if cpu.Name != s.NodePool.MachineType || !sameAccelerators(cpu.Accelerators, s.NodePool.Accelerators) {
		t.Errorf("MachineType %s = %+v", s.NodePool.MachineType, cpu)
	}
	gpu, err := s.Provider.MachineType(ctx, s.Account, s.Location, s.GPUNodePool.MachineType)
	if err != nil {
		t.Fatalf("MachineType %s: %v", s.GPUNodePool.MachineType, err)
	}
	if !sameAccelerators(s.GPUNodePool.Accelerators, gpu.Accelerators) {
		t.Errorf("MachineType %s has %+v, want %+v", gpu.Name, gpu.Accelerators, s.GPUNodePool.Accelerators)
	}
}

// missingIsNotFound: a read of something that does not exist is
// ErrNotFound, never a zero value.
func missingIsNotFound(t *testing.T, s *Subject) {
	ctx := t.Context()
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, providers.ErrNotFound) || providers.ClassOf(err) != providers.NotFound {
			t.Errorf("%s: want ErrNotFound, got %v", what, err)
		}
	}
	_, err := s.Provider.GetCluster(ctx, s.Account, providers.ClusterRef{Location: s.Location, Name: "fa-conf-missing"})
	check("GetCluster", err)
	_, err = s.Provider.ReadAdoptable(ctx, s.Account, s.MissingAdoptID)
	check("ReadAdoptable", err)
	_, err = s.Provider.MachineType(ctx, s.Account, s.Location, "fa-conf-no-such-type")
	check("MachineType", err)
	_, err = s.Provider.DeleteCluster(ctx, s.Account, providers.ClusterRef{Location: s.Location, Name: "fa-conf-missing"})
	check("DeleteCluster", err)
	c := s.readyCluster(t, "fa-conf-missing-pool")
	_, err = s.Provider.GetNodePool(ctx, s.Account, c.Ref, "fa-conf-missing")
	check("GetNodePool", err)
}

// createIdempotent: creating twice makes one cluster; a read by location
// and name alone (what the journal has after a crash) finds it; a running
// cluster has its outputs, and they are stable.
func createIdempotent(t *testing.T, s *Subject) {
	ctx := t.Context()
	spec := s.clusterSpec("fa-conf-create")
	first, err := s.Provider.EnsureCluster(ctx, s.Account, spec)
	if err != nil {
		t.Fatalf("EnsureCluster: %v", err)
	}
	second, err := s.Provider.EnsureCluster(ctx, s.Account, spec)
	if err != nil {
		t.Fatalf("EnsureCluster again: %v", err)
	}
	if second.Ref.ID != first.Ref.ID || second.Ref.Name != spec.Name {
		t.Fatalf("EnsureCluster twice gave two clusters: %+v, %+v", first.Ref, second.Ref)
	}
	byName := providers.ClusterRef{Location: spec.Location, Name: spec.Name}
	c := s.waitCluster(t, byName, "running", running)
	if c.Ref.ID != first.Ref.ID {
		t.Errorf("read by name found %+v, created %+v", c.Ref, first.Ref)
	}
	o := c.Outputs
	if !strings.HasPrefix(o.Endpoint, "https://") || o.Version == "" || o.NodeVersion == "" || o.GlobalID == "" || o.Location != s.Location {
		t.Fatalf("running cluster's outputs incomplete: %+v", o)
	}
	if s.Version != "" && !strings.HasPrefix(o.Version, s.Version) {
		t.Errorf("version %s, asked for %s", o.Version, s.Version)
	}
	again, err := s.Provider.EnsureCluster(ctx, s.Account, spec)
	if err != nil {
		t.Fatalf("EnsureCluster of a running cluster: %v", err)
	}
	if again.Ref.ID != c.Ref.ID || again.Outputs.GlobalID != o.GlobalID {
		t.Errorf("EnsureCluster of a running cluster changed it: %+v, was %+v", again, c)
	}
	c2 := s.waitCluster(t, c.Ref, "running", running)
	if c2.Outputs != o {
		t.Errorf("outputs moved without a change: %+v, was %+v", c2.Outputs, o)
	}
}

// modeNeverChanges: asking for another mode (privateNodes) of an existing
// cluster is refused and changes nothing.
func modeNeverChanges(t *testing.T, s *Subject) {
	c := s.readyCluster(t, "fa-conf-mode")
	spec := s.clusterSpec("fa-conf-mode")
	spec.PrivateNodes = !c.PrivateNodes
	_, err := s.Provider.EnsureCluster(t.Context(), s.Account, spec)
	refusedInvalid(t, "privateNodes changed in place", err)
	after := s.waitCluster(t, c.Ref, "running", running)
	if after.PrivateNodes != c.PrivateNodes || after.Ref.ID != c.Ref.ID {
		t.Errorf("the refused change left %+v, was %+v", after, c)
	}
}

// upgradeInPlace: a later version upgrades the same cluster.
func upgradeInPlace(t *testing.T, s *Subject) {
	if s.UpgradeTo == "" {
		t.Skip("the subject names no version to upgrade to")
	}
	c := s.readyCluster(t, "fa-conf-upgrade")
	spec := s.clusterSpec("fa-conf-upgrade")
	spec.Version = s.UpgradeTo
	spec.ClientToken += ":upgrade"
	up, err := s.Provider.EnsureCluster(t.Context(), s.Account, spec)
	if err != nil {
		t.Fatalf("EnsureCluster with version %s: %v", s.UpgradeTo, err)
	}
	if up.Ref.ID != c.Ref.ID {
		t.Fatalf("an upgrade made another cluster: %+v, was %+v", up.Ref, c.Ref)
	}
	after := s.waitCluster(t, c.Ref, "upgraded", func(c providers.Cluster, err error) bool {
		return running(c, err) && strings.HasPrefix(c.Outputs.Version, s.UpgradeTo)
	})
	if after.Outputs.GlobalID != c.Outputs.GlobalID || after.Outputs.Endpoint == "" {
		t.Errorf("the upgrade changed the cluster's identity: %+v, was %+v", after.Outputs, c.Outputs)
	}
}

// upgradeOneMinorPerStep: a cluster and its node pool asked for a version
// two minors on go there one minor per step, the control plane first: a
// pool is never asked past its control plane (Conflict, nothing done), a
// step asked again while it runs starts nothing new, each pool reports the
// version it runs, and downgrades are refused.
func upgradeOneMinorPerStep(t *testing.T, s *Subject) {
	if s.OldVersion == "" || s.UpgradeTo == "" {
		t.Skip("the subject names no versions two minors apart")
	}
	ctx := t.Context()
	spec := s.clusterSpec("fa-conf-hops")
	spec.Version = s.OldVersion
	c, err := s.Provider.EnsureCluster(ctx, s.Account, spec)
	if err != nil {
		t.Fatalf("EnsureCluster at %s: %v", s.OldVersion, err)
	}
	s.waitCluster(t, c.Ref, "running", running)
	pool := s.pool(s.NodePool, "hops", false)
	if p := s.readyPool(t, c.Ref, pool); !strings.HasPrefix(p.Version, s.OldVersion) {
		t.Errorf("a new pool on a %s cluster reports version %q", s.OldVersion, p.Version)
	}
	ox, oy, _ := providers.Minor(s.OldVersion)
	middle := fmt.Sprintf("%d.%d", ox, oy+1)

	for i, hop := range []string{middle, s.UpgradeTo} {
		// The pool may not pass its control plane.
		ahead := pool
		ahead.Version = hop
		if _, err := s.Provider.EnsureNodePool(ctx, s.Account, c.Ref, ahead); providers.ClassOf(err) != providers.Conflict || providers.SideEffectOf(err) != providers.None {
			t.Fatalf("hop %d: a pool asked for %s before its control plane: %v, want Conflict that did nothing", i+1, hop, err)
		}
		up := spec
		up.Version, up.ClientToken = s.UpgradeTo, spec.ClientToken+":to:"+s.UpgradeTo
		started, err := s.Provider.EnsureCluster(ctx, s.Account, up)
		if err != nil {
			t.Fatalf("hop %d: EnsureCluster toward %s: %v", i+1, s.UpgradeTo, err)
		}
		if s.UpgradeIDs && started.Status == providers.ClusterUpdating && started.Operation == "" {
			t.Errorf("hop %d: the call that started the control plane's upgrade names no operation", i+1)
		}
		// Asked again while the hop runs, the provider starts nothing new
		// (or says it is busy); a hop already done is not "running".
		if now, err := s.Provider.GetCluster(ctx, s.Account, c.Ref); err == nil && now.Status == providers.ClusterUpdating {
			if _, err := s.Provider.EnsureCluster(ctx, s.Account, up); err != nil && (providers.ClassOf(err) != providers.Conflict || providers.SideEffectOf(err) != providers.None) {
				t.Fatalf("hop %d: EnsureCluster again while the hop runs: %v", i+1, err)
			}
		}
		got := s.waitCluster(t, c.Ref, "upgraded to "+hop, func(c providers.Cluster, err error) bool {
			return running(c, err) && strings.HasPrefix(c.Outputs.Version, hop)
		})
		if strings.HasPrefix(got.Outputs.Version, s.UpgradeTo) && hop != s.UpgradeTo {
			t.Fatalf("hop %d went from %s straight to %s", i+1, s.OldVersion, got.Outputs.Version)
		}
		pool.Version = hop
		startedPool, err := s.Provider.EnsureNodePool(ctx, s.Account, c.Ref, pool)
		if err != nil {
			t.Fatalf("hop %d: EnsureNodePool to %s: %v", i+1, hop, err)
		}
		if s.UpgradeIDs && startedPool.Status == providers.NodePoolUpdating && startedPool.Operation == "" {
			t.Errorf("hop %d: the call that started the node pool's upgrade names no operation", i+1)
		}
		if _, err := s.Provider.EnsureNodePool(ctx, s.Account, c.Ref, pool); err != nil && providers.ClassOf(err) != providers.Conflict {
			t.Fatalf("hop %d: EnsureNodePool again while the pool upgrades: %v", i+1, err)
		}
		p := s.waitPool(t, c.Ref, pool.Name, "upgraded to "+hop, func(p providers.NodePool, err error) bool {
			return poolRunning(p, err) && strings.HasPrefix(p.Version, hop)
		})
		if p.Operation != "" {
			t.Errorf("hop %d: a settled pool reports operation %q", i+1, p.Operation)
		}
	}
	down := pool
	down.Version = s.OldVersion
	_, err = s.Provider.EnsureNodePool(ctx, s.Account, c.Ref, down)
	refusedInvalid(t, "a node pool downgrade", err)
	back := spec
	back.Version = s.OldVersion
	_, err = s.Provider.EnsureCluster(ctx, s.Account, back)
	refusedInvalid(t, "a control plane downgrade", err)
}

// labelledGPUNodePool: a GPU pool carries our labels and its accelerators;
// ensuring it twice makes one pool.
func labelledGPUNodePool(t *testing.T, s *Subject) {
	ctx := t.Context()
	c := s.readyCluster(t, "fa-conf-gpu")
	spec := s.pool(s.GPUNodePool, "gpu", false)
	first, err := s.Provider.EnsureNodePool(ctx, s.Account, c.Ref, spec)
	if err != nil {
		t.Fatalf("EnsureNodePool: %v", err)
	}
	second, err := s.Provider.EnsureNodePool(ctx, s.Account, c.Ref, spec)
	if err != nil {
		t.Fatalf("EnsureNodePool again: %v", err)
	}
	if first.Name != spec.Name || second.Name != spec.Name || first.ID != second.ID {
		t.Fatalf("EnsureNodePool twice: %+v, %+v", first, second)
	}
	p := s.waitPool(t, c.Ref, spec.Name, "running", poolRunning)
	pools, err := s.Provider.ListNodePools(ctx, s.Account, c.Ref)
	if err != nil {
		t.Fatalf("ListNodePools: %v", err)
	}
	var listed []string
	for _, lp := range pools {
		if lp.Name == spec.Name {
			listed = append(listed, lp.Name)
		}
	}
	if len(listed) != 1 {
		t.Fatalf("ListNodePools lists %d pools named %s: %+v", len(listed), spec.Name, pools)
	}
	if !hasLabels(p.Labels, map[string]string{providers.LabelSubstratePool: s.PoolID}) || p.Labels[providers.LabelCapacity] != "" {
		t.Errorf("labels %v, want %s=%s and no capacity", p.Labels, providers.LabelSubstratePool, s.PoolID)
	}
	if p.MachineType != spec.MachineType || !sameAccelerators(spec.Accelerators, p.Accelerators) || p.Spot {
		t.Errorf("pool %+v, asked %+v", p, spec)
	}
}

// spotNodePool: a Spot pool is labelled capacity=spot, or refused where
// the provider has none.
func spotNodePool(t *testing.T, s *Subject) {
	ctx := t.Context()
	c := s.readyCluster(t, "fa-conf-spot")
	spec := s.pool(s.NodePool, "spot", true)
	if !s.Options.Spot {
		_, err := s.Provider.EnsureNodePool(ctx, s.Account, c.Ref, spec)
		refusedInvalid(t, "Spot pool where there is no Spot", err)
		if _, err := s.Provider.GetNodePool(ctx, s.Account, c.Ref, spec.Name); !errors.Is(err, providers.ErrNotFound) {
			t.Errorf("the refused Spot pool exists: %v", err)
		}
		return
	}
	p := s.readyPool(t, c.Ref, spec)
	if !p.Spot || !hasLabels(p.Labels, map[string]string{providers.LabelSubstratePool: s.PoolID, providers.LabelCapacity: providers.CapacitySpot}) {
		t.Errorf("Spot pool %+v", p)
	}
}

// resizeInPlace: the count and autoscaling change on the same pool.
func resizeInPlace(t *testing.T, s *Subject) {
	ctx := t.Context()
	c := s.readyCluster(t, "fa-conf-resize")
	spec := s.pool(s.GPUNodePool, "gpu", false)
	p := s.readyPool(t, c.Ref, spec)
	steps := []providers.Size{
		{NodeCount: spec.NodeCount + 1},
		{NodeCount: spec.NodeCount, Autoscaling: &providers.Autoscaling{MinNodes: 1, MaxNodes: spec.NodeCount + 2}},
		{NodeCount: spec.NodeCount},
	}
	for _, size := range steps {
		r, err := s.Provider.ResizeNodePool(ctx, s.Account, c.Ref, spec.Name, size)
		if err != nil {
			t.Fatalf("ResizeNodePool %+v: %v", size, err)
		}
		if r.ID != p.ID || r.Name != p.Name {
			t.Fatalf("a resize made another pool: %+v, was %+v", r, p)
		}
		got := s.waitPool(t, c.Ref, spec.Name, "resized", poolRunning)
		if got.NodeCount != size.NodeCount || (got.Autoscaling == nil) != (size.Autoscaling == nil) ||
			(size.Autoscaling != nil && *got.Autoscaling != *size.Autoscaling) {
			t.Errorf("after resize to %+v the pool has %+v", size, got.Size)
		}
		if got.ID != p.ID || got.MachineType != p.MachineType {
			t.Errorf("a resize changed the pool: %+v, was %+v", got, p)
		}
	}
	// Ensure with another size is the same in-place change.
	spec.NodeCount++
	if _, err := s.Provider.EnsureNodePool(ctx, s.Account, c.Ref, spec); err != nil {
		t.Fatalf("EnsureNodePool with another size: %v", err)
	}
	if got := s.waitPool(t, c.Ref, spec.Name, "resized", poolRunning); got.NodeCount != spec.NodeCount || got.ID != p.ID {
		t.Errorf("EnsureNodePool with count %d left %+v", spec.NodeCount, got)
	}
}

// shapeNeverChanges: machine type, Spot, disk and zones of an existing
// pool are refused and change nothing.
func shapeNeverChanges(t *testing.T, s *Subject) {
	ctx := t.Context()
	c := s.readyCluster(t, "fa-conf-shape")
	spec := s.pool(s.NodePool, "cpu", false)
	p := s.readyPool(t, c.Ref, spec)
	rules, err := s.Provider.Rules(ctx, s.Account)
	if err != nil {
		t.Fatalf("Rules: %v", err)
	}
	changes := map[string]func(*providers.NodePoolSpec){
		"machineType": func(n *providers.NodePoolSpec) {
			n.MachineType, n.Accelerators = s.GPUNodePool.MachineType, s.GPUNodePool.Accelerators
		},
	}
	if s.Options.Spot {
		changes["spot"] = func(n *providers.NodePoolSpec) { n.Spot = true }
	}
	if rules.DiskSize {
		changes["diskGiB"] = func(n *providers.NodePoolSpec) {
			n.DiskGiB = 200
			if p.DiskGiB == 200 {
				n.DiskGiB = 300
			}
		}
	}
	if rules.NodePoolZones {
		locs, err := s.Provider.Locations(ctx, s.Account)
		if err != nil {
			t.Fatalf("Locations: %v", err)
		}
		for _, l := range locs {
			if l.Name == s.Location && len(l.Zones) > 1 {
				zone := l.Zones[0]
				if slices.Equal(p.Zones, []string{zone}) {
					zone = l.Zones[1]
				}
				changes["zones"] = func(n *providers.NodePoolSpec) { n.Zones = []string{zone} }
			}
		}
	}
	for _, field := range slices.Sorted(maps.Keys(changes)) {
		changed := spec
		changes[field](&changed)
		_, err := s.Provider.EnsureNodePool(ctx, s.Account, c.Ref, changed)
		refusedInvalid(t, field+" changed in place", err)
	}
	after := s.waitPool(t, c.Ref, spec.Name, "running", poolRunning)
	if after.ID != p.ID || after.MachineType != p.MachineType || after.Spot != p.Spot || after.DiskGiB != p.DiskGiB || !slices.Equal(after.Zones, p.Zones) {
		t.Errorf("refused shape changes left %+v, was %+v", after, p)
	}
}

// diskAndZones: a node pool takes a disk size and zones where the rules
// say it may (and then has them), and is refused as Invalid, making
// nothing, where they say it may not (DOKS: its pools are regional and take
// their size's disk).
func diskAndZones(t *testing.T, s *Subject) {
	ctx := t.Context()
	c := s.readyCluster(t, "fa-conf-disk-zones")
	rules, err := s.Provider.Rules(ctx, s.Account)
	if err != nil {
		t.Fatalf("Rules: %v", err)
	}
	disk := s.pool(s.NodePool, "disk", false)
	disk.DiskGiB = 200
	if rules.DiskSize {
		if p := s.readyPool(t, c.Ref, disk); p.DiskGiB != 200 {
			t.Errorf("a pool asked for 200 GiB of disk has %d", p.DiskGiB)
		}
	} else {
		_, err := s.Provider.EnsureNodePool(ctx, s.Account, c.Ref, disk)
		refusedInvalid(t, "diskGiB where the rules have no disk size", err)
		if _, err := s.Provider.GetNodePool(ctx, s.Account, c.Ref, disk.Name); !errors.Is(err, providers.ErrNotFound) {
			t.Errorf("the refused pool exists: %v", err)
		}
	}
	zoned := s.pool(s.NodePool, "zoned", false)
	if !rules.NodePoolZones {
		zoned.Zones = []string{s.Location + "-a"}
		_, err := s.Provider.EnsureNodePool(ctx, s.Account, c.Ref, zoned)
		refusedInvalid(t, "zones where the rules have none", err)
		if _, err := s.Provider.GetNodePool(ctx, s.Account, c.Ref, zoned.Name); !errors.Is(err, providers.ErrNotFound) {
			t.Errorf("the refused pool exists: %v", err)
		}
		return
	}
	locs, err := s.Provider.Locations(ctx, s.Account)
	if err != nil {
		t.Fatalf("Locations: %v", err)
	}
	for _, l := range locs {
		if l.Name == s.Location && len(l.Zones) > 0 {
			zoned.Zones = []string{l.Zones[0]}
			if p := s.readyPool(t, c.Ref, zoned); !slices.Equal(p.Zones, zoned.Zones) {
				t.Errorf("a pool asked for zones %v has %v", zoned.Zones, p.Zones)
			}
		}
	}
}

// zeroNodes: a fixed-size pool of 0 nodes is taken or refused as the
// options say; an autoscaled pool from 0 is always taken.
func zeroNodes(t *testing.T, s *Subject) {
	ctx := t.Context()
	c := s.readyCluster(t, "fa-conf-zero")
	fixed := s.pool(s.NodePool, "zero", false)
	fixed.NodeCount, fixed.Autoscaling = 0, nil
	_, err := s.Provider.EnsureNodePool(ctx, s.Account, c.Ref, fixed)
	if s.Options.ZeroNodes {
		if err != nil {
			t.Fatalf("a fixed pool of 0 nodes: %v", err)
		}
		if p := s.waitPool(t, c.Ref, fixed.Name, "running", poolRunning); p.NodeCount != 0 {
			t.Errorf("a fixed pool of 0 nodes has %d", p.NodeCount)
		}
	} else {
		refusedInvalid(t, "a fixed pool of 0 nodes", err)
	}
	auto := s.pool(s.NodePool, "auto", false)
	auto.NodeCount, auto.Autoscaling = 0, &providers.Autoscaling{MinNodes: 0, MaxNodes: 1}
	p := s.readyPool(t, c.Ref, auto)
	if p.Autoscaling == nil || p.Autoscaling.MinNodes != 0 || p.Autoscaling.MaxNodes != 1 {
		t.Errorf("an autoscaled pool from 0 has %+v", p.Size)
	}
}

// credentials: a minted credential reaches the cluster's endpoint for
// about 600 s, is accepted there, and never prints or marshals its token.
func credentials(t *testing.T, s *Subject) {
	c := s.readyCluster(t, "fa-conf-creds")
	before := s.Now()
	cred, err := s.Provider.Credentials(t.Context(), s.Account, c.Ref)
	if err != nil {
		t.Fatalf("Credentials: %v", err)
	}
	if cred.Endpoint != c.Outputs.Endpoint || len(cred.CACert) == 0 || cred.Token == "" {
		t.Fatalf("credential for %s incomplete: endpoint %q, CA %d bytes, token set %v", c.Outputs.Endpoint, cred.Endpoint, len(cred.CACert), cred.Token != "")
	}
	if ttl := cred.ExpiresAt.Sub(before); ttl < providers.CredentialTTL-time.Minute || ttl > providers.CredentialTTL+time.Minute {
		t.Errorf("credential lives %s, want about %s", ttl, providers.CredentialTTL)
	}
	if !s.Accepts(cred) {
		t.Fatal("the endpoint refuses the credential it was minted for")
	}
	forged := cred
	forged.Token += "x"
	if s.Accepts(forged) {
		t.Error("the endpoint accepts a token nobody minted")
	}
	if strings.Contains(cred.String(), cred.Token) {
		t.Error("a credential prints its token")
	}
	if _, err := json.Marshal(cred); err == nil {
		t.Error("a credential can be marshalled, the first step to storing it")
	}
}

// deleteTwice: deleting a pool and a cluster twice is not an error (or is
// ErrNotFound), and both end as ErrNotFound.
func deleteTwice(t *testing.T, s *Subject) {
	ctx := t.Context()
	c := s.readyCluster(t, "fa-conf-delete")
	spec := s.pool(s.NodePool, "cpu", false)
	s.readyPool(t, c.Ref, spec)
	okOrGone := func(what string, err error) {
		t.Helper()
		if err != nil && !errors.Is(err, providers.ErrNotFound) {
			t.Fatalf("%s: %v", what, err)
		}
	}
	_, err := s.Provider.DeleteNodePool(ctx, s.Account, c.Ref, spec.Name)
	okOrGone("DeleteNodePool", err)
	_, err = s.Provider.DeleteNodePool(ctx, s.Account, c.Ref, spec.Name)
	okOrGone("DeleteNodePool again", err)
	s.waitPool(t, c.Ref, spec.Name, "gone", gone)
	_, err = s.Provider.DeleteCluster(ctx, s.Account, c.Ref)
	okOrGone("DeleteCluster", err)
	_, err = s.Provider.DeleteCluster(ctx, s.Account, c.Ref)
	okOrGone("DeleteCluster again", err)
	s.waitCluster(t, c.Ref, "gone", gone)
	if _, err := s.Provider.DeleteCluster(ctx, s.Account, c.Ref); !errors.Is(err, providers.ErrNotFound) {
		t.Errorf("DeleteCluster of a deleted cluster: want ErrNotFound, got %v", err)
	}
	if _, err := s.Provider.ListNodePools(ctx, s.Account, c.Ref); !errors.Is(err, providers.ErrNotFound) {
		t.Errorf("ListNodePools of a deleted cluster: want ErrNotFound, got %v", err)
	}
}

// adoptAndExtend: an adoptable cluster reads with a global id that any
// account sees the same; our pool is added beside the owner's, which stay
// untouched, and goes again on its own; access is revoked idempotently.
func adoptAndExtend(t *testing.T, s *Subject) {
	if s.Adoptable == "" {
		t.Skip("the subject names no adoptable cluster")
	}
	ctx := t.Context()
	c, err := s.Provider.ReadAdoptable(ctx, s.Account, s.Adoptable)
	if err != nil {
		t.Fatalf("ReadAdoptable %s: %v", s.Adoptable, err)
	}
	if c.Outputs.GlobalID == "" {
		t.Fatal("an adoptable cluster without a global id")
	}
	c = s.waitCluster(t, c.Ref, "running", running)
	if s.SecondAccount != nil {
		other, err := s.Provider.ReadAdoptable(ctx, *s.SecondAccount, s.Adoptable)
		if err != nil {
			t.Fatalf("ReadAdoptable through the second account: %v", err)
		}
		if other.Outputs.GlobalID != c.Outputs.GlobalID {
			t.Errorf("two accounts read two global ids for one cluster: %s, %s", c.Outputs.GlobalID, other.Outputs.GlobalID)
		}
	}
	theirs, err := s.Provider.ListNodePools(ctx, s.Account, c.Ref)
	if err != nil {
		t.Fatalf("ListNodePools: %v", err)
	}
	if len(theirs) == 0 {
		t.Fatal("the adoptable cluster should have a node pool of its own")
	}
	spec := s.pool(s.GPUNodePool, "gpu", false)
	for _, p := range theirs {
		if p.Name == spec.Name {
			t.Fatalf("the owner's pool %s has our name", p.Name)
		}
	}
	s.readyPool(t, c.Ref, spec)
	all, err := s.Provider.ListNodePools(ctx, s.Account, c.Ref)
	if err != nil {
		t.Fatalf("ListNodePools: %v", err)
	}
	if len(all) != len(theirs)+1 {
		t.Errorf("after adding ours: %d pools, want %d", len(all), len(theirs)+1)
	}
	cred, err := s.Provider.Credentials(ctx, s.Account, c.Ref)
	if err != nil {
		t.Fatalf("Credentials: %v", err)
	}
	if !s.Accepts(cred) {
		t.Error("the adopted cluster refuses the credential")
	}
	if _, err := s.Provider.DeleteNodePool(ctx, s.Account, c.Ref, spec.Name); err != nil {
		t.Fatalf("DeleteNodePool: %v", err)
	}
	s.waitPool(t, c.Ref, spec.Name, "gone", gone)
	for range 2 {
		if err := s.Provider.RevokeAccess(ctx, s.Account, c.Ref); err != nil {
			t.Fatalf("RevokeAccess: %v", err)
		}
	}
	left, err := s.Provider.ListNodePools(ctx, s.Account, c.Ref)
	if err != nil {
		t.Fatalf("ListNodePools: %v", err)
	}
	if len(left) != len(theirs) {
		t.Fatalf("teardown of ours left %d pools, the owner had %d", len(left), len(theirs))
	}
	for i := range theirs {
		if left[i].Name != theirs[i].Name || left[i].ID != theirs[i].ID || left[i].NodeCount != theirs[i].NodeCount || left[i].MachineType != theirs[i].MachineType {
			t.Errorf("the owner's pool changed: %+v, was %+v", left[i], theirs[i])
		}
	}
	after := s.waitCluster(t, c.Ref, "running", running)
	if after.Outputs.GlobalID != c.Outputs.GlobalID {
		t.Errorf("the adopted cluster changed identity: %s, was %s", after.Outputs.GlobalID, c.Outputs.GlobalID)
	}
}

// listByLabel: the discovery sweep finds a cluster by the label it was made
// with (and its value, the pool id), whatever the provider calls labels;
// a cluster the owner made (the adoptable one) carries none of ours and is
// not listed; a deleted cluster leaves the listing.
func listByLabel(t *testing.T, s *Subject) {
	ctx := t.Context()
	c := s.readyCluster(t, "fa-conf-listed")
	find := func() (providers.Cluster, bool) {
		t.Helper()
		all, err := s.Provider.ListClusters(ctx, s.Account, providers.LabelSubstratePool)
		if err != nil {
			t.Fatalf("ListClusters: %v", err)
		}
		if !slices.IsSortedFunc(all, func(a, b providers.Cluster) int { return strings.Compare(a.Ref.String(), b.Ref.String()) }) {
			t.Errorf("ListClusters is not sorted by ref: %+v", all)
		}
		var hit providers.Cluster
		found := false
		for _, l := range all {
			if _, ok := l.Labels[providers.LabelSubstratePool]; !ok {
				t.Errorf("ListClusters lists %s, which lacks the label", l.Ref)
			}
			if l.Ref.Name == c.Ref.Name && l.Ref.Location == c.Ref.Location {
				hit, found = l, true
			}
			if s.Adoptable != "" && (l.Ref.Location+"/"+l.Ref.Name == s.Adoptable || l.Ref.ID == s.Adoptable) {
				t.Errorf("ListClusters lists the owner's cluster %s, which carries none of our labels", s.Adoptable)
			}
		}
		return hit, found
	}
	got, ok := find()
	if !ok {
		t.Fatalf("ListClusters does not list %s, made with the label", c.Ref)
	}
	if got.Labels[providers.LabelSubstratePool] != s.PoolID {
		t.Errorf("listed with %s=%q, want %q", providers.LabelSubstratePool, got.Labels[providers.LabelSubstratePool], s.PoolID)
	}
	if got.Outputs.GlobalID != c.Outputs.GlobalID || got.Outputs.GlobalID == "" {
		t.Errorf("listed with global id %q, GetCluster says %q", got.Outputs.GlobalID, c.Outputs.GlobalID)
	}
	if _, err := s.Provider.DeleteCluster(ctx, s.Account, c.Ref); err != nil && !errors.Is(err, providers.ErrNotFound) {
		t.Fatalf("DeleteCluster: %v", err)
	}
	s.waitCluster(t, c.Ref, "gone", gone)
	if _, ok := find(); ok {
		t.Errorf("ListClusters still lists %s after it is gone", c.Ref)
	}
}

// deleteWithNodePools: a cluster deleted while it still has a node pool
// ends gone with its pool, for a caller that calls again while the answer
// is retryable, as the journal does. Some providers delete both at once;
// EKS deletes a cluster only once its node groups are gone, so its adapter
// starts their deletes and answers Conflict until then.
func deleteWithNodePools(t *testing.T, s *Subject) {
	ctx := t.Context()
	c := s.readyCluster(t, "fa-conf-delete-pools")
	spec := s.pool(s.NodePool, "cpu", false)
	s.readyPool(t, c.Ref, spec)
	for i := 0; ; i++ {
		if i == s.MaxPolls {
			t.Fatalf("DeleteCluster of %s still refused after %d calls", c.Ref, s.MaxPolls)
		}
		if s.Advance != nil {
			s.Advance()
		}
		_, err := s.Provider.DeleteCluster(ctx, s.Account, c.Ref)
		if err == nil || errors.Is(err, providers.ErrNotFound) {
			break
		}
		if !providers.Retryable(err) {
			t.Fatalf("DeleteCluster of a cluster with a node pool: %v (class %q, not retryable)", err, providers.ClassOf(err))
		}
		// Look at the pool as a caller waiting would.
		_, _ = s.Provider.GetNodePool(ctx, s.Account, c.Ref, spec.Name)
	}
	s.waitCluster(t, c.Ref, "gone", gone)
	if _, err := s.Provider.GetNodePool(ctx, s.Account, c.Ref, spec.Name); !errors.Is(err, providers.ErrNotFound) {
		t.Errorf("the node pool of a deleted cluster: want ErrNotFound, got %v", err)
	}
}

// clusterLocationKinds: a location the account lists, of a kind the rules
// do not allow a cluster in (a zone on EKS and DOKS), is refused and makes
// nothing there or in its region.
func clusterLocationKinds(t *testing.T, s *Subject) {
	ctx := t.Context()
	rules, err := s.Provider.Rules(ctx, s.Account)
	if err != nil {
		t.Fatalf("Rules: %v", err)
	}
	locs, err := s.Provider.Locations(ctx, s.Account)
	if err != nil {
		t.Fatalf("Locations: %v", err)
	}
	for _, l := range locs {
		if rules.AllowsClusterIn(l.Kind) {
			continue
		}
		spec := s.clusterSpec("fa-conf-kind")
		spec.Location = l.Name
		_, err := s.Provider.EnsureCluster(ctx, s.Account, spec)
		refusedInvalid(t, "a cluster in "+string(l.Kind)+" "+l.Name, err)
		for _, at := range []string{l.Name, l.Region, s.Location} {
			if at == "" {
				continue
			}
			if _, err := s.Provider.GetCluster(ctx, s.Account, providers.ClusterRef{Location: at, Name: spec.Name}); !errors.Is(err, providers.ErrNotFound) {
				t.Errorf("the refused cluster exists in %s: %v", at, err)
			}
		}
		return
	}
	t.Logf("the rules allow a cluster in every kind of location listed (%v)", rules.ClusterLocations)
}

// replaceNodePoolBeside: the blue/green replacement as the provider sees
// it. A shape change in place is refused (Invalid, reason shapeChange,
// nothing done); a node pool of the new shape is made beside the old one
// under the flavor's next generation name, both are listed and run at
// once, and deleting the old one leaves the new one alone, with its shape.
func replaceNodePoolBeside(t *testing.T, s *Subject) {
	ctx := t.Context()
	c := s.readyCluster(t, "fa-conf-replace")
	old := s.readyPool(t, c.Ref, s.pool(s.NodePool, "repl", false))
	changed := s.pool(s.NodePool, "repl", false)
	changed.MachineType, changed.Accelerators = s.GPUNodePool.MachineType, s.GPUNodePool.Accelerators
	_, err := s.Provider.EnsureNodePool(ctx, s.Account, c.Ref, changed)
	refusedInvalid(t, "a machine type changed in place", err)
	if r := providers.ReasonOf(err); r != "shapeChange" {
		t.Errorf("a shape change in place: reason %q, want shapeChange (%v)", r, err)
	}
	// The generation name as the substrate spells it (fleet.GenerationName):
	// the flavor, "-g", the generation.
	next := s.pool(s.GPUNodePool, "repl-g2", false)
	made := s.readyPool(t, c.Ref, next)
	if made.Name == old.Name || made.MachineType != s.GPUNodePool.MachineType {
		t.Fatalf("the new node pool %+v beside %s", made, old.Name)
	}
	list, err := s.Provider.ListNodePools(ctx, s.Account, c.Ref)
	if err != nil {
		t.Fatalf("ListNodePools: %v", err)
	}
	both := map[string]providers.NodePool{}
	for _, p := range list {
		both[p.Name] = p
	}
	if o, n := both[old.Name], both[next.Name]; o.MachineType != old.MachineType || n.MachineType != s.GPUNodePool.MachineType ||
		o.Status != providers.NodePoolRunning || n.Status != providers.NodePoolRunning {
		t.Fatalf("both node pools should be listed and running: %s %+v, %s %+v", old.Name, o, next.Name, n)
	}
	if _, err := s.Provider.DeleteNodePool(ctx, s.Account, c.Ref, old.Name); err != nil {
		t.Fatalf("DeleteNodePool %s: %v", old.Name, err)
	}
	s.waitPool(t, c.Ref, old.Name, "deleted", gone[providers.NodePool])
	after := s.waitPool(t, c.Ref, next.Name, "running", poolRunning)
	if after.ID != made.ID || after.MachineType != s.GPUNodePool.MachineType || after.NodeCount != made.NodeCount {
		t.Errorf("after the old pool's delete the new one is %+v, was %+v", after, made)
	}
	list, err = s.Provider.ListNodePools(ctx, s.Account, c.Ref)
	if err != nil {
		t.Fatalf("ListNodePools: %v", err)
	}
	for _, p := range list {
		if p.Name == old.Name {
			t.Errorf("the old node pool %s is still listed after its delete", old.Name)
		}
	}
}

// kubeletsAtMostThreeBehind: the Kubernetes skew rule as the provider
// keeps it. A node pool left at the oldest minor lets its control plane go
// three minors up, hop by hop; a fourth is refused (Invalid, nothing done:
// the control plane stays where it was, the pool too). How a pool then
// catches up differs (EKS moves a node group only to its cluster's
// version): UpgradeOneMinorPerStep holds that.
func kubeletsAtMostThreeBehind(t *testing.T, s *Subject) {
	if len(s.SkewVersions) != 5 {
		t.Skip("the subject names no five consecutive minors")
	}
	v := s.SkewVersions
	ctx := t.Context()
	spec := s.clusterSpec("fa-conf-skew")
	spec.Version = v[0]
	c, err := s.Provider.EnsureCluster(ctx, s.Account, spec)
	if err != nil {
		t.Fatalf("EnsureCluster at %s: %v", v[0], err)
	}
	s.waitCluster(t, c.Ref, "running", running)
	pool := s.pool(s.NodePool, "skew", false)
	if p := s.readyPool(t, c.Ref, pool); !strings.HasPrefix(p.Version, v[0]) {
		t.Fatalf("a new pool on a %s cluster reports version %q", v[0], p.Version)
	}
	up := func(to string) error {
		u := spec
		u.Version, u.ClientToken = to, spec.ClientToken+":to:"+to
		_, err := s.Provider.EnsureCluster(ctx, s.Account, u)
		return err
	}
	at := func(hop string) {
		s.waitCluster(t, c.Ref, "at "+hop, func(c providers.Cluster, err error) bool {
			return running(c, err) && strings.HasPrefix(c.Outputs.Version, hop)
		})
	}
	for _, hop := range v[1:4] {
		if err := up(hop); err != nil {
			t.Fatalf("the control plane to %s with a pool at %s: %v", hop, v[0], err)
		}
		at(hop)
	}
	refusedInvalid(t, fmt.Sprintf("the control plane to %s with a pool at %s (four minors behind)", v[4], v[0]), up(v[4]))
	if now, err := s.Provider.GetCluster(ctx, s.Account, c.Ref); err != nil || now.Status != providers.ClusterRunning || !strings.HasPrefix(now.Outputs.Version, v[3]) {
		t.Fatalf("after the refusal the cluster is %s at %s (%v), want running at %s", now.Status, now.Outputs.Version, err, v[3])
	}
	if p := s.waitPool(t, c.Ref, pool.Name, "running", poolRunning); !strings.HasPrefix(p.Version, v[0]) {
		t.Errorf("after the refusal the pool reports %q, want %s", p.Version, v[0])
	}
}

// removeNodesShrinksByThoseNodes: RemoveNodes takes exactly the chosen
// nodes and leaves the pool at the size asked; a providerID of another pool
// or of no provider is refused with Invalid before anything goes; a second
// call for nodes already gone is no error.
func removeNodesShrinksByThoseNodes(t *testing.T, s *Subject) {
	if s.NodeProviderIDs == nil {
		t.Skip("the subject names no nodes (NodeProviderIDs)")
	}
	rm, ok := s.Provider.(providers.NodeRemover)
	if !ok {
		t.Fatal("the subject names its nodes but its provider is no providers.NodeRemover")
	}
	ctx := t.Context()
	c := s.readyCluster(t, "fa-conf-remove")
	spec := s.pool(s.NodePool, "cpu", false)
	spec.NodeCount++
	s.readyPool(t, c.Ref, spec)
	other := s.readyPool(t, c.Ref, s.pool(s.GPUNodePool, "gpu", false))
	nodes := func(pool string) []string {
		t.Helper()
		ids, err := s.NodeProviderIDs(c.Ref, pool)
		if err != nil {
			t.Fatalf("NodeProviderIDs %s: %v", pool, err)
		}
		return ids
	}
	sorted := func(pool string) []string { return slices.Sorted(slices.Values(nodes(pool))) }
	made, theirs := nodes(spec.Name), sorted(other.Name)
	before := slices.Sorted(slices.Values(made))
	if len(before) == 0 || len(before)%spec.NodeCount != 0 || len(theirs) == 0 {
		t.Fatalf("pool %s of %d per zone has nodes %v; pool %s has %v", spec.Name, spec.NodeCount, before, other.Name, theirs)
	}
	// One node per zone (the count of a pool is per zone where the rules
	// say so): the last nodes made, one in each of the pool's zones.
	k := len(before) / spec.NodeCount
	chosen := made[len(made)-k:]
	target := providers.Size{NodeCount: spec.NodeCount - 1}

	for what, foreign := range map[string]string{"a node of another pool": theirs[0], "a node of no provider": "conformance://no-such-node"} {
		_, err := rm.RemoveNodes(ctx, s.Account, c.Ref, spec.Name, append(slices.Clone(chosen), foreign), target)
		refusedInvalid(t, "RemoveNodes with "+what, err)
		if got := sorted(spec.Name); !slices.Equal(got, before) {
			t.Fatalf("a refused RemoveNodes (%s) removed nodes: %v, was %v", what, got, before)
		}
	}
	if _, err := rm.RemoveNodes(ctx, s.Account, c.Ref, spec.Name, chosen, target); err != nil {
		t.Fatalf("RemoveNodes %v: %v", chosen, err)
	}
	p := s.waitPool(t, c.Ref, spec.Name, "shrunk", func(p providers.NodePool, err error) bool {
		return poolRunning(p, err) && p.NodeCount == target.NodeCount
	})
	after := sorted(spec.Name)
	for _, id := range before {
		if slices.Contains(chosen, id) == slices.Contains(after, id) {
			t.Fatalf("after removing %v the pool has %v (was %v)", chosen, after, before)
		}
	}
	if len(after) != len(before)-k {
		t.Fatalf("after removing %v the pool has %v (was %v)", chosen, after, before)
	}
	// Sent again, as by a caller that crashed before it recorded the call.
	again, err := rm.RemoveNodes(ctx, s.Account, c.Ref, spec.Name, chosen, target)
	if err != nil {
		t.Fatalf("RemoveNodes of nodes already gone: %v", err)
	}
	if again.NodeCount != target.NodeCount || !slices.Equal(sorted(spec.Name), after) {
		t.Errorf("RemoveNodes of nodes already gone left %+v with nodes %v, want %d per zone and %v", again.Size, sorted(spec.Name), target.NodeCount, after)
	}
	if got := sorted(other.Name); !slices.Equal(got, theirs) {
		t.Errorf("the other pool's nodes changed: %v, were %v", got, theirs)
	}
	if p.ID != "" && p.Name != spec.Name {
		t.Errorf("RemoveNodes made another pool: %+v", p)
	}
}
