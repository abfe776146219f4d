package policy

import (
	"context"
	"errors"

	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/interpreter"

	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

// PlanCostBudget is what one judgement of one plan may cost in all, in
// CEL cost units (about one per value an expression reads or compares):
// the sum over every rule and every change it runs on. A loop is charged
// what it actually cost; an expression without a loop, what its estimate
// at load says it can cost. The 100 rules of BenchmarkPolicyVsPlan cost
// about 1.6 million on a plan of 5,000 changes, so the budget is twelve
// times that; a policy that spends it all takes seconds, not minutes (about
// 12 s on one loaded core of a shared machine, where the benchmark's policy
// takes 1 s). The last expression to run may take the total over by at
// most RuntimeCostLimit before the judgement stops.
const PlanCostBudget = 20_000_000

// interruptEvery is how many iterations of a loop run between two checks
// of whether its judgement was cancelled.
const interruptEvery = 100

// checkEvery is how many changes are judged between two checks of the
// judgement's context, outside the loops.
const checkEvery = 64

// meter is the context and the cost budget of one judgement: each
// evaluation is charged to it, and once it is spent or the context is done
// the judgement stops (err says why).
type meter struct {
	ctx    context.Context
	budget uint64 // 0: no budget
	spent  uint64
	err    error
}

// eval runs one program under the meter. A cancelled judgement or a spent
// budget sets m.err; the evaluation's own error is returned as it is.
func (m *meter) eval(p program, act interpreter.Activation) (ref.Val, error) {
	if m == nil {
		out, _, err := p.prg.Eval(act)
		return out, err
	}
	if !p.tracked {
		out, _, err := p.prg.Eval(act)
		m.charge(p.flat)
		return out, err
	}
	out, det, err := p.prg.ContextEval(m.ctx, act)
	if det != nil && det.ActualCost() != nil {
		m.charge(*det.ActualCost())
	} else {
		m.charge(p.flat)
	}
	if err != nil && m.ctx.Err() != nil {
		m.stop(m.ctx.Err())
	}
	return out, err
}

func (m *meter) charge(c uint64) {
	m.spent += c
	if m.budget > 0 && m.spent > m.budget && m.err == nil {
		m.err = refusal.New(refusal.PlanBlocked, "the policy ran over its cost budget of %d on this plan (spent %d): its rules are not judged; make the rules that loop over the document cheaper (docs/policy.md, cost)", m.budget, m.spent)
	}
}

func (m *meter) stop(err error) {
	if m.err != nil {
		return
	}
	if errors.Is(err, context.DeadlineExceeded) {
		m.err = refusal.Wrap(refusal.PlanBlocked, err, "the policy ran past its deadline on this plan: its rules are not judged; make the rules that loop over the document cheaper (docs/policy.md, cost)")
		return
	}
	m.err = refusal.Wrap(refusal.Unavailable, err, "the policy's judgement was cancelled (the agent is stopping); it is judged again at the next poll")
}

// stopped reports whether the judgement must stop, checking the context.
func (m *meter) stopped() bool {
	if m.err == nil && m.ctx.Err() != nil {
		m.stop(m.ctx.Err())
	}
	return m.err != nil
}

// Judge is Evaluate under ctx and a total cost budget (0: none). When the
// context ends or the budget is spent before every rule ran on every change,
// the judgement stops and fails closed: every rule not already broken is
// reported as broken, with why as its message and as a note, and the error
// says why (a PLAN_BLOCKED refusal for the budget or a deadline, UNAVAILABLE
// for a cancellation). spent is what the judgement cost.
func (p *Policy) Judge(ctx context.Context, in Input, budget uint64) (rep *plan.PolicyReport, spent uint64, err error) {
	m := &meter{ctx: ctx, budget: budget}
	rep = p.evaluate(in, m)
	if m.err != nil {
		why := refusal.Text(m.err)
		for i := range rep.Rules {
			v := &rep.Rules[i]
			if len(v.Matched) == 0 {
				v.Verdict, v.Message = plan.RuleOutcome(p.Rules[i].Action), "not judged: "+why
			}
		}
		rep.Notes = append(rep.Notes, why)
	}
	return rep, m.spent, m.err
}
