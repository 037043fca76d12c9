// Command crosscheck type-checks packages, their tests included, for
// other systems than the one it runs on, from source: what scripts/test.sh
// runs for darwin and windows. It asks go list (with GOOS set) which files
// build there and in which order, then type-checks every package of the
// graph with go/types (the dependencies whole, the standard library's
// declarations): what the compiler's front end would report (undefined
// names, wrong types, unused imports and variables), without compiling
// anything.
//
// Usage: crosscheck -os darwin,windows [-arch amd64] [packages]
//
// It exits 1, naming each error's file and line, when a package does not
// type-check for a system, 2 on a usage error or when go list fails.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"go/version"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
)

func main() {
	oses := flag.String("os", "darwin,windows", "the systems to type-check for, comma-separated")
	arch := flag.String("arch", "amd64", "the architecture")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: crosscheck [-os darwin,windows] [-arch amd64] [packages]")
		flag.PrintDefaults()
	}
	flag.Parse()
	patterns := flag.Args()
	if len(patterns) == 0 {
		patterns = []string{"."}
	}
	failed := false
	for _, goos := range strings.Split(*oses, ",") {
		n, errs, err := check(goos, *arch, patterns)
		if err != nil {
			fmt.Fprintf(os.Stderr, "crosscheck: GOOS=%s GOARCH=%s: %v\n", goos, *arch, err)
			os.Exit(2)
		}
		for _, e := range errs {
			fmt.Fprintf(os.Stderr, "GOOS=%s GOARCH=%s: %s\n", goos, *arch, e)
		}
		if len(errs) > 0 {
			failed = true
			continue
		}
		fmt.Printf("GOOS=%s GOARCH=%s: %d packages type-check (%s, their tests and what they import)\n", goos, *arch, n, strings.Join(patterns, " "))
	}
	if failed {
		os.Exit(1)
	}
}

// listed is what go list -json says of one package.
type listed struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	Imports    []string
	ImportMap  map[string]string
	Standard   bool
	Module     *struct{ GoVersion string }
	Error      *struct{ Err string }
}

// check type-checks patterns' packages and tests, and every package they
// import, for goos/goarch; it returns how many packages it checked (a
// package and its test variant count twice) and the errors found, each
// once (a package's test variant has its files too).
func check(goos, arch string, patterns []string) (int, []string, error) {
	pkgs, err := list(goos, arch, patterns)
	if err != nil {
		return 0, nil, err
	}
	sizes := types.SizesFor("gc", arch)
	if sizes == nil {
		return 0, nil, fmt.Errorf("no sizes for GOARCH=%s", arch)
	}
	goVersion := version.Lang(runtime.Version()) // the standard library's: go1.N ("" for a development toolchain: the latest)
	var (
		errs []string
		seen = map[string]bool{}
		done = map[string]*pkgResult{}
		fset = token.NewFileSet()
	)
	for _, p := range pkgs {
		done[p.ImportPath] = &pkgResult{ready: make(chan struct{})}
	}
	// Every package is checked in a goroutine of its own once the packages
	// it imports are (go list -deps lists them first), at most GOMAXPROCS at
	// a time.
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, p := range pkgs {
		r := done[p.ImportPath]
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(r.ready)
			for _, imp := range p.Imports {
				if d := done[p.resolve(imp)]; d != nil {
					<-d.ready
				}
			}
			if p.ImportPath == "unsafe" {
				r.pkg = types.Unsafe // the compiler's, not its file's declarations
				return
			}
			sem <- struct{}{}
			defer func() { <-sem }()
			var perrs []string
			r.pkg, perrs = checkOne(fset, p, done, sizes, goVersion)
			mu.Lock()
			for _, e := range perrs {
				if !seen[e] {
					seen[e] = true
					errs = append(errs, e)
				}
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	sort.Strings(errs)
	return len(pkgs), errs, nil
}

type pkgResult struct {
	ready chan struct{}
	pkg   *types.Package
}

// resolve is the package an import path in p's files names.
func (p *listed) resolve(path string) string {
	if m, ok := p.ImportMap[path]; ok {
		return m
	}
	return path
}

// checkOne parses and type-checks p against the packages done.
func checkOne(fset *token.FileSet, p *listed, done map[string]*pkgResult, sizes types.Sizes, goVersion string) (*types.Package, []string) {
	var errs []string
	if p.Error != nil {
		return nil, []string{fmt.Sprintf("%s: %s", p.ImportPath, p.Error.Err)}
	}
	var files []*ast.File
	for _, name := range p.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, []string{err.Error()}
		}
		files = append(files, f)
	}
	v := goVersion
	if p.Module != nil && p.Module.GoVersion != "" {
		v = "go" + p.Module.GoVersion
	}
	conf := types.Config{
		GoVersion: v,
		Sizes:     sizes,
		// The standard library of a released Go builds on every system
		// it supports: its declarations are checked (what the packages
		// above use), not its function bodies.
		IgnoreFuncBodies: p.Standard,
		Importer: importerFunc(func(path string) (*types.Package, error) {
			if path == "unsafe" {
				return types.Unsafe, nil
			}
			d := done[p.resolve(path)]
			if d == nil || d.pkg == nil {
				return nil, fmt.Errorf("%s: not type-checked", p.resolve(path))
			}
			return d.pkg, nil
		}),
		Error: func(err error) {
			if len(errs) < 20 {
				errs = append(errs, err.Error())
			}
		},
	}
	path := p.ImportPath
	if i := strings.Index(path, " ["); i >= 0 {
		path = path[:i] // a test variant: "p [p.test]"
	}
	pkg, _ := conf.Check(path, fset, files, nil)
	return pkg, errs
}

type importerFunc func(path string) (*types.Package, error)

func (f importerFunc) Import(path string) (*types.Package, error) { return f(path) }

// list runs go list -deps -test for goos/goarch and returns its packages
// in its order (every package after those it imports), without the
// generated test mains.
func list(goos, arch string, patterns []string) ([]*listed, error) {
	args := append([]string{"list", "-e", "-deps", "-test",
		"-json=ImportPath,Dir,GoFiles,Imports,ImportMap,Standard,Module,Error"}, patterns...)
	cmd := exec.Command("go", args...)
	cmd.Env = append(os.Environ(), "GOOS="+goos, "GOARCH="+arch, "CGO_ENABLED=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	var pkgs []*listed
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		p := new(listed)
		if err := dec.Decode(p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("reading go list's output: %v", err)
		}
		if strings.HasSuffix(p.ImportPath, ".test") {
			continue // the generated main of a test binary
		}
		pkgs = append(pkgs, p)
	}
	return pkgs, nil
}
