package gkeemu

import (
	"encoding/base64"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"
)

// The shapes the emulator answers with: the fields of the discovery
// schemas it models, spelled as the service spells them (int64 as strings,
// timestamps in RFC 3339 with microseconds).

type wCluster struct {
	Name                  string            `json:"name"`
	ID                    string            `json:"id"`
	Location              string            `json:"location"`
	Zone                  string            `json:"zone"`
	Locations             []string          `json:"locations"`
	SelfLink              string            `json:"selfLink"`
	Status                string            `json:"status"`
	StatusMessage         string            `json:"statusMessage,omitempty"`
	Endpoint              string            `json:"endpoint,omitempty"`
	MasterAuth            *wMasterAuth      `json:"masterAuth,omitempty"`
	InitialClusterVersion string            `json:"initialClusterVersion"`
	CurrentMasterVersion  string            `json:"currentMasterVersion"`
	CurrentNodeVersion    string            `json:"currentNodeVersion,omitempty"`
	CurrentNodeCount      int               `json:"currentNodeCount,omitempty"`
	InitialNodeCount      int               `json:"initialNodeCount,omitempty"`
	NodeConfig            *wNodeConfig      `json:"nodeConfig,omitempty"`
	CreateTime            string            `json:"createTime"`
	ResourceLabels        map[string]string `json:"resourceLabels,omitempty"`
	LabelFingerprint      string            `json:"labelFingerprint"`
	NodePools             []wNodePool       `json:"nodePools,omitempty"`
	PrivateClusterConfig  *wPrivateCluster  `json:"privateClusterConfig,omitempty"`
	NetworkConfig         *wNetworkConfig   `json:"networkConfig,omitempty"`
	Network               string            `json:"network"`
	Subnetwork            string            `json:"subnetwork"`
	InstanceGroupUrls     []string          `json:"instanceGroupUrls,omitempty"`
	ReleaseChannel        *wReleaseChannel  `json:"releaseChannel,omitempty"`
	LoggingService        string            `json:"loggingService"`
	MonitoringService     string            `json:"monitoringService"`
	Etag                  string            `json:"etag"`
	echo                  map[string]any
}

func (w wCluster) MarshalJSON() ([]byte, error) {
	type plain wCluster
	return withEcho(plain(w), w.echo)
}

type wMasterAuth struct {
	ClusterCaCertificate string `json:"clusterCaCertificate,omitempty"`
}

type wPrivateCluster struct {
	EnablePrivateNodes bool   `json:"enablePrivateNodes,omitempty"`
	PrivateEndpoint    string `json:"privateEndpoint,omitempty"`
	PublicEndpoint     string `json:"publicEndpoint,omitempty"`
}

type wNetworkConfig struct {
	Network                   string `json:"network"`
	Subnetwork                string `json:"subnetwork"`
	DefaultEnablePrivateNodes bool   `json:"defaultEnablePrivateNodes,omitempty"`
}

type wReleaseChannel struct {
	Channel string `json:"channel,omitempty"`
}

type wNodePool struct {
	Name              string       `json:"name"`
	Config            wNodeConfig  `json:"config"`
	InitialNodeCount  int          `json:"initialNodeCount"`
	Locations         []string     `json:"locations"`
	Autoscaling       wAutoscaling `json:"autoscaling"`
	Management        wManagement  `json:"management"`
	MaxPodsConstraint wMaxPods     `json:"maxPodsConstraint"`
	PodIpv4CidrSize   int          `json:"podIpv4CidrSize"`
	UpgradeSettings   wUpgrade     `json:"upgradeSettings"`
	InstanceGroupUrls []string     `json:"instanceGroupUrls,omitempty"`
	SelfLink          string       `json:"selfLink"`
	Version           string       `json:"version"`
	Status            string       `json:"status"`
	StatusMessage     string       `json:"statusMessage,omitempty"`
	Conditions        []condition  `json:"conditions,omitempty"`
	Etag              string       `json:"etag"`
	echo              map[string]any
}

func (w wNodePool) MarshalJSON() ([]byte, error) {
	type plain wNodePool
	return withEcho(plain(w), w.echo)
}

type wNodeConfig struct {
	MachineType    string            `json:"machineType"`
	DiskSizeGb     int               `json:"diskSizeGb"`
	DiskType       string            `json:"diskType"`
	ImageType      string            `json:"imageType"`
	Labels         map[string]string `json:"labels,omitempty"`
	ResourceLabels map[string]string `json:"resourceLabels,omitempty"`
	Taints         []wTaint          `json:"taints,omitempty"`
	Accelerators   []wAccelerator    `json:"accelerators,omitempty"`
	Spot           bool              `json:"spot,omitempty"`
	Preemptible    bool              `json:"preemptible,omitempty"`
	OauthScopes    []string          `json:"oauthScopes"`
	ServiceAccount string            `json:"serviceAccount"`
	Metadata       map[string]string `json:"metadata"`
}

type wTaint struct {
	Key    string `json:"key"`
	Value  string `json:"value,omitempty"`
	Effect string `json:"effect"`
}

type wAccelerator struct {
	AcceleratorCount            string            `json:"acceleratorCount"`
	AcceleratorType             string            `json:"acceleratorType"`
	GpuDriverInstallationConfig *wGPUDriverConfig `json:"gpuDriverInstallationConfig,omitempty"`
}

type wGPUDriverConfig struct {
	GpuDriverVersion string `json:"gpuDriverVersion"`
}

type wAutoscaling struct {
	Enabled           bool   `json:"enabled,omitempty"`
	MinNodeCount      int    `json:"minNodeCount,omitempty"`
	MaxNodeCount      int    `json:"maxNodeCount,omitempty"`
	TotalMinNodeCount int    `json:"totalMinNodeCount,omitempty"`
	TotalMaxNodeCount int    `json:"totalMaxNodeCount,omitempty"`
	LocationPolicy    string `json:"locationPolicy,omitempty"`
}

type wManagement struct {
	AutoRepair  bool `json:"autoRepair"`
	AutoUpgrade bool `json:"autoUpgrade"`
}

type wMaxPods struct {
	MaxPodsPerNode string `json:"maxPodsPerNode"`
}

type wUpgrade struct {
	MaxSurge       int    `json:"maxSurge"`
	MaxUnavailable int    `json:"maxUnavailable,omitempty"`
	Strategy       string `json:"strategy"`
}

type wOperation struct {
	Name          string   `json:"name"`
	Zone          string   `json:"zone"`
	Location      string   `json:"location,omitempty"`
	OperationType string   `json:"operationType"`
	Status        string   `json:"status"`
	Detail        string   `json:"detail,omitempty"`
	SelfLink      string   `json:"selfLink"`
	TargetLink    string   `json:"targetLink"`
	StartTime     string   `json:"startTime"`
	EndTime       string   `json:"endTime,omitempty"`
	Error         *wStatus `json:"error,omitempty"`
	// Progress is set on upgrades: how far the nodes (or the control
	// plane) are.
	Progress *wProgress `json:"progress,omitempty"`
}

type wProgress struct {
	Status  string    `json:"status"`
	Metrics []wMetric `json:"metrics"`
}

type wMetric struct {
	Name     string `json:"name"`
	IntValue string `json:"intValue"`
}

type wStatus struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000Z") }

const containerBase = "https://container.googleapis.com/v1/"

func (e *Emulator) opJSON(op *operation) wOperation {
	link := containerBase + "projects/" + strconv.FormatInt(op.project.Number, 10) + "/"
	w := wOperation{
		Name: op.name, Zone: op.location, OperationType: op.opType, Status: op.status, Detail: op.detail,
		SelfLink:   link + locPath(op.location, e.isRegion(op.location)) + "/operations/" + op.name,
		TargetLink: link + op.target,
		StartTime:  stamp(op.start),
	}
	if op.opType == "UPGRADE_NODES" || op.opType == "UPGRADE_MASTER" {
		w.Progress = e.progressOf(op)
	}
	if op.status == "DONE" {
		w.EndTime = stamp(op.end)
		if op.errCode != 0 {
			w.Error = &wStatus{Code: op.errCode, Message: op.errMsg}
		}
	}
	return w
}

func (e *Emulator) clusterSelfLink(c *cluster) string {
	return containerBase + "projects/" + c.project.ID + "/" + locPath(c.location, c.regional) + "/clusters/" + c.name
}

// clusterJSON is a cluster as clusters.get answers it. Called with mu held.
func (e *Emulator) clusterJSON(c *cluster) wCluster {
	w := wCluster{
		Name: c.name, ID: c.id, Location: c.location, Zone: c.location, Locations: c.locations,
		SelfLink: e.clusterSelfLink(c), Status: c.status, StatusMessage: c.message,
		InitialClusterVersion: c.initialVersion, CurrentMasterVersion: c.masterVersion,
		CreateTime: stamp(c.created), LabelFingerprint: c.fingerprint,
		Network: or(c.network, "default"), Subnetwork: or(c.subnetwork, "default"),
		NetworkConfig:     &wNetworkConfig{Network: "projects/" + c.project.ID + "/global/networks/" + or(c.network, "default"), Subnetwork: "projects/" + c.project.ID + "/regions/" + e.regionOf(c.location) + "/subnetworks/" + or(c.subnetwork, "default"), DefaultEnablePrivateNodes: c.privateNodes},
		ReleaseChannel:    &wReleaseChannel{Channel: "REGULAR"},
		LoggingService:    or(c.logging, "logging.googleapis.com/kubernetes"),
		MonitoringService: or(c.monitoring, "monitoring.googleapis.com/kubernetes"),
		Etag:              fingerprintOf([]any{c.key(), c.etag}),
		echo:              c.echo,
	}
	if c.channel != nil {
		// UNSPECIFIED is a cluster on no channel: GKE answers an empty
		// releaseChannel [INF].
		w.ReleaseChannel.Channel = strings.TrimSuffix(*c.channel, "UNSPECIFIED")
	}
	if len(c.labels) > 0 {
		w.ResourceLabels = c.labels
	}
	if c.endpoint != "" {
		w.Endpoint = c.endpoint
		w.MasterAuth = &wMasterAuth{ClusterCaCertificate: base64.StdEncoding.EncodeToString(e.caPEM)}
		w.PrivateClusterConfig = &wPrivateCluster{EnablePrivateNodes: c.privateNodes, PublicEndpoint: hostOf(c.endpoint), PrivateEndpoint: "10.128.0.2"}
	} else if c.privateNodes {
		w.PrivateClusterConfig = &wPrivateCluster{EnablePrivateNodes: true}
	}
	if c.status != "PROVISIONING" {
		w.CurrentNodeVersion = c.nodeVersion
	}
	for i, p := range c.pools {
		w.NodePools = append(w.NodePools, e.poolJSON(c, p))
		if i == 0 {
			// The deprecated cluster-level fields answer the first pool's
			// (as real describe output shows them [INF]).
			cfg := w.NodePools[0].Config
			w.InitialNodeCount, w.NodeConfig = p.initialCount, &cfg
		}
		w.InstanceGroupUrls = append(w.InstanceGroupUrls, w.NodePools[len(w.NodePools)-1].InstanceGroupUrls...)
		w.CurrentNodeCount += e.poolNodes(p)
	}
	return w
}

// podCIDRSize is the pod range per node GKE gives for a maximum of pods
// per node: twice as many addresses as pods, rounded up to a power of two
// (GKE's documentation of flexible pod CIDRs).
func podCIDRSize(maxPods int) int {
	size := 32
	for n := 1; n < 2*maxPods; n *= 2 {
		size--
	}
	return size
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func hostOf(endpoint string) string {
	if i := strings.LastIndexByte(endpoint, ':'); i > 0 && !strings.Contains(endpoint[i:], "]") {
		return endpoint[:i]
	}
	return endpoint
}

// poolJSON is a node pool as nodePools.get answers it. Called with mu held.
func (e *Emulator) poolJSON(c *cluster, p *nodePool) wNodePool {
	w := wNodePool{
		Name: p.name, InitialNodeCount: p.initialCount, Locations: p.locations,
		Management:        wManagement{AutoRepair: p.autoRepair, AutoUpgrade: p.autoUpgrade},
		MaxPodsConstraint: wMaxPods{MaxPodsPerNode: strconv.Itoa(p.maxPods)},
		PodIpv4CidrSize:   podCIDRSize(p.maxPods),
		UpgradeSettings:   wUpgrade{MaxSurge: p.upgrade.maxSurge, MaxUnavailable: p.upgrade.maxUnavailable, Strategy: p.upgrade.strategy},
		echo:              p.echo,
		SelfLink:          e.clusterSelfLink(c) + "/nodePools/" + p.name,
		Version:           p.version, Status: p.status, StatusMessage: p.message, Conditions: p.conditions,
		Etag: fingerprintOf([]any{c.key(), p.name, p.etag}),
		Config: wNodeConfig{
			MachineType: p.cfg.machineType, DiskSizeGb: p.cfg.diskGB, DiskType: p.cfg.diskType, ImageType: p.cfg.imageType,
			Labels: p.cfg.labels, Spot: p.cfg.spot, Preemptible: p.cfg.preemptible,
			OauthScopes:    p.cfg.oauthScopes,
			ServiceAccount: or(p.cfg.serviceAccount, "default"),
			Metadata:       map[string]string{"disable-legacy-endpoints": "true"},
		},
	}
	if len(w.Config.OauthScopes) == 0 {
		w.Config.OauthScopes = []string{"https://www.googleapis.com/auth/cloud-platform"}
	}
	maps.Copy(w.Config.Metadata, p.cfg.metadata)
	// GKE adds the provisioning model to every pool's resource labels (seen
	// in recordings of real traffic).
	rl := map[string]string{"goog-gke-node-pool-provisioning-model": "on-demand"}
	if p.cfg.spot {
		rl["goog-gke-node-pool-provisioning-model"] = "spot"
	} else if p.cfg.preemptible {
		rl["goog-gke-node-pool-provisioning-model"] = "preemptible"
	}
	for k, v := range p.cfg.resourceLabels {
		rl[k] = v
	}
	w.Config.ResourceLabels = rl
	for _, t := range p.cfg.taints {
		w.Config.Taints = append(w.Config.Taints, wTaint(t))
	}
	for _, a := range p.cfg.accelerators {
		wa := wAccelerator{AcceleratorCount: strconv.FormatInt(a.Count, 10), AcceleratorType: a.Type}
		if a.Driver != "" {
			wa.GpuDriverInstallationConfig = &wGPUDriverConfig{GpuDriverVersion: a.Driver}
		}
		w.Config.Accelerators = append(w.Config.Accelerators, wa)
	}
	if as := p.autoscaling; as != nil && as.enabled {
		w.Autoscaling = wAutoscaling{Enabled: true, MinNodeCount: as.min, MaxNodeCount: as.max, TotalMinNodeCount: as.totalMin, TotalMaxNodeCount: as.totalMax, LocationPolicy: as.policy}
	}
	for _, k := range p.migs {
		if m := e.migs[k]; m != nil {
			w.InstanceGroupUrls = append(w.InstanceGroupUrls, m.selfLink())
		}
	}
	return w
}

// --- requests ---

// flexInt is an integer the service takes as a JSON number or a string
// (proto3 JSON writes int64 as strings; the SDK sends some as numbers).
type flexInt int64

func (f *flexInt) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	if s == "null" || s == "" {
		*f = 0
		return nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return fmt.Errorf("invalid integer %s", b)
	}
	*f = flexInt(n)
	return nil
}

type reqCreateCluster struct {
	Cluster   *reqCluster `json:"cluster"`
	Parent    string      `json:"parent"`
	ProjectID string      `json:"projectId"`
	Zone      string      `json:"zone"`
}

type reqCluster struct {
	Name                  string            `json:"name"`
	Description           string            `json:"description"`
	InitialNodeCount      flexInt           `json:"initialNodeCount"`
	Locations             []string          `json:"locations"`
	InitialClusterVersion string            `json:"initialClusterVersion"`
	ResourceLabels        map[string]string `json:"resourceLabels"`
	NodePools             []reqNodePool     `json:"nodePools"`
	NodeConfig            *reqNodeConfig    `json:"nodeConfig"`
	PrivateClusterConfig  *struct {
		EnablePrivateNodes bool `json:"enablePrivateNodes"`
	} `json:"privateClusterConfig"`
	NetworkConfig *struct {
		DefaultEnablePrivateNodes *bool `json:"defaultEnablePrivateNodes"`
	} `json:"networkConfig"`
	ReleaseChannel *struct {
		Channel string `json:"channel"`
	} `json:"releaseChannel"`
	Network           string `json:"network"`
	Subnetwork        string `json:"subnetwork"`
	LoggingService    string `json:"loggingService"`
	MonitoringService string `json:"monitoringService"`
}

type reqNodePool struct {
	Name             string          `json:"name"`
	InitialNodeCount flexInt         `json:"initialNodeCount"`
	Locations        []string        `json:"locations"`
	Autoscaling      *reqAutoscaling `json:"autoscaling"`
	Config           *reqNodeConfig  `json:"config"`
	Management       *struct {
		AutoRepair  bool `json:"autoRepair"`
		AutoUpgrade bool `json:"autoUpgrade"`
	} `json:"management"`
	UpgradeSettings *struct {
		MaxSurge       flexInt `json:"maxSurge"`
		MaxUnavailable flexInt `json:"maxUnavailable"`
		Strategy       string  `json:"strategy"`
	} `json:"upgradeSettings"`
	MaxPodsConstraint *struct {
		MaxPodsPerNode flexInt `json:"maxPodsPerNode"`
	} `json:"maxPodsConstraint"`
	Version string `json:"version"`
}

type reqNodeConfig struct {
	MachineType    string            `json:"machineType"`
	DiskSizeGb     flexInt           `json:"diskSizeGb"`
	DiskType       string            `json:"diskType"`
	ImageType      string            `json:"imageType"`
	Spot           bool              `json:"spot"`
	Preemptible    bool              `json:"preemptible"`
	Accelerators   []reqAccelerator  `json:"accelerators"`
	Labels         map[string]string `json:"labels"`
	ResourceLabels map[string]string `json:"resourceLabels"`
	Taints         []wTaint          `json:"taints"`
	OauthScopes    []string          `json:"oauthScopes"`
	ServiceAccount string            `json:"serviceAccount"`
	Metadata       map[string]string `json:"metadata"`
}

type reqAccelerator struct {
	AcceleratorType             string            `json:"acceleratorType"`
	AcceleratorCount            flexInt           `json:"acceleratorCount"`
	GpuDriverInstallationConfig *wGPUDriverConfig `json:"gpuDriverInstallationConfig"`
}

type reqAutoscaling struct {
	Enabled           bool    `json:"enabled"`
	MinNodeCount      flexInt `json:"minNodeCount"`
	MaxNodeCount      flexInt `json:"maxNodeCount"`
	TotalMinNodeCount flexInt `json:"totalMinNodeCount"`
	TotalMaxNodeCount flexInt `json:"totalMaxNodeCount"`
	LocationPolicy    string  `json:"locationPolicy"`
}

type reqCreateNodePool struct {
	NodePool  *reqNodePool `json:"nodePool"`
	Parent    string       `json:"parent"`
	ProjectID string       `json:"projectId"`
	Zone      string       `json:"zone"`
	ClusterID string       `json:"clusterId"`
}

type reqSetSize struct {
	NodeCount *flexInt `json:"nodeCount"`
	Name      string   `json:"name"`
}

type reqSetAutoscaling struct {
	Autoscaling *reqAutoscaling `json:"autoscaling"`
	Name        string          `json:"name"`
}

type reqSetLabels struct {
	ResourceLabels   map[string]string `json:"resourceLabels"`
	LabelFingerprint string            `json:"labelFingerprint"`
	Name             string            `json:"name"`
}

type reqUpdateCluster struct {
	Name   string `json:"name"`
	Update *struct {
		DesiredMasterVersion string `json:"desiredMasterVersion"`
		DesiredNodeVersion   string `json:"desiredNodeVersion"`
		DesiredNodePoolID    string `json:"desiredNodePoolId"`
		DesiredImageType     string `json:"desiredImageType"`
	} `json:"update"`
}

type reqUpdateNodePool struct {
	Name        string `json:"name"`
	NodeVersion string `json:"nodeVersion"`
	ImageType   string `json:"imageType"`
	Labels      *struct {
		Labels map[string]string `json:"labels"`
	} `json:"labels"`
	ResourceLabels *struct {
		Labels map[string]string `json:"labels"`
	} `json:"resourceLabels"`
	Taints *struct {
		Taints []wTaint `json:"taints"`
	} `json:"taints"`
	Etag string `json:"etag"`
}
