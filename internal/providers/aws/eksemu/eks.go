package eksemu

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// cluster is an EKS cluster as the emulator keeps it.
type cluster struct {
	name, arn       string
	createdAt       time.Time
	version         string
	platformVersion string
	status          string
	roleArn         string
	vpc             vpcConfig
	authMode        string
	bootstrapAdmin  bool
	tags            map[string]string
	token, reqHash  string
	raw             map[string]json.RawMessage
	deletionProtect bool
	creator         string
	// failure, when set, ends the cluster's create FAILED with it as its
	// health issue; issues are the health issues it has.
	failure    *ClusterIssue
	issues     []ClusterIssue
	op         *operation
	nodegroups map[string]*nodegroup
	entries    map[string]*accessEntry
	updates    map[string]*update
}

type vpcConfig struct {
	SubnetIDs             []string `json:"subnetIds"`
	SecurityGroupIDs      []string `json:"securityGroupIds"`
	EndpointPublicAccess  *bool    `json:"endpointPublicAccess"`
	EndpointPrivateAccess *bool    `json:"endpointPrivateAccess"`
	PublicAccessCidrs     []string `json:"publicAccessCidrs"`
	// ControlPlaneEgressMode is echoed, not emulated.
	ControlPlaneEgressMode string `json:"controlPlaneEgressMode,omitempty"`
}

// operation is an asynchronous change in progress.
type operation struct {
	kind     string // create, update, delete
	steps    int
	observed int
	began    time.Time
	target   string // the version of a cluster or node group update
	release  string // the release version of a node group update
	update   *update
	// scaleOut is set on a node group update that raises desiredSize.
	scaleOut bool
}

type update struct {
	id, typ, status string
	params          []updateParam
	createdAt       time.Time
	errors          []map[string]any
	token, reqHash  string
	nodegroup       string
}

type updateParam struct {
	Type  string `json:"type"`
	Value string `json:"value"`
}

type scaling struct {
	MinSize     *int `json:"minSize"`
	MaxSize     *int `json:"maxSize"`
	DesiredSize *int `json:"desiredSize"`
}

type taint struct {
	Key    string `json:"key"`
	Value  string `json:"value,omitempty"`
	Effect string `json:"effect"`
}

type nodegroup struct {
	name, arn        string
	createdAt        time.Time
	modifiedAt       time.Time
	status           string
	instanceTypes    []string
	amiType          string
	capacityType     string
	diskSize         *int
	subnets          []string
	nodeRole         string
	min, max, desire int
	labels           map[string]string
	taints           []taint
	tags             map[string]string
	version          string
	releaseVersion   string
	raw              map[string]json.RawMessage
	asg              string
	// terminated are the indices of the group's instances taken out by
	// TerminateInstanceInAutoScalingGroup; an index is never reused.
	terminated     map[int]bool
	issues         []map[string]any
	token, reqHash string
	op             *operation
}

type accessEntry struct {
	principal, arn, typ, username string
	groups                        []string
	tags                          map[string]string
	createdAt, modifiedAt         time.Time
	policies                      map[string]*association
}

type association struct {
	policyArn             string
	scope                 accessScope
	associatedAt, modTime time.Time
}

type accessScope struct {
	Type       string   `json:"type"`
	Namespaces []string `json:"namespaces,omitempty"`
}

// ClusterAdminPolicy is the access policy that makes a principal admin.
const ClusterAdminPolicy = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"

var accessPolicies = []string{
	ClusterAdminPolicy,
	"arn:aws:eks::aws:cluster-access-policy/AmazonEKSAdminPolicy",
	"arn:aws:eks::aws:cluster-access-policy/AmazonEKSEditPolicy",
	"arn:aws:eks::aws:cluster-access-policy/AmazonEKSViewPolicy",
}

// --- answers ---

// eksError answers in EKS's restJson1 error shape. extra adds the fields
// the error carries (clusterName, nodegroupName, validZones).
func (x *exchange) eksError(status int, code, msg string, extra map[string]any) {
	x.rec.Status = status
	h := x.w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Amzn-Requestid", x.rid)
	h.Set("X-Amzn-Errortype", code)
	x.w.WriteHeader(status)
	body := map[string]any{"__type": code, "message": msg}
	for k, v := range extra {
		body[k] = v
	}
	_ = json.NewEncoder(x.w).Encode(body)
}

func (x *exchange) eksFail(status int, code, msg string) { x.eksError(status, code, msg, nil) }

func (x *exchange) eksOK(v any) {
	x.rec.Status = http.StatusOK
	h := x.w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Amzn-Requestid", x.rid)
	x.w.WriteHeader(http.StatusOK)
	if v != nil {
		_ = json.NewEncoder(x.w).Encode(v)
	}
}

func (x *exchange) invalid(msg string, extra map[string]any) {
	x.eksError(http.StatusBadRequest, "InvalidParameterException", msg, extra)
}

// --- routing ---

type route struct {
	op   string
	args []string
}

// eksRoute names the operation of a request from its method and path
// segments, unescaped one at a time (principal ARNs carry %2F).
func eksRoute(method string, segs []string) route {
	n := len(segs)
	at := func(i int, s string) bool { return i < n && segs[i] == s }
	switch {
	case n == 2 && at(0, "tags"):
		switch method {
		case http.MethodPost:
			return route{"TagResource", segs[1:]}
		case http.MethodGet:
			return route{"ListTagsForResource", segs[1:]}
		case http.MethodDelete:
			return route{"UntagResource", segs[1:]}
		}
	case n == 2 && at(0, "addons") && at(1, "supported-versions") && method == http.MethodGet:
		return route{"DescribeAddonVersions", nil}
	case n == 1 && at(0, "cluster-versions") && method == http.MethodGet:
		return route{"DescribeClusterVersions", nil}
	case n == 3 && at(0, "clusters") && at(2, "addons") && method == http.MethodGet:
		return route{"ListAddons", segs[1:2]}
	case n == 1 && at(0, "clusters"):
		switch method {
		case http.MethodPost:
			return route{"CreateCluster", nil}
		case http.MethodGet:
			return route{"ListClusters", nil}
		}
	case n == 2 && at(0, "clusters"):
		switch method {
		case http.MethodGet:
			return route{"DescribeCluster", segs[1:]}
		case http.MethodDelete:
			return route{"DeleteCluster", segs[1:]}
		}
	case n == 3 && at(0, "clusters") && at(2, "updates"):
		switch method {
		case http.MethodPost:
			return route{"UpdateClusterVersion", segs[1:2]}
		case http.MethodGet:
			return route{"ListUpdates", segs[1:2]}
		}
	case n == 4 && at(0, "clusters") && at(2, "updates") && method == http.MethodGet:
		return route{"DescribeUpdate", []string{segs[1], segs[3]}}
	case n == 3 && at(0, "clusters") && at(2, "node-groups"):
		switch method {
		case http.MethodPost:
			return route{"CreateNodegroup", segs[1:2]}
		case http.MethodGet:
			return route{"ListNodegroups", segs[1:2]}
		}
	case n == 4 && at(0, "clusters") && at(2, "node-groups"):
		switch method {
		case http.MethodGet:
			return route{"DescribeNodegroup", []string{segs[1], segs[3]}}
		case http.MethodDelete:
			return route{"DeleteNodegroup", []string{segs[1], segs[3]}}
		}
	case n == 5 && at(0, "clusters") && at(2, "node-groups") && at(4, "update-config") && method == http.MethodPost:
		return route{"UpdateNodegroupConfig", []string{segs[1], segs[3]}}
	case n == 5 && at(0, "clusters") && at(2, "node-groups") && at(4, "update-version") && method == http.MethodPost:
		return route{"UpdateNodegroupVersion", []string{segs[1], segs[3]}}
	case n == 3 && at(0, "clusters") && at(2, "access-entries"):
		switch method {
		case http.MethodPost:
			return route{"CreateAccessEntry", segs[1:2]}
		case http.MethodGet:
			return route{"ListAccessEntries", segs[1:2]}
		}
	case n == 4 && at(0, "clusters") && at(2, "access-entries"):
		switch method {
		case http.MethodGet:
			return route{"DescribeAccessEntry", []string{segs[1], segs[3]}}
		case http.MethodDelete:
			return route{"DeleteAccessEntry", []string{segs[1], segs[3]}}
		}
	case n == 5 && at(0, "clusters") && at(2, "access-entries") && at(4, "access-policies"):
		switch method {
		case http.MethodPost:
			return route{"AssociateAccessPolicy", []string{segs[1], segs[3]}}
		case http.MethodGet:
			return route{"ListAssociatedAccessPolicies", []string{segs[1], segs[3]}}
		}
	case n == 6 && at(0, "clusters") && at(2, "access-entries") && at(4, "access-policies") && method == http.MethodDelete:
		return route{"DisassociateAccessPolicy", []string{segs[1], segs[3], segs[5]}}
	}
	return route{}
}

func (x *exchange) eks() {
	var segs []string
	for _, s := range strings.Split(strings.Trim(x.r.URL.EscapedPath(), "/"), "/") {
		u, err := url.PathUnescape(s)
		if err != nil {
			u = s
		}
		segs = append(segs, u)
	}
	rt := eksRoute(x.r.Method, segs)
	if rt.op == "" {
		x.rec.Service = "eks"
		x.eksFail(http.StatusNotFound, "UnknownOperationException", "eksemu does not know "+x.r.Method+" "+x.r.URL.EscapedPath())
		return
	}
	if !x.begin(rt.op, x.eksFail) {
		return
	}
	handlers := map[string]func([]string){
		"CreateCluster": x.createCluster, "ListClusters": x.listClusters,
		"DescribeCluster": x.describeCluster, "DeleteCluster": x.deleteCluster,
		"UpdateClusterVersion": x.updateClusterVersion, "ListUpdates": x.listUpdates, "DescribeUpdate": x.describeUpdate,
		"CreateNodegroup": x.createNodegroup, "ListNodegroups": x.listNodegroups,
		"DescribeNodegroup": x.describeNodegroup, "DeleteNodegroup": x.deleteNodegroup,
		"UpdateNodegroupConfig": x.updateNodegroupConfig, "UpdateNodegroupVersion": x.updateNodegroupVersion,
		"CreateAccessEntry": x.createAccessEntry, "ListAccessEntries": x.listAccessEntries,
		"DescribeAccessEntry": x.describeAccessEntry, "DeleteAccessEntry": x.deleteAccessEntry,
		"AssociateAccessPolicy": x.associateAccessPolicy, "ListAssociatedAccessPolicies": x.listAssociatedPolicies,
		"DisassociateAccessPolicy": x.disassociateAccessPolicy,
		"ListAddons":               x.listAddons, "DescribeAddonVersions": x.describeAddonVersions,
		"TagResource": x.tagResource, "ListTagsForResource": x.listTags, "UntagResource": x.untagResource,
		"DescribeClusterVersions": x.describeClusterVersions,
	}
	handlers[rt.op](rt.args)
}

// decode reads a JSON body strictly: a key the emulator does not know is
// refused, so that a request shape it does not model shows instead of being
// silently dropped.
//
// Guess: real EKS's answer to an unknown member is not known; the emulator
// answers 400 SerializationException.
func (x *exchange) decode(v any) bool {
	if len(bytes.TrimSpace(x.body)) == 0 {
		return true
	}
	dec := json.NewDecoder(bytes.NewReader(x.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		x.eksFail(http.StatusBadRequest, "SerializationException", "eksemu: "+err.Error())
		return false
	}
	return true
}

// bodyHash is the hash of a request body without its clientRequestToken:
// what a repeated token is compared on.
func bodyHash(body []byte) string {
	var m map[string]any
	if json.Unmarshal(body, &m) != nil {
		m = map[string]any{}
	}
	delete(m, "clientRequestToken")
	b, _ := json.Marshal(m)
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// checkToken once refused tokens outside 33-126 characters, after one
// message quoted from the real service. botocore's EKS model, which the AWS
// CLI validates every parameter against and which AWS tests against the
// real service, has clientRequestToken as a plain string with no length
// rule, and the Go SDK's model agrees; the shipped clients win, so any
// string is taken. (The quoted message may come from one operation or one
// era of the service; neither client enforces it.)
func (x *exchange) checkToken(tok *string) bool {
	return true
}

// sameToken answers a request that repeats an earlier one's token: true
// with nothing written when the earlier request had the same body (the
// caller answers with the object), or an error when it had another.
//
// Guess: EKS does not document a repeated token. The emulator takes the
// generic AWS rule: same token and body is the same request; same token and
// another body is refused (400 InvalidParameterException).
func (x *exchange) sameToken(tok *string, prevToken, prevHash string) (same, answered bool) {
	if tok == nil || *tok == "" || *tok != prevToken {
		return false, false
	}
	if bodyHash(x.body) == prevHash {
		return true, false
	}
	x.invalid("The client request token "+*tok+" was already used with different parameters.", nil)
	return false, true
}

var (
	nameRE  = regexp.MustCompile(`^[0-9A-Za-z][A-Za-z0-9\-_]*$`)
	roleRE  = regexp.MustCompile(`^arn:aws[a-z-]*:iam::\d{12}:role/.+$`)
	minorRE = regexp.MustCompile(`^(\d+)\.(\d+)$`)
)

func checkTags(tags map[string]string) string {
	if len(tags) > 50 {
		return "Tags can have at most 50 entries"
	}
	for k, v := range tags {
		switch {
		case k == "" || len(k) > 128:
			return "Tag keys must be between 1 and 128 characters"
		case len(v) > 256:
			return "Tag values must be at most 256 characters"
		case strings.HasPrefix(strings.ToLower(k), "aws:"):
			return "Tag keys may not start with aws:"
		}
	}
	return ""
}

// --- clusters ---

func (e *Emulator) finished(op *operation) bool {
	n := op.observed
	if e.opts.StepEvery > 0 {
		n += int(e.now().Sub(op.began) / e.opts.StepEvery)
	}
	return n >= op.steps
}

func (e *Emulator) newOp(kind string, steps int) *operation {
	return &operation{kind: kind, steps: steps, began: e.now()}
}

// settle finishes what is due on a cluster and its node groups, and
// reports whether the cluster still exists. Called with mu held.
func (e *Emulator) settle(c *cluster) bool {
	if c.op != nil && e.finished(c.op) {
		switch c.op.kind {
		case "delete":
			delete(e.clusters, c.name)
			return false
		case "update":
			c.version = c.op.target
			c.op.update.status = "Successful"
		}
		c.status, c.op = "ACTIVE", nil
		if f := c.failure; f != nil {
			c.status, c.issues, c.failure = "FAILED", []ClusterIssue{*f}, nil
		}
	}
	for _, name := range sortedKeys(c.nodegroups) {
		e.settleNodegroup(c, c.nodegroups[name])
	}
	return true
}

func (e *Emulator) settleNodegroup(c *cluster, ng *nodegroup) bool {
	if ng.op == nil || !e.finished(ng.op) {
		return true
	}
	op := ng.op
	ng.op, ng.modifiedAt = nil, e.now()
	launch := func() bool {
		if ng.desire == 0 || !slices.ContainsFunc(ng.instanceTypes, func(t string) bool { return e.stockout[t] }) {
			return true
		}
		ng.issues = []map[string]any{{
			"code": "AsgInstanceLaunchFailures",
			"message": fmt.Sprintf("Could not launch %s Instances. InsufficientInstanceCapacity - We currently do not have sufficient %s capacity in the Availability Zone you requested. Launching EC2 instance failed.",
				capacityWord(ng.capacityType), strings.Join(ng.instanceTypes, ", ")),
			"resourceIds": []string{ng.asg},
		}}
		return false
	}
	switch op.kind {
	case "delete":
		delete(c.nodegroups, ng.name)
		return false
	case "create":
		if launch() {
			ng.status = "ACTIVE"
		} else {
			ng.status = "CREATE_FAILED"
		}
	case "update":
		op.update.status = "Successful"
		if op.target != "" {
			ng.version, ng.releaseVersion = op.target, op.release
		}
		switch {
		case !op.scaleOut:
			ng.status = "ACTIVE"
			if len(ng.issues) > 0 {
				// A group stays DEGRADED until a scale-out succeeds
				// (containers-roadmap#2326).
				ng.status = "DEGRADED"
			}
		case launch():
			ng.status, ng.issues = "ACTIVE", nil
		default:
			ng.status = "DEGRADED"
		}
	}
	return true
}

func capacityWord(ct string) string {
	if ct == "SPOT" {
		return "Spot"
	}
	return "On-Demand"
}

// find returns a settled cluster, or answers 404 and returns nil.
func (x *exchange) find(name string) *cluster {
	c := x.e.clusters[name]
	if c == nil || !x.e.settle(c) {
		x.eksError(http.StatusNotFound, "ResourceNotFoundException", "No cluster found for name: "+name+".", map[string]any{"clusterName": name})
		return nil
	}
	return c
}

type accessConfigIn struct {
	AuthenticationMode                      *string `json:"authenticationMode"`
	BootstrapClusterCreatorAdminPermissions *bool   `json:"bootstrapClusterCreatorAdminPermissions"`
}

type createClusterIn struct {
	Name                        string            `json:"name"`
	Version                     *string           `json:"version"`
	RoleArn                     string            `json:"roleArn"`
	ResourcesVpcConfig          *vpcConfig        `json:"resourcesVpcConfig"`
	ClientRequestToken          *string           `json:"clientRequestToken"`
	Tags                        map[string]string `json:"tags"`
	AccessConfig                *accessConfigIn   `json:"accessConfig"`
	BootstrapSelfManagedAddons  *bool             `json:"bootstrapSelfManagedAddons"`
	DeletionProtection          *bool             `json:"deletionProtection"`
	KubernetesNetworkConfig     json.RawMessage   `json:"kubernetesNetworkConfig"`
	Logging                     json.RawMessage   `json:"logging"`
	EncryptionConfig            json.RawMessage   `json:"encryptionConfig"`
	OutpostConfig               json.RawMessage   `json:"outpostConfig"`
	UpgradePolicy               json.RawMessage   `json:"upgradePolicy"`
	ZonalShiftConfig            json.RawMessage   `json:"zonalShiftConfig"`
	RemoteNetworkConfig         json.RawMessage   `json:"remoteNetworkConfig"`
	ComputeConfig               json.RawMessage   `json:"computeConfig"`
	StorageConfig               json.RawMessage   `json:"storageConfig"`
	ControlPlaneScalingConfig   json.RawMessage   `json:"controlPlaneScalingConfig"`
	KubeAPIServerConfig         json.RawMessage   `json:"kubeApiServerConfig"`
	KubeControllerManagerConfig json.RawMessage   `json:"kubeControllerManagerConfig"`
	KubeSchedulerConfig         json.RawMessage   `json:"kubeSchedulerConfig"`
}

func (x *exchange) subnet(id string) (Subnet, bool) {
	i := slices.IndexFunc(x.e.opts.Subnets, func(s Subnet) bool { return s.ID == id })
	if i < 0 {
		return Subnet{}, false
	}
	return x.e.opts.Subnets[i], true
}

func (x *exchange) createCluster(_ []string) {
	e := x.e
	var in createClusterIn
	if !x.decode(&in) || !x.checkToken(in.ClientRequestToken) {
		return
	}
	switch {
	case in.Name == "" || len(in.Name) > 100 || !nameRE.MatchString(in.Name):
		x.invalid(`The clusterName parameter contains invalid characters. It should conform to the regular expression "^[0-9A-Za-z][A-Za-z0-9-_]*" and be at most 100 characters.`, map[string]any{"clusterName": in.Name})
		return
	case !roleRE.MatchString(in.RoleArn):
		x.invalid("roleArn must be the ARN of an IAM role", map[string]any{"clusterName": in.Name})
		return
	case in.ResourcesVpcConfig == nil || len(in.ResourcesVpcConfig.SubnetIDs) == 0:
		x.invalid("Subnets are required", map[string]any{"clusterName": in.Name})
		return
	}
	if old := e.clusters[in.Name]; old != nil {
		same, answered := x.sameToken(in.ClientRequestToken, old.token, old.reqHash)
		switch {
		case answered:
		case same && e.settle(old):
			x.eksOK(map[string]any{"cluster": e.clusterJSON(old)})
		default:
			x.eksError(http.StatusConflict, "ResourceInUseException", "Cluster already exists with name: "+in.Name, map[string]any{"clusterName": in.Name})
		}
		return
	}
	version := e.opts.DefaultVersion
	if in.Version != nil {
		version = *in.Version
	}
	if !slices.Contains(e.opts.Versions, version) {
		x.invalid("unsupported Kubernetes version "+version, map[string]any{"clusterName": in.Name})
		return
	}
	zones, vpc := map[string]bool{}, ""
	for _, id := range in.ResourcesVpcConfig.SubnetIDs {
		s, ok := x.subnet(id)
		if !ok {
			x.invalid(fmt.Sprintf("The subnet ID '%s' does not exist (Service: AmazonEC2; Status Code: 400; Error Code: InvalidSubnetID.NotFound)", id), map[string]any{"clusterName": in.Name})
			return
		}
		if slices.Contains(e.opts.UnsupportedZones, s.Zone) {
			var valid []string
			for _, z := range e.zones() {
				if !slices.Contains(e.opts.UnsupportedZones, z) {
					valid = append(valid, z)
				}
			}
			x.eksError(http.StatusBadRequest, "UnsupportedAvailabilityZoneException",
				fmt.Sprintf("Cannot create cluster '%s' because EKS does not support creating control plane instances in %s, the targeted availability zone. Retry cluster creation using control plane subnets that span at least two of these availability zones: %s.", in.Name, s.Zone, strings.Join(valid, ", ")),
				map[string]any{"clusterName": in.Name, "validZones": valid})
			return
		}
		if vpc != "" && s.VpcID != vpc {
			x.invalid("Subnets must belong to the same VPC", map[string]any{"clusterName": in.Name})
			return
		}
		vpc = s.VpcID
		zones[s.Zone] = true
	}
	if len(zones) < 2 {
		x.invalid("Subnets specified must be in at least two different AZs", map[string]any{"clusterName": in.Name})
		return
	}
	if msg := checkTags(in.Tags); msg != "" {
		x.invalid(msg, map[string]any{"clusterName": in.Name})
		return
	}
	mode, bootstrap := "CONFIG_MAP", true
	if a := in.AccessConfig; a != nil {
		if a.AuthenticationMode != nil {
			mode = *a.AuthenticationMode
		}
		if a.BootstrapClusterCreatorAdminPermissions != nil {
			bootstrap = *a.BootstrapClusterCreatorAdminPermissions
		}
	}
	if !slices.Contains([]string{"API", "API_AND_CONFIG_MAP", "CONFIG_MAP"}, mode) {
		x.invalid("authenticationMode must be one of API, API_AND_CONFIG_MAP, CONFIG_MAP", map[string]any{"clusterName": in.Name})
		return
	}
	if len(e.clusters) >= e.opts.MaxClusters {
		x.eksError(http.StatusBadRequest, "ResourceLimitExceededException",
			fmt.Sprintf("Cluster limit exceeded for account: %d clusters in %s", e.opts.MaxClusters, e.opts.Region), map[string]any{"clusterName": in.Name})
		return
	}
	c := &cluster{
		name: in.Name, arn: fmt.Sprintf("arn:aws:eks:%s:%s:cluster/%s", e.opts.Region, e.opts.AccountID, in.Name),
		createdAt: e.now(), version: version, platformVersion: "eks.1", status: "CREATING",
		roleArn: in.RoleArn, vpc: *in.ResourcesVpcConfig, authMode: mode, bootstrapAdmin: bootstrap,
		tags: in.Tags, reqHash: bodyHash(x.body), raw: map[string]json.RawMessage{},
		creator: x.caller.iamArn, op: e.newOp("create", e.steps.Cluster),
		nodegroups: map[string]*nodegroup{}, entries: map[string]*accessEntry{}, updates: map[string]*update{},
	}
	if in.ClientRequestToken != nil {
		c.token = *in.ClientRequestToken
	}
	if len(e.clusterFailures) > 0 {
		c.failure = &e.clusterFailures[0]
		e.clusterFailures = e.clusterFailures[1:]
	}
	if in.DeletionProtection != nil {
		c.deletionProtect = *in.DeletionProtection
	}
	if c.vpc.EndpointPublicAccess == nil {
		c.vpc.EndpointPublicAccess = ptr(true)
	}
	if c.vpc.EndpointPrivateAccess == nil {
		c.vpc.EndpointPrivateAccess = ptr(false)
	}
	for k, v := range map[string]json.RawMessage{
		"kubernetesNetworkConfig": in.KubernetesNetworkConfig, "logging": in.Logging, "encryptionConfig": in.EncryptionConfig,
		"outpostConfig": in.OutpostConfig, "upgradePolicy": in.UpgradePolicy, "zonalShiftConfig": in.ZonalShiftConfig,
		"remoteNetworkConfig": in.RemoteNetworkConfig, "computeConfig": in.ComputeConfig, "storageConfig": in.StorageConfig,
		"controlPlaneScalingConfig": in.ControlPlaneScalingConfig, "kubeApiServerConfig": in.KubeAPIServerConfig,
		"kubeControllerManagerConfig": in.KubeControllerManagerConfig, "kubeSchedulerConfig": in.KubeSchedulerConfig,
	} {
		if len(v) > 0 {
			c.raw[k] = v
		}
	}
	if _, ok := c.raw["kubernetesNetworkConfig"]; !ok {
		c.raw["kubernetesNetworkConfig"] = json.RawMessage(`{"serviceIpv4Cidr":"10.100.0.0/16","ipFamily":"ipv4"}`)
	}
	if _, ok := c.raw["upgradePolicy"]; !ok {
		c.raw["upgradePolicy"] = json.RawMessage(`{"supportType":"EXTENDED"}`)
	}
	if bootstrap && mode != "CONFIG_MAP" {
		// EKS makes the creator's access entry itself, admin on the cluster.
		c.entries[c.creator] = e.newEntry(c, c.creator, "STANDARD", "", nil, nil)
		c.entries[c.creator].policies[ClusterAdminPolicy] = &association{policyArn: ClusterAdminPolicy, scope: accessScope{Type: "cluster"}, associatedAt: e.now(), modTime: e.now()}
	}
	e.clusters[c.name] = c
	e.settle(c)
	if x.dropOrFail(x.eksFail) {
		return
	}
	x.eksOK(map[string]any{"cluster": e.clusterJSON(c)})
}

func ptr[T any](v T) *T { return &v }

// endpointOf is an endpoint of EKS's shape, or the kube endpoint fronted.
func (e *Emulator) endpointOf(c *cluster) string {
	if e.opts.KubeEndpoint != "" {
		return e.opts.KubeEndpoint
	}
	return "https://" + e.hexOf(c) + ".gr7." + e.opts.Region + ".eks.amazonaws.com"
}

func (e *Emulator) hexOf(c *cluster) string {
	h := sha256.Sum256(fmt.Appendf(nil, "%s@%d", c.arn, c.createdAt.UnixNano()))
	return strings.ToUpper(hex.EncodeToString(h[:16]))
}

func (e *Emulator) clusterJSON(c *cluster) map[string]any {
	m := map[string]any{
		"name": c.name, "arn": c.arn, "createdAt": epoch(c.createdAt), "version": c.version,
		"platformVersion": c.platformVersion, "status": c.status, "roleArn": c.roleArn,
		"resourcesVpcConfig": map[string]any{
			"subnetIds": c.vpc.SubnetIDs, "securityGroupIds": nonNil(c.vpc.SecurityGroupIDs),
			"vpcId":                  e.vpcOf(c),
			"endpointPublicAccess":   *c.vpc.EndpointPublicAccess,
			"endpointPrivateAccess":  *c.vpc.EndpointPrivateAccess,
			"publicAccessCidrs":      orDefault(c.vpc.PublicAccessCidrs, []string{"0.0.0.0/0"}),
			"clusterSecurityGroupId": "sg-" + strings.ToLower(e.hexOf(c)[:17]),
		},
		"accessConfig": map[string]any{"authenticationMode": c.authMode, "bootstrapClusterCreatorAdminPermissions": c.bootstrapAdmin},
		"tags":         nonNilMap(c.tags), "health": map[string]any{"issues": issuesJSON(c)},
		"certificateAuthority": map[string]any{},
		"deletionProtection":   c.deletionProtect,
	}
	if c.vpc.ControlPlaneEgressMode != "" {
		m["resourcesVpcConfig"].(map[string]any)["controlPlaneEgressMode"] = c.vpc.ControlPlaneEgressMode
	}
	if c.token != "" {
		m["clientRequestToken"] = c.token
	}
	for k, v := range c.raw {
		m[k] = v
	}
	// Guess: while CREATING, and when its create FAILED, EKS leaves out the
	// endpoint, the CA and the OIDC issuer; the adapter only reads them
	// from an ACTIVE or UPDATING cluster.
	if c.status != "CREATING" && c.status != "FAILED" {
		m["endpoint"] = e.endpointOf(c)
		m["certificateAuthority"] = map[string]any{"data": base64.StdEncoding.EncodeToString(e.ca)}
		m["identity"] = map[string]any{"oidc": map[string]any{"issuer": "https://oidc.eks." + e.opts.Region + ".amazonaws.com/id/" + e.hexOf(c)}}
	}
	return m
}

func issuesJSON(c *cluster) []map[string]any {
	out := []map[string]any{}
	for _, i := range c.issues {
		out = append(out, map[string]any{"code": i.Code, "message": i.Message, "resourceIds": []string{c.arn}})
	}
	return out
}

func (e *Emulator) vpcOf(c *cluster) string {
	if len(c.vpc.SubnetIDs) > 0 {
		for _, s := range e.opts.Subnets {
			if s.ID == c.vpc.SubnetIDs[0] {
				return s.VpcID
			}
		}
	}
	return ""
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func orDefault(s, d []string) []string {
	if len(s) == 0 {
		return d
	}
	return s
}

func nonNilMap(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

func (x *exchange) describeCluster(args []string) {
	c := x.e.clusters[args[0]]
	if c != nil && c.op != nil {
		c.op.observed++
	}
	if c = x.find(args[0]); c == nil {
		return
	}
	x.eksOK(map[string]any{"cluster": x.e.clusterJSON(c)})
}

// pageJSON cuts names for a restJson list call (maxResults lo..hi).
func (x *exchange) pageJSON(names []string, hi int) ([]string, string, bool) {
	q := x.r.URL.Query()
	start := 0
	if tok := q.Get("nextToken"); tok != "" {
		b, err := base64.RawURLEncoding.DecodeString(tok)
		n, err2 := strconv.Atoi(string(b))
		if err != nil || err2 != nil || n < 0 || n > len(names) {
			x.invalid("The nextToken is not valid", nil)
			return nil, "", false
		}
		start = n
	}
	size := hi
	if m := q.Get("maxResults"); m != "" {
		n, err := strconv.Atoi(m)
		if err != nil || n < 1 || n > hi {
			x.invalid(fmt.Sprintf("maxResults must be between 1 and %d", hi), nil)
			return nil, "", false
		}
		size = n
	}
	end := min(start+size, len(names))
	next := ""
	if end < len(names) {
		next = base64.RawURLEncoding.EncodeToString([]byte(strconv.Itoa(end)))
	}
	return names[start:end], next, true
}

func withNext(m map[string]any, next string) map[string]any {
	if next != "" {
		m["nextToken"] = next
	}
	return m
}

func (x *exchange) listClusters(_ []string) {
	e := x.e
	var names []string
	// A listing settles what is due but observes nothing: a sweep does not
	// move the clusters it looks at.
	for _, n := range sortedKeys(e.clusters) {
		if e.settle(e.clusters[n]) {
			names = append(names, n)
		}
	}
	got, next, ok := x.pageJSON(names, 100)
	if !ok {
		return
	}
	x.eksOK(withNext(map[string]any{"clusters": nonNil(got)}, next))
}

func (x *exchange) deleteCluster(args []string) {
	e := x.e
	c := x.find(args[0])
	if c == nil {
		return
	}
	busy := func(msg string, extra map[string]any) {
		extra["clusterName"] = c.name
		x.eksError(http.StatusConflict, "ResourceInUseException", msg, extra)
	}
	switch {
	case len(c.nodegroups) > 0:
		busy("Cluster has nodegroups attached", map[string]any{"nodegroupName": sortedKeys(c.nodegroups)[0]})
		return
	case c.status == "DELETING":
		// Guess: a second delete of a cluster being deleted is refused as
		// busy; the adapter reads the cluster back on any 409.
		busy("Cluster "+c.name+" is already being deleted", map[string]any{})
		return
	case c.op != nil:
		// Guess: a cluster being created or updated cannot be deleted yet.
		busy(fmt.Sprintf("Cluster %s is currently %s", c.name, c.status), map[string]any{})
		return
	case c.deletionProtect:
		x.eksError(http.StatusBadRequest, "InvalidRequestException", "Cannot delete cluster "+c.name+" because deletion protection is enabled", map[string]any{"clusterName": c.name})
		return
	}
	c.status, c.op = "DELETING", e.newOp("delete", e.steps.Delete)
	out := e.clusterJSON(c)
	e.settle(c)
	if x.dropOrFail(x.eksFail) {
		return
	}
	x.eksOK(map[string]any{"cluster": out})
}

type updateClusterVersionIn struct {
	Version            string          `json:"version"`
	ClientRequestToken *string         `json:"clientRequestToken"`
	Force              *bool           `json:"force"`
	RollbackConfig     json.RawMessage `json:"rollbackConfig"`
}

func minor(v string) (int, int, bool) {
	m := minorRE.FindStringSubmatch(v)
	if m == nil {
		return 0, 0, false
	}
	a, _ := strconv.Atoi(m[1])
	b, _ := strconv.Atoi(m[2])
	return a, b, true
}

func (x *exchange) updateClusterVersion(args []string) {
	e := x.e
	var in updateClusterVersionIn
	if !x.decode(&in) || !x.checkToken(in.ClientRequestToken) {
		return
	}
	c := x.find(args[0])
	if c == nil {
		return
	}
	for _, u := range c.updates {
		if u.nodegroup != "" {
			continue // a node group's update: its tokens are its own
		}
		if same, answered := x.sameToken(in.ClientRequestToken, u.token, u.reqHash); answered {
			return
		} else if same {
			x.eksOK(map[string]any{"update": updateJSON(u)})
			return
		}
	}
	if c.status != "ACTIVE" {
		x.eksError(http.StatusConflict, "ResourceInUseException", fmt.Sprintf("Cluster %s is currently %s; an update cannot start", c.name, c.status), map[string]any{"clusterName": c.name})
		return
	}
	ma, mi, ok1 := minor(c.version)
	ta, ti, ok2 := minor(in.Version)
	switch {
	case !ok2 || !slices.Contains(e.opts.Versions, in.Version):
		x.invalid("unsupported Kubernetes version "+in.Version, map[string]any{"clusterName": c.name})
		return
	case in.Version == c.version:
		x.invalid("The cluster is already at version "+c.version, map[string]any{"clusterName": c.name})
		return
	case !ok1 || ta != ma || ti != mi+1:
		x.invalid(fmt.Sprintf("Unsupported Kubernetes minor version update from %s to %s", c.version, in.Version), map[string]any{"clusterName": c.name})
		return
	}
	// Guess: EKS's upgrade insights block an update that would leave a
	// managed node group's kubelet more than three minors behind the API
	// server (the Kubernetes skew policy) unless force is set; the real
	// code and text of that refusal are not documented.
	if in.Force == nil || !*in.Force {
		for _, name := range sortedKeys(c.nodegroups) {
			ng := c.nodegroups[name]
			if na, ni, ok := minor(ng.version); ok && (na != ta || ti-ni > maxKubeletLag) {
				x.invalid(fmt.Sprintf("Nodegroup %s runs Kubernetes %s; updating the cluster to %s would leave its kubelets more than %d minor versions behind the API server. Update the node group first, or set force.",
					ng.name, ng.version, in.Version, maxKubeletLag), map[string]any{"clusterName": c.name, "nodegroupName": ng.name})
				return
			}
		}
	}
	u := e.newUpdate(c, "VersionUpdate", []updateParam{{"Version", in.Version}, {"PlatformVersion", "eks.1"}}, in.ClientRequestToken, "", bodyHash(x.body))
	c.status, c.op = "UPDATING", e.newOp("update", e.steps.Update)
	c.op.target, c.op.update = in.Version, u
	e.settle(c)
	if x.dropOrFail(x.eksFail) {
		return
	}
	x.eksOK(map[string]any{"update": updateJSON(u)})
}

func (e *Emulator) newUpdate(c *cluster, typ string, params []updateParam, tok *string, ng, reqHash string) *update {
	e.seq++
	u := &update{id: uuidOf(fmt.Sprintf("update:%s:%d", c.arn, e.seq)), typ: typ, status: "InProgress",
		params: params, createdAt: e.now(), nodegroup: ng, reqHash: reqHash}
	if tok != nil {
		u.token = *tok
	}
	c.updates[u.id] = u
	return u
}

func updateJSON(u *update) map[string]any {
	errs := u.errors
	if errs == nil {
		errs = []map[string]any{}
	}
	return map[string]any{"id": u.id, "status": u.status, "type": u.typ, "params": u.params, "createdAt": epoch(u.createdAt), "errors": errs}
}

func (x *exchange) listUpdates(args []string) {
	c := x.find(args[0])
	if c == nil {
		return
	}
	ng := x.r.URL.Query().Get("nodegroupName")
	var ids []string
	for _, id := range sortedKeys(c.updates) {
		if c.updates[id].nodegroup == ng {
			ids = append(ids, id)
		}
	}
	got, next, ok := x.pageJSON(ids, 100)
	if !ok {
		return
	}
	x.eksOK(withNext(map[string]any{"updateIds": nonNil(got)}, next))
}

func (x *exchange) describeUpdate(args []string) {
	c := x.find(args[0])
	if c == nil {
		return
	}
	u := c.updates[args[1]]
	if u == nil || u.nodegroup != x.r.URL.Query().Get("nodegroupName") {
		x.eksError(http.StatusNotFound, "ResourceNotFoundException", "No update found for ID: "+args[1], map[string]any{"clusterName": c.name})
		return
	}
	x.eksOK(map[string]any{"update": updateJSON(u)})
}

// --- node groups ---

type labelsDelta struct {
	AddOrUpdateLabels map[string]string `json:"addOrUpdateLabels"`
	RemoveLabels      []string          `json:"removeLabels"`
}

type taintsDelta struct {
	AddOrUpdateTaints []taint `json:"addOrUpdateTaints"`
	RemoveTaints      []taint `json:"removeTaints"`
}

type createNodegroupIn struct {
	NodegroupName      string            `json:"nodegroupName"`
	ScalingConfig      *scaling          `json:"scalingConfig"`
	DiskSize           *int              `json:"diskSize"`
	Subnets            []string          `json:"subnets"`
	InstanceTypes      []string          `json:"instanceTypes"`
	AmiType            *string           `json:"amiType"`
	NodeRole           string            `json:"nodeRole"`
	Labels             map[string]string `json:"labels"`
	Taints             []taint           `json:"taints"`
	Tags               map[string]string `json:"tags"`
	ClientRequestToken *string           `json:"clientRequestToken"`
	CapacityType       *string           `json:"capacityType"`
	Version            *string           `json:"version"`
	ReleaseVersion     *string           `json:"releaseVersion"`
	LaunchTemplate     json.RawMessage   `json:"launchTemplate"`
	RemoteAccess       json.RawMessage   `json:"remoteAccess"`
	UpdateConfig       json.RawMessage   `json:"updateConfig"`
	NodeRepairConfig   json.RawMessage   `json:"nodeRepairConfig"`
	WarmPoolConfig     json.RawMessage   `json:"warmPoolConfig"`
}

func checkLabels(labels map[string]string) string {
	for k, v := range labels {
		if k == "" || len(k) > 63 {
			return "Label keys must be between 1 and 63 characters"
		}
		if v == "" || len(v) > 63 {
			return "Label values must be between 1 and 63 characters"
		}
	}
	return ""
}

func checkTaints(taints []taint) string {
	if len(taints) > 50 {
		return "A node group can have at most 50 taints"
	}
	for _, t := range taints {
		switch {
		case t.Key == "" || len(t.Key) > 63:
			return "Taint keys must be between 1 and 63 characters"
		case len(t.Value) > 63:
			return "Taint values must be at most 63 characters"
		case !slices.Contains([]string{"NO_SCHEDULE", "NO_EXECUTE", "PREFER_NO_SCHEDULE"}, t.Effect):
			return "Taint effect must be NO_SCHEDULE, NO_EXECUTE or PREFER_NO_SCHEDULE"
		}
	}
	return ""
}

// checkScaling checks min <= desired <= max with the messages EKS gives.
func (e *Emulator) checkScaling(minSize, maxSize, desired int) string {
	switch {
	case maxSize < 1:
		return "maxSize must be at least 1"
	case minSize < 0 || desired < 0:
		return "minSize and desiredSize must not be negative"
	case maxSize > e.opts.MaxNodesPerNodegroup:
		return fmt.Sprintf("maxSize %d exceeds the limit of %d nodes per managed node group", maxSize, e.opts.MaxNodesPerNodegroup)
	case minSize > desired:
		return fmt.Sprintf("Minimum capacity %d can't be greater than desired size %d", minSize, desired)
	case desired > maxSize:
		return "desiredSize can't be greater than maxSize"
	}
	return ""
}

// amiFor says whether an AMI type fits an instance type (architecture and
// GPU drivers), and which AMI EKS picks when none is given.
//
// Guess: EKS refuses an AMI of another architecture, and a GPU or Neuron
// AMI on an instance type without those devices; it accepts a standard AMI
// on a GPU type (nodes without drivers).
func amiFits(ami string, t InstanceType) bool {
	arm := strings.Contains(ami, "ARM_64")
	if arm != (t.Arch == "arm64") {
		return false
	}
	if strings.Contains(ami, "NVIDIA") || strings.HasSuffix(ami, "_GPU") {
		return slices.ContainsFunc(t.GPUs, func(g GPU) bool { return g.Manufacturer == "NVIDIA" })
	}
	return true
}

func defaultAMI(t InstanceType) string {
	if t.Arch == "arm64" {
		return "AL2023_ARM_64_STANDARD"
	}
	return "AL2023_x86_64_STANDARD"
}

func (x *exchange) createNodegroup(args []string) {
	e := x.e
	var in createNodegroupIn
	if !x.decode(&in) || !x.checkToken(in.ClientRequestToken) {
		return
	}
	c := x.find(args[0])
	if c == nil {
		return
	}
	extra := map[string]any{"clusterName": c.name, "nodegroupName": in.NodegroupName}
	if old := c.nodegroups[in.NodegroupName]; old != nil {
		same, answered := x.sameToken(in.ClientRequestToken, old.token, old.reqHash)
		switch {
		case answered:
		case same && e.settleNodegroup(c, old):
			x.eksOK(map[string]any{"nodegroup": e.nodegroupJSON(c, old)})
		default:
			x.eksError(http.StatusConflict, "ResourceInUseException", fmt.Sprintf("NodeGroup already exists with name %s and cluster name %s", in.NodegroupName, c.name), extra)
		}
		return
	}
	if c.status != "ACTIVE" {
		x.eksError(http.StatusBadRequest, "InvalidRequestException", fmt.Sprintf("Cluster '%s' is not in ACTIVE status", c.name), map[string]any{"clusterName": c.name})
		return
	}
	fail := func(msg string) { x.invalid(msg, extra) }
	switch {
	case in.NodegroupName == "" || len(in.NodegroupName) > 63 || !nameRE.MatchString(in.NodegroupName):
		fail(`The nodegroupName parameter contains invalid characters. It should conform to the regular expression "^[0-9A-Za-z][A-Za-z0-9-_]*" and be at most 63 characters.`)
		return
	case !roleRE.MatchString(in.NodeRole):
		fail("nodeRole must be the ARN of an IAM role")
		return
	case len(in.Subnets) == 0:
		fail("Subnets are required")
		return
	case len(in.LaunchTemplate) > 0 && in.DiskSize != nil:
		fail("Disk size must be specified within the launch template.")
		return
	case len(in.LaunchTemplate) > 0 && len(in.RemoteAccess) > 0:
		fail("Remote access configuration cannot be specified with a launch template.")
		return
	case in.Version != nil && *in.Version != c.version:
		fail(fmt.Sprintf("Nodegroup Kubernetes version should be equal to Cluster kubernetes version %s or NodeGroup kubernetes version %s", c.version, *in.Version))
		return
	}
	for _, id := range in.Subnets {
		s, ok := x.subnet(id)
		if !ok {
			fail(fmt.Sprintf("The subnet ID '%s' does not exist", id))
			return
		}
		if s.VpcID != e.vpcOf(c) {
			fail(fmt.Sprintf("Subnet %s is not in the cluster's VPC", id))
			return
		}
	}
	types := in.InstanceTypes
	if len(types) == 0 && len(in.LaunchTemplate) == 0 {
		types = []string{"t3.medium"}
	}
	var infos []InstanceType
	for _, name := range types {
		t, ok := e.instanceType(name)
		if !ok {
			fail(fmt.Sprintf("Instance type %s is not supported in %s", name, e.opts.Region))
			return
		}
		infos = append(infos, t)
	}
	ami := ""
	if in.AmiType != nil {
		ami = *in.AmiType
	} else if len(infos) > 0 {
		ami = defaultAMI(infos[0])
	}
	for _, t := range infos {
		if ami != "" && ami != "CUSTOM" && !amiFits(ami, t) {
			fail(fmt.Sprintf("[%s] is not a valid instance type for requested amiType %s", t.Name, ami))
			return
		}
	}
	capacity := "ON_DEMAND"
	if in.CapacityType != nil {
		capacity = *in.CapacityType
	}
	switch {
	case !slices.Contains([]string{"ON_DEMAND", "SPOT", "CAPACITY_BLOCK"}, capacity):
		fail("capacityType must be ON_DEMAND, SPOT or CAPACITY_BLOCK")
		return
	case capacity == "CAPACITY_BLOCK" && len(in.LaunchTemplate) == 0:
		fail("CAPACITY_BLOCK needs a launch template")
		return
	}
	minSize, maxSize, desired := 1, 2, 2
	if s := in.ScalingConfig; s != nil {
		if s.MinSize != nil {
			minSize = *s.MinSize
		}
		if s.MaxSize != nil {
			maxSize = *s.MaxSize
		}
		if s.DesiredSize != nil {
			desired = *s.DesiredSize
		} else {
			desired = max(minSize, min(desired, maxSize))
		}
	}
	for _, msg := range []string{e.checkScaling(minSize, maxSize, desired), checkLabels(in.Labels), checkTaints(in.Taints), checkTags(in.Tags)} {
		if msg != "" {
			fail(msg)
			return
		}
	}
	if len(c.nodegroups) >= e.opts.MaxNodegroups {
		x.eksError(http.StatusBadRequest, "ResourceLimitExceededException",
			fmt.Sprintf("Nodegroup limit exceeded for cluster %s: %d", c.name, e.opts.MaxNodegroups), extra)
		return
	}
	e.seq++
	id := uuidOf(fmt.Sprintf("nodegroup:%s/%s:%d", c.arn, in.NodegroupName, e.seq))
	ng := &nodegroup{
		name: in.NodegroupName, createdAt: e.now(), modifiedAt: e.now(), status: "CREATING",
		arn:           fmt.Sprintf("arn:aws:eks:%s:%s:nodegroup/%s/%s/%s", e.opts.Region, e.opts.AccountID, c.name, in.NodegroupName, id),
		instanceTypes: types, amiType: ami, capacityType: capacity, diskSize: in.DiskSize,
		subnets: in.Subnets, nodeRole: in.NodeRole, min: minSize, max: maxSize, desire: desired,
		labels: in.Labels, taints: in.Taints, tags: in.Tags, version: c.version,
		releaseVersion: releaseOf(c.version), raw: map[string]json.RawMessage{},
		asg: "eks-" + in.NodegroupName + "-" + id, reqHash: bodyHash(x.body),
		op: e.newOp("create", e.steps.Nodegroup),
	}
	if in.ReleaseVersion != nil {
		ng.releaseVersion = *in.ReleaseVersion
	}
	if ng.diskSize == nil && len(in.LaunchTemplate) == 0 {
		ng.diskSize = ptr(20)
	}
	if in.ClientRequestToken != nil {
		ng.token = *in.ClientRequestToken
	}
	for k, v := range map[string]json.RawMessage{"launchTemplate": in.LaunchTemplate, "remoteAccess": in.RemoteAccess,
		"updateConfig": in.UpdateConfig, "nodeRepairConfig": in.NodeRepairConfig, "warmPoolConfig": in.WarmPoolConfig} {
		if len(v) > 0 {
			ng.raw[k] = v
		}
	}
	if _, ok := ng.raw["updateConfig"]; !ok {
		ng.raw["updateConfig"] = json.RawMessage(`{"maxUnavailable":1}`)
	}
	c.nodegroups[ng.name] = ng
	e.settleNodegroup(c, ng)
	if x.dropOrFail(x.eksFail) {
		return
	}
	x.eksOK(map[string]any{"nodegroup": e.nodegroupJSON(c, ng)})
}

func (e *Emulator) nodegroupJSON(c *cluster, ng *nodegroup) map[string]any {
	issues := ng.issues
	if issues == nil {
		issues = []map[string]any{}
	}
	m := map[string]any{
		"nodegroupName": ng.name, "nodegroupArn": ng.arn, "clusterName": c.name,
		"version": ng.version, "releaseVersion": ng.releaseVersion,
		"createdAt": epoch(ng.createdAt), "modifiedAt": epoch(ng.modifiedAt), "status": ng.status,
		"capacityType": ng.capacityType, "scalingConfig": map[string]int{"minSize": ng.min, "maxSize": ng.max, "desiredSize": ng.desire},
		"instanceTypes": nonNil(ng.instanceTypes), "subnets": ng.subnets, "nodeRole": ng.nodeRole,
		"labels": nonNilMap(ng.labels), "resources": map[string]any{"autoScalingGroups": []map[string]string{{"name": ng.asg}}},
		"health": map[string]any{"issues": issues}, "tags": nonNilMap(ng.tags),
	}
	if ng.amiType != "" {
		m["amiType"] = ng.amiType
	}
	if ng.diskSize != nil {
		m["diskSize"] = *ng.diskSize
	}
	if len(ng.taints) > 0 {
		m["taints"] = ng.taints
	}
	for k, v := range ng.raw {
		m[k] = v
	}
	return m
}

// findNodegroup returns a settled node group of a settled cluster, or
// answers 404 (naming the node group only when the cluster exists).
func (x *exchange) findNodegroup(cname, name string, observe bool) (*cluster, *nodegroup) {
	c := x.find(cname)
	if c == nil {
		return nil, nil
	}
	ng := c.nodegroups[name]
	if ng != nil && observe && ng.op != nil {
		ng.op.observed++
	}
	if ng == nil || !x.e.settleNodegroup(c, ng) {
		x.eksError(http.StatusNotFound, "ResourceNotFoundException", "No node group found for name: "+name+".", map[string]any{"clusterName": cname, "nodegroupName": name})
		return nil, nil
	}
	return c, ng
}

func (x *exchange) describeNodegroup(args []string) {
	c, ng := x.findNodegroup(args[0], args[1], true)
	if ng == nil {
		return
	}
	x.eksOK(map[string]any{"nodegroup": x.e.nodegroupJSON(c, ng)})
}

func (x *exchange) listNodegroups(args []string) {
	c := x.find(args[0])
	if c == nil {
		return
	}
	got, next, ok := x.pageJSON(sortedKeys(c.nodegroups), 100)
	if !ok {
		return
	}
	x.eksOK(withNext(map[string]any{"nodegroups": nonNil(got)}, next))
}

func (x *exchange) deleteNodegroup(args []string) {
	e := x.e
	c, ng := x.findNodegroup(args[0], args[1], false)
	if ng == nil {
		return
	}
	switch ng.status {
	case "DELETING":
		// Guess: a second delete is refused as busy, like the cluster's.
		x.eksError(http.StatusConflict, "ResourceInUseException", "Nodegroup "+ng.name+" is already being deleted", map[string]any{"clusterName": c.name, "nodegroupName": ng.name})
		return
	case "UPDATING":
		x.eksError(http.StatusConflict, "ResourceInUseException", "Nodegroup "+ng.name+" cannot be deleted while it is being updated", map[string]any{"clusterName": c.name, "nodegroupName": ng.name})
		return
	}
	ng.status, ng.op = "DELETING", e.newOp("delete", e.steps.Delete)
	out := e.nodegroupJSON(c, ng)
	e.settleNodegroup(c, ng)
	if x.dropOrFail(x.eksFail) {
		return
	}
	x.eksOK(map[string]any{"nodegroup": out})
}

type updateNodegroupConfigIn struct {
	Labels             *labelsDelta    `json:"labels"`
	Taints             *taintsDelta    `json:"taints"`
	ScalingConfig      *scaling        `json:"scalingConfig"`
	UpdateConfig       json.RawMessage `json:"updateConfig"`
	NodeRepairConfig   json.RawMessage `json:"nodeRepairConfig"`
	WarmPoolConfig     json.RawMessage `json:"warmPoolConfig"`
	ClientRequestToken *string         `json:"clientRequestToken"`
}

func (x *exchange) updateNodegroupConfig(args []string) {
	e := x.e
	var in updateNodegroupConfigIn
	if !x.decode(&in) || !x.checkToken(in.ClientRequestToken) {
		return
	}
	c, ng := x.findNodegroup(args[0], args[1], false)
	if ng == nil {
		return
	}
	extra := map[string]any{"clusterName": c.name, "nodegroupName": ng.name}
	for _, u := range c.updates {
		if u.nodegroup != ng.name {
			continue
		}
		if same, answered := x.sameToken(in.ClientRequestToken, u.token, u.reqHash); answered {
			return
		} else if same {
			x.eksOK(map[string]any{"update": updateJSON(u)})
			return
		}
	}
	// Guess: a DEGRADED group takes updates (a scale-out is the way out of
	// DEGRADED); CREATING, UPDATING, DELETING and the failed ones do not.
	if ng.status != "ACTIVE" && ng.status != "DEGRADED" {
		x.eksError(http.StatusConflict, "ResourceInUseException", "Nodegroup cannot be updated as it is currently not in Active State", extra)
		return
	}
	minSize, maxSize, desired := ng.min, ng.max, ng.desire
	var params []updateParam
	if s := in.ScalingConfig; s != nil {
		if s.MinSize != nil {
			minSize = *s.MinSize
			params = append(params, updateParam{"MinSize", strconv.Itoa(minSize)})
		}
		if s.MaxSize != nil {
			maxSize = *s.MaxSize
			params = append(params, updateParam{"MaxSize", strconv.Itoa(maxSize)})
		}
		if s.DesiredSize != nil {
			desired = *s.DesiredSize
			params = append(params, updateParam{"DesiredSize", strconv.Itoa(desired)})
		}
	}
	if msg := e.checkScaling(minSize, maxSize, desired); msg != "" {
		x.invalid(msg, extra)
		return
	}
	labels := map[string]string{}
	for k, v := range ng.labels {
		labels[k] = v
	}
	if l := in.Labels; l != nil {
		for _, k := range l.RemoveLabels {
			if _, both := l.AddOrUpdateLabels[k]; both {
				x.invalid("The label "+k+" is both added and removed", extra)
				return
			}
			delete(labels, k)
		}
		if msg := checkLabels(l.AddOrUpdateLabels); msg != "" {
			x.invalid(msg, extra)
			return
		}
		for k, v := range l.AddOrUpdateLabels {
			labels[k] = v
		}
		if len(l.AddOrUpdateLabels) > 0 {
			b, _ := json.Marshal(l.AddOrUpdateLabels)
			params = append(params, updateParam{"LabelsToAdd", string(b)})
		}
		if len(l.RemoveLabels) > 0 {
			b, _ := json.Marshal(l.RemoveLabels)
			params = append(params, updateParam{"LabelsToRemove", string(b)})
		}
	}
	taints := slices.Clone(ng.taints)
	if t := in.Taints; t != nil {
		for _, r := range t.RemoveTaints {
			taints = slices.DeleteFunc(taints, func(x taint) bool { return x.Key == r.Key && x.Effect == r.Effect })
		}
		if msg := checkTaints(t.AddOrUpdateTaints); msg != "" {
			x.invalid(msg, extra)
			return
		}
		for _, a := range t.AddOrUpdateTaints {
			taints = slices.DeleteFunc(taints, func(x taint) bool { return x.Key == a.Key && x.Effect == a.Effect })
			taints = append(taints, a)
		}
		if len(t.AddOrUpdateTaints) > 0 {
			b, _ := json.Marshal(t.AddOrUpdateTaints)
			params = append(params, updateParam{"TaintsToAdd", string(b)})
		}
		if len(t.RemoveTaints) > 0 {
			b, _ := json.Marshal(t.RemoveTaints)
			params = append(params, updateParam{"TaintsToRemove", string(b)})
		}
	}
	for k, v := range map[string]json.RawMessage{"updateConfig": in.UpdateConfig, "nodeRepairConfig": in.NodeRepairConfig, "warmPoolConfig": in.WarmPoolConfig} {
		if len(v) > 0 {
			params = append(params, updateParam{strings.ToUpper(k[:1]) + k[1:], string(v)})
		}
	}
	// Guess: an update that changes nothing is refused rather than made.
	if minSize == ng.min && maxSize == ng.max && desired == ng.desire && mapsEqual(labels, ng.labels) &&
		slices.Equal(taints, ng.taints) && len(in.UpdateConfig)+len(in.NodeRepairConfig)+len(in.WarmPoolConfig) == 0 {
		x.invalid("No changes needed: the node group is already at the requested configuration", extra)
		return
	}
	u := e.newUpdate(c, "ConfigUpdate", params, in.ClientRequestToken, ng.name, bodyHash(x.body))
	scaleOut := desired > ng.desire
	ng.min, ng.max, ng.desire, ng.labels, ng.taints = minSize, maxSize, desired, labels, taints
	for k, v := range map[string]json.RawMessage{"updateConfig": in.UpdateConfig, "nodeRepairConfig": in.NodeRepairConfig, "warmPoolConfig": in.WarmPoolConfig} {
		if len(v) > 0 {
			ng.raw[k] = v
		}
	}
	ng.status, ng.op = "UPDATING", e.newOp("update", e.steps.Update)
	ng.op.update, ng.op.scaleOut = u, scaleOut
	e.settleNodegroup(c, ng)
	if x.dropOrFail(x.eksFail) {
		return
	}
	x.eksOK(map[string]any{"update": updateJSON(u)})
}

// maxKubeletLag is how many minors a kubelet may trail its API server
// (the Kubernetes version skew policy).
const maxKubeletLag = 3

type updateNodegroupVersionIn struct {
	Version            *string         `json:"version"`
	ReleaseVersion     *string         `json:"releaseVersion"`
	LaunchTemplate     json.RawMessage `json:"launchTemplate"`
	Force              *bool           `json:"force"`
	ClientRequestToken *string         `json:"clientRequestToken"`
}

// releaseOf is the AMI release the emulator offers for a Kubernetes minor.
func releaseOf(version string) string { return version + ".0-20260101" }

// updateNodegroupVersion replaces a node group's nodes with the cluster's
// Kubernetes version (or a newer AMI release of the group's own). EKS takes
// only those two versions, so a kubelet is never newer than its API server;
// the nodes roll on the emulator's clock like any other update.
func (x *exchange) updateNodegroupVersion(args []string) {
	e := x.e
	var in updateNodegroupVersionIn
	if !x.decode(&in) || !x.checkToken(in.ClientRequestToken) {
		return
	}
	c, ng := x.findNodegroup(args[0], args[1], false)
	if ng == nil {
		return
	}
	extra := map[string]any{"clusterName": c.name, "nodegroupName": ng.name}
	for _, u := range c.updates {
		if u.nodegroup != ng.name {
			continue
		}
		if same, answered := x.sameToken(in.ClientRequestToken, u.token, u.reqHash); answered {
			return
		} else if same {
			x.eksOK(map[string]any{"update": updateJSON(u)})
			return
		}
	}
	if ng.status != "ACTIVE" && ng.status != "DEGRADED" {
		x.eksError(http.StatusConflict, "ResourceInUseException", "Nodegroup cannot be updated as it is currently not in Active State", extra)
		return
	}
	// Guess: a node group is not updated while its cluster's own update
	// runs; EKS's text for it is not documented.
	if c.status != "ACTIVE" {
		x.eksError(http.StatusConflict, "ResourceInUseException", fmt.Sprintf("Cluster %s is currently %s; its node groups cannot be updated until it is ACTIVE", c.name, c.status), extra)
		return
	}
	target := c.version
	if in.Version != nil {
		target = *in.Version
	}
	if target != c.version && target != ng.version {
		x.invalid(fmt.Sprintf("Requested Nodegroup Kubernetes version %s is not supported by Amazon EKS. Nodegroup Kubernetes version should be equal to Cluster kubernetes version %s or NodeGroup kubernetes version %s", target, c.version, ng.version), extra)
		return
	}
	release := releaseOf(target)
	if in.ReleaseVersion != nil {
		if !strings.HasPrefix(*in.ReleaseVersion, target+".") {
			x.invalid(fmt.Sprintf("Requested release version %s is not valid for Kubernetes version %s", *in.ReleaseVersion, target), extra)
			return
		}
		release = *in.ReleaseVersion
	}
	// Guess: an update to what the group already runs is refused rather
	// than rolling every node for nothing.
	if target == ng.version && release == ng.releaseVersion && len(in.LaunchTemplate) == 0 {
		x.invalid(fmt.Sprintf("Nodegroup %s is already at version %s and release version %s", ng.name, target, release), extra)
		return
	}
	u := e.newUpdate(c, "VersionUpdate", []updateParam{{"Version", target}, {"ReleaseVersion", release}}, in.ClientRequestToken, ng.name, bodyHash(x.body))
	ng.status, ng.op = "UPDATING", e.newOp("update", e.steps.Update)
	ng.op.update, ng.op.target, ng.op.release = u, target, release
	e.settleNodegroup(c, ng)
	if x.dropOrFail(x.eksFail) {
		return
	}
	x.eksOK(map[string]any{"update": updateJSON(u)})
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// --- tags ---

// taggable finds the tags of a cluster, node group or access entry by ARN.
func (e *Emulator) taggable(arn string) *map[string]string {
	for _, c := range e.clusters {
		if !e.settle(c) {
			continue
		}
		if c.arn == arn {
			return &c.tags
		}
		for _, ng := range c.nodegroups {
			if ng.arn == arn {
				return &ng.tags
			}
		}
		for _, a := range c.entries {
			if a.arn == arn {
				return &a.tags
			}
		}
	}
	return nil
}

func (x *exchange) tagResource(args []string) {
	var in struct {
		Tags map[string]string `json:"tags"`
	}
	if !x.decode(&in) {
		return
	}
	tags := x.e.taggable(args[0])
	if tags == nil {
		x.eksFail(http.StatusNotFound, "NotFoundException", "Resource not found: "+args[0])
		return
	}
	merged := map[string]string{}
	for k, v := range *tags {
		merged[k] = v
	}
	for k, v := range in.Tags {
		merged[k] = v
	}
	if msg := checkTags(merged); msg != "" || len(in.Tags) == 0 {
		if msg == "" {
			msg = "tags must not be empty"
		}
		x.eksFail(http.StatusBadRequest, "BadRequestException", msg)
		return
	}
	if x.dropOrFail(x.eksFail) {
		return
	}
	*tags = merged
	x.eksOK(nil)
}

func (x *exchange) listTags(args []string) {
	tags := x.e.taggable(args[0])
	if tags == nil {
		x.eksFail(http.StatusNotFound, "NotFoundException", "Resource not found: "+args[0])
		return
	}
	x.eksOK(map[string]any{"tags": nonNilMap(*tags)})
}

func (x *exchange) untagResource(args []string) {
	tags := x.e.taggable(args[0])
	if tags == nil {
		x.eksFail(http.StatusNotFound, "NotFoundException", "Resource not found: "+args[0])
		return
	}
	keys := x.r.URL.Query()["tagKeys"]
	if len(keys) == 0 {
		x.eksFail(http.StatusBadRequest, "BadRequestException", "tagKeys must not be empty")
		return
	}
	if x.dropOrFail(x.eksFail) {
		return
	}
	for _, k := range keys {
		delete(*tags, k)
	}
	x.eksOK(nil)
}
