package policy

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/textline"
)

// A suite is the test files of a directory (`fleet-agent policy test
// DIR`): each *.test.yaml (.yml, .json) names a policy and lists cases,
// each a document planned against a fleet with the verdicts expected of the
// rules it names. It is the policy's own table test, the way `opa test` and
// `conftest verify` test Rego.
type suiteFile struct {
	Policy string      `yaml:"policy"`
	Cases  []suiteCase `yaml:"cases"`
}

type suiteCase struct {
	Name     string `yaml:"name"`
	Document string `yaml:"document"`
	// Fleet is a document the fleet holds before (as if applied); none is
	// an empty fleet.
	Fleet string `yaml:"fleet"`
	Prune bool   `yaml:"prune"`
	// MaxTeardowns is apply.maxTeardowns for the case's plan; none is the
	// config's default.
	MaxTeardowns *int   `yaml:"maxTeardowns"`
	Tenant       string `yaml:"tenant"`
	// Approvals are the logins that approved; Teams the members of each
	// org/team slug.
	Approvals []string            `yaml:"approvals"`
	Teams     map[string][]string `yaml:"teams"`
	// Expect maps a rule's name to its verdict: pass, deny, warn, approve
	// (awaiting) or approved.
	Expect map[string]string `yaml:"expect"`
}

// CaseResult is one case's outcome.
type CaseResult struct {
	File, Name string
	// Failures say what differed; none is a pass.
	Failures []string
}

// Line is `PASS file: name` or `FAIL file: name: what differed`, one line
// of plain text whatever the test file's name and its case names hold.
func (c CaseResult) Line() string {
	if len(c.Failures) == 0 {
		return textline.Plain("PASS " + c.File + ": " + c.Name)
	}
	return textline.Plain("FAIL " + c.File + ": " + c.Name + ": " + strings.Join(c.Failures, "; "))
}

// SuiteResult is every case of a directory.
type SuiteResult struct{ Cases []CaseResult }

// Passed counts the cases that passed.
func (s *SuiteResult) Passed() int {
	n := 0
	for _, c := range s.Cases {
		if len(c.Failures) == 0 {
			n++
		}
	}
	return n
}

// RunSuite runs the test files of dir. A file that cannot be read, a
// policy that does not compile or a fixture that is not a valid document is
// an INVALID_INPUT refusal: the suite says nothing until it runs whole.
func RunSuite(dir string) (*SuiteResult, error) {
	// dir is a name, never a pattern: a directory named g[1] holds its
	// own tests, and g? names no other.
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, refusal.Wrap(refusal.InvalidInput, err, "cannot read the directory %s", dir)
	}
	var files []string
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() && (strings.HasSuffix(name, ".test.yaml") || strings.HasSuffix(name, ".test.yml") || strings.HasSuffix(name, ".test.json")) {
			files = append(files, filepath.Join(dir, name))
		}
	}
	sort.Strings(files)
	if len(files) == 0 {
		return nil, refusal.New(refusal.InvalidInput, "%s holds no policy test file (*.test.yaml, *.test.yml or *.test.json)", dir)
	}
	res := &SuiteResult{}
	for _, f := range files {
		cases, err := runFile(f)
		if err != nil {
			return nil, err
		}
		res.Cases = append(res.Cases, cases...)
	}
	return res, nil
}

func runFile(path string) ([]CaseResult, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, refusal.Wrap(refusal.InvalidInput, err, "cannot read %s", path)
	}
	var sf suiteFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&sf); err != nil {
		return nil, refusal.Wrap(refusal.InvalidInput, err, "%s is not a policy test file (policy, cases: name, document, fleet, prune, maxTeardowns, tenant, approvals, teams, expect)", path)
	}
	dir := filepath.Dir(path)
	rel := func(p string) string {
		if filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(dir, p)
	}
	if sf.Policy == "" {
		return nil, refusal.New(refusal.InvalidInput, "%s names no policy file (policy: FILE)", path)
	}
	pdata, err := os.ReadFile(rel(sf.Policy))
	if err != nil {
		return nil, refusal.Wrap(refusal.InvalidInput, err, "%s: cannot read its policy", path)
	}
	pol, err := Load(pdata)
	if err != nil {
		return nil, refusal.Wrap(refusal.InvalidInput, err, "%s: the policy %s", path, sf.Policy)
	}
	names := make([]string, len(pol.Rules))
	for i, r := range pol.Rules {
		names[i] = r.Name
	}
	var out []CaseResult
	for i, c := range sf.Cases {
		name := c.Name
		if name == "" {
			name = fmt.Sprintf("case %d", i+1)
		}
		r := CaseResult{File: filepath.Base(path), Name: name}
		read := func(p string) (*fleet.Document, []byte, error) {
			data, err := os.ReadFile(rel(p))
			if err != nil {
				return nil, nil, refusal.Wrap(refusal.InvalidInput, err, "%s: %s: cannot read %s", path, name, p)
			}
			d, errs := fleet.Validate(p, data)
			if len(errs) > 0 {
				return nil, nil, refusal.New(refusal.InvalidInput, "%s: %s: %s is not a valid document: %s", path, name, p, errs[0].String())
			}
			return d, data, nil
		}
		if c.Document == "" {
			return nil, refusal.New(refusal.InvalidInput, "%s: %s names no document", path, name)
		}
		if c.MaxTeardowns != nil && *c.MaxTeardowns < 0 {
			return nil, refusal.New(refusal.InvalidInput, "%s: %s: maxTeardowns is %d; it counts substrates (0 allows no teardown)", path, name, *c.MaxTeardowns)
		}
		doc, ddata, err := read(c.Document)
		if err != nil {
			return nil, err
		}
		tenant := c.Tenant
		if tenant == "" {
			tenant = "root"
		}
		snap := inventory.NewSnapshot(nil)
		if c.Fleet != "" {
			before, _, err := read(c.Fleet)
			if err != nil {
				return nil, err
			}
			snap = FleetOf(before, tenant)
		}
		p := plan.Make(doc, snap, plan.Options{Tenant: tenant, Prune: c.Prune, MaxTeardowns: c.MaxTeardowns})
		rep := pol.Evaluate(Input{Doc: doc, Data: ddata, Snap: snap, Plan: p, Tenant: tenant})
		if len(c.Approvals) > 0 {
			_ = MarkApproved(rep, c.Approvals, func(org, team, login string) (bool, error) {
				return slices.ContainsFunc(c.Teams[org+"/"+team], func(m string) bool { return strings.EqualFold(m, login) }), nil
			})
		}
		got := map[string]plan.RuleVerdict{}
		for _, v := range rep.Rules {
			got[v.Name] = v
		}
		for _, rule := range sortedKeys(c.Expect) {
			want := c.Expect[rule]
			if !slices.Contains([]string{"pass", "deny", "warn", "approve", "approved"}, want) {
				r.Failures = append(r.Failures, fmt.Sprintf("%s: the expected verdict %q is not pass, deny, warn, approve or approved", rule, want))
				continue
			}
			v, ok := got[rule]
			if !ok {
				r.Failures = append(r.Failures, fmt.Sprintf("no rule %q in the policy (it has %s)", rule, strings.Join(names, ", ")))
				continue
			}
			verdict := string(v.Verdict)
			if v.Verdict == plan.VerdictApprove && v.Approved != "" {
				verdict = "approved"
			}
			if verdict != want {
				what := fmt.Sprintf("%s: %s, want %s", rule, verdict, want)
				if v.Message != "" {
					what += " (" + v.Message + ")"
				}
				r.Failures = append(r.Failures, what)
			}
		}
		out = append(out, r)
	}
	return out, nil
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
