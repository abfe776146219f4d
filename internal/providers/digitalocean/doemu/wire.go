package doemu

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"
)

// The answers, shaped as DigitalOcean's OpenAPI description has them; the
// emulator has its own types rather than godo's, so that it follows the
// service and not the client.

type plugin struct {
	Enabled *bool `json:"enabled"`
}

type wireStatus struct {
	State   string `json:"state"`
	Message string `json:"message,omitempty"`
}

type wireNode struct {
	ID        string     `json:"id"`
	Name      string     `json:"name"`
	Status    wireStatus `json:"status"`
	DropletID string     `json:"droplet_id"`
	CreatedAt string     `json:"created_at"`
	UpdatedAt string     `json:"updated_at"`
}

type wirePool struct {
	ID        string            `json:"id"`
	Name      string            `json:"name"`
	Size      string            `json:"size"`
	Count     int               `json:"count"`
	Tags      []string          `json:"tags"`
	Labels    map[string]string `json:"labels"`
	Taints    []taint           `json:"taints"`
	AutoScale bool              `json:"auto_scale"`
	MinNodes  int               `json:"min_nodes"`
	MaxNodes  int               `json:"max_nodes"`
	Nodes     []wireNode        `json:"nodes"`
	// Spot is the Spot preview. Guess: the preview has no public wire form
	// (neither godo v1.237.0 nor the OpenAPI description name one), so the
	// emulator takes and shows it as a boolean `spot` on the node pool.
	Spot *bool `json:"spot,omitempty"`
}

type maintenance struct {
	StartTime string `json:"start_time"`
	// Duration is read-only: the service sets it (godo sends it back,
	// empty, on every create and update).
	Duration string `json:"duration"`
	Day      string `json:"day"`
}

// firewall is the control plane firewall (early availability): kept and
// returned as sent.
type firewall struct {
	Enabled          *bool    `json:"enabled,omitempty"`
	AllowedAddresses []string `json:"allowed_addresses,omitempty"`
}

// autoscalerConfig is the cluster autoscaler's configuration: kept and
// returned as sent.
type autoscalerConfig struct {
	ScaleDownUtilizationThreshold *float64 `json:"scale_down_utilization_threshold,omitempty"`
	ScaleDownUnneededTime         *string  `json:"scale_down_unneeded_time,omitempty"`
	Expanders                     []string `json:"expanders,omitempty"`
}

type ssoConfig struct {
	Enabled   *bool  `json:"enabled,omitempty"`
	Required  *bool  `json:"required,omitempty"`
	IssuerURL string `json:"issuer_url,omitempty"`
	ClientID  string `json:"client_id,omitempty"`
}

// settings are the cluster's documented settable objects the emulator
// keeps as they were sent and returns, without acting on them: a create
// sets them, an update changes the members it names. Shared by the create
// and update bodies and the answer.
type settings struct {
	ControlPlaneFirewall *firewall         `json:"control_plane_firewall,omitempty"`
	AutoscalerConfig     *autoscalerConfig `json:"cluster_autoscaler_configuration,omitempty"`
	SSO                  *ssoConfig        `json:"sso,omitempty"`
	RoutingAgent         *plugin           `json:"routing_agent,omitempty"`
	P2POCIRegistry       *plugin           `json:"p2p_oci_registry_plugin,omitempty"`
	AmdMetricsExporter   *plugin           `json:"amd_gpu_device_metrics_exporter_plugin,omitempty"`
	RDMASharedDevPlugin  *plugin           `json:"rdma_shared_dev_plugin,omitempty"`
	CorednsAutoscaler    *plugin           `json:"coredns_autoscaler,omitempty"`
}

// set overrides *to with the members of from that are given, making *to
// when from gives any. Guess: a member left out or null keeps its value,
// as doctl's update sends `"enabled":null` in a firewall it only changes
// the addresses of.
func set[T any](to **T, from *T, apply func(to, from *T) bool) {
	if from == nil {
		return
	}
	cur := new(T)
	if *to != nil {
		c := **to
		cur = &c
	}
	if apply(cur, from) {
		*to = cur
	}
}

func pick[V any](to *V, from V, given bool) {
	if given {
		*to = from
	}
}

// merge changes the settings u gives.
func (s *settings) merge(u settings) {
	set(&s.ControlPlaneFirewall, u.ControlPlaneFirewall, func(to, from *firewall) bool {
		pick(&to.Enabled, from.Enabled, from.Enabled != nil)
		pick(&to.AllowedAddresses, from.AllowedAddresses, from.AllowedAddresses != nil)
		return to.Enabled != nil || to.AllowedAddresses != nil
	})
	set(&s.AutoscalerConfig, u.AutoscalerConfig, func(to, from *autoscalerConfig) bool {
		pick(&to.ScaleDownUtilizationThreshold, from.ScaleDownUtilizationThreshold, from.ScaleDownUtilizationThreshold != nil)
		pick(&to.ScaleDownUnneededTime, from.ScaleDownUnneededTime, from.ScaleDownUnneededTime != nil)
		pick(&to.Expanders, from.Expanders, from.Expanders != nil)
		return to.ScaleDownUtilizationThreshold != nil || to.ScaleDownUnneededTime != nil || to.Expanders != nil
	})
	set(&s.SSO, u.SSO, func(to, from *ssoConfig) bool {
		pick(&to.Enabled, from.Enabled, from.Enabled != nil)
		pick(&to.Required, from.Required, from.Required != nil)
		pick(&to.IssuerURL, from.IssuerURL, from.IssuerURL != "")
		pick(&to.ClientID, from.ClientID, from.ClientID != "")
		return *to != (ssoConfig{})
	})
	for _, f := range []struct {
		to   **plugin
		from *plugin
	}{
		{&s.RoutingAgent, u.RoutingAgent}, {&s.P2POCIRegistry, u.P2POCIRegistry},
		{&s.AmdMetricsExporter, u.AmdMetricsExporter}, {&s.RDMASharedDevPlugin, u.RDMASharedDevPlugin},
		{&s.CorednsAutoscaler, u.CorednsAutoscaler},
	} {
		set(f.to, f.from, func(to, from *plugin) bool {
			pick(&to.Enabled, from.Enabled, from.Enabled != nil)
			return to.Enabled != nil
		})
	}
}

// unmodelled are the members godo sends (when set) that DigitalOcean's
// description does not document and the emulator does not model: any of
// them with a value is refused with the service's 422, so that a client
// never believes it set something the emulator dropped.
type unmodelled struct {
	NvidiaGpuDraDriver json.RawMessage `json:"nvidia_gpu_dra_driver"`
	AmdGpuDraDriver    json.RawMessage `json:"amd_gpu_dra_driver"`
	NfsCsiPlugin       json.RawMessage `json:"nfs_csi_plugin"`
	GPUOperatorReady   json.RawMessage `json:"gpu_operator_ready"`
	Insights           json.RawMessage `json:"insights"`
}

// refused names the first unmodelled member with a value, or "".
func (u unmodelled) refused() string {
	for _, f := range []struct {
		name string
		v    json.RawMessage
	}{
		{"nvidia_gpu_dra_driver", u.NvidiaGpuDraDriver}, {"amd_gpu_dra_driver", u.AmdGpuDraDriver},
		{"nfs_csi_plugin", u.NfsCsiPlugin}, {"gpu_operator_ready", u.GPUOperatorReady}, {"insights", u.Insights},
	} {
		if v := string(f.v); v != "" && v != "null" && v != "false" {
			return f.name
		}
	}
	return ""
}

type wireCluster struct {
	ID                string       `json:"id"`
	Name              string       `json:"name"`
	Region            string       `json:"region"`
	Version           string       `json:"version"`
	ClusterSubnet     string       `json:"cluster_subnet"`
	ServiceSubnet     string       `json:"service_subnet"`
	VPCUUID           string       `json:"vpc_uuid"`
	WorkerSubnetUUID  string       `json:"worker_subnet_uuid,omitempty"`
	IPv4              string       `json:"ipv4"`
	Endpoint          string       `json:"endpoint"`
	Tags              []string     `json:"tags"`
	NodePools         []wirePool   `json:"node_pools"`
	MaintenancePolicy *maintenance `json:"maintenance_policy"`
	AutoUpgrade       bool         `json:"auto_upgrade"`
	Status            wireStatus   `json:"status"`
	CreatedAt         string       `json:"created_at"`
	UpdatedAt         string       `json:"updated_at"`
	SurgeUpgrade      bool         `json:"surge_upgrade"`
	RegistryEnabled   bool         `json:"registry_enabled"`
	HA                bool         `json:"ha"`
	IsolatedWorkers   bool         `json:"isolated_workers"`
	NvidiaPlugin      *plugin      `json:"nvidia_gpu_device_plugin,omitempty"`
	AmdPlugin         *plugin      `json:"amd_gpu_device_plugin,omitempty"`
	settings
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func (e *Emulator) renderPool(c *cluster, p *pool) wirePool {
	w := wirePool{
		ID: p.id, Name: p.name, Size: p.size, Count: p.count,
		Tags:   append([]string{"k8s", "k8s:" + c.id, "k8s-worker"}, p.tags...),
		Labels: cloneLabels(p.labels), Taints: append([]taint{}, p.taints...),
		AutoScale: p.autoScale, Nodes: []wireNode{},
	}
	if p.autoScale {
		w.MinNodes, w.MaxNodes = p.minNodes, p.maxNodes
	}
	if p.spot {
		on := true
		w.Spot = &on
	}
	for _, n := range p.nodes {
		w.Nodes = append(w.Nodes, wireNode{
			ID: n.id, Name: n.name, Status: wireStatus{State: n.state}, DropletID: n.dropletID,
			CreatedAt: stamp(n.created), UpdatedAt: stamp(n.updated),
		})
	}
	return w
}

func (e *Emulator) render(c *cluster) wireCluster {
	w := wireCluster{
		ID: c.id, Name: c.name, Region: c.region, Version: c.version,
		ClusterSubnet: c.clusterSubnet, ServiceSubnet: c.serviceSubnet, VPCUUID: c.vpc, WorkerSubnetUUID: c.workerSubnet,
		Tags:              append([]string{"k8s", "k8s:" + c.id}, c.tags...),
		NodePools:         []wirePool{},
		MaintenancePolicy: &maintenance{StartTime: c.maint.StartTime, Duration: "4h0m0s", Day: c.maint.Day},
		HA:                c.ha, AutoUpgrade: c.autoUpgrade, SurgeUpgrade: c.surgeUpgrade,
		settings:  c.settings,
		Status:    wireStatus{State: c.state, Message: c.message},
		CreatedAt: stamp(c.created), UpdatedAt: stamp(c.updated),
		IsolatedWorkers: c.isolated,
		NvidiaPlugin:    e.plugin(c, c.nvidiaPlugin, "nvidia"),
		AmdPlugin:       e.plugin(c, c.amdPlugin, "amd"),
	}
	// The description: "The IP address and cluster API server endpoint
	// will not be available until the cluster has finished provisioning."
	if c.state != "provisioning" {
		w.Endpoint = c.endpoint
	}
	for _, p := range c.pools {
		w.NodePools = append(w.NodePools, e.renderPool(c, p))
	}
	return w
}

// writeJSON answers with a JSON body ending in a newline, as the service's
// do.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

type wireError struct {
	ID        string `json:"id"`
	Message   string `json:"message"`
	RequestID string `json:"request_id,omitempty"`
}

func writeError(w http.ResponseWriter, status int, id, message string) {
	rid := requestID()
	w.Header().Set("X-Request-Id", rid)
	writeJSON(w, status, wireError{ID: id, Message: message, RequestID: rid})
}

// statusID is the service's error id and its usual message for a status.
func statusID(status int) (string, string) {
	switch status {
	case http.StatusBadRequest:
		return "bad_request", "The request was invalid."
	case http.StatusUnauthorized:
		return "unauthorized", "Unable to authenticate you"
	case http.StatusForbidden:
		return "forbidden", "You do not have access for the attempted action."
	case http.StatusNotFound:
		return "not_found", "The resource you were accessing could not be found."
	case http.StatusConflict:
		return "conflict", "The request could not be completed due to a conflict."
	case http.StatusUnprocessableEntity:
		return "unprocessable_entity", "request payload validation failed"
	case http.StatusTooManyRequests:
		return "too_many_requests", "API rate limit exceeded."
	case http.StatusServiceUnavailable:
		return "service_unavailable", "The service is temporarily unavailable."
	}
	return "server_error", "Server was unable to give you a response."
}

var requestSeq atomic.Int64

// requestID numbers answers; ids only need to differ from one another, and a
// counter keeps the emulator deterministic.
func requestID() string {
	return fmt.Sprintf("00000000-0000-4000-8000-%012d", requestSeq.Add(1))
}

type accountKey struct{}

func withAccount(ctx context.Context, a *Account) context.Context {
	return context.WithValue(ctx, accountKey{}, a)
}

func accountOf(r *http.Request) *Account {
	a, _ := r.Context().Value(accountKey{}).(*Account)
	return a
}

func decodeBody(r *http.Request, v any) error {
	return json.NewDecoder(r.Body).Decode(v)
}

// decodeStrict decodes a request body, refusing a member v does not
// declare.
func decodeStrict(r *http.Request, v any) error {
	d := json.NewDecoder(r.Body)
	d.DisallowUnknownFields()
	return d.Decode(v)
}
