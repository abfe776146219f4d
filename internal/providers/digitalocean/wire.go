package digitalocean

import (
	"github.com/digitalocean/godo"
)

// wireCluster is a cluster as DigitalOcean answers it: godo's type, with
// the state kept as a string. godo v1.237.0 refuses to parse a state it
// does not list, and DigitalOcean's OpenAPI description lists one it does
// not ("deleting"); read through godo's own type, a cluster being deleted
// could not be read at all.
type wireCluster struct {
	godo.KubernetesCluster
	Status    *wireStatus `json:"status,omitempty"`
	NodePools []*wirePool `json:"node_pools,omitempty"`
}

type wireStatus struct {
	State   string `json:"state"`
	Message string `json:"message"`
}

// wirePool is a node pool with the field of the Spot preview.
//
// Guess: the preview has no public wire form (neither godo v1.237.0 nor the
// OpenAPI description at digitalocean/openapi@7c1300c name one); the
// adapter sends and reads a boolean `spot`. A pool asked for as Spot whose
// answer does not say spot is reported as not taken (see EnsureNodePool).
type wirePool struct {
	godo.KubernetesNodePool
	Spot *bool `json:"spot,omitempty"`
}

type clusterRoot struct {
	Cluster *wireCluster `json:"kubernetes_cluster"`
}

type clustersRoot struct {
	Clusters []*wireCluster `json:"kubernetes_clusters"`
	Links    *godo.Links    `json:"links"`
}

type poolRoot struct {
	NodePool *wirePool `json:"node_pool"`
}

// poolCreate is the body of a node pool create. godo's request type drops
// a count of 0 (omitempty), which an autoscaled pool from zero needs and
// which the description requires present, and has no Spot field.
type poolCreate struct {
	Name      string            `json:"name"`
	Size      string            `json:"size"`
	Count     int               `json:"count"`
	Tags      []string          `json:"tags,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
	AutoScale bool              `json:"auto_scale,omitempty"`
	MinNodes  *int              `json:"min_nodes,omitempty"`
	MaxNodes  *int              `json:"max_nodes,omitempty"`
	Spot      bool              `json:"spot,omitempty"`
}
