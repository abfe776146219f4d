package gkeemu

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

const computeBase = "https://www.googleapis.com/compute/v1/"

// computeRoute maps a compute/v1 request to its handler.
func computeRoute(_ *Emulator, c *call) (func(*Emulator, http.ResponseWriter, *call), bool) {
	s := c.segs
	if c.verb != "" || len(s) < 3 || s[0] != "projects" {
		return nil, false
	}
	if c.r.Method == http.MethodPost {
		if len(s) == 7 && s[2] == "zones" && s[4] == "instanceGroupManagers" && s[6] == "deleteInstances" {
			c.id = "compute.instanceGroupManagers.deleteInstances"
			return (*Emulator).deleteInstances, true
		}
		if len(s) == 7 && s[2] == "zones" && s[4] == "instanceGroupManagers" && s[6] == "listManagedInstances" {
			c.id = "compute.instanceGroupManagers.listManagedInstances"
			return (*Emulator).listManagedInstances, true
		}
		// gcloud waits on a zone operation with wait, which answers the
		// operation as get does once it is done or a while has passed.
		if len(s) == 7 && s[2] == "zones" && s[4] == "operations" && s[6] == "wait" {
			c.id = "compute.zoneOperations.wait"
			return (*Emulator).getZoneOperation, true
		}
		return nil, false
	}
	if c.r.Method != http.MethodGet {
		return nil, false
	}
	switch {
	case len(s) == 6 && s[2] == "zones" && s[4] == "operations":
		c.id = "compute.zoneOperations.get"
		return (*Emulator).getZoneOperation, true
	case len(s) == 3 && s[2] == "regions":
		c.id = "compute.regions.list"
		return (*Emulator).listRegions, true
	case len(s) == 4 && s[2] == "regions":
		c.id = "compute.regions.get"
		return (*Emulator).getRegion, true
	case len(s) == 3 && s[2] == "zones":
		c.id = "compute.zones.list"
		return (*Emulator).listZones, true
	case len(s) == 4 && s[2] == "zones":
		c.id = "compute.zones.get"
		return (*Emulator).getZone, true
	case len(s) == 5 && s[2] == "zones" && s[4] == "machineTypes":
		c.id = "compute.machineTypes.list"
		return (*Emulator).listMachineTypes, true
	case len(s) == 6 && s[2] == "zones" && s[4] == "machineTypes":
		c.id = "compute.machineTypes.get"
		return (*Emulator).getMachineType, true
	case len(s) == 5 && s[2] == "zones" && s[4] == "acceleratorTypes":
		c.id = "compute.acceleratorTypes.list"
		return (*Emulator).listAcceleratorTypes, true
	case len(s) == 6 && s[2] == "zones" && s[4] == "acceleratorTypes":
		c.id = "compute.acceleratorTypes.get"
		return (*Emulator).getAcceleratorType, true
	case len(s) == 6 && s[2] == "zones" && s[4] == "instanceGroupManagers":
		c.id = "compute.instanceGroupManagers.get"
		return (*Emulator).getInstanceGroupManager, true
	}
	return nil, false
}

// computeNotFound is compute's 404. Compute's errors carry no "status"
// field, unlike GKE's [INF: from how its errors are usually quoted].
func computeNotFound(path string) *apiError {
	return &apiError{code: http.StatusNotFound, reason: "notFound", message: "The resource '" + path + "' was not found"}
}

func (e *Emulator) projectLink(c *call) string { return computeBase + "projects/" + c.project.ID }

func numericID(s string) string {
	h := hash8(s) + hash8(s+"#")
	n, _ := strconv.ParseUint(h, 16, 64)
	return strconv.FormatUint(n%9e18, 10)
}

const created = "2019-05-01T00:00:00.000-07:00"

type wRegion struct {
	Kind              string   `json:"kind"`
	ID                string   `json:"id"`
	CreationTimestamp string   `json:"creationTimestamp"`
	Name              string   `json:"name"`
	Description       string   `json:"description"`
	Status            string   `json:"status"`
	Zones             []string `json:"zones"`
	SelfLink          string   `json:"selfLink"`
	SupportsPzs       bool     `json:"supportsPzs"`
}

type wZone struct {
	Kind              string   `json:"kind"`
	ID                string   `json:"id"`
	CreationTimestamp string   `json:"creationTimestamp"`
	Name              string   `json:"name"`
	Description       string   `json:"description"`
	Status            string   `json:"status"`
	Region            string   `json:"region"`
	SelfLink          string   `json:"selfLink"`
	AvailableCPUs     []string `json:"availableCpuPlatforms"`
	SupportsPzs       bool     `json:"supportsPzs"`
}

type wMachineType struct {
	Kind                         string        `json:"kind"`
	ID                           string        `json:"id"`
	CreationTimestamp            string        `json:"creationTimestamp"`
	Name                         string        `json:"name"`
	Description                  string        `json:"description"`
	GuestCpus                    int           `json:"guestCpus"`
	MemoryMb                     int           `json:"memoryMb"`
	ImageSpaceGb                 int           `json:"imageSpaceGb"`
	MaximumPersistentDisks       int           `json:"maximumPersistentDisks"`
	MaximumPersistentDisksSizeGb string        `json:"maximumPersistentDisksSizeGb"`
	Zone                         string        `json:"zone"`
	SelfLink                     string        `json:"selfLink"`
	IsSharedCPU                  bool          `json:"isSharedCpu"`
	Accelerators                 []wGuestAccel `json:"accelerators,omitempty"`
	Architecture                 string        `json:"architecture"`
}

type wGuestAccel struct {
	GuestAcceleratorType  string `json:"guestAcceleratorType"`
	GuestAcceleratorCount int    `json:"guestAcceleratorCount"`
}

type wAcceleratorType struct {
	Kind                    string `json:"kind"`
	ID                      string `json:"id"`
	CreationTimestamp       string `json:"creationTimestamp"`
	Name                    string `json:"name"`
	Description             string `json:"description"`
	SelfLink                string `json:"selfLink"`
	Zone                    string `json:"zone"`
	MaximumCardsPerInstance int    `json:"maximumCardsPerInstance"`
}

type wList struct {
	Kind          string `json:"kind"`
	ID            string `json:"id"`
	Items         any    `json:"items,omitempty"`
	SelfLink      string `json:"selfLink"`
	NextPageToken string `json:"nextPageToken,omitempty"`
}

// writeList answers one page of a compute list.
func writeList[T any](e *Emulator, w http.ResponseWriter, c *call, kind, rel string, all []T) {
	items, next, aerr := page(e, c, all)
	if aerr != nil {
		writeAPIError(w, aerr)
		return
	}
	writeJSON(w, http.StatusOK, wList{Kind: kind, ID: "projects/" + c.project.ID + "/" + rel, Items: itemsOf(items), SelfLink: e.projectLink(c) + "/" + rel, NextPageToken: next})
}

// page cuts a list into the page a request asks for.
func page[T any](e *Emulator, c *call, items []T) ([]T, string, *apiError) {
	size := e.opts.PageSize
	if m := c.r.URL.Query().Get("maxResults"); m != "" {
		n, err := strconv.Atoi(m)
		if err != nil || n < 0 || n > 500 {
			return nil, "", &apiError{code: 400, reason: "invalid", message: "Invalid value for field 'maxResults': '" + m + "'. Must be less than or equal to 500"}
		}
		if n > 0 {
			size = min(size, n)
		}
	}
	start := 0
	if t := c.r.URL.Query().Get("pageToken"); t != "" {
		b, err := base64.RawURLEncoding.DecodeString(t)
		n, err2 := strconv.Atoi(string(b))
		if err != nil || err2 != nil || n < 0 || n > len(items) {
			return nil, "", &apiError{code: 400, reason: "invalid", message: "Invalid value for field 'pageToken': '" + t + "'."}
		}
		start = n
	}
	end := min(start+size, len(items))
	next := ""
	if end < len(items) {
		next = base64.RawURLEncoding.EncodeToString([]byte(strconv.Itoa(end)))
	}
	if start == end {
		return nil, next, nil // compute leaves "items" out of an empty page
	}
	return items[start:end], next, nil
}

func (e *Emulator) regionJSON(c *call, r Region) wRegion {
	w := wRegion{Kind: "compute#region", ID: numericID(r.Name), CreationTimestamp: created, Name: r.Name, Description: r.Name, Status: "UP",
		SelfLink: e.projectLink(c) + "/regions/" + r.Name}
	for _, z := range r.Zones {
		w.Zones = append(w.Zones, e.projectLink(c)+"/zones/"+z)
	}
	return w
}

func (e *Emulator) listRegions(w http.ResponseWriter, c *call) {
	var all []wRegion
	for _, r := range e.opts.Regions {
		all = append(all, e.regionJSON(c, r))
	}
	slices.SortFunc(all, func(a, b wRegion) int { return strings.Compare(a.Name, b.Name) })
	writeList(e, w, c, "compute#regionList", "regions", all)
}

func (e *Emulator) getRegion(w http.ResponseWriter, c *call) {
	for _, r := range e.opts.Regions {
		if r.Name == c.segs[3] {
			writeJSON(w, http.StatusOK, e.regionJSON(c, r))
			return
		}
	}
	writeAPIError(w, computeNotFound("projects/"+c.project.ID+"/regions/"+c.segs[3]))
}

func (e *Emulator) zoneJSON(c *call, z string) wZone {
	return wZone{Kind: "compute#zone", ID: numericID(z), CreationTimestamp: created, Name: z, Description: z, Status: "UP",
		Region: e.projectLink(c) + "/regions/" + e.regionOf(z), SelfLink: e.projectLink(c) + "/zones/" + z,
		AvailableCPUs: []string{"Intel Sapphire Rapids", "AMD Genoa"}}
}

func (e *Emulator) listZones(w http.ResponseWriter, c *call) {
	var all []wZone
	for _, r := range e.opts.Regions {
		for _, z := range r.Zones {
			all = append(all, e.zoneJSON(c, z))
		}
	}
	slices.SortFunc(all, func(a, b wZone) int { return strings.Compare(a.Name, b.Name) })
	writeList(e, w, c, "compute#zoneList", "zones", all)
}

func (e *Emulator) isZone(z string) bool { return e.regionOf(z) != "" && !e.isRegion(z) }

func (e *Emulator) getZone(w http.ResponseWriter, c *call) {
	if !e.isZone(c.segs[3]) {
		writeAPIError(w, computeNotFound("projects/"+c.project.ID+"/zones/"+c.segs[3]))
		return
	}
	writeJSON(w, http.StatusOK, e.zoneJSON(c, c.segs[3]))
}

func (e *Emulator) machineTypeJSON(c *call, zone string, m MachineType) wMachineType {
	w := wMachineType{Kind: "compute#machineType", ID: numericID(m.Name), CreationTimestamp: created, Name: m.Name,
		Description: fmt.Sprintf("%d vCPUs, %d GB RAM", m.CPUs, m.MemoryMB/1024), GuestCpus: m.CPUs, MemoryMb: m.MemoryMB,
		MaximumPersistentDisks: 128, MaximumPersistentDisksSizeGb: "263168", Zone: zone,
		SelfLink: e.projectLink(c) + "/zones/" + zone + "/machineTypes/" + m.Name, Architecture: "X86_64"}
	if m.GPU != nil {
		w.Accelerators = []wGuestAccel{{GuestAcceleratorType: m.GPU.Type, GuestAcceleratorCount: m.GPU.Count}}
	}
	return w
}

func (e *Emulator) getMachineType(w http.ResponseWriter, c *call) {
	zone, name := c.segs[3], c.segs[5]
	if !e.isZone(zone) {
		writeAPIError(w, computeNotFound("projects/"+c.project.ID+"/zones/"+zone))
		return
	}
	m, ok := e.machineType(zone, name)
	if !ok {
		writeAPIError(w, computeNotFound("projects/"+c.project.ID+"/zones/"+zone+"/machineTypes/"+name))
		return
	}
	writeJSON(w, http.StatusOK, e.machineTypeJSON(c, zone, m))
}

func (e *Emulator) listMachineTypes(w http.ResponseWriter, c *call) {
	zone := c.segs[3]
	if !e.isZone(zone) {
		writeAPIError(w, computeNotFound("projects/"+c.project.ID+"/zones/"+zone))
		return
	}
	var all []wMachineType
	for _, m := range e.opts.MachineTypes {
		if len(m.Zones) == 0 || slices.Contains(m.Zones, zone) {
			all = append(all, e.machineTypeJSON(c, zone, m))
		}
	}
	writeList(e, w, c, "compute#machineTypeList", "zones/"+zone+"/machineTypes", all)
}

func (e *Emulator) acceleratorJSON(c *call, zone string, a AcceleratorType) wAcceleratorType {
	return wAcceleratorType{Kind: "compute#acceleratorType", ID: numericID(a.Name), CreationTimestamp: created, Name: a.Name,
		Description: a.Description, SelfLink: e.projectLink(c) + "/zones/" + zone + "/acceleratorTypes/" + a.Name,
		Zone: e.projectLink(c) + "/zones/" + zone, MaximumCardsPerInstance: a.MaxCards}
}

func (e *Emulator) getAcceleratorType(w http.ResponseWriter, c *call) {
	zone, name := c.segs[3], c.segs[5]
	a, ok := e.acceleratorType(zone, name)
	if !ok {
		writeAPIError(w, computeNotFound("projects/"+c.project.ID+"/zones/"+zone+"/acceleratorTypes/"+name))
		return
	}
	writeJSON(w, http.StatusOK, e.acceleratorJSON(c, zone, a))
}

func (e *Emulator) listAcceleratorTypes(w http.ResponseWriter, c *call) {
	zone := c.segs[3]
	if !e.isZone(zone) {
		writeAPIError(w, computeNotFound("projects/"+c.project.ID+"/zones/"+zone))
		return
	}
	var all []wAcceleratorType
	for _, a := range e.opts.AcceleratorTypes {
		if slices.Contains(a.Zones, zone) {
			all = append(all, e.acceleratorJSON(c, zone, a))
		}
	}
	writeList(e, w, c, "compute#acceleratorTypeList", "zones/"+zone+"/acceleratorTypes", all)
}

type wIGM struct {
	Kind              string     `json:"kind"`
	ID                string     `json:"id"`
	CreationTimestamp string     `json:"creationTimestamp"`
	Name              string     `json:"name"`
	Zone              string     `json:"zone"`
	BaseInstanceName  string     `json:"baseInstanceName"`
	InstanceGroup     string     `json:"instanceGroup"`
	InstanceTemplate  string     `json:"instanceTemplate"`
	TargetSize        int        `json:"targetSize"`
	CurrentActions    wActions   `json:"currentActions"`
	Status            wIGMStatus `json:"status"`
	SelfLink          string     `json:"selfLink"`
	Fingerprint       string     `json:"fingerprint"`
}

type wActions struct {
	None     int `json:"none"`
	Creating int `json:"creating"`
	Deleting int `json:"deleting"`
}

type wIGMStatus struct {
	IsStable bool `json:"isStable"`
}

func (e *Emulator) getInstanceGroupManager(w http.ResponseWriter, c *call) {
	zone, name := c.segs[3], c.segs[5]
	e.mu.Lock()
	defer e.mu.Unlock()
	e.settle()
	m := e.migs[migKey(c.project.ID, zone, name)]
	if m == nil {
		writeAPIError(w, computeNotFound("projects/"+c.project.ID+"/zones/"+zone+"/instanceGroupManagers/"+name))
		return
	}
	base := strings.TrimSuffix(name, "-grp")
	writeJSON(w, http.StatusOK, wIGM{
		Kind: "compute#instanceGroupManager", ID: strconv.FormatUint(m.id, 10), CreationTimestamp: stamp(m.created),
		Name: name, Zone: e.projectLink(c) + "/zones/" + zone, BaseInstanceName: base,
		InstanceGroup:    e.projectLink(c) + "/zones/" + zone + "/instanceGroups/" + name,
		InstanceTemplate: e.projectLink(c) + "/global/instanceTemplates/" + base + "-" + hash8(name),
		TargetSize:       m.target,
		CurrentActions:   wActions{None: m.target - m.creating, Creating: m.creating, Deleting: m.deleting},
		Status:           wIGMStatus{IsStable: m.stable},
		SelfLink:         m.selfLink(),
		Fingerprint:      base64.StdEncoding.EncodeToString([]byte(hash8(fmt.Sprint(m.target, m.stable)))),
	})
}

// itemsOf keeps an empty page's items out of the answer.
func itemsOf[T any](items []T) any {
	if len(items) == 0 {
		return nil
	}
	return items
}
