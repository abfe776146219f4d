package gkeemu

import (
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

const containerPrefix = "container.projects.locations."

// containerRoute maps a container/v1 request to its handler.
func containerRoute(e *Emulator, c *call) (func(*Emulator, http.ResponseWriter, *call), bool) {
	s, m := c.segs, c.r.Method
	if len(s) >= 5 && s[0] == "projects" && s[2] == "zones" {
		return legacyRoute(e, c)
	}
	if len(s) < 5 || s[0] != "projects" || s[2] != "locations" {
		return nil, false
	}
	type route struct {
		n      int
		kind   string
		method string
		verb   string
		id     string
		h      func(*Emulator, http.ResponseWriter, *call)
	}
	routes := []route{
		{5, "serverConfig", "GET", "", "getServerConfig", (*Emulator).getServerConfig},
		{5, "clusters", "GET", "", "clusters.list", (*Emulator).listClusters},
		{5, "clusters", "POST", "", "clusters.create", (*Emulator).createCluster},
		{6, "clusters", "GET", "", "clusters.get", (*Emulator).getCluster},
		{6, "clusters", "PUT", "", "clusters.update", (*Emulator).updateCluster},
		{6, "clusters", "DELETE", "", "clusters.delete", (*Emulator).deleteCluster},
		{6, "clusters", "POST", "setResourceLabels", "clusters.setResourceLabels", (*Emulator).setResourceLabels},
		{7, "nodePools", "GET", "", "clusters.nodePools.list", (*Emulator).listNodePools},
		{7, "nodePools", "POST", "", "clusters.nodePools.create", (*Emulator).createNodePool},
		{8, "nodePools", "GET", "", "clusters.nodePools.get", (*Emulator).getNodePool},
		{8, "nodePools", "PUT", "", "clusters.nodePools.update", (*Emulator).updateNodePool},
		{8, "nodePools", "DELETE", "", "clusters.nodePools.delete", (*Emulator).deleteNodePool},
		{8, "nodePools", "POST", "setSize", "clusters.nodePools.setSize", (*Emulator).setNodePoolSize},
		{8, "nodePools", "POST", "setAutoscaling", "clusters.nodePools.setAutoscaling", (*Emulator).setNodePoolAutoscaling},
		{5, "operations", "GET", "", "operations.list", (*Emulator).listOperations},
		{6, "operations", "GET", "", "operations.get", (*Emulator).getOperation},
	}
	for _, r := range routes {
		kindAt := 4
		if r.kind == "nodePools" {
			kindAt = 6
			if len(s) < 7 || s[4] != "clusters" {
				continue
			}
		}
		if len(s) == r.n && s[kindAt] == r.kind && m == r.method && c.verb == r.verb {
			c.id = containerPrefix + r.id
			return r.h, true
		}
	}
	return nil, false
}

const legacyPrefix = "container.projects.zones."

// legacyRoute maps the older projects.zones routes, which gcloud and other
// clients still use, onto the same handlers: their path puts the project,
// the zone (or region), the cluster and the node pool at the same segments
// as projects.locations does, and their bodies carry the same fields.
func legacyRoute(_ *Emulator, c *call) (func(*Emulator, http.ResponseWriter, *call), bool) {
	s, m := c.segs, c.r.Method
	type route struct {
		n      int
		kind   string // the segment at 4 (or 6 under a cluster)
		method string
		last   string // the last segment, for POST .../setSize and the like
		id     string
		h      func(*Emulator, http.ResponseWriter, *call)
	}
	routes := []route{
		{5, "serverconfig", "GET", "", "getServerconfig", (*Emulator).getServerConfig},
		{5, "clusters", "GET", "", "clusters.list", (*Emulator).listClusters},
		{5, "clusters", "POST", "", "clusters.create", (*Emulator).createCluster},
		{6, "clusters", "GET", "", "clusters.get", (*Emulator).getCluster},
		{6, "clusters", "PUT", "", "clusters.update", (*Emulator).updateCluster},
		{6, "clusters", "DELETE", "", "clusters.delete", (*Emulator).deleteCluster},
		{7, "clusters", "POST", "resourceLabels", "clusters.resourceLabels", (*Emulator).setResourceLabels},
		{7, "nodePools", "GET", "", "clusters.nodePools.list", (*Emulator).listNodePools},
		{7, "nodePools", "POST", "", "clusters.nodePools.create", (*Emulator).createNodePool},
		{8, "nodePools", "GET", "", "clusters.nodePools.get", (*Emulator).getNodePool},
		{8, "nodePools", "DELETE", "", "clusters.nodePools.delete", (*Emulator).deleteNodePool},
		{9, "nodePools", "POST", "setSize", "clusters.nodePools.setSize", (*Emulator).setNodePoolSize},
		{9, "nodePools", "POST", "autoscaling", "clusters.nodePools.autoscaling", (*Emulator).setNodePoolAutoscaling},
		{9, "nodePools", "POST", "update", "clusters.nodePools.update", (*Emulator).updateNodePool},
		{5, "operations", "GET", "", "operations.list", (*Emulator).listOperations},
		{6, "operations", "GET", "", "operations.get", (*Emulator).getOperation},
	}
	if c.verb != "" {
		return nil, false
	}
	for _, r := range routes {
		kindAt := 4
		if r.kind == "nodePools" {
			kindAt = 6
			if len(s) < 7 || s[4] != "clusters" {
				continue
			}
		}
		if len(s) != r.n || s[kindAt] != r.kind || m != r.method {
			continue
		}
		if r.last != "" && s[r.n-1] != r.last {
			continue
		}
		c.id = legacyPrefix + r.id
		return r.h, true
	}
	return nil, false
}

// location checks the {location} of a path.
func (e *Emulator) location(c *call) (string, *apiError) {
	loc := c.segs[3]
	if loc == "-" || e.regionOf(loc) == "" {
		return "", badRequest("Location \"%s\" does not exist.", loc)
	}
	return loc, nil
}

func (e *Emulator) getServerConfig(w http.ResponseWriter, c *call) {
	if _, aerr := e.location(c); aerr != nil {
		writeAPIError(w, aerr)
		return
	}
	versions := slices.Clone(e.opts.Versions)
	slices.SortFunc(versions, func(a, b string) int { return compareVersions(b, a) })
	writeJSON(w, http.StatusOK, map[string]any{
		"defaultClusterVersion": e.opts.DefaultVersion,
		"validMasterVersions":   versions,
		"validNodeVersions":     versions,
		"defaultImageType":      "COS_CONTAINERD",
		"validImageTypes":       []string{"COS_CONTAINERD", "UBUNTU_CONTAINERD"},
		"channels": []map[string]any{
			{"channel": "REGULAR", "defaultVersion": e.opts.DefaultVersion, "validVersions": versions},
		},
	})
}

// clusterOf finds the cluster of a path, observing it. Called with mu held.
func (e *Emulator) clusterOf(c *call) (*cluster, *apiError) {
	if _, aerr := e.location(c); aerr != nil {
		return nil, aerr
	}
	key := clusterKey(c.project.ID, c.segs[3], c.segs[5])
	cl := e.clusters[key]
	if cl == nil {
		return nil, notFound("projects/" + c.segs[1] + "/locations/" + c.segs[3] + "/clusters/" + c.segs[5])
	}
	return cl, nil
}

func (e *Emulator) listClusters(w http.ResponseWriter, c *call) {
	loc := c.segs[3]
	if loc != "-" && e.regionOf(loc) == "" {
		writeAPIError(w, badRequest("Location \"%s\" does not exist.", loc))
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.settle()
	keys := slices.Sorted(maps.Keys(e.clusters))
	out := []wCluster{}
	for _, k := range keys {
		cl := e.clusters[k]
		if cl.project != c.project || (loc != "-" && cl.location != loc) {
			continue
		}
		out = append(out, e.clusterJSON(cl))
	}
	writeJSON(w, http.StatusOK, map[string]any{"clusters": out})
}

func (e *Emulator) getCluster(w http.ResponseWriter, c *call) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.observe(clusterKey(c.project.ID, c.segs[3], c.segs[5]), "")
	e.settle()
	cl, aerr := e.clusterOf(c)
	if aerr != nil {
		writeAPIError(w, aerr)
		return
	}
	writeJSON(w, http.StatusOK, e.clusterJSON(cl))
}

// names of clusters and node pools: what GKE documents (GKE's documentation).
var nameRE = regexp.MustCompile(`^[a-z]([-a-z0-9]*[a-z0-9])?$`)

// GCP resource labels (GKE's documentation, general label rules).
var (
	labelKeyRE   = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,62}$`)
	labelValueRE = regexp.MustCompile(`^[a-z0-9_-]{0,63}$`)
	// Kubernetes label keys and values, as the node labels of a pool take.
	k8sNameRE  = regexp.MustCompile(`^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)$`)
	k8sValueRE = regexp.MustCompile(`^(([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?)$`)
	dnsSubRE   = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$`)
)

func checkResourceLabels(field string, labels map[string]string) *apiError {
	if len(labels) > 64 {
		return badRequest("Invalid value for field '%s': at most 64 labels.", field)
	}
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if !labelKeyRE.MatchString(k) || !labelValueRE.MatchString(labels[k]) {
			return badRequest("Invalid value for field '%s': label %q=%q: keys must start with a lowercase letter and hold only lowercase letters, digits, '_' and '-' (63 at most); values the same without the first-letter rule.", field, k, labels[k])
		}
	}
	return nil
}

func checkNodeLabels(labels map[string]string) *apiError {
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		prefix, name, has := strings.Cut(k, "/")
		if !has {
			name, prefix = prefix, ""
		}
		if (has && !dnsSubRE.MatchString(prefix)) || !k8sNameRE.MatchString(name) || !k8sValueRE.MatchString(labels[k]) {
			return badRequest("Invalid value for field 'node_pool.config.labels': %q=%q is not a valid Kubernetes label.", k, labels[k])
		}
		if strings.HasSuffix(prefix, "kubernetes.io") || strings.HasSuffix(prefix, "k8s.io") || strings.HasSuffix(prefix, "cloud.google.com") {
			return badRequest("Invalid value for field 'node_pool.config.labels': the prefix of %q is reserved.", k)
		}
	}
	return nil
}

func (e *Emulator) createCluster(w http.ResponseWriter, c *call) {
	var req reqCreateCluster
	echo, aerr := decodeAs(c.body, "CreateClusterRequest", &req)
	if aerr != nil {
		writeAPIError(w, aerr)
		return
	}
	loc, aerr := e.location(c)
	if aerr != nil {
		writeAPIError(w, aerr)
		return
	}
	clusterEcho, _ := echo["cluster"].(map[string]any)
	poolEchoes, _ := clusterEcho["nodePools"].([]any)
	defaultEcho, _ := clusterEcho["nodeConfig"].(map[string]any)
	delete(clusterEcho, "nodePools")
	delete(clusterEcho, "nodeConfig")
	rc := req.Cluster
	if rc == nil {
		writeAPIError(w, badRequest("Cluster is required."))
		return
	}
	if !nameRE.MatchString(rc.Name) || len(rc.Name) > 40 {
		writeAPIError(w, badRequest("Invalid value for field 'cluster.name': %q. Must be a match of regex '(?:[a-z](?:[-a-z0-9]{0,38}[a-z0-9])?)' (only alphanumerics and '-' allowed, must start with a letter and end with an alphanumeric, and must be no longer than 40 characters).", rc.Name))
		return
	}
	if aerr := checkResourceLabels("cluster.resource_labels", rc.ResourceLabels); aerr != nil {
		writeAPIError(w, aerr)
		return
	}
	version, ok := e.resolveVersion(rc.InitialClusterVersion)
	if !ok {
		writeAPIError(w, badRequest("Master version %q is unsupported.", rc.InitialClusterVersion))
		return
	}
	region := e.regionOf(loc)
	regional := e.isRegion(loc)
	locations := slices.Clone(rc.Locations)
	if len(locations) == 0 {
		if regional {
			// A regional cluster spreads over three zones unless told
			// otherwise [inferred].
			locations = e.zonesOf(region)[:min(3, len(e.zonesOf(region)))]
		} else {
			locations = []string{loc}
		}
	}
	for _, z := range locations {
		if !slices.Contains(e.zonesOf(region), z) {
			writeAPIError(w, badRequest("Location %q is not a zone of %s.", z, region))
			return
		}
	}
	if !regional && !slices.Contains(locations, loc) {
		writeAPIError(w, badRequest("The locations of a zonal cluster must include its zone %s.", loc))
		return
	}
	if len(rc.NodePools) > 0 && (rc.InitialNodeCount != 0 || rc.NodeConfig != nil) {
		// The two ways of giving the first nodes exclude each other (the
		// discovery document: initialNodeCount and nodeConfig are for when
		// no node pools are given; the wording is a guess).
		writeAPIError(w, badRequest("Invalid value for field 'cluster.initial_node_count': cluster.initial_node_count and cluster.node_config cannot be set with cluster.node_pools; give the nodes in a node pool."))
		return
	}
	if len(rc.NodePools) == 0 && rc.InitialNodeCount == 0 {
		writeAPIError(w, badRequest("Cluster.initial_node_count must be greater than zero."))
		return
	}
	if len(rc.NodePools) == 0 {
		// A cluster given initialNodeCount (and nodeConfig) gets one pool
		// named default-pool, as GKE makes it (and gcloud names it).
		rc.NodePools = []reqNodePool{{Name: "default-pool", InitialNodeCount: rc.InitialNodeCount, Config: rc.NodeConfig}}
		poolEchoes = nil
		if defaultEcho != nil {
			poolEchoes = []any{map[string]any{"config": defaultEcho}}
		}
	}
	switch rc.LoggingService {
	case "", "logging.googleapis.com/kubernetes", "none":
	default:
		writeAPIError(w, badRequest("Invalid value for field 'cluster.logging_service': %q. Give logging.googleapis.com/kubernetes or none.", rc.LoggingService))
		return
	}
	switch rc.MonitoringService {
	case "", "monitoring.googleapis.com/kubernetes", "none":
	default:
		writeAPIError(w, badRequest("Invalid value for field 'cluster.monitoring_service': %q. Give monitoring.googleapis.com/kubernetes or none.", rc.MonitoringService))
		return
	}
	var channel *string
	if rc.ReleaseChannel != nil {
		ch := rc.ReleaseChannel.Channel
		switch ch {
		case "", "UNSPECIFIED", "RAPID", "REGULAR", "STABLE", "EXTENDED":
		default:
			writeAPIError(w, badRequest("Invalid value for field 'cluster.release_channel.channel': %q.", ch))
			return
		}
		if ch != "" {
			channel = &ch
		}
	}
	private := rc.PrivateClusterConfig != nil && rc.PrivateClusterConfig.EnablePrivateNodes
	if rc.NetworkConfig != nil && rc.NetworkConfig.DefaultEnablePrivateNodes != nil {
		private = *rc.NetworkConfig.DefaultEnablePrivateNodes
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.settle()
	key := clusterKey(c.project.ID, loc, rc.Name)
	if e.clusters[key] != nil {
		writeAPIError(w, alreadyExists("projects/"+c.project.ID+"/locations/"+loc+"/clusters/"+rc.Name))
		return
	}
	e.seq++
	cl := &cluster{
		project: c.project, location: loc, regional: regional, name: rc.Name,
		id:      hash8(fmt.Sprintf("id/%s/%d/a", key, e.seq)) + hash8(fmt.Sprintf("id/%s/%d/b", key, e.seq)) + hash8(fmt.Sprintf("id/%s/%d/c", key, e.seq)),
		created: e.now(), status: "PROVISIONING", locations: locations,
		initialVersion: version, masterVersion: version, nodeVersion: version,
		labels: maps.Clone(rc.ResourceLabels), privateNodes: private,
		network: rc.Network, subnetwork: rc.Subnetwork, logging: rc.LoggingService, monitoring: rc.MonitoringService,
		channel: channel, echo: clusterEcho,
	}
	if len(cl.echo) == 0 {
		cl.echo = nil
	}
	cl.fingerprint = fingerprintOf(cl.labels)
	total := 0
	seen := map[string]bool{}
	var need map[string]float64
	for i := range rc.NodePools {
		rp := &rc.NodePools[i]
		if seen[rp.Name] {
			writeAPIError(w, badRequest("Node pool %q is named twice.", rp.Name))
			return
		}
		seen[rp.Name] = true
		p, aerr := e.newPool(cl, rp, fmt.Sprintf("cluster.node_pools[%d]", i))
		if aerr != nil {
			writeAPIError(w, aerr)
			return
		}
		if i < len(poolEchoes) {
			p.echo, _ = poolEchoes[i].(map[string]any)
		}
		total += int(rp.InitialNodeCount) * len(p.locations)
		cl.pools = append(cl.pools, p)
		need = mergeNeeds(need, e.poolNeeds(p.cfg, p.locations, int(rp.InitialNodeCount)))
	}
	if total == 0 {
		writeAPIError(w, badRequest("Cluster.initial_node_count must be greater than zero."))
		return
	}
	if aerr := e.checkQuota(c.project, region, nil, need); aerr != nil {
		writeAPIError(w, aerr)
		return
	}
	e.clusters[key] = cl
	for i, p := range cl.pools {
		e.makeMIGs(cl, p, int(rc.NodePools[i].InitialNodeCount))
	}
	op := e.startOp(cl, "", "CREATE_CLUSTER", "creating cluster", e.opts.Steps.Cluster, func(op *operation) {
		cl.status = "RUNNING"
		cl.endpoint = e.endpointFor(cl)
		failed := 0
		for _, p := range cl.pools {
			p.status = "RUNNING"
			if msg := e.applyStockout(p, p.initialCount); msg != "" {
				failed++
				op.errCode, op.errMsg = 8, msg
			}
			e.settleMIGs(p)
		}
		if failed == len(cl.pools) {
			// Every node the cluster asked for is missing: the create failed.
			// GKE deletes an ERROR cluster by itself (GKE's documentation); when is
			// not documented: here, after a delete's worth of steps [INF].
			cl.status, cl.message = "ERROR", op.errMsg
			e.startOp(cl, "", "DELETE_CLUSTER", "deleting cluster", e.opts.Steps.Delete, func(*operation) {
				for _, p := range cl.pools {
					e.dropMIGs(p)
				}
				delete(e.clusters, cl.key())
			})
		}
		cl.etag++
	})
	writeJSON(w, http.StatusOK, e.opJSON(op))
}

func mergeNeeds(a, b map[string]float64) map[string]float64 {
	if a == nil {
		a = map[string]float64{}
	}
	for k, v := range b {
		a[k] += v
	}
	return a
}

// endpointFor is the address a cluster's API server is reached at: the
// fronted kube-apiserver, or a public-looking address nothing listens on.
func (e *Emulator) endpointFor(c *cluster) string {
	if e.opts.Kube.Endpoint != "" {
		return strings.TrimPrefix(e.opts.Kube.Endpoint, "https://")
	}
	h := hash8(c.id)
	return fmt.Sprintf("34.%d.%d.%d", 64+int(h[0])%64, int(h[2])*7%256, 1+int(h[4])*3%254)
}

// newPool validates a requested node pool of a cluster and builds it.
// Called with mu held (for the catalogue only).
func (e *Emulator) newPool(cl *cluster, rp *reqNodePool, field string) (*nodePool, *apiError) {
	if !nameRE.MatchString(rp.Name) || len(rp.Name) > 40 {
		return nil, badRequest("Invalid value for field '%s.name': %q. Must be a match of regex '(?:[a-z](?:[-a-z0-9]{0,38}[a-z0-9])?)' (only alphanumerics and '-' allowed, must start with a letter and end with an alphanumeric, and must be no longer than 40 characters).", field, rp.Name)
	}
	locations := slices.Clone(rp.Locations)
	if len(locations) == 0 {
		locations = slices.Clone(cl.locations)
	}
	region := e.regionOf(cl.location)
	for _, z := range locations {
		if !slices.Contains(e.zonesOf(region), z) {
			return nil, badRequest("Invalid value for field '%s.locations': %q is not a zone of %s.", field, z, region)
		}
	}
	slices.Sort(locations)
	locations = slices.Compact(locations)
	rc := rp.Config
	if rc == nil {
		rc = &reqNodeConfig{}
	}
	p := &nodePool{name: rp.Name, status: "PROVISIONING", locations: locations, initialCount: int(rp.InitialNodeCount), version: cl.nodeVersion,
		autoRepair: true, autoUpgrade: true, upgrade: upgradeSettings{maxSurge: 1, strategy: "SURGE"}, maxPods: 110}
	if rp.Version != "" {
		v, ok := e.resolveVersion(rp.Version)
		if !ok || compareVersions(v, cl.masterVersion) > 0 {
			return nil, badRequest("Invalid value for field '%s.version': %q. Give a supported version no newer than the master's %s.", field, rp.Version, cl.masterVersion)
		}
		p.version = v
	}
	if m := rp.Management; m != nil {
		// Given, both are as sent; a release channel forcing auto-upgrade on
		// is not modelled [INF].
		p.autoRepair, p.autoUpgrade = m.AutoRepair, m.AutoUpgrade
	}
	if u := rp.UpgradeSettings; u != nil {
		p.upgrade = upgradeSettings{maxSurge: int(u.MaxSurge), maxUnavailable: int(u.MaxUnavailable), strategy: u.Strategy}
		if p.upgrade.strategy == "" || p.upgrade.strategy == "NODE_POOL_UPDATE_STRATEGY_UNSPECIFIED" {
			p.upgrade.strategy = "SURGE"
		}
		switch {
		case p.upgrade.strategy != "SURGE" && p.upgrade.strategy != "BLUE_GREEN" && p.upgrade.strategy != "SHORT_LIVED":
			return nil, badRequest("Invalid value for field '%s.upgrade_settings.strategy': %q.", field, u.Strategy)
		case p.upgrade.maxSurge < 0 || p.upgrade.maxUnavailable < 0:
			return nil, badRequest("Invalid value for field '%s.upgrade_settings': max_surge and max_unavailable must not be negative.", field)
		case p.upgrade.strategy == "SURGE" && p.upgrade.maxSurge == 0 && p.upgrade.maxUnavailable == 0:
			// GKE documents that surge upgrades need one of the two above
			// zero; the wording is a guess.
			return nil, badRequest("Invalid value for field '%s.upgrade_settings': max_surge and max_unavailable cannot both be 0.", field)
		}
	}
	if mp := rp.MaxPodsConstraint; mp != nil && mp.MaxPodsPerNode != 0 {
		// 8 to 256 pods per node, GKE's documented range for VPC-native
		// clusters.
		if mp.MaxPodsPerNode < 8 || mp.MaxPodsPerNode > 256 {
			return nil, badRequest("Invalid value for field '%s.max_pods_constraint.max_pods_per_node': %d. Give 8 to 256.", field, mp.MaxPodsPerNode)
		}
		p.maxPods = int(mp.MaxPodsPerNode)
	}
	cfg := nodeConfig{
		machineType: rc.MachineType, diskGB: int(rc.DiskSizeGb), diskType: rc.DiskType, imageType: rc.ImageType,
		spot: rc.Spot, preemptible: rc.Preemptible,
		labels: maps.Clone(rc.Labels), resourceLabels: maps.Clone(rc.ResourceLabels),
		oauthScopes: slices.Clone(rc.OauthScopes), serviceAccount: rc.ServiceAccount, metadata: maps.Clone(rc.Metadata),
	}
	if cfg.machineType == "" {
		cfg.machineType = "e2-medium"
	}
	if cfg.diskType == "" {
		cfg.diskType = "pd-balanced"
	}
	if cfg.imageType == "" {
		cfg.imageType = "COS_CONTAINERD"
	}
	if cfg.diskGB == 0 {
		cfg.diskGB = 100
	}
	// The minimum is 12 GB (15 on newer versions, GKE's documentation).
	if cfg.diskGB < 12 || cfg.diskGB > 65536 {
		return nil, badRequest("Invalid value for field '%s.config.disk_size_gb': %d. Disk size must be between 12 and 65536 GB.", field, cfg.diskGB)
	}
	if cfg.spot && cfg.preemptible {
		return nil, badRequest("Invalid value for field '%s.config': spot and preemptible cannot both be set.", field)
	}
	if aerr := checkResourceLabels(field+".config.resource_labels", cfg.resourceLabels); aerr != nil {
		return nil, aerr
	}
	if aerr := checkNodeLabels(cfg.labels); aerr != nil {
		return nil, aerr
	}
	for _, t := range rc.Taints {
		switch t.Effect {
		case "NO_SCHEDULE", "PREFER_NO_SCHEDULE", "NO_EXECUTE":
		default:
			return nil, badRequest("Invalid value for field '%s.config.taints.effect': %q.", field, t.Effect)
		}
		cfg.taints = append(cfg.taints, taint(t))
	}
	var mt MachineType
	for _, z := range locations {
		m, ok := e.machineType(z, cfg.machineType)
		if !ok {
			return nil, badRequest("Machine type %q does not exist in zone %q.", cfg.machineType, z)
		}
		mt = m
	}
	for _, ra := range rc.Accelerators {
		a := accelerator{Type: ra.AcceleratorType, Count: int64(ra.AcceleratorCount)}
		if ra.GpuDriverInstallationConfig != nil {
			a.Driver = ra.GpuDriverInstallationConfig.GpuDriverVersion
			switch a.Driver {
			case "GPU_DRIVER_VERSION_UNSPECIFIED", "INSTALLATION_DISABLED", "DEFAULT", "LATEST":
			default:
				return nil, badRequest("Invalid value for field '%s.config.accelerators.gpu_driver_installation_config.gpu_driver_version': %q.", field, a.Driver)
			}
		}
		cfg.accelerators = append(cfg.accelerators, a)
	}
	switch {
	case mt.GPU != nil && len(cfg.accelerators) == 0:
		// GKE fills in the accelerators a machine type is built with
		// [INF]: read them back as the machine type has them.
		cfg.accelerators = []accelerator{{Type: mt.GPU.Type, Count: int64(mt.GPU.Count)}}
	case mt.GPU != nil:
		if len(cfg.accelerators) != 1 || cfg.accelerators[0].Type != mt.GPU.Type || cfg.accelerators[0].Count != int64(mt.GPU.Count) {
			return nil, badRequest("Accelerator type %q with count %d is not supported for machine type %q: it comes with %d x %s.", cfg.accelerators[0].Type, cfg.accelerators[0].Count, mt.Name, mt.GPU.Count, mt.GPU.Type)
		}
	case len(cfg.accelerators) > 0:
		if !strings.HasPrefix(mt.Name, "n1-") {
			return nil, badRequest("Machine type %q does not support accelerators: attach GPUs to N1 machine types, or use a machine type with built-in GPUs.", mt.Name)
		}
		for _, a := range cfg.accelerators {
			// A GPU some machine type is built with is not attached to
			// others (Google's GPU platforms; the text is a guess).
			if e.builtInGPU(a.Type) {
				return nil, badRequest("Accelerator type %q is not supported for machine type %q: it comes only with the machine types built with it.", a.Type, mt.Name)
			}
			for _, z := range locations {
				at, ok := e.acceleratorType(z, a.Type)
				if !ok {
					return nil, badRequest("Accelerator type %q does not exist in zone %q.", a.Type, z)
				}
				if a.Count < 1 || a.Count > int64(at.MaxCards) {
					return nil, badRequest("Invalid value for field '%s.config.accelerators.accelerator_count': %d; %s takes 1 to %d.", field, a.Count, a.Type, at.MaxCards)
				}
			}
		}
	}
	p.cfg = cfg
	if rp.InitialNodeCount < 0 || rp.InitialNodeCount > 1000 {
		return nil, badRequest("Invalid value for field '%s.initial_node_count': %d.", field, rp.InitialNodeCount)
	}
	if rp.Autoscaling != nil {
		as, aerr := checkAutoscaling(rp.Autoscaling)
		if aerr != nil {
			return nil, aerr
		}
		p.autoscaling = as
	}
	return p, nil
}

func checkAutoscaling(ra *reqAutoscaling) (*autoscaling, *apiError) {
	if !ra.Enabled {
		return nil, nil
	}
	as := &autoscaling{enabled: true, min: int(ra.MinNodeCount), max: int(ra.MaxNodeCount), totalMin: int(ra.TotalMinNodeCount), totalMax: int(ra.TotalMaxNodeCount), policy: ra.LocationPolicy}
	if as.policy == "" {
		as.policy = "BALANCED"
	}
	perZone := as.min != 0 || as.max != 0
	total := as.totalMin != 0 || as.totalMax != 0
	switch {
	case perZone && total:
		return nil, badRequest("Invalid value for field 'autoscaling': per-zone and total node counts cannot both be set.")
	case total && (as.totalMin < 0 || as.totalMax < 1 || as.totalMin > as.totalMax):
		return nil, badRequest("Invalid value for field 'autoscaling': total_min_node_count must be >= 0 and <= total_max_node_count, which must be >= 1.")
	case !total && (as.min < 0 || as.max < 1 || as.min > as.max || as.max > 1000):
		return nil, badRequest("Invalid value for field 'autoscaling.max_node_count': %d; min_node_count (%d) must be >= 0 and <= max_node_count, which must be between 1 and 1000.", as.max, as.min)
	}
	return as, nil
}

// makeMIGs creates a pool's instance groups, one per zone, growing to n
// machines each. Called with mu held.
func (e *Emulator) makeMIGs(cl *cluster, p *nodePool, n int) {
	p.migs = nil
	for _, z := range p.locations {
		trim := func(s string, n int) string { return s[:min(len(s), n)] }
		name := "gke-" + trim(cl.name, 14) + "-" + trim(p.name, 16) + "-" + hash8(cl.id+"/"+p.name+"/"+z) + "-grp"
		e.seq++
		m := &mig{project: cl.project, zone: z, name: name, id: uint64(1e12) + uint64(e.seq), created: e.now()}
		m.resize(n)
		e.migs[migKey(cl.project.ID, z, name)] = m
		p.migs = append(p.migs, migKey(cl.project.ID, z, name))
	}
}

func (e *Emulator) settleMIGs(p *nodePool) {
	for _, k := range p.migs {
		if m := e.migs[k]; m != nil {
			m.settle()
		}
	}
}

func (e *Emulator) dropMIGs(p *nodePool) {
	for _, k := range p.migs {
		delete(e.migs, k)
	}
	p.migs = nil
}

func (e *Emulator) updateCluster(w http.ResponseWriter, c *call) {
	var req reqUpdateCluster
	_, aerr := decodeAs(c.body, "UpdateClusterRequest", &req)
	if aerr != nil {
		writeAPIError(w, aerr)
		return
	}
	u := req.Update
	switch {
	case u == nil || (u.DesiredMasterVersion == "" && u.DesiredNodeVersion == ""):
		writeAPIError(w, badRequest("The emulator models ClusterUpdate.desiredMasterVersion and desiredNodeVersion only."))
		return
	case u.DesiredMasterVersion != "" && u.DesiredNodeVersion != "":
		// Guess: GKE takes one kind of change per update.
		writeAPIError(w, badRequest("Only one of desired_master_version and desired_node_version may be set in one update."))
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	cl, aerr := e.changeableCluster(c)
	if aerr != nil {
		writeAPIError(w, aerr)
		return
	}
	var op *operation
	if u.DesiredMasterVersion != "" {
		op, aerr = e.upgradeMaster(cl, u.DesiredMasterVersion)
	} else {
		// gcloud's `clusters upgrade` without --master: the nodes of one
		// pool (the only pool when none is named).
		name := u.DesiredNodePoolID
		if name == "" && len(cl.pools) == 1 {
			name = cl.pools[0].name
		}
		i := slices.IndexFunc(cl.pools, func(p *nodePool) bool { return p.name == name })
		switch {
		case name == "":
			aerr = badRequest("Invalid value for field 'update.desired_node_pool_id': the cluster has several node pools; name one.")
		case i < 0:
			aerr = notFound(fmt.Sprintf("projects/%s/%s/clusters/%s/nodePools/%s", cl.project.ID, locPath(cl.location, cl.regional), cl.name, name))
		case u.DesiredImageType != "" && u.DesiredImageType != cl.pools[i].cfg.imageType:
			aerr = badRequest("The emulator does not model image changes: send the pool's own image type %s.", cl.pools[i].cfg.imageType)
		default:
			op, aerr = e.upgradeNodes(cl, cl.pools[i], u.DesiredNodeVersion)
		}
	}
	if aerr != nil {
		writeAPIError(w, aerr)
		return
	}
	writeJSON(w, http.StatusOK, e.opJSON(op))
}

// maxKubeletLag is how many minors a kubelet may trail its API server
// (the Kubernetes version skew policy).
const maxKubeletLag = 3

// minorOf is the major and minor of a GKE version ("1.34.3-gke.1100000").
func minorOf(v string) (int, int) {
	var a, b int
	fmt.Sscanf(v, "%d.%d", &a, &b)
	return a, b
}

// upgradeMaster starts a control plane upgrade: one minor at a time (or a
// patch of the same minor), never down, never leaving a node pool's
// kubelets more than three minors behind. Called with mu held, on a
// cluster that takes a change now.
//
// Guess: the texts of the two-minor and skew refusals are the emulator's;
// GKE answers both 400 INVALID_ARGUMENT [INF].
func (e *Emulator) upgradeMaster(cl *cluster, want string) (*operation, *apiError) {
	v, ok := e.resolveVersion(want)
	if !ok {
		return nil, badRequest("Master version %q is unsupported.", want)
	}
	if compareVersions(v, cl.masterVersion) < 0 {
		return nil, badRequest("Master cannot be downgraded from %s to %s.", cl.masterVersion, v)
	}
	ha, hi := minorOf(cl.masterVersion)
	ta, ti := minorOf(v)
	if ta != ha || ti > hi+1 {
		return nil, badRequest("Master cannot be upgraded from %s to %s: the control plane is upgraded one minor version at a time; upgrade to %d.%d first.", cl.masterVersion, v, ha, hi+1)
	}
	for _, p := range cl.pools {
		if na, ni := minorOf(p.version); na != ta || ti-ni > maxKubeletLag {
			return nil, badRequest("Master cannot be upgraded to %s: node pool %s runs %s, which would be more than %d minor versions older than the control plane. Upgrade the node pool first.", v, p.name, p.version, maxKubeletLag)
		}
	}
	cl.status = "RECONCILING"
	return e.startOp(cl, "", "UPGRADE_MASTER", "upgrading cluster", e.opts.Steps.Update, func(*operation) {
		cl.masterVersion, cl.status = v, "RUNNING"
		cl.etag++
	}), nil
}

// upgradeNodes starts a node pool upgrade: to any offered version not
// newer than the control plane's and not older than the pool's. Its nodes
// are replaced by surge on the emulator's clock; the operation's progress
// counts them. Called with mu held, on a pool that takes a change now.
//
// Guess: the texts of the refusals are the emulator's; GKE answers them
// 400 INVALID_ARGUMENT [INF].
func (e *Emulator) upgradeNodes(cl *cluster, p *nodePool, want string) (*operation, *apiError) {
	v, ok := e.resolveVersion(want)
	if want == "-" {
		v, ok = cl.masterVersion, true // "-" is the master's version for nodes
	}
	if !ok {
		return nil, badRequest("Node version %q is unsupported.", want)
	}
	switch {
	case compareVersions(v, cl.masterVersion) > 0:
		return nil, badRequest("Node version %s must not be newer than the master version %s: upgrade the master first.", v, cl.masterVersion)
	case compareVersions(v, p.version) < 0:
		return nil, badRequest("Node pool %s cannot be downgraded from %s to %s.", p.name, p.version, v)
	case v == p.version:
		return nil, badRequest("Node pool %s already runs %s.", p.name, v)
	}
	e.during(p)
	op := e.startOp(cl, p.name, "UPGRADE_NODES", "upgrading node pool "+p.name, e.opts.Steps.Update, func(*operation) {
		p.version, p.status = v, "RUNNING"
		p.etag++
	})
	op.nodes = e.poolTarget(p) * len(p.locations)
	return op, nil
}

// progressOf is how far an upgrade is, as GKE's operation progress tells
// it: the nodes done of the nodes to do (one "node" for a control plane).
// Called with mu held.
func (e *Emulator) progressOf(op *operation) *wProgress {
	total := max(op.nodes, 1)
	n := op.seen
	if e.opts.StepEvery > 0 {
		n += int(e.now().Sub(op.start) / e.opts.StepEvery)
	}
	done := total
	if op.status != "DONE" && op.steps > 0 {
		done = min(total, total*n/op.steps)
	}
	return &wProgress{Status: op.status, Metrics: []wMetric{
		{Name: "NODES_TOTAL", IntValue: strconv.Itoa(total)},
		{Name: "NODES_DONE", IntValue: strconv.Itoa(done)},
	}}
}

func (e *Emulator) deleteCluster(w http.ResponseWriter, c *call) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.settle()
	cl, aerr := e.clusterOf(c)
	if aerr != nil {
		writeAPIError(w, aerr)
		return
	}
	if cl.status == "STOPPING" {
		writeAPIError(w, refuseBusy(cl, nil))
		return
	}
	// A delete is taken whatever else runs on the cluster: the running
	// operations are aborted [INF: GKE accepts deleting a cluster that is
	// still being created].
	for _, name := range e.opOrder {
		if op := e.ops[name]; op.status != "DONE" && op.cluster == cl.key() {
			op.status, op.end, op.errCode, op.errMsg = "DONE", e.now(), 1, "Operation was cancelled: the cluster is being deleted."
		}
	}
	cl.status = "STOPPING"
	op := e.startOp(cl, "", "DELETE_CLUSTER", "deleting cluster", e.opts.Steps.Delete, func(*operation) {
		for _, p := range cl.pools {
			e.dropMIGs(p)
		}
		delete(e.clusters, cl.key())
	})
	writeJSON(w, http.StatusOK, e.opJSON(op))
}

func (e *Emulator) setResourceLabels(w http.ResponseWriter, c *call) {
	var req reqSetLabels
	_, aerr := decodeAs(c.body, "SetLabelsRequest", &req)
	if aerr != nil {
		writeAPIError(w, aerr)
		return
	}
	if aerr := checkResourceLabels("resource_labels", req.ResourceLabels); aerr != nil {
		writeAPIError(w, aerr)
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	cl, aerr := e.changeableCluster(c)
	if aerr != nil {
		writeAPIError(w, aerr)
		return
	}
	// The fingerprint guards against a lost update; a stale one is refused
	// [INF: the status GKE gives is not documented].
	if req.LabelFingerprint != "" && req.LabelFingerprint != cl.fingerprint {
		writeAPIError(w, failedPrecondition("Labels could not be set due to fingerprint mismatch."))
		return
	}
	labels := maps.Clone(req.ResourceLabels)
	op := e.startOp(cl, "", "SET_LABELS", "setting labels", e.opts.Steps.Update, func(*operation) {
		cl.labels = labels
		cl.fingerprint = fingerprintOf(labels)
		cl.etag++
	})
	writeJSON(w, http.StatusOK, e.opJSON(op))
}

// --- node pools ---

func (e *Emulator) poolOf(c *call) (*cluster, *nodePool, *apiError) {
	cl, aerr := e.clusterOf(c)
	if aerr != nil {
		return nil, nil, aerr
	}
	p := cl.pool(c.segs[7])
	if p == nil {
		return nil, nil, notFound(cl.path() + "/nodePools/" + c.segs[7])
	}
	return cl, p, nil
}

func (e *Emulator) listNodePools(w http.ResponseWriter, c *call) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if cl := e.clusters[clusterKey(c.project.ID, c.segs[3], c.segs[5])]; cl != nil {
		for _, p := range cl.pools {
			e.observe(cl.key(), p.name)
		}
	}
	e.settle()
	cl, aerr := e.clusterOf(c)
	if aerr != nil {
		writeAPIError(w, aerr)
		return
	}
	out := []wNodePool{}
	for _, p := range cl.pools {
		out = append(out, e.poolJSON(cl, p))
	}
	writeJSON(w, http.StatusOK, map[string]any{"nodePools": out})
}

func (e *Emulator) getNodePool(w http.ResponseWriter, c *call) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.observe(clusterKey(c.project.ID, c.segs[3], c.segs[5]), c.segs[7])
	e.settle()
	cl, p, aerr := e.poolOf(c)
	if aerr != nil {
		writeAPIError(w, aerr)
		return
	}
	writeJSON(w, http.StatusOK, e.poolJSON(cl, p))
}

// runningCluster is a cluster that takes a node pool change now.
func (e *Emulator) runningCluster(cl *cluster) *apiError {
	if op := e.busy(cl); op != nil || cl.status != "RUNNING" {
		return refuseBusy(cl, op)
	}
	return nil
}

func (e *Emulator) createNodePool(w http.ResponseWriter, c *call) {
	var req reqCreateNodePool
	echo, aerr := decodeAs(c.body, "CreateNodePoolRequest", &req)
	if aerr != nil {
		writeAPIError(w, aerr)
		return
	}
	if req.NodePool == nil {
		writeAPIError(w, badRequest("Node pool is required."))
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.settle()
	cl, aerr := e.clusterOf(c)
	if aerr != nil {
		writeAPIError(w, aerr)
		return
	}
	if cl.pool(req.NodePool.Name) != nil {
		writeAPIError(w, alreadyExists(cl.path()+"/nodePools/"+req.NodePool.Name))
		return
	}
	if aerr := e.runningCluster(cl); aerr != nil {
		writeAPIError(w, aerr)
		return
	}
	p, aerr := e.newPool(cl, req.NodePool, "node_pool")
	if aerr != nil {
		writeAPIError(w, aerr)
		return
	}
	p.echo, _ = echo["nodePool"].(map[string]any)
	n := int(req.NodePool.InitialNodeCount)
	if aerr := e.checkQuota(c.project, e.regionOf(cl.location), nil, e.poolNeeds(p.cfg, p.locations, n)); aerr != nil {
		writeAPIError(w, aerr)
		return
	}
	cl.pools = append(cl.pools, p)
	e.makeMIGs(cl, p, n)
	op := e.startOp(cl, p.name, "CREATE_NODE_POOL", "creating a node pool", e.opts.Steps.NodePool, func(op *operation) {
		p.status = "RUNNING"
		if msg := e.applyStockout(p, n); msg != "" {
			op.errCode, op.errMsg = 8, msg
		}
		e.settleMIGs(p)
		p.etag++
	})
	writeJSON(w, http.StatusOK, e.opJSON(op))
}

// changeableCluster is the cluster of a path when it takes a change now.
// Called with mu held.
func (e *Emulator) changeableCluster(c *call) (*cluster, *apiError) {
	e.settle()
	cl, aerr := e.clusterOf(c)
	if aerr != nil {
		return nil, aerr
	}
	return cl, e.runningCluster(cl)
}

// changeablePool is the node pool of a path when it takes a change now.
// Called with mu held.
func (e *Emulator) changeablePool(c *call) (*cluster, *nodePool, *apiError) {
	e.settle()
	cl, p, aerr := e.poolOf(c)
	if aerr != nil {
		return nil, nil, aerr
	}
	return cl, p, e.poolBusy(cl, p)
}

// poolBusy refuses a change of a pool being deleted, or while its cluster
// runs an operation.
func (e *Emulator) poolBusy(cl *cluster, p *nodePool) *apiError {
	if aerr := e.runningCluster(cl); aerr != nil {
		return aerr
	}
	if p.status == "STOPPING" || p.status == "PROVISIONING" {
		return failedPrecondition("Node pool %s is being created or deleted and cannot be updated.", p.name)
	}
	return nil
}

// during marks a pool as its operation runs, per the guess.
func (e *Emulator) during(p *nodePool) {
	if !e.opts.Guesses.PoolRunningDuringOps {
		p.status = "RECONCILING"
	}
}

func (e *Emulator) setNodePoolSize(w http.ResponseWriter, c *call) {
	var req reqSetSize
	_, aerr := decodeAs(c.body, "SetNodePoolSizeRequest", &req)
	if aerr != nil {
		writeAPIError(w, aerr)
		return
	}
	n := 0
	if req.NodeCount != nil {
		n = int(*req.NodeCount) // proto3: a missing nodeCount is 0 [inferred]
	}
	if n < 0 || n > 1000 {
		writeAPIError(w, badRequest("Invalid value for field 'node_count': %d.", n))
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	cl, p, aerr := e.changeablePool(c)
	if aerr != nil {
		writeAPIError(w, aerr)
		return
	}
	if extra := n - e.poolTarget(p); extra > 0 {
		if aerr := e.checkQuota(c.project, e.regionOf(cl.location), nil, e.poolNeeds(p.cfg, p.locations, extra)); aerr != nil {
			writeAPIError(w, aerr)
			return
		}
	}
	grow := n > e.poolTarget(p)
	for _, k := range p.migs {
		if m := e.migs[k]; m != nil {
			m.resize(n)
		}
	}
	if e.opts.Guesses.InitialCountTracksResize {
		p.initialCount = n
	}
	e.during(p)
	op := e.startOp(cl, p.name, "SET_NODE_POOL_SIZE", "resizing a node pool", e.opts.Steps.Update, func(op *operation) {
		p.status, p.message, p.conditions = "RUNNING", "", nil
		if grow {
			if msg := e.applyStockout(p, n); msg != "" {
				op.errCode, op.errMsg = 8, msg
			}
		}
		e.settleMIGs(p)
		if !e.opts.Guesses.ResizeKeepsEtag {
			p.etag++
		}
	})
	writeJSON(w, http.StatusOK, e.opJSON(op))
}

func (e *Emulator) setNodePoolAutoscaling(w http.ResponseWriter, c *call) {
	var req reqSetAutoscaling
	_, aerr := decodeAs(c.body, "SetNodePoolAutoscalingRequest", &req)
	if aerr != nil {
		writeAPIError(w, aerr)
		return
	}
	ra := req.Autoscaling
	if ra == nil {
		ra = &reqAutoscaling{}
	}
	as, aerr := checkAutoscaling(ra)
	if aerr != nil {
		writeAPIError(w, aerr)
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	cl, p, aerr := e.changeablePool(c)
	if aerr != nil {
		writeAPIError(w, aerr)
		return
	}
	// The bounds show at once; the autoscaler (not modelled: sizes move only
	// with setSize) would act on them later [INF].
	p.autoscaling = as
	e.during(p)
	op := e.startOp(cl, p.name, "UPDATE_CLUSTER", "updating a node pool", e.opts.Steps.Update, func(*operation) {
		p.status = "RUNNING"
		p.etag++
	})
	writeJSON(w, http.StatusOK, e.opJSON(op))
}

func (e *Emulator) updateNodePool(w http.ResponseWriter, c *call) {
	var req reqUpdateNodePool
	_, aerr := decodeAs(c.body, "UpdateNodePoolRequest", &req)
	if aerr != nil {
		writeAPIError(w, aerr)
		return
	}
	// The discovery document marks nodeVersion and imageType Required; the
	// emulator holds callers to it [INF: whether GKE still does].
	if req.NodeVersion == "" || req.ImageType == "" {
		writeAPIError(w, badRequest("Invalid value for field 'node_version' and 'image_type': both are required."))
		return
	}
	if req.Labels != nil {
		if aerr := checkNodeLabels(req.Labels.Labels); aerr != nil {
			writeAPIError(w, aerr)
			return
		}
	}
	if req.ResourceLabels != nil {
		if aerr := checkResourceLabels("resource_labels", req.ResourceLabels.Labels); aerr != nil {
			writeAPIError(w, aerr)
			return
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	cl, p, aerr := e.changeablePool(c)
	if aerr != nil {
		writeAPIError(w, aerr)
		return
	}
	if req.ImageType != p.cfg.imageType {
		writeAPIError(w, badRequest("The emulator does not model image changes: send the pool's own image type %s.", p.cfg.imageType))
		return
	}
	v, ok := e.resolveVersion(req.NodeVersion)
	if req.NodeVersion == "-" {
		v, ok = cl.masterVersion, true
	}
	upgrade := ok && v != p.version
	if upgrade && (req.Labels != nil || req.ResourceLabels != nil || req.Taints != nil) {
		// Guess: an upgrade is its own operation.
		writeAPIError(w, badRequest("A node version change cannot be combined with other node pool changes in one update."))
		return
	}
	if !upgrade && req.Labels == nil && req.ResourceLabels == nil && req.Taints == nil {
		if !ok {
			writeAPIError(w, badRequest("Node version %q is unsupported.", req.NodeVersion))
			return
		}
		writeAPIError(w, badRequest("The emulator models node pool updates of nodeVersion, labels, resourceLabels and taints only."))
		return
	}
	if req.Etag != "" && req.Etag != fingerprintOf([]any{cl.key(), p.name, p.etag}) {
		writeAPIError(w, errf(http.StatusConflict, "ABORTED", "aborted", "The etag of node pool %s does not match: it changed since it was read.", p.name))
		return
	}
	if upgrade || !ok {
		op, aerr := e.upgradeNodes(cl, p, req.NodeVersion)
		if aerr != nil {
			writeAPIError(w, aerr)
			return
		}
		writeJSON(w, http.StatusOK, e.opJSON(op))
		return
	}
	if upgrade || !ok {
		op, aerr := e.upgradeNodes(cl, p, req.NodeVersion)
		if aerr != nil {
			writeAPIError(w, aerr)
			return
		}
		writeJSON(w, http.StatusOK, e.opJSON(op))
		return
	}
	e.during(p)
	op := e.startOp(cl, p.name, "UPDATE_CLUSTER", "updating a node pool", e.opts.Steps.Update, func(*operation) {
		if req.Labels != nil {
			p.cfg.labels = maps.Clone(req.Labels.Labels)
		}
		if req.ResourceLabels != nil {
			p.cfg.resourceLabels = maps.Clone(req.ResourceLabels.Labels)
		}
		if req.Taints != nil {
			p.cfg.taints = nil
			for _, t := range req.Taints.Taints {
				p.cfg.taints = append(p.cfg.taints, taint(t))
			}
		}
		p.status = "RUNNING"
		p.etag++
	})
	writeJSON(w, http.StatusOK, e.opJSON(op))
}

func (e *Emulator) deleteNodePool(w http.ResponseWriter, c *call) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.settle()
	cl, p, aerr := e.poolOf(c)
	if aerr != nil {
		writeAPIError(w, aerr)
		return
	}
	if aerr := e.runningCluster(cl); aerr != nil {
		writeAPIError(w, aerr)
		return
	}
	if p.status == "STOPPING" {
		writeAPIError(w, failedPrecondition("Node pool %s is being deleted.", p.name))
		return
	}
	p.status = "STOPPING"
	op := e.startOp(cl, p.name, "DELETE_NODE_POOL", "deleting a node pool", e.opts.Steps.Delete, func(*operation) {
		e.dropMIGs(p)
		cl.pools = slices.DeleteFunc(cl.pools, func(x *nodePool) bool { return x == p })
		cl.etag++
	})
	writeJSON(w, http.StatusOK, e.opJSON(op))
}

// --- operations ---

func (e *Emulator) getOperation(w http.ResponseWriter, c *call) {
	e.mu.Lock()
	defer e.mu.Unlock()
	op := e.ops[c.segs[5]]
	if op == nil || op.project != c.project || op.location != c.segs[3] {
		writeAPIError(w, notFound("projects/"+c.segs[1]+"/locations/"+c.segs[3]+"/operations/"+c.segs[5]))
		return
	}
	if op.status != "DONE" {
		op.seen++
	}
	e.settle()
	writeJSON(w, http.StatusOK, e.opJSON(op))
}

func (e *Emulator) listOperations(w http.ResponseWriter, c *call) {
	loc := c.segs[3]
	e.mu.Lock()
	defer e.mu.Unlock()
	e.settle()
	out := []wOperation{}
	names := slices.Clone(e.opOrder)
	sort.Strings(names)
	for _, name := range names {
		op := e.ops[name]
		if op.project == c.project && (loc == "-" || op.location == loc) {
			out = append(out, e.opJSON(op))
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"operations": out})
}
