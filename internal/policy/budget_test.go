package policy

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

// hostilePolicy is n rules, each a loop over the document's flavors per
// change (within the load-time estimate), none of which any change breaks.
func hostilePolicy(n int) []byte {
	var b strings.Builder
	b.WriteString("rules:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - {name: loop-%d, expression: \"document.flavors.exists(f, f.name == change.name + '-%d')\", action: deny}\n", i, i)
	}
	return []byte(b.String())
}

func hostileInput(t testing.TB, units int) Input {
	t.Helper()
	data := benchDocument(units)
	doc, errs := fleet.Validate("bench.json", data)
	if errs != nil {
		t.Fatal(errs.Text())
	}
	empty := inventory.NewSnapshot(nil)
	return Input{Doc: doc, Data: data, Snap: empty, Plan: plan.Make(doc, empty, plan.Options{})}
}

// TestJudgeStopsAtItsBudget: a policy whose loops cost more than the budget
// stops once it is spent (over it by at most one expression's limit), and
// fails closed: every rule is reported broken with why, and the error is a
// PLAN_BLOCKED refusal naming the budget.
func TestJudgeStopsAtItsBudget(t *testing.T) {
	pol, err := Load(hostilePolicy(20))
	if err != nil {
		t.Fatal(err)
	}
	in := hostileInput(t, 100)
	const budget = 2_000_000
	rep, spent, err := pol.Judge(context.Background(), in, budget)
	if refusal.CodeOf(err) != refusal.PlanBlocked || !strings.Contains(err.Error(), "cost budget of 2000000") {
		t.Fatalf("error %v", err)
	}
	if spent <= budget || spent > budget+RuntimeCostLimit {
		t.Fatalf("spent %d of a budget of %d", spent, budget)
	}
	for _, v := range rep.Rules {
		if v.Verdict != plan.VerdictDeny || !strings.HasPrefix(v.Message, "not judged: ") {
			t.Fatalf("rule %s: %s %q", v.Name, v.Verdict, v.Message)
		}
	}
	if len(rep.Notes) != 1 || !strings.Contains(rep.Notes[0], "cost budget") {
		t.Fatalf("notes %q", rep.Notes)
	}

	// Under the budget the same policy judges the plan whole, and passes.
	small := hostileInput(t, 5)
	rep, spent, err = pol.Judge(context.Background(), small, budget)
	if err != nil || !rep.Passes() || spent == 0 || spent > budget {
		t.Fatalf("small plan: %v, %s, spent %d", err, rep.Summary(), spent)
	}
	if want := pol.Evaluate(small); want.Summary() != rep.Summary() {
		t.Fatalf("Judge says %s, Evaluate %s", rep.Summary(), want.Summary())
	}
}

// countdownCtx is a context that ends after its Done channel was asked
// for n times: a cancellation in the middle of a loop, without a clock.
type countdownCtx struct {
	context.Context
	left atomic.Int64
	done chan struct{}
	once atomic.Bool
}

func newCountdown(n int64) *countdownCtx {
	c := &countdownCtx{Context: context.Background(), done: make(chan struct{})}
	c.left.Store(n)
	return c
}

func (c *countdownCtx) Done() <-chan struct{} {
	if c.left.Add(-1) <= 0 && c.once.CompareAndSwap(false, true) {
		close(c.done)
	}
	return c.done
}

func (c *countdownCtx) Err() error {
	select {
	case <-c.done:
		return context.Canceled
	default:
		return nil
	}
}

// TestJudgeStopsWhenCancelled: a judgement cancelled in the middle of a
// loop stops there (it does not finish the plan) with an UNAVAILABLE
// error, and fails closed.
func TestJudgeStopsWhenCancelled(t *testing.T) {
	pol, err := Load(hostilePolicy(20))
	if err != nil {
		t.Fatal(err)
	}
	in := hostileInput(t, 30)
	_, whole, err := pol.Judge(context.Background(), in, 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx := newCountdown(20)
	rep, spent, err := pol.Judge(ctx, in, 0)
	if refusal.CodeOf(err) != refusal.Unavailable {
		t.Fatalf("error %v", err)
	}
	if spent >= whole/4 {
		t.Fatalf("the cancelled judgement spent %d of the whole's %d", spent, whole)
	}
	if rep.Passes() {
		t.Fatalf("a cancelled judgement passes: %s", rep.Summary())
	}
}

// TestJudgeStopsAtItsDeadline: a deadline already past stops a judgement
// before its first change, as a PLAN_BLOCKED refusal saying so.
func TestJudgeStopsAtItsDeadline(t *testing.T) {
	pol, err := Load(hostilePolicy(2))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithDeadline(context.Background(), time.Unix(0, 0))
	defer cancel()
	rep, spent, err := pol.Judge(ctx, hostileInput(t, 10), 0)
	if refusal.CodeOf(err) != refusal.PlanBlocked || !strings.Contains(err.Error(), "deadline") || spent != 0 || rep.Passes() {
		t.Fatalf("error %v, spent %d, %s", err, spent, rep.Summary())
	}
}
