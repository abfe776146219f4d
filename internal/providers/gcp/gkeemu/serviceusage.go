package gkeemu

import (
	"net/http"
	"strconv"
)

// serviceUsagePrefix is where the emulator serves the one Service Usage
// method gcloud calls before it creates a cluster (services.get, to warn when
// the Kubernetes Engine API is not enabled). Point gcloud's serviceusage
// endpoint override at URL()+serviceUsagePrefix: its own path
// (v1/projects/...) would collide with container/v1's.
const serviceUsagePrefix = "/serviceusage/v1/"

// ServiceUsageEndpoint is what CLOUDSDK_API_ENDPOINT_OVERRIDES_SERVICEUSAGE
// takes.
func (e *Emulator) ServiceUsageEndpoint() string { return e.URL() + "/serviceusage/" }

// enabledServices are the APIs every emulated project has enabled: the ones
// the emulator serves.
var enabledServices = map[string]bool{"container.googleapis.com": true, "compute.googleapis.com": true}

func serviceUsageRoute(_ *Emulator, c *call) (func(*Emulator, http.ResponseWriter, *call), bool) {
	s := c.segs
	if len(s) == 4 && s[0] == "projects" && s[2] == "services" && c.r.Method == http.MethodGet && c.verb == "" {
		c.id = "serviceusage.services.get"
		return (*Emulator).getService, true
	}
	return nil, false
}

func (e *Emulator) getService(w http.ResponseWriter, c *call) {
	parent := "projects/" + strconv.FormatInt(c.project.Number, 10)
	state := "DISABLED"
	if enabledServices[c.segs[3]] {
		state = "ENABLED"
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"name":   parent + "/services/" + c.segs[3],
		"parent": parent,
		"config": map[string]any{"name": c.segs[3]},
		"state":  state,
	})
}
