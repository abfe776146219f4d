package gkeemu

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// zoneOp is a compute zone operation: what deleteInstances answers with.
type zoneOp struct {
	id      uint64
	name    string
	project *Project
	zone    string
	target  string // the group's selfLink
	opType  string
	user    string
	start   time.Time
	done    bool
	group   *mig // settled once the operation is done and anything is read
	applied bool
}

// settleZoneOps lets the groups whose deleteInstances finished read as
// stable. Called with mu held, from settle.
func (e *Emulator) settleZoneOps() {
	for _, op := range e.zoneOps {
		if op.done && !op.applied && op.group != nil {
			op.group.settle()
			op.applied = true
		}
	}
}

type wZoneOp struct {
	Kind          string `json:"kind"`
	ID            string `json:"id"`
	Name          string `json:"name"`
	Zone          string `json:"zone"`
	OperationType string `json:"operationType"`
	TargetLink    string `json:"targetLink"`
	TargetID      string `json:"targetId"`
	Status        string `json:"status"`
	User          string `json:"user,omitempty"`
	Progress      int    `json:"progress"`
	InsertTime    string `json:"insertTime"`
	StartTime     string `json:"startTime"`
	EndTime       string `json:"endTime,omitempty"`
	SelfLink      string `json:"selfLink"`
}

func (e *Emulator) zoneOpJSON(op *zoneOp, targetID string) wZoneOp {
	w := wZoneOp{Kind: "compute#operation", ID: strconv.FormatUint(op.id, 10), Name: op.name,
		Zone:          computeBase + "projects/" + op.project.ID + "/zones/" + op.zone,
		OperationType: op.opType, TargetLink: op.target, TargetID: targetID, Status: "RUNNING", User: op.user,
		InsertTime: stamp(op.start), StartTime: stamp(op.start),
		SelfLink: computeBase + "projects/" + op.project.ID + "/zones/" + op.zone + "/operations/" + op.name}
	if op.done {
		w.Status, w.Progress, w.EndTime = "DONE", 100, stamp(op.start)
	}
	return w
}

// reqDeleteInstances is InstanceGroupManagersDeleteInstancesRequest.
type reqDeleteInstances struct {
	Instances                      []string `json:"instances"`
	SkipInstancesOnValidationError bool     `json:"skipInstancesOnValidationError"`
}

// deleteInstances removes the named machines from a zonal group and lowers
// its target by as many, so the group does not make replacements.
func (e *Emulator) deleteInstances(w http.ResponseWriter, c *call) {
	zone, name := c.segs[3], c.segs[5]
	var req reqDeleteInstances
	if err := json.Unmarshal(c.body, &req); err != nil {
		writeAPIError(w, errf(http.StatusBadRequest, "", "parseError", "Parse Error"))
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.settle()
	m := e.migs[migKey(c.project.ID, zone, name)]
	if m == nil {
		writeAPIError(w, computeNotFound("projects/"+c.project.ID+"/zones/"+zone+"/instanceGroupManagers/"+name))
		return
	}
	if len(req.Instances) == 0 {
		writeAPIError(w, errf(http.StatusBadRequest, "", "required", "Required field 'instances' not specified"))
		return
	}
	var drop []string
	for _, u := range req.Instances {
		inst := instanceName(u, c.project.ID, zone)
		if inst == "" || !slices.Contains(m.instances, inst) {
			if req.SkipInstancesOnValidationError {
				continue
			}
			// [INF: the message as the API is usually quoted for an
			// instance outside the group]
			writeAPIError(w, errf(http.StatusBadRequest, "", "invalid",
				"The resource '%s' is not a member of the instance group manager '%s'.", u, m.selfLink()))
			return
		}
		if !slices.Contains(drop, inst) {
			drop = append(drop, inst)
		}
	}
	m.instances = slices.DeleteFunc(m.instances, func(s string) bool { return slices.Contains(drop, s) })
	m.deleting += len(drop)
	m.target -= len(drop)
	m.stable = len(drop) == 0 && m.creating == 0
	e.seq++
	op := &zoneOp{id: uint64(2e12) + uint64(e.seq), name: "operation-" + strconv.FormatInt(e.now().UnixMilli(), 10) + "-" + hash8(m.name+strconv.Itoa(e.seq)),
		project: c.project, zone: zone, target: m.selfLink(), opType: "compute.instanceGroupManagers.deleteInstances",
		user: c.identity, start: e.now(), group: m}
	e.zoneOps[migKey(c.project.ID, zone, op.name)] = op
	writeJSON(w, http.StatusOK, e.zoneOpJSON(op, strconv.FormatUint(m.id, 10)))
	// The machines are gone when the operation is next read.
	op.done = true
}

// instanceName is the instance a URL or partial URL names in the project's
// zone, or "" when it names another place.
func instanceName(u, project, zone string) string {
	// A full URL names the endpoint the client was given; what counts is
	// the path after compute/v1/.
	if i := strings.Index(u, "/compute/v1/"); i >= 0 && strings.Contains(u[:i], "://") {
		u = u[i+len("/compute/v1/"):]
	}
	parts := strings.Split(u, "/")
	if len(parts) == 6 && parts[0] == "projects" && parts[1] == project && parts[2] == "zones" && parts[3] == zone && parts[4] == "instances" && parts[5] != "" {
		return parts[5]
	}
	if len(parts) == 4 && parts[0] == "zones" && parts[1] == zone && parts[2] == "instances" && parts[3] != "" {
		return parts[3]
	}
	return ""
}

func (e *Emulator) getZoneOperation(w http.ResponseWriter, c *call) {
	zone, name := c.segs[3], c.segs[5]
	e.mu.Lock()
	defer e.mu.Unlock()
	e.settle()
	op := e.zoneOps[migKey(c.project.ID, zone, name)]
	if op == nil {
		writeAPIError(w, computeNotFound("projects/"+c.project.ID+"/zones/"+zone+"/operations/"+name))
		return
	}
	var target string
	if op.group != nil {
		target = strconv.FormatUint(op.group.id, 10)
	}
	writeJSON(w, http.StatusOK, e.zoneOpJSON(op, target))
}

// NodeProviderIDs are the providerIDs Kubernetes gives a node pool's
// machines (gce://project/zone/instance), oldest first: the first machine of
// each zone in the pool's zone order, then the second of each, and so on,
// so the last of them are the newest one per zone.
func (e *Emulator) NodeProviderIDs(project, location, cluster, pool string) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	cl := e.clusters[clusterKey(project, location, cluster)]
	if cl == nil {
		return nil
	}
	var groups []*mig
	for _, p := range cl.pools {
		if p.name != pool {
			continue
		}
		for _, k := range p.migs {
			if m := e.migs[k]; m != nil {
				groups = append(groups, m)
			}
		}
	}
	var out []string
	for i := 0; ; i++ {
		more := false
		for _, m := range groups {
			if i < len(m.instances) {
				out = append(out, "gce://"+m.project.ID+"/"+m.zone+"/"+m.instances[i])
				more = true
			}
		}
		if !more {
			return out
		}
	}
}

type wManagedInstance struct {
	Instance       string `json:"instance"`
	ID             string `json:"id"`
	InstanceStatus string `json:"instanceStatus"`
	CurrentAction  string `json:"currentAction"`
}

// listManagedInstances answers a group's machines in one page.
func (e *Emulator) listManagedInstances(w http.ResponseWriter, c *call) {
	zone, name := c.segs[3], c.segs[5]
	e.mu.Lock()
	defer e.mu.Unlock()
	e.settle()
	m := e.migs[migKey(c.project.ID, zone, name)]
	if m == nil {
		writeAPIError(w, computeNotFound("projects/"+c.project.ID+"/zones/"+zone+"/instanceGroupManagers/"+name))
		return
	}
	var out []wManagedInstance
	for _, inst := range m.instances {
		out = append(out, wManagedInstance{Instance: m.instanceLink(inst), ID: numericID(inst), InstanceStatus: "RUNNING", CurrentAction: "NONE"})
	}
	writeJSON(w, http.StatusOK, map[string]any{"managedInstances": itemsOf(out)})
}
