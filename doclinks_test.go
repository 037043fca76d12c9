package idem_test

import (
	"fmt"
	"go/ast"
	"go/doc/comment"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestDocLinksResolve: every doc link of every doc comment ([Name],
// [Name.Method], [pkg.Name], [pkg.Name.Method], [example.com/x/y.Name]; see
// https://go.dev/doc/comment#doclinks) in the non-test Go files of every
// module of the repository names something that exists. A link resolves in
// its own package, or in the package its qualifier names: an import of the
// package (by its name, as go doc resolves it), a package of the
// repository, or a package of the standard library; a package of another
// module (pgx, cobra, …) need only be imported. A link go doc cannot
// resolve is shown as plain text, so nothing but this test sees it break
// when a name is renamed or moved.
func TestDocLinksResolve(t *testing.T) {
	r := newLinkResolver(t)
	dirs := slices.Sorted(func(yield func(string) bool) {
		for dir := range r.dirs {
			if !yield(dir) {
				return
			}
		}
	})
	links := 0
	for _, dir := range dirs {
		pkg := r.pkg(r.dirs[dir])
		for _, f := range pkg.files {
			for _, cg := range docComments(f) {
				for _, l := range r.links(pkg, cg) {
					links++
					if msg := r.check(pkg, l); msg != "" {
						t.Errorf("%s: %s: %s", r.fset.Position(cg.Pos()), linkText(l), msg)
					}
				}
			}
		}
	}
	t.Logf("%d doc links in %d packages", links, len(dirs))
	if links < 100 {
		t.Errorf("found %d doc links in the repository; want at least 100 (is the walk broken?)", links)
	}
}

// linkResolver knows the packages of the repository (by import path) and
// parses, on demand, theirs and the standard library's declarations.
type linkResolver struct {
	t    *testing.T
	fset *token.FileSet
	// The repository's packages: each directory's import path, and
	// each import path's directory.
	dirs   map[string]string // dir -> import path
	paths  map[string]string // import path -> dir
	pkgs   map[string]*declPkg
	goroot string // the standard library's is goroot/src
}

// declPkg is one package as its files declare it, every file whatever its
// build constraints (the union of all systems).
type declPkg struct {
	path  string
	name  string
	files []*ast.File
	syms  map[string]bool // Name, and Type.Method / Type.Field
	// forward: Type -> types whose methods and fields Type also has (the
	// target of an alias, embedded types), as import path and name.
	forward map[string][][2]string
	imports map[string]string // package name -> import path, "" if ambiguous
}

func newLinkResolver(t *testing.T) *linkResolver {
	r := &linkResolver{t: t, fset: token.NewFileSet(), dirs: map[string]string{},
		paths: map[string]string{}, pkgs: map[string]*declPkg{}}
	mods := map[string]string{} // dir -> module path
	for _, dir := range modules(t) {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.SplitSeq(string(data), "\n") {
			if rest, ok := strings.CutPrefix(line, "module "); ok {
				mods[filepath.Clean(dir)] = strings.TrimSpace(rest)
			}
		}
		if mods[filepath.Clean(dir)] == "" {
			t.Fatalf("%s/go.mod: no module line", dir)
		}
	}
	err := filepath.WalkDir(".", func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if p != "." && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") || strings.HasPrefix(d.Name(), "_")) {
			return filepath.SkipDir
		}
		gofiles, _ := filepath.Glob(filepath.Join(p, "*.go"))
		if len(gofiles) == 0 {
			return nil
		}
		// The import path: the nearest module's path and the rest.
		for m := p; ; m = filepath.Dir(m) {
			if mod, ok := mods[m]; ok {
				rel, err := filepath.Rel(m, p)
				if err != nil {
					return err
				}
				ip := path.Join(mod, filepath.ToSlash(rel))
				r.dirs[p], r.paths[ip] = ip, p
				return nil
			}
			if m == "." {
				return fmt.Errorf("%s: in no module", p)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.dirs) < 20 {
		t.Fatalf("found %d package directories; want the repository's packages", len(r.dirs))
	}
	return r
}

// stdRoot is GOROOT, from the go command: a test binary built with
// -trimpath (scripts/test.sh builds so) knows no GOROOT of its own.
func (r *linkResolver) stdRoot() string {
	if r.goroot == "" {
		out, err := exec.Command("go", "env", "GOROOT").Output()
		if err != nil {
			r.t.Fatalf("go env GOROOT: %v", err)
		}
		r.goroot = strings.TrimSpace(string(out))
	}
	return r.goroot
}

// pkg returns the declarations of the package at import path ip, or nil
// if it is neither the repository's nor the standard library's.
func (r *linkResolver) pkg(ip string) *declPkg {
	if p, ok := r.pkgs[ip]; ok {
		return p
	}
	dir, ok := r.paths[ip]
	if !ok {
		dir = filepath.Join(r.stdRoot(), "src", filepath.FromSlash(ip))
		if strings.Contains(strings.Split(ip, "/")[0], ".") {
			dir = "" // another module's: not read
		}
	}
	var p *declPkg
	if dir != "" {
		p = r.parse(ip, dir)
	}
	r.pkgs[ip] = p
	return p
}

func (r *linkResolver) parse(ip, dir string) *declPkg {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	p := &declPkg{path: ip, syms: map[string]bool{}, forward: map[string][][2]string{}, imports: map[string]string{}}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") {
			continue
		}
		if strings.HasSuffix(name, "_test.go") {
			continue // go doc does not read them: a link cannot name their declarations
		}
		f, err := parser.ParseFile(r.fset, filepath.Join(dir, name), nil, parser.ParseComments)
		if err != nil {
			r.t.Fatal(err)
		}
		if p.name == "" {
			p.name = f.Name.Name
		}
		if f.Name.Name != p.name {
			// Another package's file (an ignored generator, say).
			continue
		}
		p.files = append(p.files, f)
		p.declare(f)
	}
	if p.name == "" {
		return nil
	}
	return p
}

// fileImports is the import path of each name f imports.
func fileImports(f *ast.File) map[string]string {
	m := map[string]string{}
	for _, s := range f.Imports {
		ip, _ := strconv.Unquote(s.Path.Value)
		name := path.Base(ip)
		if s.Name != nil {
			name = s.Name.Name
		} else if strings.HasPrefix(name, "v") && strings.Count(ip, "/") > 0 {
			// A major-version suffix: .../v2 is package of the element before.
			if _, err := strconv.Atoi(name[1:]); err == nil {
				name = path.Base(path.Dir(ip))
			}
		}
		if name == "_" || name == "." {
			continue
		}
		m[name] = ip
	}
	return m
}

// declare adds f's declarations to p.
func (p *declPkg) declare(f *ast.File) {
	imports := fileImports(f)
	for name, ip := range imports {
		if old, ok := p.imports[name]; ok && old != ip {
			p.imports[name] = ""
		} else {
			p.imports[name] = ip
		}
	}
	// typeRef names the type of expression e: its package and name.
	typeRef := func(e ast.Expr) (string, string, bool) {
		switch x := baseType(e).(type) {
		case *ast.Ident:
			return p.path, x.Name, true
		case *ast.SelectorExpr:
			if id, ok := x.X.(*ast.Ident); ok && imports[id.Name] != "" {
				return imports[id.Name], x.Sel.Name, true
			}
		}
		return "", "", false
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil || len(d.Recv.List) == 0 {
				p.syms[d.Name.Name] = true
			} else if _, recv, ok := typeRef(d.Recv.List[0].Type); ok {
				p.syms[recv+"."+d.Name.Name] = true
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.ValueSpec:
					for _, n := range s.Names {
						p.syms[n.Name] = true
					}
				case *ast.TypeSpec:
					tn := s.Name.Name
					p.syms[tn] = true
					var fields *ast.FieldList
					switch st := s.Type.(type) {
					case *ast.StructType:
						fields = st.Fields
					case *ast.InterfaceType:
						fields = st.Methods
					default:
						// An alias or a defined type: it has the
						// fields (and, if an alias, the methods) of
						// its target.
						if ip, name, ok := typeRef(st); ok {
							p.forward[tn] = append(p.forward[tn], [2]string{ip, name})
						}
					}
					if fields == nil {
						continue
					}
					for _, fl := range fields.List {
						for _, n := range fl.Names {
							p.syms[tn+"."+n.Name] = true
						}
						if len(fl.Names) == 0 { // embedded
							if ip, name, ok := typeRef(fl.Type); ok {
								p.syms[tn+"."+name] = true
								p.forward[tn] = append(p.forward[tn], [2]string{ip, name})
							}
						}
					}
				}
			}
		}
	}
}

// has reports whether package p declares recv.name (or name, if recv is
// ""), following aliases and embedded types.
func (r *linkResolver) has(p *declPkg, recv, name string, depth int) bool {
	if recv == "" {
		return p.syms[name]
	}
	if p.syms[recv+"."+name] {
		return true
	}
	if depth > 5 {
		return false
	}
	for _, fw := range p.forward[recv] {
		q := r.pkg(fw[0])
		if q == nil {
			return true // another module's type: not read
		}
		if r.has(q, fw[1], name, depth+1) {
			return true
		}
	}
	return false
}

// docComments is every doc comment of f: the package's, each
// declaration's, each spec's and each field's or interface method's.
func docComments(f *ast.File) []*ast.CommentGroup {
	var cgs []*ast.CommentGroup
	add := func(cg *ast.CommentGroup) {
		if cg != nil && !slices.Contains(cgs, cg) {
			cgs = append(cgs, cg)
		}
	}
	add(f.Doc)
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			add(d.Doc)
		case *ast.GenDecl:
			add(d.Doc)
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					add(s.Doc)
					ast.Inspect(s.Type, func(n ast.Node) bool {
						if fl, ok := n.(*ast.Field); ok {
							add(fl.Doc)
						}
						return true
					})
				case *ast.ValueSpec:
					add(s.Doc)
				}
			}
		}
	}
	return cgs
}

// unknownPkg marks a link's qualifier that names no package the comment's
// package imports: go doc shows such a link as plain text.
const unknownPkg = "?"

// links parses cg as go doc does, but resolving every qualifier and every
// symbol, and returns its doc links, to be checked.
func (r *linkResolver) links(p *declPkg, cg *ast.CommentGroup) []*comment.DocLink {
	parser := comment.Parser{
		LookupPackage: func(name string) (string, bool) {
			if ip, ok := p.imports[name]; ok && ip != "" {
				return ip, true
			}
			if name == p.name {
				return "", true
			}
			if ip, ok := comment.DefaultLookupPackage(name); ok {
				return ip, true
			}
			if token.IsIdentifier(name) {
				return unknownPkg + name, true
			}
			return "", false // not a link: [0, n), [::1]
		},
		LookupSym: func(recv, name string) bool { return true },
	}
	var links []*comment.DocLink
	var walk func(text []comment.Text)
	walk = func(text []comment.Text) {
		for _, t := range text {
			switch t := t.(type) {
			case *comment.DocLink:
				links = append(links, t)
			case *comment.Link:
				walk(t.Text)
			}
		}
	}
	var blocks func(bs []comment.Block)
	blocks = func(bs []comment.Block) {
		for _, b := range bs {
			switch b := b.(type) {
			case *comment.Paragraph:
				walk(b.Text)
			case *comment.Heading:
				walk(b.Text)
			case *comment.List:
				for _, it := range b.Items {
					blocks(it.Content)
				}
			}
		}
	}
	blocks(parser.Parse(cg.Text()).Content)
	return links
}

// check returns why l does not resolve in a comment of package p, or "".
func (r *linkResolver) check(p *declPkg, l *comment.DocLink) string {
	if name, ok := strings.CutPrefix(l.ImportPath, unknownPkg); ok {
		if l.Name == "" {
			// [word]: not a link to a package go doc knows, so not a
			// link at all (go doc shows it as it is).
			return ""
		}
		return fmt.Sprintf("package %s declares no %s and imports no package %s", p.name, name, name)
	}
	target := p
	if l.ImportPath != "" && l.ImportPath != p.path {
		target = r.pkg(l.ImportPath)
		if target == nil {
			if _, ok := r.paths[l.ImportPath]; ok || !strings.Contains(l.ImportPath, ".") {
				return fmt.Sprintf("no package %s", l.ImportPath)
			}
			// Another module's package: imported by name, or named in
			// full; its declarations are not read.
			return ""
		}
	}
	if !r.has(target, l.Recv, l.Name, 0) {
		sym := l.Name
		if l.Recv != "" {
			sym = l.Recv + "." + l.Name
		}
		return fmt.Sprintf("package %s (%s) declares no %s", target.name, target.path, sym)
	}
	return ""
}

// linkText is l as the comment writes it: [text].
func linkText(l *comment.DocLink) string {
	var b strings.Builder
	for _, t := range l.Text {
		switch t := t.(type) {
		case comment.Plain:
			b.WriteString(string(t))
		case comment.Italic:
			b.WriteString(string(t))
		}
	}
	return "[" + b.String() + "]"
}
