package substrate

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/state"
)

// found is a step's condition as its report makes it: problems and waits
// as (reason, message) pairs, then notes.
type found struct {
	problems, waits [][2]string
	notes           []string
}

func verdictOf(typ, ok, okMessage string, f found) Condition {
	var r report
	for _, p := range f.problems {
		r.problem(p[0], p[1])
	}
	for _, w := range f.waits {
		r.wait(w[0], w[1], time.Time{})
	}
	for _, n := range f.notes {
		r.note(n)
	}
	return r.verdict(typ, ok, okMessage)
}

// TestSummarize is the summary table, row by row: each combination of
// conditions gives the state and message docs/substrates.md documents.
func TestSummarize(t *testing.T) {
	account := verdictOf(CondAccount, ReasonAccountFound, "", found{})
	running := verdictOf(CondCluster, ReasonClusterRunning, "", found{})
	provisioning := verdictOf(CondCluster, ReasonClusterRunning, "", found{waits: [][2]string{{ReasonClusterProvisioning, "cluster c is provisioning"}}})
	claimed := verdictOf(CondClaim, ReasonClaimed, "", found{})
	claimRefused := verdictOf(CondClaim, ReasonClaimed, "", found{problems: [][2]string{{ReasonClaimRefused, "cluster c already backs pool b"}}})
	poolsMixed := verdictOf(CondNodePools, ReasonNodePoolsReady, "", found{
		problems: [][2]string{{ReasonNodePoolError, "flavor a: in error"}},
		waits:    [][2]string{{ReasonNodePoolProvisioning, "flavor b: provisioning"}}})
	poolsWaiting := verdictOf(CondNodePools, ReasonNodePoolsReady, "", found{waits: [][2]string{{ReasonNodePoolProvisioning, "flavor b: provisioning"}}})
	pools := verdictOf(CondNodePools, ReasonNodePoolsReady, "", found{})
	daemon := verdictOf(CondInCluster, ReasonNodeDaemonApplied, "", found{notes: []string{"3 Nodes waiting to join"}})
	daemonRecorded := Condition{Type: CondInCluster, Status: ConditionTrue, Reason: ReasonNodeDaemonApplied}
	noDaemon := Condition{Type: CondInCluster, Status: ConditionUnknown, Reason: ReasonNodeDaemonNotConfigured, Message: NoDaemonMessage}
	accountMissing := verdictOf(CondAccount, ReasonAccountFound, "", found{problems: [][2]string{{ReasonAccountUnavailable, `provider account "a" is not in the fleet`}}})
	tornDown := verdictOf(CondTeardown, ReasonTornDown, "torn down: the pool was archived", found{notes: []string{"left cluster x in place"}})
	tearing := verdictOf(CondTeardown, ReasonTearingDown, "", found{waits: [][2]string{{ReasonOperationInProgress, "deleting cluster c"}}})
	tearingQuiet := Condition{Type: CondTeardown, Status: ConditionUnknown, Reason: ReasonTearingDown}
	teardownRefused := verdictOf(CondTeardown, ReasonTearingDown, "", found{
		problems: [][2]string{{ReasonOperationRefused, "deleting cluster c: refused"}},
		waits:    [][2]string{{ReasonAdopterWaiting, "pool b waits to adopt this cluster"}}})
	orphansLeft := verdictOf(CondOrphans, ReasonOrphansRemoved, "", found{waits: [][2]string{{ReasonOperationInProgress, "deleting cluster o"}}})
	orphansLeft.Status, orphansLeft.Reason = ConditionUnknown, ReasonOrphansRemaining

	for _, tc := range []struct {
		name    string
		present bool
		conds   []Condition
		state   state.SubstrateState
		message string
	}{
		{"torn down, with its notes", false, []Condition{account, tornDown}, state.SubstrateDeleted, "torn down: the pool was archived; left cluster x in place"},
		{"torn down but orphans left", false, []Condition{account, tornDown, orphansLeft}, state.SubstrateDeleting, "deleting cluster o"},
		{"teardown refused: problems, then waits", false, []Condition{account, teardownRefused}, state.SubstrateError, "deleting cluster c: refused; pool b waits to adopt this cluster"},
		{"account gone during a teardown", false, []Condition{accountMissing}, state.SubstrateError, `provider account "a" is not in the fleet`},
		{"tearing down", false, []Condition{account, tearing}, state.SubstrateDeleting, "deleting cluster c"},
		{"tearing down, nothing said", false, []Condition{account, tearingQuiet}, state.SubstrateDeleting, "tearing down"},
		{"account missing", true, []Condition{accountMissing}, state.SubstrateError, `provider account "a" is not in the fleet`},
		{"claim refused, daemon as recorded", true, []Condition{account, running, claimRefused, daemonRecorded}, state.SubstrateError, "cluster c already backs pool b"},
		{"problems first, then waits, then notes", true, []Condition{account, running, claimed, poolsMixed, daemon}, state.SubstrateError, "flavor a: in error; flavor b: provisioning; 3 Nodes waiting to join"},
		{"work in progress with the daemon standing", true, []Condition{account, running, claimed, poolsWaiting, daemon}, state.SubstrateReady, "flavor b: provisioning; 3 Nodes waiting to join"},
		{"work in progress", true, []Condition{account, provisioning}, state.SubstrateCreating, "cluster c is provisioning"},
		{"ready", true, []Condition{account, running, claimed, pools, daemon}, state.SubstrateReady, "3 Nodes waiting to join"},
		{"ready as recorded", true, []Condition{account, running, claimed, pools, daemonRecorded}, state.SubstrateReady, ""},
		{"no node daemon configured", true, []Condition{account, running, claimed, pools, noDaemon}, state.SubstrateCreating, "the cluster and its node pools run; waiting for the node daemon: " + NoDaemonMessage},
		{"a cluster not there yet", true, []Condition{account, running}, state.SubstrateCreating, "waiting for the cluster"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, msg := summarize(tc.present, tc.conds)
			if st != tc.state || msg != tc.message {
				t.Errorf("summarize = %s %q, want %s %q", st, msg, tc.state, tc.message)
			}
		})
	}
}

// TestVerdict: a step's condition is False with its first problem's reason,
// else Unknown with its first wait's, else True with its own; the message
// reads problems, waits, then notes.
func TestVerdict(t *testing.T) {
	for _, tc := range []struct {
		name                    string
		f                       found
		status, reason, message string
	}{
		{"nothing to say", found{}, ConditionTrue, ReasonNodePoolsReady, ""},
		{"notes only", found{notes: []string{"n"}}, ConditionTrue, ReasonNodePoolsReady, "n"},
		{"waits", found{waits: [][2]string{{ReasonNodePoolProvisioning, "w1"}, {ReasonOperationInProgress, "w2"}}}, ConditionUnknown, ReasonNodePoolProvisioning, "w1; w2"},
		{"problems before waits", found{problems: [][2]string{{ReasonNodePoolError, "p1"}, {ReasonOperationFailed, "p2"}}, waits: [][2]string{{ReasonNodePoolProvisioning, "w"}}, notes: []string{"n"}},
			ConditionFalse, ReasonNodePoolError, "p1; p2; w; n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := verdictOf(CondNodePools, ReasonNodePoolsReady, "", tc.f)
			if c.Status != tc.status || c.Reason != tc.reason || c.Message != tc.message {
				t.Errorf("verdict = %s %s %q, want %s %s %q", c.Status, c.Reason, c.Message, tc.status, tc.reason, tc.message)
			}
		})
	}
}

// TestReasonsDocumented: docs/substrates.md lists every reason a condition
// may carry, and no reason the code does not have.
func TestReasonsDocumented(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "substrates.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	start := strings.Index(doc, "### Conditions")
	if start < 0 {
		t.Fatal("docs/substrates.md has no Conditions section")
	}
	section := doc[start:]
	if end := strings.Index(section[1:], "\n#"); end > 0 {
		section = section[:end+1]
	}
	known := map[string]bool{}
	for _, r := range Reasons {
		known[r] = true
		if !strings.Contains(section, "`"+r+"`") {
			t.Errorf("reason %s is not in docs/substrates.md's Conditions", r)
		}
	}
	table := section[strings.Index(section, "| type | reasons"):]
	for _, m := range regexp.MustCompile("`([A-Z][a-zA-Z]+)`").FindAllStringSubmatch(table, -1) {
		if w := m[1]; !known[w] && !slices.Contains([]string{"True", "False", "Unknown", CondAccount, CondCluster, CondClaim, CondNodePools, CondInCluster, CondTeardown, CondOrphans, CondUpgrade}, w) {
			t.Errorf("docs/substrates.md names a reason %s the code does not have", w)
		}
	}
}
