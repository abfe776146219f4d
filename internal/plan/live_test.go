package plan

import (
	"testing"
)

// Live verdicts block only what would change; a checked provider has no
// "not checked live" note; a verdict's notes are shown.
func TestLiveVerdicts(t *testing.T) {
	facts := &Facts{
		Accounts:   map[string]Verdict{"cloud": {Blocked: []string{"credentials rejected"}}, "k8s": {Notes: []string{"checked"}}},
		Substrates: map[string]Verdict{"kube": {Blocked: []string{"machine type m1 unknown"}}},
	}
	runKindCases(t, []kindCase{
		{name: "unchanged objects are not blocked by live checks", opts: Options{Facts: facts}, want: "= providerAccount k8s\n  note: checked\n" + counts(0, 0, 0, 11), calls: []string{}},
		{name: "changes are", opts: Options{Facts: facts}, doc: edit(setTo("providerAccounts/0/config", obj(`{}`)), setTo(pSub+"/flavors/0/nodes", 2)),
			want: "! providerAccount cloud (config): credentials rejected\n= providerAccount k8s\n  note: checked\n! pool kube (policy): machine type m1 unknown\n" + counts(0, 0, 0, 9, 2), calls: []string{}},
	})
}
