// Package policy is the policy of a fleet's plans: rules written in CEL
// that every plan is judged by before it applies. A rule matches changes
// (by kind, change type and provider account), holds an expression over the
// change, the whole plan and the document, and says what a broken rule does:
// deny the apply, warn, or wait for an approval by named GitHub users or
// teams. Its message is an expression too, so a rule says what broke it in
// the words of the change.
//
// Every expression is parsed, type-checked and cost-estimated when the file
// is loaded; a file that does not compile is refused with the line of each
// rule at fault, so the agent can keep its last good policy instead of
// running one that fails half way. At evaluation each expression also runs
// under a cost limit: a policy can never stall a plan.
//
// The package knows nothing of GitHub: who approved is given to it
// (MarkApproved), and where the file comes from is its caller's business.
package policy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"gopkg.in/yaml.v3"

	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/textline"
)

// Action is what a broken rule does.
type Action string

// The actions.
const (
	Deny    Action = "deny"
	Warn    Action = "warn"
	Approve Action = "approve"
)

// Limits of a policy file. The cost limits bound one evaluation of one
// expression (on one change): the estimate is checked at load with every
// list and map taken as large as MaxSize (ten times the longest list a
// document may hold) and every string as long as MaxString, and the runtime
// limit stops an evaluation that goes over it anyway (it then counts as a
// broken rule).
const (
	MaxFileBytes     = 1 << 20
	MaxRules         = 1000
	MaxExprBytes     = 8192
	MaxSize          = 1024
	MaxEstimatedCost = 1_000_000
	RuntimeCostLimit = 10_000_000
	// MaxInputSize is the longest string or list an expression can read:
	// a document's size.
	MaxInputSize = fleet.MaxDocumentBytes
)

// Match selects the changes a rule is evaluated on; an empty list matches
// everything, except that changes default to create, update and delete
// (an unchanged object is judged only when a rule names "unchanged", an
// upgrade hop only when it names "upgrade": rules written for objects of
// the document would read fields a hop does not have).
type Match struct {
	Kinds    []string `json:"kinds,omitempty"`
	Changes  []string `json:"changes,omitempty"`
	Accounts []string `json:"accounts,omitempty"`
	// UnknownAccount says what accounts does with a change whose account
	// cannot be known (account.go); "" is UnknownMatches.
	UnknownAccount UnknownAccount `json:"unknownAccount,omitempty"`
}

// Rule is one rule of a policy.
type Rule struct {
	Name       string   `json:"name"`
	Match      Match    `json:"match,omitzero"`
	Expression string   `json:"expression"`
	Action     Action   `json:"action"`
	Approvers  []string `json:"approvers,omitempty"`
	Message    string   `json:"message,omitempty"`
	// Line is the rule's line in its file.
	Line int `json:"-"`

	expr program
	msg  program // prg nil: the default message
	// plain is the expression as written, when expr reads plan constants
	// (hoist.go) cut out of it; nil prg otherwise.
	plain program
	// impliedKinds and impliedTypes are what the expression itself
	// requires of change.kind and change.type (implied): each a set the
	// kind (type) must be in.
	impliedKinds, impliedTypes [][]string
	// compared are the expression's comparisons of change.kind and
	// change.type with literals, for the warnings.
	compared []comparison
}

// program is one compiled expression and what it costs the budget of a
// judgement (budget.go).
type program struct {
	prg cel.Program
	// tracked: the expression runs under the runtime cost limit, and is
	// charged what it actually cost (compile).
	tracked bool
	// flat is what an untracked expression is charged per evaluation: its
	// estimate at load, with strings and lists of up to MaxSize.
	flat uint64
}

// Policy is a loaded, compiled policy.
type Policy struct {
	Rules []*Rule
	// consts are the plan constants the rules' expressions read (hoist.go).
	consts []constant
	// Hash is the SHA-256 of the file's bytes: two agents judging by the
	// same hash judge alike.
	Hash string
}

// Problem is one thing wrong with a policy file, at its line.
type Problem struct {
	Line    int    `json:"line"`
	Rule    string `json:"rule,omitempty"`
	Message string `json:"message"`
}

func (p Problem) String() string {
	where := fmt.Sprintf("line %d", p.Line)
	if p.Rule != "" {
		where += fmt.Sprintf(": rule %q", p.Rule)
	}
	return where + ": " + p.Message
}

// Problems are what Load found wrong; the refusal Load returns wraps them.
type Problems []Problem

func (ps Problems) Error() string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, "; ")
}

// env is the CEL environment every expression is compiled in: the three
// variables as maps of dynamic values (a policy reads them as JSON), with
// the optional-field syntax (change.after.?gpus) and the string extensions.
var env = sync.OnceValues(func() (*cel.Env, error) {
	return cel.NewEnv(
		cel.Variable("change", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("plan", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("document", cel.MapType(cel.StringType, cel.DynType)),
		cel.OptionalTypes(),
		cel.CrossTypeNumericComparisons(true),
		groupByOverload(),
		// The loops of an expression print as written (hoist.go).
		cel.EnableMacroCallTracking(),
	)
})

var (
	loginRE = regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})$`)
	teamRE  = regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$`)
	changes = []string{string(plan.Create), string(plan.Update), string(plan.Delete), string(plan.Unchanged), string(plan.Upgrade)}
)

// Load reads a policy file (YAML, or JSON, which YAML reads too), checks it
// against the published schema's rules and compiles every expression. A
// file with problems is an INVALID_INPUT refusal listing each at its line.
func Load(data []byte) (*Policy, error) {
	if len(data) > MaxFileBytes {
		return nil, refusal.New(refusal.InvalidInput, "the policy file is %d bytes, over the limit of %d: split long expressions or drop rules", len(data), MaxFileBytes)
	}
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil {
		return nil, refusal.Wrap(refusal.InvalidInput, err, "the policy file is neither YAML nor JSON; fix its syntax")
	}
	l := &loader{}
	pol := l.file(&root)
	if len(l.problems) > 0 {
		return nil, &refusal.Error{Code: refusal.InvalidInput,
			Message: "the policy does not compile (" + l.problems.Error() + "); fix the rules named",
			Err:     l.problems}
	}
	sum := sha256.Sum256(data)
	pol.Hash = hex.EncodeToString(sum[:])
	return pol, nil
}

// runtimeCostLimit is RuntimeCostLimit, lowered by a test.
var runtimeCostLimit uint64 = RuntimeCostLimit

type loader struct {
	problems Problems
	consts   []constant
}

// add records a problem. Its words may quote the file (a CEL error echoes
// the expression's text), so the message and the rule are made plain: a
// policy in a pull request cannot forge a line where the problem is shown.
func (l *loader) add(line int, rule, format string, args ...any) {
	l.problems = append(l.problems, Problem{Line: line, Rule: textline.Plain(rule), Message: textline.Plain(fmt.Sprintf(format, args...))})
}

func (l *loader) file(root *yaml.Node) *Policy {
	pol := &Policy{}
	doc := root
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		doc = doc.Content[0]
	}
	if doc.Kind != yaml.MappingNode {
		l.add(doc.Line, "", "the policy must be an object with a list of rules (\"rules\")")
		return pol
	}
	var rules *yaml.Node
	l.fields(doc, "", func(key string, v *yaml.Node) {
		switch key {
		case "$schema":
			l.str(v, "", "$schema")
		case "version":
			if v.Kind != yaml.ScalarNode || v.Tag != "!!int" || v.Value != "1" {
				l.add(v.Line, "", "version must be 1")
			}
		case "rules":
			rules = v
		default:
			l.add(v.Line, "", "unknown field %q (the policy has version, rules)", key)
		}
	})
	if rules == nil {
		l.add(doc.Line, "", "the policy has no \"rules\"")
		return pol
	}
	if rules.Kind != yaml.SequenceNode {
		l.add(rules.Line, "", "rules must be a list")
		return pol
	}
	if len(rules.Content) > MaxRules {
		l.add(rules.Line, "", "%d rules, over the limit of %d", len(rules.Content), MaxRules)
		return pol
	}
	names := map[string]int{}
	for _, n := range rules.Content {
		r := l.rule(n)
		if r == nil {
			continue
		}
		if first, dup := names[r.Name]; dup {
			l.add(r.Line, r.Name, "a second rule of this name (the first is on line %d); names tell verdicts apart", first)
			continue
		}
		names[r.Name] = r.Line
		pol.Rules = append(pol.Rules, r)
	}
	pol.consts = l.consts
	return pol
}

// fields calls f for each key of a mapping, refusing duplicate and
// non-string keys.
func (l *loader) fields(m *yaml.Node, rule string, f func(key string, v *yaml.Node)) {
	seen := map[string]bool{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			l.add(k.Line, rule, "a key must be a string")
			continue
		}
		if seen[k.Value] {
			l.add(k.Line, rule, "field %q given twice", k.Value)
			continue
		}
		seen[k.Value] = true
		f(k.Value, v)
	}
}

func (l *loader) str(v *yaml.Node, rule, field string) (string, bool) {
	if v.Kind != yaml.ScalarNode || (v.Tag != "!!str" && v.Tag != "!!null" && v.Style == 0) {
		l.add(v.Line, rule, "%s must be a string", field)
		return "", false
	}
	if v.Tag == "!!null" && v.Style == 0 {
		l.add(v.Line, rule, "%s must be a string", field)
		return "", false
	}
	return v.Value, true
}

func (l *loader) strs(v *yaml.Node, rule, field string, allowed []string, check func(string) bool, what string) []string {
	if v.Kind != yaml.SequenceNode {
		l.add(v.Line, rule, "%s must be a list of strings", field)
		return nil
	}
	var out []string
	for _, e := range v.Content {
		s, ok := l.str(e, rule, field)
		if !ok {
			continue
		}
		switch {
		case allowed != nil && !slices.Contains(allowed, s):
			l.add(e.Line, rule, "%s: %q is not one of %s", field, s, strings.Join(allowed, ", "))
		case check != nil && !check(s):
			l.add(e.Line, rule, "%s: %q is not %s", field, s, what)
		default:
			out = append(out, s)
		}
	}
	return out
}

func kindNames() []string {
	out := make([]string, len(inventory.Kinds), len(inventory.Kinds)+1)
	for i, k := range inventory.Kinds {
		out[i] = string(k)
	}
	return append(out, string(plan.KindSubstrate))
}

func (l *loader) rule(n *yaml.Node) *Rule {
	if n.Kind != yaml.MappingNode {
		l.add(n.Line, "", "a rule must be an object")
		return nil
	}
	r := &Rule{Line: n.Line}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == "name" {
			r.Name = n.Content[i+1].Value
		}
	}
	before := len(l.problems)
	var exprNode, msgNode *yaml.Node
	l.fields(n, r.Name, func(key string, v *yaml.Node) {
		switch key {
		case "name":
			if s, ok := l.str(v, r.Name, "name"); ok && (s == "" || len(s) > 100 || !textline.IsPlain(s)) {
				l.add(v.Line, r.Name, "name must be 1 to 100 characters on one line, without control or text-direction characters")
			}
		case "match":
			if v.Kind != yaml.MappingNode {
				l.add(v.Line, r.Name, "match must be an object (kinds, changes, accounts, unknownAccount)")
				return
			}
			l.fields(v, r.Name, func(key string, v *yaml.Node) {
				switch key {
				case "kinds":
					r.Match.Kinds = l.strs(v, r.Name, "match.kinds", kindNames(), nil, "")
				case "changes":
					r.Match.Changes = l.strs(v, r.Name, "match.changes", changes, nil, "")
				case "accounts":
					r.Match.Accounts = l.strs(v, r.Name, "match.accounts", nil, func(s string) bool { return s != "" }, "a provider account's name")
				case "unknownAccount":
					if s, ok := l.str(v, r.Name, "match.unknownAccount"); ok {
						switch u := UnknownAccount(s); u {
						case UnknownMatches, UnknownSkips:
							r.Match.UnknownAccount = u
						default:
							l.add(v.Line, r.Name, "match.unknownAccount must be %q (the default: a change whose account cannot be known is matched) or %q", UnknownMatches, UnknownSkips)
						}
					}
				default:
					l.add(v.Line, r.Name, "unknown field match.%s (match has kinds, changes, accounts, unknownAccount)", key)
				}
			})
		case "expression":
			if s, ok := l.str(v, r.Name, "expression"); ok {
				r.Expression, exprNode = s, v
			}
		case "message":
			if s, ok := l.str(v, r.Name, "message"); ok {
				r.Message, msgNode = s, v
			}
		case "action":
			if s, ok := l.str(v, r.Name, "action"); ok {
				r.Action = Action(s)
				if !slices.Contains([]Action{Deny, Warn, Approve}, r.Action) {
					l.add(v.Line, r.Name, "action %q is not deny, warn or approve", s)
				}
			}
		case "approvers":
			r.Approvers = l.strs(v, r.Name, "approvers", nil, func(s string) bool { return loginRE.MatchString(s) || teamRE.MatchString(s) },
				"a GitHub login or an org/team slug")
		default:
			l.add(v.Line, r.Name, "unknown field %q (a rule has name, match, expression, action, approvers, message)", key)
		}
	})
	if r.Name == "" {
		l.add(n.Line, "", "a rule has no name")
	}
	if exprNode == nil {
		l.add(n.Line, r.Name, "a rule has no expression")
	}
	if r.Action == "" {
		l.add(n.Line, r.Name, "a rule has no action (deny, warn or approve)")
	}
	if r.Action == Approve && len(r.Approvers) == 0 {
		l.add(n.Line, r.Name, "an approve rule names its approvers (GitHub logins or org/team slugs)")
	}
	if r.Action != Approve && len(r.Approvers) > 0 {
		l.add(n.Line, r.Name, "approvers are for an approve rule; this one is %s", r.Action)
	}
	if exprNode != nil {
		var checked *cel.Ast
		r.expr, checked = l.compile(exprNode, r.Name, "expression", r.Expression, types.BoolType)
		if checked != nil {
			r.impliedKinds, r.impliedTypes = implied(checked.NativeRep().Expr())
			r.compared = comparisons(checked.NativeRep().Expr())
			if h, ok := l.hoisted(checked); ok {
				r.plain, r.expr = r.expr, h
			}
		}
	}
	if msgNode != nil && r.Message != "" {
		r.msg, _ = l.compile(msgNode, r.Name, "message", r.Message, types.StringType)
	}
	if len(l.problems) > before {
		return nil
	}
	return r
}

// compile parses, type-checks and cost-estimates one expression; the
// result must be of type want (or dyn, checked when it runs). An
// expression whose estimate stays within the runtime limit even with every
// string and list it reads as long as the largest input allows (a 16 MiB
// document: no string of it is longer, no list has more items, and the plan
// and the stored fleet are made from documents) can never reach the limit,
// so it runs without the limit's tracking (half of a simple rule's time):
// a string test or a comparison costs in proportion to what it reads, and
// only a loop, over the document or the calls, needs the limit. tracked
// says which it is.
func (l *loader) compile(n *yaml.Node, rule, field, src string, want *types.Type) (pr program, checked *cel.Ast) {
	if len(src) > MaxExprBytes {
		l.add(n.Line, rule, "%s is %d bytes, over the limit of %d", field, len(src), MaxExprBytes)
		return program{}, nil
	}
	if strings.TrimSpace(src) == "" {
		l.add(n.Line, rule, "%s is empty", field)
		return program{}, nil
	}
	e, err := env()
	if err != nil {
		l.add(n.Line, rule, "the CEL environment: %v", err)
		return program{}, nil
	}
	ast, iss := e.Compile(src)
	if iss != nil && iss.Err() != nil {
		for _, ce := range iss.Errors() {
			line := n.Line
			if n.Style == yaml.LiteralStyle || n.Style == yaml.FoldedStyle {
				line += ce.Location.Line() // a block scalar starts on the next line
			} else {
				line += ce.Location.Line() - 1
			}
			l.add(line, rule, "%s, column %d: %s", field, ce.Location.Column()+1, ce.Message)
		}
		return program{}, nil
	}
	out := ast.OutputType()
	if !out.IsExactType(want) && !out.IsExactType(types.DynType) {
		l.add(n.Line, rule, "%s gives %s; it must give %s", field, out, want)
		return program{}, nil
	}
	est, err := e.EstimateCost(ast, sizes{max: MaxSize})
	if err != nil {
		l.add(n.Line, rule, "%s: cannot estimate its cost: %v", field, err)
		return program{}, nil
	}
	if est.Max > MaxEstimatedCost {
		l.add(n.Line, rule, "%s may cost up to %d, over the limit of %d (with lists and strings of up to %d): avoid nested loops over the document or the calls",
			field, est.Max, uint64(MaxEstimatedCost), MaxSize)
		return program{}, nil
	}
	opts := []cel.ProgramOption{cel.EvalOptions(cel.OptOptimize)}
	if largest, err := e.EstimateCost(ast, sizes{max: MaxInputSize}); err != nil || largest.Max > runtimeCostLimit {
		// A loop: its cost is tracked, and it checks every
		// interruptEvery iterations whether its judgement was cancelled.
		opts = append(opts, cel.CostLimit(runtimeCostLimit), cel.InterruptCheckFrequency(interruptEvery), cel.CostTracking(groupByCost{}))
		pr.tracked = true
	}
	pr.flat = max(est.Max, 1)
	pr.prg, err = e.Program(ast, opts...)
	if err != nil {
		l.add(n.Line, rule, "%s: %v", field, err)
		return program{}, nil
	}
	return pr, ast
}

// program compiles src, an expression the loader made of a checked one
// (hoist.go), in the environment with vars added: as compile does, without
// the checks its source already passed. ok is false if it does not compile.
func (l *loader) program(src string, vars []cel.EnvOption) (pr program, ok bool) {
	e, err := env()
	if err != nil {
		return program{}, false
	}
	if len(vars) > 0 {
		if e, err = e.Extend(vars...); err != nil {
			return program{}, false
		}
	}
	ast, iss := e.Compile(src)
	if iss != nil && iss.Err() != nil {
		return program{}, false
	}
	return l.programOf(e, ast)
}

// programOf is the program of a checked expression of env e.
func (l *loader) programOf(e *cel.Env, ast *cel.Ast) (pr program, ok bool) {
	est, err := e.EstimateCost(ast, sizes{max: MaxSize})
	if err != nil {
		return program{}, false
	}
	opts := []cel.ProgramOption{cel.EvalOptions(cel.OptOptimize)}
	if largest, err := e.EstimateCost(ast, sizes{max: MaxInputSize}); err != nil || largest.Max > runtimeCostLimit {
		opts = append(opts, cel.CostLimit(runtimeCostLimit), cel.InterruptCheckFrequency(interruptEvery), cel.CostTracking(groupByCost{}))
		pr.tracked = true
	}
	pr.flat = max(est.Max, 1)
	if pr.prg, err = e.Program(ast, opts...); err != nil {
		return program{}, false
	}
	return pr, true
}
