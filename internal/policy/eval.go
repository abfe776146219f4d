package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/cost"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
	"cel.dev/cel-go/interpreter"

	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/textline"
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
	case "groupBy": // one pass over the list
		return cost.NewCallEstimate(cost.Estimate{Min: 1, Max: s.max}, &cost.SizeEstimate{Min: 0, Max: s.max})
	case "orValue", "value", "hasValue", "or", "optional.of", "optional.ofNonZeroValue", "optional.none", "_?._", "_[?_]":
		return cost.NewCallEstimate(cost.Estimate{Min: 1, Max: 1}, &cost.SizeEstimate{Min: 0, Max: s.max})
	}
	return nil
}

// implied are the kinds and change types an expression can only be true
// for: each conjunct of its top-level conjunction that is change.kind ==
// 'K' or change.kind in ['K1', 'K2'] (change.type likewise) is a set the
// change's kind must be in. A change of another kind makes that conjunct
// false and so the whole false, whatever else errs (CEL's && is
// commutative on errors), so skipping it gives the same verdict without
// running the expression: most rules over a plan of thousands of changes
// run on the few they are about.
func implied(e ast.Expr) (kinds, types [][]string) {
	var walk func(e ast.Expr)
	walk = func(e ast.Expr) {
		if e.Kind() != ast.CallKind {
			return
		}
		c := e.AsCall()
		if c.FunctionName() == "_&&_" {
			for _, a := range c.Args() {
				walk(a)
			}
			return
		}
		cmp, ok := changeComparison(e)
		if !ok || cmp.op == "_!=_" {
			return
		}
		switch cmp.field {
		case "kind":
			kinds = append(kinds, cmp.values)
		case "type":
			types = append(types, cmp.values)
		}
	}
	walk(e)
	return kinds, types
}

// comparison is change.kind or change.type compared with string literals:
// == and != with one, in with a list of them.
type comparison struct {
	field, op string
	values    []string
}

// changeComparison reads e as a comparison of change.kind or change.type
// with literals; false when it is not one.
func changeComparison(e ast.Expr) (comparison, bool) {
	if e.Kind() != ast.CallKind {
		return comparison{}, false
	}
	c := e.AsCall()
	args := c.Args()
	if len(args) != 2 {
		return comparison{}, false
	}
	field := func(e ast.Expr) string {
		if e.Kind() != ast.SelectKind {
			return ""
		}
		sel := e.AsSelect()
		if sel.IsTestOnly() || sel.Operand().Kind() != ast.IdentKind || sel.Operand().AsIdent() != "change" {
			return ""
		}
		if f := sel.FieldName(); f == "kind" || f == "type" {
			return f
		}
		return ""
	}
	literal := func(e ast.Expr) (string, bool) {
		if e.Kind() != ast.LiteralKind {
			return "", false
		}
		v, ok := e.AsLiteral().Value().(string)
		return v, ok
	}
	switch op := c.FunctionName(); op {
	case "_==_", "_!=_":
		for i := range 2 {
			f := field(args[i])
			v, ok := literal(args[1-i])
			if f != "" && ok {
				return comparison{field: f, op: op, values: []string{v}}, true
			}
		}
	case "@in":
		f := field(args[0])
		if f == "" || args[1].Kind() != ast.ListKind {
			return comparison{}, false
		}
		l := args[1].AsList()
		if len(l.OptionalIndices()) > 0 {
			return comparison{}, false
		}
		values := []string{}
		for _, el := range l.Elements() {
			v, ok := literal(el)
			if !ok {
				return comparison{}, false
			}
			values = append(values, v)
		}
		return comparison{field: f, op: op, values: values}, true
	}
	return comparison{}, false
}

// comparisons are every comparison of change.kind or change.type with
// literals anywhere in e (under ||, !, a ternary, a macro), for the
// warnings: a literal no change has is a misspelling wherever it is.
func comparisons(e ast.Expr) []comparison {
	var out []comparison
	ast.PostOrderVisit(e, ast.NewExprVisitor(func(e ast.Expr) {
		if c, ok := changeComparison(e); ok {
			out = append(out, c)
		}
	}))
	return out
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
	// Substrates are the accounts of the substrates recorded in the state,
	// by pool id: the last place a stored pool's account is read from.
	Substrates map[string]string
}

// Evaluate judges a plan: each rule on each change its match selects. A
// change whose expression is true breaks the rule; so does one whose
// expression fails to evaluate (a missing field, the cost limit): a policy
// fails closed, and the message says what failed so the rule can be fixed.
//
// The rules are indexed by the (kind, change type) pairs of the plan, so a
// change meets only the rules that can apply to it; its variables are made
// once, shared by those rules, and each field is made only when a rule
// reads it (lazyChange). TestFastPathAgrees checks that this gives the
// verdicts of a plain evaluation of every rule on every change.
//
// Evaluate has no deadline and no budget: it is for a policy its own user
// runs (fleet-agent plan --policy, policy test); the agent judges with
// Judge.
func (p *Policy) Evaluate(in Input) *plan.PolicyReport { return p.evaluate(in, nil) }

// evaluate is Evaluate under a meter (nil: none); it stops at the first
// change after the meter says stop.
func (p *Policy) evaluate(in Input, m *meter) *plan.PolicyReport {
	if in.Snap == nil {
		in.Snap = inventory.NewSnapshot(nil)
	}
	if in.Tenant == "" {
		in.Tenant = "root"
	}
	w := newWorld(p, in)
	w.m = m
	hits := make([][]plan.PolicyHit, len(p.Rules))
	type sel struct {
		k inventory.Kind
		a plan.Action
	}
	index := map[sel][]int{}
	owned := ownedChanges(in.Plan)
	moved := w.movedPools()
	for i := range in.Plan.Changes {
		if m != nil && (m.err != nil || i%checkEvery == 0 && m.stopped()) {
			break
		}
		c := w.withMoved(withOwned(&in.Plan.Changes[i], owned), moved)
		s := sel{c.Kind, c.Action}
		rules, ok := index[s]
		if !ok {
			rules = []int{}
			for j, r := range p.Rules {
				if r.selects(c.Kind, c.Action) {
					rules = append(rules, j)
				}
			}
			index[s] = rules
		}
		if len(rules) == 0 {
			continue
		}
		cv := w.change(c)
		for _, j := range rules {
			if m != nil && m.err != nil {
				break
			}
			r := p.Rules[j]
			if !r.Match.takes(&cv.accounts) {
				continue
			}
			broke, msg := r.judge(cv, cv, m)
			if !broke {
				continue
			}
			// Every message may quote the document: the rule's own, and
			// CEL's error when the expression or the message fails (a
			// missing key is quoted in it). In a terminal, a log line or
			// the page it must not forge a line or turn text around.
			hits[j] = append(hits[j], cv.hit(textline.Plain(msg)))
		}
	}
	return report(p, hits)
}

// report makes the verdicts of the rules from each rule's hits.
func report(p *Policy, hits [][]plan.PolicyHit) *plan.PolicyReport {
	rep := &plan.PolicyReport{Rules: make([]plan.RuleVerdict, 0, len(p.Rules))}
	for j, r := range p.Rules {
		v := plan.RuleVerdict{Name: r.Name, Action: string(r.Action), Verdict: plan.VerdictPass, Approvers: r.Approvers, Matched: hits[j]}
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
	for _, set := range r.impliedKinds {
		if !slices.Contains(set, string(k)) {
			return false
		}
	}
	for _, set := range r.impliedTypes {
		if !slices.Contains(set, string(a)) {
			return false
		}
	}
	if len(r.Match.Changes) == 0 {
		return a != plan.Unchanged && a != plan.Upgrade
	}
	return slices.Contains(r.Match.Changes, string(a))
}

// judge evaluates the rule on one change: whether it broke the rule, and
// the message.
func (r *Rule) judge(cv *changeVars, act interpreter.Activation, m *meter) (bool, string) {
	out, err := m.eval(r.expr, act)
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
	if r.msg.prg == nil {
		return true, def
	}
	mv, err := m.eval(r.msg, act)
	if err != nil {
		return true, def + fmt.Sprintf(" (its message failed: %v)", err)
	}
	s, ok := mv.Value().(string)
	if !ok || s == "" {
		return true, def
	}
	return true, s
}

// world holds what every change's variables share: the document and the
// plan as CEL values, the objects' pointers and the pools' accounts.
type world struct {
	pol      *Policy
	m        *meter    // the judgement's (nil: none)
	consts   []ref.Val // the plan constants' values, made when first read (hoist.go)
	in       Input
	doc      any
	docVal   any               // plain maps and lists: the interpreter reads them as they are
	planVal  any               // made when a rule first reads plan
	pointers map[string]string // kind + "\x00" + name -> pointer
	poolAcct map[string]string // document pool name -> account name
	// lines are the objects' lines, found on the first line asked for:
	// lines are read for the changes that break a rule, and for others
	// only when an expression reads change.line. loc is the document's
	// text parsed for places, for a line lines lacks.
	lines   map[string]int
	loc     *fleet.Locator
	located bool
}

// lineOf is the line of the value ptr names, 0 when unknown. The first
// line asked for finds the lines of every object of the document in one
// reading of its text (jsonLines); fleet.Locate answers what that cannot.
func (w *world) lineOf(ptr string) int {
	if ptr == "" || w.in.Data == nil {
		return 0
	}
	if w.lines == nil {
		wanted := make([]string, 0, len(w.pointers))
		for _, p := range w.pointers {
			wanted = append(wanted, p)
		}
		var ok bool
		if w.lines, ok = jsonLines(w.in.Data, wanted); !ok {
			w.lines = map[string]int{}
		}
	}
	if l, ok := w.lines[ptr]; ok {
		return l
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
	w := &world{pol: p, in: in, pointers: map[string]string{}, poolAcct: map[string]string{}}
	w.doc = documentValue(in.Doc)
	w.docVal = w.doc
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
	if v, ok := decodeValue(data); ok {
		return v
	}
	return slowDocumentValue(data)
}

// slowDocumentValue is documentValue by encoding/json and Normalize.
func slowDocumentValue(data []byte) any {
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
		w.poolAcct[p.Name] = poolAccount(&d.Pools[i])
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
	for rest := ptr; rest != ""; {
		var tok string
		tok, rest = rest[1:], ""
		if i := strings.IndexByte(tok, '/'); i >= 0 {
			tok, rest = tok[:i], tok[i:]
		}
		if strings.IndexByte(tok, '~') >= 0 {
			tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		}
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
// rule that selects the change. They are the activation the rules run in
// (change, plan, document) and the change variable itself: a map whose
// entries are read straight from the plan's change, each made when first
// asked for (the id is a hash, the line a parse of the document's text,
// the fields a list), so a rule pays only for what it reads.
type changeVars struct {
	w       *world
	c       *plan.Change
	kind    inventory.Kind
	name    string
	pointer string
	// account is change.account; accounts what match.accounts reads.
	account  string
	accounts changeAccounts
	before   any
	after    any
	stored   bool

	id       string
	line     int
	lined    bool
	fields   ref.Val
	full     traits.Mapper // the change as a CEL map, when read whole
	fullMade bool
}

func (w *world) change(c *plan.Change) *changeVars {
	cv := &changeVars{w: w, c: c, kind: c.Kind, name: c.Name}
	stored, had := w.in.Snap.ByName(c.Kind, c.Name)
	if had {
		cv.id, cv.stored = stored.ID, true
		cv.before = stored.Spec
	}
	if ptr, ok := w.pointers[key(c.Kind, c.Name)]; ok && c.Action != plan.Delete {
		cv.pointer = ptr
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
		cv.after = a
	}
	if h := c.Hop; h != nil {
		// A hop is no object of the document: its before and after are
		// the versions, its place the pool.
		cv.before = map[string]any{"pool": h.Pool, "version": h.From}
		after := map[string]any{"pool": h.Pool, "version": h.To, "part": h.Part}
		if h.Flavor != "" {
			after["flavor"] = h.Flavor
		}
		cv.after = after
		if ptr, ok := w.pointers[key(inventory.Pool, h.Pool)]; ok {
			cv.pointer = ptr
		}
	}
	cv.accounts = w.accountsOf(c, cv.after, stored, had)
	cv.account = cv.accounts.name
	return cv
}

// objectID is the change's object's id: stored, or derived from the
// tenant for an object not yet made.
func (cv *changeVars) objectID() string {
	if cv.id == "" {
		cv.id = inventory.ID(cv.w.in.Tenant, cv.kind, cv.name)
	}
	return cv.id
}

func (cv *changeVars) lineNo() int {
	if !cv.lined {
		cv.line, cv.lined = cv.w.lineOf(cv.pointer), true
	}
	return cv.line
}

// hit is the change as one that broke a rule.
func (cv *changeVars) hit(msg string) plan.PolicyHit {
	return plan.PolicyHit{Kind: cv.kind, Name: cv.name, ID: cv.objectID(), Type: cv.c.Action,
		Pointer: cv.pointer, Line: cv.lineNo(), Message: msg}
}

// fieldList is change.fields: the fields that change, as a list.
func (cv *changeVars) fieldList() []any {
	fields := make([]any, len(cv.c.Fields))
	for i, f := range cv.c.Fields {
		fields[i] = f
	}
	return fields
}

// vars is the change variable as a plain map, every entry made.
func (cv *changeVars) vars() map[string]any {
	return map[string]any{
		"kind": string(cv.kind), "id": cv.objectID(), "name": cv.name, "type": string(cv.c.Action),
		"pointer": cv.pointer, "line": int64(cv.lineNo()), "before": cv.before, "after": cv.after,
		"fields": cv.fieldList(), "account": cv.account, "blocked": cv.c.Blocked, "note": cv.c.Note,
	}
}

// ResolveName is the activation: the three variables.
func (cv *changeVars) ResolveName(name string) (any, bool) {
	switch name {
	case "change":
		return cv, true
	case "plan":
		if cv.w.planVal == nil {
			cv.w.planVal = planValue(cv.w.in.Plan)
		}
		return cv.w.planVal, true
	case "document":
		return cv.w.docVal, true
	}
	if i := constIndex(name); i >= 0 && i < len(cv.w.pol.consts) {
		return cv.w.constant(i, cv), true
	}
	return nil, false
}

// Parent is none: the variables are all here.
func (cv *changeVars) Parent() interpreter.Activation { return nil }

// FindStringKey is how the interpreter reads change.<key>: straight from
// the plan's change, without a map.
func (cv *changeVars) FindStringKey(k string) (any, bool) {
	switch k {
	case "kind":
		return string(cv.kind), true
	case "name":
		return cv.name, true
	case "type":
		return string(cv.c.Action), true
	case "id":
		return cv.objectID(), true
	case "pointer":
		return cv.pointer, true
	case "line":
		return int64(cv.lineNo()), true
	case "before":
		return cv.before, true
	case "after":
		return cv.after, true
	case "fields":
		if cv.fields == nil {
			cv.fields = types.DefaultTypeAdapter.NativeToValue(cv.fieldList())
		}
		return cv.fields, true
	case "account":
		return cv.account, true
	case "blocked":
		return cv.c.Blocked, true
	case "note":
		return cv.c.Note, true
	}
	return nil, false
}

// mapper is the change as a CEL map, for an expression that reads the
// change whole (change == x, a macro over its keys, change['after']).
func (cv *changeVars) mapper() traits.Mapper {
	if !cv.fullMade {
		cv.full, cv.fullMade = types.DefaultTypeAdapter.NativeToValue(cv.vars()).(traits.Mapper), true
	}
	return cv.full
}

// The change is a ref.Val and a map, each method the full map's.

func (cv *changeVars) ConvertToNative(t reflect.Type) (any, error) {
	return cv.mapper().ConvertToNative(t)
}
func (cv *changeVars) ConvertToType(t ref.Type) ref.Val { return cv.mapper().ConvertToType(t) }
func (cv *changeVars) Equal(o ref.Val) ref.Val          { return cv.mapper().Equal(o) }
func (cv *changeVars) Type() ref.Type                   { return types.MapType }
func (cv *changeVars) Value() any                       { return cv.mapper().Value() }
func (cv *changeVars) Contains(k ref.Val) ref.Val       { return cv.mapper().Contains(k) }
func (cv *changeVars) Get(k ref.Val) ref.Val            { return cv.mapper().Get(k) }
func (cv *changeVars) Iterator() traits.Iterator        { return cv.mapper().Iterator() }
func (cv *changeVars) Size() ref.Val                    { return cv.mapper().Size() }
func (cv *changeVars) Find(k ref.Val) (ref.Val, bool)   { return cv.mapper().Find(k) }
func (cv *changeVars) IsZeroValue() bool                { return false }

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
