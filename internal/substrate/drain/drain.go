// Package drain is the room that empties Nodes before a node pool loses
// them: it cordons them, evicts their pods through the eviction API (so
// PodDisruptionBudgets hold), waits for GPU pods and booked Nodes instead
// of evicting them, and never has more of the node pool's Nodes unavailable
// at once than the pool's disruption budget allows.
//
// A drain is a series of passes. Each pass reads the cluster, does what it
// may and returns a Result saying which Nodes are empty, which are still
// being emptied and what blocks them (each pod by namespace/name, why, and
// since when). The caller calls Pass again later; nothing in a pass waits.
//
// What a drain must remember across a restart lives on the Node itself, in
// one annotation of ours (Annotation): when its drain began, whether we
// cordoned it, whether it is empty, and since when each blocker blocks. A
// kill -9 mid-drain resumes from there: a Node is cordoned once, a blocker's
// clock is not reset, a forced eviction is not repeated once its pod is gone.
package drain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

// Annotation is the one annotation the room writes, on the Nodes it
// drains: a JSON Mark.
const Annotation = "fleet-agent.dev/drain"

// BookingAnnotation marks a Node whose GPUs are booked (its value names the
// booking). A booked Node is not emptied until the booking ends, or until
// the drain's timeout with "then": "force".
const BookingAnnotation = "fleet-agent.dev/booking"

// mirrorAnnotation marks a static pod's mirror: the kubelet owns it, and
// deleting it through the API does nothing.
const mirrorAnnotation = "kubernetes.io/config.mirror"

// GPUResources are the extended resources a GPU job requests: a pod
// requesting one is waited for, not evicted.
var GPUResources = []corev1.ResourceName{"nvidia.com/gpu", "amd.com/gpu"}

// Then is what a drain does once its timeout has passed.
type Then string

const (
	// Wait keeps waiting (the default): nothing running is ever forced.
	Wait Then = "wait"
	// Force evicts GPU pods and the pods of booked Nodes, and deletes the
	// pods a PodDisruptionBudget protects. Each is audited.
	Force Then = "force"
)

// Settings are the document's drain settings.
type Settings struct {
	// Timeout is how long a Node's drain may be blocked before Then applies;
	// zero means never.
	Timeout time.Duration
	Then    Then
}

// Auditor records a forced eviction or deletion before it is made. It is
// declared here, by its user; the substrate gives one that writes the
// state's audit log.
type Auditor interface {
	Forced(ctx context.Context, f Forced) error
}

// Forced is one pod forced off its Node after the timeout, or a Node's
// booking let go (Pod empty).
type Forced struct {
	Pod    string // namespace/name; "" for a booking let go
	Node   string
	Reason string // what blocked it: the Blocker's Why
	Action string // "evict", "delete", or "release" (a booking)
}

// Why a pod or a Node blocks a drain.
const (
	WhyPDB      = "PDB"
	WhyGPU      = "GPU job"
	WhyBooking  = "booking"
	WhyBudget   = "disruption budget"
	WhyEviction = "eviction refused"
)

// Blocker is one thing a drain waits for.
type Blocker struct {
	Node string
	// Pod is namespace/name; empty for a Node-wide blocker (a booking, the
	// budget).
	Pod string
	// Why is one of the Why constants; Detail names the PDB, the booking
	// or what the API said.
	Why, Detail string
	Since       time.Time
}

// String is the blocker as a condition's message says it.
func (b Blocker) String() string {
	what := "node " + b.Node
	if b.Pod != "" {
		what = "pod " + b.Pod + " on " + b.Node
	}
	why := b.Why
	if b.Detail != "" {
		why += " " + b.Detail
	}
	return fmt.Sprintf("%s (%s, since %s)", what, why, b.Since.UTC().Format(time.RFC3339))
}

// Request is one pass's work.
type Request struct {
	// Pool is the owner written in the annotation (the fleet pool's id and
	// the node pool): a Node marked by another owner is not ours to
	// uncordon.
	Pool string
	// PoolNodes are the names of every Node of the node pool; Empty are
	// the ones to empty (a subset, or all of them).
	PoolNodes, Empty []string
	// MaxUnavailable is how many of PoolNodes may be unavailable at once
	// (see Budget).
	MaxUnavailable int
	Settings       Settings
}

// Result is what a pass found.
type Result struct {
	// Done are the Nodes of Empty that are cordoned and hold nothing but
	// DaemonSet pods, mirror pods and finished pods.
	Done []string
	// Draining are cordoned Nodes not yet empty; Queued wait for the budget.
	Draining, Queued []string
	Blockers         []Blocker
	// Forced are the pods forced off this pass.
	Forced []Forced
	// Overdue is set when a blocker has outlasted the timeout and the
	// settings say wait.
	Overdue bool
}

// Finished says whether every Node asked for is empty.
func (r Result) Finished() bool { return len(r.Draining) == 0 && len(r.Queued) == 0 }

// Message is the result in one line, blockers first, for a condition.
func (r Result) Message() string {
	var parts []string
	if len(r.Blockers) > 0 {
		bs := make([]string, 0, len(r.Blockers))
		for _, b := range r.Blockers {
			bs = append(bs, b.String())
		}
		s := "drain blocked by " + strings.Join(clip(bs, 10), "; ")
		if r.Overdue {
			s += "; past the drain timeout, still waiting (drain.then is wait): let them finish, delete them, or set then to force"
		}
		parts = append(parts, s)
	}
	parts = append(parts, fmt.Sprintf("%d nodes empty, %d draining, %d waiting for the disruption budget",
		len(r.Done), len(r.Draining), len(r.Queued)))
	return strings.Join(parts, "; ")
}

// Budget is how many of n Nodes a pool's disruptionBudget (a fraction)
// lets be unavailable at once: the fraction of n rounded down, at least
// one so that a drain can ever progress; one when the pool has no budget;
// none when it is zero (the drain then waits, saying so).
func Budget(fraction *float64, n int) int {
	if fraction == nil {
		return 1
	}
	if *fraction <= 0 {
		return 0
	}
	return max(1, int(*fraction*float64(n)))
}

// Mark is what the annotation holds.
type Mark struct {
	Pool  string    `json:"pool"`
	Began time.Time `json:"began"`
	// Cordoned says we cordoned the Node (it was schedulable): only then
	// does an abandoned drain uncordon it.
	Cordoned bool `json:"cordoned"`
	Done     bool `json:"done,omitempty"`
	// Blocked is since when each blocker (by key) has blocked.
	Blocked map[string]time.Time `json:"blocked,omitempty"`
	// Released is the booking a forced drain let go (audited once).
	Released string `json:"released,omitempty"`
}

// Drainer runs drains on one cluster.
type Drainer struct {
	Client kubernetes.Interface
	Clock  clock.Clock
	Audit  Auditor
}

// node is one Node of the pool as a pass sees it.
type node struct {
	obj  *corev1.Node
	mark *Mark // ours; nil when not draining
}

func (n node) unavailable() bool {
	if n.mark != nil {
		return !n.mark.Done
	}
	return n.obj.Spec.Unschedulable || !ready(n.obj)
}

// Pass runs one pass of the drain. Its error carries a code and what to do;
// a Result is returned with it for what was learnt before.
func (d *Drainer) Pass(ctx context.Context, req Request) (Result, error) {
	var res Result
	nodes, err := d.read(ctx, req)
	if err != nil {
		return res, err
	}
	want := map[string]bool{}
	for _, n := range req.Empty {
		want[n] = true
	}
	for _, name := range req.Empty {
		n, ok := nodes[name]
		if !ok {
			// Gone already: nothing left to empty.
			res.Done = append(res.Done, name)
			continue
		}
		if n.mark == nil {
			// A Node already unavailable takes nothing more from the
			// budget by being drained.
			if !n.unavailable() && !d.budgetAllows(nodes, req) {
				res.Queued = append(res.Queued, name)
				continue
			}
			if n, err = d.cordon(ctx, n, req.Pool); err != nil {
				return res, err
			}
			nodes[name] = n
		}
		done, err := d.empty(ctx, n, req, &res)
		if err != nil {
			return res, err
		}
		if done {
			res.Done = append(res.Done, name)
		} else {
			res.Draining = append(res.Draining, name)
		}
	}
	if len(res.Queued) > 0 {
		res.Blockers = append(res.Blockers, Blocker{Node: res.Queued[0], Why: WhyBudget,
			Detail: fmt.Sprintf("(%d of %d nodes may be unavailable at once; %d waiting)", req.MaxUnavailable, len(req.PoolNodes), len(res.Queued)),
			Since:  queuedSince(nodes, d.Clock.Now())})
	}
	return res, nil
}

// queuedSince is since when the drain's Nodes have waited for the budget:
// since the drain began (its first cordon, kept on the Nodes, so a fresh
// agent says the same). While nothing of it is cordoned yet (a budget of
// 0, or Nodes unavailable for other reasons hold it) nothing records when
// the wait began, and it is the pass's own time.
func queuedSince(nodes map[string]node, now time.Time) time.Time {
	since := now
	for _, n := range nodes {
		if n.mark != nil && n.mark.Began.Before(since) {
			since = n.mark.Began
		}
	}
	return since
}

// read is the node pool's Nodes by name, with our marks.
func (d *Drainer) read(ctx context.Context, req Request) (map[string]node, error) {
	out := map[string]node{}
	names := append(slices.Clone(req.PoolNodes), req.Empty...)
	for _, name := range names {
		if _, seen := out[name]; seen {
			continue
		}
		obj, err := d.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, apiErr("reading node "+name, err)
		}
		n := node{obj: obj}
		if m, ok := readMark(obj); ok && m.Pool == req.Pool {
			n.mark = m
		}
		out[name] = n
	}
	return out, nil
}

func readMark(n *corev1.Node) (*Mark, bool) {
	raw, ok := n.Annotations[Annotation]
	if !ok {
		return nil, false
	}
	var m Mark
	if json.Unmarshal([]byte(raw), &m) != nil {
		// Not ours to read: treated as a drain of another owner.
		return &Mark{}, true
	}
	return &m, true
}

// budgetAllows is the budget step: one more Node may start draining only
// while fewer than MaxUnavailable of the pool's Nodes are unavailable
// (NotReady, cordoned by anyone, or draining and not yet empty).
func (d *Drainer) budgetAllows(nodes map[string]node, req Request) bool {
	unavailable := 0
	for _, name := range req.PoolNodes {
		if n, ok := nodes[name]; ok && n.unavailable() {
			unavailable++
		}
	}
	return unavailable < req.MaxUnavailable
}

// cordon is the cordon step: the Node is made unschedulable and marked in
// one patch, so a restart never finds one without the other.
func (d *Drainer) cordon(ctx context.Context, n node, pool string) (node, error) {
	m := &Mark{Pool: pool, Began: d.Clock.Now().UTC(), Cordoned: !n.obj.Spec.Unschedulable}
	obj, err := d.patch(ctx, n.obj.Name, m, true)
	if err != nil {
		return n, err
	}
	return node{obj: obj, mark: m}, nil
}

// patch writes the mark (nil removes it) and, when set, the cordon.
func (d *Drainer) patch(ctx context.Context, name string, m *Mark, unschedulable bool) (*corev1.Node, error) {
	var ann any
	if m != nil {
		raw, err := json.Marshal(m)
		if err != nil {
			return nil, refusal.New(refusal.Internal, "drain mark of node %s: %v", name, err)
		}
		ann = string(raw)
	}
	body := map[string]any{"metadata": map[string]any{"annotations": map[string]any{Annotation: ann}}}
	if unschedulable {
		body["spec"] = map[string]any{"unschedulable": true}
	}
	data, err := json.Marshal(body)
	if err != nil {
		return nil, refusal.New(refusal.Internal, "drain patch of node %s: %v", name, err)
	}
	obj, err := d.Client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, data, metav1.PatchOptions{})
	if err != nil {
		return nil, apiErr("marking node "+name, err)
	}
	return obj, nil
}

// verdict is what one step says of one pod.
type verdict int

const (
	skip    verdict = iota // not the drain's business
	gone                   // on its way out
	evicted                // evicted or deleted now
	blocked                // waits
)

// empty is the emptying step of one cordoned Node: each pod is judged, the
// evictable ones evicted, the rest reported; the mark is rewritten only
// when what it holds changed.
func (d *Drainer) empty(ctx context.Context, n node, req Request, res *Result) (bool, error) {
	pods, err := d.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + n.obj.Name})
	if err != nil {
		return false, apiErr("listing the pods of node "+n.obj.Name, err)
	}
	now := d.Clock.Now().UTC()
	overdue := req.Settings.Timeout > 0 && !now.Before(n.mark.Began.Add(req.Settings.Timeout))
	force := overdue && req.Settings.Then == Force
	holds := map[string]time.Time{}
	block := func(key string, b Blocker) {
		since, ok := n.mark.Blocked[key]
		if !ok {
			since = now
		}
		holds[key] = since
		b.Since = since
		res.Blockers = append(res.Blockers, b)
		if overdue && !force {
			res.Overdue = true
		}
	}

	booking := n.obj.Annotations[BookingAnnotation]
	left := 0
	for i := range pods.Items {
		p := &pods.Items[i]
		v, why, detail, err := d.judge(ctx, p, booking, force, n.obj.Name, res)
		if err != nil {
			return false, err
		}
		switch v {
		case skip:
		case gone, evicted:
			left++
		case blocked:
			left++
			key := p.Namespace + "/" + p.Name
			block(key, Blocker{Node: n.obj.Name, Pod: key, Why: why, Detail: detail})
		}
	}
	// A booking holds the Node itself, pods or none: it reserves the GPUs
	// for a job that may not have started, and the Node's delete would
	// drop it. Forced, it is let go, audited once.
	released := n.mark.Released
	switch {
	case booking != "" && !force:
		left++
		block("booking", Blocker{Node: n.obj.Name, Why: WhyBooking, Detail: booking})
	case booking != "" && released != booking:
		if err := d.forced(ctx, res, Forced{Node: n.obj.Name, Reason: WhyBooking + " " + booking, Action: "release"}); err != nil {
			return false, err
		}
		released = booking
	}
	done := left == 0
	if done != n.mark.Done || released != n.mark.Released || !sameKeys(holds, n.mark.Blocked) {
		m := *n.mark
		m.Done, m.Blocked, m.Released = done, holds, released
		if len(holds) == 0 {
			m.Blocked = nil
		}
		if _, err := d.patch(ctx, n.obj.Name, &m, false); err != nil {
			return false, err
		}
	}
	return done, nil
}

// judge is the verdict on one pod: DaemonSet, mirror and finished pods are
// skipped; a GPU job and any pod of a booked Node wait unless forced; the
// rest are evicted, and a PodDisruptionBudget's refusal makes the pod wait
// (or, forced, be deleted).
func (d *Drainer) judge(ctx context.Context, p *corev1.Pod, booking string, force bool, nodeName string, res *Result) (verdict, string, string, error) {
	if finished(p) || daemonSetPod(p) || p.Annotations[mirrorAnnotation] != "" {
		return skip, "", "", nil
	}
	if p.DeletionTimestamp != nil {
		return gone, "", "", nil
	}
	key := p.Namespace + "/" + p.Name
	reason := ""
	switch {
	case gpuPod(p):
		reason = WhyGPU
	case booking != "":
		reason = WhyBooking
	}
	if reason != "" && !force {
		detail := ""
		if reason == WhyBooking {
			detail = booking
		}
		return blocked, reason, detail, nil
	}
	if reason != "" {
		if err := d.forced(ctx, res, Forced{Pod: key, Node: nodeName, Reason: reason, Action: "evict"}); err != nil {
			return blocked, reason, "", err
		}
	}
	err := d.evict(ctx, p)
	switch {
	case err == nil, apierrors.IsNotFound(err):
		return evicted, "", "", nil
	case apierrors.IsTooManyRequests(err):
		pdb := d.pdbOf(ctx, p)
		if unprocessed(err) {
			pdb += " (its status not yet computed by the cluster's disruption controller)"
		}
		if !force {
			return blocked, WhyPDB, pdb, nil
		}
		if err := d.forced(ctx, res, Forced{Pod: key, Node: nodeName, Reason: WhyPDB + " " + pdb, Action: "delete"}); err != nil {
			return blocked, WhyPDB, pdb, err
		}
		err := d.Client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return blocked, WhyPDB, pdb, apiErr("deleting pod "+key, err)
		}
		return evicted, "", "", nil
	case apierrors.IsForbidden(err) || apierrors.IsInternalError(err) || apierrors.IsConflict(err):
		// Several budgets on one pod (500), a namespace terminating
		// (403): the pod stays and is named.
		return blocked, WhyEviction, apiMessage(err), nil
	default:
		return blocked, "", "", apiErr("evicting pod "+key, err)
	}
}

// evict asks the eviction API once. A budget's refusal is a 429, with a
// Retry-After when the budget's status is not computed yet; client-go's
// own retry would wait that out up to ten times, past the pass's deadline,
// so the refusal is asked for without it and the next pass asks again.
// A clientset without a REST client (client-go's fake) takes the plain
// call, which it never retries.
func (d *Drainer) evict(ctx context.Context, p *corev1.Pod) error {
	ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}}
	rc, ok := d.Client.CoreV1().RESTClient().(*rest.RESTClient)
	if !ok || rc == nil {
		return d.Client.CoreV1().Pods(p.Namespace).EvictV1(ctx, ev)
	}
	return rc.Post().MaxRetries(0).Namespace(p.Namespace).Resource("pods").Name(p.Name).SubResource("eviction").
		Body(ev).Do(ctx).Error()
}

// unprocessed reports whether a budget's refusal says the budget's status
// is not computed yet (the API server's cause on such a 429).
func unprocessed(err error) bool {
	var se apierrors.APIStatus
	if !errors.As(err, &se) || se.Status().Details == nil {
		return false
	}
	for _, c := range se.Status().Details.Causes {
		if c.Type == policyv1.DisruptionBudgetCause && strings.Contains(c.Message, "being processed") {
			return true
		}
	}
	return false
}

// forced audits one forced removal before it is made: a removal the audit
// log cannot hold is not made.
func (d *Drainer) forced(ctx context.Context, res *Result, f Forced) error {
	if d.Audit == nil {
		return refusal.New(refusal.Internal, "a forced drain of pod %s has no audit log to record it; nothing is forced", f.Pod)
	}
	if err := d.Audit.Forced(ctx, f); err != nil {
		return refusal.New(refusal.Unavailable, "recording the forced %s of pod %s in the audit log: %v; nothing is forced until it can be recorded", f.Action, f.Pod, err)
	}
	res.Forced = append(res.Forced, f)
	return nil
}

// pdbOf names the PodDisruptionBudgets that select the pod.
func (d *Drainer) pdbOf(ctx context.Context, p *corev1.Pod) string {
	list, err := d.Client.PolicyV1().PodDisruptionBudgets(p.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "(unnamed: " + apiMessage(err) + ")"
	}
	var names []string
	for _, b := range list.Items {
		sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
		if err != nil || sel.Empty() {
			continue
		}
		if sel.Matches(labels.Set(p.Labels)) {
			names = append(names, p.Namespace+"/"+b.Name)
		}
	}
	if len(names) == 0 {
		return "(unnamed)"
	}
	slices.Sort(names)
	return strings.Join(names, ",")
}

// Abandon is the uncordon of a drain no longer wanted (the step that asked
// for it went away): every Node of names marked by pool loses the mark,
// and the ones we cordoned are made schedulable again. Nodes cordoned by
// someone else stay cordoned.
func (d *Drainer) Abandon(ctx context.Context, pool string, names []string) error {
	for _, name := range names {
		obj, err := d.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return apiErr("reading node "+name, err)
		}
		m, ok := readMark(obj)
		if !ok || m.Pool != pool {
			continue
		}
		body := map[string]any{"metadata": map[string]any{"annotations": map[string]any{Annotation: nil}}}
		if m.Cordoned {
			body["spec"] = map[string]any{"unschedulable": nil}
		}
		data, _ := json.Marshal(body)
		if _, err := d.Client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, data, metav1.PatchOptions{}); err != nil {
			return apiErr("uncordoning node "+name, err)
		}
	}
	return nil
}

func ready(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func finished(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

func daemonSetPod(p *corev1.Pod) bool {
	for _, o := range p.OwnerReferences {
		if o.Kind == "DaemonSet" && o.Controller != nil && *o.Controller {
			return true
		}
	}
	return false
}

// gpuPod: a container (or init container) requests or limits a GPU.
func gpuPod(p *corev1.Pod) bool {
	for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for _, c := range cs {
			for _, r := range GPUResources {
				if q, ok := c.Resources.Requests[r]; ok && !q.IsZero() {
					return true
				}
				if q, ok := c.Resources.Limits[r]; ok && !q.IsZero() {
					return true
				}
			}
		}
	}
	return false
}

func sameKeys(a, b map[string]time.Time) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if _, ok := b[k]; !ok {
			return false
		}
	}
	return true
}

func clip(s []string, n int) []string {
	if len(s) <= n {
		return s
	}
	return append(slices.Clone(s[:n]), fmt.Sprintf("and %d more", len(s)-n))
}

func apiMessage(err error) string {
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		return se.Status().Message
	}
	return err.Error()
}

// apiErr is an API failure with its code: the cluster did not answer (try
// again) or refused (the credential's rights).
func apiErr(what string, err error) error {
	if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
		return refusal.New(refusal.InvalidState, "%s: %s; the agent's credential needs get/list/patch on nodes, list on pods and poddisruptionbudgets, create on pods/eviction (and delete on pods for then: force)", what, apiMessage(err))
	}
	return refusal.New(refusal.Unavailable, "%s: %s; the drain resumes on the next pass", what, apiMessage(err))
}
