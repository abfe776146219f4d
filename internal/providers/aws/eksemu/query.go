package eksemu

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
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

// EC2 (ec2query) and STS (awsQuery) share `POST /` with a form body; the
// Version parameter says which API a request is for.

const (
	ec2Version = "2016-11-15"
	stsVersion = "2011-06-15"
	ec2XMLNS   = "http://ec2.amazonaws.com/doc/2016-11-15/"
	stsXMLNS   = "https://sts.amazonaws.com/doc/2011-06-15/"
)

// query routes a form request, or a presigned STS GET.
func (x *exchange) query() {
	var form url.Values
	if x.r.Method == http.MethodPost {
		var err error
		if form, err = url.ParseQuery(string(x.body)); err != nil {
			x.service = "ec2"
			x.rec.Service = "ec2"
			x.ec2Error(http.StatusBadRequest, "MalformedQueryString", "the form body does not parse")
			return
		}
	} else {
		form = x.r.URL.Query()
	}
	action := form.Get("Action")
	switch {
	case x.r.Method == http.MethodGet && form.Get("X-Amz-Signature") != "":
		x.service = "sts"
		x.presignedCallerIdentity()
	case form.Get("Version") == stsVersion:
		x.service = "sts"
		x.sts(action, form)
	case form.Get("Version") == asgVersion:
		x.service = "autoscaling"
		x.autoscaling(action, form)
	default:
		x.service = "ec2"
		x.ec2(action, form)
	}
}

// --- EC2 ---

func (x *exchange) ec2Error(status int, code, msg string) {
	x.rec.Status = status
	x.w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	x.w.WriteHeader(status)
	type errXML struct {
		Code    string `xml:"Code"`
		Message string `xml:"Message"`
	}
	out := struct {
		XMLName   xml.Name `xml:"Response"`
		Errors    []errXML `xml:"Errors>Error"`
		RequestID string   `xml:"RequestID"`
	}{Errors: []errXML{{code, msg}}, RequestID: x.rid}
	_, _ = x.w.Write([]byte(xml.Header))
	_ = xml.NewEncoder(x.w).Encode(out)
}

func (x *exchange) writeXML(v any) {
	x.rec.Status = http.StatusOK
	x.w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	x.w.WriteHeader(http.StatusOK)
	_, _ = x.w.Write([]byte(xml.Header))
	_ = xml.NewEncoder(x.w).Encode(v)
}

// ec2Params are the parameters each EC2 action takes, as patterns; EC2
// refuses any other with UnknownParameter.
var ec2Params = map[string][]*regexp.Regexp{
	"DescribeInstanceTypes": params(`Action`, `Version`, `DryRun`, `InstanceType\.\d+`, `Filter\.\d+\.Name`,
		`Filter\.\d+\.Value\.\d+`, `MaxResults`, `NextToken`, `IncludeUnsupportedInRegion`),
	"DescribeInstanceTypeOfferings": params(`Action`, `Version`, `DryRun`, `LocationType`, `Filter\.\d+\.Name`,
		`Filter\.\d+\.Value\.\d+`, `MaxResults`, `NextToken`),
	"DescribeAvailabilityZones": params(`Action`, `Version`, `DryRun`, `ZoneName\.\d+`, `ZoneId\.\d+`,
		`AllAvailabilityZones`, `Filter\.\d+\.Name`, `Filter\.\d+\.Value\.\d+`),
	"DescribeSubnets": params(`Action`, `Version`, `DryRun`, `SubnetId\.\d+`, `Filter\.\d+\.Name`,
		`Filter\.\d+\.Value\.\d+`, `MaxResults`, `NextToken`),
}

func params(patterns ...string) []*regexp.Regexp {
	out := make([]*regexp.Regexp, len(patterns))
	for i, p := range patterns {
		out[i] = regexp.MustCompile(`^` + p + `$`)
	}
	return out
}

func (x *exchange) ec2(action string, form url.Values) {
	allowed, ok := ec2Params[action]
	if !ok {
		x.rec.Service, x.rec.Op = "ec2", action
		x.ec2Error(http.StatusBadRequest, "InvalidAction", fmt.Sprintf("The action %s is not valid for this web service.", action))
		return
	}
	if !x.begin(action, x.ec2Error) {
		return
	}
	for k := range form {
		if !slices.ContainsFunc(allowed, func(r *regexp.Regexp) bool { return r.MatchString(k) }) {
			x.ec2Error(http.StatusBadRequest, "UnknownParameter", fmt.Sprintf("The parameter %s is not recognized", k))
			return
		}
	}
	if form.Get("DryRun") == "true" {
		x.ec2Error(http.StatusPreconditionFailed, "DryRunOperation", "Request would have succeeded, but DryRun flag is set.")
		return
	}
	filters, bad := ec2Filters(form)
	if bad != "" {
		x.ec2Error(http.StatusBadRequest, "InvalidParameterValue", bad)
		return
	}
	if x.dropOrFail(x.ec2Error) {
		return
	}
	switch action {
	case "DescribeInstanceTypes":
		x.describeInstanceTypes(form, filters)
	case "DescribeInstanceTypeOfferings":
		x.describeOfferings(form, filters)
	case "DescribeSubnets":
		x.describeSubnets(form, filters)
	case "DescribeAvailabilityZones":
		x.describeZones(form, filters)
	}
}

// listed collects Name.1, Name.2, ... in order.
func listed(form url.Values, prefix string) []string {
	var out []string
	for i := 1; ; i++ {
		v, ok := form[prefix+"."+strconv.Itoa(i)]
		if !ok {
			return out
		}
		out = append(out, v[0])
	}
}

// ec2Filters reads Filter.N; the string is EC2's message for a bad one.
func ec2Filters(form url.Values) (map[string][]string, string) {
	out := map[string][]string{}
	for i := 1; ; i++ {
		name, ok := form[fmt.Sprintf("Filter.%d.Name", i)]
		if !ok {
			return out, ""
		}
		vals := listed(form, fmt.Sprintf("Filter.%d.Value", i))
		if len(vals) == 0 {
			return nil, fmt.Sprintf("The filter '%s' has no values", name[0])
		}
		out[name[0]] = append(out[name[0]], vals...)
	}
}

// page cuts a list at NextToken and MaxResults (lo..hi; 0 is all); the
// last string is EC2's message for a bad one.
func page[T any](form url.Values, items []T, lo, hi int) ([]T, string, string) {
	start := 0
	if tok := form.Get("NextToken"); tok != "" {
		b, err := base64.RawURLEncoding.DecodeString(tok)
		n, err2 := strconv.Atoi(string(b))
		if err != nil || err2 != nil || n < 0 || n > len(items) {
			return nil, "", fmt.Sprintf("The token '%s' is invalid.", tok)
		}
		start = n
	}
	size := len(items)
	if m := form.Get("MaxResults"); m != "" {
		n, err := strconv.Atoi(m)
		if err != nil || n < lo || n > hi {
			return nil, "", fmt.Sprintf("Value ( %s ) for parameter maxResults is invalid. Expecting a value between %d and %d.", m, lo, hi)
		}
		size = n
	}
	end := min(start+size, len(items))
	next := ""
	if end < len(items) {
		next = base64.RawURLEncoding.EncodeToString([]byte(strconv.Itoa(end)))
	}
	return items[start:end], next, ""
}

type itemList struct {
	Items []string `xml:"item"`
}

type gpuXML struct {
	Name         string `xml:"name"`
	Manufacturer string `xml:"manufacturer"`
	Count        int    `xml:"count"`
	MemoryMiB    int    `xml:"memoryInfo>sizeInMiB"`
}

type instanceTypeXML struct {
	InstanceType      string    `xml:"instanceType"`
	CurrentGeneration bool      `xml:"currentGeneration"`
	UsageClasses      itemList  `xml:"supportedUsageClasses"`
	Architectures     itemList  `xml:"processorInfo>supportedArchitectures"`
	VCPU              int       `xml:"vCpuInfo>defaultVCpus"`
	MemoryMiB         int       `xml:"memoryInfo>sizeInMiB"`
	GPUs              *gpusInfo `xml:"gpuInfo,omitempty"`
}

type gpusInfo struct {
	GPUs        []gpuXML `xml:"gpus>item"`
	TotalMemory int      `xml:"totalGpuMemoryInMiB"`
}

func (e *Emulator) instanceType(name string) (InstanceType, bool) {
	for _, t := range e.opts.InstanceTypes {
		if t.Name == name {
			return t, true
		}
	}
	return InstanceType{}, false
}

func (x *exchange) describeInstanceTypes(form url.Values, filters map[string][]string) {
	e := x.e
	names := listed(form, "InstanceType")
	var missing []string
	var types []InstanceType
	if len(names) > 0 {
		for _, n := range names {
			t, ok := e.instanceType(n)
			if !ok {
				missing = append(missing, n)
				continue
			}
			types = append(types, t)
		}
	} else {
		types = slices.Clone(e.opts.InstanceTypes)
	}
	if len(missing) > 0 {
		x.ec2Error(http.StatusBadRequest, "InvalidInstanceType", fmt.Sprintf("The following supplied instance types do not exist: [%s]", strings.Join(missing, ", ")))
		return
	}
	for name, vals := range filters {
		switch name {
		case "instance-type":
			types = slices.DeleteFunc(types, func(t InstanceType) bool { return !slices.Contains(vals, t.Name) })
		default:
			x.ec2Error(http.StatusBadRequest, "InvalidParameterValue", fmt.Sprintf("The filter '%s' is invalid", name))
			return
		}
	}
	types, next, bad := page(form, types, 5, 100)
	if bad != "" {
		x.ec2Error(http.StatusBadRequest, "InvalidParameterValue", bad)
		return
	}
	out := struct {
		XMLName   xml.Name          `xml:"DescribeInstanceTypesResponse"`
		NS        string            `xml:"xmlns,attr"`
		RequestID string            `xml:"requestId"`
		Types     []instanceTypeXML `xml:"instanceTypeSet>item"`
		NextToken string            `xml:"nextToken,omitempty"`
	}{NS: ec2XMLNS, RequestID: x.rid, NextToken: next}
	for _, t := range types {
		it := instanceTypeXML{
			InstanceType: t.Name, CurrentGeneration: true,
			UsageClasses:  itemList{[]string{"on-demand", "spot"}},
			Architectures: itemList{[]string{t.Arch}},
			VCPU:          t.VCPU, MemoryMiB: t.MemoryMiB,
		}
		if len(t.GPUs) > 0 {
			it.GPUs = &gpusInfo{}
			for _, g := range t.GPUs {
				it.GPUs.GPUs = append(it.GPUs.GPUs, gpuXML{Name: g.Name, Manufacturer: g.Manufacturer, Count: g.Count, MemoryMiB: g.MemoryMiB})
				it.GPUs.TotalMemory += g.Count * g.MemoryMiB
			}
		}
		out.Types = append(out.Types, it)
	}
	x.writeXML(out)
}

// zones are the region's zones, from its subnets.
func (e *Emulator) zones() []string {
	var zs []string
	for _, s := range e.opts.Subnets {
		if !slices.Contains(zs, s.Zone) {
			zs = append(zs, s.Zone)
		}
	}
	slices.Sort(zs)
	return zs
}

func (e *Emulator) offeredIn(t InstanceType, zone string) bool {
	return len(t.Zones) == 0 || slices.Contains(t.Zones, zone)
}

func (x *exchange) describeOfferings(form url.Values, filters map[string][]string) {
	e := x.e
	type offering struct {
		InstanceType string `xml:"instanceType"`
		LocationType string `xml:"locationType"`
		Location     string `xml:"location"`
	}
	locType := form.Get("LocationType")
	if locType == "" {
		locType = "region"
	}
	var all []offering
	for _, t := range e.opts.InstanceTypes {
		switch locType {
		case "region":
			all = append(all, offering{t.Name, locType, e.opts.Region})
		case "availability-zone", "availability-zone-id":
			for _, z := range e.zones() {
				if !e.offeredIn(t, z) {
					continue
				}
				loc := z
				if locType == "availability-zone-id" {
					loc = zoneID(e.opts.Region, z)
				}
				all = append(all, offering{t.Name, locType, loc})
			}
		default:
			x.ec2Error(http.StatusBadRequest, "InvalidParameterValue", fmt.Sprintf("Value (%s) for parameter locationType is invalid.", locType))
			return
		}
	}
	for name, vals := range filters {
		switch name {
		case "instance-type":
			all = slices.DeleteFunc(all, func(o offering) bool { return !slices.Contains(vals, o.InstanceType) })
		case "location":
			all = slices.DeleteFunc(all, func(o offering) bool { return !slices.Contains(vals, o.Location) })
		default:
			x.ec2Error(http.StatusBadRequest, "InvalidParameterValue", fmt.Sprintf("The filter '%s' is invalid", name))
			return
		}
	}
	items, next, bad := page(form, all, 5, 1000)
	if bad != "" {
		x.ec2Error(http.StatusBadRequest, "InvalidParameterValue", bad)
		return
	}
	x.writeXML(struct {
		XMLName   xml.Name   `xml:"DescribeInstanceTypeOfferingsResponse"`
		NS        string     `xml:"xmlns,attr"`
		RequestID string     `xml:"requestId"`
		Offerings []offering `xml:"instanceTypeOfferingSet>item"`
		NextToken string     `xml:"nextToken,omitempty"`
	}{NS: ec2XMLNS, RequestID: x.rid, Offerings: items, NextToken: next})
}

func (x *exchange) describeSubnets(form url.Values, filters map[string][]string) {
	e := x.e
	type subnetXML struct {
		SubnetID         string `xml:"subnetId"`
		State            string `xml:"state"`
		VpcID            string `xml:"vpcId"`
		CIDR             string `xml:"cidrBlock"`
		AvailableIPs     int    `xml:"availableIpAddressCount"`
		Zone             string `xml:"availabilityZone"`
		ZoneID           string `xml:"availabilityZoneId"`
		MapPublicIP      bool   `xml:"mapPublicIpOnLaunch"`
		OwnerID          string `xml:"ownerId"`
		SubnetArn        string `xml:"subnetArn"`
		DefaultForAZ     bool   `xml:"defaultForAz"`
		AssignIPv6OnBoot bool   `xml:"assignIpv6AddressOnCreation"`
	}
	ids := listed(form, "SubnetId")
	var subnets []Subnet
	if len(ids) > 0 {
		for _, id := range ids {
			i := slices.IndexFunc(e.opts.Subnets, func(s Subnet) bool { return s.ID == id })
			if i < 0 {
				x.ec2Error(http.StatusBadRequest, "InvalidSubnetID.NotFound", fmt.Sprintf("The subnet ID '%s' does not exist", id))
				return
			}
			subnets = append(subnets, e.opts.Subnets[i])
		}
	} else {
		subnets = slices.Clone(e.opts.Subnets)
	}
	for name, vals := range filters {
		var field func(Subnet) string
		switch name {
		case "availability-zone":
			field = func(s Subnet) string { return s.Zone }
		case "vpc-id":
			field = func(s Subnet) string { return s.VpcID }
		case "subnet-id":
			field = func(s Subnet) string { return s.ID }
		default:
			x.ec2Error(http.StatusBadRequest, "InvalidParameterValue", fmt.Sprintf("The filter '%s' is invalid", name))
			return
		}
		subnets = slices.DeleteFunc(subnets, func(s Subnet) bool { return !slices.Contains(vals, field(s)) })
	}
	subnets, next, bad := page(form, subnets, 5, 1000)
	if bad != "" {
		x.ec2Error(http.StatusBadRequest, "InvalidParameterValue", bad)
		return
	}
	var out []subnetXML
	for _, s := range subnets {
		out = append(out, subnetXML{
			SubnetID: s.ID, State: "available", VpcID: s.VpcID, CIDR: s.CIDR, AvailableIPs: 250,
			Zone: s.Zone, ZoneID: s.ZoneID, OwnerID: e.opts.AccountID,
			SubnetArn: fmt.Sprintf("arn:aws:ec2:%s:%s:subnet/%s", e.opts.Region, e.opts.AccountID, s.ID),
		})
	}
	x.writeXML(struct {
		XMLName   xml.Name    `xml:"DescribeSubnetsResponse"`
		NS        string      `xml:"xmlns,attr"`
		RequestID string      `xml:"requestId"`
		Subnets   []subnetXML `xml:"subnetSet>item"`
		NextToken string      `xml:"nextToken,omitempty"`
	}{NS: ec2XMLNS, RequestID: x.rid, Subnets: out, NextToken: next})
}

// --- STS ---

func (x *exchange) stsError(status int, code, msg string) {
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
	}{NS: stsXMLNS, RequestID: x.rid}
	out.Error.Type, out.Error.Code, out.Error.Message = kind, code, msg
	_, _ = x.w.Write([]byte(xml.Header))
	_ = xml.NewEncoder(x.w).Encode(out)
}

var stsParams = map[string][]*regexp.Regexp{
	"GetCallerIdentity": params(`Action`, `Version`),
	"AssumeRole": params(`Action`, `Version`, `RoleArn`, `RoleSessionName`, `DurationSeconds`, `ExternalId`, `Policy`,
		`PolicyArns\.member\.\d+\.arn`, `ProvidedContexts\.member\.\d+\.(ContextAssertion|ProviderArn)`,
		`SerialNumber`, `SourceIdentity`, `Tags\.member\.\d+\.(Key|Value)`, `TokenCode`, `TransitiveTagKeys\.member\.\d+`,
		`MinimumSessionTokenSize`),
}

func (x *exchange) sts(action string, form url.Values) {
	allowed, ok := stsParams[action]
	if !ok {
		x.rec.Service, x.rec.Op = "sts", action
		x.stsError(http.StatusBadRequest, "InvalidAction", fmt.Sprintf("Could not find operation %s for version %s", action, stsVersion))
		return
	}
	if !x.begin(action, x.stsError) {
		return
	}
	for k := range form {
		if !slices.ContainsFunc(allowed, func(r *regexp.Regexp) bool { return r.MatchString(k) }) {
			// Guess: STS is taken to refuse parameters it does not know.
			x.stsError(http.StatusBadRequest, "InvalidParameterValue", fmt.Sprintf("The parameter %s is not recognized", k))
			return
		}
	}
	switch action {
	case "GetCallerIdentity":
		if x.dropOrFail(x.stsError) {
			return
		}
		x.callerIdentity(x.caller)
	case "AssumeRole":
		x.assumeRole(form)
	}
}

func (x *exchange) callerIdentity(p *principal) {
	x.writeXML(struct {
		XMLName xml.Name `xml:"GetCallerIdentityResponse"`
		NS      string   `xml:"xmlns,attr"`
		Result  struct {
			Arn     string `xml:"Arn"`
			UserID  string `xml:"UserId"`
			Account string `xml:"Account"`
		} `xml:"GetCallerIdentityResult"`
		RequestID string `xml:"ResponseMetadata>RequestId"`
	}{NS: stsXMLNS, Result: struct {
		Arn     string `xml:"Arn"`
		UserID  string `xml:"UserId"`
		Account string `xml:"Account"`
	}{p.arn, p.userID, p.account}, RequestID: x.rid})
}

var sessionName = regexp.MustCompile(`^[\w+=,.@-]{2,64}$`)

func (x *exchange) assumeRole(form url.Values) {
	e := x.e
	roleArn, session := form.Get("RoleArn"), form.Get("RoleSessionName")
	if !sessionName.MatchString(session) {
		x.stsError(http.StatusBadRequest, "ValidationError", "1 validation error detected: Value at 'roleSessionName' failed to satisfy constraint: Member must satisfy regular expression pattern: [\\w+=,.@-]*")
		return
	}
	duration := 3600
	if d := form.Get("DurationSeconds"); d != "" {
		n, err := strconv.Atoi(d)
		if err != nil || n < 900 {
			x.stsError(http.StatusBadRequest, "ValidationError", "1 validation error detected: Value at 'durationSeconds' failed to satisfy constraint: Member must have value greater than or equal to 900")
			return
		}
		if n > 3600 {
			x.stsError(http.StatusBadRequest, "ValidationError", "The requested DurationSeconds exceeds the MaxSessionDuration set for this role.")
			return
		}
		duration = n
	}
	r := e.roles[roleArn]
	if r == nil || !r.trusted[x.caller.iamArn] {
		x.stsError(http.StatusForbidden, "AccessDenied", fmt.Sprintf("User: %s is not authorized to perform: sts:AssumeRole on resource: %s", x.caller.arn, roleArn))
		return
	}
	if x.dropOrFail(x.stsError) {
		return
	}
	name := roleArn[strings.LastIndex(roleArn, "/")+1:]
	e.seq++
	h := sha256.Sum256(fmt.Appendf(nil, "session:%s:%s:%d", roleArn, session, e.seq))
	hx := strings.ToUpper(hex.EncodeToString(h[:]))
	roleID := "AROA" + hx[:17]
	u := &user{
		akid: "ASIA" + hx[:16], secret: base64.RawStdEncoding.EncodeToString(h[:30]),
		arn:    fmt.Sprintf("arn:aws:sts::%s:assumed-role/%s/%s", e.opts.AccountID, name, session),
		iamArn: roleArn, userID: roleID + ":" + session,
		session: base64.StdEncoding.EncodeToString(append(h[:], []byte("session-token-of-"+session)...)),
		expires: e.now().Add(time.Duration(duration) * time.Second),
	}
	e.users[u.akid] = u
	type creds struct {
		AccessKeyID     string `xml:"AccessKeyId"`
		SecretAccessKey string `xml:"SecretAccessKey"`
		SessionToken    string `xml:"SessionToken"`
		Expiration      string `xml:"Expiration"`
	}
	x.writeXML(struct {
		XMLName xml.Name `xml:"AssumeRoleResponse"`
		NS      string   `xml:"xmlns,attr"`
		Result  struct {
			Credentials creds `xml:"Credentials"`
			User        struct {
				Arn string `xml:"Arn"`
				ID  string `xml:"AssumedRoleId"`
			} `xml:"AssumedRoleUser"`
		} `xml:"AssumeRoleResult"`
		RequestID string `xml:"ResponseMetadata>RequestId"`
	}{NS: stsXMLNS, Result: struct {
		Credentials creds `xml:"Credentials"`
		User        struct {
			Arn string `xml:"Arn"`
			ID  string `xml:"AssumedRoleId"`
		} `xml:"AssumedRoleUser"`
	}{Credentials: creds{u.akid, u.secret, u.session, u.expires.UTC().Format(time.RFC3339)}, User: struct {
		Arn string `xml:"Arn"`
		ID  string `xml:"AssumedRoleId"`
	}{u.arn, u.userID}}, RequestID: x.rid})
}

// presignedCallerIdentity answers a presigned GetCallerIdentity, as STS
// answers the URL a kube-apiserver authenticator forwards.
func (x *exchange) presignedCallerIdentity() {
	x.rec.Service, x.rec.Op = "sts", "GetCallerIdentity"
	u := *x.r.URL
	u.Scheme, u.Host = "http", x.r.Host
	pre, why := x.e.checkPresigned(u.String(), x.r.Header.Get("x-k8s-aws-id"))
	if pre == nil {
		x.stsError(http.StatusForbidden, "SignatureDoesNotMatch", why)
		return
	}
	x.callerIdentity(pre.p)
}

// describeZones answers DescribeAvailabilityZones with the zones of the
// region's subnets, every one available and opt-in-not-required.
//
// Guess: the zone group and network border group follow the shape EC2
// answers for a standard region ("us-east-1-zg-1", "us-east-1"); the
// emulator has no Local or Wavelength Zones.
func (x *exchange) describeZones(form url.Values, filters map[string][]string) {
	e := x.e
	type zoneXML struct {
		OptInStatus        string   `xml:"optInStatus"`
		Messages           struct{} `xml:"messageSet"`
		RegionName         string   `xml:"regionName"`
		ZoneName           string   `xml:"zoneName"`
		ZoneID             string   `xml:"zoneId"`
		GroupName          string   `xml:"groupName"`
		NetworkBorderGroup string   `xml:"networkBorderGroup"`
		ZoneType           string   `xml:"zoneType"`
		GroupLongName      string   `xml:"groupLongName,omitempty"`
		State              string   `xml:"zoneState"`
	}
	var zones []zoneXML
	for _, z := range e.zones() {
		zones = append(zones, zoneXML{
			OptInStatus: "opt-in-not-required", RegionName: e.opts.Region, ZoneName: z, ZoneID: zoneID(e.opts.Region, z),
			GroupName: e.opts.Region + "-zg-1", NetworkBorderGroup: e.opts.Region, ZoneType: "availability-zone", State: "available",
		})
	}
	keep := func(names []string, field func(zoneXML) string) {
		if len(names) > 0 {
			zones = slices.DeleteFunc(zones, func(z zoneXML) bool { return !slices.Contains(names, field(z)) })
		}
	}
	byName, byID := listed(form, "ZoneName"), listed(form, "ZoneId")
	for _, n := range byName {
		if !slices.ContainsFunc(zones, func(z zoneXML) bool { return z.ZoneName == n }) {
			x.ec2Error(http.StatusBadRequest, "InvalidParameterValue", fmt.Sprintf("The zone '%s' does not exist.", n))
			return
		}
	}
	for _, n := range byID {
		if !slices.ContainsFunc(zones, func(z zoneXML) bool { return z.ZoneID == n }) {
			x.ec2Error(http.StatusBadRequest, "InvalidParameterValue", fmt.Sprintf("The zone ID '%s' does not exist.", n))
			return
		}
	}
	keep(byName, func(z zoneXML) string { return z.ZoneName })
	keep(byID, func(z zoneXML) string { return z.ZoneID })
	for name, vals := range filters {
		var field func(zoneXML) string
		switch name {
		case "zone-name":
			field = func(z zoneXML) string { return z.ZoneName }
		case "zone-id":
			field = func(z zoneXML) string { return z.ZoneID }
		case "region-name":
			field = func(z zoneXML) string { return z.RegionName }
		case "state":
			field = func(z zoneXML) string { return z.State }
		case "zone-type":
			field = func(z zoneXML) string { return z.ZoneType }
		case "opt-in-status":
			field = func(z zoneXML) string { return z.OptInStatus }
		case "group-name":
			field = func(z zoneXML) string { return z.GroupName }
		default:
			x.ec2Error(http.StatusBadRequest, "InvalidParameterValue", fmt.Sprintf("The filter '%s' is invalid", name))
			return
		}
		keep(vals, field)
	}
	x.writeXML(struct {
		XMLName   xml.Name  `xml:"DescribeAvailabilityZonesResponse"`
		NS        string    `xml:"xmlns,attr"`
		RequestID string    `xml:"requestId"`
		Zones     []zoneXML `xml:"availabilityZoneInfo>item"`
	}{NS: ec2XMLNS, RequestID: x.rid, Zones: zones})
}
