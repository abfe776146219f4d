package eksemu

import (
	"encoding/base64"
	"encoding/xml"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The EC2 Auto Scaling groups behind EKS's managed node groups, as the
// Auto Scaling API (awsQuery, version 2011-01-01) shows them.
//
// EKS makes one Auto Scaling group per managed node group and tags it with
// eks:cluster-name and eks:nodegroup-name (and the cluster autoscaler's
// discovery tags). The emulator holds no group of its own: each is a view
// of its node group, so a node group resized through EKS shows its new
// size in its group, and a group resized directly (UpdateAutoScalingGroup,
// as the cluster autoscaler or the console's Auto Scaling page does) shows
// in the node group, as EKS reads the group back.
//
// Guess: the group exists for as long as its node group does (from
// CreateNodegroup until its delete is done), and holds as many instances
// as the group's desired capacity, InService once the node group is
// ACTIVE. The group's launch template is not modelled.

const (
	asgVersion = "2011-01-01"
	asgXMLNS   = "http://autoscaling.amazonaws.com/doc/2011-01-01/"
)

var asgParams = map[string][]*regexp.Regexp{
	"DescribeAutoScalingGroups": params(`Action`, `Version`, `AutoScalingGroupNames\.member\.\d+`, `IncludeInstances`,
		`MaxRecords`, `NextToken`, `Filters\.member\.\d+\.Name`, `Filters\.member\.\d+\.Values\.member\.\d+`),
	"TerminateInstanceInAutoScalingGroup": params(`Action`, `Version`, `InstanceId`, `ShouldDecrementDesiredCapacity`),
}

func (x *exchange) asgError(status int, code, msg string) {
	x.rec.Status = status
	x.w.Header().Set("Content-Type", "text/xml")
	x.w.WriteHeader(status)
	kind := "Sender"
	if status >= 500 {
		kind = "Receiver"
	}
	out := struct {
		XMLName xml.Name `xml:"ErrorResponse"`
		NS      string   `xml:"xmlns,attr"`
		Error   struct {
			Type    string `xml:"Type"`
			Code    string `xml:"Code"`
			Message string `xml:"Message"`
		} `xml:"Error"`
		RequestID string `xml:"RequestId"`
	}{NS: asgXMLNS, RequestID: x.rid}
	out.Error.Type, out.Error.Code, out.Error.Message = kind, code, msg
	_, _ = x.w.Write([]byte(xml.Header))
	_ = xml.NewEncoder(x.w).Encode(out)
}

func (x *exchange) autoscaling(action string, form url.Values) {
	allowed, ok := asgParams[action]
	if !ok {
		x.rec.Service, x.rec.Op = "autoscaling", action
		x.asgError(http.StatusBadRequest, "InvalidAction", fmt.Sprintf("Could not find operation %s for version %s", action, asgVersion))
		return
	}
	if !x.begin(action, x.asgError) {
		return
	}
	for k := range form {
		if !slices.ContainsFunc(allowed, func(r *regexp.Regexp) bool { return r.MatchString(k) }) {
			// Guess: Auto Scaling is taken to refuse parameters it does not
			// know, as STS does here.
			x.asgError(http.StatusBadRequest, "ValidationError", fmt.Sprintf("The parameter %s is not recognized", k))
			return
		}
	}
	if action == "TerminateInstanceInAutoScalingGroup" {
		x.terminateInstance(form)
		return
	}
	if x.dropOrFail(x.asgError) {
		return
	}
	x.describeASGs(form)
}

// asgFilter is one Filters.member.N: a group matches when any value does.
type asgFilter struct {
	name   string
	values []string
}

func asgFilters(form url.Values) ([]asgFilter, string) {
	var out []asgFilter
	for i := 1; ; i++ {
		name, ok := form[fmt.Sprintf("Filters.member.%d.Name", i)]
		if !ok {
			return out, ""
		}
		f := asgFilter{name: name[0], values: listed(form, fmt.Sprintf("Filters.member.%d.Values.member", i))}
		switch {
		case f.name == "tag-key" || f.name == "tag-value" || strings.HasPrefix(f.name, "tag:") && len(f.name) > len("tag:"):
		default:
			return nil, fmt.Sprintf("Filter name %s is not valid. Valid filter names are tag-key, tag-value and tag:<key>.", f.name)
		}
		if len(f.values) == 0 {
			return nil, fmt.Sprintf("The filter %s has no values", f.name)
		}
		out = append(out, f)
	}
}

func (f asgFilter) match(tags map[string]string) bool {
	for _, v := range f.values {
		switch {
		case f.name == "tag-key":
			if _, ok := tags[v]; ok {
				return true
			}
		case f.name == "tag-value":
			for _, tv := range tags {
				if tv == v {
					return true
				}
			}
		default:
			if tv, ok := tags[strings.TrimPrefix(f.name, "tag:")]; ok && tv == v {
				return true
			}
		}
	}
	return false
}

// asgView is the Auto Scaling group of a node group.
type asgView struct {
	c  *cluster
	ng *nodegroup
}

func (v asgView) tags() map[string]string {
	return map[string]string{
		"eks:cluster-name":                      v.c.name,
		"eks:nodegroup-name":                    v.ng.name,
		"k8s.io/cluster-autoscaler/enabled":     "true",
		"k8s.io/cluster-autoscaler/" + v.c.name: "owned",
		"kubernetes.io/cluster/" + v.c.name:     "owned",
	}
}

// groups lists every node group's Auto Scaling group, by name. Called with
// mu held; it settles what is due on the clock, as an observation of none.
func (e *Emulator) groups() []asgView {
	var out []asgView
	for _, cn := range sortedKeys(e.clusters) {
		c := e.clusters[cn]
		if !e.settle(c) {
			continue
		}
		for _, n := range sortedKeys(c.nodegroups) {
			out = append(out, asgView{c, c.nodegroups[n]})
		}
	}
	slices.SortFunc(out, func(a, b asgView) int { return strings.Compare(a.ng.asg, b.ng.asg) })
	return out
}

type asgTagXML struct {
	ResourceID        string `xml:"ResourceId"`
	ResourceType      string `xml:"ResourceType"`
	Key               string `xml:"Key"`
	Value             string `xml:"Value"`
	PropagateAtLaunch bool   `xml:"PropagateAtLaunch"`
}

type asgInstanceXML struct {
	InstanceID           string `xml:"InstanceId"`
	InstanceType         string `xml:"InstanceType"`
	AvailabilityZone     string `xml:"AvailabilityZone"`
	LifecycleState       string `xml:"LifecycleState"`
	HealthStatus         string `xml:"HealthStatus"`
	ProtectedFromScaleIn bool   `xml:"ProtectedFromScaleIn"`
}

type asgXML struct {
	Name              string           `xml:"AutoScalingGroupName"`
	ARN               string           `xml:"AutoScalingGroupARN"`
	MinSize           int              `xml:"MinSize"`
	MaxSize           int              `xml:"MaxSize"`
	DesiredCapacity   int              `xml:"DesiredCapacity"`
	DefaultCooldown   int              `xml:"DefaultCooldown"`
	AvailabilityZones []string         `xml:"AvailabilityZones>member"`
	HealthCheckType   string           `xml:"HealthCheckType"`
	HealthCheckGrace  int              `xml:"HealthCheckGracePeriod"`
	Instances         []asgInstanceXML `xml:"Instances>member"`
	CreatedTime       string           `xml:"CreatedTime"`
	VPCZoneIdentifier string           `xml:"VPCZoneIdentifier"`
	Tags              []asgTagXML      `xml:"Tags>member"`
	Status            string           `xml:"Status,omitempty"`
}

func (e *Emulator) asgXML(v asgView, instances bool) asgXML {
	ng := v.ng
	zones := e.zonesOf(ng)
	out := asgXML{
		Name: ng.asg, ARN: fmt.Sprintf("arn:aws:autoscaling:%s:%s:autoScalingGroup:%s:autoScalingGroupName/%s", e.opts.Region, e.opts.AccountID, uuidOf("asg:"+ng.arn), ng.asg),
		MinSize: ng.min, MaxSize: ng.max, DesiredCapacity: ng.desire, DefaultCooldown: 300, AvailabilityZones: zones,
		HealthCheckType: "EC2", HealthCheckGrace: 15, CreatedTime: ng.createdAt.UTC().Format(time.RFC3339),
		VPCZoneIdentifier: strings.Join(ng.subnets, ","),
	}
	if ng.status == "DELETING" {
		out.Status = "Delete in progress"
	}
	tags := v.tags()
	for _, k := range sortedKeys(tags) {
		out.Tags = append(out.Tags, asgTagXML{ResourceID: ng.asg, ResourceType: "auto-scaling-group", Key: k, Value: tags[k], PropagateAtLaunch: true})
	}
	if !instances {
		return out
	}
	state := "InService"
	switch ng.status {
	case "CREATING":
		state = "Pending"
	case "DELETING":
		state = "Terminating"
	}
	typ := ""
	if len(ng.instanceTypes) > 0 {
		typ = ng.instanceTypes[0]
	}
	for _, in := range groupInstances(ng, zones) {
		out.Instances = append(out.Instances, asgInstanceXML{InstanceID: in.id, InstanceType: typ, AvailabilityZone: in.zone,
			LifecycleState: state, HealthStatus: "Healthy"})
	}
	return out
}

func (x *exchange) describeASGs(form url.Values) {
	e := x.e
	filters, bad := asgFilters(form)
	if bad != "" {
		x.asgError(http.StatusBadRequest, "ValidationError", bad)
		return
	}
	names := listed(form, "AutoScalingGroupNames.member")
	size := 50
	if m := form.Get("MaxRecords"); m != "" {
		n, err := strconv.Atoi(m)
		if err != nil || n < 1 || n > 100 {
			x.asgError(http.StatusBadRequest, "ValidationError", fmt.Sprintf("1 validation error detected: Value '%s' at 'maxRecords' failed to satisfy constraint: Member must have value less than or equal to 100", m))
			return
		}
		size = n
	}
	var match []asgView
	for _, v := range e.groups() {
		if len(names) > 0 && !slices.Contains(names, v.ng.asg) {
			continue
		}
		tags := v.tags()
		if slices.ContainsFunc(filters, func(f asgFilter) bool { return !f.match(tags) }) {
			continue
		}
		match = append(match, v)
	}
	start := 0
	if tok := form.Get("NextToken"); tok != "" {
		b, err := base64.RawURLEncoding.DecodeString(tok)
		n, err2 := strconv.Atoi(strings.TrimPrefix(string(b), "asg:"))
		if err != nil || err2 != nil || !strings.HasPrefix(string(b), "asg:") || n < 0 || n > len(match) {
			x.asgError(http.StatusBadRequest, "InvalidNextToken", "The token '"+tok+"' is invalid.")
			return
		}
		start = n
	}
	end := min(start+size, len(match))
	next := ""
	if end < len(match) {
		next = base64.RawURLEncoding.EncodeToString([]byte("asg:" + strconv.Itoa(end)))
	}
	instances := form.Get("IncludeInstances") != "false"
	type result struct {
		Groups    []asgXML `xml:"AutoScalingGroups>member"`
		NextToken string   `xml:"NextToken,omitempty"`
	}
	out := struct {
		XMLName   xml.Name `xml:"DescribeAutoScalingGroupsResponse"`
		NS        string   `xml:"xmlns,attr"`
		Result    result   `xml:"DescribeAutoScalingGroupsResult"`
		RequestID string   `xml:"ResponseMetadata>RequestId"`
	}{NS: asgXMLNS, RequestID: x.rid, Result: result{NextToken: next, Groups: []asgXML{}}}
	for _, v := range match[start:end] {
		out.Result.Groups = append(out.Result.Groups, e.asgXML(v, instances))
	}
	x.writeXML(out)
}

// UpdateAutoScalingGroup sets the bounds and desired capacity of a node
// group's Auto Scaling group directly, beside EKS, as the console's Auto
// Scaling page or the cluster autoscaler does (UpdateAutoScalingGroup,
// SetDesiredCapacity). EKS reads the group's size back into its node group.
// A desired capacity outside the bounds is refused, as Auto Scaling
// refuses it.
func (e *Emulator) UpdateAutoScalingGroup(cluster, nodegroup string, minSize, maxSize, desired int) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.clusters[cluster]
	if c == nil || !e.settle(c) || c.nodegroups[nodegroup] == nil {
		return fmt.Errorf("eksemu: no node group %s/%s", cluster, nodegroup)
	}
	ng := c.nodegroups[nodegroup]
	if minSize < 0 || minSize > maxSize || desired < minSize || desired > maxSize {
		return fmt.Errorf("eksemu: ValidationError: Desired capacity:%d must be between the specified min size:%d and max size:%d", desired, minSize, maxSize)
	}
	ng.min, ng.max, ng.desire = minSize, maxSize, desired
	return nil
}

// instance is one EC2 instance of a node group's Auto Scaling group.
type instance struct {
	index    int
	id, zone string
}

// groupInstances are the group's instances: as many as its desired
// capacity, the lowest indices not terminated, each in the zone its index
// picks. Guess: a scale-in by a lower desired capacity takes the newest
// instances (AWS's default policy weighs zones and launch templates first,
// which the emulator does not model).
func groupInstances(ng *nodegroup, zones []string) []instance {
	var out []instance
	for i := 0; len(out) < ng.desire; i++ {
		if ng.terminated[i] {
			continue
		}
		zone := ""
		if len(zones) > 0 {
			zone = zones[i%len(zones)]
		}
		id := "i-" + strings.ReplaceAll(uuidOf(fmt.Sprintf("instance:%s:%d", ng.asg, i)), "-", "")[:17]
		out = append(out, instance{index: i, id: id, zone: zone})
	}
	return out
}

// zonesOf are the sorted zones of a node group's subnets.
func (e *Emulator) zonesOf(ng *nodegroup) []string {
	var zones []string
	for _, id := range ng.subnets {
		for _, sn := range e.opts.Subnets {
			if sn.ID == id && !slices.Contains(zones, sn.Zone) {
				zones = append(zones, sn.Zone)
			}
		}
	}
	slices.Sort(zones)
	return zones
}

// NodeProviderIDs are the spec.providerID of the Kubernetes Nodes of a node
// group's instances (`aws:///<zone>/<instance id>`), as the kubelet's AWS
// cloud provider writes them.
func (e *Emulator) NodeProviderIDs(cluster, nodegroup string) ([]string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.clusters[cluster]
	if c == nil || !e.settle(c) || c.nodegroups[nodegroup] == nil {
		return nil, fmt.Errorf("eksemu: no node group %s/%s", cluster, nodegroup)
	}
	ng := c.nodegroups[nodegroup]
	var out []string
	for _, in := range groupInstances(ng, e.zonesOf(ng)) {
		out = append(out, "aws:///"+in.zone+"/"+in.id)
	}
	return out, nil
}

// terminateInstance is TerminateInstanceInAutoScalingGroup, called with mu
// held as every exchange is. It is in its
// one-instance form: the instance leaves its group at once and, with
// ShouldDecrementDesiredCapacity, the group's desired capacity (and so its
// node group's desiredSize) drops by one; without it the group launches a
// replacement. AWS's refusals: both parameters are required; an instance of
// no group is "Instance Id not found"; a decrement below the group's
// minimum is refused, naming the minimum.
//
// Guess: the instance is gone from the group when the call answers (AWS
// shows it Terminating until EC2 has stopped it); the activity answered is
// InProgress, as AWS answers it.
func (x *exchange) terminateInstance(form url.Values) {
	e := x.e
	id := form.Get("InstanceId")
	dec := form.Get("ShouldDecrementDesiredCapacity")
	switch {
	case !form.Has("ShouldDecrementDesiredCapacity"):
		x.asgError(http.StatusBadRequest, "ValidationError", "1 validation error detected: Value null at 'shouldDecrementDesiredCapacity' failed to satisfy constraint: Member must not be null")
		return
	case dec != "true" && dec != "false":
		x.asgError(http.StatusBadRequest, "ValidationError", fmt.Sprintf("1 validation error detected: Value '%s' at 'shouldDecrementDesiredCapacity' failed to satisfy constraint: Member must be a boolean", dec))
		return
	case id == "":
		x.asgError(http.StatusBadRequest, "ValidationError", "Either InstanceId or InstanceIds must be specified")
		return
	case len(id) > 19:
		x.asgError(http.StatusBadRequest, "ValidationError", fmt.Sprintf("1 validation error detected: Value '%s' at 'instanceId' failed to satisfy constraint: Member must have length less than or equal to 19", id))
		return
	}
	var (
		found *asgView
		idx   int
	)
	for _, v := range e.groups() {
		if v.ng.status == "DELETING" {
			continue
		}
		for _, in := range groupInstances(v.ng, e.zonesOf(v.ng)) {
			if in.id == id {
				found, idx = &v, in.index
			}
		}
	}
	if found == nil {
		x.asgError(http.StatusBadRequest, "ValidationError", "Instance Id not found - No managed instance found for instance ID: "+id)
		return
	}
	ng := found.ng
	if dec == "true" && ng.desire <= ng.min {
		x.asgError(http.StatusBadRequest, "ValidationError", fmt.Sprintf("Currently, desiredSize equals minSize (%d). Terminating instance without replacement will violate group's min size constraint. Either set shouldDecrementDesiredCapacity flag to false or lower group's min size.", ng.min))
		return
	}
	from := ng.desire
	if ng.terminated == nil {
		ng.terminated = map[int]bool{}
	}
	ng.terminated[idx] = true
	cause := fmt.Sprintf("At %s instance %s was taken out of service in response to a user request.", e.now().UTC().Format(time.RFC3339), id)
	if dec == "true" {
		ng.desire--
		cause = fmt.Sprintf("At %s instance %s was taken out of service in response to a user request, shrinking the capacity from %d to %d.", e.now().UTC().Format(time.RFC3339), id, from, ng.desire)
	}
	ng.modifiedAt = e.now()
	act := asgActivityXML{
		ActivityID: uuidOf(fmt.Sprintf("activity:%s:%s:%d", ng.asg, id, e.now().UnixNano())), GroupName: ng.asg,
		Description: "Terminating EC2 instance: " + id, Cause: cause, StartTime: e.now().UTC().Format(time.RFC3339),
		StatusCode: "InProgress", Progress: 0,
	}
	if len(ng.subnets) > 0 {
		act.Details = `{"Subnet ID":"` + ng.subnets[idx%len(ng.subnets)] + `"}`
	}
	if x.dropOrFail(x.asgError) {
		return
	}
	out := struct {
		XMLName   xml.Name       `xml:"TerminateInstanceInAutoScalingGroupResponse"`
		NS        string         `xml:"xmlns,attr"`
		Activity  asgActivityXML `xml:"TerminateInstanceInAutoScalingGroupResult>Activity"`
		RequestID string         `xml:"ResponseMetadata>RequestId"`
	}{NS: asgXMLNS, Activity: act, RequestID: x.rid}
	x.writeXML(out)
}

type asgActivityXML struct {
	ActivityID  string `xml:"ActivityId"`
	GroupName   string `xml:"AutoScalingGroupName"`
	Description string `xml:"Description"`
	Cause       string `xml:"Cause"`
	StartTime   string `xml:"StartTime"`
	StatusCode  string `xml:"StatusCode"`
	Progress    int    `xml:"Progress"`
	Details     string `xml:"Details"`
}
