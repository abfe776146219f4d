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
	Duration  string `json:"duration"`
	Day       string `json:"day"`
}

type wireCluster struct {
	ID                string       `json:"id"`
	Name              string       `json:"name"`
	Region            string       `json:"region"`
	Version           string       `json:"version"`
	ClusterSubnet     string       `json:"cluster_subnet"`
	ServiceSubnet     string       `json:"service_subnet"`
	VPCUUID           string       `json:"vpc_uuid"`
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
		ClusterSubnet: "10.244.0.0/16", ServiceSubnet: "10.245.0.0/16", VPCUUID: c.vpc,
		Tags:              append([]string{"k8s", "k8s:" + c.id}, c.tags...),
		NodePools:         []wirePool{},
		MaintenancePolicy: &maintenance{StartTime: "00:00", Duration: "4h0m0s", Day: "any"},
		Status:            wireStatus{State: c.state, Message: c.message},
		CreatedAt:         stamp(c.created), UpdatedAt: stamp(c.updated),
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
