package clients

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/providers/aws/eksemu"
)

const (
	akid     = "AKIDAWSCLI0000000001"
	secret   = "aws-cli-suite-secret"
	userArn  = "arn:aws:iam::111111111111:user/cli"
	roleArn  = "arn:aws:iam::111111111111:role/eks"
	nodeRole = "arn:aws:iam::111111111111:role/node"
	subnetA  = "subnet-0000000000000000a"
	subnetB  = "subnet-0000000000000001b"
	region   = "us-east-1"
)

// installHelp is what a machine without the AWS CLI needs.
const installHelp = `no AWS CLI found. Install Debian's (CI does): sudo apt-get install -y --no-install-recommends awscli
or AWS CLI v1 with pip: python3 -m pip install awscli; or point FLEET_AWS_CLI at one or more aws binaries (colon-separated)`

// cli is one AWS CLI found on this machine.
type cli struct {
	path    string
	version string // "aws-cli/1.45.11 Python/3.11.7 ..."
	major   int
}

// findCLIs finds every distinct AWS CLI: those FLEET_AWS_CLI names, the
// one on PATH, pyenv's shim and the usual system places. Two paths that
// report the same version are one CLI.
func findCLIs(t *testing.T) []cli {
	t.Helper()
	var candidates []string
	if env := os.Getenv("FLEET_AWS_CLI"); env != "" {
		candidates = append(candidates, filepath.SplitList(env)...)
	}
	if p, err := exec.LookPath("aws"); err == nil {
		candidates = append(candidates, p)
	}
	home, _ := os.UserHomeDir()
	pyenv := os.Getenv("PYENV_ROOT")
	if pyenv == "" && home != "" {
		pyenv = filepath.Join(home, ".pyenv")
	}
	candidates = append(candidates, filepath.Join(pyenv, "shims", "aws"), "/usr/bin/aws", "/usr/local/bin/aws")
	var out []cli
	seen := map[string]bool{}
	for _, p := range candidates {
		if st, err := os.Stat(p); err != nil || st.IsDir() || seen[p] {
			continue
		}
		seen[p] = true
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		b, err := exec.CommandContext(ctx, p, "--version").CombinedOutput()
		cancel()
		if err != nil {
			t.Logf("%s --version: %v: %s", p, err, b)
			continue
		}
		v := strings.TrimSpace(string(b))
		m := regexp.MustCompile(`^aws-cli/(\d+)\.`).FindStringSubmatch(v)
		if m == nil || slices.ContainsFunc(out, func(c cli) bool { return c.version == v }) {
			continue
		}
		major, _ := strconv.Atoi(m[1])
		out = append(out, cli{path: p, version: v, major: major})
	}
	if len(out) == 0 {
		t.Fatal(installHelp)
	}
	return out
}

// TestAWSCLI runs the CLI's flows against a fresh emulator, once per CLI
// found.
func TestAWSCLI(t *testing.T) {
	for _, c := range findCLIs(t) {
		t.Run(fmt.Sprintf("v%d", c.major), func(t *testing.T) {
			t.Logf("%s: %s", c.path, c.version)
			runFlows(t, c)
		})
	}
}

// session is one CLI against one emulator.
type session struct {
	t   *testing.T
	cli cli
	emu *eksemu.Emulator
	url string
	env []string
}

func newSession(t *testing.T, c cli) *session {
	// Two observations make a cluster or node group ACTIVE: a describe
	// shows CREATING, the waiter's first poll ACTIVE. The CLI's waiters
	// poll every 30 s, so the emulator never makes one wait a second poll
	// unless the flow is wrong (which then fails on the command deadline).
	e := eksemu.New(eksemu.Options{Region: region, Steps: &eksemu.Steps{Cluster: 2, Nodegroup: 2, Update: 1, Delete: 1}})
	url := e.Start()
	t.Cleanup(e.Close)
	e.AddUser(akid, secret, userArn)
	dir := t.TempDir()
	config, creds := filepath.Join(dir, "config"), filepath.Join(dir, "credentials")
	if err := os.WriteFile(config, []byte("[default]\nregion = "+region+"\noutput = json\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(creds, []byte("[default]\naws_access_key_id = "+akid+"\naws_secret_access_key = "+secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AWS_") {
			env = append(env, kv) // PATH, HOME and PYENV_* for the pyenv shim
		}
	}
	env = append(env,
		"AWS_ACCESS_KEY_ID="+akid, "AWS_SECRET_ACCESS_KEY="+secret,
		"AWS_CONFIG_FILE="+config, "AWS_SHARED_CREDENTIALS_FILE="+creds,
		"AWS_DEFAULT_REGION="+region, "AWS_REGION="+region,
		"AWS_EC2_METADATA_DISABLED=true", "AWS_PAGER=", "AWS_CLI_AUTO_PROMPT=off",
		// One attempt: an error the emulator answers is the error the
		// test sees, not one retried behind its back.
		"AWS_MAX_ATTEMPTS=1", "AWS_RETRY_MODE=standard",
	)
	return &session{t: t, cli: c, emu: e, url: url, env: env}
}

// run runs `aws <args> --endpoint-url URL --output json` and returns its
// exit code, stdout and stderr. Every command has a deadline, so a waiter
// that would poll for 20 minutes fails instead.
func (s *session) run(args ...string) (int, []byte, string) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(s.t.Context(), 100*time.Second)
	defer cancel()
	args = append(args, "--endpoint-url", s.url, "--output", "json")
	cmd := exec.CommandContext(ctx, s.cli.path, args...)
	cmd.Env = s.env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	began := time.Now()
	err := cmd.Run()
	if d := time.Since(began); d > 20*time.Second {
		s.t.Logf("aws %s took %s", strings.Join(args[:2], " "), d.Round(time.Second))
	}
	if ctx.Err() != nil {
		s.t.Fatalf("aws %s: no answer within the deadline (a waiter polling a state that never comes?)\n%s", strings.Join(args, " "), stderr.String())
	}
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			s.t.Fatalf("aws %s: %v", strings.Join(args, " "), err)
		}
		code = ee.ExitCode()
	}
	return code, stdout.Bytes(), stderr.String()
}

// ok runs a command that must succeed and decodes its JSON output (none
// for the waiters).
func (s *session) ok(args ...string) map[string]any {
	s.t.Helper()
	code, out, errOut := s.run(args...)
	if code != 0 {
		s.t.Fatalf("aws %s: exit %d\n%s", strings.Join(args, " "), code, errOut)
	}
	if len(bytes.TrimSpace(out)) == 0 {
		return nil
	}
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		s.t.Fatalf("aws %s: output is not JSON: %v\n%s", strings.Join(args, " "), err, out)
	}
	return m
}

// fails runs a command that must fail with the service error code and a
// message containing msg, with the CLI's exit code for a service error
// (255 for v1, 254 for v2).
func (s *session) fails(code, op, msg string, args ...string) {
	s.t.Helper()
	exit, _, errOut := s.run(args...)
	want := 255
	if s.cli.major >= 2 {
		want = 254
	}
	// v1 and v2 both print "An error occurred (Code) when calling the Op
	// operation (reached max retries: N): message".
	prefix := fmt.Sprintf("An error occurred (%s) when calling the %s operation", code, op)
	if exit != want || !strings.Contains(errOut, prefix) || !strings.Contains(errOut, "): "+msg) {
		s.t.Errorf("aws %s: exit %d, stderr %q; want exit %d, %q and %q", strings.Join(args, " "), exit, errOut, want, prefix, msg)
	}
}

// str walks a decoded JSON object by keys.
func str(m map[string]any, keys ...string) string {
	var v any = m
	for _, k := range keys {
		o, ok := v.(map[string]any)
		if !ok {
			return ""
		}
		v = o[k]
	}
	switch x := v.(type) {
	case string:
		return x
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case bool:
		return strconv.FormatBool(x)
	case nil:
		return ""
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func (s *session) want(what, got, want string) {
	s.t.Helper()
	if got != want {
		s.t.Errorf("%s = %q, want %q", what, got, want)
	}
}

func runFlows(t *testing.T, c cli) {
	s := newSession(t, c)

	// Cluster: create, read while CREATING, wait, list.
	created := s.ok("eks", "create-cluster", "--name", "c1", "--role-arn", roleArn, "--kubernetes-version", "1.33",
		"--resources-vpc-config", "subnetIds="+subnetA+","+subnetB, "--tags", "team=fleet")
	s.want("created status", str(created, "cluster", "status"), "CREATING")
	s.want("created arn", str(created, "cluster", "arn"), "arn:aws:eks:us-east-1:111111111111:cluster/c1")
	if str(created, "cluster", "clientRequestToken") == "" {
		t.Errorf("the CLI's idempotency token is not echoed: %v", created)
	}
	s.want("describe while creating", str(s.ok("eks", "describe-cluster", "--name", "c1"), "cluster", "status"), "CREATING")
	s.ok("eks", "wait", "cluster-active", "--name", "c1")
	active := s.ok("eks", "describe-cluster", "--name", "c1")
	s.want("status", str(active, "cluster", "status"), "ACTIVE")
	s.want("version", str(active, "cluster", "version"), "1.33")
	if !strings.HasPrefix(str(active, "cluster", "endpoint"), "https://") || str(active, "cluster", "certificateAuthority", "data") == "" {
		t.Errorf("an ACTIVE cluster lacks its endpoint or CA: %v", active["cluster"])
	}
	s.want("list", str(s.ok("eks", "list-clusters"), "clusters"), `["c1"]`)
	s.fails("ResourceInUseException", "CreateCluster", "Cluster already exists with name: c1",
		"eks", "create-cluster", "--name", "c1", "--role-arn", roleArn, "--resources-vpc-config", "subnetIds="+subnetA+","+subnetB)
	s.fails("ResourceNotFoundException", "DescribeCluster", "No cluster found for name: nope.", "eks", "describe-cluster", "--name", "nope")
	s.fails("InvalidParameterException", "CreateCluster", "The clusterName parameter contains invalid characters",
		"eks", "create-cluster", "--name", "bad.name", "--role-arn", roleArn, "--resources-vpc-config", "subnetIds="+subnetA+","+subnetB)

	// The reads around a create.
	s.want("addons", str(s.ok("eks", "list-addons", "--cluster-name", "c1"), "addons"), `[]`)
	versions := s.ok("eks", "describe-addon-versions", "--kubernetes-version", "1.33", "--addon-name", "vpc-cni")
	// Older CLIs' models lack computeTypes, requiresIamPermissions and
	// defaultNamespace and drop them: only members every model has.
	addons, _ := versions["addons"].([]any)
	if len(addons) != 1 {
		t.Fatalf("describe-addon-versions: %v", versions)
	}
	addon := addons[0].(map[string]any)
	s.want("addon", str(addon, "addonName"), "vpc-cni")
	s.want("addon versions", str(addon, "addonVersions"), map[int]string{
		1: `[{"addonVersion":"v1.20.1-eksbuild.1","architecture":["amd64","arm64"],"compatibilities":[{"clusterVersion":"1.33","defaultVersion":true,"platformVersions":["*"]}],"computeTypes":["ec2"],"requiresConfiguration":false,"requiresIamPermissions":true}]`,
		2: `[{"addonVersion":"v1.20.1-eksbuild.1","architecture":["amd64","arm64"],"compatibilities":[{"clusterVersion":"1.33","defaultVersion":true,"platformVersions":["*"]}],"requiresConfiguration":false}]`,
	}[c.major])
	zones := s.ok("ec2", "describe-availability-zones")
	s.want("zones", str(zones, "AvailabilityZones"), `[{"GroupName":"us-east-1-zg-1","Messages":[],"NetworkBorderGroup":"us-east-1","OptInStatus":"opt-in-not-required","RegionName":"us-east-1","State":"available","ZoneId":"use1-az1","ZoneName":"us-east-1a","ZoneType":"availability-zone"},{"GroupName":"us-east-1-zg-1","Messages":[],"NetworkBorderGroup":"us-east-1","OptInStatus":"opt-in-not-required","RegionName":"us-east-1","State":"available","ZoneId":"use1-az2","ZoneName":"us-east-1b","ZoneType":"availability-zone"},{"GroupName":"us-east-1-zg-1","Messages":[],"NetworkBorderGroup":"us-east-1","OptInStatus":"opt-in-not-required","RegionName":"us-east-1","State":"available","ZoneId":"use1-az3","ZoneName":"us-east-1c","ZoneType":"availability-zone"}]`)

	// A version update, tracked and waited for.
	s.fails("InvalidParameterException", "UpdateClusterVersion", "Unsupported Kubernetes minor version update from 1.33 to 1.35",
		"eks", "update-cluster-version", "--name", "c1", "--kubernetes-version", "1.35")
	upd := s.ok("eks", "update-cluster-version", "--name", "c1", "--kubernetes-version", "1.34")
	s.want("update type", str(upd, "update", "type"), "VersionUpdate")
	s.fails("ResourceInUseException", "UpdateClusterVersion", "Cluster c1 is currently UPDATING",
		"eks", "update-cluster-version", "--name", "c1", "--kubernetes-version", "1.34")
	s.want("describe-update", str(s.ok("eks", "describe-update", "--name", "c1", "--update-id", str(upd, "update", "id")), "update", "status"), "InProgress")
	s.ok("eks", "wait", "cluster-active", "--name", "c1")
	s.want("updated version", str(s.ok("eks", "describe-cluster", "--name", "c1"), "cluster", "version"), "1.34")
	s.want("update done", str(s.ok("eks", "describe-update", "--name", "c1", "--update-id", str(upd, "update", "id")), "update", "status"), "Successful")

	// Node group: create, read while CREATING, wait, list, resize, delete.
	ng := s.ok("eks", "create-nodegroup", "--cluster-name", "c1", "--nodegroup-name", "ng1", "--node-role", nodeRole,
		"--subnets", subnetA, subnetB, "--instance-types", "t3.medium", "--labels", "pool=p1",
		"--scaling-config", "minSize=1,maxSize=3,desiredSize=2")
	s.want("nodegroup status", str(ng, "nodegroup", "status"), "CREATING")
	s.want("describe-nodegroup while creating", str(s.ok("eks", "describe-nodegroup", "--cluster-name", "c1", "--nodegroup-name", "ng1"), "nodegroup", "status"), "CREATING")
	s.ok("eks", "wait", "nodegroup-active", "--cluster-name", "c1", "--nodegroup-name", "ng1")
	s.want("list-nodegroups", str(s.ok("eks", "list-nodegroups", "--cluster-name", "c1"), "nodegroups"), `["ng1"]`)
	s.fails("ResourceInUseException", "CreateNodegroup", "NodeGroup already exists with name ng1 and cluster name c1",
		"eks", "create-nodegroup", "--cluster-name", "c1", "--nodegroup-name", "ng1", "--node-role", nodeRole, "--subnets", subnetA)
	s.fails("InvalidParameterException", "UpdateNodegroupConfig", "Minimum capacity 3 can't be greater than desired size 1",
		"eks", "update-nodegroup-config", "--cluster-name", "c1", "--nodegroup-name", "ng1", "--scaling-config", "minSize=3,maxSize=4,desiredSize=1")
	resize := s.ok("eks", "update-nodegroup-config", "--cluster-name", "c1", "--nodegroup-name", "ng1", "--scaling-config", "minSize=0,maxSize=4,desiredSize=3")
	s.want("resize type", str(resize, "update", "type"), "ConfigUpdate")
	s.want("resize params", str(resize, "update", "params"), `[{"type":"MinSize","value":"0"},{"type":"MaxSize","value":"4"},{"type":"DesiredSize","value":"3"}]`)
	s.fails("ResourceInUseException", "UpdateNodegroupConfig", "Nodegroup cannot be updated as it is currently not in Active State",
		"eks", "update-nodegroup-config", "--cluster-name", "c1", "--nodegroup-name", "ng1", "--scaling-config", "desiredSize=2")
	s.ok("eks", "wait", "nodegroup-active", "--cluster-name", "c1", "--nodegroup-name", "ng1")
	s.want("resized", str(s.ok("eks", "describe-nodegroup", "--cluster-name", "c1", "--nodegroup-name", "ng1"), "nodegroup", "scalingConfig"), `{"desiredSize":3,"maxSize":4,"minSize":0}`)
	s.fails("ResourceInUseException", "DeleteCluster", "Cluster has nodegroups attached", "eks", "delete-cluster", "--name", "c1")

	// A node group's version: never past its cluster's; moved to it after
	// the control plane, with an update id its waiter and describe-update
	// follow.
	s.fails("InvalidParameterException", "UpdateNodegroupVersion", "Requested Nodegroup Kubernetes version 1.35 is not supported by Amazon EKS. Nodegroup Kubernetes version should be equal to Cluster kubernetes version 1.34",
		"eks", "update-nodegroup-version", "--cluster-name", "c1", "--nodegroup-name", "ng1", "--kubernetes-version", "1.35")
	s.ok("eks", "update-cluster-version", "--name", "c1", "--kubernetes-version", "1.35")
	s.ok("eks", "wait", "cluster-active", "--name", "c1")
	ngu := s.ok("eks", "update-nodegroup-version", "--cluster-name", "c1", "--nodegroup-name", "ng1")
	s.want("nodegroup update type", str(ngu, "update", "type"), "VersionUpdate")
	s.want("nodegroup update params", str(ngu, "update", "params"), `[{"type":"Version","value":"1.35"},{"type":"ReleaseVersion","value":"1.35.0-20260101"}]`)
	s.want("describe-update of the node group", str(s.ok("eks", "describe-update", "--name", "c1", "--nodegroup-name", "ng1", "--update-id", str(ngu, "update", "id")), "update", "status"), "InProgress")
	s.fails("ResourceInUseException", "UpdateNodegroupVersion", "Nodegroup cannot be updated as it is currently not in Active State",
		"eks", "update-nodegroup-version", "--cluster-name", "c1", "--nodegroup-name", "ng1")
	s.ok("eks", "wait", "nodegroup-active", "--cluster-name", "c1", "--nodegroup-name", "ng1")
	s.want("node group version", str(s.ok("eks", "describe-nodegroup", "--cluster-name", "c1", "--nodegroup-name", "ng1"), "nodegroup", "version"), "1.35")
	s.want("node group update done", str(s.ok("eks", "describe-update", "--name", "c1", "--nodegroup-name", "ng1", "--update-id", str(ngu, "update", "id")), "update", "status"), "Successful")

	// get-token, reviewed by the cluster's TokenReview route.
	tok := s.ok("eks", "get-token", "--cluster-name", "c1")
	token := str(tok, "status", "token")
	if !strings.HasPrefix(token, "k8s-aws-v1.") {
		t.Fatalf("get-token: %v", tok)
	}
	s.want("review", s.review("c1", token), "true")
	s.want("review for another cluster", s.review("c2", token), "false")

	deleted := s.ok("eks", "delete-nodegroup", "--cluster-name", "c1", "--nodegroup-name", "ng1")
	s.want("deleting", str(deleted, "nodegroup", "status"), "DELETING")
	s.ok("eks", "wait", "nodegroup-deleted", "--cluster-name", "c1", "--nodegroup-name", "ng1")
	s.fails("ResourceNotFoundException", "DescribeNodegroup", "No node group found for name: ng1.",
		"eks", "describe-nodegroup", "--cluster-name", "c1", "--nodegroup-name", "ng1")
	s.want("cluster deleting", str(s.ok("eks", "delete-cluster", "--name", "c1"), "cluster", "status"), "DELETING")
	s.ok("eks", "wait", "cluster-deleted", "--name", "c1")
	s.want("list after delete", str(s.ok("eks", "list-clusters"), "clusters"), `[]`)

	var ops []string
	for op, n := range s.emu.Counts() {
		ops = append(ops, fmt.Sprintf("%s×%d", op, n))
	}
	sort.Strings(ops)
	t.Logf("operations the CLI ran: %s", strings.Join(ops, " "))
}

// review posts a TokenReview to the emulator's route for one cluster, as
// kube-apiserver's webhook authenticator would, and returns whether it
// authenticated the token.
func (s *session) review(cluster, token string) string {
	s.t.Helper()
	body, _ := json.Marshal(map[string]any{"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": map[string]any{"token": token}})
	resp, err := http.Post(s.url+"/authenticate/"+cluster, "application/json", bytes.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Status struct {
			Authenticated bool `json:"authenticated"`
			User          struct {
				Username string   `json:"username"`
				Groups   []string `json:"groups"`
			} `json:"user"`
		} `json:"status"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		s.t.Fatal(err)
	}
	if out.Status.Authenticated && out.Status.User.Username != userArn {
		s.t.Errorf("the token authenticated %q, want %q", out.Status.User.Username, userArn)
	}
	return strconv.FormatBool(out.Status.Authenticated)
}
