//go:build unix

// The CLI's end-to-end tests run commands through sh, and kill process
// groups: they need a Unix system.

package main

import (
	"debug/elf"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
)

// readmeBuild reads the install command of the page at path, docs/operators.md
// ("cd cmd/idem && CGO_ENABLED=0 go build -o /usr/local/bin/idem .", the
// first `go build` line of the "### 1. Install" section) and returns its
// environment variables and the arguments of `go`, with the binary written
// to out.
func readmeBuild(path, out string) (env, args []string, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	_, section, ok := strings.Cut(string(b), "### 1. Install")
	if !ok {
		return nil, nil, fmt.Errorf("%s: no \"### 1. Install\" section", path)
	}
	fenced := false // in a code block, where "#" starts a shell comment
	for _, line := range strings.Split(section, "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
		}
		if strings.HasPrefix(line, "#") && !fenced {
			break // the next section
		}
		for _, cmd := range strings.Split(line, "&&") {
			fields := strings.Fields(cmd)
			i := 0
			for i < len(fields) && strings.Contains(fields[i], "=") {
				i++
			}
			if len(fields) < i+2 || fields[i] != "go" || fields[i+1] != "build" {
				continue
			}
			env, args = fields[:i], fields[i+1:]
			for j := range args {
				if args[j] == "-o" && j+1 < len(args) {
					args[j+1] = out
					return env, args, nil
				}
			}
			return nil, nil, fmt.Errorf("%s: the install command %q has no -o", path, strings.TrimSpace(cmd))
		}
	}
	return nil, nil, fmt.Errorf("%s: no go build command in the install section", path)
}

// TestInstalledBinaryIsStatic: the binary that the install command of
// docs/operators.md builds (TestMain builds the tests' binary with it) is
// static, as the page says: no dynamic loader, no shared libraries.
func TestInstalledBinaryIsStatic(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skipf("checks an ELF binary; this is %s", runtime.GOOS)
	}
	f, err := elf.Open(idemBin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("the binary built by the install command of docs/operators.md asks for a dynamic loader (PT_INTERP)")
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		t.Fatal(err)
	}
	if len(libs) > 0 {
		t.Errorf("the binary built by the install command of docs/operators.md needs shared libraries: %v", libs)
	}
}
