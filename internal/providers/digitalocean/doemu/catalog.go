package doemu

// Region is a region where DOKS clusters can go.
type Region struct {
	Slug string
	Name string
}

// GPU is a size's gpu_info.
type GPU struct {
	Count int
	// Model is DigitalOcean's spelling ("nvidia_h100").
	Model   string
	VRAMGiB int
}

// Size is a droplet size: what a node pool's `size` names.
type Size struct {
	Slug      string
	VCPUs     int
	MemoryMB  int
	DiskGB    int
	Regions   []string
	Available bool
	// Kubernetes: the size may be used for node pools (listed by the
	// Kubernetes options).
	Kubernetes  bool
	GPU         *GPU
	PriceHourly float64
	Description string
}

// Version is a DOKS release.
type Version struct {
	Slug       string // "1.34.2-do.1"
	Kubernetes string // "1.34.2"
}

// DefaultRegions are a handful of DigitalOcean's regions.
func DefaultRegions() []Region {
	return []Region{
		{"ams3", "Amsterdam 3"}, {"fra1", "Frankfurt 1"}, {"nyc1", "New York 1"},
		{"nyc2", "New York 2"}, {"sfo3", "San Francisco 3"}, {"tor1", "Toronto 1"},
	}
}

// DefaultSizes are CPU sizes everywhere and GPU sizes in some regions, with
// the shapes DigitalOcean publishes for them.
//
// Guess: the gpu_info model strings beyond the description's example
// ("nvidia_h100") follow its pattern (vendor_model); the adapter maps any
// such string to "vendor-model".
func DefaultSizes() []Size {
	all := []string{"ams3", "fra1", "nyc1", "nyc2", "sfo3", "tor1"}
	gpuRegions := []string{"nyc2", "tor1"}
	return []Size{
		{Slug: "s-1vcpu-2gb", VCPUs: 1, MemoryMB: 2048, DiskGB: 50, Regions: all, Available: true, Kubernetes: true, PriceHourly: 0.01786, Description: "Basic"},
		{Slug: "s-2vcpu-4gb", VCPUs: 2, MemoryMB: 4096, DiskGB: 80, Regions: all, Available: true, Kubernetes: true, PriceHourly: 0.03571, Description: "Basic"},
		{Slug: "s-4vcpu-8gb", VCPUs: 4, MemoryMB: 8192, DiskGB: 160, Regions: all, Available: true, Kubernetes: true, PriceHourly: 0.07143, Description: "Basic"},
		{Slug: "gpu-l40sx1-48gb", VCPUs: 8, MemoryMB: 65536, DiskGB: 500, Regions: gpuRegions, Available: true, Kubernetes: true,
			GPU: &GPU{Count: 1, Model: "nvidia_l40s", VRAMGiB: 48}, PriceHourly: 1.57, Description: "GPU"},
		{Slug: "gpu-h100x1-80gb", VCPUs: 20, MemoryMB: 245760, DiskGB: 720, Regions: gpuRegions, Available: true, Kubernetes: true,
			GPU: &GPU{Count: 1, Model: "nvidia_h100", VRAMGiB: 80}, PriceHourly: 3.39, Description: "GPU"},
		{Slug: "gpu-h100x8-640gb", VCPUs: 160, MemoryMB: 1966080, DiskGB: 2046, Regions: gpuRegions, Available: true, Kubernetes: true,
			GPU: &GPU{Count: 8, Model: "nvidia_h100", VRAMGiB: 640}, PriceHourly: 23.92, Description: "GPU"},
		{Slug: "gpu-mi300x1-192gb", VCPUs: 20, MemoryMB: 245760, DiskGB: 720, Regions: []string{"tor1"}, Available: true, Kubernetes: true,
			GPU: &GPU{Count: 1, Model: "amd_mi300x", VRAMGiB: 192}, PriceHourly: 1.99, Description: "GPU"},
		// A size that exists but takes no new droplets.
		{Slug: "s-8vcpu-16gb-retired", VCPUs: 8, MemoryMB: 16384, DiskGB: 320, Regions: all, Available: false, Kubernetes: false, PriceHourly: 0.14286, Description: "Basic"},
	}
}

// DefaultVersions are three DOKS releases, oldest first.
func DefaultVersions() []Version {
	return []Version{
		{"1.33.6-do.0", "1.33.6"},
		{"1.34.2-do.1", "1.34.2"},
		{"1.35.1-do.0", "1.35.1"},
	}
}
