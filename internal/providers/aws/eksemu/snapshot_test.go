package eksemu_test

// The wire check: the SDK's generator ships, beside the Go code of each
// service module, request_snapshot/ (the exact request of every operation,
// every member filled) and response_snapshot/ (every member of every
// answer, and every modeled error with its status). This test replays the
// request snapshots of the operations the emulator serves through its
// router, signed as the SDK signs, and holds each answer against the
// response snapshot's shape: the same status, no member the SDK does not
// know, each member of the JSON type the SDK expects, and every member of
// the answer's root. The emulator decodes requests strictly, so a member of
// a request it does not model fails the replay instead of being dropped.
//
// The snapshots are read from the module cache at the version go.mod
// names (go list -m), so a new SDK brings its new snapshots with it.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
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

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/fleet-agent/fleet-agent/internal/providers/aws/eksemu"
)

// moduleDir is where a module of go.mod's version lies in the module
// cache.
func moduleDir(t *testing.T, module string) string {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), "go", "list", "-m", "-f", "{{.Dir}}", module).Output()
	dir := strings.TrimSpace(string(out))
	if err != nil || dir == "" {
		t.Fatalf("go list -m %s: %v (is it in go.mod and downloaded?)", module, err)
	}
	return dir
}

// wire is a snapshot: a request (method, path, headers, body) or an answer
// (status, headers, body).
type wire struct {
	method, target string
	status         int
	header         http.Header
	body           []byte
}

// readSnapshot parses the snapshot format: a first line (`METHOD TARGET`
// for a request, after which a blank line comes, or a status), header
// lines, a blank line, the body.
func readSnapshot(t *testing.T, path string) wire {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	lines := strings.Split(string(raw), "\n")
	w := wire{header: http.Header{}}
	i := 1
	if n, err := strconv.Atoi(strings.TrimSpace(lines[0])); err == nil {
		w.status = n
	} else {
		w.method, w.target, _ = strings.Cut(strings.TrimSpace(lines[0]), " ")
		if i < len(lines) && lines[i] == "" {
			i++
		}
	}
	for ; i < len(lines) && lines[i] != ""; i++ {
		k, v, _ := strings.Cut(lines[i], ": ")
		w.header.Add(k, v)
	}
	if i < len(lines) {
		w.body = bytes.TrimSpace([]byte(strings.Join(lines[i+1:], "\n")))
	}
	return w
}

var placeholder = regexp.MustCompile(`__([A-Za-z0-9]+)__`)

const (
	snapCluster   = "snap-cluster"
	snapNodegroup = "snap-ng"
	snapPrincipal = "arn:aws:iam::111111111111:role/snap"
	snapRole      = "arn:aws:iam::111111111111:role/snap-role"
	snapToken     = "0123456789abcdef0123456789abcdef0123"
)

// replayer signs and sends snapshot requests, filling their placeholders
// with values the emulator takes, and values earlier answers gave.
type replayer struct {
	t    *testing.T
	emu  *eksemu.Emulator
	srv  *httptest.Server
	vals map[string]string
	// tokens counts the client tokens filled in.
	tokens int
}

func newReplayer(t *testing.T, emu *eksemu.Emulator) *replayer {
	emu.AddUser("AKIDSNAPSHOT", "snapshot-secret", "arn:aws:iam::111111111111:user/snap")
	emu.AddRole(snapRole, "arn:aws:iam::111111111111:user/snap")
	srv := httptest.NewServer(emu)
	t.Cleanup(srv.Close)
	return &replayer{t: t, emu: emu, srv: srv, vals: map[string]string{
		"Name": snapCluster, "ClusterName": snapCluster, "NodegroupName": snapNodegroup,
		"PrincipalArn": snapPrincipal, "PolicyArn": eksemu.ClusterAdminPolicy, "AssociatedPolicyArn": eksemu.ClusterAdminPolicy,
	}}
}

// value fills one placeholder, by its name and the JSON member it is in.
func (p *replayer) value(name, member string) string {
	switch member {
	case "roleArn", "nodeRole", "nodeRoleArn":
		return snapRole
	case "version":
		return p.vals["Version"]
	case "clientRequestToken":
		p.tokens++ // a token per request, as the SDK makes them
		return snapToken + strconv.Itoa(p.tokens)
	case "instanceTypes":
		return "m5.large"
	case "type":
		return "STANDARD"
	case "publicAccessCidrs", "cidrs":
		return "203.0.113.0/24"
	}
	if v, ok := p.vals[name]; ok {
		return v
	}
	return "snap-" + strings.ToLower(name)
}

// fill replaces placeholders in a JSON body; subnet lists become two real
// subnets.
func (p *replayer) fill(v any, member string) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = p.fill(e, k)
		}
		return x
	case []any:
		if member == "subnetIds" || member == "subnets" {
			return []any{"subnet-0000000000000000a", "subnet-0000000000000001b"}
		}
		for i, e := range x {
			x[i] = p.fill(e, member)
		}
		return x
	case string:
		if m := placeholder.FindStringSubmatch(x); m != nil && m[0] == x {
			return p.value(m[1], member)
		}
	}
	return v
}

// fillTarget replaces placeholders in the path (escaped, one segment at a
// time, as the SDK escapes labels) and the query (a paging token the
// snapshot invents is left out).
func (p *replayer) fillTarget(target string) string {
	path, query, _ := strings.Cut(target, "?")
	segs := strings.Split(path, "/")
	for i, s := range segs {
		if m := placeholder.FindStringSubmatch(s); m != nil {
			segs[i] = url.PathEscape(p.value(m[1], ""))
		}
	}
	q, _ := url.ParseQuery(query)
	for k, vs := range q {
		for i, v := range vs {
			if m := placeholder.FindStringSubmatch(v); m != nil {
				switch {
				case m[1] == "NextToken":
					delete(q, k)
				case k == "include":
					vs[i] = "all"
				case k == "tagKeys":
					vs[i] = "key0"
				default:
					vs[i] = p.value(m[1], "")
				}
			}
		}
	}
	out := strings.Join(segs, "/")
	if len(q) > 0 {
		out += "?" + q.Encode()
	}
	return out
}

// send signs a request as the SDK does and returns the answer.
func (p *replayer) send(service, method, target string, header http.Header, body []byte) wire {
	req, err := http.NewRequestWithContext(p.t.Context(), method, p.srv.URL+target, bytes.NewReader(body))
	if err != nil {
		p.t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	h := sha256.Sum256(body)
	creds := sdkaws.Credentials{AccessKeyID: "AKIDSNAPSHOT", SecretAccessKey: "snapshot-secret"}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, hex.EncodeToString(h[:]), service, "us-east-1", time.Now()); err != nil {
		p.t.Fatal(err)
	}
	resp, err := p.srv.Client().Do(req)
	if err != nil {
		p.t.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return wire{status: resp.StatusCode, header: resp.Header, body: bytes.TrimSpace(b)}
}

// jsonShape checks that got has only members want has, each of the JSON
// type want's is; a map member (the snapshot's single key0) takes any key.
func jsonShape(got, want any, path string, errs *[]string) {
	bad := func(format string, args ...any) { *errs = append(*errs, path+": "+fmt.Sprintf(format, args...)) }
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			bad("want an object, got %T", got)
			return
		}
		if _, isMap := w["key0"]; isMap && len(w) == 1 {
			for k, v := range g {
				jsonShape(v, w["key0"], path+"."+k, errs)
			}
			return
		}
		for k, v := range g {
			wv, ok := w[k]
			if !ok {
				bad("member %q is not in the SDK's shape", k)
				continue
			}
			jsonShape(v, wv, path+"."+k, errs)
		}
	case []any:
		g, ok := got.([]any)
		if !ok {
			bad("want a list, got %T", got)
			return
		}
		for i, v := range g {
			if len(w) > 0 {
				jsonShape(v, w[0], fmt.Sprintf("%s[%d]", path, i), errs)
			}
		}
	case string:
		if _, ok := got.(string); !ok {
			bad("want a string, got %T", got)
		}
	case float64:
		if _, ok := got.(float64); !ok {
			bad("want a number, got %T", got)
		}
	case bool:
		if _, ok := got.(bool); !ok {
			bad("want a boolean, got %T", got)
		}
	}
}

func decodeJSON(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("not JSON: %v: %s", err, b)
	}
	return v
}

// checkAnswer holds an EKS answer against its snapshot (a response or an
// error).
func checkAnswer(t *testing.T, dir, what string, got wire) {
	t.Helper()
	var name string
	if got.status == http.StatusOK {
		name = what + ".response.snap"
	} else {
		code := got.header.Get("X-Amzn-Errortype")
		if code == "" {
			t.Fatalf("%s: an error without X-Amzn-ErrorType: %d %s", what, got.status, got.body)
		}
		name = code + ".error.snap"
	}
	want := readSnapshot(t, filepath.Join(dir, "response_snapshot", name))
	if got.status != want.status {
		t.Errorf("%s: status %d, the snapshot %s says %d", what, got.status, name, want.status)
	}
	if len(want.body) == 0 {
		if len(got.body) != 0 {
			t.Errorf("%s: body %s, the snapshot has none", what, got.body)
		}
		return
	}
	if ct := got.header.Get("Content-Type"); ct != want.header.Get("Content-Type") {
		t.Errorf("%s: Content-Type %q, want %q", what, ct, want.header.Get("Content-Type"))
	}
	g, w := decodeJSON(t, got.body), decodeJSON(t, want.body)
	var errs []string
	jsonShape(g, w, what, &errs)
	if got.status == http.StatusOK {
		for k := range w.(map[string]any) {
			if _, ok := g.(map[string]any)[k]; !ok && k != "nextToken" {
				errs = append(errs, fmt.Sprintf("%s: root member %q missing", what, k))
			}
		}
	} else if typ, _ := g.(map[string]any)["__type"].(string); typ != got.header.Get("X-Amzn-Errortype") {
		errs = append(errs, fmt.Sprintf("%s: __type %q and X-Amzn-ErrorType %q differ", what, typ, got.header.Get("X-Amzn-Errortype")))
	}
	for _, e := range errs {
		t.Error(e)
	}
}

// eksReplay is one replay of an EKS request snapshot.
type eksReplay struct {
	op string
	// edit changes the filled body before it is sent; nil sends it as the
	// snapshot has it. Each edit says why.
	edit func(body map[string]any)
	// code is the error the emulator must answer; "" is success.
	code string
}

func TestEKSAgainstSDKSnapshots(t *testing.T) {
	dir := moduleDir(t, "github.com/aws/aws-sdk-go-v2/service/eks")
	emu := eksemu.New(eksemu.Options{Steps: &eksemu.Steps{}})
	p := newReplayer(t, emu)
	p.vals["Version"] = "1.34"
	removeLaunchTemplate := func(b map[string]any) {
		// A launch template excludes diskSize and remoteAccess, as EKS says.
		delete(b, "launchTemplate")
	}
	clusterScope := func(b map[string]any) {
		// A cluster scope takes no namespaces.
		delete(b["accessScope"].(map[string]any), "namespaces")
	}
	replays := []eksReplay{
		{op: "CreateCluster", edit: func(b map[string]any) {
			// Kept deletable for the DeleteCluster replay below.
			b["deletionProtection"] = false
		}},
		{op: "CreateCluster", code: "ResourceInUseException"}, // the name exists; another body
		{op: "DescribeCluster"},
		{op: "ListClusters"},
		{op: "TagResource"},
		{op: "ListTagsForResource"},
		{op: "UntagResource"},
		{op: "CreateNodegroup", code: "InvalidParameterException"}, // launchTemplate with diskSize
		{op: "CreateNodegroup", edit: removeLaunchTemplate},
		{op: "DescribeNodegroup"},
		{op: "ListNodegroups"},
		{op: "UpdateNodegroupConfig"},
		{op: "DescribeUpdate"},
		{op: "ListUpdates"},
		{op: "CreateAccessEntry"},
		{op: "CreateAccessEntry", code: "ResourceInUseException"},
		{op: "DescribeAccessEntry"},
		{op: "ListAccessEntries"},
		{op: "AssociateAccessPolicy", code: "InvalidParameterException"}, // namespaces with a cluster scope
		{op: "AssociateAccessPolicy", edit: clusterScope},
		{op: "ListAssociatedAccessPolicies"},
		{op: "DisassociateAccessPolicy"},
		{op: "DeleteAccessEntry"},
		{op: "DeleteCluster", code: "ResourceInUseException"}, // node groups attached
		{op: "DeleteNodegroup"},
		{op: "UpdateClusterVersion"},
		{op: "DescribeCluster"},
		{op: "DeleteCluster"},
		{op: "DescribeCluster", code: "ResourceNotFoundException"},
	}
	for i, r := range replays {
		t.Run(fmt.Sprintf("%02d-%s", i, r.op), func(t *testing.T) {
			req := readSnapshot(t, filepath.Join(dir, "request_snapshot", r.op+".request.snap"))
			if r.op == "UpdateClusterVersion" {
				p.vals["Version"] = "1.35" // one minor up
			}
			body := req.body
			if len(body) > 0 {
				m := decodeJSON(t, body).(map[string]any)
				p.fill(m, "")
				if r.edit != nil {
					r.edit(m)
				}
				body, _ = json.Marshal(m)
			}
			n := len(emu.Requests())
			got := p.send("eks", req.method, p.fillTarget(req.target), req.header, body)
			recs := emu.Requests()
			if len(recs) != n+1 || recs[n].Op != r.op {
				t.Fatalf("the snapshot's %s %s was not routed to %s: %+v", req.method, req.target, r.op, recs[n:])
			}
			gotCode := got.header.Get("X-Amzn-Errortype")
			if gotCode != r.code {
				t.Fatalf("%s: answered %d %s %s, want %q", r.op, got.status, gotCode, got.body, r.code)
			}
			checkAnswer(t, dir, r.op, got)
			if got.status == http.StatusOK && len(got.body) > 0 {
				m := decodeJSON(t, got.body).(map[string]any)
				if c, ok := m["cluster"].(map[string]any); ok {
					p.vals["ResourceArn"] = c["arn"].(string)
				}
				if u, ok := m["update"].(map[string]any); ok {
					p.vals["UpdateId"] = u["id"].(string)
				}
			}
		})
	}
}

// xmlPaths lists the element paths of an XML document (`A/B/C`), leaving
// out ResponseMetadata, which the SDK reads apart from the result.
func xmlPaths(t *testing.T, b []byte) []string {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(b))
	var stack, out []string
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not XML: %v: %s", err, b)
		}
		switch e := tok.(type) {
		case xml.StartElement:
			stack = append(stack, e.Name.Local)
			p := strings.Join(stack, "/")
			if !strings.Contains(p, "ResponseMetadata") && !slices.Contains(out, p) {
				out = append(out, p)
			}
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		}
	}
	sort.Strings(out)
	return out
}

func formOf(t *testing.T, body []byte) url.Values {
	t.Helper()
	q, err := url.ParseQuery(string(body))
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// TestSTSAgainstSDKSnapshots replays STS's GetCallerIdentity and
// AssumeRole snapshots (awsQuery) and holds the XML answers to the
// response snapshots' elements.
func TestSTSAgainstSDKSnapshots(t *testing.T) {
	dir := moduleDir(t, "github.com/aws/aws-sdk-go-v2/service/sts")
	emu := eksemu.New(eksemu.Options{})
	p := newReplayer(t, emu)
	for _, op := range []string{"GetCallerIdentity", "AssumeRole"} {
		t.Run(op, func(t *testing.T) {
			req := readSnapshot(t, filepath.Join(dir, "request_snapshot", op+".request.snap"))
			form := formOf(t, req.body)
			for k, vs := range form {
				for i, v := range vs {
					if m := placeholder.FindStringSubmatch(v); m != nil {
						vs[i] = "snap" + strings.ToLower(m[1])
					}
				}
				form[k] = vs
			}
			if op == "AssumeRole" {
				// Values STS takes: a role the caller may assume, a session
				// name, a duration of at least 900 s.
				form.Set("RoleArn", snapRole)
				form.Set("RoleSessionName", "snapshot")
				form.Set("DurationSeconds", "900")
			}
			got := p.send("sts", req.method, req.target, req.header, []byte(form.Encode()))
			if got.status != http.StatusOK {
				t.Fatalf("%s: %d %s", op, got.status, got.body)
			}
			if recs := emu.Requests(); recs[len(recs)-1].Op != op {
				t.Fatalf("routed to %q", recs[len(recs)-1].Op)
			}
			want := readSnapshot(t, filepath.Join(dir, "response_snapshot", op+".response.snap"))
			wantPaths := xmlPaths(t, want.body)
			for _, gp := range xmlPaths(t, got.body) {
				if !slices.Contains(wantPaths, gp) {
					t.Errorf("%s: element %s is not in the SDK's shape %v", op, gp, wantPaths)
				}
			}
			// Every element the adapter reads is there.
			for _, need := range map[string][]string{
				"GetCallerIdentity": {"GetCallerIdentityResponse/GetCallerIdentityResult/Arn", "GetCallerIdentityResponse/GetCallerIdentityResult/Account"},
				"AssumeRole": {"AssumeRoleResponse/AssumeRoleResult/Credentials/AccessKeyId", "AssumeRoleResponse/AssumeRoleResult/Credentials/SecretAccessKey",
					"AssumeRoleResponse/AssumeRoleResult/Credentials/SessionToken", "AssumeRoleResponse/AssumeRoleResult/Credentials/Expiration"},
			}[op] {
				if !slices.Contains(xmlPaths(t, got.body), need) {
					t.Errorf("%s: %s missing", op, need)
				}
			}
		})
	}
}

// TestEC2AgainstSDKSnapshots replays EC2's request snapshots of the calls
// the adapter makes. EC2 ships no response snapshots, so the answers are
// held to what EC2 itself does with these requests: every parameter known
// (the snapshot sets all of them), and DryRun=true answered 412
// DryRunOperation; without DryRun and with real values, 200.
func TestEC2AgainstSDKSnapshots(t *testing.T) {
	dir := moduleDir(t, "github.com/aws/aws-sdk-go-v2/service/ec2")
	emu := eksemu.New(eksemu.Options{})
	p := newReplayer(t, emu)
	real := map[string]func(url.Values){
		"DescribeInstanceTypes":         func(f url.Values) { f.Set("InstanceType.1", "m5.large"); f.Set("InstanceType.2", "p5.48xlarge") },
		"DescribeInstanceTypeOfferings": func(f url.Values) { f.Set("LocationType", "availability-zone") },
		"DescribeSubnets": func(f url.Values) {
			f.Set("SubnetId.1", "subnet-0000000000000000a")
			f.Set("SubnetId.2", "subnet-0000000000000001b")
		},
	}
	for _, op := range []string{"DescribeInstanceTypes", "DescribeInstanceTypeOfferings", "DescribeSubnets"} {
		t.Run(op, func(t *testing.T) {
			req := readSnapshot(t, filepath.Join(dir, "request_snapshot", op+".request.snap"))
			form := formOf(t, req.body)
			got := p.send("ec2", req.method, req.target, req.header, []byte(form.Encode()))
			if got.status != http.StatusPreconditionFailed || !bytes.Contains(got.body, []byte("<Code>DryRunOperation</Code>")) {
				t.Fatalf("%s as the snapshot has it: %d %s, want 412 DryRunOperation", op, got.status, got.body)
			}
			for k := range form {
				if k == "DryRun" || k == "NextToken" || k == "MaxResults" || strings.HasPrefix(k, "Filter.") {
					form.Del(k)
				}
			}
			real[op](form)
			got = p.send("ec2", req.method, req.target, req.header, []byte(form.Encode()))
			if got.status != http.StatusOK {
				t.Fatalf("%s: %d %s", op, got.status, got.body)
			}
			if recs := emu.Requests(); recs[len(recs)-1].Op != op {
				t.Fatalf("routed to %q", recs[len(recs)-1].Op)
			}
			form.Set("Unknown.1", "x")
			got = p.send("ec2", req.method, req.target, req.header, []byte(form.Encode()))
			if got.status != http.StatusBadRequest || !bytes.Contains(got.body, []byte("UnknownParameter")) {
				t.Errorf("%s with a parameter EC2 does not know: %d %s", op, got.status, got.body)
			}
		})
	}
}

// TestEKSErrorsAgainstSDKSnapshots provokes each error the emulator gives
// by itself, and the injected ones, and holds them to the SDK's error
// snapshots: the status the model gives the code, and only members it
// knows.
func TestEKSErrorsAgainstSDKSnapshots(t *testing.T) {
	dir := moduleDir(t, "github.com/aws/aws-sdk-go-v2/service/eks")
	emu := eksemu.New(eksemu.Options{MaxClusters: 2, UnsupportedZones: []string{"us-east-1c"}})
	p := newReplayer(t, emu)
	ct := http.Header{"Content-Type": {"application/json"}}
	cluster := func(name, mode string, subnets ...string) string {
		b, _ := json.Marshal(map[string]any{"name": name, "roleArn": snapRole, "clientRequestToken": snapToken + name,
			"resourcesVpcConfig": map[string]any{"subnetIds": subnets}, "accessConfig": map[string]any{"authenticationMode": mode}})
		return string(b)
	}
	ab := []string{"subnet-0000000000000000a", "subnet-0000000000000001b"}
	cases := []struct {
		name, op, method, target, body, code string
		before                               func()
	}{
		{name: "missing cluster", op: "DescribeCluster", method: "GET", target: "/clusters/nope", code: "ResourceNotFoundException"},
		{name: "short token", op: "CreateCluster", method: "POST", target: "/clusters", body: `{"name":"c","roleArn":"` + snapRole + `","clientRequestToken":"short","resourcesVpcConfig":{"subnetIds":["subnet-0000000000000000a"]}}`, code: "InvalidParameterException"},
		{name: "unsupported zone", op: "CreateCluster", method: "POST", target: "/clusters", body: cluster("zonal", "API", "subnet-0000000000000000a", "subnet-0000000000000002c"), code: "UnsupportedAvailabilityZoneException"},
		{name: "first", op: "CreateCluster", method: "POST", target: "/clusters", body: cluster("busy", "API", ab...)},
		{name: "cluster not active", op: "CreateNodegroup", method: "POST", target: "/clusters/busy/node-groups", body: `{"nodegroupName":"ng","nodeRole":"` + snapRole + `","subnets":["subnet-0000000000000000a"]}`, code: "InvalidRequestException"},
		{name: "config map", op: "CreateCluster", method: "POST", target: "/clusters", body: cluster("cm", "CONFIG_MAP", ab...)},
		{name: "no access entries", op: "CreateAccessEntry", method: "POST", target: "/clusters/cm/access-entries", body: `{"principalArn":"` + snapPrincipal + `"}`, code: "InvalidRequestException"},
		{name: "quota", op: "CreateCluster", method: "POST", target: "/clusters", body: cluster("third", "API", ab...), code: "ResourceLimitExceededException"},
		{name: "untaggable", op: "TagResource", method: "POST", target: "/tags/" + url.PathEscape("arn:aws:eks:us-east-1:111111111111:cluster/nope"), body: `{"tags":{"a":"b"}}`, code: "NotFoundException"},
		{name: "no tags", op: "TagResource", method: "POST", target: "/tags/" + url.PathEscape("arn:aws:eks:us-east-1:111111111111:cluster/busy"), body: `{"tags":{}}`, code: "BadRequestException"},
		{name: "busy cluster delete", op: "DeleteCluster", method: "DELETE", target: "/clusters/busy", code: "ResourceInUseException"},
	}
	for code, status := range map[string]int{"ThrottlingException": 429, "ServerException": 500, "ServiceUnavailableException": 503, "AccessDeniedException": 403, "ClientException": 400} {
		cases = append(cases, struct {
			name, op, method, target, body, code string
			before                               func()
		}{name: "injected " + code, op: "ListClusters", method: "GET", target: "/clusters", code: code,
			before: func() { emu.Inject(eksemu.Fault{Op: "ListClusters", Status: status, Code: code}) }})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.before != nil {
				c.before()
			}
			var h http.Header
			if c.body != "" {
				h = ct
			}
			got := p.send("eks", c.method, c.target, h, []byte(c.body))
			if code := got.header.Get("X-Amzn-Errortype"); code != c.code {
				t.Fatalf("%d %s %s, want %q", got.status, code, got.body, c.code)
			}
			checkAnswer(t, dir, c.op, got)
		})
	}
}
