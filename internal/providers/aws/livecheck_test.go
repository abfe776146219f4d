package aws_test

import (
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/livecheck"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/providers/aws/eksemu"
)

// TestLiveChecksOfTheReferenceDocument runs the plan's live checks
// (internal/livecheck, as the binary wires them) over this adapter and the
// emulator: the reference's EKS substrate passes; a zone as the cluster's
// location, a machine type EC2 does not know, GPUs that are not the
// instance type's and a zone without the type are each blocked with their
// reason; an adopted cluster without an access entry is blocked with the
// commands that add one.
func TestLiveChecksOfTheReferenceDocument(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	if _, err := h.emu.Seed(eksemu.SeedCluster{Name: "no-entry"}); err != nil {
		t.Fatal(err)
	}
	acc := plan.Account{Name: h.acct.Name, Provider: h.acct.Provider, Config: h.acct.Config}
	two := int64(2)
	reference := func() *fleet.Substrate {
		return &fleet.Substrate{Kind: "kubernetes", Account: acc.Name,
			Cluster: fleet.Cluster{Create: &fleet.ClusterCreate{Location: "us-east-1"}},
			Flavors: []fleet.SubstrateFlavor{{Name: "h100", MachineType: "p5.48xlarge", Nodes: &two, GPUs: &fleet.GPUs{Type: "nvidia-h100", Count: 8}}}}
	}
	cases := []struct {
		name    string
		mutate  func(*fleet.Substrate)
		blocked string
	}{
		{"the reference's document", func(*fleet.Substrate) {}, ""},
		{"a zone as location", func(s *fleet.Substrate) { s.Cluster.Create.Location = "us-east-1a" }, `cluster location "us-east-1a" is a zone; aws clusters go in a region only: use "us-east-1"`},
		{"another region", func(s *fleet.Substrate) { s.Cluster.Create.Location = "eu-west-1" }, `cluster location "eu-west-1" does not exist at account "managed-k8s" (its regions: us-east-1)`},
		{"an unknown instance type", func(s *fleet.Substrate) { s.Flavors[0].MachineType = "p5.96xlarge" }, "machine type p5.96xlarge does not exist in us-east-1"},
		{"GPUs that are not the type's", func(s *fleet.Substrate) { s.Flavors[0].GPUs.Count = 4 }, "machine type p5.48xlarge has 8 x nvidia-h100, not 4 x nvidia-h100"},
		{"a zone of the account pinned", func(s *fleet.Substrate) { s.Flavors[0].Zones = []string{"us-east-1b"} }, ""},
		{"a zone the account lacks", func(s *fleet.Substrate) { s.Flavors[0].Zones = []string{"us-east-1c"} }, `"us-east-1c" is not a zone of us-east-1`},
		{"an adopted cluster without an access entry", func(s *fleet.Substrate) { s.Cluster = fleet.Cluster{Adopt: "us-east-1/no-entry"} }, "aws eks associate-access-policy --region us-east-1 --cluster-name no-entry"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			chk := livecheck.New(livecheck.Options{Adapters: map[string]livecheck.Adapter{"aws": h.adapter}})
			sub := reference()
			c.mutate(sub)
			v, err := chk.CheckSubstrate(t.Context(), "gpu-fleet", sub, acc)
			if err != nil {
				t.Fatalf("CheckSubstrate: %v", err)
			}
			if v.Offline {
				t.Fatal("checked offline")
			}
			joined := strings.Join(v.Blocked, "\n")
			switch {
			case c.blocked == "" && len(v.Blocked) > 0:
				t.Errorf("blocked: %s", joined)
			case c.blocked != "" && !strings.Contains(joined, c.blocked):
				t.Errorf("blocked %q, want %q", joined, c.blocked)
			}
		})
	}
}
