package boundary

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// crashName is what names test equipment for crashing: a hook, a crash
// point, a crash switch. None of it belongs to a production package's API,
// where any caller could reach it; tests reach it through export_test.go.
var crashName = regexp.MustCompile(`Hook|^Point|Crash`)

// crashAPI lists the exported identifiers of the package made of files
// (name to source, test files left out) whose names say they are crash
// equipment: types, functions, methods, constants, variables and the
// exported fields of exported structs, as `go doc -all` shows them.
func crashAPI(t *testing.T, files map[string]string) []string {
	t.Helper()
	fset := token.NewFileSet()
	var parsed []*ast.File
	for name, src := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, src, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		parsed = append(parsed, f)
	}
	p, err := doc.NewFromFiles(fset, parsed, "example.com/p")
	if err != nil {
		t.Fatal(err)
	}
	var bad []string
	check := func(name string) {
		if ast.IsExported(name) && crashName.MatchString(name) {
			bad = append(bad, name)
		}
	}
	values := func(vs []*doc.Value) {
		for _, v := range vs {
			for _, n := range v.Names {
				check(n)
			}
		}
	}
	values(p.Consts)
	values(p.Vars)
	for _, f := range p.Funcs {
		check(f.Name)
	}
	for _, ty := range p.Types {
		check(ty.Name)
		values(ty.Consts)
		values(ty.Vars)
		for _, f := range ty.Funcs {
			check(f.Name)
		}
		for _, m := range ty.Methods {
			check(ty.Name + "." + m.Name)
		}
		for _, spec := range ty.Decl.Specs {
			st, ok := spec.(*ast.TypeSpec).Type.(*ast.StructType)
			if !ok {
				continue
			}
			for _, fld := range st.Fields.List {
				for _, n := range fld.Names {
					if ast.IsExported(n.Name) {
						check(ty.Name + "." + n.Name)
					}
				}
			}
		}
	}
	slices.Sort(bad)
	return bad
}

// TestBoundarySubstrateExportsNoCrashHook: the substrate's API (what
// `go doc -all ./internal/substrate` shows) has no crash hook, crash point
// or crash switch; its tests reach them through export_test.go, and the
// adapters' tests kill a reconciler from outside (internal/substrate/killtest).
func TestBoundarySubstrateExportsNoCrashHook(t *testing.T) {
	dir := filepath.Join(repoRoot(t), "internal", "substrate")
	matches, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(matches) == 0 {
		t.Fatalf("no Go file in %s (%v): the test is looking in the wrong place", dir, err)
	}
	files := map[string]string{}
	for _, m := range matches {
		b, err := os.ReadFile(m)
		if err != nil {
			t.Fatal(err)
		}
		files[filepath.Base(m)] = string(b)
	}
	if bad := crashAPI(t, files); len(bad) > 0 {
		t.Errorf("internal/substrate exports crash equipment %v: keep it unexported and reach it from tests through export_test.go", bad)
	}
}

// TestBoundaryCrashAPICatches: each shape the crash equipment had in the
// substrate's API is caught, and the same names in a test file are not.
func TestBoundaryCrashAPICatches(t *testing.T) {
	src := `package p
type PointKind string
const PointAfterCall PointKind = "afterCall"
type Point struct{ Kind PointKind }
type Hooks struct{ At func(Point) bool }
type Options struct {
	Every int
	Hooks *Hooks
	crashAt func(Point) bool
}
type Reconciler struct{}
func (r *Reconciler) Crash() {}
func (r *Reconciler) Wake() {}
func IsCrashed(err error) bool { return false }
func isCrashed(err error) bool { return false }
`
	got := crashAPI(t, map[string]string{"p.go": src, "export_test.go": "package p\nfunc SetCrashAt() {}\n"})
	want := []string{"Hooks", "Hooks.At", "IsCrashed", "Options.Hooks", "Point", "Point.Kind", "PointAfterCall", "PointKind", "Reconciler.Crash"}
	if !slices.Equal(got, want) {
		t.Fatalf("crashAPI = %v, want %v", got, want)
	}
}
