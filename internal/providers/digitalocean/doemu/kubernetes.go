package doemu

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

func (e *Emulator) routes() {
	m := http.NewServeMux()
	m.HandleFunc("GET /v2/account", e.getAccount)
	m.HandleFunc("GET /v2/sizes", e.listSizes)
	m.HandleFunc("GET /v2/kubernetes/options", e.getOptions)
	m.HandleFunc("GET /v2/kubernetes/clusters", e.listClusters)
	m.HandleFunc("POST /v2/kubernetes/clusters", e.createCluster)
	m.HandleFunc("GET /v2/kubernetes/clusters/{cluster_id}", e.getCluster)
	m.HandleFunc("PUT /v2/kubernetes/clusters/{cluster_id}", e.updateCluster)
	m.HandleFunc("DELETE /v2/kubernetes/clusters/{cluster_id}", e.deleteCluster)
	m.HandleFunc("GET /v2/kubernetes/clusters/{cluster_id}/credentials", e.credentials)
	m.HandleFunc("GET /v2/kubernetes/clusters/{cluster_id}/kubeconfig", e.kubeconfig)
	m.HandleFunc("GET /v2/kubernetes/clusters/{cluster_id}/upgrades", e.upgrades)
	m.HandleFunc("POST /v2/kubernetes/clusters/{cluster_id}/upgrade", e.upgrade)
	m.HandleFunc("GET /v2/kubernetes/clusters/{cluster_id}/node_pools", e.listPools)
	m.HandleFunc("POST /v2/kubernetes/clusters/{cluster_id}/node_pools", e.createPool)
	m.HandleFunc("GET /v2/kubernetes/clusters/{cluster_id}/node_pools/{node_pool_id}", e.getPool)
	m.HandleFunc("PUT /v2/kubernetes/clusters/{cluster_id}/node_pools/{node_pool_id}", e.updatePool)
	m.HandleFunc("DELETE /v2/kubernetes/clusters/{cluster_id}/node_pools/{node_pool_id}", e.deletePool)
	m.HandleFunc("DELETE /v2/kubernetes/clusters/{cluster_id}/node_pools/{node_pool_id}/nodes/{node_id}", e.deleteNode)
	m.HandleFunc("POST "+TokenReviewPath, e.tokenReview)
	e.mux = m
}

// unprocessable is the service's answer to a request it understood and
// refuses.
func unprocessable(w http.ResponseWriter, format string, args ...any) {
	writeError(w, http.StatusUnprocessableEntity, "unprocessable_entity", fmt.Sprintf(format, args...))
}

func notFound(w http.ResponseWriter) {
	writeError(w, http.StatusNotFound, "not_found", "The resource you were accessing could not be found.")
}

// busy is the answer to a change of a cluster that is not running.
//
// Guess: the description documents no answer for a busy cluster; the
// emulator says 409 conflict. The adapter checks the state before asking,
// so a 422 from the real service would not reach the journal as a refusal.
func busy(w http.ResponseWriter, c *cluster) {
	writeError(w, http.StatusConflict, "conflict", fmt.Sprintf("cluster %s is %s; try again once it is running", c.id, c.state))
}

// decode reads a request body strictly: a member the body's type does not
// declare is refused (400, naming it) rather than taken and dropped.
//
// Guess: the service's answer to an undocumented member is not documented;
// the emulator refuses it as a body it cannot parse.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := decodeStrict(r, v); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", "unable to parse the request body: "+err.Error())
		return false
	}
	return true
}

// --- catalogue ---

func (e *Emulator) getAccount(w http.ResponseWriter, r *http.Request) {
	a := accountOf(r)
	status := "active"
	if a.Locked {
		status = "locked"
	}
	limit := a.DropletLimit
	if limit == 0 {
		limit = 25
	}
	writeJSON(w, http.StatusOK, map[string]any{"account": map[string]any{
		"droplet_limit": limit, "floating_ip_limit": 3, "email": a.Email, "name": a.Team,
		"uuid": tokenKey(a.Team)[:40], "email_verified": true, "status": status, "status_message": "",
		"team": map[string]any{"uuid": tokenKey("team:" + a.Team)[:40], "name": a.Team},
	}})
}

// page cuts a list by page and per_page and writes the links and meta of
// the description's pagination.
func (e *Emulator) page(r *http.Request, n int) (lo, hi int, links map[string]any, ok bool) {
	q := r.URL.Query()
	pageN, per := 1, 20
	if s := q.Get("page"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			return 0, 0, nil, false
		}
		pageN = v
	}
	if s := q.Get("per_page"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			return 0, 0, nil, false
		}
		per = v
	}
	per = min(per, e.opts.MaxPerPage)
	last := max((n+per-1)/per, 1)
	lo = min((pageN-1)*per, n)
	hi = min(lo+per, n)
	link := func(p int) string {
		u := url.URL{Scheme: "http", Host: r.Host, Path: r.URL.Path, RawQuery: url.Values{"page": {strconv.Itoa(p)}, "per_page": {strconv.Itoa(per)}}.Encode()}
		return u.String()
	}
	pages := map[string]any{}
	if pageN > 1 {
		pages["first"], pages["prev"] = link(1), link(min(pageN-1, last))
	}
	if pageN < last {
		pages["next"], pages["last"] = link(pageN+1), link(last)
	}
	return lo, hi, map[string]any{"pages": pages}, true
}

func badPage(w http.ResponseWriter) {
	writeError(w, http.StatusBadRequest, "bad_request", "page and per_page must be positive integers")
}

func (e *Emulator) listSizes(w http.ResponseWriter, r *http.Request) {
	lo, hi, links, ok := e.page(r, len(e.opts.Sizes))
	if !ok {
		badPage(w)
		return
	}
	sizes := []map[string]any{}
	for _, s := range e.opts.Sizes[lo:hi] {
		m := map[string]any{
			"slug": s.Slug, "memory": s.MemoryMB, "vcpus": s.VCPUs, "disk": s.DiskGB, "transfer": 4.0,
			"price_monthly": float64(int(s.PriceHourly*672*100)) / 100, "price_hourly": s.PriceHourly,
			"regions": s.Regions, "available": s.Available, "description": s.Description,
			"disk_info": []map[string]any{{"type": "local", "size": map[string]any{"amount": s.DiskGB, "unit": "gib"}}},
		}
		if s.GPU != nil {
			m["gpu_info"] = map[string]any{"count": s.GPU.Count, "model": s.GPU.Model, "vram": map[string]any{"amount": s.GPU.VRAMGiB, "unit": "gib"}}
		}
		sizes = append(sizes, m)
	}
	writeJSON(w, http.StatusOK, map[string]any{"sizes": sizes, "links": links, "meta": map[string]any{"total": len(e.opts.Sizes)}})
}

func (e *Emulator) getOptions(w http.ResponseWriter, _ *http.Request) {
	var regions, versions, sizes []map[string]any
	for _, r := range e.opts.Regions {
		regions = append(regions, map[string]any{"name": r.Name, "slug": r.Slug})
	}
	for i := len(e.opts.Versions) - 1; i >= 0; i-- {
		v := e.opts.Versions[i]
		versions = append(versions, map[string]any{"slug": v.Slug, "kubernetes_version": v.Kubernetes,
			"supported_features": []string{"cluster-autoscaler", "token-authentication"}})
	}
	for _, s := range e.opts.Sizes {
		if s.Kubernetes {
			sizes = append(sizes, map[string]any{"name": s.Slug, "slug": s.Slug})
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"options": map[string]any{"regions": regions, "versions": versions, "sizes": sizes}})
}

// --- validation ---

// Guess: DigitalOcean documents no limit on cluster and node pool names;
// the emulator takes what its control panel suggests: lower-case letters,
// digits and dashes, starting and ending with a letter or digit, at most 63.
var nameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// The tag rule of the description's tags model.
var tagRE = regexp.MustCompile(`^[a-zA-Z0-9_\-\:]+$`)

var labelName = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`)
var dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

// userTags drops the tags DigitalOcean adds by itself (k8s, k8s-worker,
// k8s:<cluster id>), which a PUT may send back.
func userTags(tags []string) []string {
	var user []string
	for _, t := range tags {
		if t != "k8s" && t != "k8s-worker" && !strings.HasPrefix(t, "k8s:") {
			user = append(user, t)
		}
	}
	return user
}

func checkTags(tags []string) string {
	for _, t := range tags {
		if len(t) > 255 || !tagRE.MatchString(t) {
			return fmt.Sprintf("tag %q must be at most 255 letters, digits, ':', '-' or '_'", t)
		}
	}
	return ""
}

// checkLabels holds labels to Kubernetes' rules, since DOKS puts them on
// the nodes.
func checkLabels(labels map[string]string) string {
	for k, v := range labels {
		prefix, name, hasPrefix := strings.Cut(k, "/")
		if !hasPrefix {
			prefix, name = "", k
		}
		if (hasPrefix && (len(prefix) > 253 || !dnsSubdomain.MatchString(prefix))) || !labelName.MatchString(name) {
			return fmt.Sprintf("label key %q is not a valid Kubernetes label key", k)
		}
		if v != "" && !labelName.MatchString(v) {
			return fmt.Sprintf("label value %q of %q is not a valid Kubernetes label value", v, k)
		}
	}
	return ""
}

// maxNodes bounds a node pool.
//
// Guess: DigitalOcean documents no per-pool maximum here; 1000 matches the
// contract's own bound on a flavor's nodes.
const maxNodes = 1000

type poolReq struct {
	Name      string            `json:"name"`
	Size      string            `json:"size"`
	Count     *int              `json:"count"`
	Tags      []string          `json:"tags"`
	Labels    map[string]string `json:"labels"`
	Taints    []map[string]any  `json:"taints"`
	AutoScale *bool             `json:"auto_scale"`
	MinNodes  *int              `json:"min_nodes"`
	MaxNodes  *int              `json:"max_nodes"`
	Spot      *bool             `json:"spot"`
	// GPUPartitionMode (AMD partitioning, create only) is godo's but not
	// the description's, and not modelled: refused when set.
	GPUPartitionMode string `json:"gpu_partition_mode"`
}

// taints reads taints with keys in any case: godo sends `Key`, `Value`,
// `Effect` (its Taint has no JSON tags), the service answers lower case.
func taints(in []map[string]any) ([]taint, string) {
	var out []taint
	for _, m := range in {
		var t taint
		for k, v := range m {
			s, _ := v.(string)
			switch strings.ToLower(k) {
			case "key":
				t.Key = s
			case "value":
				t.Value = s
			case "effect":
				t.Effect = s
			}
		}
		if t.Key == "" || !slices.Contains([]string{"NoSchedule", "PreferNoSchedule", "NoExecute"}, t.Effect) {
			return nil, fmt.Sprintf("taint %+v needs a key and an effect of NoSchedule, PreferNoSchedule or NoExecute", m)
		}
		out = append(out, t)
	}
	return out, ""
}

// sizing checks a pool's count and autoscaling. count nil means absent.
func sizing(count *int, autoScale bool, minN, maxN int) (int, string) {
	if autoScale {
		if minN < 0 || maxN < 1 || minN > maxN || maxN > maxNodes {
			return 0, fmt.Sprintf("autoscaling needs 0 <= min_nodes <= max_nodes, 1 <= max_nodes <= %d", maxNodes)
		}
		n := minN
		if count != nil {
			n = *count
		}
		// Guess: an autoscaled pool may start from 0 nodes when min_nodes
		// is 0 (DigitalOcean documents scaling up from zero); a count
		// outside the bounds is brought within them, as the autoscaler
		// would.
		return min(max(n, minN), maxN), ""
	}
	if count == nil {
		return 0, "node pool count is required"
	}
	// Guess: a pool without autoscaling takes at least one node (the
	// reference: "a fixed-size pool has at least one node").
	if *count < 1 || *count > maxNodes {
		return 0, fmt.Sprintf("node pool count must be between 1 and %d without autoscaling", maxNodes)
	}
	return *count, ""
}

// capacity checks that n more nodes of a size fit: the size must take new
// droplets in the region, not be out of stock, and the team's droplet
// limit must hold. Called with mu held.
func (e *Emulator) capacity(team, region, size string, n int, spot, previews bool) (int, string) {
	s, ok := e.size(size)
	switch {
	case !ok || !s.Kubernetes:
		return http.StatusUnprocessableEntity, fmt.Sprintf("%s is not a valid node size", size)
	case !s.Available || !slices.Contains(s.Regions, region):
		return http.StatusUnprocessableEntity, fmt.Sprintf("size %s is not available in region %s", size, region)
	case spot && !previews:
		// Guess: a Spot pool of a team without the preview is refused.
		return http.StatusUnprocessableEntity, "spot node pools are a preview this team has not joined"
	}
	if n <= 0 {
		return 0, ""
	}
	if e.stockouts[size+"@"+region] {
		// Guess: DigitalOcean's wording for a region out of a size is not
		// documented; the adapter reads "capacity" as a stockout.
		return http.StatusUnprocessableEntity, fmt.Sprintf("insufficient capacity: %s is out of stock in %s; try again later or use another region", size, region)
	}
	limit, used := 25, 0
	for _, a := range e.opts.Accounts {
		if a.Team == team && a.DropletLimit > 0 {
			limit = a.DropletLimit
		}
	}
	for _, c := range e.clusters {
		if c.team != team {
			continue
		}
		for _, p := range c.pools {
			for _, nd := range p.nodes {
				if nd.state != "draining" {
					used++
				}
			}
		}
	}
	if used+n > limit {
		// Guess: the quota's status and words are not documented (the
		// description lists none); 422 naming the droplet limit.
		return http.StatusUnprocessableEntity, fmt.Sprintf("creating %d droplets would exceed your droplet limit of %d (%d in use); request an increase", n, limit, used)
	}
	return 0, ""
}

func (e *Emulator) previews(team string) bool {
	for _, a := range e.opts.Accounts {
		if a.Team == team && a.Previews {
			return true
		}
	}
	return false
}

// newPool checks a node pool of a create request and makes it, nodes not yet
// reconciled. Called with mu held.
func (e *Emulator) newPool(c *cluster, req poolReq) (*pool, int, string) {
	if req.GPUPartitionMode != "" {
		return nil, http.StatusUnprocessableEntity, "gpu_partition_mode is not supported by this emulator; leave it out"
	}
	if !nameRE.MatchString(req.Name) {
		return nil, http.StatusUnprocessableEntity, fmt.Sprintf("node pool name %q must be lower-case letters, digits and '-', at most 63", req.Name)
	}
	if !e.opts.AllowDuplicateNames && slices.ContainsFunc(c.pools, func(p *pool) bool { return p.name == req.Name }) {
		// Guess: a node pool name is unique in its cluster.
		return nil, http.StatusUnprocessableEntity, fmt.Sprintf("a node pool named %s already exists in this cluster", req.Name)
	}
	if msg := checkTags(req.Tags); msg != "" {
		return nil, http.StatusUnprocessableEntity, msg
	}
	if msg := checkLabels(req.Labels); msg != "" {
		return nil, http.StatusUnprocessableEntity, msg
	}
	ts, msg := taints(req.Taints)
	if msg != "" {
		return nil, http.StatusUnprocessableEntity, msg
	}
	auto := req.AutoScale != nil && *req.AutoScale
	count, msg := sizing(req.Count, auto, deref(req.MinNodes), deref(req.MaxNodes))
	if msg != "" {
		return nil, http.StatusUnprocessableEntity, msg
	}
	spot := req.Spot != nil && *req.Spot && !e.opts.IgnoreSpot
	if status, msg := e.capacity(c.team, c.region, req.Size, count, spot, e.previews(c.team)); status != 0 {
		return nil, status, msg
	}
	e.seq++
	p := &pool{
		id: e.uuid("pool", e.seq), name: req.Name, size: req.Size, count: count,
		tags: slices.Clone(req.Tags), labels: cloneLabels(req.Labels), taints: ts,
		autoScale: auto, spot: spot,
	}
	if auto {
		p.minNodes, p.maxNodes = deref(req.MinNodes), deref(req.MaxNodes)
	}
	return p, 0, ""
}

func deref(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

// --- clusters ---

type createClusterReq struct {
	Name              string       `json:"name"`
	Region            string       `json:"region"`
	Version           string       `json:"version"`
	Tags              []string     `json:"tags"`
	VPCUUID           string       `json:"vpc_uuid"`
	WorkerSubnetUUID  string       `json:"worker_subnet_uuid"`
	ClusterSubnet     string       `json:"cluster_subnet"`
	ServiceSubnet     string       `json:"service_subnet"`
	NodePools         []poolReq    `json:"node_pools"`
	IsolatedWorkers   bool         `json:"isolated_workers"`
	HA                *bool        `json:"ha"`
	AutoUpgrade       bool         `json:"auto_upgrade"`
	SurgeUpgrade      bool         `json:"surge_upgrade"`
	MaintenancePolicy *maintenance `json:"maintenance_policy"`
	NvidiaPlugin      *plugin      `json:"nvidia_gpu_device_plugin"`
	AmdPlugin         *plugin      `json:"amd_gpu_device_plugin"`
	settings
	unmodelled
}

var startTimeRE = regexp.MustCompile(`^([01][0-9]|2[0-3]):[0-5][0-9]$`)

var days = []string{"any", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"}

// window checks a maintenance policy over the one in force; what it leaves
// empty keeps its value.
func window(in *maintenance, cur maintenance) (maintenance, string) {
	if in == nil {
		return cur, ""
	}
	if in.StartTime != "" {
		if !startTimeRE.MatchString(in.StartTime) {
			return cur, fmt.Sprintf("maintenance_policy.start_time %q must be HH:MM in UTC", in.StartTime)
		}
		cur.StartTime = in.StartTime
	}
	if in.Day != "" {
		if !slices.Contains(days, in.Day) {
			return cur, fmt.Sprintf("maintenance_policy.day %q must be any or a day of the week in lower case", in.Day)
		}
		cur.Day = in.Day
	}
	return cur, ""
}

// haDefault is a new cluster's ha when the create leaves it out: on from
// DOKS 1.36, off before, as the description says.
func haDefault(kubernetes string) bool {
	var major, minor int
	if _, err := fmt.Sscanf(kubernetes, "%d.%d", &major, &minor); err != nil {
		return false
	}
	return major > 1 || (major == 1 && minor >= 36)
}

func (e *Emulator) kubernetesOf(slug string) string {
	for _, v := range e.opts.Versions {
		if v.Slug == slug {
			return v.Kubernetes
		}
	}
	return ""
}

// resolveVersion turns a version slug, a minor version or "latest" into
// the slug of a release.
func (e *Emulator) resolveVersion(v string) (string, bool) {
	vs := e.opts.Versions
	if v == "latest" {
		return vs[len(vs)-1].Slug, true
	}
	for i := len(vs) - 1; i >= 0; i-- {
		if vs[i].Slug == v || strings.HasPrefix(vs[i].Kubernetes, v+".") || vs[i].Kubernetes == v {
			return vs[i].Slug, true
		}
	}
	return "", false
}

func (e *Emulator) createCluster(w http.ResponseWriter, r *http.Request) {
	var req createClusterReq
	if !decode(w, r, &req) {
		return
	}
	if f := req.unmodelled.refused(); f != "" {
		unprocessable(w, "%s is not supported by this emulator; leave it out", f)
		return
	}
	maint, msg := window(req.MaintenancePolicy, maintenance{StartTime: "00:00", Day: "any"})
	if msg != "" {
		unprocessable(w, "%s", msg)
		return
	}
	a := accountOf(r)
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case !nameRE.MatchString(req.Name):
		unprocessable(w, "cluster name %q must be lower-case letters, digits and '-', at most 63", req.Name)
		return
	case !e.hasRegion(req.Region):
		unprocessable(w, "region %q is not a valid Kubernetes region", req.Region)
		return
	}
	version, ok := e.resolveVersion(req.Version)
	if !ok {
		unprocessable(w, "version %q is not a valid Kubernetes version", req.Version)
		return
	}
	if msg := checkTags(req.Tags); msg != "" {
		unprocessable(w, "%s", msg)
		return
	}
	if !e.opts.AllowDuplicateNames {
		for _, c := range e.clusters {
			if c.team == a.Team && c.name == req.Name {
				// Guess: whether names are unique per team is not
				// documented (DigitalOcean's documentation); the emulator refuses a second
				// one, and with AllowDuplicateNames takes it.
				unprocessable(w, "a cluster with the name %s already exists", req.Name)
				return
			}
		}
	}
	now := e.opts.Clock.Now()
	e.seq++
	c := &cluster{
		id: e.uuid("cluster", e.seq), name: req.Name, region: req.Region, version: version, team: a.Team,
		tags: slices.Clone(req.Tags), vpc: req.VPCUUID, isolated: req.IsolatedWorkers,
		clusterSubnet: req.ClusterSubnet, serviceSubnet: req.ServiceSubnet, workerSubnet: req.WorkerSubnetUUID,
		ha: haDefault(e.kubernetesOf(version)), autoUpgrade: req.AutoUpgrade, surgeUpgrade: req.SurgeUpgrade,
		maint: maint,
		state: "provisioning", message: "provisioning", op: e.newOp(e.opts.Steps.Cluster),
		created: now, updated: now,
	}
	if c.vpc == "" {
		c.vpc = e.uuid("vpc:"+req.Region, 0)
	}
	// Guess: the subnets DigitalOcean picks when a create names none.
	if c.clusterSubnet == "" {
		c.clusterSubnet = "10.244.0.0/16"
	}
	if c.serviceSubnet == "" {
		c.serviceSubnet = "10.245.0.0/16"
	}
	if req.HA != nil {
		c.ha = *req.HA
	}
	c.settings.merge(req.settings)
	if req.NvidiaPlugin != nil {
		c.nvidiaPlugin = req.NvidiaPlugin.Enabled
	}
	if req.AmdPlugin != nil {
		c.amdPlugin = req.AmdPlugin.Enabled
	}
	c.endpoint = "https://" + c.id + ".k8s.doemu.invalid"
	if e.opts.Kube != nil {
		c.endpoint = e.opts.Kube.URL
	}
	workers := 0
	for _, pr := range req.NodePools {
		p, status, msg := e.newPool(c, pr)
		if status != 0 {
			writeError(w, status, "unprocessable_entity", msg)
			return
		}
		c.pools = append(c.pools, p)
		workers += p.count
	}
	if workers == 0 {
		unprocessable(w, "a cluster must contain at least one node pool with at least one worker")
		return
	}
	for _, p := range c.pools {
		e.reconcile(c, p)
	}
	e.clusters[c.id] = c
	e.order = append(e.order, c.id)
	writeJSON(w, http.StatusCreated, map[string]any{"kubernetes_cluster": e.render(c)})
}

// find returns a team's cluster by id, settled; nil when there is none.
// Called with mu held.
func (e *Emulator) find(r *http.Request) *cluster {
	c := e.clusters[r.PathValue("cluster_id")]
	if c == nil || c.team != accountOf(r).Team || !e.settle(c) {
		return nil
	}
	return c
}

func (e *Emulator) listClusters(w http.ResponseWriter, r *http.Request) {
	a := accountOf(r)
	e.mu.Lock()
	defer e.mu.Unlock()
	var mine []*cluster
	for _, id := range slices.Clone(e.order) {
		c := e.clusters[id]
		if c.team != a.Team || !e.settle(c) {
			continue
		}
		// A listing is a look at every cluster it holds, as a GET of each
		// is: a client that waits through the list sees them come up.
		c.observe()
		if e.settle(c) {
			mine = append(mine, c)
		}
	}
	lo, hi, links, ok := e.page(r, len(mine))
	if !ok {
		badPage(w)
		return
	}
	out := []wireCluster{}
	for _, c := range mine[lo:hi] {
		out = append(out, e.render(c))
	}
	writeJSON(w, http.StatusOK, map[string]any{"kubernetes_clusters": out, "links": links, "meta": map[string]any{"total": len(mine)}})
}

func (e *Emulator) getCluster(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.find(r)
	if c != nil {
		c.observe()
		if !e.settle(c) {
			c = nil
		}
	}
	if c == nil {
		notFound(w)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"kubernetes_cluster": e.render(c)})
}

type updateClusterReq struct {
	Name              *string      `json:"name"`
	Tags              *[]string    `json:"tags"`
	MaintenancePolicy *maintenance `json:"maintenance_policy"`
	AutoUpgrade       *bool        `json:"auto_upgrade"`
	SurgeUpgrade      *bool        `json:"surge_upgrade"`
	HA                *bool        `json:"ha"`
	NvidiaPlugin      *plugin      `json:"nvidia_gpu_device_plugin"`
	AmdPlugin         *plugin      `json:"amd_gpu_device_plugin"`
	settings
	unmodelled
}

func (e *Emulator) updateCluster(w http.ResponseWriter, r *http.Request) {
	var req updateClusterReq
	if !decode(w, r, &req) {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.find(r)
	switch {
	case c == nil:
		notFound(w)
		return
	case c.state == e.opts.DeletingState:
		busy(w, c)
		return
	case req.Name != nil && !nameRE.MatchString(*req.Name):
		// The description marks name required on a PUT; godo leaves it
		// out when empty and doctl's updates do not send it, so a PUT
		// without one keeps the name.
		unprocessable(w, "cluster name %q must be lower-case letters, digits and '-', at most 63", *req.Name)
		return
	case req.HA != nil && !*req.HA && c.ha:
		unprocessable(w, "ha cannot be disabled once a cluster runs a highly available control plane")
		return
	}
	if f := req.unmodelled.refused(); f != "" {
		unprocessable(w, "%s is not supported by this emulator; leave it out", f)
		return
	}
	maint, msg := window(req.MaintenancePolicy, c.maint)
	if msg != "" {
		unprocessable(w, "%s", msg)
		return
	}
	var user []string
	if req.Tags != nil {
		user = userTags(*req.Tags)
		if msg := checkTags(user); msg != "" {
			unprocessable(w, "%s", msg)
			return
		}
	}
	// Everything is checked: apply. Guess: a field left out of the PUT
	// keeps its value.
	if req.Name != nil {
		c.name = *req.Name
	}
	if req.Tags != nil {
		c.tags = user
	}
	c.maint = maint
	if req.AutoUpgrade != nil {
		c.autoUpgrade = *req.AutoUpgrade
	}
	if req.SurgeUpgrade != nil {
		c.surgeUpgrade = *req.SurgeUpgrade
	}
	if req.HA != nil {
		c.ha = *req.HA
	}
	c.settings.merge(req.settings)
	if req.NvidiaPlugin != nil {
		c.nvidiaPlugin = req.NvidiaPlugin.Enabled
	}
	if req.AmdPlugin != nil {
		c.amdPlugin = req.AmdPlugin.Enabled
	}
	c.updated = e.opts.Clock.Now()
	writeJSON(w, http.StatusAccepted, map[string]any{"kubernetes_cluster": e.render(c)})
}

func (e *Emulator) deleteCluster(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.find(r)
	if c == nil {
		notFound(w)
		return
	}
	// Guess: deleting a cluster already being deleted is accepted again
	// (204); the adapter takes a 404 or a 409 there as well.
	if c.state != e.opts.DeletingState {
		now := e.opts.Clock.Now()
		c.state, c.message, c.op, c.updated = e.opts.DeletingState, "deleting", e.newOp(e.opts.Steps.Delete), now
		for _, p := range c.pools {
			for _, n := range p.nodes {
				n.state, n.op, n.updated = "draining", e.newOp(e.opts.Steps.Drain), now
			}
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

func (e *Emulator) upgrades(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.find(r)
	if c == nil {
		notFound(w)
		return
	}
	var out []map[string]any
	for _, v := range e.upgradesOf(c) {
		out = append(out, map[string]any{"slug": v.Slug, "kubernetes_version": v.Kubernetes})
	}
	writeJSON(w, http.StatusOK, map[string]any{"available_upgrade_versions": out})
}

// upgradesOf are the releases a cluster may go to: later ones of its own
// minor or of the next, never two minors at once (DOKS offers the next
// minor only). Called with mu held.
func (e *Emulator) upgradesOf(c *cluster) []Version {
	var ha, hi int
	fmt.Sscanf(e.kubernetesOf(c.version), "%d.%d", &ha, &hi)
	var out []Version
	newer := false
	for _, v := range e.opts.Versions {
		var a, b int
		fmt.Sscanf(v.Kubernetes, "%d.%d", &a, &b)
		if newer && a == ha && b <= hi+1 {
			out = append(out, v)
		}
		newer = newer || v.Slug == c.version
	}
	return out
}

func (e *Emulator) upgrade(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Version string `json:"version"`
	}
	if !decode(w, r, &req) {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.find(r)
	if c == nil {
		notFound(w)
		return
	}
	if c.state != "running" && c.state != "degraded" {
		busy(w, c)
		return
	}
	if !slices.ContainsFunc(e.upgradesOf(c), func(v Version) bool { return v.Slug == req.Version }) {
		unprocessable(w, "%q is not an available upgrade for this cluster (it runs %s)", req.Version, c.version)
		return
	}
	c.state, c.message, c.target, c.op = "upgrading", "upgrading to "+req.Version, req.Version, e.newOp(e.opts.Steps.Upgrade)
	c.updated = e.opts.Clock.Now()
	w.WriteHeader(http.StatusAccepted)
}

// --- node pools ---

// poolOf finds the request's cluster and node pool; either may be nil.
// Called with mu held.
func (e *Emulator) poolOf(r *http.Request) (*cluster, *pool) {
	c := e.find(r)
	if c == nil {
		return nil, nil
	}
	return c, e.findPool(c, r)
}

func (e *Emulator) findPool(c *cluster, r *http.Request) *pool {
	id := r.PathValue("node_pool_id")
	for _, p := range c.pools {
		if p.id == id {
			return p
		}
	}
	return nil
}

func (e *Emulator) listPools(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.find(r)
	if c == nil {
		notFound(w)
		return
	}
	for _, p := range c.pools {
		p.observe()
	}
	e.settle(c)
	out := []wirePool{}
	for _, p := range c.pools {
		out = append(out, e.renderPool(c, p))
	}
	writeJSON(w, http.StatusOK, map[string]any{"node_pools": out})
}

func (e *Emulator) getPool(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	defer e.mu.Unlock()
	c, p := e.poolOf(r)
	if p != nil {
		p.observe()
		e.settle(c)
		p = e.findPool(c, r)
	}
	if p == nil {
		notFound(w)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"node_pool": e.renderPool(c, p)})
}

// running reports whether the cluster takes node pool changes.
func running(c *cluster) bool { return c.state == "running" || c.state == "degraded" }

func (e *Emulator) createPool(w http.ResponseWriter, r *http.Request) {
	var req poolReq
	if !decode(w, r, &req) {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.find(r)
	switch {
	case c == nil:
		notFound(w)
		return
	case !running(c):
		busy(w, c)
		return
	}
	p, status, msg := e.newPool(c, req)
	if status != 0 {
		writeError(w, status, "unprocessable_entity", msg)
		return
	}
	c.pools = append(c.pools, p)
	e.reconcile(c, p)
	writeJSON(w, http.StatusCreated, map[string]any{"node_pool": e.renderPool(c, p)})
}

func (e *Emulator) updatePool(w http.ResponseWriter, r *http.Request) {
	var req poolReq
	if !decode(w, r, &req) {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	c, p := e.poolOf(r)
	switch {
	case p == nil:
		notFound(w)
		return
	case !running(c):
		busy(w, c)
		return
	case p.deleting:
		writeError(w, http.StatusConflict, "conflict", "node pool "+p.id+" is being deleted")
		return
	case req.Name != "" && !nameRE.MatchString(req.Name):
		// The description marks name and count as required on a PUT;
		// godo leaves both out when unset and doctl's updates send only
		// the flags given, so what is left out keeps its value.
		unprocessable(w, "node pool name %q must be lower-case letters, digits and '-', at most 63", req.Name)
		return
	case req.GPUPartitionMode != "":
		unprocessable(w, "gpu_partition_mode is not supported by this emulator; leave it out")
		return
	case req.Size != "" && req.Size != p.size:
		unprocessable(w, "a node pool's size cannot be changed; create a new node pool")
		return
	}
	if req.Name == "" {
		req.Name = p.name
	}
	if req.Count == nil {
		n := p.count
		req.Count = &n
	}
	if req.Name != p.name && !e.opts.AllowDuplicateNames && slices.ContainsFunc(c.pools, func(q *pool) bool { return q.name == req.Name }) {
		unprocessable(w, "a node pool named %s already exists in this cluster", req.Name)
		return
	}
	// Guess: a field left out of the PUT keeps its value.
	auto, minN, maxN := p.autoScale, p.minNodes, p.maxNodes
	if req.AutoScale != nil {
		auto = *req.AutoScale
	}
	if req.MinNodes != nil {
		minN = *req.MinNodes
	}
	if req.MaxNodes != nil {
		maxN = *req.MaxNodes
	}
	count, msg := sizing(req.Count, auto, minN, maxN)
	if msg != "" {
		unprocessable(w, "%s", msg)
		return
	}
	if status, msg := e.capacity(c.team, c.region, p.size, count-p.liveNodes(), false, true); status != 0 {
		writeError(w, status, "unprocessable_entity", msg)
		return
	}
	if req.Tags != nil {
		user := userTags(req.Tags)
		if msg := checkTags(user); msg != "" {
			unprocessable(w, "%s", msg)
			return
		}
		p.tags = user
	}
	if req.Labels != nil {
		if msg := checkLabels(req.Labels); msg != "" {
			unprocessable(w, "%s", msg)
			return
		}
		p.labels = cloneLabels(req.Labels)
	}
	if req.Taints != nil {
		ts, msg := taints(req.Taints)
		if msg != "" {
			unprocessable(w, "%s", msg)
			return
		}
		p.taints = ts
	}
	p.name, p.count, p.autoScale = req.Name, count, auto
	p.minNodes, p.maxNodes = 0, 0
	if auto {
		p.minNodes, p.maxNodes = minN, maxN
	}
	e.reconcile(c, p)
	writeJSON(w, http.StatusAccepted, map[string]any{"node_pool": e.renderPool(c, p)})
}

func (p *pool) liveNodes() int {
	n := 0
	for _, nd := range p.nodes {
		if nd.state != "draining" {
			n++
		}
	}
	return n
}

func (e *Emulator) deletePool(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	defer e.mu.Unlock()
	c, p := e.poolOf(r)
	switch {
	case p == nil:
		notFound(w)
		return
	case !running(c):
		busy(w, c)
		return
	}
	if !p.deleting {
		others := 0
		for _, q := range c.pools {
			if q != p && !q.deleting {
				others++
			}
		}
		if others == 0 {
			// Guess: a cluster keeps at least one node pool, as its create
			// needs one.
			unprocessable(w, "a cluster must keep at least one node pool; delete the cluster instead")
			return
		}
		now := e.opts.Clock.Now()
		p.deleting, p.op = true, e.newOp(e.opts.Steps.Drain)
		for _, n := range p.nodes {
			if n.state != "draining" {
				n.state, n.op, n.updated = "draining", e.newOp(e.opts.Steps.Drain), now
			}
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

// flag reads a 0/1 query flag of the node delete; absent is 0.
func flag(q url.Values, name string) (bool, bool) {
	switch q.Get(name) {
	case "", "0", "false":
		return false, true
	case "1", "true":
		return true, true
	}
	return false, false
}

// deleteNode deletes one node of a pool: drained first unless skip_drain,
// and replaced by a new one (the pool keeps its count) with replace, else
// the pool's count goes down by one.
func (e *Emulator) deleteNode(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	skip, ok1 := flag(q, "skip_drain")
	replace, ok2 := flag(q, "replace")
	if !ok1 || !ok2 {
		writeError(w, http.StatusBadRequest, "bad_request", "skip_drain and replace take 0 or 1")
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	c, p := e.poolOf(r)
	var n *node
	if p != nil {
		i := slices.IndexFunc(p.nodes, func(n *node) bool { return n.id == r.PathValue("node_id") })
		if i >= 0 && p.nodes[i].state != "draining" {
			n = p.nodes[i]
		}
	}
	switch {
	case n == nil:
		// A node already leaving is gone as far as a client can act on it.
		notFound(w)
		return
	case !running(c):
		busy(w, c)
		return
	case p.deleting:
		writeError(w, http.StatusConflict, "conflict", "node pool "+p.id+" is being deleted")
		return
	}
	if replace && !skip {
		// The replacement comes up while the old node drains: one more
		// droplet for a while, held to the same capacity as a resize.
		if status, msg := e.capacity(c.team, c.region, p.size, 1, false, true); status != 0 {
			writeError(w, status, "unprocessable_entity", msg)
			return
		}
	}
	if !replace {
		// Guess: deleting a node without replacement is a resize by one,
		// held to a resize's bounds (a fixed-size pool keeps one node, an
		// autoscaled one its minimum).
		floor := 1
		if p.autoScale {
			floor = p.minNodes
		}
		if p.count-1 < floor {
			unprocessable(w, "node pool %s cannot go below %d nodes; delete it with replace=1, or delete the pool", p.id, floor)
			return
		}
		p.count--
	}
	now := e.opts.Clock.Now()
	if skip {
		p.nodes = slices.DeleteFunc(p.nodes, func(m *node) bool { return m == n })
	} else {
		n.state, n.op, n.updated = "draining", e.newOp(e.opts.Steps.Drain), now
	}
	e.reconcile(c, p)
	w.WriteHeader(http.StatusAccepted)
}

// SeedCluster is a cluster someone else made, running, for adoption.
type SeedCluster struct {
	Team    string
	Name    string
	Region  string
	Version string // a slug; "" is the newest
	Tags    []string
	// NvidiaPlugin and AmdPlugin are the device plugins as the owner set
	// them; nil leaves DigitalOcean's default (on with a GPU pool).
	NvidiaPlugin, AmdPlugin *bool
	Pools                   []SeedPool
}

// SeedPool is a node pool of a seeded cluster.
type SeedPool struct {
	Name   string
	Size   string
	Count  int
	Labels map[string]string
}

// Seed adds a running cluster with running nodes and returns its id.
func (e *Emulator) Seed(s SeedCluster) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.opts.Clock.Now()
	version := s.Version
	if version == "" {
		version = e.opts.Versions[len(e.opts.Versions)-1].Slug
	}
	e.seq++
	c := &cluster{
		id: e.uuid("seed", e.seq), name: s.Name, region: s.Region, version: version, team: s.Team,
		tags: slices.Clone(s.Tags), state: "running", nvidiaPlugin: s.NvidiaPlugin, amdPlugin: s.AmdPlugin,
		created: now, updated: now, maint: maintenance{StartTime: "00:00", Day: "any"},
		clusterSubnet: "10.244.0.0/16", serviceSubnet: "10.245.0.0/16",
	}
	c.vpc = e.uuid("vpc:"+s.Region, 0)
	c.endpoint = "https://" + c.id + ".k8s.doemu.invalid"
	if e.opts.Kube != nil {
		c.endpoint = e.opts.Kube.URL
	}
	for _, sp := range s.Pools {
		e.seq++
		p := &pool{id: e.uuid("pool", e.seq), name: sp.Name, size: sp.Size, count: sp.Count, labels: cloneLabels(sp.Labels)}
		c.pools = append(c.pools, p)
		e.reconcile(c, p)
		for _, n := range p.nodes {
			n.state, n.op = "running", nil
		}
	}
	e.clusters[c.id] = c
	e.order = append(e.order, c.id)
	return c.id
}

// ClusterState is what the emulator holds of a cluster, for assertions.
type ClusterState struct {
	ID, Name, Region, Version, State string
	Message                          string
	Team                             string
	Tags                             []string
	// NvidiaPlugin and AmdPlugin are the device plugins as the cluster
	// shows them (DigitalOcean's default applied): nil when absent.
	NvidiaPlugin, AmdPlugin *bool
	Pools                   []PoolState
}

// PoolState is what the emulator holds of a node pool.
type PoolState struct {
	ID, Name, Size string
	Count          int
	Tags           []string
	Labels         map[string]string
	AutoScale      bool
	MinNodes       int
	MaxNodes       int
	Nodes          int
	Spot           bool
	Deleting       bool
	// DropletIDs are the droplets of the pool's nodes not yet gone (a
	// draining node's too), as its Kubernetes Nodes carry them in their
	// providerID (`digitalocean://<droplet id>`).
	DropletIDs []string
}

// Clusters lists every cluster of every team, in creation order, without
// observing them.
func (e *Emulator) Clusters() []ClusterState {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []ClusterState
	for _, id := range e.order {
		c := e.clusters[id]
		cs := ClusterState{ID: c.id, Name: c.name, Region: c.region, Version: c.version, State: c.state, Message: c.message,
			Team: c.team, Tags: slices.Clone(c.tags)}
		if pl := e.plugin(c, c.nvidiaPlugin, "nvidia"); pl != nil {
			cs.NvidiaPlugin = pl.Enabled
		}
		if pl := e.plugin(c, c.amdPlugin, "amd"); pl != nil {
			cs.AmdPlugin = pl.Enabled
		}
		for _, p := range c.pools {
			cs.Pools = append(cs.Pools, PoolState{ID: p.id, Name: p.name, Size: p.size, Count: p.count, Tags: slices.Clone(p.tags),
				Labels: cloneLabels(p.labels), AutoScale: p.autoScale, MinNodes: p.minNodes, MaxNodes: p.maxNodes,
				Nodes: len(p.nodes), Spot: p.spot, Deleting: p.deleting})
			for _, n := range p.nodes {
				cs.Pools[len(cs.Pools)-1].DropletIDs = append(cs.Pools[len(cs.Pools)-1].DropletIDs, n.dropletID)
			}
		}
		out = append(out, cs)
	}
	return out
}
