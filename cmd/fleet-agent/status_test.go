package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/imagepin"
	"github.com/fleet-agent/fleet-agent/internal/localapi"
	"github.com/fleet-agent/fleet-agent/internal/substrate"
	"github.com/fleet-agent/fleet-agent/internal/testutil/golden"
	"github.com/fleet-agent/fleet-agent/internal/textline"
)

// status prints a refused tip with its reason and, when it can be adopted,
// the exact commands; the JSON carries them as they are.
func TestStatusShowsARefusedTip(t *testing.T) {
	const sha, hash = "9e26dfeeb6e641a33dae4961196235bdb965b21b", "4da1d9490c8475798f33da5c66a41cd788346f35265b7fcb1b281d10b76674ba"
	adopt := []string{"fleet-agent plan --commit " + sha, "fleet-agent apply --commit " + sha + " --plan-hash " + hash}
	for _, tc := range []struct {
		name string
		r    localapi.Refused
		want []string
	}{
		{"adoptable", localapi.Refused{Commit: sha, Code: "INVALID_STATE", Reason: "9e26dfeeb6e6 was never proposed", PlanHash: hash, Adopt: adopt},
			[]string{"refused: commit " + sha + " of the branch (INVALID_STATE): 9e26dfeeb6e6 was never proposed\n", "  adopt: " + adopt[0] + "\n", "  then:  " + adopt[1] + "\n"}},
		{"not adoptable", localapi.Refused{Commit: sha, Code: "INVALID_INPUT", Reason: "the document is invalid"},
			[]string{"refused: commit " + sha + " of the branch (INVALID_INPUT): the document is invalid\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := localapi.StatusView{TenantID: "root", Proposals: []localapi.Proposal{}, Refused: []localapi.Refused{tc.r}}
			var out bytes.Buffer
			(&app{stdout: &out}).statusText(v)
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("status text lacks %q:\n%s", w, out.String())
				}
			}
			if tc.r.Adopt == nil && strings.Contains(out.String(), "adopt:") {
				t.Errorf("a refusal that cannot be adopted prints commands:\n%s", out.String())
			}
			var back struct {
				Refused []localapi.Refused `json:"refused"`
			}
			b, _ := json.Marshal(v)
			if err := json.Unmarshal(b, &back); err != nil || len(back.Refused) != 1 || strings.Join(back.Refused[0].Adopt, "|") != strings.Join(tc.r.Adopt, "|") ||
				back.Refused[0].PlanHash != tc.r.PlanHash {
				t.Errorf("status JSON %s", b)
			}
		})
	}
}

// On an etcd store status says which agent this is, whether it leads, and
// who does.
func TestStatusShowsTheLeader(t *testing.T) {
	for _, tc := range []struct {
		st   localapi.StoreView
		want string
	}{
		{localapi.StoreView{Backend: "etcd", Agent: "ops-1", Leader: "ops-1", Leading: true}, "store: etcd, agent ops-1 leading, leader ops-1\n"},
		{localapi.StoreView{Backend: "etcd", Agent: "ops-2", Leader: "ops-1"}, "store: etcd, agent ops-2 standing by, leader ops-1\n"},
		{localapi.StoreView{Backend: "etcd", Agent: "ops-2"}, "store: etcd, agent ops-2 standing by, leader none (an election is under way)\n"},
	} {
		st := tc.st
		v := localapi.StatusView{TenantID: "root", Proposals: []localapi.Proposal{}, Store: &st}
		var out bytes.Buffer
		(&app{stdout: &out}).statusText(v)
		if !strings.Contains(out.String(), tc.want) {
			t.Errorf("status text:\n%s\nwant the line %q", out.String(), tc.want)
		}
	}
	var out bytes.Buffer
	(&app{stdout: &out}).statusText(localapi.StatusView{TenantID: "root", Proposals: []localapi.Proposal{}})
	if strings.Contains(out.String(), "store:") {
		t.Errorf("a bbolt agent's status names a store: %s", out.String())
	}
}

// status prints each substrate with its joined node daemons, each
// connected or not, as the page and the JSON show them.
func TestStatusShowsJoinedNodes(t *testing.T) {
	const t0 = int64(1796209200000) // 2026-12-02T11:00:00Z
	sub := func(pool, state string, listed int, nodes ...substrate.StatusJoinedNode) substrate.Status {
		s := substrate.Status{Pool: pool, State: state, JoinedNodes: nodes}
		s.Nodes.Listed, s.Nodes.Joined = listed, len(nodes)
		for _, n := range nodes {
			if n.Connected {
				s.Nodes.Connected++
			}
		}
		return s
	}
	v := localapi.StatusView{TenantID: "root", Proposals: []localapi.Proposal{}, Substrates: []substrate.Status{
		sub("gpu", "ready", 3,
			substrate.StatusJoinedNode{Name: "gpu-a", Connected: true, LastSeen: t0},
			substrate.StatusJoinedNode{Name: "gpu-b", Connected: false, LastSeen: t0 - 20*60*1000}),
		sub("cpu", "creating", 2),
	}}
	var out bytes.Buffer
	(&app{stdout: &out}).statusText(v)
	var lines []string
	for _, l := range strings.SplitAfter(out.String(), "\n") {
		if strings.HasPrefix(l, "substrate ") || strings.HasPrefix(l, "  node ") {
			lines = append(lines, l)
		}
	}
	golden.Check(t, "testdata/status-substrates.golden", []byte(strings.Join(lines, "")))
}

// Without GitHub nobody shows a drift proposal's description: status
// prints it in short, each value written with its source and each drift
// not written with its reason.
func TestStatusShowsTheDriftProposalsDescription(t *testing.T) {
	v := localapi.StatusView{TenantID: "root", Proposals: []localapi.Proposal{}, Drift: &localapi.DriftView{
		Changes: json.RawMessage("[]"), Summary: json.RawMessage("{}"),
		Proposal: &localapi.DriftProposal{State: "open", Branch: "fleet-agent/drift-3f9c0a1b2c4d", Fields: 2, Unwritten: 1,
			Values: []localapi.DriftValue{
				{Object: "flavor gpu-fra/h100x1", Field: "vcpu", Document: "16", Fleet: "24", Source: "`edit` by ops@box (uid 1000) at 2026-11-01T09:00:00Z"},
				{Object: "sandboxTemplate py", Field: "userData", Fleet: `"#cloud-config\n"`, Source: "changed at the provider, not through fleet-agent"},
			},
			NotWritten: []localapi.DriftNotWritten{{Object: "sandboxTemplate py", Blocked: true,
				Reason: "blocked: runtime cannot change once created; create a new sandboxTemplate under another name instead",
				Source: "`edit` by ops@box (uid 1000) at 2026-11-01T09:00:00Z"}},
		}}}
	var out bytes.Buffer
	(&app{stdout: &out}).statusText(v)
	golden.Check(t, "testdata/status-drift-proposal.golden", out.Bytes())
}

// status says whether the node daemon's image is pinned, and why not.
func TestStatusTextNodeDaemonImage(t *testing.T) {
	const tag = "r.example/a/b:v1"
	d := tag + "@sha256:" + strings.Repeat("ab", 32)
	for _, tc := range []struct {
		pin  imagepin.Pin
		want string
	}{
		{imagepin.Pin{Ref: tag, Image: d, Pinned: true, Source: "registry"}, "node daemon image: " + d + " (pinned, from the registry)\n"},
		{imagepin.Pin{Ref: tag, Image: d, Pinned: true, Source: "record", Reason: imagepin.ReasonUnreachable},
			"node daemon image: " + d + " (pinned by the recorded digest; the registry could not be asked: registryUnreachable)\n"},
		{imagepin.Pin{Ref: tag, Image: tag, Reason: imagepin.ReasonRefused, Detail: "run docker login"},
			"node daemon image: " + tag + " (not pinned: registryRefused: run docker login)\n"},
	} {
		pin := tc.pin
		var out bytes.Buffer
		(&app{stdout: &out}).statusText(localapi.StatusView{TenantID: "root", Proposals: []localapi.Proposal{}, NodeDaemonImage: &pin})
		if !strings.Contains(out.String(), tc.want) {
			t.Errorf("status text:\n%s\nwant the line %q", out.String(), tc.want)
		}
	}
	var out bytes.Buffer
	(&app{stdout: &out}).statusText(localapi.StatusView{TenantID: "root", Proposals: []localapi.Proposal{}})
	if strings.Contains(out.String(), "node daemon image") {
		t.Errorf("an image line with nothing pinned: %s", out.String())
	}
}

// status's text quotes the document and the fleet (a drift's values, a
// proposal's reason): each line is one line of plain text whatever they
// hold. Found from outside: a pool policy's value with C1 controls, line
// separators and direction marks reached the terminal raw in `writes`.
func TestStatusTextIsPlain(t *testing.T) {
	const evil = "R\u0085NEL\u009bCSI\u2028LS\u2029PS\u202eRLO\u2066LRI\u200eLRM\u061cALM\x7fDEL\n\x1b[32mforged"
	v := localapi.StatusView{TenantID: "root", Proposals: []localapi.Proposal{}, Drift: &localapi.DriftView{
		Changes: json.RawMessage("[]"), Summary: json.RawMessage("{}"),
		Proposal: &localapi.DriftProposal{State: "open", Branch: "fleet-agent/drift-3f9c0a1b2c4d", Fields: 1, Unwritten: 1,
			Values:     []localapi.DriftValue{{Object: "pool gpu", Field: "policy.k", Document: `"` + evil + `"`, Fleet: `"x"`, Source: "`edit` by " + evil}},
			NotWritten: []localapi.DriftNotWritten{{Object: "pool gpu", Reason: evil, Source: evil}},
		}}}
	var out bytes.Buffer
	(&app{stdout: &out}).statusText(v)
	for _, l := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
		if !textline.IsPlain(l) || strings.HasPrefix(l, " [32mforged") {
			t.Errorf("status line %q is not one line of plain text", l)
		}
	}
}
