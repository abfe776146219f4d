package eksemu

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"
)

// --- access entries ---

var principalRE = regexp.MustCompile(`^arn:aws[a-z-]*:iam::(\d{12}):(user|role)/(.+)$`)

func (e *Emulator) newEntry(c *cluster, principal, typ, username string, groups []string, tags map[string]string) *accessEntry {
	m := principalRE.FindStringSubmatch(principal)
	kind, acct, name := "user", e.opts.AccountID, principal
	if m != nil {
		acct, kind, name = m[1], m[2], m[3][strings.LastIndex(m[3], "/")+1:]
	}
	if username == "" {
		username = principal
		if kind == "role" {
			username = fmt.Sprintf("arn:aws:sts::%s:assumed-role/%s/{{SessionName}}", acct, name)
		}
	}
	e.seq++
	return &accessEntry{
		principal: principal, typ: typ, username: username, groups: groups, tags: tags,
		arn: fmt.Sprintf("arn:aws:eks:%s:%s:access-entry/%s/%s/%s/%s/%s", e.opts.Region, e.opts.AccountID, c.name, kind, acct, name,
			uuidOf(fmt.Sprintf("entry:%s:%s:%d", c.arn, principal, e.seq))),
		createdAt: e.now(), modifiedAt: e.now(), policies: map[string]*association{},
	}
}

func entryJSON(c *cluster, a *accessEntry) map[string]any {
	return map[string]any{
		"clusterName": c.name, "principalArn": a.principal, "accessEntryArn": a.arn, "type": a.typ,
		"username": a.username, "kubernetesGroups": nonNil(a.groups), "tags": nonNilMap(a.tags),
		"createdAt": epoch(a.createdAt), "modifiedAt": epoch(a.modifiedAt),
	}
}

func assocJSON(p *association) map[string]any {
	return map[string]any{"policyArn": p.policyArn, "accessScope": p.scope, "associatedAt": epoch(p.associatedAt), "modifiedAt": epoch(p.modTime)}
}

// apiMode answers 400 when the cluster's authentication mode has no access
// entries.
func (x *exchange) apiMode(c *cluster) bool {
	if c.authMode == "CONFIG_MAP" {
		x.eksError(http.StatusBadRequest, "InvalidRequestException", "The cluster's authentication mode must be set to one of [API, API_AND_CONFIG_MAP] to perform this operation.", map[string]any{"clusterName": c.name})
		return false
	}
	return true
}

func (x *exchange) findEntry(cname, principal string) (*cluster, *accessEntry) {
	c := x.find(cname)
	if c == nil || !x.apiMode(c) {
		return nil, nil
	}
	a := c.entries[principal]
	if a == nil {
		x.eksError(http.StatusNotFound, "ResourceNotFoundException", "The specified principalArn could not be found. You can view your available access entries with 'list-access-entries'.", map[string]any{"clusterName": c.name})
		return nil, nil
	}
	return c, a
}

type createAccessEntryIn struct {
	PrincipalArn       string            `json:"principalArn"`
	KubernetesGroups   []string          `json:"kubernetesGroups"`
	Tags               map[string]string `json:"tags"`
	ClientRequestToken *string           `json:"clientRequestToken"`
	Username           *string           `json:"username"`
	Type               *string           `json:"type"`
}

func (x *exchange) createAccessEntry(args []string) {
	e := x.e
	var in createAccessEntryIn
	if !x.decode(&in) || !x.checkToken(in.ClientRequestToken) {
		return
	}
	c := x.find(args[0])
	if c == nil || !x.apiMode(c) {
		return
	}
	extra := map[string]any{"clusterName": c.name}
	if !principalRE.MatchString(in.PrincipalArn) {
		x.invalid("The principalArn parameter format is not valid: an IAM user or role ARN is needed (not an STS session)", extra)
		return
	}
	if c.entries[in.PrincipalArn] != nil {
		x.eksError(http.StatusConflict, "ResourceInUseException", "The specified access entry resource is already in use on this cluster.", extra)
		return
	}
	typ := "STANDARD"
	if in.Type != nil {
		typ = *in.Type
	}
	if !slices.Contains([]string{"STANDARD", "EC2_LINUX", "EC2_WINDOWS", "FARGATE_LINUX", "EC2", "HYBRID_LINUX", "HYPERPOD_LINUX"}, typ) {
		x.invalid("The type parameter is not valid", extra)
		return
	}
	for _, g := range in.KubernetesGroups {
		if strings.HasPrefix(g, "system:") {
			x.invalid("Kubernetes groups starting with system: are reserved", extra)
			return
		}
	}
	if msg := checkTags(in.Tags); msg != "" {
		x.invalid(msg, extra)
		return
	}
	username := ""
	if in.Username != nil {
		username = *in.Username
	}
	a := e.newEntry(c, in.PrincipalArn, typ, username, in.KubernetesGroups, in.Tags)
	c.entries[a.principal] = a
	if x.dropOrFail(x.eksFail) {
		return
	}
	x.eksOK(map[string]any{"accessEntry": entryJSON(c, a)})
}

func (x *exchange) describeAccessEntry(args []string) {
	c, a := x.findEntry(args[0], args[1])
	if a == nil {
		return
	}
	x.eksOK(map[string]any{"accessEntry": entryJSON(c, a)})
}

func (x *exchange) deleteAccessEntry(args []string) {
	c, a := x.findEntry(args[0], args[1])
	if a == nil {
		return
	}
	if x.dropOrFail(x.eksFail) {
		return
	}
	delete(c.entries, a.principal)
	x.eksOK(nil)
}

func (x *exchange) listAccessEntries(args []string) {
	c := x.find(args[0])
	if c == nil || !x.apiMode(c) {
		return
	}
	policy := x.r.URL.Query().Get("associatedPolicyArn")
	var names []string
	for _, p := range sortedKeys(c.entries) {
		if policy == "" || c.entries[p].policies[policy] != nil {
			names = append(names, p)
		}
	}
	got, next, ok := x.pageJSON(names, 100)
	if !ok {
		return
	}
	x.eksOK(withNext(map[string]any{"accessEntries": nonNil(got)}, next))
}

type associateIn struct {
	PolicyArn   string       `json:"policyArn"`
	AccessScope *accessScope `json:"accessScope"`
}

func (x *exchange) associateAccessPolicy(args []string) {
	e := x.e
	var in associateIn
	if !x.decode(&in) {
		return
	}
	c, a := x.findEntry(args[0], args[1])
	if a == nil {
		return
	}
	extra := map[string]any{"clusterName": c.name}
	switch {
	case !slices.Contains(accessPolicies, in.PolicyArn):
		x.eksError(http.StatusNotFound, "ResourceNotFoundException", "The specified policyArn could not be found", extra)
		return
	case in.AccessScope == nil || (in.AccessScope.Type != "cluster" && in.AccessScope.Type != "namespace"):
		x.invalid("accessScope.type must be cluster or namespace", extra)
		return
	case in.AccessScope.Type == "namespace" && len(in.AccessScope.Namespaces) == 0:
		x.invalid("a namespace access scope needs namespaces", extra)
		return
	case in.AccessScope.Type == "cluster" && len(in.AccessScope.Namespaces) > 0:
		x.invalid("a cluster access scope takes no namespaces", extra)
		return
	}
	p := a.policies[in.PolicyArn]
	if p == nil {
		p = &association{policyArn: in.PolicyArn, associatedAt: e.now()}
		a.policies[in.PolicyArn] = p
	}
	p.scope, p.modTime = *in.AccessScope, e.now()
	if x.dropOrFail(x.eksFail) {
		return
	}
	x.eksOK(map[string]any{"clusterName": c.name, "principalArn": a.principal, "associatedAccessPolicy": assocJSON(p)})
}

func (x *exchange) listAssociatedPolicies(args []string) {
	c, a := x.findEntry(args[0], args[1])
	if a == nil {
		return
	}
	got, next, ok := x.pageJSON(sortedKeys(a.policies), 100)
	if !ok {
		return
	}
	list := []map[string]any{}
	for _, p := range got {
		list = append(list, assocJSON(a.policies[p]))
	}
	x.eksOK(withNext(map[string]any{"clusterName": c.name, "principalArn": a.principal, "associatedAccessPolicies": list}, next))
}

func (x *exchange) disassociateAccessPolicy(args []string) {
	c, a := x.findEntry(args[0], args[1])
	if a == nil {
		return
	}
	if a.policies[args[2]] == nil {
		x.eksError(http.StatusNotFound, "ResourceNotFoundException", "The specified policy is not associated with this access entry", map[string]any{"clusterName": c.name})
		return
	}
	if x.dropOrFail(x.eksFail) {
		return
	}
	delete(a.policies, args[2])
	x.eksOK(nil)
}

// --- TokenReview ---

// tokenReview answers kube-apiserver's webhook token authentication
// (authentication.k8s.io/v1 TokenReview, or v1beta1): POST
// /authenticate/<cluster name>, or /authenticate to try every cluster.
//
// A token is authenticated when it is `k8s-aws-v1.` + the base64url of a
// presigned STS GetCallerIdentity URL for that cluster, signed with a key
// the emulator knows and not expired on its clock, and the principal has an
// access entry on the cluster (or is its creator in CONFIG_MAP mode). The
// groups are `system:masters` for AmazonEKSClusterAdminPolicy, else the
// entry's Kubernetes groups.
//
// A refused token is answered as aws-iam-authenticator answers it: HTTP 403
// and a TokenReview that is not authenticated, with no reason (the
// apiserver then answers the client 401 and caches nothing). The reason is
// kept in the request's record (Request.Refusal) for tests.
func (x *exchange) tokenReview() {
	e := x.e
	x.rec.Service, x.rec.Op = "kube", "TokenReview"
	var review struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Spec       struct {
			Token     string   `json:"token"`
			Audiences []string `json:"audiences"`
		} `json:"spec"`
	}
	if x.r.Method != http.MethodPost || json.Unmarshal(x.body, &review) != nil || review.Kind != "TokenReview" {
		x.rec.Status = http.StatusBadRequest
		http.Error(x.w, "a TokenReview is expected", http.StatusBadRequest)
		return
	}
	apiVersion := review.APIVersion
	if apiVersion == "" {
		apiVersion = "authentication.k8s.io/v1"
	}
	names := sortedKeys(e.clusters)
	if name := strings.TrimPrefix(strings.TrimPrefix(x.r.URL.Path, "/authenticate"), "/"); name != "" {
		names = []string{name}
	}
	status := map[string]any{"authenticated": false}
	x.rec.Status = http.StatusForbidden
	user, why := e.reviewToken(review.Spec.Token, names)
	if user != nil {
		status = map[string]any{"authenticated": true, "user": user}
		if len(review.Spec.Audiences) > 0 {
			status["audiences"] = review.Spec.Audiences
		}
		x.rec.Status = http.StatusOK
	} else {
		x.rec.Refusal = why
	}
	x.w.Header().Set("Content-Type", "application/json")
	x.w.WriteHeader(x.rec.Status)
	_ = json.NewEncoder(x.w).Encode(map[string]any{"apiVersion": apiVersion, "kind": "TokenReview", "status": status})
}

// TokenReviewer is the TokenReview route of one cluster as an
// http.Handler, whatever path it is called at: what a real kube-apiserver's
// webhook token authenticator is pointed at when the emulator fronts it
// (kubeplane's SetTokenReviewer). Each EKS cluster runs its own
// authenticator, so a token minted for another cluster is refused here even
// when every cluster fronts the same apiserver (KubeEndpoint). The reviews
// are recorded as requests (service "kube", operation "TokenReview").
func (e *Emulator) TokenReviewer(cluster string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r = r.Clone(r.Context())
		r.URL.Path, r.URL.RawPath = "/authenticate/"+cluster, ""
		e.ServeHTTP(w, r)
	})
}

const tokenPrefix = "k8s-aws-v1."

// reviewToken authenticates a token for one of the named clusters. Called
// with mu held.
func (e *Emulator) reviewToken(token string, clusters []string) (map[string]any, string) {
	if !strings.HasPrefix(token, tokenPrefix) || len(token) > 4096 {
		return nil, "not an EKS token"
	}
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(token, tokenPrefix))
	if err != nil {
		return nil, "the token is not base64url"
	}
	why := "no cluster named"
	for _, name := range clusters {
		c := e.clusters[name]
		if c == nil || !e.settle(c) || (c.status != "ACTIVE" && c.status != "UPDATING") {
			continue
		}
		pre, reason := e.checkPresigned(string(raw), name)
		if pre == nil {
			why = reason
			continue
		}
		groups, username, ok := e.access(c, pre.p)
		if !ok {
			return nil, "principal " + pre.p.iamArn + " has no access entry on cluster " + name
		}
		return map[string]any{
			"username": username, "uid": "aws-iam-authenticator:" + pre.p.account + ":" + pre.p.userID,
			"groups": append(groups, "system:authenticated"),
			"extra":  map[string][]string{"arn": {pre.p.arn}, "canonicalArn": {pre.p.iamArn}},
		}, ""
	}
	return nil, why
}

// access is what a principal may do on a cluster: its groups and user
// name, or false without an entry.
func (e *Emulator) access(c *cluster, p *principal) ([]string, string, bool) {
	if c.authMode == "CONFIG_MAP" || c.authMode == "API_AND_CONFIG_MAP" {
		if p.iamArn == c.creator && c.authMode == "CONFIG_MAP" {
			return []string{"system:masters"}, p.arn, true
		}
	}
	if c.authMode == "CONFIG_MAP" {
		return nil, "", false
	}
	a := c.entries[p.iamArn]
	if a == nil {
		return nil, "", false
	}
	username := strings.ReplaceAll(a.username, "{{SessionName}}", p.arn[strings.LastIndex(p.arn, "/")+1:])
	if pol := a.policies[ClusterAdminPolicy]; pol != nil && pol.scope.Type == "cluster" {
		return []string{"system:masters"}, username, true
	}
	return slices.Clone(a.groups), username, true
}

// Accepts reports whether the cluster behind the credential's endpoint
// would take the token, as the TokenReview route decides.
func (e *Emulator) Accepts(endpoint, token string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	var names []string
	for _, n := range sortedKeys(e.clusters) {
		if c := e.clusters[n]; e.settle(c) && e.endpointOf(c) == endpoint {
			names = append(names, n)
		}
	}
	u, _ := e.reviewToken(token, names)
	return u != nil
}

// --- the cluster's CA ---

// newCA makes a self-signed CA for the clusters' certificateAuthority
// field; nothing verifies against it unless a test serves with it.
func newCA(name string) []byte {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kubernetes", Organization: []string{"eksemu " + name}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(10 * 365 * 24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		panic(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// --- seeds ---

// SeedNodegroup is a node group of a seeded cluster.
type SeedNodegroup struct {
	Name         string
	InstanceType string
	Desired      int
	Labels       map[string]string
	Subnets      []string // [all the emulator's subnets]
}

// SeedAccessEntry is an access entry the cluster's owner made.
type SeedAccessEntry struct {
	PrincipalArn string
	Policies     []string // policy ARNs, cluster scope
}

// SeedCluster is a cluster made outside the adapter, ACTIVE, to adopt.
type SeedCluster struct {
	Name               string
	Version            string
	AuthenticationMode string // [API_AND_CONFIG_MAP]
	Tags               map[string]string
	Nodegroups         []SeedNodegroup
	AccessEntries      []SeedAccessEntry
	// Creator is the IAM principal that made it [a role of the owner].
	Creator string
}

// Seed adds an ACTIVE cluster made by its owner. It returns the ARN.
func (e *Emulator) Seed(s SeedCluster) (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.clusters[s.Name] != nil {
		return "", fmt.Errorf("eksemu: cluster %s exists", s.Name)
	}
	if s.Version == "" {
		s.Version = e.opts.DefaultVersion
	}
	if s.AuthenticationMode == "" {
		s.AuthenticationMode = "API_AND_CONFIG_MAP"
	}
	if s.Creator == "" {
		s.Creator = fmt.Sprintf("arn:aws:iam::%s:role/owner", e.opts.AccountID)
	}
	var subnets []string
	for _, sn := range e.opts.Subnets {
		subnets = append(subnets, sn.ID)
	}
	c := &cluster{
		name: s.Name, arn: fmt.Sprintf("arn:aws:eks:%s:%s:cluster/%s", e.opts.Region, e.opts.AccountID, s.Name),
		createdAt: e.now(), version: s.Version, platformVersion: "eks.1", status: "ACTIVE",
		roleArn:  fmt.Sprintf("arn:aws:iam::%s:role/owner-cluster", e.opts.AccountID),
		vpc:      vpcConfig{SubnetIDs: subnets, EndpointPublicAccess: ptr(true), EndpointPrivateAccess: ptr(false)},
		authMode: s.AuthenticationMode, bootstrapAdmin: true, tags: s.Tags, creator: s.Creator,
		raw:        map[string]json.RawMessage{"kubernetesNetworkConfig": json.RawMessage(`{"serviceIpv4Cidr":"10.100.0.0/16","ipFamily":"ipv4"}`)},
		nodegroups: map[string]*nodegroup{}, entries: map[string]*accessEntry{}, updates: map[string]*update{},
	}
	for _, a := range s.AccessEntries {
		entry := e.newEntry(c, a.PrincipalArn, "STANDARD", "", nil, nil)
		for _, p := range a.Policies {
			entry.policies[p] = &association{policyArn: p, scope: accessScope{Type: "cluster"}, associatedAt: e.now(), modTime: e.now()}
		}
		c.entries[a.PrincipalArn] = entry
	}
	for _, n := range s.Nodegroups {
		t, ok := e.instanceType(n.InstanceType)
		if !ok {
			return "", fmt.Errorf("eksemu: unknown instance type %s", n.InstanceType)
		}
		sn := n.Subnets
		if len(sn) == 0 {
			sn = subnets
		}
		id := uuidOf("seed:" + c.arn + "/" + n.Name)
		c.nodegroups[n.Name] = &nodegroup{
			name: n.Name, arn: fmt.Sprintf("arn:aws:eks:%s:%s:nodegroup/%s/%s/%s", e.opts.Region, e.opts.AccountID, c.name, n.Name, id),
			createdAt: e.now(), modifiedAt: e.now(), status: "ACTIVE", instanceTypes: []string{t.Name},
			amiType: defaultAMI(t), capacityType: "ON_DEMAND", diskSize: ptr(20), subnets: sn,
			nodeRole: fmt.Sprintf("arn:aws:iam::%s:role/owner-node", e.opts.AccountID),
			min:      n.Desired, max: max(n.Desired, 1), desire: n.Desired, labels: n.Labels, version: c.version,
			releaseVersion: c.version + ".0-20260101", raw: map[string]json.RawMessage{}, asg: "eks-" + n.Name + "-" + id,
		}
	}
	e.clusters[c.name] = c
	return c.arn, nil
}

// Advance moves every operation one step, for tests that drive time by
// hand.
func (e *Emulator) Advance() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, n := range sortedKeys(e.clusters) {
		c := e.clusters[n]
		if c.op != nil {
			c.op.observed++
		}
		for _, ng := range c.nodegroups {
			if ng.op != nil {
				ng.op.observed++
			}
		}
		e.settle(c)
	}
}

// ClusterStatus reports a cluster's status without observing it ("" when
// it does not exist).
func (e *Emulator) ClusterStatus(name string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.clusters[name]
	if c == nil || !e.settle(c) {
		return ""
	}
	return c.status
}

// NodegroupNames lists a cluster's node groups without observing them.
func (e *Emulator) NodegroupNames(cluster string) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.clusters[cluster]
	if c == nil || !e.settle(c) {
		return nil
	}
	return sortedKeys(c.nodegroups)
}

// HasAccessEntry reports whether a principal has an access entry on a
// cluster.
func (e *Emulator) HasAccessEntry(cluster, principal string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.clusters[cluster]
	return c != nil && e.settle(c) && c.entries[principal] != nil
}

// IssuedSessionSecrets lists the secret keys and session tokens AssumeRole
// handed out, for tests that look for them where they must not be.
func (e *Emulator) IssuedSessionSecrets() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, k := range sortedKeys(e.users) {
		if u := e.users[k]; u.session != "" {
			out = append(out, u.secret, u.session)
		}
	}
	return out
}

// --- catalogue ---

// DefaultInstanceTypes is a small catalogue with the figures EC2 reports
// for these types: CPU types on both architectures, and NVIDIA L4, A10G,
// T4g, A100 and H100 types. p5.48xlarge is offered in zones a and b only.
func DefaultInstanceTypes() []InstanceType {
	return []InstanceType{
		{Name: "t3.medium", VCPU: 2, MemoryMiB: 4096, Arch: "x86_64"},
		{Name: "m5.large", VCPU: 2, MemoryMiB: 8192, Arch: "x86_64"},
		{Name: "m7i.large", VCPU: 2, MemoryMiB: 8192, Arch: "x86_64"},
		{Name: "m7g.large", VCPU: 2, MemoryMiB: 8192, Arch: "arm64"},
		{Name: "g6.xlarge", VCPU: 4, MemoryMiB: 16384, Arch: "x86_64", GPUs: []GPU{{Manufacturer: "NVIDIA", Name: "L4", Count: 1, MemoryMiB: 22888}}},
		{Name: "g5.xlarge", VCPU: 4, MemoryMiB: 16384, Arch: "x86_64", GPUs: []GPU{{Manufacturer: "NVIDIA", Name: "A10G", Count: 1, MemoryMiB: 22888}}},
		{Name: "g5g.xlarge", VCPU: 4, MemoryMiB: 8192, Arch: "arm64", GPUs: []GPU{{Manufacturer: "NVIDIA", Name: "T4g", Count: 1, MemoryMiB: 15360}}},
		{Name: "p4d.24xlarge", VCPU: 96, MemoryMiB: 1179648, Arch: "x86_64", GPUs: []GPU{{Manufacturer: "NVIDIA", Name: "A100", Count: 8, MemoryMiB: 40960}}},
		{Name: "p5.48xlarge", VCPU: 192, MemoryMiB: 2097152, Arch: "x86_64", GPUs: []GPU{{Manufacturer: "NVIDIA", Name: "H100", Count: 8, MemoryMiB: 81920}}, Zones: []string{"us-east-1a", "us-east-1b"}},
	}
}
