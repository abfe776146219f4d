package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/cost"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/interpreter"

	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/plan"
)

// sizes bounds every list, map and string an expression reads at MaxSize
// (a literal keeps its own size), so that the estimate of a loop over the
// document is finite and a loop inside a loop is seen for what it costs.
// The optional-value functions, which the estimator has no figure for, cost
// one and give a value of at most MaxSize.
type sizes struct{ max uint64 }

func (s sizes) EstimateSize(n cost.AstNode) *cost.SizeEstimate {
	if n.ComputedSize() != nil || (n.Expr() != nil && n.Expr().Kind() == ast.LiteralKind) {
		return nil
	}
	return &cost.SizeEstimate{Min: 0, Max: s.max}
}

func (s sizes) EstimateCallCost(function, _ string, _ *cost.AstNode, _ []cost.AstNode) *cost.CallEstimate {
	switch function {
	case "orValue", "value", "hasValue", "or", "optional.of", "optional.ofNonZeroValue", "optional.none", "_?._", "_[?_]":
		return cost.NewCallEstimate(cost.Estimate{Min: 1, Max: 1}, &cost.SizeEstimate{Min: 0, Max: s.max})
	}
	return nil
}

// implied are the kinds and change types an expression can only be true
// for: its top-level conjunction holding change.kind == 'K' (change.type
// == 'T'). A change of another kind makes that conjunct false and so the
// whole false, whatever else errs (CEL's && is commutative on errors), so
// skipping it gives the same verdict without running the expression: most
// rules over a plan of thousands of changes run on the few they are about.
func implied(e ast.Expr) (kinds, types []string) {
	var walk func(e ast.Expr)
	walk = func(e ast.Expr) {
		if e.Kind() != ast.CallKind {
			return
		}
		c := e.AsCall()
		switch c.FunctionName() {
		case "_&&_":
			for _, a := range c.Args() {
				walk(a)
			}
		case "_==_":
			args := c.Args()
			for i := range 2 {
				field, lit := args[i], args[1-i]
				if field.Kind() != ast.SelectKind || lit.Kind() != ast.LiteralKind {
					continue
				}
				sel := field.AsSelect()
				if sel.IsTestOnly() || sel.Operand().Kind() != ast.IdentKind || sel.Operand().AsIdent() != "change" {
					continue
				}
				v, ok := lit.AsLiteral().Value().(string)
				if !ok {
					continue
				}
				switch sel.FieldName() {
				case "kind":
					kinds = append(kinds, v)
				case "type":
					types = append(types, v)
				}
			}
		}
	}
	walk(e)
	return kinds, types
}

// Input is what a policy judges: the plan, and what it was made of.
type Input struct {
	Doc *fleet.Document
	// Data is the document's text, for the lines of the objects (nil: no
	// lines).
	Data []byte
	// Snap is the fleet the plan was made against (the changes' before).
	Snap *inventory.Snapshot
	Plan *plan.Plan
	// Tenant owns the fleet (ids of objects not yet made derive from it).
	Tenant string
}

// Evaluate judges a plan: each rule on each change its match selects. A
// change whose expression is true breaks the rule; so does one whose
// expression fails to evaluate (a missing field, the cost limit): a policy
// fails closed, and the message says what failed so the rule can be fixed.
func (p *Policy) Evaluate(in Input) *plan.PolicyReport {
	if in.Snap == nil {
		in.Snap = inventory.NewSnapshot(nil)
	}
	if in.Tenant == "" {
		in.Tenant = "root"
	}
	w := newWorld(p, in)
	rep := &plan.PolicyReport{Rules: make([]plan.RuleVerdict, 0, len(p.Rules))}
	acts := make([]*changeVars, len(in.Plan.Changes))
	for _, r := range p.Rules {
		v := plan.RuleVerdict{Name: r.Name, Action: string(r.Action), Verdict: plan.VerdictPass, Approvers: r.Approvers}
		for i := range in.Plan.Changes {
			c := &in.Plan.Changes[i]
			if !r.selects(c.Kind, c.Action) {
				continue
			}
			if acts[i] == nil {
				acts[i] = w.change(c)
			}
			cv := acts[i]
			if len(r.Match.Accounts) > 0 && !slices.Contains(r.Match.Accounts, cv.account) {
				continue
			}
			broke, msg := r.judge(cv)
			if !broke {
				continue
			}
			if cv.line == 0 {
				cv.line = w.lineOf(cv.pointer)
			}
			v.Matched = append(v.Matched, plan.PolicyHit{Kind: c.Kind, Name: c.Name, ID: cv.id, Type: c.Action,
				Pointer: cv.pointer, Line: cv.line, Message: msg})
		}
		if len(v.Matched) > 0 {
			v.Verdict = plan.RuleOutcome(r.Action)
			v.Message = v.Matched[0].Message
			if n := len(v.Matched) - 1; n > 0 {
				v.Message += fmt.Sprintf(" (and %d more)", n)
			}
		}
		rep.Rules = append(rep.Rules, v)
	}
	return rep
}

// selects reports whether the rule's kinds and change types take c.
func (r *Rule) selects(k inventory.Kind, a plan.Action) bool {
	if len(r.Match.Kinds) > 0 && !slices.Contains(r.Match.Kinds, string(k)) {
		return false
	}
	for _, want := range r.impliedKinds {
		if string(k) != want {
			return false
		}
	}
	for _, want := range r.impliedTypes {
		if string(a) != want {
			return false
		}
	}
	if len(r.Match.Changes) == 0 {
		return a != plan.Unchanged
	}
	return slices.Contains(r.Match.Changes, string(a))
}

// judge evaluates the rule on one change: whether it broke the rule, and
// the message.
func (r *Rule) judge(cv *changeVars) (bool, string) {
	out, _, err := r.expr.Eval(cv.act)
	if err != nil {
		return true, fmt.Sprintf("the rule's expression failed on %s %s: %v (it counts as broken; use has() or ?. for fields a change may lack)", cv.kind, cv.name, err)
	}
	b, ok := out.Value().(bool)
	if !ok {
		return true, fmt.Sprintf("the rule's expression gave %s on %s %s, not a bool (it counts as broken)", out.Type(), cv.kind, cv.name)
	}
	if !b {
		return false, ""
	}
	def := fmt.Sprintf("%s %s breaks rule %q", cv.kind, cv.name, r.Name)
	if r.msg == nil {
		return true, def
	}
	m, _, err := r.msg.Eval(cv.act)
	if err != nil {
		return true, def + fmt.Sprintf(" (its message failed: %v)", err)
	}
	s, ok := m.Value().(string)
	if !ok || s == "" {
		return true, def
	}
	return true, s
}

// world holds what every change's variables share: the document and the
// plan as CEL values, the objects' pointers and the pools' accounts.
type world struct {
	in       Input
	doc      any
	docVal   ref.Val
	planVal  ref.Val
	pointers map[string]string // kind + "\x00" + name -> pointer
	poolAcct map[string]string // document pool name -> account name
	// loc is the document's text parsed for places, made on the first
	// line asked for: lines are read for the changes that break a rule,
	// and for every change only when an expression reads change.line.
	loc       *fleet.Locator
	located   bool
	needLines bool
}

// lineOf is the line of the value ptr names, 0 when unknown.
func (w *world) lineOf(ptr string) int {
	if ptr == "" || w.in.Data == nil {
		return 0
	}
	if !w.located {
		w.loc, w.located = fleet.Locate(w.in.Data), true
	}
	if pos, ok := w.loc.Value(ptr); ok {
		return pos.Line
	}
	return 0
}

func newWorld(p *Policy, in Input) *world {
	w := &world{in: in, pointers: map[string]string{}, poolAcct: map[string]string{}}
	w.doc = documentValue(in.Doc)
	w.docVal = types.DefaultTypeAdapter.NativeToValue(w.doc)
	w.planVal = types.DefaultTypeAdapter.NativeToValue(map[string]any{})
	if p.usesPlan {
		w.planVal = types.DefaultTypeAdapter.NativeToValue(planValue(in.Plan))
	}
	w.needLines = p.usesLine
	if in.Doc != nil {
		w.index(in.Doc)
	}
	return w
}

// documentValue is the document as normalised JSON (the shape the file has,
// integers as int64), or an empty object.
func documentValue(d *fleet.Document) any {
	if d == nil {
		return map[string]any{}
	}
	data, err := json.Marshal(d)
	if err != nil {
		return map[string]any{}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return map[string]any{}
	}
	return inventory.Normalize(v)
}

func planValue(p *plan.Plan) map[string]any {
	calls := make([]any, len(p.Calls))
	for i, c := range p.Calls {
		calls[i] = map[string]any{"method": c.Method, "params": c.Params}
	}
	s := p.Summary
	return map[string]any{
		"counts": map[string]any{"create": int64(s.Create), "update": int64(s.Update), "delete": int64(s.Delete),
			"unchanged": int64(s.Unchanged), "blocked": int64(s.Blocked)},
		"calls":    calls,
		"changes":  int64(len(p.Changes)),
		"planHash": p.PlanHash,
	}
}

func key(k inventory.Kind, name string) string { return string(k) + "\x00" + name }

// escape is one JSON Pointer token.
func escape(s string) string { return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1") }

// index records the pointer of every object of the document, and each
// pool's account (its providerAccount, or its substrate's account).
func (w *world) index(d *fleet.Document) {
	for i, s := range d.Sites {
		w.pointers[key(inventory.Site, s.Name)] = "/sites/" + strconv.Itoa(i)
	}
	for i, a := range d.ProviderAccounts {
		w.pointers[key(inventory.ProviderAccount, a.Name)] = "/providerAccounts/" + strconv.Itoa(i)
	}
	for i, p := range d.Pools {
		base := "/pools/" + strconv.Itoa(i)
		w.pointers[key(inventory.Pool, p.Name)] = base
		acct := p.ProviderAccount
		if s := p.Substrate(); acct == "" && s != nil {
			acct = s.Account
		}
		w.poolAcct[p.Name] = acct
		for j, o := range p.Offers {
			w.pointers[key(inventory.Offer, inventory.OfferName(p.Name, o.Tenant))] = base + "/offers/" + strconv.Itoa(j)
		}
		for res := range p.OwnerQuota {
			w.pointers[key(inventory.OwnerQuota, inventory.OwnerQuotaName(p.Name, res))] = base + "/ownerQuota/" + escape(res)
		}
	}
	for i, f := range d.Flavors {
		w.pointers[key(inventory.Flavor, inventory.FlavorName(f.Pool, f.Name))] = "/flavors/" + strconv.Itoa(i)
	}
	for i, t := range d.SandboxTemplates {
		w.pointers[key(inventory.SandboxTemplate, t.Name)] = "/sandboxTemplates/" + strconv.Itoa(i)
	}
}

// at resolves a pointer in the document value.
func (w *world) at(ptr string) any {
	v := w.doc
	for _, tok := range strings.Split(ptr, "/")[1:] {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch x := v.(type) {
		case map[string]any:
			v = x[tok]
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

// changeVars are one change's variables, made once and shared by every
// rule that selects the change.
type changeVars struct {
	kind    inventory.Kind
	name    string
	id      string
	pointer string
	line    int
	account string
	act     interpreter.Activation
}

func (w *world) change(c *plan.Change) *changeVars {
	cv := &changeVars{kind: c.Kind, name: c.Name}
	stored, had := w.in.Snap.ByName(c.Kind, c.Name)
	if had {
		cv.id = stored.ID
	} else {
		cv.id = inventory.ID(w.in.Tenant, c.Kind, c.Name)
	}
	var before, after any
	if had {
		before = stored.Spec
	}
	var pool string
	if ptr, ok := w.pointers[key(c.Kind, c.Name)]; ok && c.Action != plan.Delete {
		cv.pointer = ptr
		if w.needLines {
			cv.line = w.lineOf(ptr)
		}
		a := w.at(ptr)
		switch c.Kind {
		case inventory.OwnerQuota:
			pool, res, _ := strings.Cut(c.Name, ":")
			a = map[string]any{"pool": pool, "resource": res, "max": a}
		case inventory.Offer:
			if m, ok := a.(map[string]any); ok {
				pool, _, _ := strings.Cut(c.Name, " -> ")
				m = cloneMap(m)
				m["pool"] = pool
				a = m
			}
		}
		after = a
		if m, ok := a.(map[string]any); ok {
			pool, _ = m["pool"].(string)
		}
	}
	switch {
	case c.Kind == inventory.ProviderAccount:
		cv.account = c.Name
	case c.Kind == inventory.Pool && after != nil:
		cv.account = w.poolAcct[c.Name]
	case pool != "":
		cv.account = w.poolAcct[pool]
	}
	if cv.account == "" && had {
		cv.account = w.storedAccount(stored)
	}
	fields := make([]any, len(c.Fields))
	for i, f := range c.Fields {
		fields[i] = f
	}
	vars := map[string]any{
		"kind": string(c.Kind), "id": cv.id, "name": c.Name, "type": string(c.Action),
		"pointer": cv.pointer, "line": int64(cv.line), "before": before, "after": after,
		"fields": fields, "account": cv.account, "blocked": c.Blocked, "note": c.Note,
	}
	act, _ := interpreter.NewActivation(map[string]any{
		"change":   types.DefaultTypeAdapter.NativeToValue(vars),
		"plan":     w.planVal,
		"document": w.docVal,
	})
	cv.act = act
	return cv
}

// storedAccount is the account of a stored object (a deleted one): its
// own name for an account, its pool's account otherwise.
func (w *world) storedAccount(o inventory.Object) string {
	if o.Kind == inventory.ProviderAccount {
		return o.Name
	}
	if o.Kind != inventory.Pool {
		id, _ := o.Spec["pool"].(string)
		p, ok := w.in.Snap.ByID(id)
		if !ok {
			return ""
		}
		o = p
	}
	id, _ := o.Spec["providerAccount"].(string)
	if a, ok := w.in.Snap.ByID(id); ok {
		return a.Name
	}
	return id
}

func cloneMap(m map[string]any) map[string]any {
	out := make(map[string]any, len(m)+1)
	for k, v := range m {
		out[k] = v
	}
	return out
}

// FleetOf is the fleet a document would make applied to an empty one: the
// objects its plan creates, stored as an apply stores them. Fixtures of
// `fleet-agent policy test` say the fleet a case starts from this way.
func FleetOf(d *fleet.Document, tenant string) *inventory.Snapshot {
	p := plan.Make(d, nil, plan.Options{Tenant: tenant})
	var objs []inventory.Object
	for _, c := range p.Calls {
		spec := make(map[string]any, len(c.Params))
		for k, v := range c.Params {
			if k != "id" {
				spec[k] = inventory.CloneValue(v)
			}
		}
		name := c.Name()
		if name == "" {
			name = c.ID()
		}
		objs = append(objs, inventory.Object{Kind: c.Kind(), ID: c.ID(), Name: name, Spec: spec})
	}
	return inventory.NewSnapshot(objs)
}
