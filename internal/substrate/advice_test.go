package substrate

import "testing"

// Every reason a condition may give has its advice, so the page and the
// doctor never fall back to words that do not fit it.
func TestEveryReasonHasAdvice(t *testing.T) {
	for _, r := range Reasons {
		if Advice(r) == "" {
			t.Errorf("reason %s has no advice in the table", r)
		}
	}
	if len(advice) != len(Reasons) {
		t.Errorf("the advice table has %d reasons, Reasons %d: a reason no condition gives", len(advice), len(Reasons))
	}
}
