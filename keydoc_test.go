package idem_test

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestKeyDocShowsTheDeclaration: go doc idem.Key shows an alias, so its
// comment shows the fields and methods of idemstore.Key; they must be
// those of the declaration, every one, as declared.
func TestKeyDocShowsTheDeclaration(t *testing.T) {
	fset := token.NewFileSet()
	parse := func(path string) *ast.File {
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	print := func(n any) string {
		var b bytes.Buffer
		if err := (&printer.Config{Mode: printer.UseSpaces | printer.TabIndent, Tabwidth: 8}).Fprint(&b, fset, n); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}

	// The declaration: the struct, as gofmt prints it, and each exported
	// method's signature.
	var decl string
	var methods []string
	for _, d := range parse("idemstore/key.go").Decls {
		switch d := d.(type) {
		case *ast.GenDecl:
			for _, s := range d.Specs {
				if ts, ok := s.(*ast.TypeSpec); ok && ts.Name.Name == "Key" {
					decl = "type " + print(ts)
				}
			}
		case *ast.FuncDecl:
			if d.Recv != nil && d.Name.IsExported() && print(d.Recv.List[0].Type) == "Key" {
				d.Body, d.Doc = nil, nil
				methods = append(methods, print(d))
			}
		}
	}
	if decl == "" || len(methods) == 0 {
		t.Fatalf("idemstore/key.go: no type Key or no methods (%q, %q)", decl, methods)
	}

	// The comment of idem.Key: its code block.
	var doc string
	for _, d := range parse("key.go").Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.TYPE {
			for _, s := range g.Specs {
				if ts := s.(*ast.TypeSpec); ts.Name.Name == "Key" && g.Doc != nil {
					doc = g.Doc.Text()
				}
			}
		}
	}
	var code []string
	for line := range strings.SplitSeq(doc, "\n") {
		if strings.HasPrefix(line, "\t") {
			code = append(code, strings.TrimPrefix(line, "\t"))
		}
	}
	block := strings.Join(code, "\n")
	if !strings.Contains(block, decl) {
		t.Errorf("idem.Key's comment does not show the declaration\n%s\nit shows\n%s", decl, block)
	}
	var shown []string
	trailing := regexp.MustCompile(`\s*//.*$`)
	for _, line := range code {
		if strings.HasPrefix(line, "func ") {
			shown = append(shown, trailing.ReplaceAllString(line, ""))
		}
	}
	slices.Sort(shown)
	slices.Sort(methods)
	if !slices.Equal(shown, methods) {
		t.Errorf("idem.Key's comment shows the methods\n%s\nthe declaration has\n%s", strings.Join(shown, "\n"), strings.Join(methods, "\n"))
	}
}
