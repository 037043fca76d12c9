package idem_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// maxFuncLines is the most lines a function of the root module may span,
// from its func keyword to its closing brace (tests aside). A longer one
// is split into named steps, so that a reader meets each step's purpose in
// its doc comment rather than in the middle of a long body.
const maxFuncLines = 120

// TestNoLongFunctions: no function or method of a non-test file of the
// root module spans more than maxFuncLines lines. The walk covers every
// package of the module: every directory from the root down, except
// nested modules (a directory with its own go.mod), testdata and the
// directories the go command ignores (a name starting with . or _).
func TestNoLongFunctions(t *testing.T) {
	fset := token.NewFileSet()
	files := 0
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path == "." {
				return nil
			}
			name := d.Name()
			if name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			start := fset.Position(fn.Pos()).Line
			end := fset.Position(fn.End()).Line
			if n := end - start + 1; n > maxFuncLines {
				t.Errorf("%s: %s spans %d lines (at most %d): split it into named steps",
					filepath.ToSlash(path), funcName(fn), n, maxFuncLines)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files == 0 {
		t.Fatal("found no Go file to check: the walk must start at the module's root")
	}
}

// funcName is fn's name as a reader looks for it: Name for a function,
// Type.Name for a method.
func funcName(fn *ast.FuncDecl) string {
	if fn.Recv != nil && len(fn.Recv.List) > 0 {
		if id, ok := baseType(fn.Recv.List[0].Type).(*ast.Ident); ok {
			return id.Name + "." + fn.Name.Name
		}
	}
	return fn.Name.Name
}

// baseType is the type expression e without its pointer and its type
// arguments: the named type (an *ast.Ident or *ast.SelectorExpr), or e.
func baseType(e ast.Expr) ast.Expr {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		default:
			return e
		}
	}
}
