package plan

import (
	"fmt"
	"slices"

	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
)

// A cluster's Kubernetes version, as the plan weighs it. Three versions
// meet (docs/substrates.md, "Kubernetes versions"):
//
//	document  policy.substrate.cluster.create.version ("" = the provider's choice)
//	recorded  the same field as last applied (stored in the pool's policy)
//	running   the minor the reconciler last saw the cluster run (the snapshot)
//
// Each row below is one verdict, taken in order; the first that matches
// decides.
//
//	document ""                                 the stored spec decides (an update when one was recorded)
//	document < recorded, or < running            blocked: Kubernetes is never downgraded
//	document == running, nothing recorded       no change: the provider's choice, now pinned
//	otherwise                                   compared as any other field
//
// A recorded version the cluster has since outgrown (the provider upgraded
// it on its own schedule) is not a change the document makes: it gets a
// note, never a block, so an unchanged pool does not block every plan.

// versionVerdict is the plan's word on a pool's cluster version.
type versionVerdict struct {
	blocked []string
	notes   []string
	// pinned: the document names the minor the cluster already runs and
	// nothing was recorded, so the version is left out of the comparison.
	pinned bool
}

// clusterVersion weighs the version of a create-mode substrate whose pool
// exists (stored) against what was recorded and what runs.
func (p *planner) clusterVersion(sub *fleet.Substrate, existing inventory.Object, stored map[string]any) versionVerdict {
	var v versionVerdict
	cr := sub.Cluster.Create
	if cr == nil {
		return v
	}
	recorded := recordedVersion(stored)
	running, runs := fleet.MinorOf(p.snap.ClusterVersion(existing.ID))
	if cr.Version == "" {
		if recorded != "" {
			v.notes = append(v.notes, fmt.Sprintf("version %s no longer pinned: the cluster keeps the version it runs and its provider may upgrade it on its own schedule", recorded))
		}
		return v
	}
	want, err := fleet.ParseMinor(cr.Version)
	if err != nil {
		// A valid document never gets here; a refusal is the safe side.
		return versionVerdict{blocked: []string{fmt.Sprintf("version %q is not a Kubernetes minor such as \"1.34\"", cr.Version)}}
	}
	if rec, err := fleet.ParseMinor(recorded); err == nil && want.Compare(rec) < 0 {
		v.blocked = append(v.blocked, downgrade(want, rec, "the version last applied"))
		return v
	}
	if runs && want.Compare(running) < 0 {
		if recorded == cr.Version {
			v.notes = append(v.notes, fmt.Sprintf("the cluster runs %s, newer than version %s (its provider upgraded it): write \"version\": %q to say so", p.snap.ClusterVersion(existing.ID), cr.Version, running.String()))
			return v
		}
		v.blocked = append(v.blocked, downgrade(want, running, "the version the cluster runs"))
		return v
	}
	if recorded == "" && runs && want.Compare(running) == 0 {
		v.pinned = true
	}
	return v
}

// downgrade is the reason a version below the cluster's is refused.
func downgrade(want, have fleet.Minor, what string) string {
	return fmt.Sprintf("version %s is below %s, %s: Kubernetes clusters are never downgraded; write \"version\": %q or newer, or make a new pool for the older version", want, have, what, have.String())
}

// recordedVersion is the version of a stored policy's created cluster, ""
// when none was recorded.
func recordedVersion(stored map[string]any) string {
	sub, _ := stored["substrate"].(map[string]any)
	cl, _ := sub["cluster"].(map[string]any)
	cr, _ := cl["create"].(map[string]any)
	v, _ := cr["version"].(string)
	return v
}

// unpin leaves the version out of a wanted pool spec, so that it compares
// equal to a stored spec that names none.
func unpin(want map[string]any) {
	pol, _ := want["policy"].(map[string]any)
	sub, _ := pol["substrate"].(map[string]any)
	cl, _ := sub["cluster"].(map[string]any)
	if cr, ok := cl["create"].(map[string]any); ok {
		delete(cr, "version")
	}
}

// withoutVersion is a substrate's cluster with the create's version left
// out: the version changes in place, so it is no part of the identity.
func withoutVersion(cluster any) any {
	cl, ok := cluster.(map[string]any)
	if !ok {
		return cluster
	}
	cr, ok := cl["create"].(map[string]any)
	if !ok {
		return cluster
	}
	if _, has := cr["version"]; !has {
		return cluster
	}
	out := make(map[string]any, len(cl))
	for k, v := range cl {
		out[k] = v
	}
	c := make(map[string]any, len(cr))
	for k, v := range cr {
		if k != "version" {
			c[k] = v
		}
	}
	out["create"] = c
	return out
}

// versionNotes show, on a change of a substrate's pool, the version its
// cluster will get or runs: the provider's default for a cluster created
// without one (as the live check read it), and for an adopted cluster the
// version it runs, read live when the plan asked the provider, else as
// last seen. Only shown: an adopted cluster's version is its owner's to
// change.
func (p *planner) versionNotes(pool string, sub *fleet.Substrate, poolID string, exists bool, action Action) []string {
	live := p.facts().Substrates[pool]
	if cr := sub.Cluster.Create; cr != nil {
		if action == Create && cr.Version == "" && live.DefaultVersion != "" {
			return []string{fmt.Sprintf("no version named: the cluster gets the provider's default, %s today; export then writes it into the document", live.DefaultVersion)}
		}
		return nil
	}
	v := live.ClusterVersion
	if v == "" && exists {
		v = p.snap.ClusterVersion(poolID)
	}
	if v == "" {
		return nil
	}
	return []string{fmt.Sprintf("the adopted cluster runs Kubernetes %s; fleet-agent never changes an adopted cluster's version", v)}
}

// hops plans a created cluster's upgrade as one-minor hops from the minor
// it is at (the newer of the one applied and the one it runs) to the
// document's: each hop the control plane, then every node pool (by
// flavor name), so the Kubernetes skew rules hold at every step (a kubelet
// never newer than its API server, one minor behind at most). Each hop is a
// change of its own, right after the pool's update, so a reviewer and a
// policy see every step; none makes a call.
func (p *planner) hops(pool string, sub *fleet.Substrate, existing inventory.Object, stored map[string]any) {
	cr := sub.Cluster.Create
	if cr == nil || cr.Version == "" {
		return
	}
	to, err := fleet.ParseMinor(cr.Version)
	if err != nil {
		return
	}
	from, known := fleet.MinorOf(p.snap.ClusterVersion(existing.ID))
	if rec, err := fleet.ParseMinor(recordedVersion(stored)); err == nil && (!known || rec.Compare(from) > 0) {
		from, known = rec, true
	}
	if !known || from.Major != to.Major || from.Compare(to) >= 0 {
		return
	}
	flavors := make([]string, len(sub.Flavors))
	for i, f := range sub.Flavors {
		flavors[i] = f.Name
	}
	slices.Sort(flavors)
	seq := 0
	var window *Window
	if windows := windowsOf(sub); windows != nil {
		window = &Window{Windows: windows}
	}
	add := func(h Hop) {
		// A hop waits for a window before its control plane moves; its
		// node pools follow at once, whatever the windows say.
		var w *Window
		if h.Part == HopControlPlane {
			w = window
		}
		name := fmt.Sprintf("%s version %s -> %s (%s)", pool, h.From, h.To, h.Part)
		if h.Flavor != "" {
			name = fmt.Sprintf("%s version %s -> %s (%s %s)", pool, h.From, h.To, h.Part, h.Flavor)
		}
		p.out = append(p.out, entry{change: Change{Kind: KindSubstrate, Name: name, Action: Upgrade, Hop: &h, Window: w,
			group: gPoolUpdatesAndQuotas, order: fmt.Sprintf("%s\x00\x00%06d", pool, seq)}})
		seq++
	}
	for m := from; m.Compare(to) < 0; m = m.Next() {
		add(Hop{Pool: pool, From: m.String(), To: m.Next().String(), Part: HopControlPlane})
		for _, f := range flavors {
			add(Hop{Pool: pool, From: m.String(), To: m.Next().String(), Part: HopNodePool, Flavor: f})
		}
	}
}
