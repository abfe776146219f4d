package gkeemu

import (
	"time"

	"github.com/fleet-agent/fleet-agent/internal/clock"
)

// Options shape an emulator. DefaultOptions fills every field; a zero
// field of an Options passed to New takes its default.
type Options struct {
	// Clock is the time of operations (with StepEvery), tokens and
	// timestamps; the default is the wall clock.
	Clock clock.Clock
	// Projects the emulator knows. A service account key reaches those its
	// AddServiceAccount call names.
	Projects []Project
	// Regions and their zones, the compute catalogue's places.
	Regions []Region
	// MachineTypes of the compute catalogue.
	MachineTypes []MachineType
	// AcceleratorTypes that can be attached to machine types without GPUs
	// of their own, per zone.
	AcceleratorTypes []AcceleratorType
	// Versions are the GKE versions offered (master and node), like
	// "1.34.3-gke.1100000"; DefaultVersion is one of them.
	Versions       []string
	DefaultVersion string
	// Steps are how many observations each kind of operation takes to be
	// DONE. An observation is a read of the operation or of its target
	// (the cluster for cluster operations, the node pool for node pool
	// operations), or a call of Advance. 0 finishes it within the call.
	Steps Steps
	// StepEvery, when set, also moves every operation one step per interval
	// of Clock since it started.
	StepEvery time.Duration
	// Kube, when set, is the API server every cluster hands out (a real
	// kube-apiserver whose webhook token authentication posts to this
	// emulator's TokenReview route). Unset, each cluster gets an address of
	// its own that nothing listens on, and the emulator's own CA.
	Kube KubeAPI
	// TokenLifetime is how long an access token the token endpoint mints
	// lives; default one hour, as Google's do.
	TokenLifetime time.Duration
	// The guesses: behaviour no primary source settled. Each has a field so
	// that tests can run the adapter against both answers.
	Guesses Guesses
	// PageSize is how many items a compute list answers per page; default
	// 500 (the service's maximum).
	PageSize int
}

// Guesses are the emulator's answers to what GKE's documentation leaves open.
type Guesses struct {
	// HonourAssertionExpiry: an access token minted from a JWT assertion
	// expires when the assertion's exp says, if that is sooner than
	// TokenLifetime. Google documents neither way; we believe it ignores
	// exp (tokens live an hour), so the default is false.
	HonourAssertionExpiry bool
	// InitialCountTracksResize: setSize also changes the node pool's
	// initialNodeCount. A reading of GKE's documentation guesses it does not (the default);
	// Config Connector's mock says it does.
	InitialCountTracksResize bool
	// PoolRunningDuringOps: a node pool stays RUNNING while one of its
	// operations (resize, autoscaling, labels) runs. The default (false)
	// shows RECONCILING, as GKE does during upgrades.
	PoolRunningDuringOps bool
	// ResizeKeepsEtag: setSize leaves the node pool's etag as it was.
	// GKE computes the etag from the pool's fields, and setSize may change
	// none of them (see InitialCountTracksResize); the default (false)
	// moves it.
	ResizeKeepsEtag bool
}

// Project is a Google Cloud project: its id and its number (the number
// appears in operations' selfLinks, as the service writes them).
type Project struct {
	ID     string
	Number int64
}

// Region is a compute region and its zones.
type Region struct {
	Name  string
	Zones []string
}

// MachineType is one machine type of the catalogue.
type MachineType struct {
	Name     string
	CPUs     int
	MemoryMB int
	// GPU is the accelerator built into the machine type (A2, A3, G2), nil
	// for one without.
	GPU *GPU
	// Zones it exists in; empty is every zone.
	Zones []string
}

// GPU is the built-in accelerators of a machine type.
type GPU struct {
	Type  string
	Count int
}

// AcceleratorType is a GPU that can be attached to a machine type without
// built-in ones, in some zones.
type AcceleratorType struct {
	Name        string
	Description string
	MaxCards    int
	Zones       []string
	// QuotaMetric is the regional quota it counts against
	// ("NVIDIA_H100_GPUS"); Spot node pools count against
	// "PREEMPTIBLE_" + QuotaMetric.
	QuotaMetric string
}

// Steps are the observations each kind of operation takes.
type Steps struct {
	Cluster  int
	NodePool int
	Update   int
	Delete   int
}

// KubeAPI is the cluster endpoint handed out: `host:port` as GKE writes
// cluster.endpoint, and the PEM of its CA.
type KubeAPI struct {
	Endpoint string
	CAPEM    []byte
}

// DefaultOptions is a project, two regions, a CPU, an L4, an A100 and an
// H100 machine type, and three GKE versions.
func DefaultOptions() Options {
	return Options{
		Clock:    clock.Real{},
		Projects: []Project{{ID: "fa-emu-project", Number: 314159265358}},
		Regions: []Region{
			{Name: "us-central1", Zones: []string{"us-central1-a", "us-central1-b", "us-central1-c", "us-central1-f"}},
			{Name: "europe-west4", Zones: []string{"europe-west4-a", "europe-west4-b", "europe-west4-c"}},
		},
		MachineTypes: []MachineType{
			// e2-medium is what a pool that names no machine type gets.
			{Name: "e2-medium", CPUs: 2, MemoryMB: 4096},
			{Name: "e2-standard-2", CPUs: 2, MemoryMB: 8192},
			{Name: "e2-standard-4", CPUs: 4, MemoryMB: 16384},
			{Name: "n1-standard-8", CPUs: 8, MemoryMB: 30720},
			{Name: "g2-standard-8", CPUs: 8, MemoryMB: 32768, GPU: &GPU{Type: "nvidia-l4", Count: 1},
				Zones: []string{"us-central1-a", "us-central1-b", "us-central1-c", "europe-west4-a", "europe-west4-b", "europe-west4-c"}},
			{Name: "a2-highgpu-1g", CPUs: 12, MemoryMB: 87040, GPU: &GPU{Type: "nvidia-tesla-a100", Count: 1},
				Zones: []string{"us-central1-a", "us-central1-b", "us-central1-c", "us-central1-f", "europe-west4-a", "europe-west4-b"}},
			{Name: "a3-highgpu-8g", CPUs: 208, MemoryMB: 1916928, GPU: &GPU{Type: "nvidia-h100-80gb", Count: 8},
				Zones: []string{"us-central1-a", "us-central1-b", "us-central1-c", "europe-west4-b", "europe-west4-c"}},
		},
		AcceleratorTypes: []AcceleratorType{
			{Name: "nvidia-tesla-t4", Description: "NVIDIA T4", MaxCards: 4, QuotaMetric: "NVIDIA_T4_GPUS",
				Zones: []string{"us-central1-a", "us-central1-b", "us-central1-c", "us-central1-f", "europe-west4-a", "europe-west4-b", "europe-west4-c"}},
			{Name: "nvidia-l4", Description: "NVIDIA L4", MaxCards: 8, QuotaMetric: "NVIDIA_L4_GPUS",
				Zones: []string{"us-central1-a", "us-central1-b", "us-central1-c", "europe-west4-a", "europe-west4-b", "europe-west4-c"}},
			{Name: "nvidia-tesla-a100", Description: "NVIDIA A100 40GB", MaxCards: 16, QuotaMetric: "NVIDIA_A100_GPUS",
				Zones: []string{"us-central1-a", "us-central1-b", "us-central1-c", "us-central1-f", "europe-west4-a", "europe-west4-b"}},
			{Name: "nvidia-h100-80gb", Description: "NVIDIA H100 80GB", MaxCards: 8, QuotaMetric: "NVIDIA_H100_GPUS",
				Zones: []string{"us-central1-a", "us-central1-b", "us-central1-c", "europe-west4-b", "europe-west4-c"}},
		},
		Versions:       []string{"1.35.1-gke.1200000", "1.34.3-gke.1100000", "1.33.5-gke.1400000"},
		DefaultVersion: "1.34.3-gke.1100000",
		Steps:          Steps{Cluster: 3, NodePool: 2, Update: 1, Delete: 1},
		TokenLifetime:  time.Hour,
		PageSize:       500,
	}
}

// withDefaults fills the zero fields of o from DefaultOptions.
func (o Options) withDefaults() Options {
	d := DefaultOptions()
	if o.Clock == nil {
		o.Clock = d.Clock
	}
	if len(o.Projects) == 0 {
		o.Projects = d.Projects
	}
	if len(o.Regions) == 0 {
		o.Regions = d.Regions
	}
	if len(o.MachineTypes) == 0 {
		o.MachineTypes = d.MachineTypes
	}
	if len(o.AcceleratorTypes) == 0 {
		o.AcceleratorTypes = d.AcceleratorTypes
	}
	if len(o.Versions) == 0 {
		o.Versions, o.DefaultVersion = d.Versions, d.DefaultVersion
	}
	if o.DefaultVersion == "" {
		o.DefaultVersion = o.Versions[0]
	}
	if o.Steps == (Steps{}) {
		// A zero Steps means "take the default" only when nothing else says
		// otherwise; use Synchronous for operations that finish at once.
		o.Steps = d.Steps
	}
	if o.Steps.Cluster < 0 {
		o.Steps = Steps{}
	}
	if o.TokenLifetime == 0 {
		o.TokenLifetime = d.TokenLifetime
	}
	if o.PageSize <= 0 {
		o.PageSize = d.PageSize
	}
	return o
}

// Synchronous is a Steps value for operations that are DONE within the call
// that starts them (a zero Steps takes the defaults).
var Synchronous = Steps{Cluster: -1}
