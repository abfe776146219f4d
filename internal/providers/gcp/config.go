package gcp

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/secrets"
)

// Config is the adapter's block of the agent config (`providers.gcp`).
// Every key is optional; DefaultConfig gives the defaults.
//
//	providers:
//	  gcp:
//	    containerEndpoint: https://container.googleapis.com/           # [the public endpoint]
//	    computeEndpoint: https://compute.googleapis.com/compute/v1/     # [the public endpoint]
//	    defaultLocation: us-central1     # [us-central1]: where Verify reads the server config of an account without zones
//	    systemNodePool: { machineType: e2-standard-2, nodeCount: 1, diskGiB: 50 }
//	    gpuDriverVersion: DEFAULT        # [DEFAULT] | LATEST | INSTALLATION_DISABLED
//	    operationWait: { every: 5s, polls: 60 }
//
// GKE creates no cluster without a node somewhere (GKE's documentation), and
// ClusterSpec carries no flavors, so a created cluster gets a one-node
// system pool named SystemPoolName in the first of its zones; it carries
// the pool's resource labels but not its Kubernetes labels, so the node
// daemon never runs there.
//
// operationWait bounds the one case where a call needs two GKE operations
// in a row (autoscaling switched on or off together with a new size, or
// labels with a size): the first is polled until DONE, every `every` on
// the injected clock, at most `polls` times; past that the call returns
// Conflict (reason "inProgress") and the next call continues from what GKE
// then shows.
type Config struct {
	ContainerEndpoint string         `yaml:"containerEndpoint"`
	ComputeEndpoint   string         `yaml:"computeEndpoint"`
	DefaultLocation   string         `yaml:"defaultLocation"`
	SystemNodePool    SystemNodePool `yaml:"systemNodePool"`
	GPUDriverVersion  string         `yaml:"gpuDriverVersion"`
	OperationWait     OperationWait  `yaml:"operationWait"`
}

// SystemNodePool is the node pool a created cluster starts with.
type SystemNodePool struct {
	MachineType string `yaml:"machineType"`
	NodeCount   int    `yaml:"nodeCount"`
	DiskGiB     int    `yaml:"diskGiB"`
}

// OperationWait bounds how long one call waits for a GKE operation.
type OperationWait struct {
	Every time.Duration `yaml:"every"`
	Polls int           `yaml:"polls"`
}

// SystemPoolName is the node pool every created cluster starts with. A
// flavor's pool is always `fa-<6 characters>-<flavor>`, so this name can
// never be one.
const SystemPoolName = "fa-system"

// DefaultConfig is the public endpoints and the defaults above.
func DefaultConfig() Config {
	return Config{
		ContainerEndpoint: "https://container.googleapis.com/",
		ComputeEndpoint:   "https://compute.googleapis.com/compute/v1/",
		DefaultLocation:   "us-central1",
		SystemNodePool:    SystemNodePool{MachineType: "e2-standard-2", NodeCount: 1, DiskGiB: 50},
		GPUDriverVersion:  "DEFAULT",
		OperationWait:     OperationWait{Every: 5 * time.Second, Polls: 60},
	}
}

func (c *Config) validate() error {
	for _, ep := range []*string{&c.ContainerEndpoint, &c.ComputeEndpoint} {
		u, err := url.Parse(*ep)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return fmt.Errorf("endpoint %q: want an http(s) URL", *ep)
		}
		if !strings.HasSuffix(*ep, "/") {
			*ep += "/" // the SDK joins paths onto the endpoint as is
		}
	}
	switch c.GPUDriverVersion {
	case "DEFAULT", "LATEST", "INSTALLATION_DISABLED":
	default:
		return fmt.Errorf("gpuDriverVersion %q: want DEFAULT, LATEST or INSTALLATION_DISABLED", c.GPUDriverVersion)
	}
	sp := c.SystemNodePool
	if sp.MachineType == "" || sp.NodeCount < 1 || sp.NodeCount > 100 || sp.DiskGiB < 12 || sp.DiskGiB > 65536 {
		return fmt.Errorf("systemNodePool: want a machineType, nodeCount 1 to 100 and diskGiB 12 to 65536")
	}
	if c.OperationWait.Every < 0 || c.OperationWait.Polls < 1 {
		return fmt.Errorf("operationWait: want every >= 0s and polls >= 1")
	}
	if !regionRE().MatchString(c.DefaultLocation) && !zoneRE().MatchString(c.DefaultLocation) {
		return fmt.Errorf("defaultLocation %q is not a region or zone name", c.DefaultLocation)
	}
	return nil
}

var (
	regionRE  = lazyRE(`^[a-z]+-[a-z]+[0-9]+$`)
	zoneRE    = lazyRE(`^[a-z]+-[a-z]+[0-9]+-[a-z]$`)
	projectRE = lazyRE(`^[a-z][-a-z0-9]{4,28}[a-z0-9]$`)
)

// regionOfZone is the region a zone name belongs to.
func regionOfZone(zone string) string { return zone[:strings.LastIndexByte(zone, '-')] }

// accountConfig is the `config` of a gcp provider account:
//
//	{ "projectId": "my-project", "zones": ["us-central1-a"], "credentials": "secret://gke-key" }
//
// credentials is a reference to the JSON of a service account key; the
// OAuth2 token is fetched from the key's token_uri. Only with
// `"metadataServer": true` (and no credentials) does the adapter ask the
// metadata server of the machine it runs on instead.
type accountConfig struct {
	ProjectID      string   `json:"projectId"`
	Zones          []string `json:"zones,omitempty"`
	Credentials    string   `json:"credentials,omitempty"`
	MetadataServer bool     `json:"metadataServer,omitempty"`
}

func parseAccount(op string, acct providers.Account) (accountConfig, error) {
	var cfg accountConfig
	if acct.Provider != "" && acct.Provider != providers.GCP {
		return cfg, providers.Invalidf(op, "wrongProvider", "provider account %q is for %q, not gcp", acct.Name, acct.Provider)
	}
	if err := providers.DecodeAccountConfig(acct, &cfg); err != nil {
		e := err.(*providers.Error)
		e.Op = op
		return cfg, e
	}
	bad := func(format string, args ...any) error {
		return providers.Invalidf(op, "accountConfig", "provider account %q: config: "+format, append([]any{acct.Name}, args...)...)
	}
	if !projectRE().MatchString(cfg.ProjectID) {
		return cfg, bad("projectId %q is not a Google Cloud project id (6 to 30 lowercase letters, digits and '-')", cfg.ProjectID)
	}
	for _, z := range cfg.Zones {
		if !zoneRE().MatchString(z) {
			return cfg, bad("zones: %q is not a zone name like us-central1-a", z)
		}
	}
	switch {
	case cfg.Credentials != "" && cfg.MetadataServer:
		return cfg, bad("give credentials or metadataServer, not both")
	case cfg.Credentials == "" && !cfg.MetadataServer:
		return cfg, providers.Invalidf(op, "credentialsMissing", "provider account %q: config: credentials is missing: give a secret reference to a service account key's JSON (or metadataServer: true on Google Cloud)", acct.Name)
	case cfg.Credentials != "" && !secrets.LooksLikeRef(cfg.Credentials):
		// Never echo the value: it may be the key itself.
		return cfg, providers.Invalidf(op, "secretInline", "provider account %q: config: credentials must be a secret reference (secret://, vault://, env://), never the key itself", acct.Name)
	}
	return cfg, nil
}

// zonesIn lists the account's zones in a region.
func (c accountConfig) zonesIn(region string) []string {
	var out []string
	for _, z := range c.Zones {
		if regionOfZone(z) == region {
			out = append(out, z)
		}
	}
	return out
}
