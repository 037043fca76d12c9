package idem_test

import (
	"errors"
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestArchitectureNamesEveryPackage: ARCHITECTURE.md's "Packages" section
// names every package of every module of the repository, and no other, as
// `go list ./...` of each module (a go.mod below the root) lists them.
func TestArchitectureNamesEveryPackage(t *testing.T) {
	doc, err := os.ReadFile("ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	named := architecturePackages(t, string(doc))
	var listed []string
	for _, mod := range modules(t) {
		cmd := exec.Command("go", "list", "-e", "-f", "{{.Dir}}", "./...")
		cmd.Dir = mod
		// Listing needs no dependency downloaded: with no proxy, a missing
		// module is an error of its importer (-e), never a download. The
		// modules are the workspace's (go.work).
		cmd.Env = append(os.Environ(), "GOPROXY=off")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list ./... in %s: %v\n%s", mod, err, stderrOf(err))
		}
		root, err := filepath.Abs(".")
		if err != nil {
			t.Fatal(err)
		}
		for dir := range strings.FieldsSeq(string(out)) {
			rel, err := filepath.Rel(root, dir)
			if err != nil {
				t.Fatal(err)
			}
			listed = append(listed, filepath.ToSlash(rel))
		}
	}
	slices.Sort(listed)
	listed = slices.Compact(listed)
	for _, p := range listed {
		if !slices.Contains(named, p) {
			t.Errorf("ARCHITECTURE.md does not name package %s: add a line for it under \"## Packages\"", p)
		}
	}
	for _, p := range named {
		if !slices.Contains(listed, p) {
			t.Errorf("ARCHITECTURE.md names %s, which no module's go list ./... lists: remove it", p)
		}
	}
}

// architecturePackages is every package path that the "## Packages"
// section of doc names: each backquoted path (lower-case, no spaces).
func architecturePackages(t *testing.T, doc string) []string {
	t.Helper()
	_, rest, ok := strings.Cut(doc, "\n## Packages\n")
	if !ok {
		t.Fatal(`ARCHITECTURE.md has no "## Packages" section`)
	}
	section, _, _ := strings.Cut(rest, "\n## ")
	var out []string
	for _, m := range regexp.MustCompile("`([a-z0-9_./]+)`").FindAllStringSubmatch(section, -1) {
		out = append(out, m[1])
	}
	if len(out) == 0 {
		t.Fatal(`ARCHITECTURE.md's "## Packages" section names no package`)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// modules is the directory of every module of the repository: the root
// and each directory below it with a go.mod (testdata aside).
func modules(t *testing.T) []string {
	t.Helper()
	var mods []string
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		if !d.IsDir() && d.Name() == "go.mod" {
			mods = append(mods, filepath.Dir(path))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return mods
}

// TestRootAPISmall: `go doc -short .` of the root package, one line per
// exported name, stays at most 180 lines (ARCHITECTURE.md: the root holds
// the engine and what must share its state; the rest is built above it).
func TestRootAPISmall(t *testing.T) {
	cmd := exec.Command("go", "doc", "-short", ".")
	cmd.Env = append(os.Environ(), "GOPROXY=off")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go doc -short .: %v\n%s", err, stderrOf(err))
	}
	if n := strings.Count(string(out), "\n"); n > 180 {
		t.Errorf("go doc -short . prints %d lines, more than 180: is everything new in the root sharing the engine's state?", n)
	}
}

// TestEveryModuleLicensed: every module's directory has the root's
// LICENSE, so that each module's zip (what go get fetches) carries it.
func TestEveryModuleLicensed(t *testing.T) {
	want, err := os.ReadFile("LICENSE")
	if err != nil {
		t.Fatalf("the repository has no LICENSE: %v", err)
	}
	for _, mod := range modules(t) {
		got, err := os.ReadFile(filepath.Join(mod, "LICENSE"))
		if err != nil || string(got) != string(want) {
			t.Errorf("module %s: its LICENSE is missing or differs from the root's (%v)", mod, err)
		}
	}
}

// stderrOf returns what a command that failed wrote to its standard error.
func stderrOf(err error) []byte {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.Stderr
	}
	return nil
}

// TestModulesInstallable: no module's go.mod has a replace directive (a
// dependency's replace is ignored, and `go install pkg@version` refuses a
// module with one); every module requires its siblings at one version (the
// modules are released together: scripts/release.sh); and go.work uses every
// module and maps that version of each sibling to its directory, so the
// workspace builds without a proxy that has it. The release tool's own
// check (internal/release, which scripts/release.sh runs before it
// prepares a release) says so.
func TestModulesInstallable(t *testing.T) {
	cmd := exec.Command("go", "run", "./internal/release", "check")
	cmd.Env = append(os.Environ(), "GOPROXY=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("go run ./internal/release check: %v\n%s", err, out)
	}
}

// TestCrossTargetsCoverSystemFiles: every file that builds on some of
// linux, darwin and windows and not on the others is type-checked on each
// of them: on linux by its module's tests, on darwin and windows by the
// targets of scripts/test.sh's cross_targets (DIR:OS,OS...). Such a file
// lies under a target of its own module (the module's directory, or a
// package of it); and a target that leaves out darwin (or windows) holds
// no file outside its tests that builds differently on darwin and on
// windows, so that the system it checks stands for the other. Tests are
// what users do not build: a module's tests may be for linux alone where
// no target covers them (they run on linux only), and a unix test under a
// target for windows alone is type-checked on linux only (NOT on darwin).
func TestCrossTargetsCoverSystemFiles(t *testing.T) {
	script, err := os.ReadFile("scripts/test.sh")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^cross_targets=\(([^)]*)\)`).FindSubmatch(script)
	if m == nil {
		t.Fatal("scripts/test.sh sets no cross_targets=(...)")
	}
	mods := modules(t)
	moduleOf := func(dir string) string { // the module dir is in
		best := ""
		for _, mod := range mods {
			if (mod == "." || dir == mod || strings.HasPrefix(dir, mod+"/")) && len(mod) >= len(best) {
				best = mod
			}
		}
		return best
	}
	type target struct {
		dir  string
		oses []string
	}
	var targets []target
	for _, f := range strings.Fields(string(m[1])) {
		dir, oses, ok := strings.Cut(f, ":")
		tg := target{dir: filepath.ToSlash(filepath.Clean(dir)), oses: strings.Split(oses, ",")}
		if !ok || !fileExists(tg.dir) {
			t.Errorf("cross_targets entry %q: want DIR:OS,OS... with DIR a directory of the repository", f)
			continue
		}
		targets = append(targets, tg)
	}
	systems := []string{"linux", "darwin", "windows"}
	contexts := map[string]*build.Context{}
	for _, goos := range systems {
		c := build.Default
		c.GOOS, c.GOARCH, c.CgoEnabled, c.BuildTags = goos, "amd64", false, nil
		contexts[goos] = &c
	}
	for _, mod := range mods {
		err := filepath.WalkDir(mod, func(path string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if path != mod && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") || fileExists(filepath.Join(path, "go.mod"))) {
					return filepath.SkipDir // another module's, or not Go code of this one
				}
				return nil
			}
			if !strings.HasSuffix(path, ".go") {
				return nil
			}
			builds := map[string]bool{}
			for _, goos := range systems {
				ok, err := contexts[goos].MatchFile(filepath.Dir(path), d.Name())
				if err != nil {
					return err
				}
				builds[goos] = ok
			}
			if builds["linux"] == builds["darwin"] && builds["darwin"] == builds["windows"] {
				return nil
			}
			dir := filepath.ToSlash(filepath.Dir(path))
			var under *target
			for i, tg := range targets {
				if (tg.dir == "." || dir == tg.dir || strings.HasPrefix(dir, tg.dir+"/")) && moduleOf(tg.dir) == mod &&
					(under == nil || len(tg.dir) > len(under.dir)) {
					under = &targets[i]
				}
			}
			test := strings.HasSuffix(path, "_test.go")
			if under == nil {
				if !test {
					t.Errorf("%s builds on some systems only (linux %v, darwin %v, windows %v), and no target of scripts/test.sh's cross_targets in module %s covers it: move it under one, or add one", path, builds["linux"], builds["darwin"], builds["windows"], mod)
				}
				return nil
			}
			for _, pair := range [][2]string{{"darwin", "windows"}, {"windows", "darwin"}} {
				left, checked := pair[0], pair[1]
				if !test && !slices.Contains(under.oses, left) && builds[left] != builds[checked] {
					t.Errorf("%s builds on %s %v and on %s %v, and its cross_targets entry %s checks %s alone: add %s to it", path, left, builds[left], checked, builds[checked], under.dir, strings.Join(under.oses, ","), left)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// TestRaceSkippedTestsRunWithoutRace: every test of this package that
// the race detector leaves out (a file built with !race, or a test that
// skips when raceEnabled) is named by the -run pattern of scripts/test.sh's
// pass without the race detector; otherwise the test command never runs it.
func TestRaceSkippedTestsRunWithoutRace(t *testing.T) {
	script, err := os.ReadFile("scripts/test.sh")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^queue "[^"\n]*without -race\)" (?:env "\$nonrace_env" )?go test [^\n]*-run '([^']+)' \.$`).FindSubmatch(script)
	if m == nil {
		t.Fatal("scripts/test.sh has no step `queue \"… without -race)\" [env \"$nonrace_env\"] go test … -run '…' .`")
	}
	run, err := regexp.Compile(string(m[1]))
	if err != nil {
		t.Fatalf("scripts/test.sh's -run pattern: %v", err)
	}
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	fset := token.NewFileSet()
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		noRace := false // built without the race detector only
		for _, cg := range f.Comments {
			for _, c := range cg.List {
				if c.Pos() < f.Package && strings.HasPrefix(c.Text, "//go:build") && strings.Contains(c.Text, "!race") {
					noRace = true
				}
			}
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Test") || fn.Body == nil {
				continue
			}
			if (noRace || skipsUnderRace(fn.Body)) && !run.MatchString(fn.Name.Name) {
				left = append(left, name+": "+fn.Name.Name)
			}
		}
	}
	if len(left) > 0 {
		t.Errorf("tests the race detector leaves out, which scripts/test.sh's pass without it does not run (add them to its -run pattern %q):\n%s", m[1], strings.Join(left, "\n"))
	}
}

// skipsUnderRace reports whether body has an `if raceEnabled { … t.Skip… }`.
func skipsUnderRace(body *ast.BlockStmt) bool {
	found := false
	ast.Inspect(body, func(n ast.Node) bool {
		is, ok := n.(*ast.IfStmt)
		if !ok {
			return !found
		}
		if id, ok := is.Cond.(*ast.Ident); !ok || id.Name != "raceEnabled" {
			return true
		}
		ast.Inspect(is.Body, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok && strings.HasPrefix(sel.Sel.Name, "Skip") {
				found = true
			}
			return !found
		})
		return !found
	})
	return found
}
