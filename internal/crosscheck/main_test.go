package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeModule writes a module of files (name → contents) in a new
// directory and makes it the current one.
func writeModule(t *testing.T, files map[string]string) {
	t.Helper()
	dir := t.TempDir()
	files["go.mod"] = "module example.com/m\n\ngo 1.26\n"
	for name, text := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(dir)
	t.Setenv("GOWORK", "off")
	t.Setenv("GOFLAGS", "-mod=mod")
}

// TestCheck: a package that type-checks on both systems passes on both;
// an error in a file that builds on one system alone (by its name or its
// build line, a test file too, in the package or beside it), or a use of
// what one system's standard library lacks, is reported for that system,
// naming the file and line, and not for the other. One module holds a
// package of each case (one check per system: the standard library's
// part is most of its cost).
func TestCheck(t *testing.T) {
	writeModule(t, map[string]string{
		"m.go":      "package m\n\nimport \"os\"\n\n// Open opens path.\nfunc Open(path string) (*os.File, error) { return os.Open(path) }\n",
		"m_test.go": "package m\n\nimport \"testing\"\n\nfunc TestOpen(t *testing.T) { _, _ = Open(t.TempDir()) }\n",
		"x_test.go": "package m_test\n\nimport (\n\t\"testing\"\n\n\t\"example.com/m\"\n)\n\nfunc TestX(t *testing.T) { _, _ = m.Open(\"\") }\n",
		// A file for darwin alone, by its name.
		"d/d.go":        "package d\n",
		"d/d_darwin.go": "package d\n\nvar d = undefinedName\n",
		// A test file for windows alone, in the package (its test variant).
		"u/u_windows_test.go": "package u\n\nvar w int = \"text\"\n",
		// A test file for windows alone, in an external test package.
		"w/w.go":              "package w\n",
		"w/w_windows_test.go": "package w_test\n\nimport \"testing\"\n\nfunc TestW(t *testing.T) { x := 1 }\n",
		// A file for all but windows, by its build line.
		"u/u.go": "//go:build !windows\n\npackage u\n\nvar u int = \"text\"\n",
		"u/v.go": "package u\n",
		// What windows' syscall lacks, in a file for every system.
		"f/f.go": "package f\n\nimport \"syscall\"\n\nvar _ = syscall.Flock\n",
	})
	for _, sys := range []struct {
		goos string
		want []string // in the order check sorts them
	}{
		{"darwin", []string{"d/d_darwin.go:3:9: undefined: undefinedName", "u/u.go:5:13: cannot use \"text\""}},
		{"windows", []string{"f/f.go:5:17: undefined: syscall.Flock", "u/u_windows_test.go:3:13: cannot use \"text\"",
			"w/w_windows_test.go:5:28: declared and not used: x"}},
	} {
		n, errs, err := check(sys.goos, "amd64", []string{"./..."})
		if err != nil {
			t.Fatalf("%s: %v", sys.goos, err)
		}
		if n < 20 { // the module's packages and tests, and the standard library's they import
			t.Errorf("%s: %d packages checked; want the module's and what they import", sys.goos, n)
		}
		if len(errs) != len(sys.want) {
			t.Errorf("%s: errors %q; want %d, with %q", sys.goos, errs, len(sys.want), sys.want)
			continue
		}
		for i, w := range sys.want {
			if !strings.Contains(errs[i], w) {
				t.Errorf("%s: error %q; want one with %q", sys.goos, errs[i], w)
			}
		}
	}
}

// TestCheckListFails: a package that imports one that does not exist is
// reported (go list's error), not passed as checked.
func TestCheckListFails(t *testing.T) {
	writeModule(t, map[string]string{"m.go": "package m\n\nimport _ \"example.com/m/missing\"\n"})
	_, errs, err := check("darwin", "amd64", []string{"./..."})
	if err == nil && len(errs) == 0 {
		t.Fatal("an import of a missing package: no error")
	}
	if all := fmt.Sprint(err, errs); !strings.Contains(all, "missing") {
		t.Errorf("the error does not name the missing package: %v %q", err, errs)
	}
}
