package state

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// backendFiles are the files of the two backends; every other file of the
// package is written against the backend interface only.
var backendFiles = map[string]bool{"backend.go": true, "bolt.go": true, "etcd.go": true, "leader.go": true}

// backendBranches lists where a file's source asks which backend it is on:
// a backend type named, a backend's client imported, the store's backend
// asserted to a type, a backend's handle compared (s.etcd == nil), or the
// backend's name compared.
func backendBranches(fset *token.FileSet, f *ast.File) []string {
	var out []string
	at := func(n ast.Node, what string) {
		out = append(out, fset.Position(n.Pos()).String()+": "+what)
	}
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); strings.HasPrefix(p, "go.etcd.io/") {
			at(imp, "imports "+p)
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.Ident:
			if n.Name == "boltBackend" || n.Name == "etcdBackend" {
				at(n, "names "+n.Name)
			}
		case *ast.TypeAssertExpr:
			if sel, ok := n.X.(*ast.SelectorExpr); ok && sel.Sel.Name == "be" {
				at(n, "asserts the store's backend to a type")
			}
		case *ast.BinaryExpr:
			for _, side := range []ast.Expr{n.X, n.Y} {
				if sel, ok := side.(*ast.SelectorExpr); ok && (sel.Sel.Name == "etcd" || sel.Sel.Name == "db") {
					at(n, "tests which backend's handle is set")
				}
				if call, ok := side.(*ast.CallExpr); ok {
					if sel, ok := call.Fun.(*ast.SelectorExpr); ok && (sel.Sel.Name == "Backend" || sel.Sel.Name == "kind") {
						at(n, "compares the backend's name")
					}
				}
			}
		}
		return true
	})
	return out
}

// TestNoBackendBranchOutsideTheBackends: outside the backend files, the
// store's code never asks which backend it runs on.
func TestNoBackendBranchOutsideTheBackends(t *testing.T) {
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") || backendFiles[name] {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, b := range backendBranches(fset, f) {
			t.Errorf("%s: make it a method of backend (backend.go), given by bolt.go and etcd.go", b)
		}
	}
	if checked < 5 {
		t.Fatalf("only %d files checked: the test is looking in the wrong place", checked)
	}
}

// TestBackendBranchesAreSeen: the check finds each kind of branch.
func TestBackendBranchesAreSeen(t *testing.T) {
	src := `package state

import bolt "go.etcd.io/bbolt"

func f(s *Store) int {
	if _, ok := s.be.(*etcdBackend); ok {
		return 1
	}
	if s.Backend() == "etcd" {
		return 2
	}
	if s.etcd == nil {
		return 3
	}
	var _ boltBackend
	var _ *bolt.DB
	return 0
}
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "branchy.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(backendBranches(fset, f), "\n")
	for _, want := range []string{"imports go.etcd.io/bbolt", "names etcdBackend", "asserts the store's backend", "compares the backend's name", "tests which backend's handle is set", "names boltBackend"} {
		if !strings.Contains(got, want) {
			t.Errorf("the check missed %q; it found:\n%s", want, got)
		}
	}
}
