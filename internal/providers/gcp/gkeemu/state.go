package gkeemu

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// cluster is the emulator's truth about one cluster.
type cluster struct {
	project  *Project
	location string
	regional bool
	name     string
	id       string
	created  time.Time
	status   string
	message  string
	// locations are the cluster's node zones, the default of its pools.
	locations      []string
	initialVersion string
	masterVersion  string
	nodeVersion    string
	labels         map[string]string
	fingerprint    string
	privateNodes   bool
	endpoint       string
	pools          []*nodePool // in creation order, as GKE lists them
	etag           int
	// network, subnetwork, logging, monitoring and channel are as created;
	// "" is GKE's default, filled in when answering.
	network, subnetwork string
	logging, monitoring string
	channel             *string
	// echo are the accepted-and-returned fields, as the creator sent them.
	echo map[string]any
}

func clusterKey(project, location, name string) string { return project + "/" + location + "/" + name }

func (c *cluster) key() string { return clusterKey(c.project.ID, c.location, c.name) }

func (c *cluster) path() string {
	return "projects/" + c.project.ID + "/locations/" + c.location + "/clusters/" + c.name
}

func (c *cluster) pool(name string) *nodePool {
	for _, p := range c.pools {
		if p.name == name {
			return p
		}
	}
	return nil
}

// nodePool is the emulator's truth about one node pool.
type nodePool struct {
	name       string
	status     string
	message    string
	conditions []condition
	cfg        nodeConfig
	locations  []string
	// initialCount is what the pool was created with (and, with the guess
	// InitialCountTracksResize, what it was last resized to). The live size
	// is in the MIGs.
	initialCount int
	autoscaling  *autoscaling
	version      string
	migs         []string // mig keys, one per location
	etag         int
	autoRepair   bool
	autoUpgrade  bool
	upgrade      upgradeSettings
	maxPods      int
	// echo are the accepted-and-returned fields, as the creator sent them.
	echo map[string]any
}

type upgradeSettings struct {
	maxSurge, maxUnavailable int
	strategy                 string
}

type nodeConfig struct {
	machineType    string
	diskGB         int
	diskType       string
	imageType      string
	spot           bool
	preemptible    bool
	accelerators   []accelerator
	labels         map[string]string
	resourceLabels map[string]string
	taints         []taint
	oauthScopes    []string
	serviceAccount string
	metadata       map[string]string
}

type accelerator struct {
	Type   string
	Count  int64
	Driver string
}

type taint struct {
	Key, Value, Effect string
}

type autoscaling struct {
	enabled            bool
	min, max           int
	totalMin, totalMax int
	policy             string
}

type condition struct {
	Code          string `json:"code,omitempty"`
	Message       string `json:"message,omitempty"`
	CanonicalCode string `json:"canonicalCode,omitempty"`
}

// mig is a zonal managed instance group holding a node pool's machines in
// one zone.
type mig struct {
	project  *Project
	zone     string
	name     string
	id       uint64
	created  time.Time
	target   int
	stable   bool
	creating int
	deleting int
	// instances are the machines' names, oldest first; a name stays
	// with its machine until the machine is deleted.
	instances []string
	made      int
}

func migKey(project, zone, name string) string { return project + "/" + zone + "/" + name }

func (m *mig) selfLink() string {
	return "https://www.googleapis.com/compute/v1/projects/" + m.project.ID + "/zones/" + m.zone + "/instanceGroupManagers/" + m.name
}

// resize sets a MIG's target; the machines arrive or leave while an
// operation runs.
func (m *mig) resize(n int) {
	if n > m.target {
		m.creating = n - m.target
	} else {
		m.deleting = m.target - n
	}
	for len(m.instances) < n {
		m.made++
		m.instances = append(m.instances, m.baseName()+"-"+hash8(m.name + "/" + strconv.Itoa(m.made))[:4])
	}
	m.instances = m.instances[:n]
	m.target = n
	m.stable = m.creating == 0 && m.deleting == 0
}

// baseName is the instances' prefix: the group's name without "-grp".
func (m *mig) baseName() string { return strings.TrimSuffix(m.name, "-grp") }

// instanceLink is an instance's compute URL.
func (m *mig) instanceLink(name string) string {
	return "https://www.googleapis.com/compute/v1/projects/" + m.project.ID + "/zones/" + m.zone + "/instances/" + name
}

func (m *mig) settle() { m.creating, m.deleting, m.stable = 0, 0, true }

// operation is a container Operation.
type operation struct {
	name     string
	project  *Project
	location string
	opType   string
	target   string // resource path after "projects/{number}/"
	cluster  string // cluster key
	pool     string // "" for cluster operations
	verb     string // for the concurrency refusal
	status   string
	start    time.Time
	end      time.Time
	steps    int
	seen     int
	errCode  int
	errMsg   string
	detail   string
	finish   func(op *operation)
	nodes    int // the nodes an upgrade replaces
}

// hash8 is a short stable hex of s, for names the service derives.
func hash8(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:4])
}

func fingerprintOf(v any) string {
	b, _ := json.Marshal(v)
	h := sha256.Sum256(b)
	return base64.StdEncoding.EncodeToString(h[:8])
}

// locPath is how a resource path names a location in links: zonal
// resources under zones/, regional ones under locations/ (what the
// recordings of real GKE show for selfLink and targetLink).
func locPath(location string, regional bool) string {
	if regional {
		return "locations/" + location
	}
	return "zones/" + location
}

func (e *Emulator) isRegion(loc string) bool {
	for _, r := range e.opts.Regions {
		if r.Name == loc {
			return true
		}
	}
	return false
}

// regionOf returns the region a zone or region belongs to, or "".
func (e *Emulator) regionOf(loc string) string {
	for _, r := range e.opts.Regions {
		if r.Name == loc || slices.Contains(r.Zones, loc) {
			return r.Name
		}
	}
	return ""
}

func (e *Emulator) zonesOf(region string) []string {
	for _, r := range e.opts.Regions {
		if r.Name == region {
			return slices.Clone(r.Zones)
		}
	}
	return nil
}

func (e *Emulator) machineType(zone, name string) (MachineType, bool) {
	for _, m := range e.opts.MachineTypes {
		if m.Name == name && (len(m.Zones) == 0 || slices.Contains(m.Zones, zone)) {
			return m, true
		}
	}
	return MachineType{}, false
}

// builtInGPU reports whether an accelerator type is one a machine type of
// the catalogue is built with.
func (e *Emulator) builtInGPU(name string) bool {
	return slices.ContainsFunc(e.opts.MachineTypes, func(m MachineType) bool { return m.GPU != nil && m.GPU.Type == name })
}

func (e *Emulator) acceleratorType(zone, name string) (AcceleratorType, bool) {
	for _, a := range e.opts.AcceleratorTypes {
		if a.Name == name && slices.Contains(a.Zones, zone) {
			return a, true
		}
	}
	return AcceleratorType{}, false
}

// resolveVersion turns a version or alias into an offered version: "" and
// "-" are the default, "latest" the newest, "1.X" and "1.X.Y" the newest
// with that prefix, anything else must be offered exactly.
func (e *Emulator) resolveVersion(v string) (string, bool) {
	sorted := slices.Clone(e.opts.Versions)
	slices.SortFunc(sorted, func(a, b string) int { return compareVersions(b, a) })
	switch v {
	case "", "-":
		return e.opts.DefaultVersion, true
	case "latest":
		return sorted[0], true
	}
	for _, s := range sorted {
		if s == v || strings.HasPrefix(s, v+".") || strings.HasPrefix(s, v+"-") {
			return s, true
		}
	}
	return "", false
}

// compareVersions compares "1.34.3-gke.1100000" style versions numerically.
func compareVersions(a, b string) int {
	split := func(s string) []int {
		var out []int
		for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r < '0' || r > '9' }) {
			n, _ := strconv.Atoi(f)
			out = append(out, n)
		}
		return out
	}
	as, bs := split(a), split(b)
	for i := 0; i < max(len(as), len(bs)); i++ {
		var x, y int
		if i < len(as) {
			x = as[i]
		}
		if i < len(bs) {
			y = bs[i]
		}
		if x != y {
			return x - y
		}
	}
	return 0
}

// --- operations ---

// startOp records a running operation. Called with mu held.
func (e *Emulator) startOp(c *cluster, pool, opType, verb string, steps int, finish func(*operation)) *operation {
	e.seq++
	now := e.now()
	op := &operation{
		name:     fmt.Sprintf("operation-%d-%s", now.UnixMilli(), hash8(fmt.Sprintf("%s/%d", c.key(), e.seq))),
		project:  c.project,
		location: c.location,
		opType:   opType,
		target:   locPath(c.location, c.regional) + "/clusters/" + c.name,
		cluster:  c.key(),
		pool:     pool,
		verb:     verb,
		status:   "RUNNING",
		start:    now,
		steps:    steps,
		finish:   finish,
	}
	if pool != "" {
		op.target += "/nodePools/" + pool
	}
	e.ops[op.name] = op
	e.opOrder = append(e.opOrder, op.name)
	e.settle()
	return op
}

// settle finishes every operation that is due. Called with mu held.
func (e *Emulator) settle() {
	e.settleZoneOps()
	now := e.now()
	for _, name := range e.opOrder {
		op := e.ops[name]
		if op.status == "DONE" {
			continue
		}
		n := op.seen
		if e.opts.StepEvery > 0 {
			n += int(now.Sub(op.start) / e.opts.StepEvery)
		}
		if n < op.steps {
			continue
		}
		op.status, op.end = "DONE", now
		if op.finish != nil {
			op.finish(op)
		}
	}
}

// observe counts one look at the running operations of a cluster (pool
// "") or of one of its pools. Called with mu held.
func (e *Emulator) observe(clusterKey, pool string) {
	for _, name := range e.opOrder {
		op := e.ops[name]
		if op.status != "DONE" && op.cluster == clusterKey && op.pool == pool {
			op.seen++
		}
	}
}

// Advance moves every running operation one step.
func (e *Emulator) Advance() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, name := range e.opOrder {
		if op := e.ops[name]; op.status != "DONE" {
			op.seen++
		}
	}
	e.settle()
}

// busy returns the running operation of a cluster, if any. Called with mu
// held.
func (e *Emulator) busy(c *cluster) *operation {
	for _, name := range e.opOrder {
		op := e.ops[name]
		if op.status != "DONE" && op.cluster == c.key() {
			return op
		}
	}
	return nil
}

// refuseBusy is the refusal GKE answers while a cluster has an operation
// running (GKE's documentation, real texts).
func refuseBusy(c *cluster, op *operation) *apiError {
	if c.status == "PROVISIONING" || c.status == "STOPPING" {
		return failedPrecondition("Cluster is currently being created, deleted, updated or repaired and cannot be updated.")
	}
	return failedPrecondition("Operation %s is currently %s for cluster %s. Please wait and try again once it's done.", op.name, op.verb, c.name)
}

// --- quota ---

// usage is what a cluster's pools hold in a region, per quota metric.
// Called with mu held.
func (e *Emulator) usage(region string, skip *nodePool) map[string]float64 {
	use := map[string]float64{}
	for _, c := range e.clusters {
		if e.regionOf(c.location) != region {
			continue
		}
		for _, p := range c.pools {
			if p == skip {
				continue
			}
			for k, v := range e.poolNeeds(p.cfg, p.locations, e.poolTarget(p)) {
				use[k] += v
			}
		}
	}
	return use
}

// poolTarget is a pool's nodes per zone as its MIGs hold them. Called with
// mu held.
func (e *Emulator) poolTarget(p *nodePool) int {
	n := 0
	for _, k := range p.migs {
		if m := e.migs[k]; m != nil {
			n = max(n, m.target)
		}
	}
	return n
}

// poolNodes is a pool's machines over all its zones: the groups' targets
// added up, which differ after machines are deleted from one zone.
func (e *Emulator) poolNodes(p *nodePool) int {
	n := 0
	for _, k := range p.migs {
		if m := e.migs[k]; m != nil {
			n += m.target
		}
	}
	return n
}

// poolNeeds is what nodes per zone of a pool shape take from quota.
func (e *Emulator) poolNeeds(cfg nodeConfig, zones []string, perZone int) map[string]float64 {
	need := map[string]float64{}
	if perZone == 0 || len(zones) == 0 {
		return need
	}
	nodes := float64(perZone * len(zones))
	prefix := ""
	if cfg.spot || cfg.preemptible {
		prefix = "PREEMPTIBLE_"
	}
	if m, ok := e.machineType(zones[0], cfg.machineType); ok {
		need[prefix+"CPUS"] += nodes * float64(m.CPUs)
	}
	for _, a := range cfg.accelerators {
		metric := strings.ToUpper(strings.ReplaceAll(a.Type, "-", "_")) + "_GPUS"
		for _, t := range e.opts.AcceleratorTypes {
			if t.Name == a.Type && t.QuotaMetric != "" {
				metric = t.QuotaMetric
			}
		}
		need[prefix+metric] += nodes * float64(a.Count)
	}
	return need
}

// checkQuota refuses a request whose new machines would pass a regional
// quota, with the text GKE writes (GKE's documentation). Called with mu held.
func (e *Emulator) checkQuota(project *Project, region string, skip *nodePool, need map[string]float64) *apiError {
	limits := e.quotas[region]
	if len(limits) == 0 {
		return nil
	}
	use := e.usage(region, skip)
	var lines []string
	metrics := make([]string, 0, len(need))
	for m := range need {
		metrics = append(metrics, m)
	}
	slices.Sort(metrics)
	for _, m := range metrics {
		limit, ok := limits[m]
		if !ok {
			continue
		}
		avail := max(limit-use[m], 0)
		if need[m] > avail {
			lines = append(lines, fmt.Sprintf("resource %q: request requires '%.1f' and is short '%.1f'. project has a quota of '%.1f' with '%.1f' available", m, need[m], need[m]-avail, limit, avail))
		}
	}
	switch len(lines) {
	case 0:
		return nil
	case 1:
		return errf(403, "PERMISSION_DENIED", "forbidden", "Insufficient regional quota to satisfy request: %s. View and manage quotas at https://console.cloud.google.com/iam-admin/quotas?usage=USED&project=%s.", lines[0], project.ID)
	}
	msg := "Insufficient regional quota to satisfy request:"
	for i, l := range lines {
		msg += fmt.Sprintf(" (%d) %s.", i+1, l)
	}
	return errf(403, "PERMISSION_DENIED", "forbidden", "%s View and manage quotas at https://console.cloud.google.com/iam-admin/quotas?usage=USED&project=%s.", msg, project.ID)
}

// stockedOut lists the zones of a pool where its machine type cannot be had.
// Called with mu held.
func (e *Emulator) stockedOut(p *nodePool) []string {
	var out []string
	for _, z := range p.locations {
		if e.stockouts[z+"/"+p.cfg.machineType] {
			out = append(out, z)
		}
	}
	return out
}

// applyStockout marks a pool that needed machines where there are none.
// It reports the operation error, or "" when every zone was served.
// Called with mu held.
func (e *Emulator) applyStockout(p *nodePool, perZone int) string {
	if perZone == 0 {
		return ""
	}
	zones := e.stockedOut(p)
	if len(zones) == 0 {
		return ""
	}
	// The text and the status a stockout leaves are guesses from the
	// condition codes the discovery document lists (GKE's documentation).
	msg := fmt.Sprintf("The zone(s) %s do not have enough resources available to fulfill the request (GCE_STOCKOUT). Try a different zone, or try again later.", strings.Join(zones, ", "))
	p.conditions = []condition{{Code: "GCE_STOCKOUT", Message: msg, CanonicalCode: "RESOURCE_EXHAUSTED"}}
	p.message = msg
	if len(zones) == len(p.locations) {
		p.status = "ERROR"
	} else {
		p.status = "RUNNING_WITH_ERROR"
	}
	return msg
}
