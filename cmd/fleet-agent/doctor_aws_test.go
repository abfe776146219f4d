package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/doctor"
	"github.com/fleet-agent/fleet-agent/internal/providers/aws/eksemu"
)

// TestDoctorAWSAutoScalingAdvice: an aws account whose principal may list
// the node groups' Auto Scaling groups gets no advice; one refused
// autoscaling:DescribeAutoScalingGroups gets a provider-advice note naming
// the permission (the agent works without it, so it is no failure), and
// its credentials still verify.
func TestDoctorAWSAutoScalingAdvice(t *testing.T) {
	emu := eksemu.New(eksemu.Options{Clock: clock.Real{}, Subnets: []eksemu.Subnet{
		{ID: "subnet-0000000000000000a", Zone: "us-east-1a", VpcID: "vpc-00000000000000001", CIDR: "10.0.0.0/24"},
		{ID: "subnet-0000000000000000b", Zone: "us-east-1b", VpcID: "vpc-00000000000000001", CIDR: "10.0.1.0/24"},
	}})
	url := emu.Start()
	t.Cleanup(emu.Close)
	const id, secret = "AKIADOCTORTESTKEY001", "CANARYdoctorSecretAccessKey000000000000"
	emu.AddUser(id, secret, "arn:aws:iam::111111111111:user/fleet-agent")
	doc, _ := referenceWith(t, "kubernetes-pool-eks.json",
		map[string]any{"accessKeyId": "secret://aws-key-id", "secretAccessKey": "secret://aws-secret"}, nil)

	dir := t.TempDir()
	sdir := filepath.Join(dir, "secrets")
	if err := os.MkdirAll(sdir, 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, sdir, "aws-key-id", id)
	writeFile(t, sdir, "aws-secret", secret)
	statePath := filepath.Join(dir, "fleet.db")
	cfgPath := writeFile(t, dir, "config.yaml", "state: "+statePath+"\nsecrets:\n  dir: "+sdir+"\nproviders:\n  aws:\n    endpoints: {eks: "+url+", ec2: "+url+", sts: "+url+", autoscaling: "+url+"}\n")
	docPath := writeFile(t, dir, "fleet.json", string(doc))
	env := map[string]string{}
	if out, errs, code := cli(t, env, "apply", docPath, "--config", cfgPath, "--yes"); code != 0 {
		t.Fatalf("apply: %d\n%s\n%s", code, out, errs)
	}
	run := func() (doctor.Report, string) {
		t.Helper()
		out, _, _ := cli(t, env, "doctor", "-o", "json", "--config", cfgPath, "--state", statePath)
		var rep doctor.Report
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatal(err, out)
		}
		if strings.Contains(out, secret) {
			t.Fatal("the report holds the secret access key")
		}
		return rep, out
	}
	rep, out := run()
	if codes := rep.Codes(); !slices.Contains(codes, "provider-ok") || slices.Contains(codes, "provider-advice") {
		t.Fatalf("with the permission: codes %v\n%s", codes, out)
	}

	emu.Inject(eksemu.Fault{Op: "DescribeAutoScalingGroups", Count: 100, Status: 403, Code: "AccessDenied",
		Message: "User: arn:aws:iam::111111111111:user/fleet-agent is not authorized to perform: autoscaling:DescribeAutoScalingGroups"})
	rep, out = run()
	i := slices.IndexFunc(rep.Findings, func(f doctor.Finding) bool { return f.Code == "provider-advice" })
	if i < 0 || !slices.Contains(rep.Codes(), "provider-ok") {
		t.Fatalf("without the permission: codes %v\n%s", rep.Codes(), out)
	}
	if f := rep.Findings[i]; f.Severity != doctor.Note || !strings.Contains(f.Found, "autoscaling:DescribeAutoScalingGroups") || f.Do == "" {
		t.Errorf("the advice: %+v", f)
	}
}
