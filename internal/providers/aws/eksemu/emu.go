// Package eksemu is an HTTP emulator of Amazon EKS and of the parts of EC2,
// STS and EC2 Auto Scaling that the aws adapter calls, for tests that drive the real
// aws-sdk-go-v2 clients against it, and that the AWS CLI as shipped
// accepts (the suite in eksemu/clients).
//
// It speaks the SDK's own wire formats: EKS restJson1 routes with
// `X-Amzn-ErrorType` errors and epoch-second timestamps, EC2 ec2query (form
// POST, XML with <item> lists), STS and Auto Scaling awsQuery (asg.go). Every request must carry a
// valid SigV4 signature of a key the emulator was given (AddUser, AddRole):
// the emulator checks signatures itself, independently of the SDK's signer,
// so a request signed wrongly is refused as AWS refuses it.
//
// Clusters and node groups move CREATING -> ACTIVE, UPDATING -> ACTIVE and
// DELETING -> gone one step per observation (a Describe of that object, or
// Advance) and, with StepEvery, one step per interval of the injected clock.
// Faults (throttling, server errors, answers dropped after acting, quotas,
// stockouts, cluster creates that end FAILED) are injected per operation;
// every request is recorded with its operation name, so a test can count
// what one step of the adapter cost. ClusterNames, Cluster and Nodegroup
// read what the emulator holds, for tests to assert what exists.
//
// It can front a real kube-apiserver: KubeEndpoint and KubeCA are what
// DescribeCluster hands out, and the TokenReview route (TokenReviewer for
// one cluster) answers kube-apiserver's webhook token authentication for
// the presigned STS tokens the adapter mints, checking their signature and
// expiry with the keys and the clock the emulator has, and the principal's
// access entries.
//
// Where EKS's behaviour is not documented, the emulator guesses; every guess
// is marked "Guess:" at its place. Where a description of the service and a
// client AWS ships disagree, the emulator follows the shipped client (the
// client request token's length, at checkToken), and says so there.
package eksemu

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/clock"
)

// Steps are how many observations an operation takes to finish. Zero
// finishes it within the call that started it.
type Steps struct {
	Cluster   int
	Nodegroup int
	Update    int
	Delete    int
}

// DefaultSteps are the steps when Options.Steps is nil.
var DefaultSteps = Steps{Cluster: 3, Nodegroup: 2, Update: 1, Delete: 1}

// Subnet is an EC2 subnet the emulator knows.
type Subnet struct {
	ID, Zone, VpcID, CIDR string
	// ZoneID is the zone's id ("use1-az1"); derived from Zone when empty.
	ZoneID string
}

// GPU is one kind of GPU of an instance type, as EC2 reports it.
type GPU struct {
	Manufacturer, Name string
	Count              int
	MemoryMiB          int
}

// InstanceType is one EC2 instance type of the catalogue.
type InstanceType struct {
	Name      string
	VCPU      int
	MemoryMiB int
	// Arch is "x86_64" or "arm64".
	Arch string
	GPUs []GPU
	// Zones are the zones it is offered in; empty is every zone of the
	// region.
	Zones []string
}

// Options configure an emulator. The zero value is usable.
type Options struct {
	Clock     clock.Clock
	Region    string // [us-east-1]
	AccountID string // [111111111111]
	// Steps nil is DefaultSteps.
	Steps *Steps
	// StepEvery also advances an operation one step per interval of the
	// clock since it began; 0 leaves it to observations.
	StepEvery time.Duration
	// Versions offered, oldest first; DefaultVersion is the one a create
	// without a version gets [1.33 1.34 1.35, default 1.34].
	Versions       []string
	DefaultVersion string
	// KubeEndpoint and KubeCA (PEM) are what every ACTIVE cluster hands
	// out, for an emulator fronting a real kube-apiserver. Without them each
	// cluster gets an endpoint of EKS's shape and a CA the emulator made.
	KubeEndpoint string
	KubeCA       []byte
	// Subnets are the account's subnets [three, in zones a, b, c of Region].
	Subnets []Subnet
	// InstanceTypes is the EC2 catalogue [DefaultInstanceTypes].
	InstanceTypes []InstanceType
	// UnsupportedZones are zones where EKS refuses a control plane
	// (UnsupportedAvailabilityZoneException), as us-east-1e once was.
	UnsupportedZones []string
	// MaxClusters and MaxNodegroups are the quotas (clusters per region,
	// managed node groups per cluster) [100, 30]; MaxNodesPerNodegroup
	// bounds maxSize [450].
	MaxClusters          int
	MaxNodegroups        int
	MaxNodesPerNodegroup int
}

// Emulator is the emulated EKS, EC2 and STS of one account and region. It
// is safe for concurrent use.
type Emulator struct {
	opts  Options
	steps Steps
	clk   clock.Clock
	ca    []byte

	mu       sync.Mutex
	seq      int
	users    map[string]*user // by access key id
	roles    map[string]*role // by role ARN
	clusters map[string]*cluster
	faults   []*Fault
	stockout map[string]bool // instance type -> no capacity
	// clusterFailures are armed for the next clusters created, in order.
	clusterFailures []ClusterIssue
	requests        []Request

	server *httptest.Server
}

// New makes an emulator; Start serves it, or use it as an http.Handler.
func New(opts Options) *Emulator {
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.Region == "" {
		opts.Region = "us-east-1"
	}
	if opts.AccountID == "" {
		opts.AccountID = "111111111111"
	}
	if len(opts.Versions) == 0 {
		opts.Versions = []string{"1.33", "1.34", "1.35"}
	}
	if opts.DefaultVersion == "" {
		opts.DefaultVersion = opts.Versions[len(opts.Versions)/2]
	}
	if opts.Subnets == nil {
		for i, z := range []string{"a", "b", "c"} {
			opts.Subnets = append(opts.Subnets, Subnet{
				ID:   fmt.Sprintf("subnet-000000000000000%d%s", i, z),
				Zone: opts.Region + z, VpcID: "vpc-00000000000000001", CIDR: fmt.Sprintf("10.0.%d.0/24", i),
			})
		}
	}
	for i := range opts.Subnets {
		if opts.Subnets[i].ZoneID == "" {
			opts.Subnets[i].ZoneID = zoneID(opts.Region, opts.Subnets[i].Zone)
		}
	}
	if opts.InstanceTypes == nil {
		opts.InstanceTypes = DefaultInstanceTypes()
	}
	if opts.MaxClusters == 0 {
		opts.MaxClusters = 100
	}
	if opts.MaxNodegroups == 0 {
		opts.MaxNodegroups = 30
	}
	if opts.MaxNodesPerNodegroup == 0 {
		opts.MaxNodesPerNodegroup = 450
	}
	e := &Emulator{
		opts: opts, steps: DefaultSteps, clk: opts.Clock,
		users: map[string]*user{}, roles: map[string]*role{},
		clusters: map[string]*cluster{}, stockout: map[string]bool{},
	}
	if opts.Steps != nil {
		e.steps = *opts.Steps
	}
	e.ca = opts.KubeCA
	if len(e.ca) == 0 {
		e.ca = newCA(opts.Region + "/" + opts.AccountID)
	}
	return e
}

// zoneID shapes a zone id as AWS does: "use1-az1" for us-east-1a, the
// region's first part, the initials of the others and its number.
func zoneID(region, zone string) string {
	parts := strings.Split(region, "-")
	short := parts[0]
	for _, p := range parts[1:] {
		if p != "" && (p[0] < '0' || p[0] > '9') {
			short += p[:1]
		} else {
			short += p
		}
	}
	letter := strings.TrimPrefix(zone, region)
	n := 1
	if letter != "" {
		n = int(letter[0]-'a') + 1
	}
	return fmt.Sprintf("%s-az%d", short, n)
}

// Start serves the emulator on a loopback port and returns its URL, the
// base endpoint of EKS, EC2 and STS alike.
func (e *Emulator) Start() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.server == nil {
		e.server = httptest.NewServer(e)
	}
	return e.server.URL
}

// URL is the address Start gave, or "".
func (e *Emulator) URL() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.server == nil {
		return ""
	}
	return e.server.URL
}

// Close stops serving.
func (e *Emulator) Close() {
	e.mu.Lock()
	s := e.server
	e.mu.Unlock()
	if s != nil {
		s.Close()
	}
}

// Region is the emulated region.
func (e *Emulator) Region() string { return e.opts.Region }

// AccountID is the emulated account.
func (e *Emulator) AccountID() string { return e.opts.AccountID }

// CA is the PEM of the certificate authority clusters hand out.
func (e *Emulator) CA() []byte { return slices.Clone(e.ca) }

// Subnets are the account's subnets.
func (e *Emulator) Subnets() []Subnet { return slices.Clone(e.opts.Subnets) }

// Request is one request as the emulator received it.
type Request struct {
	// Service is "eks", "ec2", "sts" or "kube" (TokenReview).
	Service string
	// Op is the operation ("CreateCluster", "DescribeInstanceTypes",
	// "TokenReview"), "" for an unknown route.
	Op     string
	Method string
	Path   string // as sent, escaped
	Query  string
	Body   []byte
	// Status is the answer's status; 0 when the answer was dropped.
	Status int
	// Refusal is why a TokenReview was refused: the route, like EKS's,
	// answers no reason.
	Refusal string
}

// Requests returns every request so far, in order.
func (e *Emulator) Requests() []Request {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.requests)
}

// Count reports how many requests named op (any op when "") were received.
func (e *Emulator) Count(op string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, r := range e.requests {
		if op == "" || r.Op == op {
			n++
		}
	}
	return n
}

// Counts maps each operation to its number of requests.
func (e *Emulator) Counts() map[string]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	m := map[string]int{}
	for _, r := range e.requests {
		m[r.Op]++
	}
	return m
}

// ResetRequests forgets the recorded requests.
func (e *Emulator) ResetRequests() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.requests = nil
}

// Fault changes the answer to the next requests of an operation.
type Fault struct {
	// Op is the operation it applies to ("CreateCluster"); "" is any.
	Op string
	// Count is how many requests it applies to; 0 is 1.
	Count int
	// Status and Code make the request fail with the service's error shape
	// (EKS X-Amzn-ErrorType and JSON, EC2 and STS XML). Message defaults to
	// the code.
	Status  int
	Code    string
	Message string
	// RetryAfter, when set, is sent as Retry-After (seconds).
	//
	// Guess: whether EKS sends a wait with a 429 is not documented; the
	// adapter reads Retry-After and x-amz-retry-after and works without.
	RetryAfter time.Duration
	// AfterActing makes the request act before it answers the error (a 500
	// after the cluster was made).
	AfterActing bool
	// Drop makes the request act and then close the connection without an
	// answer, as a lost reply would look.
	Drop bool
}

// Inject arms a fault.
func (e *Emulator) Inject(f Fault) {
	if f.Count <= 0 {
		f.Count = 1
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.faults = append(e.faults, &f)
}

// Throttle makes the next n requests of op fail with 429 and code
// (ThrottlingException, as modeled, or TooManyRequestsException, as real EKS
// has been seen to send; for EC2 use RequestLimitExceeded, which is 503).
func (e *Emulator) Throttle(op string, n int, code string, retryAfter time.Duration) {
	status := http.StatusTooManyRequests
	if code == "RequestLimitExceeded" {
		status = http.StatusServiceUnavailable
	}
	e.Inject(Fault{Op: op, Count: n, Status: status, Code: code, Message: "Rate exceeded", RetryAfter: retryAfter})
}

// DropAfterActing makes the next n requests of op act and lose their
// answer.
func (e *Emulator) DropAfterActing(op string, n int) {
	e.Inject(Fault{Op: op, Count: n, Drop: true})
}

// ClearFaults disarms every fault.
func (e *Emulator) ClearFaults() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.faults = nil
}

// Stockout makes instances of the type fail to launch (or, with on false,
// launch again): a node group being made of it ends CREATE_FAILED, one
// scaled out ends DEGRADED, each with an AsgInstanceLaunchFailures issue.
func (e *Emulator) Stockout(instanceType string, on bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if on {
		e.stockout[instanceType] = true
	} else {
		delete(e.stockout, instanceType)
	}
}

// ClusterIssue is a cluster's health issue as EKS reports it; the codes
// are types.ClusterIssueCode's (IamRoleNotFound, AccessDenied,
// Ec2SubnetNotFound, InsufficientFreeAddresses, ...).
type ClusterIssue struct {
	Code, Message string
}

// FailClusterCreates makes the next n clusters created end FAILED instead
// of ACTIVE once their create's steps are done, each with issue as its
// health issue: what EKS does when, for example, it cannot assume the
// cluster role. A FAILED cluster takes nothing but DeleteCluster.
func (e *Emulator) FailClusterCreates(n int, issue ClusterIssue) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for range n {
		e.clusterFailures = append(e.clusterFailures, issue)
	}
}

// takeFault consumes the first armed fault for op. Called with mu held.
func (e *Emulator) takeFault(op string) *Fault {
	for i, f := range e.faults {
		if f.Op != "" && f.Op != op {
			continue
		}
		taken := *f
		f.Count--
		if f.Count <= 0 {
			e.faults = slices.Delete(e.faults, i, i+1)
		}
		return &taken
	}
	return nil
}

// requestID derives a request id from the sequence, so runs repeat.
func (e *Emulator) requestID() string {
	e.seq++
	return uuidOf(fmt.Sprintf("request:%d", e.seq))
}

// uuidOf shapes a hash like a UUID.
func uuidOf(s string) string {
	h := sha256.Sum256([]byte("eksemu:" + s))
	x := hex.EncodeToString(h[:16])
	return x[0:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:32]
}

// exchange is one request being answered.
type exchange struct {
	e       *Emulator
	w       http.ResponseWriter
	r       *http.Request
	body    []byte
	rec     *Request
	rid     string
	fault   *Fault
	caller  *principal // set once the signature checked
	service string
}

// ServeHTTP routes a request to EKS, EC2, STS or the TokenReview webhook.
func (e *Emulator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	_ = r.Body.Close()
	r.Body = io.NopCloser(bytes.NewReader(body))
	e.mu.Lock()
	defer e.mu.Unlock()
	x := &exchange{e: e, w: w, r: r, body: body, rid: e.requestID()}
	e.requests = append(e.requests, Request{Method: r.Method, Path: r.URL.EscapedPath(), Query: r.URL.RawQuery, Body: body})
	x.rec = &e.requests[len(e.requests)-1]
	switch {
	case strings.HasPrefix(r.URL.Path, "/authenticate"):
		x.service = "kube"
		x.tokenReview()
	case strings.HasPrefix(r.URL.Path, "/clusters") || strings.HasPrefix(r.URL.Path, "/tags/") || strings.HasPrefix(r.URL.Path, "/addons/") || r.URL.Path == "/cluster-versions":
		x.service = "eks"
		x.eks()
	case r.URL.Path == "/" || r.URL.Path == "":
		x.query()
	default:
		x.service = "eks"
		x.rec.Service = "eks"
		x.eksError(http.StatusNotFound, "UnknownOperationException", "", nil)
	}
}

// begin names the operation, records it, checks the signature and takes a
// fault. It reports whether the handler should go on. A fault that fails
// before acting answers here; one that acts first is left in x.fault for
// finish.
func (x *exchange) begin(op string, fail func(status int, code, msg string)) bool {
	x.rec.Service, x.rec.Op = x.service, op
	if p, status, code, msg := x.e.authenticate(x.r, x.body, x.service); p == nil {
		fail(status, code, msg)
		return false
	} else {
		x.caller = p
	}
	f := x.e.takeFault(op)
	if f == nil {
		return true
	}
	if f.Drop || f.AfterActing {
		x.fault = f
		return true
	}
	x.faultHeaders(f)
	fail(f.Status, f.Code, f.message())
	return false
}

func (f *Fault) message() string {
	if f.Message != "" {
		return f.Message
	}
	return f.Code
}

func (x *exchange) faultHeaders(f *Fault) {
	if f.RetryAfter > 0 {
		x.w.Header().Set("Retry-After", fmt.Sprintf("%d", int(f.RetryAfter.Round(time.Second)/time.Second)))
	}
}

// dropOrFail is called by a handler after it acted: a Drop fault closes the
// connection unanswered, an AfterActing fault answers its error. It reports
// whether it answered.
func (x *exchange) dropOrFail(fail func(status int, code, msg string)) bool {
	f := x.fault
	if f == nil {
		return false
	}
	if f.Drop {
		x.rec.Status = 0
		if hj, ok := x.w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				if tc, ok := conn.(*net.TCPConn); ok {
					_ = tc.SetLinger(0) // a reset, not a tidy close
				}
				_ = conn.Close()
				return true
			}
		}
		// Without a hijackable connection, a panic with ErrAbortHandler
		// makes net/http drop the answer too.
		panic(http.ErrAbortHandler)
	}
	x.faultHeaders(f)
	fail(f.Status, f.Code, f.message())
	return true
}

// now is the emulator's time.
func (e *Emulator) now() time.Time { return e.clk.Now() }

// epoch renders a time as EKS does: JSON seconds, fractional.
func epoch(t time.Time) float64 {
	return float64(t.UnixMilli()) / 1000
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
