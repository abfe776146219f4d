package policy

import (
	"strconv"
	"strings"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
	"cel.dev/cel-go/interpreter"
	"cel.dev/cel-go/parser"
)

// A rule over the whole document (how many pools a site has, how many
// 8-GPU flavors the fleet has) reads the same values for every change it
// judges. Such a part of an expression, one that reads only plan and
// document and holds a loop or an indexed read, is worked out once per
// plan: at load it is cut out of the expression as an expression of its
// own (a plan constant), the rule reads it as a variable, and a judgement
// evaluates it the first time a rule reads it, then reuses the value for
// every other change. Its value (or its error) is the one the part would
// have had for each change, so the verdicts do not change, only their cost
// (TestFastPathAgrees checks it).
//
// The indexed read is groupBy: list.groupBy('field') is a map from each
// value of the field (a string) to the items holding it, so "the pools of
// this change's site" is document.pools.groupBy('site')[change.after.site]:
// one pass over the pools per plan, and a lookup per change.

// constPrefix names the plan constants' variables; a policy cannot name
// them (they are not declared in its environment).
const constPrefix = "__plan_const_"

// hoisting is off in a benchmark measuring what it saves.
var hoisting = true

// constant is one plan constant: its program, run with plan and document.
type constant struct {
	prg program
	src string
}

// hoisted compiles the plan constants of a checked expression and the
// expression reading them; ok is false when it has none, or when any
// fails to compile (the expression then runs whole, as written).
func (l *loader) hoisted(a *cel.Ast) (expr program, ok bool) {
	if !hoisting {
		return program{}, false
	}
	n := len(l.consts)
	e, err := env()
	if err != nil {
		return program{}, false
	}
	rewritten, srcs, names, ok := hoist(e, a, func() string { n++; return constName(n - 1) })
	if !ok {
		return program{}, false
	}
	var consts []constant
	for _, src := range srcs {
		p, ok := l.program(src, nil)
		if !ok {
			return program{}, false
		}
		consts = append(consts, constant{prg: p, src: src})
	}
	vars := make([]cel.EnvOption, len(names))
	for i, name := range names {
		vars[i] = cel.Variable(name, cel.DynType)
	}
	ee, err := e.Extend(vars...)
	if err != nil {
		return program{}, false
	}
	expr, ok = l.programOf(ee, rewritten)
	if !ok {
		return program{}, false
	}
	l.consts = append(l.consts, consts...)
	return expr, true
}

// groupByOverload is list.groupBy(string).
func groupByOverload() cel.EnvOption {
	return cel.Function("groupBy",
		cel.MemberOverload("list_groupBy_string", []*cel.Type{cel.ListType(cel.DynType), cel.StringType}, cel.MapType(cel.StringType, cel.ListType(cel.DynType)),
			cel.BinaryBinding(groupBy)))
}

// groupBy groups the items of a list (maps) by a string field; items
// without it, or with another type there, are left out.
func groupBy(lhs, rhs ref.Val) ref.Val {
	l, ok := lhs.(traits.Lister)
	if !ok {
		return types.NewErr("groupBy: not a list: %s", lhs.Type())
	}
	field, ok := rhs.(types.String)
	if !ok {
		return types.NewErr("groupBy: the field is not a string: %s", rhs.Type())
	}
	groups := map[string][]ref.Val{}
	var order []string
	for it := l.Iterator(); it.HasNext() == types.True; {
		item := it.Next()
		m, ok := item.(traits.Mapper)
		if !ok {
			continue
		}
		v, found := m.Find(field)
		if !found {
			continue
		}
		s, ok := v.(types.String)
		if !ok {
			continue
		}
		if _, seen := groups[string(s)]; !seen {
			order = append(order, string(s))
		}
		groups[string(s)] = append(groups[string(s)], item)
	}
	out := make(map[ref.Val]ref.Val, len(groups))
	for _, k := range order {
		out[types.String(k)] = types.NewRefValList(types.DefaultTypeAdapter, groups[k])
	}
	return types.NewRefValMap(types.DefaultTypeAdapter, out)
}

// groupByCost is what groupBy costs at runtime: one per item read.
type groupByCost struct{}

func (groupByCost) CallCost(function, _ string, args []ref.Val, _ ref.Val) *uint64 {
	if function != "groupBy" || len(args) == 0 {
		return nil
	}
	if l, ok := args[0].(traits.Lister); ok {
		if n, ok := l.Size().(types.Int); ok {
			c := uint64(n) + 1
			return &c
		}
	}
	return nil
}

// hoist cuts the plan constants out of a checked expression: each
// constant's source, its variable's name, and the expression reading them
// (checked in env with those variables); ok is false when there is nothing
// to cut or the cut fails.
func hoist(e *cel.Env, a *cel.Ast, next func() string) (rewritten *cel.Ast, consts []string, names []string, ok bool) {
	native := a.NativeRep()
	info := native.SourceInfo()
	var cut []int64
	var visit func(e ast.NavigableExpr)
	visit = func(e ast.NavigableExpr) {
		if worth(e) && isPlanConstant(e) {
			cut = append(cut, e.ID())
			return
		}
		for _, c := range e.Children() {
			visit(c)
		}
	}
	visit(ast.NavigateAST(native))
	if len(cut) == 0 {
		return nil, nil, nil, false
	}
	// The unparser reads plain expressions, not navigable ones.
	plain := map[int64]ast.Expr{}
	var index func(e ast.Expr)
	index = func(e ast.Expr) {
		plain[e.ID()] = e
		for _, c := range children(e) {
			index(c)
		}
	}
	index(native.Expr())
	for _, id := range cut {
		src, err := parser.Unparse(plain[id], info)
		if err != nil {
			return nil, nil, nil, false
		}
		consts, names = append(consts, src), append(names, next())
	}
	vars := make([]cel.EnvOption, len(names))
	for i, name := range names {
		vars[i] = cel.Variable(name, cel.DynType)
	}
	opt, err := cel.NewStaticOptimizer(&cutter{ids: cut, names: names, vars: vars})
	if err != nil {
		return nil, nil, nil, false
	}
	out, iss := opt.Optimize(e, a)
	if iss != nil && iss.Err() != nil {
		return nil, nil, nil, false
	}
	return out, consts, names, true
}

// cutter replaces the parts of an expression cut out by their variables.
type cutter struct {
	ids   []int64
	names []string
	vars  []cel.EnvOption
}

func (c *cutter) Optimize(ctx *cel.OptimizerContext, a *ast.AST) *ast.AST {
	if err := ctx.ExtendEnv(c.vars...); err != nil {
		ctx.ReportErrorAtID(0, "%v", err)
		return a
	}
	byID := map[int64]ast.NavigableExpr{}
	ast.MatchDescendants(ast.NavigateAST(a), func(e ast.NavigableExpr) bool { byID[e.ID()] = e; return false })
	for i, id := range c.ids {
		if e, ok := byID[id]; ok {
			ctx.UpdateExpr(e, ctx.NewIdent(c.names[i]))
		}
	}
	return a
}

// children are an expression's direct sub-expressions.
func children(e ast.Expr) []ast.Expr {
	switch e.Kind() {
	case ast.SelectKind:
		return []ast.Expr{e.AsSelect().Operand()}
	case ast.CallKind:
		c := e.AsCall()
		out := append([]ast.Expr{}, c.Args()...)
		if c.IsMemberFunction() {
			out = append(out, c.Target())
		}
		return out
	case ast.ListKind:
		return e.AsList().Elements()
	case ast.MapKind:
		var out []ast.Expr
		for _, en := range e.AsMap().Entries() {
			out = append(out, en.AsMapEntry().Key(), en.AsMapEntry().Value())
		}
		return out
	case ast.StructKind:
		var out []ast.Expr
		for _, f := range e.AsStruct().Fields() {
			out = append(out, f.AsStructField().Value())
		}
		return out
	case ast.ComprehensionKind:
		c := e.AsComprehension()
		return []ast.Expr{c.IterRange(), c.AccuInit(), c.LoopCondition(), c.LoopStep(), c.Result()}
	}
	return nil
}

// worth: the part holds a loop or an indexed read, so working it out once
// saves something.
func worth(e ast.NavigableExpr) bool {
	return len(ast.MatchDescendants(e, func(e ast.NavigableExpr) bool {
		return e.Kind() == ast.ComprehensionKind || e.Kind() == ast.CallKind && e.AsCall().FunctionName() == "groupBy"
	})) > 0
}

// isPlanConstant: the part reads no variable but plan and document (and
// the ones its own loops bind).
func isPlanConstant(e ast.NavigableExpr) bool {
	for v := range freeVars(e) {
		if v != "plan" && v != "document" {
			return false
		}
	}
	return true
}

func freeVars(e ast.Expr) map[string]bool {
	out := map[string]bool{}
	var walk func(e ast.Expr, bound map[string]bool)
	walk = func(e ast.Expr, bound map[string]bool) {
		switch e.Kind() {
		case ast.IdentKind:
			if n := e.AsIdent(); !bound[n] {
				out[n] = true
			}
		case ast.SelectKind:
			walk(e.AsSelect().Operand(), bound)
		case ast.CallKind:
			c := e.AsCall()
			if c.IsMemberFunction() {
				walk(c.Target(), bound)
			}
			for _, a := range c.Args() {
				walk(a, bound)
			}
		case ast.ListKind:
			for _, x := range e.AsList().Elements() {
				walk(x, bound)
			}
		case ast.MapKind:
			for _, en := range e.AsMap().Entries() {
				me := en.AsMapEntry()
				walk(me.Key(), bound)
				walk(me.Value(), bound)
			}
		case ast.StructKind:
			for _, f := range e.AsStruct().Fields() {
				walk(f.AsStructField().Value(), bound)
			}
		case ast.ComprehensionKind:
			c := e.AsComprehension()
			walk(c.IterRange(), bound)
			inner := map[string]bool{}
			for k := range bound {
				inner[k] = true
			}
			inner[c.IterVar()] = true
			if c.HasIterVar2() {
				inner[c.IterVar2()] = true
			}
			inner[c.AccuVar()] = true
			walk(c.AccuInit(), bound)
			walk(c.LoopCondition(), inner)
			walk(c.LoopStep(), inner)
			walk(c.Result(), inner)
		default:
			// literals; an unspecified expression reads nothing
		}
	}
	walk(e, map[string]bool{})
	return out
}

// constName is the variable of the i-th plan constant of a policy.
func constName(i int) string { return constPrefix + strconv.Itoa(i) }

// constIndex is the index of a plan constant's variable, or -1.
func constIndex(name string) int {
	rest, ok := strings.CutPrefix(name, constPrefix)
	if !ok {
		return -1
	}
	i, err := strconv.Atoi(rest)
	if err != nil {
		return -1
	}
	return i
}

// constVars is the activation of a plan constant: plan and document.
type constVars struct{ cv *changeVars }

func (c constVars) ResolveName(name string) (any, bool) {
	if name == "change" {
		return nil, false
	}
	return c.cv.ResolveName(name)
}

func (constVars) Parent() interpreter.Activation { return nil }

// constant is the value of the i-th plan constant in this judgement: its
// program is run the first time a rule reads it, under the judgement's
// meter, and its value (an error too) kept for every other change.
func (w *world) constant(i int, cv *changeVars) ref.Val {
	if w.consts == nil {
		w.consts = make([]ref.Val, len(w.pol.consts))
	}
	if w.consts[i] == nil {
		out, err := w.m.eval(w.pol.consts[i].prg, constVars{cv})
		switch {
		case err != nil && (out == nil || !types.IsError(out)):
			out = types.WrapErr(err)
		case out == nil:
			out = types.NewErr("the plan constant %d gave no value", i)
		}
		w.consts[i] = out
	}
	return w.consts[i]
}

// asWritten is the rule with its expression as written (no plan
// constants): the reference the agreement test judges by.
func (r *Rule) asWritten() *Rule {
	if r.plain.prg == nil {
		return r
	}
	c := *r
	c.expr = r.plain
	return &c
}
